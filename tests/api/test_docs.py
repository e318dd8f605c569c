"""The README's "HTTP API" section runs as written: every ``sh`` block (curl) against a live server beside a daemon on
real Kafka and Redis, each answer compared with the block shown after it (``json exact``: byte for byte; ``json``:
every key shown has the value shown; ``text``: the output). The gate's "Try it" blocks run as a user runs them:
after ``gatekeeper demo`` (what ``make run`` runs) on the test's services, one shell, the sample configuration."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.api.test_gate import TOKENS, gate_server, gate_settings
from tests.integration._pipeline import Pipeline, TopicFactory
from tests.policy.world import RECORD

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BLOCK = re.compile(r"```([a-z]+(?: exact)?)\n(.*?)```", re.S)
TRY_IT = "\n#### Try it\n"
END_OF_BLOCK = "@@ end of a README block @@"


def section() -> str:
    """The README's "## HTTP API" section, up to the next section."""
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## HTTP API\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _split_try_it() -> tuple[str, str]:
    """(the section without the gate's "Try it" subsection, that subsection)."""
    text = section()
    start = text.index(TRY_IT)
    end = min(i for i in (text.find("\n### ", start + 1), text.find("\n#### ", start + 1), len(text)) if i != -1)
    return text[:start] + text[end:], text[start:end]


def _examples(text: str) -> list[tuple[str, str | None, str]]:
    """(command, output kind, expected output) for each sh block that calls the server."""
    blocks = BLOCK.findall(text)
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


def examples() -> list[tuple[str, str | None, str]]:
    """The examples run against the test's own server (all but "Try it")."""
    return _examples(_split_try_it()[0])


def try_it() -> list[tuple[str, str | None, str]]:
    """The gate's "Try it" examples, in order: one shell runs them all."""
    return _examples(_split_try_it()[1])


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
    assert len(found) >= 7
    assert sum(1 for _, kind, _ in found if kind == "json exact") == 1
    tried = try_it()
    assert [kind for _, kind, _ in tried] == ["json", "text"]
    assert all("/v1/gate" in cmd for cmd, _, _ in tried)
    assert "gatekeeper run -c config/samples/gatekeeper.yaml" in tried[0][0]


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


def _in_own_group(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``bash -c script`` in a process group of its own, which is killed afterwards whatever happened: a gatekeeper
    the script started in the background never outlives a failed run (and keeps port 9108 taken)."""
    proc = subprocess.Popen(
        ["bash", "-c", script],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: TIME_WAIT is no owner
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.mark.integration
async def test_the_gate_can_be_tried_as_the_readme_says(kafka_bootstrap: str, redis_url: str) -> None:
    """``make run``'s demo on the test's services, then the "Try it" blocks as they are written, in one shell from
    the repository with the stack's environment: the demo's gatekeeper started again on the sample configuration's
    port, its sample token, the approval the demo leaves unused; the gate forwards the handoff, refuses its copy in
    another conversation, and ``kill %1`` stops the gatekeeper. This is ``make run``'s world (topics ``demo.pay*``,
    Redis prefix ``demo``), which a user's next ``make run`` clears as it always does."""
    assert _port_is_free(9108), "port 9108 is taken: the README's example serves there; stop what listens on it"
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "GK_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "GK_REDIS_URL": redis_url,
        "GK_KAFKA__BOOTSTRAP_SERVERS": kafka_bootstrap,
        "GK_REDIS__URL": redis_url,
    }
    for var in ("GK_CONFIG", "GK", "TOKEN", "ROUTE"):
        env.pop(var, None)
    demo = await asyncio.to_thread(
        subprocess.run, ["gatekeeper", "demo"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    (ROOT / ".local").mkdir(exist_ok=True)
    steps = try_it()
    script = "set -e\n" + "".join(f"{cmd}\necho '{END_OF_BLOCK}'\n" for cmd, _, _ in steps)
    proc = await asyncio.to_thread(_in_own_group, script, env)
    log = ROOT / ".local" / "gatekeeper.log"
    assert proc.returncode == 0, f"{proc.stderr}\n{log.read_text() if log.exists() else ''}"
    outputs = proc.stdout.split(END_OF_BLOCK + "\n")
    assert len(outputs) == len(steps) + 1 and outputs[-1] == ""
    for (command, kind, expected), got in zip(steps, outputs, strict=False):
        try:
            _compare(kind, expected, got)
        except AssertionError as exc:
            raise AssertionError(f"{command}\nanswered\n{got}\nnot\n{expected}") from exc
    for _ in range(100):  # kill %1 stopped it: the port is free again
        if _port_is_free(9108):
            break
        await asyncio.sleep(0.1)
    assert _port_is_free(9108), "the gatekeeper the README started did not stop"
