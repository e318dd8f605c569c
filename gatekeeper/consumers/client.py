"""The Kafka seam: the small typed interface the worker, the sweeper and replay use Kafka through.

    kafka = AioKafka(settings.kafka)                  # the real clients (aiokafka); tests use an in-memory fake
    consumer = kafka.consumer(topics, listener)       # a group member: fetch, pause/resume, seek, commit
    producer = kafka.producer(max_batch_size=16384)   # idempotent: send, send_batch (transactional_id=...: txns)
    batches = kafka.record_batches(records, 16384)    # one partition's records as batches for send_batch
    limits = await kafka.topic_limits(topics)         # each topic's max.message.bytes, as far as it is known
    await kafka.probe(producer)                       # raises KafkaError when the cluster does not answer

``Consumer`` and ``Producer`` are the subsets of aiokafka's ``AIOKafkaConsumer`` and ``AIOKafkaProducer`` that
the gatekeeper calls, so the real clients are used as they are; ``tests/unit/fake_kafka.py`` implements the same
protocols in memory (with injectable refusals and timeouts) for the unit tests of retries, trimming and commit
order. Errors are aiokafka's (``KafkaError`` and its subclasses): the fake raises the same ones.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from aiokafka import TopicPartition
from aiokafka.abc import ConsumerRebalanceListener

from gatekeeper.config import KafkaSettings


class Record(Protocol):
    """A consumed record (aiokafka's ``ConsumerRecord``)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int | None
    headers: Sequence[tuple[str, bytes]]


class Consumer(Protocol):
    """A member of the consumer group, committing by hand."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[Any]]: ...

    def assignment(self) -> set[TopicPartition]: ...

    def highwater(self, partition: TopicPartition) -> int | None: ...

    def pause(self, *partitions: TopicPartition) -> None: ...

    def resume(self, *partitions: TopicPartition) -> None: ...

    def paused(self) -> set[TopicPartition]: ...

    def seek(self, partition: TopicPartition, offset: int) -> None: ...

    async def seek_to_committed(self, *partitions: TopicPartition) -> dict[TopicPartition, int | None]: ...

    def rejoin(self) -> None:
        """Leave and rejoin the group: the partitions are revoked, then assigned again."""

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None: ...


class Outgoing(Protocol):
    """A record to produce (``gatekeeper.consumers.outcomes.Outcome`` is one)."""

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes: ...

    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


class RecordBatch(Protocol):
    """A closed batch of records for one partition (``Kafka.record_batches``), for ``Producer.send_batch``."""

    def record_count(self) -> int: ...


class Producer(Protocol):
    """An idempotent (``acks=all``) or transactional producer."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future[Any]: ...

    async def send_batch(self, batch: RecordBatch, topic: str, *, partition: int) -> asyncio.Future[Any]:
        """Queue a batch made by ``Kafka.record_batches`` (one future for all of its records: the metadata of its
        first)."""

    async def partitions_for(self, topic: str) -> set[int]: ...

    async def begin_transaction(self) -> None: ...

    async def commit_transaction(self) -> None: ...

    async def abort_transaction(self) -> None: ...

    async def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, int], group_id: str) -> None: ...


class Kafka(Protocol):
    """Makes the clients. One per gatekeeper; ``AioKafka`` is the real one."""

    def consumer(self, topics: Iterable[str], listener: ConsumerRebalanceListener | None) -> Consumer: ...

    def producer(self, *, max_batch_size: int | None = None, transactional_id: str | None = None) -> Producer:
        """An idempotent producer; transactional under ``transactional_id`` when one is given."""

    def record_batches(self, records: Sequence[Outgoing], max_size: int) -> Sequence[RecordBatch]:
        """One partition's ``records`` as batches for ``send_batch`` (an idempotent producer's: not transactional),
        in order: each under ``max_size`` bytes, a record that large alone in one; stamped now."""

    async def topic_limits(self, topics: Iterable[str]) -> dict[str, int]: ...

    async def probe(self, producer: Producer) -> None: ...


class AioKafka:
    """The real clients, from ``gatekeeper.consumers.kafka``'s factories (TLS, SASL, the group's settings)."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings

    def consumer(self, topics: Iterable[str], listener: ConsumerRebalanceListener | None) -> Consumer:
        from gatekeeper.consumers.kafka import make_consumer

        consumer: Consumer = make_consumer(self.settings, topics, listener=listener)
        return consumer

    def producer(self, *, max_batch_size: int | None = None, transactional_id: str | None = None) -> Producer:
        from gatekeeper.consumers.kafka import make_producer

        producer: Producer = make_producer(
            self.settings, max_batch_size=max_batch_size, transactional_id=transactional_id
        )
        return producer

    def record_batches(self, records: Sequence[Outgoing], max_size: int) -> Sequence[RecordBatch]:
        """Made natively (``rwcore._native.record_batches``: the bytes aiokafka's ``BatchBuilder`` writes, without
        its per-record Python); aiokafka's producer sends any object with its builder's methods."""
        from rwcore import _native

        return _native.record_batches(records, max_size, time.time_ns() // 1_000_000)

    async def topic_limits(self, topics: Iterable[str]) -> dict[str, int]:
        from gatekeeper.consumers.kafka import topic_limits

        return await topic_limits(self.settings, topics)

    async def probe(self, producer: Producer) -> None:
        await producer.client.fetch_all_metadata()  # type: ignore[attr-defined]  # aiokafka's own client


__all__ = ["AioKafka", "Consumer", "Kafka", "Outgoing", "Producer", "Record", "RecordBatch"]
