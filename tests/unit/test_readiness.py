"""Readiness that follows the services while a batch is stuck: the probe runs in a task of its own, bounded (a broker
gone quiet, against the in-memory Kafka: acknowledgements held and metadata requests unanswered)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiokafka.errors import KafkaConnectionError

from gatekeeper.consumers.health import KAFKA_PROBE_TIMEOUT, PROBE_INTERVAL
from gatekeeper.consumers.loop import Gatekeeper
from gatekeeper.store import MemoryStore
from tests.policy.world import HO, RB, RECORD
from tests.unit.fake_kafka import FakeKafka
from tests.unit.test_worker import _cluster, _settings, decided, send, until


class QuietBroker(FakeKafka):
    """Metadata requests hang (``hang``) or are refused (``refuse``) while set."""

    hang = False
    refuse = False

    async def probe(self, producer: Any) -> None:
        if self.refuse:
            raise KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 9092)] (test)")
        while self.hang:
            await asyncio.sleep(0.05)


async def test_a_broker_gone_quiet_under_a_stuck_batch_is_not_ready_within_the_probe_bounds() -> None:
    cluster = _cluster()
    store = MemoryStore()
    await store.put_record(RECORD)
    kafka = QuietBroker(cluster)
    # a produce times out only after 30 s: meanwhile the batch is stuck, and only the probe can tell
    gk = Gatekeeper(_settings(request_timeout_ms=30_000), store=store, kafka=kafka, http=False, startup_timeout=5)
    task = asyncio.create_task(gk.run())
    try:
        send(cluster, "c1", HO)
        await until(lambda: decided(cluster) == 1 and gk.readiness()[0])
        cluster.hold_acks = asyncio.Event()  # the produce of the next batch waits: a batch stuck on the broker
        kafka.hang = True
        quiet = time.monotonic()
        send(cluster, "c1", RB)
        await until(lambda: not gk.readiness()[0], timeout=PROBE_INTERVAL + KAFKA_PROBE_TIMEOUT + 2)
        assert time.monotonic() - quiet <= PROBE_INTERVAL + KAFKA_PROBE_TIMEOUT + 1
        assert gk.readiness()[1] == {"reason": "kafka unavailable", "error": "metadata: no answer within 3s"}
        kafka.hang, kafka.refuse = False, True  # the broker refuses: still not ready, saying why
        await until(lambda: "Unable to bootstrap" in gk.readiness()[1].get("error", ""), timeout=PROBE_INTERVAL + 2)
        kafka.refuse = False
        cluster.hold_acks.set()
        await until(lambda: decided(cluster) == 2 and gk.readiness()[0], timeout=PROBE_INTERVAL + 5)
        assert len(cluster.records("dlq")) == 0
        last = {"service": "kafka"}
        await until(
            lambda: (
                gk.metrics.registry.get_sample_value("gatekeeper_probe_last_success_timestamp_seconds", last)
                is not None
            ),
            timeout=PROBE_INTERVAL + 2,
        )
    finally:
        gk.request_stop()
        await asyncio.wait_for(task, 10)
