"""``gatekeeper check``: the daemon's decision offline, through the command line (typer's CliRunner)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from gatekeeper.cli import app
from gatekeeper.cli.check import parse_now
from tests.seed import AN, DN, HO, RB

ROOT = Path(__file__).resolve().parents[2]
RECORDS = str(ROOT / "config" / "records.example.json")
CONFIG = str(ROOT / "config" / "gatekeeper.example.yaml")
NOW = "20261001T0900Z"

SWAPPED = HO.replace("acct=40-12-88/61102938", "acct=40-12-88/61102983")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("GK_"):
            monkeypatch.delenv(name)


def _check(tmp_path: Path, text: str, *args: str, name: str = "flow.rw1") -> Result:
    path = tmp_path / name
    path.write_text(text)
    return CliRunner().invoke(app, ["check", str(path), *args])


def _rows(result: Result) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_the_seed_payment_flow_is_forwarded(tmp_path: Path) -> None:
    text = "# the seed's payment\n" + "\n".join([HO, RB, "", AN, DN]) + "\n"
    result = _check(tmp_path, text, "--records", RECORDS, "--now", NOW, "--format", "jsonl")
    assert result.exit_code == 0, result.output
    rows = _rows(result)
    assert [(r["id"], r["type"], r["verdict"], r["reason"]) for r in rows] == [
        ("scheduler-1", "HO", "forward", None),
        ("payer-1", "RB", "forward", None),
        ("scheduler-2", "AN", "forward", None),
        ("payer-2", "DN", "forward", None),
    ]
    assert [r["lineno"] for r in rows] == [2, 3, 5, 6]  # comments and blank lines skipped, positions kept
    assert {r["conversation"] for r in rows} == {"check"}
    assert rows[0]["line"] == HO.replace("acct=40-12-88/61102938", "acct=****2938")  # masked, as in the headers
    assert all(r["problems"] == [] and isinstance(r["notes"], list) for r in rows)
    unmasked = _check(tmp_path, text, "--records", RECORDS, "--now", NOW, "--format", "jsonl", "--unmasked")
    assert unmasked.exit_code == 0 and _rows(unmasked)[0]["line"] == HO


def test_jsonl_is_the_default_when_stdout_is_not_a_terminal(tmp_path: Path) -> None:
    result = _check(tmp_path, HO + "\n", "--records", RECORDS, "--now", NOW)
    assert result.exit_code == 0
    assert _rows(result)[0]["verdict"] == "forward"


def test_a_swapped_digit_in_the_account_is_dead_lettered(tmp_path: Path) -> None:
    result = _check(tmp_path, SWAPPED + "\n", "--records", RECORDS, "--now", NOW, "--format", "jsonl")
    assert result.exit_code == 1
    [row] = _rows(result)
    assert (row["verdict"], row["reason"], row["check"]) == ("dead-letter", "check-ho", "check_ho")
    [problem] = row["problems"]
    assert problem["slot"] == "acct"
    assert problem["expected"] == "****2938" and problem["got"] == "****2983"
    assert problem["message"] == "record: acct mismatch: record ****2938 vs HO ****2983"
    assert "61102938" not in result.stdout and "61102983" not in result.stdout


def test_unmasked_prints_the_values_in_full(tmp_path: Path) -> None:
    result = _check(tmp_path, SWAPPED + "\n", "--records", RECORDS, "--now", NOW, "--unmasked", "-f", "jsonl")
    assert result.exit_code == 1  # the same verdict: the check always sees the whole values
    [row] = _rows(result)
    [problem] = row["problems"]
    assert row["line"] == SWAPPED
    assert problem["expected"] == "40-12-88/61102938" and problem["got"] == "40-12-88/61102983"
    assert problem["message"] == "record: acct mismatch: record 40-12-88/61102938 vs HO 40-12-88/61102983"


def test_replies_to_a_refused_handoff_are_refused_too(tmp_path: Path) -> None:
    result = _check(tmp_path, f"{SWAPPED}\n{RB}\n", "--records", RECORDS, "--now", NOW, "--format", "jsonl")
    assert result.exit_code == 1
    assert [(r["verdict"], r["reason"]) for r in _rows(result)] == [
        ("dead-letter", "check-ho"),
        ("dead-letter", "refused-handoff"),
    ]


def test_the_table_format(tmp_path: Path) -> None:
    result = _check(tmp_path, f"{SWAPPED}\n", "--records", RECORDS, "--now", NOW, "--format", "table")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["LINE", "ID", "TYPE", "VERDICT", "REASON"]
    assert lines[1].split() == ["1", "scheduler-1", "HO", "dead-letter", "check-ho"]
    assert lines[2].strip() == "! record-mismatch: record: acct mismatch: record ****2938 vs HO ****2983"
    assert lines[-1] == "1 line: 0 forwarded, 1 dead-lettered, 0 alerted"
    assert "\x1b[" not in result.stdout  # no colour when not on a terminal


def test_json_lines_with_two_conversations_share_records_and_bindings(tmp_path: Path) -> None:
    lines = [
        {"key": "conv-a", "line": HO},
        {"key": "conv-a", "line": RB},
        {"key": "conv-b", "line": HO},  # the same approved payment handed off again in another conversation
        {"key": "conv-a", "line": AN},
        {"key": "conv-a", "line": DN},
    ]
    text = "\n".join(json.dumps(x) for x in lines) + "\n"
    result = _check(tmp_path, text, "--records", RECORDS, "--now", NOW, name="lines.jsonl")
    assert result.exit_code == 1
    rows = _rows(result)
    assert [(r["conversation"], r["id"], r["verdict"], r["reason"]) for r in rows] == [
        ("conv-a", "scheduler-1", "forward", None),
        ("conv-a", "payer-1", "forward", None),
        ("conv-b", "scheduler-1", "dead-letter", "record-used"),
        ("conv-a", "scheduler-2", "forward", None),
        ("conv-a", "payer-2", "forward", None),
    ]
    assert rows[2]["problems"][0]["code"] == "record-used"
    table = _check(tmp_path, text, "--records", RECORDS, "--now", NOW, "--format", "table", name="lines.jsonl")
    assert table.stdout.splitlines()[0].split() == ["LINE", "CONVERSATION", "ID", "TYPE", "VERDICT", "REASON"]


def test_an_exec_handoff_without_records_is_refused(tmp_path: Path) -> None:
    result = _check(tmp_path, HO + "\n", "--now", NOW)
    assert result.exit_code == 1
    assert _rows(result)[0]["reason"] == "no-record"


def test_a_reply_to_an_unknown_handoff_is_decided_at_once(tmp_path: Path) -> None:
    result = _check(tmp_path, f"{RB}\n{DN}\n", "--records", RECORDS, "--now", NOW)
    assert result.exit_code == 1
    rows = _rows(result)
    assert (rows[0]["verdict"], rows[0]["reason"]) == ("dead-letter", "unknown-handoff")
    assert (rows[1]["verdict"], rows[1]["reason"]) == ("alert", "unknown-handoff")


def test_an_expired_handoff_uses_the_fixed_clock(tmp_path: Path) -> None:
    text = HO + " exp=20261001T1000Z\n"
    assert _check(tmp_path, text, "--records", RECORDS, "--now", "20261001T0959Z").exit_code == 0
    late = _check(tmp_path, text, "--records", RECORDS, "--now", "20261001T1000Z")
    assert late.exit_code == 1 and _rows(late)[0]["reason"] == "expired"


def test_a_configured_route_applies_its_sender_binding(tmp_path: Path) -> None:
    intruder = HO.replace("from=scheduler", "from=extractor").replace("scheduler-1", "extractor-1")
    result = _check(
        tmp_path, intruder + "\n", "--records", RECORDS, "--now", NOW, "--config", CONFIG, "--route", "agents.pay"
    )
    assert result.exit_code == 1
    assert _rows(result)[0]["reason"] == "sender-binding"
    without_route = _check(tmp_path, intruder + "\n", "--records", RECORDS, "--now", NOW, "--config", CONFIG)
    assert without_route.exit_code == 0


def test_an_invalid_line_is_dead_lettered(tmp_path: Path) -> None:
    result = _check(tmp_path, "RW1 HO scheduler-1 from=scheduler\n", "--now", NOW)
    assert result.exit_code == 1
    [row] = _rows(result)
    assert (row["verdict"], row["reason"]) == ("dead-letter", "invalid") and row["problems"]


# ---------------------------------------------------------------- usage errors: exit 2, one line, no traceback


def _usage_error(result: Result, needle: str) -> None:
    assert result.exit_code == 2, result.output
    assert needle in result.stderr
    assert "Traceback" not in result.output
    assert result.stdout == ""


def test_a_missing_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["check", str(tmp_path / "nope.rw1"), "--now", NOW])
    _usage_error(result, "does not exist")
    assert result.stderr.count("\n") == 1


def test_a_bad_now(tmp_path: Path) -> None:
    _usage_error(_check(tmp_path, HO, "--now", "2026-10-01 09:00"), "expected YYYYMMDDTHHMMZ")


def test_a_bad_records_file(tmp_path: Path) -> None:
    bad = tmp_path / "records.json"
    bad.write_text(json.dumps({"inv:MD-2026-057": {"to": "payer", "amt": "5,400.00"}}))
    result = _check(tmp_path, HO, "--records", str(bad), "--now", NOW)
    _usage_error(result, "records file")
    assert "entry 1 (inv:MD-2026-057): ask: missing" in result.stderr
    assert "amt: 5,400.00: money is digits" in result.stderr  # checked against the route's profile


def test_a_missing_records_file(tmp_path: Path) -> None:
    _usage_error(_check(tmp_path, HO, "--records", str(tmp_path / "nope.json")), "does not exist")


def test_bad_json_lines_input(tmp_path: Path) -> None:
    text = json.dumps({"key": "a", "line": HO}) + "\n" + json.dumps({"line": HO}) + "\n"
    _usage_error(_check(tmp_path, text, name="x.jsonl"), "line 2: key: expected the conversation id")


def test_an_unknown_profile(tmp_path: Path) -> None:
    _usage_error(_check(tmp_path, HO, "--profile", "nosuch"), "--profile")


def test_a_bad_format(tmp_path: Path) -> None:
    _usage_error(_check(tmp_path, HO, "--format", "xml"), "--format 'xml'")


def test_an_unknown_route(tmp_path: Path) -> None:
    _usage_error(_check(tmp_path, HO, "--config", CONFIG, "--route", "agents.nope"), "unknown route 'agents.nope'")


def test_a_profile_that_contradicts_the_route(tmp_path: Path) -> None:
    _usage_error(
        _check(tmp_path, HO, "--config", CONFIG, "--route", "agents.pay", "--profile", "clin"), "uses profile pay"
    )


def test_a_bad_config_file(tmp_path: Path) -> None:
    config = tmp_path / "gk.yaml"
    config.write_text("redis:\n  pasword: x\n")
    _usage_error(_check(tmp_path, HO, "--config", str(config)), "redis.pasword: unknown key")


def test_a_config_file_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GK_CONFIG", str(tmp_path / "missing.yaml"))
    _usage_error(_check(tmp_path, HO, "--now", NOW), "missing.yaml does not exist")


def test_missing_argument_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["check"])
    assert result.exit_code == 2


# ---------------------------------------------------------------- help


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--help"], "check"),
        (["check", "--help"], "gatekeeper check flow.rw1 --records"),
        (["records", "--help"], "load"),
        (["records", "load", "--help"], "--supersede"),
        (["records", "get", "--help"], "gatekeeper records get inv:MD-2026-057"),
        (["records", "delete", "--help"], "record-change-refused"),
    ],
)
def test_help_teaches_by_example(argv: list[str], needle: str) -> None:
    result = CliRunner().invoke(app, argv, env={"COLUMNS": "200", "TERM": "dumb"})
    assert result.exit_code == 0
    assert needle in result.stdout
    assert "--config" in result.stdout or argv in (["--help"], ["records", "--help"])


def test_parse_now() -> None:
    assert parse_now("19700101T0001Z") == 60.0
    with pytest.raises(ValueError, match="YYYYMMDDTHHMMZ"):
        parse_now("20261301T0000Z")
