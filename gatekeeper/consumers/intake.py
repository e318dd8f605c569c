"""Intake: consumed records become the worker's pending lines, each with its conversation.

The conversation of a record is its key (UTF-8), else the route's ``conversation_header``, else none (the decision
then dead-letters the line ``no-conversation``). Every record taken in moves its partition's read watermark.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from operator import attrgetter
from typing import Any

from aiokafka import TopicPartition

from gatekeeper.consumers.holds import TP, Pending, Watermarks
from gatekeeper.consumers.outcomes import Source


def conversation_of(key: bytes | None, headers: Iterable[tuple[str, bytes]], header: str | None) -> str | None:
    """The conversation of a record: its key (UTF-8), else the route's conversation header, else None."""
    if key:
        try:
            return key.decode("utf-8")
        except UnicodeDecodeError:
            pass
    if header is not None:
        for name, value in headers:
            if name == header and value:
                try:
                    return value.decode("utf-8")
                except UnicodeDecodeError:
                    return None
    return None


_OFFSET = attrgetter("offset")


def take_in(
    records: Mapping[TopicPartition, Sequence[Any]],
    conversation_headers: Mapping[str, str | None],
    watermarks: Watermarks,
    now: float,
) -> list[Pending]:
    """The pending lines of a fetch, in partition order; ``conversation_headers`` maps each input topic to its
    route's ``conversation_header``."""
    out: list[Pending] = []
    last: dict[TP, int] = {}
    for tp, recs in records.items():
        if not recs:
            continue
        topic, partition = tp.topic, tp.partition
        header = conversation_headers[topic]
        for r in recs:
            # the common record, as fast as it goes: no headers, a key that is the conversation, a value
            headers = tuple((str(k), bytes(v) if v is not None else b"") for k, v in r.headers) if r.headers else ()
            key, value = r.key, r.value
            source = Source(topic, partition, r.offset, value if value is not None else b"", key, r.timestamp, headers)
            if key and key.isascii():  # nearly every record: its key is its conversation, no decoding can fail
                conversation: str | None = key.decode("ascii")
            else:
                conversation = conversation_of(key, headers, header)
            out.append(Pending(source, topic, conversation, now))
        last[(tp.topic, tp.partition)] = max(map(_OFFSET, recs))
    # once a fetch, and only once every record of it is a pending line: none is passed before it is taken in
    for partition, offset in last.items():
        watermarks.consumed(partition, offset)
    return out


__all__ = ["conversation_of", "take_in"]
