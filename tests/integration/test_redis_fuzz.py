"""Any lines, through the Redis store's batch scripts: the same decisions and the same stored state as the in-memory
store, and nothing raised out of the batch path.

The values are ``tests.policy.test_no_line_fatal``'s: conversations whose lines answer each other with extreme values,
wild lines, bytes that are no text, conversation ids with a slash, a snowman or nothing. On a single Redis a batch's
writes go to Redis as one JSON argument decoded by Lua (``redis_store._COMMIT_BATCH``): whatever a line holds must
come back from Redis as it went in."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gatekeeper.config import RedisSettings
from gatekeeper.policy import ConversationState, RoutePolicy
from gatekeeper.processor import Line, Processor
from gatekeeper.redis_store import RedisStore, client_from_settings
from gatekeeper.store import MemoryStore
from tests.policy.test_no_line_fatal import CONVERSATIONS, NOW, PROFILES, RECORD, conversation_lines, nothing_caught

ROUTE = "agents.fuzz"
RETENTION = 3600


@st.composite
def batches(draw: st.DrawFn) -> tuple[str, list[list[tuple[str | None, bytes]]]]:
    """A profile and batches of (conversation, value), each conversation's lines in their order."""
    prof = draw(st.sampled_from(["pay", "core"]))
    convs = draw(st.lists(st.sampled_from(CONVERSATIONS), min_size=1, max_size=3, unique=True))
    per_conv = {c: list(draw(conversation_lines(prof, 6))) for c in convs}
    order = draw(st.permutations([c for c in convs for _ in per_conv[c]]))
    stream = [(c, per_conv[c].pop(0)) for c in order]
    out = []
    while stream:
        n = draw(st.integers(1, 5))
        out.append(stream[:n])
        stream = stream[n:]
    return prof, out


def _shape(d: Any) -> tuple[Any, ...]:
    return d.verdict, d.reason, tuple((p.code, p.slot) for p in d.problems), d.repeated


async def _compare(redis_url: str, prof: str, plan: list[list[tuple[str | None, bytes]]]) -> None:
    prefix = f"gkz{uuid.uuid4().hex[:12]}"
    settings_ = RedisSettings(
        url=redis_url, key_prefix=prefix, retention_seconds=RETENTION, open_retention_seconds=RETENTION * 24
    )
    store = RedisStore(settings_)
    memory = MemoryStore(retention_seconds=RETENTION)
    try:
        policy = RoutePolicy(name=ROUTE, profile=PROFILES[prof], hold_seconds=0.0)
        on_redis, in_memory = Processor(store, policy), Processor(memory, policy)
        for s, p in ((store, on_redis), (memory, in_memory)):
            await s.put_record(RECORD)
            p.epochs.update(await s.take_epochs(ROUTE, [0, 1]))  # fenced writes, the lifecycle index written
        for k, batch in enumerate(plan):
            lines = [Line(c, v, partition=k % 2) for c, v in batch]
            got = await on_redis.process(lines, NOW + k)
            want = await in_memory.process(lines, NOW + k)
            assert [_shape(d) for d in got] == [_shape(d) for d in want]
        convs = {c for batch in plan for c, _ in batch if c is not None}
        loaded = await store.load(ROUTE, dict.fromkeys(convs), [RECORD.key])
        for c in convs:
            kept = memory.state(ROUTE, c) or ConversationState()  # none: its lines changed nothing
            assert loaded.states[c].all_fields() == kept.all_fields(), c
        assert loaded.bindings.get(RECORD.key) == await memory.binding(RECORD.key)
    finally:
        client = client_from_settings(settings_)
        try:
            async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
                await client.delete(key)
        finally:
            await client.aclose()
            await store.close()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=batches())
def test_any_lines_through_redis_decide_and_store_as_in_memory(redis_url: str, case: Any) -> None:
    prof, plan = case
    with nothing_caught():
        asyncio.run(_compare(redis_url, prof, plan))
