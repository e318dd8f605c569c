"""The hold buffer (queue behind a held line, retry timing, the awaited line first) and the commit watermarks."""

from __future__ import annotations

import pytest

from gatekeeper.consumers.holds import HoldBuffer, Pending, Watermarks, line_id, lowest_offsets, merge_lowest
from gatekeeper.consumers.outcomes import Source

HOLD = {"r": 30.0}


def line(
    offset: int, conv: str | None = "c1", value: bytes | None = None, partition: int = 0, t: float = 0.0
) -> Pending:
    v = value if value is not None else f"RW1 ST x-{offset} from=x to=y".encode()
    return Pending(Source("r", partition, offset, v), "r", conv, t)


def test_line_id_is_the_third_token() -> None:
    assert line_id(b"RW1 RB payer-1 re=scheduler-1 from=payer") == "payer-1"
    assert line_id(b"RW1 HO") is None
    assert line_id(b"hello world foo") is None
    assert line_id(b"RW1 HO \xff\xfe from=x") is None


def test_lines_of_conversations_without_holds_pass_straight_through() -> None:
    buf = HoldBuffer(retry_interval=1.0)
    new = [line(0), line(1, "c2"), line(2)]
    assert buf.plan(new, now=0.0) == new
    assert len(buf) == 0 and buf.next_due() is None


def test_later_lines_of_a_held_conversation_queue_behind_it_in_order() -> None:
    buf = HoldBuffer(retry_interval=1.0)
    held, queued = line(0), line(1)
    buf.hold([(held, "scheduler-1"), (queued, None)], now=0.0, hold_seconds=HOLD)
    assert buf.holds("r", "c1") and len(buf) == 2
    later, other = line(2), line(3, "c2")
    planned = buf.plan([later, other], now=0.1)  # a new line joins the queue: the whole queue is decided again
    assert planned == [held, queued, later, other]
    assert len(buf) == 0


def test_a_queue_waits_for_its_retry_interval_unless_a_line_joins() -> None:
    buf = HoldBuffer(retry_interval=1.0)
    held = line(0)
    buf.hold([(held, "scheduler-1")], now=10.0, hold_seconds=HOLD)
    assert buf.next_due() == 11.0
    other = line(5, "c2")
    assert buf.plan([other], now=10.5) == [other]  # another conversation's line does not make the queue due
    assert buf.plan([], now=10.9) == []
    assert buf.plan([], now=11.0) == [held]


def test_a_queue_is_due_when_a_hold_window_ends_before_the_next_retry() -> None:
    buf = HoldBuffer(retry_interval=5.0)
    held = line(0, t=0.0)
    buf.hold([(held, "x")], now=29.0, hold_seconds=HOLD)
    assert buf.next_due() == 30.0  # first_seen 0 + hold 30, before 29 + 5


def test_the_awaited_line_moves_ahead_of_the_lines_waiting_for_it() -> None:
    buf = HoldBuffer()
    rb = line(0, value=b"RW1 RB payer-1 re=scheduler-1 from=payer to=scheduler")
    an = line(1, value=b"RW1 AN scheduler-2 re=payer-1 from=scheduler to=payer val=Y")
    buf.hold([(rb, "scheduler-1"), (an, None)], now=0.0, hold_seconds=HOLD)
    ho = line(2, value=b"RW1 HO scheduler-1 from=scheduler to=payer")
    assert buf.plan([ho], now=0.1) == [ho, rb, an]


def test_a_line_nobody_waits_for_keeps_its_place() -> None:
    buf = HoldBuffer()
    rb = line(0, value=b"RW1 RB payer-1 re=scheduler-1 from=payer to=scheduler")
    buf.hold([(rb, "scheduler-1")], now=0.0, hold_seconds=HOLD)
    other = line(1, value=b"RW1 HO scheduler-7 from=scheduler to=payer")
    assert buf.plan([other], now=0.1) == [rb, other]


def test_held_lines_of_other_routes_and_conversations_are_separate() -> None:
    buf = HoldBuffer()
    a = line(0, "c1")
    b = Pending(Source("s", 0, 0, b"RW1 RB b-1 re=x-1"), "s", "c1", 0.0)
    buf.hold([(a, "x"), (b, "x-1")], now=0.0, hold_seconds={"r": 30.0, "s": 30.0})
    assert buf.count("r") == 1 and buf.count("s") == 1
    assert buf.holds("s", "c1") and not buf.holds("r", "c2")


def test_lowest_held_offset_per_partition() -> None:
    buf = HoldBuffer()
    buf.hold([(line(7), "x"), (line(9), None), (line(3, "c2", partition=1), "y")], now=0.0, hold_seconds=HOLD)
    assert buf.lowest() == {("r", 0): 7, ("r", 1): 3}


def test_revoked_partitions_drop_their_held_lines() -> None:
    buf = HoldBuffer()
    keep = line(3, "c2", partition=1)
    buf.hold([(line(7), "x"), (line(9), None), (keep, "y")], now=0.0, hold_seconds=HOLD)
    dropped = buf.drop([("r", 0)])
    assert [p.offset for p in dropped] == [7, 9]
    assert buf.lines() == [keep] and not buf.holds("r", "c1")


def test_a_line_without_conversation_cannot_be_held() -> None:
    buf = HoldBuffer()
    with pytest.raises(ValueError):
        buf.hold([(line(0, None), "x")], now=0.0, hold_seconds=HOLD)


# ---------------------------------------------------------------- watermarks


def test_commit_offset_is_the_next_offset_to_read() -> None:
    wm = Watermarks()
    for off in range(5):
        wm.consumed(("r", 0), off)
    assert wm.committable({}) == {("r", 0): 5}


def test_commit_never_passes_the_lowest_held_offset() -> None:
    wm = Watermarks()
    for off in range(10):
        wm.consumed(("r", 0), off)
    wm.consumed(("r", 1), 4)
    assert wm.committable({("r", 0): 3}) == {("r", 0): 3, ("r", 1): 5}


def test_nothing_to_commit_when_the_watermark_did_not_move() -> None:
    wm = Watermarks()
    wm.consumed(("r", 0), 4)
    wm.committed({("r", 0): 5})
    assert wm.committable({}) == {}
    wm.consumed(("r", 0), 5)
    assert wm.committable({}) == {("r", 0): 6}


def test_a_held_line_keeps_the_watermark_until_it_is_decided() -> None:
    wm = Watermarks()
    buf = HoldBuffer(retry_interval=1.0)
    lines = [line(i) for i in range(3)]
    for p in lines:
        wm.consumed(p.tp, p.offset)
    buf.hold([(lines[1], "x")], now=0.0, hold_seconds=HOLD)  # 0 and 2 decided, 1 held
    offsets = wm.committable(buf.lowest())
    assert offsets == {("r", 0): 1}
    wm.committed(offsets)
    assert buf.plan([], now=1.0) == [lines[1]]  # decided on retry
    assert wm.committable(buf.lowest()) == {("r", 0): 3}


def test_in_flight_lines_count_as_open() -> None:
    wm = Watermarks()
    for off in range(6):
        wm.consumed(("r", 0), off)
    in_flight = lowest_offsets([line(4), line(5)])
    held = {("r", 0): 2}
    assert wm.committable(merge_lowest(held, in_flight)) == {("r", 0): 2}
    assert wm.committable(in_flight) == {("r", 0): 4}


def test_only_the_partitions_asked_for() -> None:
    wm = Watermarks()
    wm.consumed(("r", 0), 1)
    wm.consumed(("r", 1), 1)
    assert wm.committable({}, [("r", 1)]) == {("r", 1): 2}


def test_forget_a_revoked_partition() -> None:
    wm = Watermarks()
    wm.consumed(("r", 0), 1)
    wm.committed({("r", 0): 2})
    wm.forget([("r", 0)])
    assert wm.committable({}) == {} and wm.last_committed(("r", 0)) is None


# ---------------------------------------------------------------- bounds: a flood never stalls the rest


def held_lines(n: int, conv_of: object, partition: int = 0, t0: float = 0.0) -> list[Pending]:
    return [line(i, conv_of(i), partition=partition, t=t0 + i * 0.001) for i in range(n)]  # type: ignore[operator]


def test_a_conversation_past_its_bound_is_forced_whole() -> None:
    from gatekeeper.consumers.holds import HoldLimits

    buf = HoldBuffer(retry_interval=5.0, limits=HoldLimits(per_conversation=3, per_partition=100, total=100))
    flood = held_lines(4, lambda i: "flood")
    calm = line(50, "calm")
    buf.hold([(p, "ho-1") for p in flood] + [(calm, "ho-3")], now=1.0, hold_seconds=HOLD)
    planned = buf.plan([], now=1.0)  # not due for 5 s, but forced: decided now
    assert planned == flood and all(p.forced == "conversation" for p in planned)
    assert buf.holds("r", "calm") and not buf.holds("r", "flood") and len(buf) == 1
    assert buf.pressure(1.0) == ["r"] and buf.pressure(1.0 + 61) == []


def test_a_partition_past_its_bound_forces_its_oldest_queues_and_spares_other_partitions() -> None:
    from gatekeeper.consumers.holds import HoldLimits

    buf = HoldBuffer(retry_interval=5.0, limits=HoldLimits(per_conversation=10, per_partition=5, total=1000))
    other = line(900, "legit", partition=1, t=-10.0)  # older than the whole flood, on another partition
    buf.hold([(other, "ho-4")], now=0.0, hold_seconds=HOLD)
    flood = held_lines(8, lambda i: f"k{i}", partition=0)
    buf.hold([(p, "ho-1") for p in flood], now=1.0, hold_seconds=HOLD)
    planned = buf.plan([], now=1.0)
    assert planned == flood[:3]  # the three oldest of partition 0: it holds its bound of 5 again
    assert {p.forced for p in planned} == {"partition"}
    assert buf.count_partition(("r", 0)) == 5 and buf.holds("r", "legit")


def test_the_instance_bound_forces_the_fullest_partition_first() -> None:
    from gatekeeper.consumers.holds import HoldLimits

    buf = HoldBuffer(retry_interval=5.0, limits=HoldLimits(per_conversation=10, per_partition=100, total=6))
    legit = [line(900 + i, f"legit{i}", partition=1, t=-10.0) for i in range(2)]
    buf.hold([(p, "ho-4") for p in legit], now=0.0, hold_seconds=HOLD)
    flood = held_lines(6, lambda i: f"k{i}", partition=0)
    buf.hold([(p, "ho-1") for p in flood], now=1.0, hold_seconds=HOLD)
    planned = buf.plan([], now=1.0)
    assert planned == flood[:2] and {p.forced for p in planned} == {"instance"}
    assert len(buf) == 6 and all(buf.holds("r", f"legit{i}") for i in range(2))


def test_a_forced_line_held_again_is_no_longer_forced() -> None:
    from gatekeeper.consumers.holds import HoldLimits

    buf = HoldBuffer(retry_interval=5.0, limits=HoldLimits(per_conversation=1, per_partition=100, total=100))
    a, b = line(0, "c"), line(1, "c")
    buf.hold([(a, "ho-1"), (b, None)], now=0.0, hold_seconds=HOLD)
    assert buf.plan([], now=0.0) == [a, b]
    buf.hold([(b, "ho-2")], now=0.1, hold_seconds=HOLD)  # within the bound now: held as any line
    assert b.forced is None and buf.plan([], now=0.2) == []


def test_dropping_revoked_partitions_keeps_the_counts() -> None:
    buf = HoldBuffer()
    buf.hold([(line(0, "a", partition=0), "x"), (line(1, "b", partition=1), "y")], now=0.0, hold_seconds=HOLD)
    buf.drop([("r", 0)])
    assert len(buf) == 1 and buf.count("r") == 1 and buf.count_partition(("r", 0)) == 0
