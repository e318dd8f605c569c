"""The baseline of ``bench/e2e.py``: what Kafka gives a consumer that does no work.

A raw aiokafka consume -> produce the same bytes -> commit loop, with the gatekeeper's own client settings (its
``make_consumer`` and ``make_producer``: the same group semantics, ``max_poll_records``, an idempotent producer with
``acks=all`` and the same linger and batch size): per ``getmany`` batch, each value is produced unchanged to the output
topic, keyed as it came, the batch's acknowledgements are awaited, then the offsets are committed. Run as its own
process, as the gatekeeper is, so both pay for one interpreter and one event loop:

    python bench/passthrough.py CONFIG.yaml           # the gatekeeper's config: its kafka section and first route
    python bench/passthrough.py CONFIG.yaml --stamp   # each output also carries gk.original.timestamp

``--stamp`` is for the latency section's baseline: the input record's timestamp in the header the gatekeeper's
outcomes carry it in, so the benchmark measures both the same way (the throughput baseline runs without it: its
cost is not what Kafka gives). It stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from gatekeeper.config import load_settings
from gatekeeper.consumers.kafka import make_consumer, make_producer
from gatekeeper.consumers.sending import BATCH_BYTES


async def main(path: str, stamp: bool) -> None:
    settings = load_settings(path)
    route = settings.routes[0]
    routes = {route.input: route}
    consumer = make_consumer(settings.kafka, routes)
    producer = make_producer(settings.kafka, max_batch_size=BATCH_BYTES)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
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
                    route.output,
                    r.value,
                    key=r.key,
                    headers=[("gk.original.timestamp", str(r.timestamp).encode())] if stamp else None,
                )
                for records in batch.values()
                for r in records
            ]
            await asyncio.gather(*futures)
            await consumer.commit({tp: records[-1].offset + 1 for tp, records in batch.items()})
    finally:
        await consumer.stop()
        await producer.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], "--stamp" in sys.argv[2:]))
