"""``gatekeeper check``: the daemon's decision offline, through the command line (typer's CliRunner)."""

from __future__ import annotations

import calendar
import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from gatekeeper.cli import app
from gatekeeper.cli.check import TIME_FORMS, iso, parse_now, parse_time, read_input
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
    assert without_route.exit_code == 1  # the configuration's only route, never the profile alone
    assert _rows(without_route)[0]["reason"] == "sender-binding"
    profile_alone = _check(tmp_path, intruder + "\n", "--records", RECORDS, "--now", NOW)  # no configuration
    assert profile_alone.exit_code == 0


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


@pytest.mark.parametrize("bad", ["2026-10-01 09:00", "2026101T0900Z", "20261001T0900z", "20261301T0000Z"])
def test_a_bad_now(tmp_path: Path, bad: str) -> None:
    _usage_error(_check(tmp_path, HO, "--now", bad), f"--now {bad!r}")
    assert "expected YYYYMMDDTHHMMZ" in _check(tmp_path, HO, "--now", bad).stderr


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
        (["check", "--help"], '"at": "20261001T0958Z"'),
        (["check", "--help"], "never go backwards: an at before the line before it, or before --now, is refused"),
        (["records", "--help"], "load"),
        (["records", "load", "--help"], "--supersede"),
        (["records", "get", "--help"], "gatekeeper records get inv:MD-2026-057"),
        (["records", "delete", "--help"], "record-change-refused"),
    ],
)
def test_help_teaches_by_example(argv: list[str], needle: str) -> None:
    result = CliRunner().invoke(app, argv, env={"COLUMNS": "200", "TERM": "dumb"})
    assert result.exit_code == 0
    assert needle in " ".join(result.stdout.split())  # the help's prose wraps to the terminal, anywhere
    assert "--config" in result.stdout or argv in (["--help"], ["records", "--help"])


def test_parse_now() -> None:
    assert parse_now("19700101T0001Z") == 60.0
    with pytest.raises(ValueError, match="YYYYMMDDTHHMMZ"):
        parse_now("20261301T0000Z")


# ---------------------------------------------------------------- replaying with the clock: "at"

EXP = " exp=20261001T1000Z"


def _jsonl(*entries: dict[str, Any]) -> str:
    return "".join(json.dumps(e) + "\n" for e in entries)


def _replay(tmp_path: Path, *entries: dict[str, Any], args: tuple[str, ...] = ()) -> Result:
    return _check(tmp_path, _jsonl(*entries), "--records", RECORDS, "-f", "jsonl", *args, name="lines.jsonl")


def _verdicts(result: Result) -> list[tuple[str, str | None, str]]:
    return [(r["verdict"], r["reason"], r["decided_at"]) for r in _rows(result)]


def test_a_handoff_decided_before_its_exp_is_forwarded_and_after_it_expired(tmp_path: Path) -> None:
    # the same line in two conversations: the first decided a minute before exp=, the second at exp=
    result = _replay(
        tmp_path,
        {"key": "c-1", "line": HO + EXP, "at": "20261001T0959Z"},
        {"key": "c-2", "line": HO + EXP, "at": "20261001T1000Z"},
        args=("--now", NOW),  # the clock until the first at: the at wins for its line
    )
    assert result.exit_code == 1, result.output
    assert _verdicts(result) == [
        ("forward", None, "2026-10-01T09:59:00.000Z"),
        ("dead-letter", "expired", "2026-10-01T10:00:00.000Z"),
    ]
    assert _rows(result)[1]["problems"][0]["message"] == (
        "expired: the HO expired at 20261001T1000Z (now 20261001T1000Z)"
    )
    # without the times, both are decided at --now: the second is the approval's second use, not expired
    same = _replay(tmp_path, {"key": "c-1", "line": HO + EXP}, {"key": "c-2", "line": HO + EXP}, args=("--now", NOW))
    assert [(v, r) for v, r, _ in _verdicts(same)] == [("forward", None), ("dead-letter", "record-used")]


@pytest.mark.parametrize(
    ("at", "verdict"),
    [
        ("2026-10-01T09:59:59.999Z", "forward"),  # ISO-8601, to the millisecond: still the minute before
        ("2026-10-01T09:59:59.9999999Z", "forward"),  # kept to the millisecond: never rounded up into exp=
        ("2026-10-01T09:59Z", "forward"),
        ("2026-10-01T10:00:00Z", "dead-letter"),
        ("2026-10-01T10:00:00.000000001Z", "dead-letter"),
    ],
)
def test_iso_times_decide_like_rw1_times(tmp_path: Path, at: str, verdict: str) -> None:
    result = _replay(tmp_path, {"key": "c-1", "line": HO + EXP, "at": at})
    [row] = _rows(result)
    assert row["verdict"] == verdict
    assert row["decided_at"][:16] == at[:16] and parse_time(row["decided_at"]) == parse_time(at)


def test_a_clearance_after_the_readbacks_exp_is_refused(tmp_path: Path) -> None:
    def flow(answered: str) -> Result:
        return _replay(
            tmp_path,
            {"key": "c-17", "line": HO, "at": "20261001T0900Z"},
            {"key": "c-17", "line": RB + " exp=20261001T0915Z", "at": "20261001T0905Z"},
            {"key": "c-17", "line": AN, "at": answered},
            {"key": "c-17", "line": DN},
        )

    in_time = flow("20261001T0914Z")
    assert in_time.exit_code == 0, in_time.output
    late = flow("20261001T0915Z")
    assert late.exit_code == 1
    rows = _rows(late)
    assert (rows[2]["verdict"], rows[2]["reason"]) == ("dead-letter", "clearance")
    assert [p["code"] for p in rows[2]["problems"]] == ["clearance-expired"]
    assert rows[2]["problems"][0]["message"] == "the statement payer-1 expired at 20261001T0915Z (now 20261001T0915Z)"
    # the done report that follows, with no time of its own, is decided at 09:15: an act nobody cleared
    assert (rows[3]["verdict"], rows[3]["decided_at"]) == ("alert", "2026-10-01T09:15:00.000Z")
    assert [p["code"] for p in rows[3]["problems"]] == ["done-not-cleared"]


def test_a_line_without_at_takes_the_time_of_the_line_before_it(tmp_path: Path) -> None:
    def flow(*middle: dict[str, Any]) -> Result:
        return _replay(
            tmp_path,
            {"key": "c-1", "line": HO + EXP, "at": "20261001T0950Z"},
            {"key": "c-1", "line": RB.replace("h=a7a82de76607", "h=e0a5aa83dcf5")},  # the digest of HO + EXP
            *middle,
            {"key": "c-1", "line": AN},
        )

    quiet = flow()
    assert _verdicts(quiet) == [
        ("forward", None, "2026-10-01T09:50:00.000Z"),
        ("forward", None, "2026-10-01T09:50:00.000Z"),
        ("forward", None, "2026-10-01T09:50:00.000Z"),
    ]
    # a line of another conversation at 10:01 moves the one clock: the answer after it is past the handoff's exp=
    review = "RW1 HO desk-1 from=desk to=payer item=gh:x ask=REVIEW"
    later = flow({"key": "c-2", "line": review, "at": "20261001T1001Z"})
    assert _verdicts(later) == [
        ("forward", None, "2026-10-01T09:50:00.000Z"),
        ("forward", None, "2026-10-01T09:50:00.000Z"),
        ("forward", None, "2026-10-01T10:01:00.000Z"),
        ("dead-letter", "clearance", "2026-10-01T10:01:00.000Z"),
    ]
    assert _rows(later)[3]["problems"][0]["code"] == "clearance-expired"


def test_the_lines_before_the_first_at_take_now_else_the_first_at(tmp_path: Path) -> None:
    entries = (
        {"key": "c-1", "line": HO.replace("scheduler-1", "scheduler-7") + " exp=20261001T0950Z"},
        {"key": "c-1", "line": HO + EXP, "at": "20261001T0955Z"},
    )
    with_now = _replay(tmp_path, *entries, args=("--now", NOW))
    assert _verdicts(with_now)[0] == ("forward", None, "2026-10-01T09:00:00.000Z")
    # without --now the first at starts the clock: the same file gives the same verdicts whatever the day
    without = _replay(tmp_path, *entries)
    assert _verdicts(without)[0] == ("dead-letter", "expired", "2026-10-01T09:55:00.000Z")


def test_without_at_or_now_the_lines_are_decided_at_the_current_time(tmp_path: Path) -> None:
    before = time.time()
    rows = _rows(_check(tmp_path, HO + "\n" + RB + "\n", "--records", RECORDS))  # plain lines never carry at
    after = time.time()
    times = {r["decided_at"] for r in rows}
    assert len(times) == 1  # one clock, read once
    decided = datetime.fromisoformat(times.pop().replace("Z", "+00:00")).timestamp()
    assert before - 0.001 <= decided <= after


def test_a_plain_file_is_decided_at_now(tmp_path: Path) -> None:
    result = _check(tmp_path, HO + "\n" + RB + "\n", "--records", RECORDS, "--now", NOW)
    assert [r["decided_at"] for r in _rows(result)] == ["2026-10-01T09:00:00.000Z"] * 2


def test_a_reply_whose_handoff_is_not_known_at_its_time_is_decided_at_once(tmp_path: Path) -> None:
    # offline nothing else can arrive: a reply that overtook its handoff is decided as at the end of its hold window
    result = _replay(
        tmp_path,
        {"key": "c-1", "line": RB, "at": "20261001T0900Z"},
        {"key": "c-1", "line": HO, "at": "20261001T0901Z"},
    )
    assert [(v, r) for v, r, _ in _verdicts(result)] == [("dead-letter", "unknown-handoff"), ("forward", None)]


def test_times_going_backwards_are_refused(tmp_path: Path) -> None:
    result = _replay(
        tmp_path,
        {"key": "c-1", "line": HO, "at": "20261001T0905Z"},
        {"key": "c-2", "line": RB},
        {"key": "c-3", "line": AN, "at": "2026-10-01T09:04:59Z"},  # another conversation: still the one clock
    )
    _usage_error(
        result,
        "gatekeeper: error: " + str(Path(tmp_path, "lines.jsonl")) + " line 3: at 2026-10-01T09:04:59Z is before "
        "line 1's at 20261001T0905Z: times must not go backwards",
    )
    assert "put the lines in the order they were decided" in result.stderr
    before_now = _replay(tmp_path, {"key": "c-1", "line": HO, "at": "20261001T0859Z"}, args=("--now", NOW))
    _usage_error(before_now, "line 1: at 20261001T0859Z is before --now 2026-10-01T09:00:00.000Z")
    # the same time again is not backwards
    same = _replay(
        tmp_path,
        {"key": "c-1", "line": HO, "at": "20261001T0900Z"},
        {"key": "c-1", "line": RB, "at": "2026-10-01T09:00:00Z"},
        args=("--now", NOW),
    )
    assert same.exit_code == 0, same.output


@pytest.mark.parametrize(
    ("at", "why"),
    [
        ("2026-10-01 09:03", "expected YYYYMMDDTHHMMZ"),
        ("20261001T0903", "expected YYYYMMDDTHHMMZ"),
        ("20261001t0903z", "expected YYYYMMDDTHHMMZ"),
        ("2026101T0903Z", "expected YYYYMMDDTHHMMZ"),
        ("2026-10-01T09:03:00+02:00", "expected YYYYMMDDTHHMMZ"),
        ("2026-10-01", "expected YYYYMMDDTHHMMZ"),
        (" 20261001T0903Z", "expected YYYYMMDDTHHMMZ"),
        ("\u0662\u0660\u0662\u06661001T0903Z", "expected YYYYMMDDTHHMMZ"),  # Arabic-Indic digits
        ("", "expected YYYYMMDDTHHMMZ"),
        ("20260230T0903Z", "is not a time of the calendar (day is out of range for month)"),
        ("20261001T2400Z", "is not a time of the calendar (hour must be in 0..23)"),
        ("2026-10-01T09:03:60Z", "is not a time of the calendar (second must be in 0..59)"),
        ("19691231T2359Z", "is before 1970"),
    ],
)
def test_a_bad_at_is_refused_naming_the_line_and_the_forms(tmp_path: Path, at: str, why: str) -> None:
    result = _replay(tmp_path, {"key": "c-1", "line": HO}, {"key": "c-1", "line": RB, "at": at})
    _usage_error(result, f"lines.jsonl line 2: at {at!r}")
    assert why in result.stderr
    assert TIME_FORMS in result.stderr
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("at", [None, 20261001, 1790845380.0, ["20261001T0903Z"], {"t": 1}, True])
def test_an_at_that_is_not_a_string_is_refused(tmp_path: Path, at: object) -> None:
    result = _replay(tmp_path, {"key": "c-1", "line": HO, "at": at})
    _usage_error(result, "lines.jsonl line 1: at: expected the time the line was decided, a string")
    assert TIME_FORMS in result.stderr


def test_the_table_shows_the_times_when_the_file_gives_them(tmp_path: Path) -> None:
    text = _jsonl({"key": "c-1", "line": HO, "at": "2026-10-01T09:00:27.5Z"}, {"key": "c-1", "line": RB})
    table = _check(tmp_path, text, "--records", RECORDS, "-f", "table", name="lines.jsonl").stdout.splitlines()
    assert table[0].split() == ["LINE", "AT", "ID", "TYPE", "VERDICT", "REASON"]
    assert table[1].split() == ["1", "2026-10-01T09:00:27Z", "scheduler-1", "HO", "forward", "-"]
    assert table[2].split() == ["2", "2026-10-01T09:00:27Z", "payer-1", "RB", "forward", "-"]
    rows = _rows(_check(tmp_path, text, "--records", RECORDS, "-f", "jsonl", name="lines.jsonl"))
    assert [r["decided_at"] for r in rows] == ["2026-10-01T09:00:27.500Z"] * 2


def test_decided_at_is_read_back_as_an_at(tmp_path: Path) -> None:
    first = _rows(_replay(tmp_path, {"key": "c-1", "line": HO, "at": "2026-10-01T09:03:27.120Z"}))
    again = _rows(_replay(tmp_path, {"key": "c-1", "line": HO, "at": first[0]["decided_at"]}))
    assert again[0]["decided_at"] == first[0]["decided_at"] == "2026-10-01T09:03:27.120Z"


def test_parse_time_forms() -> None:
    assert parse_time("19700101T0001Z") == 60.0
    assert parse_time("1970-01-01T00:01Z") == 60.0
    assert parse_time("1970-01-01T00:01:30Z") == 90.0
    assert parse_time("1970-01-01T00:01:30.25Z") == 90.25
    assert parse_time("99991231T2359Z") == calendar.timegm((9999, 12, 31, 23, 59, 0))
    long = "2" * 10_000
    with pytest.raises(ValueError) as info:
        parse_time(long)
    assert len(str(info.value)) < 400  # the value is quoted short


# a value of every shape near the two forms: digits, separators and letters where they go, in and out of range
_near_times = st.from_regex(
    r"\A[0-9]{1,5}-?[0-9]{1,2}-?[0-9]{1,2}[Tt ][0-9]{1,2}:?[0-9]{1,2}(:[0-9]{1,2}(\.[0-9]{0,12})?)?[Zz+]?\Z"
)


@settings(max_examples=600, deadline=None)
@given(st.one_of(st.text(), _near_times))
def test_parse_time_is_a_time_or_a_clear_error(text: str) -> None:
    try:
        value = parse_time(text)
    except ValueError as exc:
        message = str(exc)
        assert TIME_FORMS in message
        assert message.startswith(repr(text if len(text) <= 40 else text[:40] + "..."))
        return
    assert isinstance(value, float)
    assert 0.0 <= value < calendar.timegm((10000, 1, 1, 0, 0, 0))
    parse_time(iso(value))  # what decided_at prints is read back


@settings(max_examples=300, deadline=None)
@given(st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59, 999000)))
def test_every_instant_reads_back_from_both_forms(when: datetime) -> None:
    when = when.replace(microsecond=when.microsecond // 1000 * 1000, tzinfo=UTC)
    epoch = calendar.timegm(when.timetuple()) + when.microsecond / 1e6
    assert parse_time(iso(epoch)) == pytest.approx(epoch, abs=1e-6)
    minute = when.replace(second=0, microsecond=0)
    assert parse_time(minute.strftime("%Y%m%dT%H%MZ")) == calendar.timegm(minute.timetuple())
    assert iso(parse_time(iso(epoch))) == iso(epoch)
    assert minute + timedelta(minutes=1) > when


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_json, _near_times))
def test_any_json_at_is_read_or_refused_naming_the_line(at: object) -> None:
    text = json.dumps({"key": "c", "line": HO}) + "\n" + json.dumps({"key": "c", "line": RB, "at": at})
    try:
        lines = read_input(text, "lines.jsonl")
    except ValueError as exc:
        assert str(exc).startswith("lines.jsonl line 2: at")
        assert TIME_FORMS in str(exc)
        return
    assert isinstance(at, str) and lines[1].given == at and lines[1].at == parse_time(at) and lines[0].at is None


def test_the_docs_replay_example_runs_as_shown(tmp_path: Path) -> None:
    """The "Check, in detail" example of docs/cli.md (its lines elided there) gives the table the page shows."""
    section = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8").split("**Check, in detail.**", 1)[1]
    block = section.split("```console\n", 1)[1].split("```", 1)[0].splitlines()
    shown = block[
        block.index("$ gatekeeper check incident.jsonl --records config/records.example.json --format table") + 1 :
    ]
    ho = HO + EXP
    text = _jsonl(
        {"key": "c-17", "line": ho, "at": "20261001T0958Z"},
        {"key": "c-17", "line": RB.replace("h=a7a82de76607", "h=e0a5aa83dcf5"), "at": "2026-10-01T09:59:30Z"},
        {"key": "c-17", "line": AN, "at": "20261001T1001Z"},
        {"key": "c-17", "line": DN},
    )
    result = _check(tmp_path, text, "--records", RECORDS, "--format", "table", name="incident.jsonl")
    assert result.exit_code == 1
    got = result.stdout.splitlines()
    assert len(got) == len(shown)
    for line, doc in zip(got, shown, strict=True):
        assert line.startswith(doc.removesuffix("...")) if doc.endswith("...") else line == doc
