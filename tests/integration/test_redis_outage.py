"""Redis trouble the daemon must see for what it is, on a redis-server of the test's own (``_own_redis``):

- Redis restarted without persistence (its data, the exec bindings among it, gone): fail closed. Nothing decided,
  nothing forwarded, not ready ("redis lost its data"), one ERROR, one alert per route, until an operator accepts
  the loss (``gatekeeper redis accept-loss``) and restarts the gatekeeper.
- Redis paused (``CLIENT PAUSE``): not ready within a few seconds, ready again after, nothing dead-lettered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gatekeeper.cli import app
from gatekeeper.config import RedisSettings
from gatekeeper.consumers.loop import Gatekeeper
from gatekeeper.policy import BindingChange, ConversationState
from gatekeeper.redis_store import RedisStore
from gatekeeper.store import DataLost, StoreError
from tests.integration._own_redis import OwnRedis
from tests.integration._pipeline import Pipeline, TopicFactory, until, wait_ready
from tests.policy.world import HO, RB, RECORD


def _gauge(gk: Gatekeeper, name: str, **labels: str) -> float | None:
    return gk.metrics.registry.get_sample_value(name, labels)


async def test_redis_restarted_empty_decides_nothing_until_an_operator_accepts_the_loss(
    topic_factory: TopicFactory, kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gatekeeper")
    with OwnRedis() as redis_server:
        async with Pipeline.create(topic_factory, kafka_bootstrap, redis_server.url) as p:
            gk = p.gatekeeper
            await p.store.put_record(RECORD)
            await p.send("c1", HO, RB)
            await p.collect(lambda g: len(g.of("output", "c1")) == 2)  # c1's HO is bound to the approval

            redis_server.restart()  # no persistence: states, records, bindings and the marker are gone
            with contextlib.suppress(StoreError):  # the test's own connection was closed by the restart
                await p.store.ping()
            await p.store.put_record(RECORD)  # the approvals loaded again: c1's binding is not among them
            await p.send("c2", HO)  # a second use of the approval c1 used: with the binding gone, it would pass
            lost_after = await until(lambda: gk.readiness()[1].get("reason") == "redis lost its data", 15)
            assert lost_after < 5
            got = await p.collect(lambda g: any(a.doc.get("alert") == "redis-data-lost" for a in g.alerts))
            [alert] = [a for a in got.alerts if a.doc.get("alert") == "redis-data-lost"]
            assert alert.doc["route"] == p.route().input and alert.doc["found_generation"] is None
            await asyncio.sleep(3)  # retries and probes
            got = await p.collector.settle(1.0)
            assert got.count("c2") == 0  # nothing decided against the empty Redis
            assert _gauge(gk, "gatekeeper_redis_data_lost") == 1
            assert _gauge(gk, "gatekeeper_ready") == 0
            lost_logs = [r for r in caplog.records if "redis lost its data" in r.getMessage()]
            assert [r.levelno for r in lost_logs] == [logging.ERROR]  # once, not per retry

            # the operator: the used approval is withdrawn (its binding was lost), then the loss accepted
            assert await p.store.delete_records(RECORD.item) == 1
            config = tmp_path / "gk.yaml"
            config.write_text(
                yaml.safe_dump({"redis": {"url": redis_server.url, "key_prefix": p.settings.redis.key_prefix}})
            )
            env = {"GK_REDIS__URL": redis_server.url, "GK_REDIS__KEY_PREFIX": p.settings.redis.key_prefix}
            accepted = await asyncio.to_thread(
                CliRunner().invoke, app, ["redis", "accept-loss", "-c", str(config), "--yes"], env=env
            )
            assert accepted.exit_code == 0, accepted.output
            assert "restart the gatekeepers" in accepted.output
            shown = await asyncio.to_thread(
                CliRunner().invoke, app, ["redis", "generation", "-c", str(config)], env=env
            )
            assert shown.exit_code == 0 and shown.output.strip() == await p.store.generation()
            assert shown.output.strip() in accepted.output
            await asyncio.sleep(2.5)  # a probe later: a running gatekeeper does not resume by itself
            assert gk.readiness()[1].get("reason") == "redis lost its data"
            assert (await p.collector.settle(0.5)).count("c2") == 0

            # restarted: it starts on the new marker and decides c2 (no record now: dead-lettered, never forwarded)
            gk.request_stop()
            await asyncio.wait_for(p.task, 20)
            store = RedisStore(p.settings.redis)
            gk2 = Gatekeeper(p.settings, store=store, http=False, startup_timeout=20.0)
            task = asyncio.create_task(gk2.run())
            try:
                await wait_ready(gk2, task)
                got = await p.collect(lambda g: g.count("c2") == 1)
                assert got.of("output", "c2") == []
                assert [r.h("gk.reason") for r in got.of("dead", "c2")] == ["no-record"]
            finally:
                gk2.request_stop()
                await asyncio.wait_for(task, 20)
                await store.close()


async def test_a_paused_redis_is_not_ready_within_seconds_and_nothing_is_dead_lettered(
    topic_factory: TopicFactory, kafka_bootstrap: str
) -> None:
    with OwnRedis() as redis_server:
        async with Pipeline.create(topic_factory, kafka_bootstrap, redis_server.url) as p:
            gk = p.gatekeeper
            await p.store.put_record(RECORD)
            await p.send("c1", HO)
            await p.collect(lambda g: g.count("c1") == 1)
            with redis_server.client() as admin:
                admin.execute_command("CLIENT", "PAUSE", "10000")
            paused = time.monotonic()
            await p.send("c1", RB)  # a batch that gets stuck on the paused Redis
            not_ready_after = await until(lambda: not gk.readiness()[0], 10)
            assert gk.readiness()[1]["reason"] == "redis unavailable", gk.readiness()
            assert not_ready_after < 5, not_ready_after
            await until(lambda: gk.readiness()[0], 30)
            ready_again_after = time.monotonic() - paused
            assert ready_again_after >= 9.5  # not before the pause ended
            got = await p.collect(lambda g: g.count("c1") == 2)
            assert [r.text for r in got.of("output", "c1")] == [HO, RB]
            assert got.dead == []
            print(
                f"CLIENT PAUSE 10000: not ready after {not_ready_after:.1f}s, ready again at {ready_again_after:.1f}s"
            )


async def test_every_round_trip_of_a_batch_checks_the_generation_marker(redis_url: str) -> None:
    settings = RedisSettings(url=redis_url, key_prefix=f"gkt{uuid.uuid4().hex[:10]}")
    store, other = RedisStore(settings), RedisStore(settings)
    try:
        marker = await store.ensure_generation()
        assert await other.ensure_generation() == marker  # SET NX: the second instance finds the first's
        assert await store.ping() and await store.load("r", {"c": None}, [RECORD.key]) is not None
        change = BindingChange(RECORD.key, None, "c/HO-1")
        # the compare-and-set script loaded (a claim and its release): the claim below is then not a NOSCRIPT
        assert await store.claim([change, BindingChange(RECORD.key, "c/HO-1", None)]) == []
        await store._redis.delete(store.keys.generation())  # as a Redis restarted empty (only this test's key)
        calls = [store.ping(), store.load("r", {"c": None}, []), store.save("r", {"c": ConversationState()})]
        for call in [*calls, store.claim([change])]:
            with pytest.raises(DataLost, match=r"generation marker .* is missing"):
                await call
        # the check shares the claim's round trip, it does not guard its commands: the binding was written, for a
        # handoff never forwarded, so it can only refuse another use of the approval (record-used), never allow one
        assert await store.binding(RECORD.key) == "c/HO-1"
        old, new = await other.accept_loss()
        assert old is None and new != marker
        with pytest.raises(DataLost, match="changed"):  # a running instance does not take the new marker
            await store.load("r", {"c": None}, [])
        fresh = RedisStore(settings)
        assert await fresh.ensure_generation() == new
        await fresh.close()
    finally:
        await store._redis.delete(store.keys.generation(), store.keys.binding(RECORD.key))
        await store.close()
        await other.close()


async def _start(settings: Any) -> tuple[Gatekeeper, asyncio.Task[None], RedisStore]:
    store = RedisStore(settings.redis)
    gk = Gatekeeper(settings, store=store, http=False, startup_timeout=20.0)
    return gk, asyncio.create_task(gk.run()), store


async def _stop(gk: Gatekeeper, task: asyncio.Task[None], store: RedisStore) -> None:
    gk.request_stop()
    await asyncio.wait_for(task, 20)
    await store.close()


async def _one_handoff_then_stop(p: Pipeline) -> None:
    """The pipeline's gatekeeper decides c1's handoff, commits it and stops: Redis now holds a history."""
    await p.store.put_record(RECORD)
    await p.send("c1", HO)
    await p.collect(lambda g: g.count("c1") == 1)
    await until(lambda: p.gatekeeper._checkpoint.watermarks.last_committed((p.route().input, 0)) == 1)
    p.gatekeeper.request_stop()
    await asyncio.wait_for(p.task, 20)


async def test_a_loss_while_no_gatekeeper_ran_is_caught_at_startup(
    topic_factory: TopicFactory, kafka_bootstrap: str
) -> None:
    with OwnRedis() as redis_server:
        async with Pipeline.create(topic_factory, kafka_bootstrap, redis_server.url) as p:
            await _one_handoff_then_stop(p)

            redis_server.restart()  # lost while no gatekeeper ran; the approvals loaded again
            with contextlib.suppress(StoreError):
                await p.store.ping()
            await p.store.put_record(RECORD)
            await p.send("c2", HO)  # the approval's second use
            gk, task, store = await _start(p.settings)
            try:
                await until(lambda: gk.readiness()[1].get("reason") == "redis lost its data", 20)
                await asyncio.sleep(2)
                assert (await p.collector.settle(0.5)).count("c2") == 0
                assert await p.store.generation() is None  # it wrote no marker of its own
                assert not await p.store.epochs_exist(p.route().input, [0])  # nor epochs (they mark history)
            finally:
                await _stop(gk, task, store)

            await p.store.delete_records(RECORD.item)  # the used approval withdrawn, then the loss accepted
            await p.store.accept_loss()
            gk, task, store = await _start(p.settings)
            try:
                await wait_ready(gk, task)
                got = await p.collect(lambda g: g.count("c2") == 1)
                assert [r.h("gk.reason") for r in got.of("dead", "c2")] == ["no-record"]
            finally:
                await _stop(gk, task, store)


async def test_a_redis_of_a_release_before_the_marker_gets_one(
    topic_factory: TopicFactory, kafka_bootstrap: str
) -> None:
    with OwnRedis() as redis_server:
        async with Pipeline.create(topic_factory, kafka_bootstrap, redis_server.url) as p:
            await _one_handoff_then_stop(p)
            old = await p.store.generation()
            await p.store._redis.delete(p.store.keys.generation())  # as an earlier release left it: epochs, no marker
            gk, task, store = await _start(p.settings)
            try:
                await wait_ready(gk, task)
                assert (await p.store.generation()) not in (None, old)
                await p.send("c1", RB)
                await p.collect(lambda g: g.count("c1") == 2)
            finally:
                await _stop(gk, task, store)
