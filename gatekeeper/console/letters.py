"""The console's dead letters: a record of a route's dead-letter topic taken apart for a reader (its ``gk.*``
headers in words, the line masked), the filters of the page, and a bounded reader of the topic's newest records.

The reader is one consumer the console keeps (no group: manual assignment, nothing committed, the daemon's group is
never touched), used by one page at a time, and paused between pages: for each partition it reads at most
``per_partition`` of the newest records, up to the end offsets seen when the page asked, within ``timeout`` seconds.
A page therefore costs the broker a bounded fetch, and the worker nothing (the console runs in the HTTP process).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.config import Route, Settings
from gatekeeper.masking import Masker, masker_for

#: What each header the gatekeeper writes on a dead letter means, in words (docs/headers.md has the whole table).
HEADER_MEANINGS: Mapping[str, str] = {
    "gk.original.topic": "the input topic the line was published to",
    "gk.original.partition": "its partition on the input topic",
    "gk.original.offset": "its offset there: the line's identity, shared by every copy of this letter",
    "gk.original.timestamp": "when it was published (epoch milliseconds)",
    "gk.version": "the gatekeeper release that decided it",
    "gk.conversation": "the conversation (the record's key)",
    "gk.repeated": "the verdict is the stored first decision, returned again (the line was consumed twice)",
    "gk.notes": "what the checks noted without refusing",
    "gk.reason": "why it was held: the reason code",
    "gk.problems": "the check's findings (code, tier, slot, expected, got), sensitive values masked",
    "gk.check": "the check that refused it",
    "gk.tier": "the tier of the first problem",
    "gk.attempt": "1 for the daemon's dead letter, one more for each replay that requeued it",
    "gk.decided.at": "when the first decision about the line was made",
    "gk.notice.id": "the refusal notice the sender was sent (absent: none was)",
    "gk.trimmed": "what was trimmed to fit the topic",
    "gk.value.omitted": "the line was too large even alone; the original is on the input topic",
    "gk.replayed.from.topic": "a replay requeued this copy from that topic",
    "gk.replayed.from.partition": "from that partition",
    "gk.replayed.from.offset": "from that offset",
    "gk.replayed.at": "when the replay requeued it",
    "gk.parked": "requeued at its last attempt: a replay skips it unless told to include parked letters",
    "gk.parked.at": "when it was parked",
}

_FROM_RE = re.compile(r"(?:^|\s)from=(\S+)")
_HEAD_RE = re.compile(r"^RW1 ([A-Z]{2}) (\S+)")


@dataclass(frozen=True, slots=True)
class Header:
    name: str
    value: str
    meaning: str


@dataclass(frozen=True, slots=True)
class Letter:
    """One dead letter as the console shows it; ``line`` and the problems masked unless the reader may unmask."""

    partition: int
    offset: int
    timestamp: float  # epoch seconds (the dead-letter record's)
    route: str | None
    conversation: str | None
    reason: str | None
    check: str | None
    attempt: int
    parked: bool
    type: str | None
    id: str | None
    sender: str | None
    line: str
    problems: tuple[dict[str, Any], ...] = ()
    headers: tuple[Header, ...] = field(default_factory=tuple)

    @property
    def letter(self) -> str:
        """Its place on the topic, as ``--letter`` takes it."""
        return f"{self.partition}:{self.offset}"


def _text(raw: bytes | None) -> str:
    return "" if raw is None else raw.decode("utf-8", errors="replace")


def letter_of(
    partition: int,
    offset: int,
    timestamp_ms: int | None,
    value: bytes | None,
    headers: Iterable[tuple[str, bytes]],
    sensitive: Collection[str],
    *,
    unmask: bool = False,
) -> Letter:
    """A dead-letter record taken apart. Its problems header is read as the gatekeeper wrote it (masked already);
    the line is masked here unless ``unmask``."""
    hs = [(k, _text(v)) for k, v in headers]
    got = dict(hs)
    line = _text(value)
    masker: Masker = masker_for(line, (), sensitive)
    shown = line if unmask else masker.text(line)
    head = _HEAD_RE.match(line)
    sender = _FROM_RE.search(line)
    try:
        problems = tuple(p for p in json.loads(got.get("gk.problems") or "[]") if isinstance(p, dict))
    except ValueError:
        problems = ()
    attempt = got.get("gk.attempt", "")
    return Letter(
        partition=partition,
        offset=offset,
        timestamp=(timestamp_ms or 0) / 1000.0,
        route=got.get("gk.original.topic"),
        conversation=got.get("gk.conversation"),
        reason=got.get("gk.reason"),
        check=got.get("gk.check"),
        attempt=int(attempt) if attempt.isdecimal() and attempt.isascii() else 0,
        parked="gk.parked" in got,
        type=None if head is None else head.group(1),
        id=None if head is None else head.group(2),
        sender=None if sender is None else sender.group(1),
        line=shown,
        problems=problems,
        headers=tuple(
            Header(k, v if unmask or not k.startswith("gk.") else masker.text(v), HEADER_MEANINGS.get(k, ""))
            for k, v in hs
            if k.startswith("gk.")
        ),
    )


@dataclass(frozen=True, slots=True)
class LetterFilter:
    """The dead-letter page's filters; None or empty: any."""

    reason: str | None = None
    agent: str | None = None
    conversation: str | None = None
    since: float | None = None  # epoch seconds

    def matches(self, letter: Letter) -> bool:
        if self.reason and letter.reason != self.reason:
            return False
        if self.agent and letter.sender != self.agent:
            return False
        if self.conversation and letter.conversation != self.conversation:
            return False
        return self.since is None or letter.timestamp >= self.since


class LetterReader:
    """The console's one consumer of dead-letter topics (see the module docstring). ``start`` connects; ``close``
    stops it. One read at a time (a lock): the console's in-flight limit bounds how many pages wait."""

    def __init__(self, settings: Settings, *, per_partition: int = 500, timeout: float = 3.0) -> None:
        self.settings = settings
        self.per_partition = per_partition
        self.timeout = timeout
        self._consumer: Any = None
        self._lock = asyncio.Lock()

    async def _ensure(self) -> Any:
        if self._consumer is None:
            from gatekeeper.admin import reader_consumer

            # fetch_max_wait_ms: a page waits for what is there, not for more to arrive
            consumer = reader_consumer(self.settings.kafka, "console", fetch_max_wait_ms=20)
            try:
                await asyncio.wait_for(consumer.start(), self.timeout)
            except BaseException:
                with contextlib.suppress(Exception):
                    await consumer.stop()
                raise
            self._consumer = consumer
        return self._consumer

    async def partitions(self, topic: str) -> list[int]:
        """The partition numbers of ``topic`` (from the client's metadata; raises ``TopicError`` when missing)."""
        from gatekeeper.admin import topic_partitions

        async with self._lock:
            consumer = await self._ensure()
            return await topic_partitions(consumer, self.settings.kafka, topic, self.timeout)

    async def close(self) -> None:
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._consumer.stop(), timeout=5.0)
            self._consumer = None

    async def newest(
        self, route: Route, sensitive: Iterable[str], *, unmask: bool = False
    ) -> tuple[list[Letter], bool]:
        """The newest dead letters of ``route`` (at most ``per_partition`` a partition), newest first, and whether
        older ones were left out. Raises ``TimeoutError`` or a Kafka error when the broker does not answer."""
        from aiokafka import TopicPartition

        from gatekeeper.admin import topic_partitions

        slots = frozenset(sensitive)
        async with self._lock:
            consumer = await self._ensure()
            topic = route.dead_letter
            parts = await topic_partitions(consumer, self.settings.kafka, topic, self.timeout)
            tps = [TopicPartition(topic, p) for p in parts]
            if not tps:
                return [], False
            if consumer.assignment() != set(tps):
                consumer.assign(tps)
            consumer.resume(*tps)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.timeout
            begin = await asyncio.wait_for(consumer.beginning_offsets(tps), self.timeout)
            end = await asyncio.wait_for(consumer.end_offsets(tps), self.timeout)
            older = False
            wanted = {}
            for tp in tps:
                start = max(begin[tp], end[tp] - self.per_partition)
                older = older or start > begin[tp]
                if start < end[tp]:
                    consumer.seek(tp, start)
                    wanted[tp] = end[tp]
            out: list[Letter] = []
            while wanted and loop.time() < deadline:
                batches = await consumer.getmany(*wanted, timeout_ms=200, max_records=1000)
                for tp, records in batches.items():
                    for rec in records:
                        if rec.offset < wanted.get(tp, -1):
                            out.append(
                                letter_of(
                                    tp.partition,
                                    rec.offset,
                                    rec.timestamp,
                                    rec.value,
                                    rec.headers,
                                    slots,
                                    unmask=unmask,
                                )
                            )
                for tp in list(wanted):
                    if await consumer.position(tp) >= wanted[tp]:
                        del wanted[tp]
            # paused between pages: no fetch waits at the broker, so the next page's offset requests do not queue
            # behind one (and the broker is not polled while nobody reads)
            consumer.pause(*tps)
            if wanted:
                raise TimeoutError(f"the dead-letter topic {topic} was not read to its end in {self.timeout:g} s")
        out.sort(key=lambda x: (x.timestamp, x.partition, x.offset), reverse=True)
        return out, older


__all__ = ["HEADER_MEANINGS", "Header", "Letter", "LetterFilter", "LetterReader", "letter_of"]
