"""The README's "HTTP API" section runs as written: every ``sh`` block (curl) against a live server beside a daemon on
real Kafka and Redis, each answer compared with the block shown after it (``json exact``: byte for byte; ``json``:
every key shown has the value shown; ``text``: the output)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from tests.api.test_gate import TOKENS, gate_server, gate_settings
from tests.integration._pipeline import Pipeline, TopicFactory
from tests.policy.world import RECORD

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCK = re.compile(r"```([a-z]+(?: exact)?)\n(.*?)```", re.S)


def section() -> str:
    """The README's "## HTTP API" section, up to the next section."""
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## HTTP API\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def examples() -> list[tuple[str, str | None, str]]:
    """(command, output kind, expected output) for each sh block that calls the server."""
    blocks = BLOCK.findall(section())
    out = []
    for i, (kind, body) in enumerate(blocks):
        if kind != "sh" or "$GK" not in body:
            continue
        nxt = blocks[i + 1] if i + 1 < len(blocks) else None
        if nxt is not None and nxt[0] in ("json", "json exact", "text"):
            out.append((body, nxt[0], nxt[1]))
        else:
            out.append((body, None, ""))
    return out


def _run(command: str, env: dict[str, str]) -> str:
    proc = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _compare(kind: str | None, expected: str, got: str) -> None:
    if kind == "json exact" or kind == "text":
        assert got.strip() == expected.strip()
    elif kind == "json":
        want: dict[str, Any] = json.loads(expected)
        doc = json.loads(got)
        assert {k: doc.get(k) for k in want} == want


def test_the_examples_are_found() -> None:
    found = examples()
    assert len(found) >= 8
    assert sum(1 for _, kind, _ in found if kind == "json exact") == 1
    assert any("/v1/gate" in cmd for cmd, _, _ in found)


async def test_every_example_answers_as_shown(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str
) -> None:
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        await p.store.put_record(RECORD)
        async with gate_server(gate_settings(p.settings)) as (server, _client):
            env = {**os.environ, "GK": server.url, "TOKEN": TOKENS["scheduler"], "ROUTE": p.route().input}
            for command, kind, expected in examples():
                got = await asyncio.to_thread(_run, command, env)
                try:
                    _compare(kind, expected, got)
                except AssertionError as exc:
                    raise AssertionError(f"{command}\nanswered\n{got}\nnot\n{expected}") from exc
