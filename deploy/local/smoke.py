"""A round trip through the local services: what `make run` does until the gatekeeper daemon exists.

Creates the topic ``gk-smoke`` when missing, produces one RW1 line keyed by its conversation, consumes it back,
then sets and reads a Redis key. Reads GK_KAFKA_BOOTSTRAP and GK_REDIS_URL (``deploy/local/stack.sh env``).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid

import redis.asyncio as aioredis
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

TOPIC = "gk-smoke"
LINE = "RW1 HO smoke-1 from=smoke to=gatekeeper item=smoke:1 ask=DRAFT"


async def ensure_topic(bootstrap: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="gk-smoke")
    await admin.start()
    try:
        if TOPIC not in await admin.list_topics():
            await admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])
            print(f"kafka: created topic {TOPIC}")
    finally:
        await admin.close()


async def kafka_round_trip(bootstrap: str) -> None:
    conversation = f"smoke-{uuid.uuid4().hex[:8]}"
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        meta = await producer.send_and_wait(TOPIC, LINE.encode(), key=conversation.encode())
    finally:
        await producer.stop()
    print(f"kafka: produced {LINE!r} key={conversation} to {TOPIC}[{meta.partition}]@{meta.offset}")

    tp = TopicPartition(TOPIC, meta.partition)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([tp])
        consumer.seek(tp, meta.offset)
        record = await asyncio.wait_for(consumer.getone(tp), timeout=30)
    finally:
        await consumer.stop()
    assert record.value == LINE.encode() and record.key == conversation.encode(), record
    print(f"kafka: consumed {record.value.decode()!r} key={record.key.decode()} at offset {record.offset}")


async def redis_round_trip(url: str) -> None:
    client = aioredis.Redis.from_url(url)
    try:
        key = "gk-smoke:{smoke}:last-run"
        value = str(time.time())
        await client.set(key, value, ex=3600)
        got = await client.get(key)
        assert got == value.encode(), got
        print(f"redis: set and got {key} = {got.decode()} (ttl {await client.ttl(key)}s)")
    finally:
        await client.aclose()


async def main() -> int:
    bootstrap = os.environ.get("GK_KAFKA_BOOTSTRAP")
    redis_url = os.environ.get("GK_REDIS_URL")
    if not bootstrap or not redis_url:
        print("GK_KAFKA_BOOTSTRAP and GK_REDIS_URL must be set (deploy/local/stack.sh env)", file=sys.stderr)
        return 2
    print(f"kafka: {bootstrap}  redis: {redis_url}")
    await ensure_topic(bootstrap)
    await kafka_round_trip(bootstrap)
    await redis_round_trip(redis_url)
    print("smoke: ok")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
