"""Liveness that means something: ``/healthz`` fails when the work loop is stuck on a call that never returns while
its partitions have lag, and stays alive while the loop turns (idle, or retrying a Redis that is down, which
``/readyz`` reports instead). Real Kafka and Redis; the store is wrapped to hang or to fail on demand."""

from __future__ import annotations

import asyncio
from typing import Any

from gatekeeper.store import StoreError
from tests.integration._pipeline import Pipeline, TopicFactory, until
from tests.policy.world import AN, DN, HO, RB, RECORD


class SwitchedStore:
    """The Redis store, whose loads hang (``hang``) or fail (``fail``) while the switch is set."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.hang = asyncio.Event()
        self.fail = False
        self.released = asyncio.Event()

    async def load(self, *args: Any, **kw: Any) -> Any:
        if self.hang.is_set():
            await self.released.wait()  # a call that never returns, as a half-open connection without a timeout
        if self.fail:
            raise StoreError("redis 127.0.0.1:1: load failed: ConnectionError: refused (test)")
        return await self.inner.load(*args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _stalled(gk: Any) -> float:
    value = gk.metrics.registry.get_sample_value("gatekeeper_work_loop_stalled_seconds")
    assert value is not None
    return float(value)


async def test_a_hung_call_with_lag_fails_liveness_and_a_down_redis_does_not(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str
) -> None:
    stores: list[SwitchedStore] = []

    def wrap(store: Any) -> SwitchedStore:
        stores.append(SwitchedStore(store))
        return stores[0]

    async with Pipeline.create(
        topic_factory, kafka_bootstrap, redis_url, wrap_store=wrap, http={"stall_seconds": 1.0}
    ) as p:
        [store] = stores
        gk = p.gatekeeper
        await p.store.put_record(RECORD)
        await p.send("c1", HO, RB)
        await p.collect(lambda g: g.count("c1") == 2)

        # idle for longer than stall_seconds, nothing to consume: alive (the loop turns on every empty poll)
        await asyncio.sleep(1.5)
        assert gk.liveness() == (True, {})
        assert 0.0 <= _stalled(gk) < 1.0

        # Redis down: the loop turns, retrying with backoff; alive, and /readyz says why
        store.fail = True
        await p.send("c2", HO)
        await until(lambda: not gk.readiness()[0])
        assert gk.readiness()[1]["reason"] == "redis unavailable"
        await asyncio.sleep(1.5)
        assert gk.liveness()[0], gk.liveness()
        store.fail = False
        await p.collect(lambda g: g.count("c2") == 1)

        # a load that never returns, with a line waiting: stalled past stall_seconds, and /healthz says which
        store.hang.set()
        await p.send("c3", HO)
        await until(lambda: not gk.liveness()[0], timeout=20)
        alive, detail = gk.liveness()
        assert not alive
        assert detail["reason"] == "the work loop has not turned while partitions have lag"
        assert detail["stalled_seconds"] >= 1.0 and detail["stall_seconds"] == 1.0
        assert detail["lagging"] == [f"{p.route().input}/0"]
        assert _stalled(gk) >= 1.0

        # the call returns: the loop turns again, the line is decided, alive
        store.hang.clear()
        store.released.set()
        got = await p.collect(lambda g: g.count("c3") == 1)
        # decided as any second use of the approved record is
        assert [(r.text, r.h("gk.reason")) for r in got.of("dead", "c3")] == [(HO, "record-used")]
        await until(lambda: gk.liveness()[0])
        await p.send("c1", AN, DN)
        await p.collect(lambda g: g.count("c1") == 4)
