"""Intake (``consumers.intake.take_in``): a fetch's records become pending lines, and the read watermarks move only
once all of them have."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import TopicPartition

from gatekeeper.consumers.holds import Watermarks
from gatekeeper.consumers.intake import take_in


@dataclass
class Rec:
    offset: int
    value: bytes | None
    key: bytes | None = b"c1"
    headers: Any = ()
    timestamp: int | None = 1


class Unreadable:
    def __bytes__(self) -> bytes:
        raise RuntimeError("a header value that cannot be read")


def test_a_fetch_becomes_pending_lines_and_moves_each_watermark_once() -> None:
    marks = Watermarks()
    records = {
        TopicPartition("in", 0): [Rec(4, b"RW1 HO a-1"), Rec(5, None, key=None, headers=[("conv", b"c2")])],
        TopicPartition("in", 1): [],
        TopicPartition("in", 2): [Rec(9, b"RW1 AN b-1 re=a-1")],
    }
    lines = take_in(records, {"in": "conv"}, marks, now=1.0)
    assert [(p.tp, p.offset, p.conversation, p.line_id) for p in lines] == [
        (("in", 0), 4, "c1", "a-1"),
        (("in", 0), 5, "c2", None),
        (("in", 2), 9, "c1", "b-1"),
    ]
    assert lines[1].source.value == b""
    assert (marks.next_offset(("in", 0)), marks.next_offset(("in", 1)), marks.next_offset(("in", 2))) == (6, None, 10)


def test_no_watermark_moves_when_a_record_of_the_fetch_cannot_be_taken_in() -> None:
    """Nothing of a fetch is decided when taking it in raises, so nothing of it may count as read: a watermark
    moved past those lines would let the checkpoint commit them without an outcome."""
    marks = Watermarks()
    records = {
        TopicPartition("in", 0): [Rec(4, b"RW1 HO a-1")],
        TopicPartition("in", 1): [Rec(7, b"RW1 HO b-1", headers=[("x", Unreadable())])],
    }
    with pytest.raises(RuntimeError):
        take_in(records, {"in": None}, marks, now=1.0)
    assert marks.next_offset(("in", 0)) is None and marks.next_offset(("in", 1)) is None
