"""Replay's reading of dead letters, without a broker: which topic holds whose letters, the ``gk.original.*`` checks,
and the index that keeps only the newest copy of a line (a requeue replaces a letter; it does not add one)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from gatekeeper.config import Settings
from gatekeeper.consumers.outcomes import OutcomeKind
from gatekeeper.replay import (
    NOTICE_ID_HEADER,
    NOTIFIED,
    PARKED,
    SUPERSEDED,
    Copy,
    Identity,
    ReplayedLine,
    Replayer,
    ReplayError,
    ReplayReport,
    Status,
    _extra,
    check_original,
    well_formed,
)
from tests.policy.world import HO, NOW, pay_world

A = {"input": "a.in", "output": "a.out", "dead_letter": "a.dlq", "alerts": "a.alerts", "profile": "pay"}
B = {"input": "b.in", "output": "b.out", "dead_letter": "b.dlq", "alerts": "b.alerts", "profile": "pay"}
SHARED = {**A, "input": "s.in", "output": "s.out"}  # shares A's dead-letter topic
INPUTS = {"a.in": {0: 10, 1: 4}, "b.in": {0: 10}, "s.in": {0: 10}}  # partition -> end offset


def _replayer() -> Replayer:
    return Replayer(Settings.model_validate({"routes": [A, B, SHARED]}))


def _letter(offset: int, *, topic: str = "a.in", partition: str = "0", original: str = "3", **extra: str) -> Any:
    headers = {
        "gk.original.topic": topic,
        "gk.original.partition": partition,
        "gk.original.offset": original,
        "gk.original.timestamp": "1790845200000",
        "gk.reason": "no-record",
        "gk.attempt": "1",
        **extra,
    }
    return SimpleNamespace(
        headers=[(k, v.encode()) for k, v in headers.items()],
        partition=0,
        offset=offset,
        timestamp=1_790_845_200_000 + offset,
        key=b"c1",
        value=b"RW1 HO x",
    )


# ---------------------------------------------------------------- whose letters a topic holds


def test_a_route_or_its_dead_letter_topic_or_a_copy_of_it_with_the_route() -> None:
    r = _replayer()
    assert r.source_topic("a.in", None)[0] == "a.dlq"
    assert r.source_topic(None, "b.dlq") == ("b.dlq", None)
    topic, only = r.source_topic("a.in", "a.dlq.archive")  # an archive: the route says whose letters it holds
    assert topic == "a.dlq.archive" and only is not None and only.input == "a.in"
    with pytest.raises(ReplayError, match="no configured route's dead-letter topic"):
        r.source_topic(None, "a.dlq.archive")
    with pytest.raises(ReplayError, match=r"dead-letter topic of b\.in, not of a\.in"):
        r.source_topic("a.in", "b.dlq")
    with pytest.raises(ReplayError, match="give --route ROUTE"):
        r.source_topic(None, None)


def test_the_owners_of_a_topic() -> None:
    r = _replayer()
    routes = {x.input: x for x in r.settings.routes}
    assert [o.input for o in r.owners("a.dlq", None)] == ["a.in", "s.in"]  # a shared dead-letter topic
    assert [o.input for o in r.owners("a.dlq.archive", routes["b.in"])] == ["b.in"]
    assert r.owners("a.dlq.archive", None) == ()


# ---------------------------------------------------------------- the gk.original.* checks


@pytest.mark.parametrize(
    ("kind", "raw", "value"),
    [
        ("partition", b"7", 7),
        ("partition", b" 7", None),
        ("partition", b"+7", None),
        ("partition", b"0_7", None),
        ("partition", "٧".encode(), None),  # another script's digit: int() takes it
        ("partition", b"-1", None),
        ("partition", b"", None),
        ("partition", None, None),
        ("offset", b"12345678901234567890", None),  # past int64
        ("offset", b"0", 0),
        ("timestamp", b"-1", -1),  # the input record had none
        ("timestamp", b"-2", None),
        ("attempt", b"0", None),
        ("attempt", b"3", 3),
    ],
)
def test_well_formed(kind: str, raw: bytes | None, value: int | None) -> None:
    assert well_formed(kind, raw) == value


def _headers(**h: str) -> dict[str, bytes]:
    base = {"gk.original.partition": "1", "gk.original.offset": "3", "gk.attempt": "2"}
    return {k.replace("_", "."): v.encode() for k, v in {**base, **h}.items()}


def test_check_original() -> None:
    parts = INPUTS["a.in"]
    assert check_original(_headers(), "a.in", parts) == (1, 3, 2)
    no_attempt = _headers()
    del no_attempt["gk.attempt"]
    assert check_original(no_attempt, "a.in", parts) == (1, 3, 0)
    refused = {
        "gk.original.partition '99' is not a partition of a.in": _headers(gk_original_partition="99"),
        "gk.original.partition 'x' is not": _headers(gk_original_partition="x"),
        "gk.original.offset '4' is not an offset of a.in": _headers(gk_original_offset="4"),  # partition 1 ends at 4
        "gk.original.offset '-3' is not": _headers(gk_original_offset="-3"),
        "gk.original.timestamp 'soon' is not a timestamp": _headers(gk_original_timestamp="soon"),
        "gk.attempt '1e3' is not an attempt": _headers(gk_attempt="1e3"),
    }
    for note, headers in refused.items():
        got = check_original(headers, "a.in", parts)
        assert isinstance(got, str) and got.startswith(note) and got.endswith("(refused)"), got
    missing = _headers()
    del missing["gk.original.partition"]
    expected = "gk.original.partition missing is not a partition of a.in (refused)"
    assert check_original(missing, "a.in", parts) == expected
    assert isinstance(check_original(_headers(), "a.in", {}), str)  # an input topic that does not exist


def _read(r: Replayer, topic: str, letters: list[Any], route: str | None = None) -> ReplayReport:
    """The letters as a replay reads them: the index first, then each letter skipped (with its note), not selected
    (``filtered``) or replayed (a line without a note)."""
    only = None if route is None else r.settings.route(route)
    owners = r.owners(topic, only)
    report = ReplayReport(topic=topic, dry_run=True, requeue_failed=False)
    index: dict[Identity, Copy] = {}
    for rec in letters:
        r._index(index, topic, rec, owners, INPUTS)
    for rec in letters:
        item = r._item(topic, rec, only, owners, INPUTS, report)
        if item is not None and not r._passed_over(item, index, False, report):
            report.lines.append(ReplayedLine(*item.dlq, status=Status.FORWARDED))  # replayed (note: None)
    return report


def test_a_letter_naming_a_route_whose_letters_go_elsewhere_is_refused() -> None:
    r = _replayer()
    report = _read(r, "a.dlq", [_letter(0, topic="b.in"), _letter(1, topic="s.in"), _letter(2, topic="nope")])
    notes = [ln.note for ln in report.lines]
    assert notes == [
        "it names route b.in, whose dead letters do not go to a.dlq (refused)",
        None,  # s.in shares a.dlq: its letter is replayed
        "no configured route reads nope",
    ]
    # --route a.in: the shared route's letter is another route's (not selected), b.in's is still refused
    report = _read(r, "a.dlq", [_letter(0, topic="b.in"), _letter(1, topic="s.in")], route="a.in")
    assert [ln.note for ln in report.lines] == ["it names route b.in, whose dead letters do not go to a.dlq (refused)"]
    assert report.filtered == 1
    # a copy of a.dlq read as a.in's (--from-topic with --route): only a.in's letters
    report = _read(r, "a.dlq.archive", [_letter(0), _letter(1, topic="s.in")], route="a.in")
    assert [ln.note for ln in report.lines] == [
        None,
        "it names route s.in, whose dead letters do not go to a.dlq.archive (refused)",
    ]


def test_a_planted_partition_is_refused() -> None:
    report = _read(_replayer(), "a.dlq", [_letter(0, partition="99"), _letter(1, original="10")])
    assert [(ln.status, ln.note) for ln in report.lines] == [
        (Status.SKIPPED, "gk.original.partition '99' is not a partition of a.in (refused)"),
        (Status.SKIPPED, "gk.original.offset '10' is not an offset of a.in (refused)"),  # partition 0 ends at 10
    ]


# ---------------------------------------------------------------- the newest copy of a line


def test_copies_order_by_attempt_then_time() -> None:
    assert Copy(3, 0, "t", 0, 0) > Copy(2, 9, "t", 0, 9)
    assert Copy(2, 9, "t", 0, 1) > Copy(2, 8, "t", 0, 2)
    assert Copy(2, 9, "t", 1, 0) > Copy(2, 9, "t", 0, 5)


def test_only_the_newest_copy_of_a_line_is_replayed() -> None:
    r = _replayer()
    letters = [
        _letter(0),  # the daemon's dead letter of a.in[0]@3
        _letter(1, original="4"),  # another line
        _letter(2, **{"gk.attempt": "2"}),  # a requeued copy of the first
        _letter(3, **{"gk.attempt": "2"}),  # a second copy of the same attempt (an earlier release doubled them)
        _letter(4, original="4", partition="1"),  # a.in[1]@4: past partition 1's end, refused, supersedes nothing
    ]
    report = _read(r, "a.dlq", letters)
    assert [(ln.offset, ln.note) for ln in report.lines] == [
        (0, SUPERSEDED),
        (1, None),
        (2, SUPERSEDED),
        (3, None),
        (4, "gk.original.offset '4' is not an offset of a.in (refused)"),
    ]
    # the copy outside the range read still counts: the index is built from a wider range than is replayed
    index: dict[Identity, Copy] = {}
    owners = r.owners("a.dlq", None)
    for rec in letters:
        r._index(index, "a.dlq", rec, owners, INPUTS)
    assert index[("a.in", 0, 3)] == Copy(2, 1_790_845_200_003, "a.dlq", 0, 3)


def test_a_parked_letter_is_skipped_unless_asked_for() -> None:
    r = _replayer()
    owners = r.owners("a.dlq", None)
    parked = _letter(0, **{"gk.attempt": "5", "gk.parked": "max-attempts"})
    index: dict[Identity, Copy] = {}
    r._index(index, "a.dlq", parked, owners, INPUTS)
    for include, skipped in ((False, True), (True, False)):
        report = ReplayReport(topic="a.dlq", dry_run=True, requeue_failed=True)
        item = r._item("a.dlq", parked, None, owners, INPUTS, report)
        assert item is not None and item.parked and item.attempt == 5
        assert r._passed_over(item, index, include, report) is skipped
        assert [ln.note for ln in report.lines] == ([PARKED] if skipped else [])


def test_a_letter_whose_sender_was_told_keeps_its_notice_and_a_replay_that_forwards_it_says_so() -> None:
    """A replay writes no refusal notice; a requeued copy keeps the letter's ``gk.notice.id``, and a line forwarded
    although its sender was told it was refused is noted (``notified``)."""
    r = _replayer()
    owners = r.owners("a.dlq", None)
    report = ReplayReport(topic="a.dlq", dry_run=True, requeue_failed=True)
    told = r._item("a.dlq", _letter(0, **{NOTICE_ID_HEADER: "payer-951234567"}), None, owners, INPUTS, report)
    untold = r._item("a.dlq", _letter(1, original="4"), None, owners, INPUTS, report)
    assert told is not None and untold is not None
    assert (NOTICE_ID_HEADER, b"payer-951234567") in _extra(OutcomeKind.DEAD_LETTER, told, NOW)  # a requeued copy
    assert all(k != NOTICE_ID_HEADER for k, _ in _extra(OutcomeKind.OUTPUT, told, NOW))
    assert all(k != NOTICE_ID_HEADER for k, _ in _extra(OutcomeKind.DEAD_LETTER, untold, NOW))
    forwarded = pay_world().send(HO)
    line, outcomes = r._outcome(told, forwarded, NOW, True, True, False)
    assert line.status is Status.FORWARDED and line.note == NOTIFIED.format(id="payer-951234567") and outcomes == []
    line, _ = r._outcome(untold, forwarded, NOW, True, True, False)
    assert line.status is Status.FORWARDED and line.note is None
