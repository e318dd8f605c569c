"""Redis lost its data (a ``FLUSHALL`` of a redis-server of the test's own): every command that writes state or
produces outcomes refuses as the daemon does, with its message and the command that resolves it, until the loss is
accepted; then the runbook's order works (accept-loss, records load, restart, replay). A first start is not a loss.

Without the check, an approver reloads the records after the loss and a replay forwards (and binds the approval to)
a handoff that was refused ``record-used`` before it: one approval, two acts.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from gatekeeper.api.auth import hash_token
from gatekeeper.api.gate import Gate, GateRequest
from gatekeeper.config import Settings
from gatekeeper.consumers.loop import Gatekeeper
from gatekeeper.policy import Record
from gatekeeper.redis_store import RedisStore
from gatekeeper.replay import Replayer
from gatekeeper.store import DataLost
from tests.integration._own_redis import OwnRedis
from tests.integration._pipeline import Pipeline, TopicFactory, cli, committed, make_route, settings_for, wait_ready
from tests.policy.world import HO, RECORD

pytestmark = pytest.mark.integration

TOKEN = "tok-scheduler-0123456789"
HTTP = {"tokens": [{"name": "scheduler-svc", "sha256": hash_token(TOKEN), "agents": ["scheduler"]}]}
ITEM_B = "inv:MD-2026-058"
HO_B = HO.replace(RECORD.item, ITEM_B)
LOST = "redis lost its data: no generation marker"


def _config(settings: Settings, tmp_path: Path) -> str:
    path = tmp_path / f"gk-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(json.loads(settings.model_dump_json())))
    return str(path)


def _records(tmp_path: Path, *items: str) -> str:
    path = tmp_path / "records.json"
    values = {k: v for k, v in RECORD.values.items() if k != "item"}
    path.write_text(json.dumps({item: values for item in items}))
    return str(path)


def _refused(result: Any) -> None:
    """Refused as the daemon refuses, with what resolves it: one line, exit 3 (Redis trouble)."""
    assert result.exit_code == 3, result.output
    assert result.stderr.startswith(f"gatekeeper: error: {LOST}"), result.stderr
    assert "`gatekeeper redis accept-loss`" in result.stderr and "Traceback" not in result.output


async def _dry_gate(gate: Gate, conversation: str, line: str) -> tuple[int, dict[str, Any]]:
    req = GateRequest(route=gate.settings.routes[0].input, conversation=conversation, line=line, dry_run=True)
    return await gate.handle(req, f"Bearer {TOKEN}")


async def _one_approval_used_twice(p: Pipeline) -> None:
    """c1's handoff is forwarded (the approval bound to it), c2's is refused record-used; the offsets committed."""
    await p.store.put_record(RECORD)
    await p.send("c1", HO)
    await p.collect(lambda g: g.count("c1") == 1)
    await p.send("c2", HO)
    got = await p.collect(lambda g: g.count("c2") == 1)
    assert [r.h("gk.reason") for r in got.of("dead", "c2")] == ["record-used"]
    deadline = time.monotonic() + 20
    while (await committed(p.bootstrap, p.settings.kafka.group_id, p.route().input))[0] != 2:
        assert time.monotonic() < deadline, "the group did not commit"
        await asyncio.sleep(0.1)


async def test_replay_and_the_gates_dry_run_refuse_after_a_flush_and_never_bind_the_used_approval(
    topic_factory: TopicFactory, kafka_bootstrap: str, tmp_path: Path
) -> None:
    with OwnRedis() as redis_server:
        async with Pipeline.create(topic_factory, kafka_bootstrap, redis_server.url, http=HTTP) as p:
            route = p.route()
            await _one_approval_used_twice(p)
            config = _config(p.settings, tmp_path)
            gate = Gate(p.settings)  # the gate's dry runs, as `gatekeeper serve` answers them
            status, doc = await _dry_gate(gate, "c2", HO)
            assert (status, doc["verdict"], doc["reason"]) == (200, "dead-letter", "record-used")

            with redis_server.client() as client:
                client.flushall()
            await p.store.put_record(RECORD)  # the approver's reload, as the store lets it write

            _refused(await cli("replay", "--route", route.input, "--json", "-c", config))
            _refused(await cli("replay", "--route", route.input, "--dry-run", "--json", "-c", config))
            with pytest.raises(DataLost, match=LOST):
                await Replayer(p.settings, timeout=5.0).run(route=route.input, requeue_failed=True)
            for _ in range(2):  # the marker it had pinned went: checked again, and refused as the commands refuse
                status, doc = await _dry_gate(gate, "c2", HO)
                assert (status, doc["code"]) == (503, "redis-data-lost"), doc
                assert doc["detail"].startswith(LOST) and "`gatekeeper redis accept-loss`" in doc["detail"]

            got = await p.collector.settle(1.0)
            assert got.of("output", "c2") == [] and len(got.of("dead", "c2")) == 1  # nothing forwarded or requeued
            assert await p.store.binding(RECORD.key) is None  # the used approval bound to nothing new
            keys = {k.decode() async for k in p.store._redis.scan_iter(match=f"{p.settings.redis.key_prefix}:*")}
            assert keys == {p.store.keys.record(RECORD.key), p.store.keys.index(RECORD.item)}  # nothing else written

            # accepted (the used approval withdrawn first): the dry runs answer again, without a restart
            assert await p.store.delete_records(RECORD.item) == 1
            accepted = await cli("redis", "accept-loss", "--yes", "-c", config)
            assert accepted.exit_code == 0, accepted.output
            status, doc = await _dry_gate(gate, "c3", HO)
            assert (status, doc["verdict"], doc["reason"]) == (200, "dead-letter", "no-record")
            await gate.close()
            dry = await cli("replay", "--route", route.input, "--dry-run", "--json", "-c", config)
            assert dry.exit_code == 1, dry.output  # c2 still fails: its approval is not loaded again
            doc = json.loads(dry.stdout)
            assert [(ln["conversation"], ln["reason"], ln["state_gone"]) for ln in doc["lines"]] == [
                ("c2", "no-record", True)  # its state went with the loss: decided as a new conversation
            ]


async def test_records_load_refuses_after_a_flush_and_the_runbooks_order_works(
    topic_factory: TopicFactory, kafka_bootstrap: str, tmp_path: Path
) -> None:
    with OwnRedis() as redis_server:
        async with Pipeline.create(topic_factory, kafka_bootstrap, redis_server.url) as p:
            route = p.route()
            await _one_approval_used_twice(p)
            await p.send("c3", HO_B)  # held for an approval that has not landed yet
            await p.collect(lambda g: g.count("c3") == 1)
            config = _config(p.settings, tmp_path)

            with redis_server.client() as client:
                client.flushall()
            _refused(await cli("records", "load", _records(tmp_path, RECORD.item, ITEM_B), "-c", config))
            assert await p.store.get_records(RECORD.item) == [] and await p.store.get_records(ITEM_B) == []
            await p.store.put_record(Record(ITEM_B, "PAY", {**RECORD.values, "item": ITEM_B}))
            _refused(await cli("records", "delete", ITEM_B, "--yes", "-c", config))
            assert len(await p.store.get_records(ITEM_B)) == 1
            assert await p.store.delete_records(ITEM_B) == 1

            # the runbook: accept the loss, load only the approvals still to be acted on, restart, replay
            accepted = await cli("redis", "accept-loss", "--yes", "-c", config)
            assert accepted.exit_code == 0, accepted.output
            loaded = await cli("records", "load", _records(tmp_path, ITEM_B), "-c", config)
            assert loaded.exit_code == 0, loaded.output
            p.gatekeeper.request_stop()
            await asyncio.wait_for(p.task, 20)
            store = RedisStore(p.settings.redis)
            gk = Gatekeeper(p.settings, store=store, http=False, startup_timeout=20.0)
            task = asyncio.create_task(gk.run())
            try:
                await wait_ready(gk, task)
                replayed = await cli("replay", "--route", route.input, "--json", "-c", config)
                assert replayed.exit_code == 1, replayed.output  # c2 still fails: its used approval stays out
                doc = json.loads(replayed.stdout)
                lines = [(ln["conversation"], ln["status"], ln["reason"]) for ln in doc["lines"]]
                assert lines == [("c2", "still-failing", "no-record"), ("c3", "forwarded", None)]
                got = await p.collect(lambda g: len(g.of("output", "c3")) == 1)
                assert got.of("output", "c2") == []
            finally:
                gk.request_stop()
                await asyncio.wait_for(task, 20)
                await store.close()


async def test_a_first_start_is_not_a_loss(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: Any, tmp_path: Path
) -> None:
    """No marker and no committed offset of the group: records load before the first gatekeeper start (the quick
    start), and replay's dry run reads what is there."""
    settings = settings_for(kafka_bootstrap, redis_url, [await make_route(topic_factory)])
    config = _config(settings, tmp_path)
    loaded = await cli("records", "load", _records(tmp_path, RECORD.item), "-c", config)
    assert loaded.exit_code == 0, loaded.output
    assert "loaded 1 record" in loaded.stdout and loaded.stderr == ""
    dry = await cli("replay", "--route", settings.routes[0].input, "--dry-run", "--json", "-c", config)
    assert dry.exit_code == 0, dry.output
    assert await redis_client.get(f"{settings.redis.key_prefix}:generation") is None  # the daemon writes it
