"""Intake: consumed records become the worker's pending lines, each with its conversation.

The conversation of a record is its key (UTF-8), else the route's ``conversation_header``, else none (the decision
then dead-letters the line ``no-conversation``). Every record taken in moves its partition's read watermark.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from aiokafka import TopicPartition

from gatekeeper.consumers.holds import TP, Pending, Watermarks
from gatekeeper.consumers.outcomes import Source
from rwcore import _native


def conversation_of(key: bytes | None, headers: Iterable[tuple[str, bytes]], header: str | None) -> str | None:
    """The conversation of a record: its key (UTF-8), else the first of its headers named ``header`` (the route's
    ``conversation_header``) that has a value, as UTF-8 (a value that is not: none), else None. The rule is the
    native intake's (``_native.conversation_of``): replay and the worker read a record's conversation alike."""
    return _native.conversation_of(key, headers, header)


def take_in(
    records: Mapping[TopicPartition, Sequence[Any]],
    conversation_headers: Mapping[str, str | None],
    watermarks: Watermarks,
    now: float,
) -> list[Pending]:
    """The pending lines of a fetch, in partition order; ``conversation_headers`` maps each input topic to its
    route's ``conversation_header``. A partition's records are taken in by one native call
    (``_native.take_in``: ``conversation_of``'s rule, each record's ``Source`` and ``Pending`` made there)."""
    out: list[Pending] = []
    last: dict[TP, int] = {}
    for tp, recs in records.items():
        if not recs:
            continue
        topic = tp.topic
        last[(topic, tp.partition)] = _native.take_in(
            recs, topic, tp.partition, conversation_headers[topic], now, Source, Pending, out
        )
    # once a fetch, and only once every record of it is a pending line: none is passed before it is taken in
    for partition, offset in last.items():
        watermarks.consumed(partition, offset)
    return out


__all__ = ["conversation_of", "take_in"]
