"""Sending outcomes: the one produce path of the daemon, the sweeper and ``gatekeeper replay``.

    sender = OutcomeSender(kafka, settings.kafka, metrics)      # kafka: the seam (gatekeeper.consumers.client)
    await sender.start(output_topics)                          # reads the topics' max.message.bytes, starts
    fitted = sender.fit(outcome)                               # trimmed to fit its topic (None: it never fits)
    sends = [Send(fitted, route)]
    await sender.send(sends)                                   # handed over as record batches, not waited for
    await sender.produce(sends)                                # every one acknowledged (sent now if not yet), or raises
    await sender.publish(records)                              # the sweeper's cancels and the alerts, in order
    await sender.close()

    # exactly-once (kafka.transactional): a transactional producer per input partition this instance holds
    await sender.open(partitions)                              # at assignment: fences the partitions' old owners
    result = await sender.produce_transactions(sends, offsets, group_id)   # per partition: outcomes + offset, one txn
    await sender.release(partitions)                           # at revocation

**Record batches.** ``send`` builds the records into batches itself, one per output partition (more when one fills
``BATCH_BYTES``, or the smallest output topic's limit), placed as the producer's partitioner would place their key,
with one future per batch; the worker hands a batch's outcomes over this way and decides the next batch while they
are acknowledged. ``produce`` sends what was not handed over (and what failed) record by record.

**Acknowledged or raised.** ``produce`` returns when every send is acknowledged (``Send.acked``, ``Send.meta``). A
send still in flight from an earlier attempt is waited for, not repeated. Acknowledgements that do not come within
``kafka.request_timeout_ms`` raise ``ProduceTimeout`` (the sends stay in flight: the retry waits for them rather
than sending them twice); a broker error raises ``KafkaError`` after the producer is replaced (an idempotent
producer's sequence numbers may be out of step after a failure). The caller retries the same sends later: what was
acknowledged is not sent again.

**Too large is the line's fault, never the partition's.** An outcome is trimmed before it is sent when its topic's
``max.message.bytes`` is known (``fit``), and after a refusal otherwise: a refusal shared by several records (one
producer batch) may be one record's fault, so each is sent alone, in order; a record refused alone is trimmed one
level further (``Outcome.trimmed``); one that does not fit even trimmed to its coordinates is dropped, logged and
counted (``gatekeeper_outcomes_trimmed_total{kind="dropped"}``) and never blocks its partition.

**Exactly-once fences a zombie.** Each input partition has a transactional producer of its own, under the id
``<prefix>-<topic>-<partition>`` that every instance derives alike (``kafka.transactional_id_prefix``), started when the
partition is assigned (``open``): the broker then aborts the previous owner's open transaction and refuses that
producer from then on, however late a paused instance wakes up (the pattern of Kafka Streams' first exactly-once
mode; aiokafka sends no group generation with the offsets, so nothing else would stop it). A batch is one
transaction per input partition: its outcomes, and its offset (``send_offsets_to_transaction``). A partition whose
transaction was refused is *broken* when its producer was fenced, or the abort did not clear it: the producer is
closed and never started again before the next assignment (starting it again would fence the partition's real
owner if this instance is the zombie), and the caller drops that partition's work and rejoins the group. A
transaction that failed otherwise is aborted and tried again later on the same producer. The gatekeeper's own
records (``publish``: the sweeper's cancels, alerts) go through the idempotent producer: the sweeper's intents make
them safe against a zombie (``gatekeeper.sweeper``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, NoReturn, Protocol

import msgspec
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError, MessageSizeTooLargeError, ProducerFenced, RecordTooLargeError

from gatekeeper.config import KafkaSettings
from gatekeeper.consumers.client import Kafka, Producer
from gatekeeper.consumers.holds import TP
from gatekeeper.consumers.kafka import DEFAULT_MAX_MESSAGE_BYTES, transactional_id
from gatekeeper.consumers.outcomes import Outcome, fit
from gatekeeper.metrics import Metrics
from rwcore import _native

log = logging.getLogger(__name__)


#: The largest record batch the producers build (less when a topic's ``max.message.bytes`` is smaller): a batch's
#: outcomes for one partition fit in one (500 outcomes of about 600 bytes), so ``send`` never waits for an earlier
#: batch of the partition to leave, and a batch is one produce request, not a request per 16 KB (aiokafka sends one
#: request at a time per broker).
BATCH_BYTES = 512 * 1024


class ProduceTimeout(Exception):
    """Produce acknowledgements did not arrive within the request timeout (the broker is unavailable)."""


class Send(msgspec.Struct, eq=False):
    """One outcome on its way: acknowledged (``acked``, ``meta``: where the broker wrote it, ``.partition`` and
    ``.offset``) or not yet."""

    outcome: Outcome
    route: str
    fut: asyncio.Future[Any] | None = None
    acked: bool = False
    solo: bool = False  # sent alone (after a size refusal shared with others)
    index: int = -1  # its place in the record batch ``fut`` answers for (``send``); -1: ``fut`` is its own

    @property
    def meta(self) -> Any:
        """Where the broker wrote it (``.topic``, ``.partition``, ``.offset``), read from its acknowledgement when
        asked (only ``gatekeeper replay`` asks); None before, or for one dropped as too large to send."""
        if not self.acked or self.fut is None:
            return None
        meta = self.fut.result()
        return meta if self.index < 0 else Written(meta.topic, meta.partition, meta.offset + self.index)


class Written(NamedTuple):
    """Where a record of a batch was written: the batch's first offset plus the record's place in it."""

    topic: str
    partition: int
    offset: int


def partition_of(key: bytes, partitions: tuple[int, ...]) -> int:
    """The partition the producer's default partitioner (murmur2, as Kafka's Java client) gives ``key`` among a
    topic's ``partitions`` (sorted), computed natively (``_native.key_partition``). The sender places its record
    batches with it, and the sweeper finds where its cancels went."""
    return partitions[_native.key_partition(key, len(partitions))]


class Publishable(Protocol):
    """A record the gatekeeper publishes in its own name (``gatekeeper.sweeper.OutRecord``)."""

    @property
    def topic(self) -> str: ...

    @property
    def key(self) -> bytes: ...

    @property
    def value(self) -> bytes: ...

    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...

    @property
    def partition(self) -> int | None: ...


def too_large(exc: BaseException) -> bool:
    return isinstance(exc, MessageSizeTooLargeError | RecordTooLargeError)


def _failure(fut: asyncio.Future[Any] | None) -> BaseException | None:
    """The exception of a completed produce future (None: acknowledged)."""
    assert fut is not None and fut.done()
    if fut.cancelled():
        return asyncio.CancelledError()
    return fut.exception()


def describe(exc: BaseException) -> str:
    name, text = type(exc).__name__, str(exc)
    if not text:
        return name
    return text if text.startswith(name) else f"{name}: {text}"


class _TransactionFailed(Exception):
    def __init__(self, failures: list[tuple[Send, BaseException]]) -> None:
        super().__init__(f"{len(failures)} outcomes refused")
        self.failures = failures


class _Broken(Exception):
    """An input partition's transactional producer is gone: fenced, or in a state no abort clears."""


@dataclass
class Transactions:
    """What ``produce_transactions`` did, per input partition. A partition in none of the three had nothing to
    write."""

    committed: dict[TP, int] = field(default_factory=dict)  # its transaction committed, with this offset
    broken: dict[TP, str] = field(default_factory=dict)  # its producer is gone (why): drop its work and rejoin
    failed: dict[TP, BaseException] = field(default_factory=dict)  # aborted: tried again later, same producer

    @property
    def unfinished(self) -> set[TP]:
        return set(self.broken) | set(self.failed)


class OutcomeSender:
    """The producers, their topics' limits and the trimming: an idempotent producer, and in exactly-once mode one
    transactional producer per input partition held (``open``; replay never opens one: the input partitions'
    transactional ids are the daemon's)."""

    def __init__(
        self,
        kafka: Kafka,
        settings: KafkaSettings,
        metrics: Metrics,
    ) -> None:
        self.kafka = kafka
        self.settings = settings
        self.metrics = metrics
        self.limits: dict[str, int] = {}
        self.max_batch_size = BATCH_BYTES
        self.timeout = settings.request_timeout_ms / 1000
        self._producer: Producer | None = None
        self._transactional: dict[TP, Producer] = {}  # exactly-once: each held input partition's own producer
        self._opening = asyncio.Lock()  # one open at a time: two producers of one id would fence each other

    # ------------------------------------------------------------------------------------------------ lifecycle

    async def start(self, topics: Iterable[str]) -> None:
        """Read the topics' ``max.message.bytes`` (best effort) and start the producer, its batches no larger than
        the smallest limit."""
        wanted = set(topics)
        self.limits = await self.kafka.topic_limits(wanted)
        missing = sorted(wanted - set(self.limits))
        if missing:
            log.warning("output topics not described (missing?)", extra={"topics": missing})
        smallest = min([*self.limits.values(), DEFAULT_MAX_MESSAGE_BYTES])
        self.max_batch_size = max(1024, min(BATCH_BYTES, smallest - 128))
        await self.producer()

    async def producer(self) -> Producer:
        """The producer, started (a new one when the last reset could not start one)."""
        if self._producer is not None:
            return self._producer
        self._producer = await self._start(self.kafka.producer(max_batch_size=self.max_batch_size))
        return self._producer

    async def _start(self, producer: Producer) -> Producer:
        try:
            await asyncio.wait_for(producer.start(), self.timeout)
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.stop(), timeout=5.0)
            raise
        return producer

    @property
    def started(self) -> Producer | None:
        """The producer if one is running (no new one is made)."""
        return self._producer

    async def reset(self) -> None:
        """Replace the idempotent producer (a fresh producer id: sequence numbers in step again). Sends in flight
        on the old one are sent again by the next attempt."""
        old, self._producer = self._producer, None
        if old is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(old.stop(), timeout=10.0)
        await self.producer()

    async def close(self) -> None:
        await self.release(list(self._transactional))
        old, self._producer = self._producer, None
        if old is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(old.stop(), timeout=10.0)

    # ------------------------------------------------------------------------------------------------ exactly-once

    async def open(self, partitions: Iterable[TP]) -> set[TP]:
        """Start the transactional producer of each input partition that has none (concurrently; each start
        fences that partition's previous owner and waits for its open transaction to end). Returns the
        partitions that have one now; a start that fails is logged and left for a later call."""
        async with self._opening:
            return await self._open(set(partitions))

    async def _open(self, partitions: set[TP]) -> set[TP]:
        todo = sorted(partitions - set(self._transactional))

        async def one(tp: TP) -> None:
            topic, partition = tp
            producer = self.kafka.producer(
                max_batch_size=self.max_batch_size,
                transactional_id=transactional_id(self.settings, topic, partition),
            )
            self._transactional[tp] = await self._start(producer)

        results = await asyncio.gather(*(one(tp) for tp in todo), return_exceptions=True)
        for tp, result in zip(todo, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result
                log.warning(
                    "an input partition's transactional producer did not start; tried again later",
                    extra={"topic": tp[0], "partition": tp[1], "error": describe(result)},
                )
        return set(self._transactional) & set(partitions)

    @property
    def opened(self) -> set[TP]:
        """The input partitions that have their transactional producer."""
        return set(self._transactional)

    async def release(self, partitions: Iterable[TP]) -> None:
        """Stop the transactional producers of these input partitions (revoked, or broken)."""
        producers = [self._transactional.pop(tp) for tp in set(partitions) if tp in self._transactional]
        for producer in producers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.stop(), timeout=10.0)

    # ------------------------------------------------------------------------------------------------ trimming

    def fit(self, outcome: Outcome, *, headroom: int = 0) -> Outcome | None:
        """Trim an outcome until it fits its topic's ``max.message.bytes`` (as far as the limit is known), less
        ``headroom`` bytes the caller adds after; None, logged and counted, when it does not fit even trimmed to its
        coordinates."""
        limit = min(self.limits.get(outcome.topic, DEFAULT_MAX_MESSAGE_BYTES), DEFAULT_MAX_MESSAGE_BYTES) - headroom
        # nearly every outcome fits as it was built, its size estimated by the engine that built it (``size``
        # computes it for one that was not): this runs for every record
        estimate = outcome.estimate
        if outcome.level == 0 and (estimate if estimate >= 0 else outcome.size) <= limit:
            return outcome
        current = fit(outcome, limit)
        if current is None:
            self._dropped(outcome)
        elif current.level:
            self._trimmed(current)
        return current

    def _trimmed(self, o: Outcome) -> None:
        route = o.source.topic
        self.metrics.trimmed.labels(route=route, kind=o.kind.value).inc()
        log.warning(
            "outcome trimmed to fit its topic",
            extra={"route": route, "topic": o.topic, "level": o.level, "offset": o.source.offset},
        )

    def _dropped(self, o: Outcome) -> None:
        log.error(
            "an outcome does not fit its topic even trimmed to its coordinates: not produced; the input record "
            "is still at its coordinates",
            extra={
                "route": o.source.topic,
                "topic": o.topic,
                "partition": o.source.partition,
                "offset": o.source.offset,
            },
        )
        self.metrics.trimmed.labels(route=o.source.topic, kind="dropped").inc()

    def _after_size_refusals(self, refused: Sequence[Send]) -> None:
        """A refusal shared by several records may be one record's fault: each is sent alone first; a record
        refused alone is trimmed one level further."""
        alone = len(refused) == 1
        for s in refused:
            s.fut = None
            if s.solo or alone:
                nxt = s.outcome.trimmed()
                if nxt is None:
                    self._dropped(s.outcome)
                    s.acked = True  # nothing more can be done: counted, logged, and never blocking the partition
                    continue
                s.outcome = nxt
                self._trimmed(nxt)
            s.solo = True

    # ------------------------------------------------------------------------------------------------ sending

    async def _send(self, s: Send, producer: Producer | None) -> None:
        if producer is None:
            producer = await self.producer()
        o = s.outcome
        s.index = -1
        try:
            s.fut = await producer.send(o.topic, o.value, key=o.key, headers=list(o.headers))
        except (MessageSizeTooLargeError, RecordTooLargeError) as exc:  # refused before it left
            fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            fut.set_exception(exc)
            s.fut = fut

    async def _send_all(
        self, sends: Sequence[Send], producer: Producer | None = None
    ) -> list[tuple[Send, BaseException]]:
        """Send what is not acknowledged yet (on ``producer``, default the idempotent one) and wait for the
        acknowledgements. Returns the failures; raises ``ProduceTimeout`` when the acknowledgements do not come
        within the request timeout."""
        todo = [s for s in sends if not s.acked]
        group = [s for s in todo if not s.solo]
        for s in group:
            if s.fut is None:  # one sent before that failed is a failure below: the producer is replaced first
                await self._send(s, producer)
        # a record batch's records share its future: each future is waited for and read once
        futs = {id(s.fut): s.fut for s in group if s.fut is not None}
        waiting = [f for f in futs.values() if not f.done()]  # most are, when the batch after was decided meanwhile
        if waiting:
            _, pending = await asyncio.wait(waiting, timeout=self.timeout)
            if pending:
                raise ProduceTimeout(
                    f"{len(pending)} of {len(futs)} produce requests not acknowledged in {self.timeout}s"
                )
        errors = {k: _failure(f) for k, f in futs.items()}
        failures: list[tuple[Send, BaseException]] = []
        for s in group:
            exc = errors[id(s.fut)]
            if exc is None:
                s.acked = True
            else:
                failures.append((s, exc))
        # Records sent alone, in their order; the first refusal stops the rest, so the order on a partition holds.
        for s in (s for s in todo if s.solo):
            if s.fut is None or _failure(s.fut) is not None:
                await self._send(s, producer)
            assert s.fut is not None
            _, pending = await asyncio.wait([s.fut], timeout=self.timeout)
            if pending:
                raise ProduceTimeout(f"a produce request not acknowledged in {self.timeout}s")
            exc = _failure(s.fut)
            if exc is not None:
                failures.append((s, exc))
                break
            s.acked = True
        return failures

    async def send(self, sends: Sequence[Send]) -> None:
        """Hand the records to the idempotent producer without waiting for their acknowledgements: ``produce``
        waits for them (and sends again what failed). They go as record batches made in one native call per
        partition (``Kafka.record_batches``; more than one when one fills), each with one future for all of its
        records: the producer's per-record path makes a future, a coroutine and a partitioner call for each, and its
        batch builder a list of each record's headers. A record to be sent alone (after a size refusal) is left to
        ``produce``, which sends those one at a time."""
        producer = await self.producer()
        partitions: dict[str, tuple[int, ...]] = {}
        by_partition: dict[tuple[str, int], list[Send]] = {}
        for s in sends:
            if s.acked or s.solo or s.fut is not None:
                continue
            o = s.outcome
            if o.key is None:  # no key to place it by: the producer's partitioner picks one
                await self._send(s, producer)
                continue
            known = partitions.get(o.topic)
            if known is None:
                known = partitions[o.topic] = tuple(sorted(await producer.partitions_for(o.topic)))
            by_partition.setdefault((o.topic, partition_of(o.key, known)), []).append(s)
        for (topic, partition), group in by_partition.items():
            start = 0
            for batch in self.kafka.record_batches([s.outcome for s in group], self.max_batch_size):
                members = group[start : start + batch.record_count()]
                start += len(members)
                fut = await producer.send_batch(batch, topic, partition=partition)
                for i, s in enumerate(members):
                    s.index = i
                    s.fut = fut

    async def produce(self, sends: Sequence[Send]) -> None:
        """Send until every one is acknowledged (size refusals trimmed and sent again at once); raises
        ``KafkaError`` or ``ProduceTimeout`` for the caller to retry later."""
        while True:
            failures = await self._send_all(sends)  # a timeout raises: what is in flight is waited for next time
            if not failures:
                return
            # a failed produce may leave the idempotent producer's sequence numbers out of step: start a new one
            await self.reset()
            refused = [s for s, exc in failures if too_large(exc)]
            if refused:
                self._after_size_refusals(refused)
            others = [exc for _, exc in failures if not too_large(exc)]
            for s, _ in failures:
                s.fut = None
            if others:
                exc = others[0]
                if isinstance(exc, KafkaError):
                    raise exc
                raise KafkaError(describe(exc))

    async def produce_transactions(
        self, sends: Sequence[Send], offsets: Callable[[], Mapping[TP, int]], group_id: str
    ) -> Transactions:
        """Exactly-once: per input partition, its ``sends`` and its consumer offset (from ``offsets()``) in one
        transaction on the partition's own producer; the partitions' transactions run concurrently. Size refusals
        abort, trim and try again within. A partition without its producer is reported broken."""
        committing = dict(offsets())
        by_partition: dict[TP, list[Send]] = {}
        for s in sends:
            src = s.outcome.source
            by_partition.setdefault((src.topic, src.partition), []).append(s)
        todo = sorted(set(by_partition) | set(committing))
        done = Transactions()
        results = await asyncio.gather(
            *(self._transaction(tp, by_partition.get(tp, []), committing.get(tp), group_id) for tp in todo),
            return_exceptions=True,
        )
        for tp, result in zip(todo, results, strict=True):
            if isinstance(result, _Broken):
                done.broken[tp] = str(result)
            elif isinstance(result, Exception):
                done.failed[tp] = result
            elif isinstance(result, BaseException):
                raise result
            elif result is not None:
                done.committed[tp] = result
        return done

    async def _transaction(self, tp: TP, sends: Sequence[Send], offset: int | None, group_id: str) -> int | None:
        """One input partition's transaction: its outcomes, then its offset. Returns the offset committed."""
        producer = self._transactional.get(tp)
        if producer is None:
            raise _Broken("no transactional producer (not started since the assignment)")
        while True:
            for s in sends:
                s.acked, s.fut = False, None
            try:
                await producer.begin_transaction()
                failures = await self._send_all(sends, producer)
                if failures:
                    raise _TransactionFailed(failures)
                if offset is not None:
                    await asyncio.wait_for(
                        producer.send_offsets_to_transaction({TopicPartition(*tp): offset}, group_id),
                        timeout=self.timeout,
                    )
                await asyncio.wait_for(producer.commit_transaction(), timeout=self.timeout)
                return offset
            except ProducerFenced as exc:
                await self._break(tp, f"fenced: another producer took transactional id over ({describe(exc)})")
            except _TransactionFailed as failed:
                await self._abort(tp, producer)
                refused = [s for s, exc in failed.failures if too_large(exc)]
                if refused:
                    self._after_size_refusals(refused)
                others = [exc for _, exc in failed.failures if not too_large(exc)]
                if others:
                    first = others[0]
                    raise (first if isinstance(first, KafkaError) else KafkaError(describe(first))) from None
            except (KafkaError, ProduceTimeout, TimeoutError) as exc:
                await self._abort(tp, producer)
                if isinstance(exc, TimeoutError):
                    raise ProduceTimeout("the transaction did not complete in time") from exc
                raise

    async def _abort(self, tp: TP, producer: Producer) -> None:
        """Abort the partition's transaction, so its producer can begin the next; one that cannot is broken."""
        try:
            await asyncio.wait_for(producer.abort_transaction(), timeout=5.0)
        except Exception as exc:
            await self._break(tp, f"its transaction could not be aborted ({describe(exc)})")

    async def _break(self, tp: TP, why: str) -> NoReturn:
        await self.release([tp])
        raise _Broken(why)

    async def publish(self, records: Sequence[Publishable]) -> list[int]:
        """Publish the gatekeeper's own records (the idempotent producer, never in a transaction) and wait until
        every one is acknowledged; their offsets, in order. Raises on failure, after replacing the producer (none,
        some or all may have been written: the sweeper's intents cover that)."""
        producer = await self.producer()
        try:
            futures = [
                await producer.send(r.topic, r.value, key=r.key, headers=list(r.headers), partition=r.partition)
                for r in records
            ]
            metas = [await asyncio.wait_for(f, self.timeout) for f in futures]
        except BaseException:
            with contextlib.suppress(Exception):
                await self.reset()
            raise
        return [int(m.offset) for m in metas]


__all__ = [
    "BATCH_BYTES",
    "OutcomeSender",
    "ProduceTimeout",
    "Publishable",
    "Send",
    "Transactions",
    "Written",
    "describe",
    "partition_of",
    "too_large",
]
