"""An in-memory Kafka behind the gatekeeper's seam (``gatekeeper.consumers.client.Kafka``), for unit tests of
retries, trimming and commit order. The real broker's behaviour the worker depends on is modelled, no more:

- topics of partitions of records; a record's offset is its index; ``highwater`` is the partition's length;
- one consumer group: the consumer is assigned every partition of its topics at start (the listener is told),
  reads from the committed offset, honours ``pause``/``resume``/``seek``, and ``commit`` stores offsets;
- the producer batches the records sent to one partition in one turn of the event loop (as aiokafka's
  accumulator does): the broker refuses the whole batch with ``MessageSizeTooLargeError`` when one record is larger
  than its topic's ``max.message.bytes``, appends it otherwise;
- injectable trouble: ``fail_sends`` (the next N sends' batches fail with ``KafkaConnectionError``), ``hold_acks``
  (acknowledgements wait until released: a produce timeout), ``fail_commits`` (the next N commits fail);
- transactions: records and offsets of a transaction become visible only when it commits; an abort drops both.
  A producer started under a transactional id fences the one that had it (its open transaction dropped, its next
  call raising ``ProducerFenced``), as the broker's transaction coordinator does;
- ``rejoin()``: every partition revoked, then assigned again (the listener hears both), read from its committed
  offset.

``events`` records, in order, every acknowledged record (``("ack", topic, partition, offset)``) and every commit
(``("commit", topic, partition, offset)``), so a test can see that a commit never passes an unacknowledged record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, MessageSizeTooLargeError, ProducerFenced

from rwcore import _native

KeptHeaders = tuple[tuple[str, bytes], ...] | _native.Headers


def kept(headers: Iterable[tuple[str, bytes]] | None) -> KeptHeaders:
    """A record's headers as the fake broker keeps them: the engine's as they are (immutable bytes, as a broker keeps
    them), any others as a tuple of their pairs."""
    return headers if isinstance(headers, _native.Headers) else tuple(headers or ())


@dataclass
class FakeRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: KeptHeaders = ()
    timestamp: int | None = 1_790_000_000_000


@dataclass
class RecordMetadata:
    topic: str
    partition: int
    offset: int


@dataclass
class Cluster:
    """The broker's state, shared by the clients a ``FakeKafka`` makes."""

    partitions: dict[str, int] = field(default_factory=dict)
    limits: dict[str, int] = field(default_factory=dict)  # max.message.bytes the broker enforces
    describe_limits: bool = True  # False: topic_limits answers nothing (the worker learns by refusals)
    logs: dict[tuple[str, int], list[FakeRecord]] = field(default_factory=dict)
    committed: dict[tuple[str, int], int] = field(default_factory=dict)
    events: list[tuple[str, str, int, int]] = field(default_factory=list)
    fail_sends: int = 0
    fail_commits: int = 0
    hold_acks: asyncio.Event | None = None  # set: acknowledgements flow; unset: they wait
    transactional: dict[str, FakeProducer] = field(default_factory=dict)  # transactional id -> its producer
    refused_batches: int = 0
    batch_bytes: int = 16384  # a producer's record batch, as max_batch_size

    def create(self, topic: str, partitions: int = 1, max_message_bytes: int | None = None) -> None:
        self.partitions[topic] = partitions
        for p in range(partitions):
            self.logs[(topic, p)] = []
        if max_message_bytes is not None:
            self.limits[topic] = max_message_bytes

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None, headers: Any = ()) -> int:
        log = self.logs[(topic, partition)]
        log.append(FakeRecord(topic, partition, len(log), key, value, kept(headers)))
        return len(log) - 1

    def records(self, topic: str) -> list[FakeRecord]:
        return [r for p in range(self.partitions[topic]) for r in self.logs[(topic, p)]]

    def size(self, key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes]]) -> int:
        if isinstance(headers, _native.Headers):  # the engine's, not read as pairs (as a broker reads bytes)
            return 70 + len(key or b"") + len(value or b"") + headers.nbytes + 10 * len(headers)
        return 70 + len(key or b"") + len(value or b"") + sum(len(k) + len(v) + 10 for k, v in headers)


class FakeConsumer:
    def __init__(self, cluster: Cluster, topics: Iterable[str], listener: Any) -> None:
        self.cluster = cluster
        self.topics = sorted(set(topics))
        self.listener = listener
        self._assigned: set[TopicPartition] = set()
        self._paused: set[TopicPartition] = set()
        self._position: dict[TopicPartition, int] = {}
        self.rejoins = 0
        self._rejoining: asyncio.Future[None] | None = None

    async def start(self) -> None:
        self._assigned = {TopicPartition(t, p) for t in self.topics for p in range(self.cluster.partitions[t])}
        for tp in self._assigned:
            self._position[tp] = self.cluster.committed.get((tp.topic, tp.partition), 0)
        if self.listener is not None:
            await self.listener.on_partitions_assigned(set(self._assigned))

    async def stop(self) -> None:
        if self.listener is not None and self._assigned:
            await self.listener.on_partitions_revoked(set(self._assigned))
        self._assigned = set()

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[Any]]:
        out: dict[TopicPartition, list[Any]] = {}
        room = max_records if max_records is not None else 10_000
        for tp in sorted(self._assigned - self._paused):
            log = self.cluster.logs[(tp.topic, tp.partition)]
            pos = self._position[tp]
            take = log[pos : pos + room]
            if take:
                out[tp] = list(take)
                self._position[tp] = pos + len(take)
                room -= len(take)
            if room <= 0:
                break
        if not out:
            await asyncio.sleep(min(timeout_ms, 20) / 1000)
        return out

    def assignment(self) -> set[TopicPartition]:
        return set(self._assigned)

    def highwater(self, partition: TopicPartition) -> int | None:
        return len(self.cluster.logs[(partition.topic, partition.partition)])

    def pause(self, *partitions: TopicPartition) -> None:
        self._paused |= set(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._paused -= set(partitions)

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._position[partition] = offset

    async def seek_to_committed(self, *partitions: TopicPartition) -> dict[TopicPartition, int | None]:
        got: dict[TopicPartition, int | None] = {}
        for tp in partitions:
            got[tp] = self.cluster.committed.get((tp.topic, tp.partition))
            self._position[tp] = got[tp] or 0
        return got

    def rejoin(self) -> None:
        self.rejoins += 1

        async def again() -> None:
            assigned = set(self._assigned)
            if self.listener is not None:
                await self.listener.on_partitions_revoked(assigned)
            for tp in assigned:
                self._position[tp] = self.cluster.committed.get((tp.topic, tp.partition), 0)
            if self.listener is not None:
                await self.listener.on_partitions_assigned(assigned)

        self._rejoining = asyncio.ensure_future(again())

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        if self.cluster.fail_commits > 0:
            self.cluster.fail_commits -= 1
            raise KafkaConnectionError("commit: connection refused (fake)")
        for tp, off in offsets.items():
            self.cluster.committed[(tp.topic, tp.partition)] = off
            self.cluster.events.append(("commit", tp.topic, tp.partition, off))


class FakeBatch:
    """A record batch in memory (``Kafka.record_batches``): records up to ``Cluster.batch_bytes`` (the first always
    goes in), as the real batches are filled up to the size asked for."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.records: list[tuple[bytes | None, bytes | None, KeptHeaders]] = []
        self.bytes = 0

    def append(self, key: bytes | None, value: bytes | None, headers: Any) -> bool:
        size = self.cluster.size(key, value, headers)
        if self.records and self.bytes + size > self.cluster.batch_bytes:
            return False
        self.records.append((key, value, kept(headers)))
        self.bytes += size
        return True

    def record_count(self) -> int:
        return len(self.records)


class FakeProducer:
    def __init__(self, cluster: Cluster, transactional_id: str | None) -> None:
        self.cluster = cluster
        self.batches_sent = 0
        self.transactional_id = transactional_id
        self.started = False
        self.stopped = False
        self.fenced = False
        self._batches: dict[tuple[str, int], list[tuple[Any, asyncio.Future[Any]]]] = {}
        self._flush: asyncio.Handle | None = None
        self._txn: list[tuple[tuple[str, int], Any, asyncio.Future[Any]]] | None = None
        self._txn_offsets: dict[tuple[str, int], int] = {}

    async def start(self) -> None:
        self.started = True
        if self.transactional_id is not None:
            old = self.cluster.transactional.get(self.transactional_id)
            if old is not None and old is not self:
                old.fenced, old._txn = True, None
            self.cluster.transactional[self.transactional_id] = self

    def _check(self) -> None:
        assert self.transactional_id is not None, "a transaction on an idempotent producer"
        if self.fenced:
            raise ProducerFenced()

    async def stop(self) -> None:
        self.stopped = True

    async def partitions_for(self, topic: str) -> set[int]:
        return set(range(self.cluster.partitions[topic]))

    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Iterable[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future[Any]:
        assert self.started and not self.stopped, "send on a producer that is not running"
        if self.fenced:
            raise ProducerFenced()
        if partition is None:
            partition = (sum(key or b"") % self.cluster.partitions[topic]) if key else 0
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._batches.setdefault((topic, partition), []).append(((key, value, kept(headers)), fut))
        if self._flush is None:
            self._flush = asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(self._deliver()))
        return fut

    async def send_batch(self, batch: FakeBatch, topic: str, *, partition: int) -> asyncio.Future[Any]:
        """The batch's records as ``send`` takes them (delivered, refused or failed together with what else is
        pending for the partition); its future is the first record's metadata, as aiokafka's is."""
        assert partition in range(self.cluster.partitions[topic]), "send_batch to a partition the topic lacks"
        self.batches_sent += 1
        futs = [
            await self.send(topic, value, key=key, partition=partition, headers=headers)
            for key, value, headers in batch.records
        ]
        whole: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def settle(_: asyncio.Future[Any]) -> None:
            if whole.done() or not all(f.done() for f in futs):
                return
            failed = next((f for f in futs if f.cancelled() or f.exception() is not None), None)
            if failed is None:
                whole.set_result(futs[0].result())
            else:
                whole.set_exception(failed.exception() or asyncio.CancelledError())

        for f in futs:
            f.add_done_callback(settle)
        return whole

    async def _deliver(self) -> None:
        self._flush = None
        batches, self._batches = self._batches, {}
        if self.cluster.hold_acks is not None:
            await self.cluster.hold_acks.wait()
        for (topic, partition), items in batches.items():
            if self.fenced:  # fenced while the records were on their way: the broker refuses them
                for _, fut in items:
                    if not fut.done():
                        fut.set_exception(ProducerFenced())
                continue
            if self.cluster.fail_sends > 0:
                self.cluster.fail_sends -= 1
                for _, fut in items:
                    if not fut.done():
                        fut.set_exception(KafkaConnectionError("produce: connection refused (fake)"))
                continue
            limit = self.cluster.limits.get(topic)
            if limit is not None and any(self.cluster.size(*rec) > limit for rec, _ in items):
                self.cluster.refused_batches += 1
                for _, fut in items:
                    if not fut.done():
                        fut.set_exception(MessageSizeTooLargeError("the batch is larger than max.message.bytes"))
                continue
            for rec, fut in items:
                if fut.done():
                    continue
                if self._txn is not None:
                    self._txn.append(((topic, partition), rec, fut))
                    fut.set_result(RecordMetadata(topic, partition, -1))
                    continue
                offset = self.cluster.append(topic, partition, *rec)
                self.cluster.events.append(("ack", topic, partition, offset))
                fut.set_result(RecordMetadata(topic, partition, offset))

    async def begin_transaction(self) -> None:
        self._check()
        self._txn, self._txn_offsets = [], {}

    async def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, int], group_id: str) -> None:
        self._check()
        assert self._txn is not None
        self._txn_offsets.update({(tp.topic, tp.partition): off for tp, off in offsets.items()})

    async def commit_transaction(self) -> None:
        self._check()
        assert self._txn is not None
        if self.cluster.fail_commits > 0:
            self.cluster.fail_commits -= 1
            self._txn = None
            raise KafkaTimeoutError("commit_transaction: timed out (fake)")
        for (topic, partition), rec, _ in self._txn:
            offset = self.cluster.append(topic, partition, *rec)
            self.cluster.events.append(("ack", topic, partition, offset))
        for (topic, partition), off in self._txn_offsets.items():
            self.cluster.committed[(topic, partition)] = off
            self.cluster.events.append(("commit", topic, partition, off))
        self._txn = None

    async def abort_transaction(self) -> None:
        self._check()
        self._txn = None


class FakeKafka:
    """``gatekeeper.consumers.client.Kafka`` in memory."""

    def __init__(self, cluster: Cluster | None = None) -> None:
        self.cluster = cluster if cluster is not None else Cluster()
        self.producers: list[FakeProducer] = []

    def consumer(self, topics: Iterable[str], listener: Any) -> FakeConsumer:
        return FakeConsumer(self.cluster, topics, listener)

    def producer(self, *, max_batch_size: int | None = None, transactional_id: str | None = None) -> FakeProducer:
        producer = FakeProducer(self.cluster, transactional_id)
        self.producers.append(producer)
        return producer

    def record_batches(self, records: Any, max_size: int) -> list[FakeBatch]:
        out = [FakeBatch(self.cluster)]
        for r in records:
            if not out[-1].append(r.key, r.value, r.headers):
                out.append(FakeBatch(self.cluster))
                out[-1].append(r.key, r.value, r.headers)
        return out if out[0].records else []

    async def topic_limits(self, topics: Iterable[str]) -> dict[str, int]:
        if not self.cluster.describe_limits:
            return {}
        return {t: self.cluster.limits.get(t, 1_048_576) for t in topics if t in self.cluster.partitions}

    async def probe(self, producer: Any) -> None:
        return None
