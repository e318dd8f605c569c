"""The baseline of ``bench/e2e.py``: what Kafka gives a consumer that does no work.

A raw consume -> produce the same bytes -> commit loop, with the gatekeeper's own client settings: per batch, each
value is produced unchanged to the output topic, keyed as it came, the batch's acknowledgements are awaited, then
the offsets are committed. Run as its own process, as the gatekeeper is, so both pay for one interpreter:

    python bench/passthrough.py CONFIG.yaml                      # the config's kafka section and first route
    python bench/passthrough.py CONFIG.yaml --stamp              # each output also carries gk.original.timestamp
    python bench/passthrough.py CONFIG.yaml --client librdkafka  # the same loop on confluent-kafka

``--client aiokafka`` (the default) is the gatekeeper's own client, through its ``make_consumer`` and
``make_producer`` (the same group semantics, ``max_poll_records``, an idempotent producer with ``acks=all``, the same
linger and batch size). ``--client librdkafka`` is the same loop on confluent-kafka, whose protocol, batching and
fetching are librdkafka's C: what a Kafka client whose per-record work is not Python costs on the same machine,
given the same settings where librdkafka has them (the fetch's minimum bytes and wait, the session timeout, an
idempotent producer with ``acks=all`` and no linger). It speaks plaintext only: it is a benchmark's baseline on the
local broker, not a client of the gatekeeper.

``--stamp`` is for the latency section's baseline: the input record's timestamp in the header the gatekeeper's
outcomes carry it in, so the benchmark measures both the same way (the throughput baseline runs without it: its
cost is not what Kafka gives). It stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

from gatekeeper.config import Settings, load_settings
from gatekeeper.consumers.kafka import make_consumer, make_producer
from gatekeeper.consumers.sending import BATCH_BYTES

STAMP = "gk.original.timestamp"


async def aiokafka_loop(settings: Settings, stamp: bool) -> None:
    route = settings.routes[0]
    consumer = make_consumer(settings.kafka, {route.input: route})
    producer = make_producer(settings.kafka, max_batch_size=BATCH_BYTES)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await producer.start()
    await consumer.start()
    try:
        while not stop.is_set():
            batch = await consumer.getmany(
                timeout_ms=settings.kafka.batch_timeout_ms, max_records=settings.kafka.max_batch
            )
            if not batch:
                continue
            futures = [
                await producer.send(
                    route.output, r.value, key=r.key, headers=[(STAMP, str(r.timestamp).encode())] if stamp else None
                )
                for records in batch.values()
                for r in records
            ]
            await asyncio.gather(*futures)
            await consumer.commit({tp: records[-1].offset + 1 for tp, records in batch.items()})
    finally:
        await consumer.stop()
        await producer.stop()


def librdkafka_loop(settings: Settings, stamp: bool) -> None:
    """The same loop on confluent-kafka. ``consume(n, timeout)`` waits until it has ``n`` records or the time is out,
    where aiokafka's ``getmany`` returns what has come as soon as anything has: so take what is buffered at once,
    and only when nothing is, wait for one record and then take what came with it."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    kafka, route = settings.kafka, settings.routes[0]
    if kafka.security.protocol != "PLAINTEXT":
        raise SystemExit("--client librdkafka: plaintext only (a benchmark's baseline on the local broker)")
    common: dict[str, Any] = {"bootstrap.servers": kafka.bootstrap_servers, "client.id": kafka.client_id}
    consumer = Consumer(
        {
            **common,
            "group.id": kafka.group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed" if kafka.transactional else "read_uncommitted",
            "session.timeout.ms": kafka.session_timeout_ms,
            "fetch.min.bytes": kafka.fetch_min_bytes,
            "fetch.wait.max.ms": kafka.fetch_max_wait_ms,
        }
    )
    producer = Producer({**common, "enable.idempotence": True, "acks": "all", "linger.ms": 0})
    stopped: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(1))
    consumer.subscribe([route.input])
    most, wait = kafka.max_batch, kafka.batch_timeout_ms / 1000
    try:
        while not stopped:
            records = consumer.consume(most, 0)
            if not records:
                records = consumer.consume(1, wait)
                if not records:
                    continue
                records += consumer.consume(most - 1, 0)
            ends: dict[tuple[str, int], int] = {}
            for r in records:
                if r.error() is not None:
                    raise SystemExit(f"librdkafka: {r.error()}")
                headers = [(STAMP, str(r.timestamp()[1]).encode())] if stamp else None
                producer.produce(route.output, r.value(), r.key(), headers=headers)
                ends[(r.topic(), r.partition())] = r.offset() + 1
            if producer.flush(30) != 0:
                raise SystemExit("librdkafka: acknowledgements not received within 30 s")
            consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in ends.items()], asynchronous=False)
    finally:
        consumer.close()
        producer.flush(5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", help="the gatekeeper's config: its kafka section and first route")
    ap.add_argument("--stamp", action="store_true", help="each output also carries gk.original.timestamp")
    ap.add_argument("--client", choices=("aiokafka", "librdkafka"), default="aiokafka")
    args = ap.parse_args()
    settings = load_settings(args.config)
    if args.client == "librdkafka":
        librdkafka_loop(settings, args.stamp)
    else:
        asyncio.run(aiokafka_loop(settings, args.stamp))


if __name__ == "__main__":
    main()
