"""Intake (``consumers.intake.take_in``): a fetch's records become pending lines, and the read watermarks move only
once all of them have; a record's conversation follows its rule (``conversation_of``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import TopicPartition
from hypothesis import given
from hypothesis import strategies as st

from gatekeeper.consumers.holds import Watermarks
from gatekeeper.consumers.intake import conversation_of, take_in


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


@pytest.mark.parametrize(
    ("key", "headers", "header", "want"),
    [
        (b"c1", [("conv", b"c2")], "conv", "c1"),  # the key first
        (b"\xc3\xa9t\xc3\xa9", [], None, "\u00e9t\u00e9"),  # any UTF-8 key
        (b"\xff", [("conv", b"c2")], "conv", "c2"),  # a key not UTF-8: the route's header
        (None, [("other", b"c3"), ("conv", b""), ("conv", b"c2")], "conv", "c2"),  # the first of its name with a value
        (None, [("conv", b"\xed\xa0\x80"), ("conv", b"c2")], "conv", None),  # that value not UTF-8: none
        (None, [("conv", b"c2")], None, None),  # no header configured: none
        (b"", [("Conv", b"c2")], "conv", None),  # names are matched exactly
    ],
)
def test_the_conversation_of_a_record_follows_its_rule(
    key: bytes | None, headers: list[tuple[str, bytes]], header: str | None, want: str | None
) -> None:
    assert conversation_of(key, headers, header) == want


some_bytes = st.one_of(st.binary(max_size=6), st.text(max_size=4).map(str.encode), st.just(b"\xed\xa0\x80"))


@given(
    st.none() | some_bytes,
    st.lists(st.tuples(st.sampled_from(["conv", "other", "Conv"]), some_bytes), max_size=4),
    st.none() | st.sampled_from(["conv", "other"]),
)
def test_any_record_s_conversation_is_what_the_rule_says_on_both_paths(
    key: bytes | None, headers: list[tuple[str, bytes]], header: str | None
) -> None:
    """The rule as its documentation states it (an oracle written here, not the product's code), against the one
    implementation through both of its callers: replay's ``conversation_of`` and the worker's intake."""

    def utf8(b: bytes) -> str | None:
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            return None

    want = utf8(key) if key else None
    if want is None and header is not None:
        valued = [value for name, value in headers if name == header and value]
        want = utf8(valued[0]) if valued else None
    taken = take_in(
        {TopicPartition("in", 0): [Rec(1, b"x", key=key, headers=headers)]}, {"in": header}, Watermarks(), 0
    )
    assert conversation_of(key, headers, header) == want
    assert taken[0].conversation == want


def test_a_record_s_headers_are_kept_as_names_and_bytes_and_its_missing_value_as_empty_bytes() -> None:
    marks = Watermarks()
    records = {
        TopicPartition("in", 3): [
            Rec(7, b"RW1 HO a-1", key=b"\xff", headers=[("conv", None), ("conv", b"c9"), ("x", bytearray(b"y"))]),
            Rec(8, None, key=None, headers=[("conv", b"\xff"), ("conv", b"c9")]),
        ]
    }
    lines = take_in(records, {"in": "conv"}, marks, now=2.5)
    assert [p.conversation for p in lines] == ["c9", None]  # a key not UTF-8: the header; a header not UTF-8: none
    assert lines[0].source.headers == (("conv", b""), ("conv", b"c9"), ("x", b"y"))
    assert (lines[0].source.topic, lines[0].source.partition, lines[0].source.offset) == ("in", 3, 7)
    assert (lines[0].route, lines[0].first_seen, lines[1].source.value) == ("in", 2.5, b"")
    assert marks.next_offset(("in", 3)) == 9
