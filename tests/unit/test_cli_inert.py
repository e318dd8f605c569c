"""What an agent or a record wrote is printed escaped by the operator's commands: no ESC, OSC, newline or bidi
control reaches the terminal."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

from typer.testing import CliRunner

from gatekeeper.cli import app
from gatekeeper.inert import ESCAPED_CATEGORIES

KEY = "c-1\x1b]0;owned\x07\x1b[2J\n\u202eevil"
LINE = "HO id=1 from=payer to=sched item=inv:1 ask=PAY p=pay // hi\u202e\x1b[31m"


def _inert(text: str) -> bool:
    return not any(unicodedata.category(ch) in ESCAPED_CATEGORIES and ch != "\n" for ch in text)


def test_check_prints_a_key_and_a_line_escaped(tmp_path: Path) -> None:
    file = tmp_path / "lines.jsonl"
    rows = [{"key": KEY, "line": LINE}, {"key": "c-2", "line": LINE.replace("\u202e\x1b[31m", "")}]
    file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for fmt in ("table", "jsonl"):
        r = CliRunner().invoke(app, ["check", str(file), "--format", fmt])
        assert _inert(r.stdout), r.stdout
        assert "\x1b" not in r.stdout and "\u202e" not in r.stdout
    table = CliRunner().invoke(app, ["check", str(file), "--format", "table"]).stdout
    assert "c-1\\x1b]0;owned\\x07\\x1b[2J\\x0a\\u202eevil" in table


def test_records_get_prints_a_record_s_text_inert() -> None:
    from gatekeeper.cli.records import _describe
    from gatekeeper.policy import Record

    rec = Record("inv:1\x1b[2J", "PAY", {"to": "payer", "ref": "A\u202eB", "note": "x\ny"}, {"acct": "\x07"})
    shown = _describe(rec, "agents.pay/c\x1b]0;t\x07/scheduler-1#0123456789abcdef@1", colour=False)
    assert "\x1b" not in shown and "\u202e" not in shown and "\x07" not in shown
    assert "\\x1b[2J" in shown and "\\u202e" in shown and "x\\x0ay" in shown
    assert shown.count("\n") == 3  # its own four lines, no line a record added
