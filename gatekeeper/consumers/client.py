"""The Kafka seam: the small typed interface the worker, the sweeper and replay use Kafka through.

    kafka = AioKafka(settings.kafka)                  # the real clients (aiokafka); tests use an in-memory fake
    consumer = kafka.consumer(topics, listener)       # a group member: fetch, pause/resume, seek, commit
    producer = kafka.producer(max_batch_size=16384)   # idempotent: send, send_batch (transactional_id=...: txns)
    limits = await kafka.topic_limits(topics)         # each topic's max.message.bytes, as far as it is known
    await kafka.probe(producer)                       # raises KafkaError when the cluster does not answer

``Consumer`` and ``Producer`` are the subsets of aiokafka's ``AIOKafkaConsumer`` and ``AIOKafkaProducer`` that
the gatekeeper calls, so the real clients are used as they are; ``tests/unit/fake_kafka.py`` implements the same
protocols in memory (with injectable refusals and timeouts) for the unit tests of retries, trimming and commit
order. Errors are aiokafka's (``KafkaError`` and its subclasses): the fake raises the same ones.
"""

from __future__ import annotations

import asyncio
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


class RecordBatch(Protocol):
    """A batch of records for one partition, built by the caller (aiokafka's ``BatchBuilder``)."""

    def append(
        self, *, timestamp: int | None, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]]
    ) -> Any:
        """Add a record; None when the batch is full (its first record always goes in, whatever its size)."""

    def close(self) -> None: ...


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

    def create_batch(self) -> RecordBatch: ...

    async def send_batch(self, batch: RecordBatch, topic: str, *, partition: int) -> asyncio.Future[Any]:
        """Queue a batch built by ``create_batch`` (one future for all of its records: the metadata of its first)."""

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

    async def topic_limits(self, topics: Iterable[str]) -> dict[str, int]:
        from gatekeeper.consumers.kafka import topic_limits

        return await topic_limits(self.settings, topics)

    async def probe(self, producer: Producer) -> None:
        await producer.client.fetch_all_metadata()  # type: ignore[attr-defined]  # aiokafka's own client


__all__ = ["AioKafka", "Consumer", "Kafka", "Producer", "Record", "RecordBatch"]
