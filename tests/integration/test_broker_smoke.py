"""What the gatekeeper needs from the broker and Redis, proven against the real services.

- a consumer group with manual commits: a second member resumes after the committed offset;
- an idempotent producer (acks=all);
- a transaction that produces and commits the consumer's offsets (send_offsets_to_transaction), read back with
  read_committed, the group's offsets visible;
- an aborted transaction: read_committed never sees its record, read_uncommitted does;
- Redis: set/get, a pipeline, a hash-tagged key.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, NamedTuple

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import ConsumerRecord

from gatekeeper.config import KafkaSettings
from gatekeeper.consumers.client import AioKafka
from tests.fixtures_services import TopicFactory

pytestmark = pytest.mark.integration

TIMEOUT = 60.0


class Out(NamedTuple):
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]


def _group() -> str:
    return f"gk-test-group-{uuid.uuid4().hex[:8]}"


@asynccontextmanager
async def _producer(bootstrap: str, **kwargs: Any) -> AsyncIterator[AIOKafkaProducer]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **kwargs)
    await producer.start()
    try:
        yield producer
    finally:
        await producer.stop()


@asynccontextmanager
async def _consumer(bootstrap: str, *topics: str, **kwargs: Any) -> AsyncIterator[AIOKafkaConsumer]:
    kwargs.setdefault("auto_offset_reset", "earliest")
    kwargs.setdefault("enable_auto_commit", False)
    consumer = AIOKafkaConsumer(*topics, bootstrap_servers=bootstrap, **kwargs)
    await consumer.start()
    try:
        yield consumer
    finally:
        await consumer.stop()


async def _take(consumer: AIOKafkaConsumer, n: int) -> list[ConsumerRecord[bytes, bytes]]:
    """Exactly the next n records (in partition order), or a timeout."""
    got: list[ConsumerRecord[bytes, bytes]] = []
    async with asyncio.timeout(TIMEOUT):
        while len(got) < n:
            batches = await consumer.getmany(timeout_ms=200, max_records=n - len(got))
            for records in batches.values():
                got.extend(records)
    return got


async def _drain(consumer: AIOKafkaConsumer, tp: TopicPartition, end: int) -> list[ConsumerRecord[bytes, bytes]]:
    """Everything up to `end` (the partition's end offset): for read_committed, where markers take offsets."""
    got: list[ConsumerRecord[bytes, bytes]] = []
    async with asyncio.timeout(TIMEOUT):
        while await consumer.position(tp) < end:
            batches = await consumer.getmany(tp, timeout_ms=200)
            got.extend(batches.get(tp, []))
    return got


async def test_consumer_group_manual_commit_resumes_after_committed_offset(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=1)
    tp = TopicPartition(topic, 0)
    group = _group()
    async with _producer(kafka_bootstrap) as producer:
        for i in range(10):
            await producer.send_and_wait(topic, f"line-{i}".encode(), key=b"conv-1")

    async with _consumer(kafka_bootstrap, topic, group_id=group) as first:
        records = await _take(first, 4)
        assert [r.value for r in records] == [f"line-{i}".encode() for i in range(4)]
        await first.commit({tp: records[-1].offset + 1})
        assert await first.committed(tp) == 4

    async with _consumer(kafka_bootstrap, topic, group_id=group) as second:
        resumed = await _take(second, 6)
        assert [r.value for r in resumed] == [f"line-{i}".encode() for i in range(4, 10)]
        assert resumed[0].offset == 4
        assert all(r.key == b"conv-1" for r in resumed)


async def test_idempotent_producer_with_acks_all(kafka_bootstrap: str, topic_factory: TopicFactory) -> None:
    topic = await topic_factory(partitions=1)
    async with _producer(kafka_bootstrap, enable_idempotence=True, acks="all") as producer:
        sent = [await producer.send_and_wait(topic, f"v{i}".encode(), key=b"k") for i in range(5)]
        assert [m.offset for m in sent] == list(range(5))
        batch = producer.create_batch()
        for i in range(5, 8):
            assert batch.append(key=b"k", value=f"v{i}".encode(), timestamp=None) is not None
        meta = await (await producer.send_batch(batch, topic, partition=0))
        assert meta.offset == 5

    async with _consumer(kafka_bootstrap, topic) as consumer:
        records = await _take(consumer, 8)
        assert [r.value for r in records] == [f"v{i}".encode() for i in range(8)]


async def test_native_record_batches_are_sent_by_an_idempotent_producer_and_read_back(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    """The batches ``Kafka.record_batches`` makes natively go through aiokafka's ``send_batch`` as its own do: the
    broker takes them in order (the producer's sequence numbers written into each), a record sent after them
    follows, and a consumer reads every key, value, header and timestamp back."""
    topic = await topic_factory(partitions=1)
    records = [Out(b"k%d" % i, b"v%d-" % i * 20, (("gk.n", b"%d" % i), ("gk.empty", b""))) for i in range(30)]
    before = int(time.time() * 1000)
    async with _producer(kafka_bootstrap, enable_idempotence=True, acks="all") as producer:
        batches = AioKafka(KafkaSettings(bootstrap_servers=kafka_bootstrap)).record_batches(records, 800)
        assert len(batches) > 3
        futures = [await producer.send_batch(b, topic, partition=0) for b in batches]
        firsts = [(await f).offset for f in futures]
        counts = [b.record_count() for b in batches]
        assert firsts == [sum(counts[:n]) for n in range(len(counts))]
        assert (await producer.send_and_wait(topic, b"after", key=b"k")).offset == 30

    async with _consumer(kafka_bootstrap, topic) as consumer:
        read = await _take(consumer, 31)
    assert [(r.key, r.value, list(r.headers)) for r in read[:30]] == [
        (o.key, o.value, list(o.headers)) for o in records
    ]
    assert all(before <= r.timestamp <= int(time.time() * 1000) for r in read[:30])
    assert read[30].value == b"after"


async def test_transaction_produces_and_commits_consumer_offsets(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    source = await topic_factory(partitions=1)
    sink = await topic_factory(partitions=1)
    source_tp, sink_tp = TopicPartition(source, 0), TopicPartition(sink, 0)
    group = _group()
    async with _producer(kafka_bootstrap) as plain:
        for i in range(3):
            await plain.send_and_wait(source, f"in-{i}".encode(), key=b"conv-t")

    txn_id = f"gk-test-txn-{uuid.uuid4().hex[:8]}"
    async with (
        _consumer(kafka_bootstrap, source, group_id=group, isolation_level="read_committed") as consumer,
        _producer(kafka_bootstrap, transactional_id=txn_id, acks="all", enable_idempotence=True) as producer,
    ):
        records = await _take(consumer, 3)
        async with producer.transaction():
            for record in records:
                await producer.send(sink, b"out-" + record.value, key=record.key)
            await producer.send_offsets_to_transaction({source_tp: records[-1].offset + 1}, group)

    async with _consumer(kafka_bootstrap, sink, isolation_level="read_committed") as reader:
        out = await _take(reader, 3)
        assert [r.value for r in out] == [b"out-in-0", b"out-in-1", b"out-in-2"]
        assert all(r.key == b"conv-t" for r in out)
        # The commit marker takes an offset: the partition ends after it.
        assert (await reader.end_offsets([sink_tp]))[sink_tp] == 4

    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    assert offsets[source_tp].offset == 3

    async with _consumer(kafka_bootstrap, source, group_id=group) as member:
        assert await member.committed(source_tp) == 3


async def test_aborted_transaction_is_invisible_to_read_committed(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=1)
    tp = TopicPartition(topic, 0)
    txn_id = f"gk-test-txn-{uuid.uuid4().hex[:8]}"
    async with _producer(kafka_bootstrap, transactional_id=txn_id) as producer:
        await producer.begin_transaction()
        await producer.send_and_wait(topic, b"aborted", key=b"conv-a")
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send_and_wait(topic, b"committed", key=b"conv-a")

    async with _consumer(kafka_bootstrap, topic, isolation_level="read_committed") as committed_reader:
        end = (await committed_reader.end_offsets([tp]))[tp]
        assert end == 4  # aborted record, abort marker, committed record, commit marker
        seen = await _drain(committed_reader, tp, end)
        assert [r.value for r in seen] == [b"committed"]

    async with _consumer(kafka_bootstrap, topic, isolation_level="read_uncommitted") as raw_reader:
        seen = await _drain(raw_reader, tp, end)
        assert [r.value for r in seen] == [b"aborted", b"committed"]


async def test_redis_round_trip(redis_client: Any, redis_namespace: str) -> None:
    key = f"{redis_namespace}greeting"
    assert await redis_client.set(key, b"roger", ex=60)
    assert await redis_client.get(key) == b"roger"

    # One round trip for a batch, as the gatekeeper loads and writes state; the hash tag keeps a thread's keys
    # on one Redis Cluster slot.
    thread = f"{redis_namespace}{{conv-1}}"
    async with redis_client.pipeline(transaction=False) as pipe:
        pipe.hset(f"{thread}:line:1", mapping={"verdict": "forward", "at": "1700000000"})
        pipe.sadd(f"{thread}:open", "1")
        pipe.expire(f"{thread}:line:1", 60)
        pipe.hgetall(f"{thread}:line:1")
        pipe.smembers(f"{thread}:open")
        results = await pipe.execute()
    assert results[-2] == {b"verdict": b"forward", b"at": b"1700000000"}
    assert results[-1] == {b"1"}
    assert 0 < await redis_client.ttl(f"{thread}:line:1") <= 60
