"""The lifecycle's part of the Redis store: the deadline indexes written with the states in one round trip, read per
partition in one round trip, cluster-safe keys, and the cancel intents' compare-and-set; the same behaviour as the
MemoryStore (the sweeper's tests run on both)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.crc import key_slot

from gatekeeper.config import RedisSettings
from gatekeeper.policy import ConversationState
from gatekeeper.policy.lifecycle import IndexEntry
from gatekeeper.processor import Line, Processor
from gatekeeper.redis_store import RedisStore
from gatekeeper.store import CancelIntent, MemoryStore
from tests.integration.test_redis_store import _CountingClient
from tests.policy.test_lifecycle import HO_EXP, T_EXP
from tests.policy.world import NOW, RECORD, route

pytestmark = pytest.mark.integration

ROUTE = "agents/pay"  # a route with a slash: escaped inside the hash tags


@pytest.fixture
async def store(redis_url: str, redis_client: Any) -> AsyncIterator[RedisStore]:
    s = RedisStore(RedisSettings(url=redis_url, key_prefix=f"gkt{uuid.uuid4().hex[:10]}"))
    try:
        yield s
    finally:
        await s.close()


def entries() -> list[IndexEntry]:
    return [
        IndexEntry(3, "c{1}", "a-1", True, opened_at=100.0, due_at=200.0),
        IndexEntry(3, "c2", "a-1", True, opened_at=50.0),
        IndexEntry(0, "c3", "x-1", True, opened_at=10.0, due_at=float("inf"), lapsed_at=5.0),
    ]


@pytest.mark.parametrize("kind", ["redis", "memory"])
async def test_the_indexes_behave_the_same_on_redis_and_in_memory(kind: str, store: RedisStore) -> None:
    s: Any = store if kind == "redis" else MemoryStore()
    await s.save(ROUTE, {}, entries())
    views = await s.due_view(ROUTE, [0, 3], 300.0, 10, forget_lapsed_before=None)
    assert [(e.conversation, e.ho, e.score) for e in views[3].due] == [("c{1}", "a-1", 200.0)]
    assert views[3].open_count == 2 and views[3].oldest is not None and views[3].oldest.conversation == "c2"
    assert views[0].due == [] and views[0].open_count == 1  # a deadline at +inf never comes
    assert [m.conversation for _, m in await s.index(ROUTE, "open")] == ["c3", "c2", "c{1}"]
    assert [(r, m.ho, m.score) for r, m in await s.index(None, "lapsed")] == [(ROUTE, "x-1", 5.0)]
    # a handoff that closes leaves the open and deadline indexes, and stays in the lapsed one
    await s.save(ROUTE, {}, [IndexEntry(0, "c3", "x-1", False, lapsed_at=5.0)])
    assert await s.index(ROUTE, "due") != [] and all(m.ho != "x-1" for _, m in await s.index(ROUTE, "open"))
    assert len(await s.index(ROUTE, "lapsed")) == 1
    # lapsed entries are forgotten after the retention
    await s.due_view(ROUTE, [0], 300.0, 10, forget_lapsed_before=6.0)
    assert await s.index(ROUTE, "lapsed") == []


async def test_save_with_deadlines_and_due_view_are_one_round_trip_each(redis_url: str, redis_client: Any) -> None:
    counting = _CountingClient(redis_client)
    s = RedisStore(RedisSettings(url=redis_url, key_prefix=f"gkt{uuid.uuid4().hex[:10]}"), client=counting)
    states = {f"c{i}": ConversationState() for i in range(10)}
    index = [IndexEntry(i % 4, f"c{i}", "a-1", True, opened_at=float(i), due_at=float(i)) for i in range(10)]
    counting.round_trips = 0
    await s.save(ROUTE, states, index)
    assert counting.round_trips == 1
    counting.round_trips = 0
    views = await s.due_view(ROUTE, range(4), 100.0, 50, forget_lapsed_before=0.0)
    assert counting.round_trips == 1 and sum(len(v.due) for v in views.values()) == 10
    counting.round_trips = 0
    await s.intents(ROUTE, [(f"c{i}", "a-1") for i in range(10)])
    assert counting.round_trips == 1


def test_a_buckets_keys_share_a_slot_and_an_intent_its_conversations(store: RedisStore) -> None:
    k = store.keys
    slots = {key_slot(k.lifecycle(kind, ROUTE, 7).encode()) for kind in ("due", "open", "lapsed")}
    assert len(slots) == 1
    assert key_slot(k.cancel(ROUTE, "c{1}", "a-1").encode()) == key_slot(k.conv(ROUTE, "c{1}").encode())
    assert k.parse_lifecycle(k.lifecycle("due", ROUTE, 7)) == (ROUTE, 7)
    assert {key_slot(k.lifecycle("due", ROUTE, p).encode()) for p in range(12)} != {next(iter(slots))}


async def test_a_cancel_intent_is_claimed_once_and_taken_over_once(store: RedisStore, redis_client: Any) -> None:
    intents = [
        CancelIntent("a-900000001", "RW1 CX a-900000001 ...", "EXPIRED", "out", 1, 41, f"sweeper-{n}", 1, 100.0)
        for n in range(5)
    ]
    claims = await asyncio.gather(*(store.claim_cancel(ROUTE, "c", "a-1", i) for i in intents))
    assert claims.count(None) == 1
    (winner,) = [i for i, c in zip(intents, claims, strict=True) if c is None]
    assert all(c == winner for c in claims if c is not None)
    intent = winner
    assert await store.claim_cancel(ROUTE, "c", "a-1", winner) is None  # the same claim again (a client's retry)
    ttl = await redis_client.ttl(store.keys.cancel(ROUTE, "c", "a-1"))
    assert 0 < ttl <= store.settings.open_retention_seconds
    takes = await asyncio.gather(*(store.take_over_cancel(ROUTE, "c", "a-1", 1, f"o{n}", 200.0) for n in range(5)))
    won = [t for t in takes if t is not None]
    assert len(won) == 1 and won[0].token == 2 and won[0].at == 200.0 and won[0].line == intent.line
    assert await store.take_over_cancel(ROUTE, "c", "a-1", 1, "late", 300.0) is None  # the token moved on
    await store.finish_cancel(ROUTE, "c", "a-1", 57)
    done = (await store.intents(ROUTE, [("c", "a-1")]))[("c", "a-1")]
    assert done.done and done.published == 57
    assert await store.take_over_cancel(ROUTE, "c", "a-1", 2, "late", 300.0) is None  # done: nothing to take


async def test_the_processor_indexes_a_handoff_and_repairs_a_lost_index_write(store: RedisStore) -> None:
    await store.put_record(RECORD)
    proc = Processor(store, route(hold_seconds=0.0))
    await proc.process([Line("c1", HO_EXP.encode(), partition=2)], NOW)
    (due,) = await store.index("agents.pay", "due")
    assert (due[1].partition, due[1].conversation, due[1].ho, due[1].score) == (2, "c1", "scheduler-1", T_EXP)
    # a write that stored the state but lost the index entries: the same line again writes them again
    await store.save("agents.pay", {}, [IndexEntry(2, "c1", "scheduler-1", False)])
    assert await store.index("agents.pay", "due") == []
    (again,) = await proc.process([Line("c1", HO_EXP.encode(), partition=2)], NOW + 5)
    assert again.repeated
    assert [m.ho for _, m in await store.index("agents.pay", "due")] == ["scheduler-1"]
    # the handoff closes: it leaves the deadline and open indexes
    await proc.process(
        [Line("c1", b"RW1 UN payer-1 re=scheduler-1 p=pay from=payer to=scheduler why=BUSY", partition=2)], NOW + 9
    )
    assert await store.index("agents.pay", "due") == [] and await store.index("agents.pay", "open") == []
