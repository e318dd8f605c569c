"""The poison lines an attacker found, fixed at their source: the calendar's end, impossible dates, ids with
thousands of digits. Each is decided (never raised on) the same way by the daemon's batch path (lifecycle indexes
included) and by ``gatekeeper check``."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gatekeeper.cli import app
from gatekeeper.policy import Reason, Verdict
from gatekeeper.policy.lifecycle import due_deadline, exp_deadline
from gatekeeper.policy.model import RESERVED_ID_MAX, RESERVED_ID_MIN, id_number, is_reserved_id
from gatekeeper.processor import Line, Processor
from gatekeeper.store import MemoryStore
from tests.policy.world import NOW, route

DRAFT = "RW1 HO scheduler-{n} p=pay from=scheduler to=desk item=doc:brief-1 ask=DRAFT"
HUGE = "1" * 4400  # past Python's 4,300-digit int() limit, under the default max_line_bytes


def draft(n: str = "1", extra: str = "") -> str:
    return DRAFT.format(n=n) + (f" {extra}" if extra else "")


async def decide(*texts: str, now: float = NOW) -> list[tuple[Verdict, Reason | None, tuple[str, ...]]]:
    p = Processor(MemoryStore(), route())
    out = []
    for t in texts:  # partition set: the lifecycle's index entries are computed, as in the daemon
        (d,) = await p.process([Line("c1", t.encode(), partition=3)], now)
        out.append((d.verdict, d.reason, tuple(pr.code for pr in d.problems)))
    return out


@pytest.mark.parametrize(
    "extra",
    [
        "exp=99991231T2500Z",  # the hour past 23 on the calendar's last day: the OverflowError of the probe
        "exp=99991231T2360Z",
        "exp=20270230T1200Z",  # no 30 February
        "exp=20261301T0000Z",
        "exp=20261000T0900Z",
        "exp=00000101T0000Z",  # no year 0
        "due=20270230",
        "due=99991232",
        "paid=20270229",  # 2027 is not a leap year
    ],
)
async def test_an_impossible_date_or_time_is_invalid_at_the_gate(extra: str) -> None:
    ((verdict, reason, codes),) = await decide(draft(extra=extra))
    assert (verdict, reason) == (Verdict.DEAD_LETTER, Reason.INVALID)
    assert codes == ("input-impossible-date",)


@pytest.mark.parametrize(
    "extra", ["exp=99991231T2359Z", "due=99991231", "paid=20280229", "exp=20280229T2359Z", "due=00010101"]
)
async def test_the_calendar_s_real_edges_are_accepted(extra: str) -> None:
    ((verdict, reason, _),) = await decide(draft(extra=extra), now=NOW)
    assert (verdict, reason) == (Verdict.FORWARD, None)  # due=00010101: long past, a real date, only a deadline


def test_deadlines_at_the_calendar_s_end_saturate_instead_of_overflowing() -> None:
    assert exp_deadline("99991231T2500Z") == math.inf
    assert exp_deadline("99991231T2399Z") == math.inf
    assert exp_deadline("99991299T0000Z") == math.inf
    assert due_deadline("99991231") == math.inf
    assert math.isfinite(exp_deadline("99991231T2359Z") or math.inf)
    assert exp_deadline("00000000T0000Z") == 0.0


async def test_an_id_with_thousands_of_digits_is_decided_not_raised_on() -> None:
    results = await decide(
        draft(HUGE),  # a handoff: forwarded (the number is above the reserved range)
        f"RW1 DN desk-1 re=scheduler-{HUGE} p=pay from=desk to=scheduler item=doc:brief-1 out=OK",
        f"RW1 CX scheduler-2 re=scheduler-{HUGE} p=pay from=scheduler to=desk item=doc:brief-1 why=REVOKED",
        f"RW1 HO scheduler-{HUGE}3 p=pay from=scheduler to=desk ask=DRAFT bogus=1",  # invalid, no tombstone
    )
    assert [r[:2] for r in results] == [
        (Verdict.FORWARD, None),
        (Verdict.FORWARD, None),
        (Verdict.FORWARD, None),
        (Verdict.DEAD_LETTER, Reason.INVALID),
    ]


def test_the_reserved_range_is_compared_as_numbers_without_int() -> None:
    assert is_reserved_id(f"scheduler-{RESERVED_ID_MIN}") and is_reserved_id(f"scheduler-{RESERVED_ID_MAX}")
    assert is_reserved_id("scheduler-0900000001")  # leading zeros are the same number
    assert not is_reserved_id(f"scheduler-{RESERVED_ID_MIN - 1}") and not is_reserved_id("scheduler-1000000000")
    assert not is_reserved_id(f"scheduler-{HUGE}") and not is_reserved_id("scheduler-x")
    assert id_number(f"a-{HUGE}") == RESERVED_ID_MAX + 1 and id_number("a-000") == 0
    assert id_number("a-١٢") is None  # not ASCII digits


def test_gatekeeper_check_agrees_with_the_daemon_on_every_poison_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):
        if name.startswith("GK_"):
            monkeypatch.delenv(name)
    path = tmp_path / "poison.rw1"
    path.write_text(
        "\n".join([draft("1", "exp=99991231T2500Z"), draft(HUGE), draft("3", "due=20270230"), draft("4")]) + "\n"
    )
    result = CliRunner().invoke(app, ["check", str(path), "--format", "jsonl", "--now", "20261001T0900Z"])
    assert result.exit_code == 1, result.output  # a finding, not an internal error (exit 2) or a crash
    import json

    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["verdict"], r["reason"]) for r in rows] == [
        ("dead-letter", "invalid"),
        ("forward", None),
        ("dead-letter", "invalid"),
        ("forward", None),
    ]
