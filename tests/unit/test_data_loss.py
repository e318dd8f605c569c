"""Redis data loss, fail closed, against the in-memory Kafka and store (``MemoryStore.lose_data``): nothing decided
or produced after the loss, not ready with its reason, one alert, and never recovering by itself."""

from __future__ import annotations

import asyncio
import json

import pytest

from gatekeeper.consumers.loop import Gatekeeper
from gatekeeper.store import DataLost, MemoryStore
from tests.policy.world import HO, RB, RECORD
from tests.unit.fake_kafka import FakeKafka
from tests.unit.test_worker import _cluster, _settings, decided, send, until


async def test_the_memory_store_checks_its_generation() -> None:
    store = MemoryStore()
    await store.load("in", {}, [])  # no generation taken: nothing to check (gatekeeper check, dry runs)
    first = await store.ensure_generation()
    assert await store.ensure_generation() == first and await store.ping()
    store.lose_data()
    for call in (store.ping(), store.load("in", {}, []), store.claim([]), store.save("in", {})):
        with pytest.raises(DataLost):
            await call


async def test_a_loss_stops_deciding_and_alerts_once() -> None:
    cluster = _cluster()
    store = MemoryStore()
    await store.put_record(RECORD)
    gk = Gatekeeper(_settings(), store=store, kafka=FakeKafka(cluster), http=False, startup_timeout=5)
    task = asyncio.create_task(gk.run())
    try:
        send(cluster, "c1", HO)
        await until(lambda: decided(cluster) == 1)
        store.lose_data()
        await store.put_record(RECORD)
        send(cluster, "c1", RB)
        send(cluster, "c2", HO, partition=1)
        await until(lambda: gk.readiness()[1].get("reason") == "redis lost its data")
        await until(lambda: len(cluster.records("alerts")) == 1)
        await asyncio.sleep(1.0)
        assert decided(cluster) == 1
        [alert] = cluster.records("alerts")
        assert json.loads(alert.value)["alert"] == "redis-data-lost"
        assert gk.metrics.registry.get_sample_value("gatekeeper_redis_data_lost") == 1
        assert gk.metrics.registry.get_sample_value("gatekeeper_redis_data_losses_total") == 1
        assert not gk.readiness()[0]
    finally:
        gk.request_stop()
        await asyncio.wait_for(task, 10)
