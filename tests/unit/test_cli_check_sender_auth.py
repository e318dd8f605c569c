"""``gatekeeper check`` on a route with sender_auth: each line's signature is verified, never assumed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner, Result

from gatekeeper.auth import generate, public_key_text, sign
from gatekeeper.cli import app
from tests.seed import AN, HO, RB

ROOT = Path(__file__).resolve().parents[2]
RECORDS = str(ROOT / "config" / "records.example.json")
NOW = "20261001T0900Z"
SCHEDULER, PAYER = generate(), generate()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("GK_"):
            monkeypatch.delenv(name)


def _config(tmp_path: Path) -> str:
    path = tmp_path / "gk.yaml"
    route = {"input": "agents.pay", "output": "o", "dead_letter": "d", "alerts": "a", "profile": "pay"}
    path.write_text(
        yaml.safe_dump(
            {
                "routes": [{**route, "sender_auth": True}],
                "sender_auth": {
                    "keys": [
                        {"id": "s-1", "agent": "scheduler", "public_key": public_key_text(SCHEDULER.public_key())},
                        {"id": "p-1", "agent": "payer", "public_key": public_key_text(PAYER.public_key())},
                    ]
                },
            }
        )
    )
    return str(path)


def _check(tmp_path: Path, text: str, name: str) -> Result:
    path = tmp_path / name
    path.write_text(text)
    args = ["check", str(path), "--records", RECORDS, "--now", NOW, "-f", "jsonl"]
    return CliRunner().invoke(app, [*args, "--config", _config(tmp_path), "--route", "agents.pay"])


def _jl(conversation: str, line: str, key: object = None, key_id: str = "") -> str:
    obj: dict[str, object] = {"key": conversation, "line": line}
    if key is not None:
        obj["headers"] = {"rw-sig": sign(key, key_id, conversation, line, route="agents.pay")}  # type: ignore[arg-type]
    return json.dumps(obj)


def test_signed_json_lines_are_verified(tmp_path: Path) -> None:
    text = "\n".join(
        [
            _jl("c1", HO, SCHEDULER, "s-1"),
            _jl("c1", RB, PAYER, "p-1"),
            _jl("c1", AN, PAYER, "p-1"),  # the payer clearing its own payment as the scheduler
            _jl("c1", AN, SCHEDULER, "s-1"),
        ]
    )
    result = _check(tmp_path, text + "\n", "lines.jsonl")
    rows = [json.loads(x) for x in result.stdout.splitlines()]
    assert [(r["verdict"], r["reason"]) for r in rows] == [
        ("forward", None),
        ("forward", None),
        ("dead-letter", "sender-auth"),
        ("forward", None),
    ]
    assert rows[2]["problems"][0]["code"] == "sender-auth-wrong-agent"
    assert result.exit_code == 1


def test_plain_lines_have_no_signature_and_are_refused_with_a_note(tmp_path: Path) -> None:
    result = _check(tmp_path, HO + "\n", "flow.rw1")
    (row,) = [json.loads(x) for x in result.stdout.splitlines()]
    assert row["reason"] == "sender-auth" and row["problems"][0]["code"] == "sender-auth-missing"
    assert "takes signed lines only" in result.stderr


def test_headers_must_be_strings(tmp_path: Path) -> None:
    result = _check(tmp_path, json.dumps({"key": "c", "line": HO, "headers": {"rw-sig": 1}}) + "\n", "x.jsonl")
    assert result.exit_code == 2 and "headers" in result.stderr


@pytest.mark.parametrize(
    ("at", "verdict"), [("20261001T0959Z", ("forward", None)), ("20261001T1000Z", ("dead-letter", "expired"))]
)
def test_a_signed_line_replays_with_its_time(tmp_path: Path, at: str, verdict: tuple[str, str | None]) -> None:
    """``at`` is the replay's clock, not part of the record: the signature over the route, conversation and line
    still verifies, and the line is decided at its time (past its exp=: expired, not sender-auth)."""
    line = HO + " exp=20261001T1000Z"
    obj = json.loads(_jl("c1", line, SCHEDULER, "s-1"))
    result = _check(tmp_path, json.dumps({**obj, "at": at}) + "\n", "lines.jsonl")
    (row,) = [json.loads(x) for x in result.stdout.splitlines()]
    assert (row["verdict"], row["reason"]) == verdict
    assert row["decided_at"] == f"2026-10-01T{at[9:11]}:{at[11:13]}:00.000Z"
