"""RedisStore against a real Redis: the same behaviour as MemoryStore, TTLs, compare-and-set races, records,
errors when Redis is unreachable, and the ``gatekeeper records`` commands."""

from __future__ import annotations

import asyncio
import calendar
import json
import socket
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.crc import key_slot
from typer.testing import CliRunner

from gatekeeper.cli import app
from gatekeeper.config import RedisSettings
from gatekeeper.policy import (
    BindingChange,
    ConversationState,
    Record,
    RecordKey,
    RoutePolicy,
    Verdict,
    bound_handoff,
)
from gatekeeper.policy.lifecycle import IndexEntry
from gatekeeper.processor import Line, Processor
from gatekeeper.redis_store import Keys, RedisStore, escape_tag
from gatekeeper.store import DataLost, MemoryStore, RecordExists, StoreError
from rwcore import get_profile
from tests.seed import AN, DN, HO, RB, RECORD_VALUES

RECORD = Record(item="inv:MD-2026-057", ask="PAY", values=RECORD_VALUES)
NOW = float(calendar.timegm(time.strptime("20261001T0900Z", "%Y%m%dT%H%MZ")))
RETENTION = 3600
OPEN_RETENTION = 86400


def _settings(url: str, prefix: str, **kw: Any) -> RedisSettings:
    return RedisSettings(
        url=url, key_prefix=prefix, retention_seconds=RETENTION, open_retention_seconds=OPEN_RETENTION, **kw
    )


def _route() -> RoutePolicy:
    return RoutePolicy(name="agents.pay", profile=get_profile("pay"), hold_seconds=0.0)


@pytest.fixture
def prefix() -> str:
    return f"gkt{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def store(redis_url: str, redis_client: Any, prefix: str) -> AsyncIterator[RedisStore]:
    # redis_client is requested so that every key the test writes is deleted after it
    s = RedisStore(_settings(redis_url, prefix))
    try:
        yield s
    finally:
        await s.close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------- the Store protocol, as MemoryStore behaves


async def test_flow_round_trip_matches_memory_store(store: RedisStore) -> None:
    memory = MemoryStore()
    for s in (store, memory):
        await s.put_record(RECORD)
    on_redis, in_memory = Processor(store, _route()), Processor(memory, _route())
    for i, text in enumerate((HO, RB, AN, DN)):
        line = Line("conv-1", text.encode())
        (a,) = await on_redis.process([line], NOW + i)
        (b,) = await in_memory.process([line], NOW + i)
        assert (a.verdict, a.reason, a.problems) == (b.verdict, b.reason, b.problems)
        assert a.verdict is Verdict.FORWARD, a.problems
        loaded = await store.load("agents.pay", {"conv-1": None}, [RECORD.key])
        expected = memory.state("agents.pay", "conv-1")
        assert expected is not None
        assert loaded.states["conv-1"].all_fields() == expected.all_fields()
        assert loaded.records == {RECORD.key: RECORD}
        assert loaded.bindings.get(RECORD.key) == await memory.binding(RECORD.key)
    assert bound_handoff(await store.binding(RECORD.key) or "") == "agents.pay/conv-1/scheduler-1"
    # the same line again: the stored first decision, no second state change
    (again,) = await on_redis.process([Line("conv-1", HO.encode())], NOW + 100)
    assert again.repeated and again.verdict is Verdict.FORWARD and again.decided_at == NOW


async def test_load_of_unknown_conversations_and_records(store: RedisStore) -> None:
    loaded = await store.load("agents.pay", {"never-seen": None}, [RecordKey("inv:none", "PAY")])
    assert loaded.states["never-seen"].all_fields() == ConversationState().all_fields()
    assert loaded.records == {} and loaded.bindings == {}
    assert (await store.load("agents.pay", {}, [])).states == {}


async def test_save_writes_one_hash_per_conversation_with_ttl(store: RedisStore, redis_client: Any) -> None:
    await store.put_record(RECORD)
    proc = Processor(store, _route())
    await proc.process([Line("conv-ttl", HO.encode())], NOW)
    key = store.keys.state("agents.pay", "conv-ttl")
    fields = {k.decode(): v for k, v in (await redis_client.hgetall(key)).items()}
    assert set(fields) == {"h", "l:scheduler-1", "o:scheduler-1", "t:scheduler-1"}
    assert all(b": " not in v and b", " not in v for v in fields.values())  # compact JSON
    assert json.loads(fields["o:scheduler-1"])["item"] == "inv:MD-2026-057"
    assert json.loads(fields["h"]) == {"v": 2, "seq": 1, "open": 1}
    ttl_open = await redis_client.ttl(key)
    assert RETENTION < ttl_open <= OPEN_RETENTION  # a handoff is open
    for i, text in enumerate((RB, AN, DN), 1):
        await proc.process([Line("conv-ttl", text.encode())], NOW + i)
    assert json.loads(await redis_client.hget(key, "h")) == {"v": 2, "seq": 4, "open": 0}
    ttl_closed = await redis_client.ttl(key)
    assert 0 < ttl_closed <= RETENTION  # every handoff closed: the shorter retention
    # records and bindings do not expire
    assert await redis_client.ttl(store.keys.record(RECORD.key)) == -1
    assert await redis_client.ttl(store.keys.binding(RECORD.key)) == -1


async def test_a_batch_writes_only_the_entries_it_changed(store: RedisStore, redis_client: Any) -> None:
    await store.put_record(RECORD)
    proc = Processor(store, _route())
    key = store.keys.state("agents.pay", "conv-inc")
    await proc.process([Line("conv-inc", HO.encode())], NOW)
    for i in range(30):  # unrelated statements: each adds its own entry, never rewrites the handoff's
        st = f"RW1 ST scheduler-{100 + i} p=pay from=scheduler to=payer item=doc:n{i}"
        await proc.process([Line("conv-inc", st.encode())], NOW)
    before = await redis_client.hget(key, "o:scheduler-1")
    await redis_client.hset(key, "l:scheduler-100", b'{"sentinel": true}')  # would be overwritten by a whole SET
    await proc.process([Line("conv-inc", RB.encode())], NOW + 1)
    assert await redis_client.hget(key, "l:scheduler-100") == b'{"sentinel": true}'
    assert await redis_client.hget(key, "o:scheduler-1") != before  # the readback passed: the handoff changed


async def test_a_version_1_document_is_converted_on_first_touch(store: RedisStore, redis_client: Any) -> None:
    """State written by the previous release (one JSON document) is read, decided on and converted to the hash;
    the document is deleted."""
    from gatekeeper.store import MemoryStore
    from tests.policy.world import route as pay_route

    mem = MemoryStore()
    await mem.put_record(RECORD)
    await Processor(mem, pay_route()).process([Line("old", HO.encode())], NOW)
    whole = mem.state("agents.pay", "old")
    assert whole is not None
    doc = {
        "v": 1,
        "lines": {k: json.loads(whole.field(f"l:{k}") or "{}") for k in whole.lines},  # the entries' own form
        "handoffs": {k: json.loads(whole.field(f"o:{k}") or "{}") for k in whole.handoffs},
        "readbacks": {},
        "tracker": {"v": 1, "n": whole.seq, "ho": [whole.tracker.handoff_state("scheduler-1")]},
        "seq": whole.seq,
    }
    await redis_client.set(store.keys.conv("agents.pay", "old"), json.dumps(doc))
    await store.put_record(RECORD)
    await store.claim([BindingChange(RECORD.key, None, "old/scheduler-1")])
    proc = Processor(store, _route())
    (d,) = await proc.process([Line("old", RB.encode())], NOW + 1)
    assert d.reason is None, d.problems  # the readback found its handoff in the old document
    assert await redis_client.exists(store.keys.conv("agents.pay", "old")) == 0
    fields = await redis_client.hgetall(store.keys.state("agents.pay", "old"))
    assert {b"h", b"l:scheduler-1", b"o:scheduler-1", b"t:scheduler-1", b"l:payer-1", b"r:payer-1"} <= set(fields)
    assert json.loads(fields[b"h"])["open"] == 1
    (again,) = await proc.process([Line("old", HO.encode())], NOW + 2)
    assert again.repeated  # the same line, the same verdict, across the upgrade


async def test_the_lua_closure_is_the_python_one(store: RedisStore, redis_client: Any) -> None:
    """The load script follows the same pointers as ``policy.state.wanted_fields`` (the in-memory stores' closure):
    for any ids, the same fields."""
    import random

    from gatekeeper.policy.state import wanted_fields

    await store.put_record(RECORD)
    proc = Processor(store, _route())
    lines = [HO, RB, AN, DN, "RW1 CX scheduler-3 re=scheduler-1 p=pay from=scheduler to=payer item=inv:MD-2026-057"]
    for i, text in enumerate(lines):
        await proc.process([Line("closure", text.encode())], NOW + i)
    raw = await redis_client.hgetall(store.keys.state("agents.pay", "closure"))
    stored = {k.decode(): v.decode() for k, v in raw.items()}
    ids = ["scheduler-1", "payer-1", "scheduler-2", "payer-2", "scheduler-3", "nobody-9"]
    rnd = random.Random(7)
    for _ in range(25):
        pick = rnd.sample(ids, rnd.randint(0, 3))
        want = wanted_fields(pick, lambda names: {n: stored[n] for n in names if n in stored})
        got = (await store.load("agents.pay", {"closure": pick}, [])).states["closure"].all_fields()
        assert set(got) == set(want), pick


async def test_unreadable_state_is_a_store_error_not_a_fresh_state(store: RedisStore, redis_client: Any) -> None:
    await redis_client.hset(store.keys.state("agents.pay", "broken"), "h", b"{not json")
    with pytest.raises(StoreError, match="cannot be read"):
        await store.load("agents.pay", {"broken": None}, [])


class _CountingClient:
    """A client proxy that counts round trips: each pipeline execute and each direct command."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.round_trips = 0

    def pipeline(self, transaction: bool = True) -> Any:
        assert transaction is False  # cluster-compatible pipelines only
        pipe = self.inner.pipeline(transaction=transaction)
        execute = pipe.execute

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.round_trips += 1
            return await execute(*args, **kwargs)

        pipe.execute = counted
        return pipe

    def register_script(self, script: str) -> Any:
        return self.inner.register_script(script)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        async def direct(*args: Any, **kwargs: Any) -> Any:
            self.round_trips += 1
            return await attr(*args, **kwargs)

        return direct


async def test_load_save_and_claim_are_one_round_trip_each(redis_url: str, redis_client: Any, prefix: str) -> None:
    counting = _CountingClient(redis_client)
    s = RedisStore(_settings(redis_url, prefix), client=counting)
    await s.claim([BindingChange(RecordKey("warm", "PAY"), None, "c/0")])  # the scripts are loaded once, here
    await s.load("agents.pay", {"warm": ["x-1"]}, [])
    convs = {f"c{i}": [f"x-{i}", "y-1"] for i in range(20)}
    keys = [RecordKey(f"inv:{i}", "PAY") for i in range(20)]
    for what, call in (
        ("load", s.load("agents.pay", convs, keys)),
        ("save", s.save("agents.pay", {c: ConversationState() for c in convs})),
        ("claim", s.claim([BindingChange(k, None, f"c/{k.item}") for k in keys])),
    ):
        counting.round_trips = 0
        await call
        assert counting.round_trips == 1, what


async def test_a_batch_s_claims_and_its_save_are_one_round_trip(redis_url: str, redis_client: Any, prefix: str) -> None:
    counting = _CountingClient(redis_client)
    s = RedisStore(_settings(redis_url, prefix), client=counting)
    await s.save(
        "agents.pay", {"warm": ConversationState()}, claims=[BindingChange(RecordKey("w", "PAY"), None, "w/0")]
    )
    keys = [RecordKey(f"inv:{i}", "PAY") for i in range(5)]
    states = {f"c{i}": ConversationState() for i in range(5)}
    entries = [IndexEntry(i % 2, f"c{i}", "x-1", True, opened_at=NOW, due_at=NOW + 60) for i in range(5)]
    counting.round_trips = 0
    conflicts = await s.save(
        "agents.pay", states, entries, claims=[BindingChange(k, None, f"c/{k.item}") for k in keys]
    )
    assert conflicts == []
    assert counting.round_trips == (2 if s._cluster else 1)  # a cluster claims first: other slots
    assert [await s.binding(k) for k in keys] == [f"c/{k.item}" for k in keys]
    assert await redis_client.zcard(s.keys.lifecycle("open", "agents.pay", 0)) == 3


async def test_index_scores_keep_every_digit_of_the_time(store: RedisStore, redis_client: Any) -> None:
    due = NOW + 0.123456789  # 19 significant digits: the score is the float, not a rounding of it
    await store.save("agents.pay", {}, [IndexEntry(0, "c1", "x-1", True, opened_at=NOW + 1e-6, due_at=due)])
    member = json.dumps(["c1", "x-1"], separators=(",", ":"))
    assert await redis_client.zscore(store.keys.lifecycle("due", "agents.pay", 0), member) == due
    assert await redis_client.zscore(store.keys.lifecycle("open", "agents.pay", 0), member) == NOW + 1e-6


async def test_a_claim_that_conflicts_writes_nothing_else_of_the_batch(store: RedisStore, redis_client: Any) -> None:
    taken, free = RecordKey("inv:taken", "PAY"), RecordKey("inv:free", "PAY")
    assert await store.claim([BindingChange(taken, None, "other/scheduler-1")]) == []
    state = ConversationState()  # its header is written by any save
    entry = IndexEntry(0, "c1", "scheduler-1", True, opened_at=NOW, due_at=NOW + 60)
    bind_taken, bind_free = BindingChange(taken, None, "c1/scheduler-1"), BindingChange(free, None, "c1/x-2")
    conflicts = await store.save("agents.pay", {"c1": state}, [entry], claims=[bind_free, bind_taken])
    assert conflicts == [bind_taken]
    assert not await redis_client.exists(store.keys.state("agents.pay", "c1"))
    assert not await redis_client.exists(store.keys.lifecycle("open", "agents.pay", 0))
    assert await store.binding(free) == "c1/x-2"  # applied, as ``claim`` would: the batch gives it back or keeps it
    # a release that finds the binding another's has nothing to release: not a conflict that stops the writes
    release = BindingChange(taken, "c1/scheduler-1", None)
    assert await store.save("agents.pay", {"c1": state}, [entry], claims=[release]) == [release]
    assert await redis_client.exists(store.keys.state("agents.pay", "c1"))
    assert await store.binding(taken) == "other/scheduler-1"


# ---------------------------------------------------------------- compare-and-set of bindings


async def test_claim_applies_when_before_matches_and_is_idempotent(store: RedisStore) -> None:
    key = RecordKey("inv:cas", "PAY")
    bind = BindingChange(key, None, "c1/scheduler-1")
    assert await store.claim([bind]) == []
    assert await store.binding(key) == "c1/scheduler-1"
    assert await store.claim([bind]) == []  # already `after`: a retried claim is not a conflict
    other = BindingChange(key, None, "c2/scheduler-1")
    assert await store.claim([other]) == [other]  # bound to another handoff: conflict
    assert await store.binding(key) == "c1/scheduler-1"
    release = BindingChange(key, "c1/scheduler-1", None)
    assert await store.claim([release]) == []
    assert await store.binding(key) is None
    assert await store.claim([release]) == []  # already released


async def test_two_stores_racing_for_one_binding_exactly_one_wins(redis_url: str, redis_client: Any) -> None:
    prefix = f"gkt{uuid.uuid4().hex[:12]}"
    a, b = RedisStore(_settings(redis_url, prefix)), RedisStore(_settings(redis_url, prefix))
    try:
        for n in range(25):
            key = RecordKey(f"inv:race-{n}", "PAY")
            ca, cb = BindingChange(key, None, f"a/{n}"), BindingChange(key, None, f"b/{n}")
            conflicts_a, conflicts_b = await asyncio.gather(a.claim([ca]), b.claim([cb]))
            assert sorted([len(conflicts_a), len(conflicts_b)]) == [0, 1]
            winner = "a" if not conflicts_a else "b"
            assert await a.binding(key) == f"{winner}/{n}"
    finally:
        await a.close()
        await b.close()


async def test_two_gatekeepers_racing_for_one_approval_one_forwards(redis_url: str, redis_client: Any) -> None:
    """Two processors on two clients, one HO each for the same approved payment, in different conversations."""
    prefix = f"gkt{uuid.uuid4().hex[:12]}"
    a, b = RedisStore(_settings(redis_url, prefix)), RedisStore(_settings(redis_url, prefix))
    try:
        await a.put_record(RECORD)
        pa, pb = Processor(a, _route()), Processor(b, _route())
        (da,), (db,) = await asyncio.gather(
            pa.process([Line("conv-a", HO.encode())], NOW), pb.process([Line("conv-b", HO.encode())], NOW)
        )
        verdicts = sorted([(da.verdict.value, da.reason), (db.verdict.value, db.reason)], key=str)
        assert [v for v, _ in verdicts] == ["dead-letter", "forward"]
        assert {r for _, r in verdicts} == {None, "record-used"}
        holder = await a.binding(RECORD.key)
        won = "conv-a" if da.verdict is Verdict.FORWARD else "conv-b"
        assert bound_handoff(holder or "") == f"agents.pay/{won}/scheduler-1"
    finally:
        await a.close()
        await b.close()


async def test_claim_reloads_a_flushed_script(store: RedisStore, redis_client: Any) -> None:
    await redis_client.script_flush()
    key = RecordKey("inv:flushed", "PAY")
    assert await store.claim([BindingChange(key, None, "c/1")]) == []
    assert await store.binding(key) == "c/1"


# ---------------------------------------------------------------- records


async def test_put_record_refuses_an_existing_record_unless_superseded(store: RedisStore) -> None:
    await store.put_record(RECORD)
    changed = Record(RECORD.item, RECORD.ask, {**RECORD.values, "amt": "5100.00"})
    with pytest.raises(RecordExists, match="inv:MD-2026-057"):
        await store.put_record(changed)
    assert (await store.get_records(RECORD.item, "PAY")) == [RECORD]
    assert await store.store_record(changed, supersede=True) is True
    assert (await store.get_records(RECORD.item, "PAY")) == [changed]
    assert await store.store_record(Record("inv:new", "PAY", {"to": "payer"}), supersede=True) is False


async def test_get_and_delete_records_of_an_item(store: RedisStore) -> None:
    draft = Record(RECORD.item, "DRAFT", {"to": "desk"}, expect_acc=("len:120w", "tone:plain"))
    bank = Record("sup:marlow", "CHGBANK", {"to": "payer"}, resolved={"prev": "20-45-17/33019284"})
    for r in (RECORD, draft, bank):
        await store.put_record(r)
    assert await store.get_records(RECORD.item) == [draft, RECORD]  # sorted by ask
    assert await store.get_records("sup:marlow") == [bank]
    assert await store.get_records("inv:none") == []
    await store.claim([BindingChange(RECORD.key, None, "c/scheduler-1")])
    assert await store.delete_records(RECORD.item, "PAY") == 1
    assert await store.get_records(RECORD.item) == [draft]
    assert await store.binding(RECORD.key) == "c/scheduler-1"  # the binding stays: the act may be in flight
    assert await store.delete_records(RECORD.item) == 1
    assert await store.delete_records(RECORD.item) == 0
    assert await store.get_records(RECORD.item) == []


async def test_braces_in_ids_stay_inside_their_hash_tag(store: RedisStore) -> None:
    item = "gh:crox/site{x}#42%7B"
    rec = Record(item, "DRAFT", {"to": "writer"})
    await store.put_record(rec)
    assert await store.get_records(item) == [rec]
    await store.save("agents.pay", {"c{1}/x": ConversationState()})
    assert (await store.load("agents.pay", {"c{1}/x": None}, [])).states[
        "c{1}/x"
    ].all_fields() == ConversationState().all_fields()


def test_key_layout_is_cluster_safe() -> None:
    keys = Keys("gk")
    k = RecordKey("inv:{odd}", "PAY")
    slots = {key_slot(x.encode()) for x in (keys.record(k), keys.binding(k), keys.index(k.item))}
    assert len(slots) == 1  # record, binding and the item's index share a slot
    assert keys.record(k) == "gk:rec:{inv:%7Bodd%7D}:PAY"
    assert keys.conv("agents.pay", "c}1") == "gk:conv:{agents.pay/c%7D1}"
    # escaping is injective: values that differ only by an escape sequence get different keys
    assert escape_tag("a{") != escape_tag("a%7B")
    assert keys.conv("a", "b/c") != keys.conv("a/b", "c")


# ---------------------------------------------------------------- infrastructure trouble


async def test_unreachable_redis_is_a_store_error() -> None:
    s = RedisStore(_settings(f"redis://:hunter2@127.0.0.1:{_closed_port()}/0", "gk"))
    try:
        with pytest.raises(StoreError) as info:
            await s.load("agents.pay", {"c": None}, [RECORD.key])
        assert "hunter2" not in str(info.value)
        for call in (
            s.ping(),
            s.save("agents.pay", {"c": ConversationState()}),
            s.claim([BindingChange(RECORD.key, None, "c/1")]),
            s.put_record(RECORD),
            s.get_records("x"),
            s.delete_records("x"),
            s.binding(RECORD.key),
        ):
            with pytest.raises(StoreError):
                await call
    finally:
        await s.close()


async def test_ping(store: RedisStore) -> None:
    assert await store.ping() is True


# ---------------------------------------------------------------- gatekeeper records (CLI on real Redis)


def _records_file(tmp_path: Any) -> str:
    path = tmp_path / "records.json"
    path.write_text(
        json.dumps(
            {
                "inv:MD-2026-057": {k: v for k, v in RECORD.values.items() if k != "item"},
                "sup:marlow": {"ask": "CHGBANK", "to": "payer", "resolved": {"prev": "20-45-17/33019284"}},
            }
        )
    )
    return str(path)


def test_records_commands(redis_url: str, redis_client: Any, prefix: str, tmp_path: Any) -> None:
    runner = CliRunner()
    env = {"GK_REDIS__URL": redis_url, "GK_REDIS__KEY_PREFIX": prefix, "GK_CONFIG": None}
    path = _records_file(tmp_path)
    res = runner.invoke(app, ["records", "load", path, "--profile", "pay"], env=env)
    assert res.exit_code == 0, res.output
    assert "loaded 2 records (2 new, 0 superseded), refused 0 existing" in res.stdout

    res = runner.invoke(app, ["records", "load", path], env=env)
    assert res.exit_code == 1
    assert "refused item inv:MD-2026-057 ask PAY" in res.stderr and "--supersede" in res.stderr

    res = runner.invoke(app, ["records", "load", path, "--supersede"], env=env)
    assert res.exit_code == 0, res.output
    assert "(0 new, 2 superseded)" in res.stdout

    res = runner.invoke(app, ["records", "get", "inv:MD-2026-057", "--json"], env=env)
    assert res.exit_code == 0, res.output
    [shown] = json.loads(res.stdout)
    assert shown["values"]["acct"] == "****2938" and shown["binding"] is None  # masked, as everywhere else
    assert shown["values"]["amt"] == RECORD.values["amt"]
    res = runner.invoke(app, ["records", "get", "inv:MD-2026-057", "--json", "--unmasked"], env=env)
    [shown] = json.loads(res.stdout)
    assert res.exit_code == 0 and shown["values"]["acct"] == "40-12-88/61102938"

    res = runner.invoke(app, ["records", "get", "sup:marlow"], env=env)
    assert res.exit_code == 0 and "prev=****9284" in res.stdout and "33019284" not in res.stdout
    res = runner.invoke(app, ["records", "get", "sup:marlow", "--unmasked"], env=env)
    assert res.exit_code == 0 and "prev=20-45-17/33019284" in res.stdout

    res = runner.invoke(app, ["records", "delete", "inv:MD-2026-057"], env=env)
    assert res.exit_code == 2 and "--yes" in res.stderr  # not a terminal: no silent deletion
    res = runner.invoke(app, ["records", "delete", "inv:MD-2026-057", "--ask", "PAY", "--yes"], env=env)
    assert res.exit_code == 0 and "deleted 1 record" in res.stdout
    res = runner.invoke(app, ["records", "get", "inv:MD-2026-057"], env=env)
    assert res.exit_code == 1  # a finding: the one thing asked for is not there, said as such (not as an error)
    assert res.stderr == "gatekeeper: no record for item inv:MD-2026-057\n" and res.stdout == ""


def test_records_commands_with_redis_down(tmp_path: Any) -> None:
    env = {"GK_REDIS__URL": f"redis://127.0.0.1:{_closed_port()}/0", "GK_CONFIG": None}
    res = CliRunner().invoke(app, ["records", "load", _records_file(tmp_path)], env=env)
    assert res.exit_code == 3
    assert res.stderr.startswith("gatekeeper: error: redis redis://127.0.0.1:")
    assert "Traceback" not in res.output


def test_client_from_settings_tls_and_credentials() -> None:
    """No connection is made: the client is configured from the settings (TLS upgrades redis:// to rediss://)."""
    from pydantic import SecretStr

    from gatekeeper.config import ConfigError
    from gatekeeper.redis_store import client_from_settings, redacted_url

    options: dict[str, Any] = {"tls": True, "username": "gk", "password": SecretStr("pw"), "tls_ca_file": "ca.pem"}
    client = client_from_settings(RedisSettings(url="redis://h:6380/0", **options))
    kwargs = client.connection_pool.connection_kwargs
    from redis.asyncio.connection import SSLConnection

    assert issubclass(client.connection_pool.connection_class, SSLConnection)  # its commands packed in one call
    assert (kwargs["username"], kwargs["password"], kwargs["ssl_ca_certs"]) == ("gk", "pw", "ca.pem")
    with pytest.raises(ConfigError, match="unix"):
        client_from_settings(RedisSettings(url="unix:///tmp/redis.sock", tls=True))
    # redis.cluster: a RedisCluster seeded by the url's node, with the same credentials and TLS
    cluster = client_from_settings(RedisSettings(url="redis://h:6380/0", cluster=True, **options))
    assert type(cluster).__name__ == "RedisCluster"
    assert [(n.host, n.port) for n in cluster.nodes_manager.startup_nodes.values()] == [("h", 6380)]
    kwargs = cluster.nodes_manager.connection_kwargs
    assert kwargs["connection_class"].__name__ == "SSLConnection"
    assert (kwargs["username"], kwargs["password"], kwargs["ssl_ca_certs"]) == ("gk", "pw", "ca.pem")
    with pytest.raises(ConfigError, match="over TCP"):
        client_from_settings(RedisSettings(url="unix:///tmp/redis.sock", cluster=True))
    with pytest.raises(ConfigError, match="database 0"):
        client_from_settings(RedisSettings(url="redis://h:6380/2", cluster=True))
    # ?cluster=true on the url is the same switch; the parameter is not passed on to redis-py
    by_url = RedisSettings(url="redis://h:6380/0?cluster=true&health_check_interval=5", **options)
    assert by_url.cluster and RedisSettings(url="redis://h:6380/0?cluster=false").cluster is False
    from_url = client_from_settings(by_url)
    assert type(from_url).__name__ == "RedisCluster"
    assert from_url.nodes_manager.connection_kwargs["health_check_interval"] == 5
    with pytest.raises(ValueError, match="true or false"):
        RedisSettings(url="redis://h:6380/0?cluster=yes")
    assert redacted_url("rediss://user:secret@host:1/0") == "rediss://host:1/0"


async def test_a_zombie_s_late_write_is_refused_by_redis(store: RedisStore, redis_client: Any) -> None:
    """The fence in the Lua save script: the scenario of ``tests/unit/test_fencing.py`` on real Redis."""
    from tests.unit.test_fencing import zombie_scenario

    raised, (clearance,) = await zombie_scenario(store)
    assert raised is not None and raised.__name__ == "Fenced"
    assert [p.code for p in clearance.problems] == ["clearance-refused"]
    rb = json.loads(await redis_client.hget(store.keys.state("agents.pay", "c1"), "r:payer-1"))
    assert rb["refused"] is True
    assert await redis_client.hget(store.keys.state("agents.pay", "c1"), "e") == b"2"


async def test_the_lifecycle_index_is_fenced_by_the_partition_s_epoch(store: RedisStore, redis_client: Any) -> None:
    from gatekeeper.store import Fenced

    old = (await store.take_epochs("agents.pay", [3]))[3]
    new = (await store.take_epochs("agents.pay", [3]))[3]
    entry = IndexEntry(3, "c9", "scheduler-1", open=True, opened_at=NOW, due_at=NOW + 60)
    await store.save("agents.pay", {}, [entry], {"c9": new})
    assert await redis_client.zscore(store.keys.lifecycle("open", "agents.pay", 3), '["c9","scheduler-1"]') == NOW
    closed = IndexEntry(3, "c9", "scheduler-1", open=False)
    with pytest.raises(Fenced):
        await store.save("agents.pay", {}, [closed], {"c9": old})  # the zombie's view: closed; refused
    assert await redis_client.zscore(store.keys.lifecycle("open", "agents.pay", 3), '["c9","scheduler-1"]') == NOW
    await store.save("agents.pay", {}, [closed], {"c9": new})
    assert await redis_client.zscore(store.keys.lifecycle("open", "agents.pay", 3), '["c9","scheduler-1"]') is None


async def test_the_collection_on_redis_leaves_what_the_in_memory_one_leaves(
    redis_url: str, redis_client: Any, prefix: str
) -> None:
    """The Lua collection in the save script applies ``policy.state.collectable`` as the in-memory store does: the
    same long conversation leaves the same fields, and its queue has the TTL of its hash."""
    from tests.policy.test_retention import RETENTION, a_long_conversation

    settings = RedisSettings(
        url=redis_url, key_prefix=prefix, retention_seconds=int(RETENTION), open_retention_seconds=OPEN_RETENTION
    )
    redis = RedisStore(settings)
    try:
        await a_long_conversation(redis, 120)
        got = await redis_client.hgetall(redis.keys.state("agents.pay", "long"))
        assert 0 < await redis_client.ttl(redis.keys.queue("agents.pay", "long")) <= OPEN_RETENTION
    finally:
        await redis.close()
    memory = MemoryStore(retention_seconds=RETENTION)
    await a_long_conversation(memory, 120)
    want = memory.fields("agents.pay", "long")
    assert {k.decode() for k in got} == set(want)
    assert len(want) < 200


async def test_a_master_that_lost_its_data_is_seen_by_the_next_batch(redis_client: Any, redis_url: str) -> None:
    """Each master in turn (the one of a single Redis; every one of a Redis Cluster: the marker lives on one, a copy
    of it on each): the store's keys on that master are deleted, as a master restarted without persistence (or
    failed over to an empty replica) comes back, and the next load, claim, save and ping raise ``DataLost``."""

    cluster = hasattr(redis_client, "get_primaries")
    masters = redis_client.get_primaries() if cluster else [None]
    if cluster:
        assert len(masters) >= 2  # what this run is about
    for i, master in enumerate(masters):
        store = RedisStore(_settings(redis_url, f"gkt{uuid.uuid4().hex[:8]}n{i}"))
        try:
            await store.ensure_generation()
            await store.put_record(RECORD)
            assert await store.ping()
            on_master = {"target_nodes": master} if cluster else {}
            gone = [k async for k in redis_client.scan_iter(match=f"{store.keys.prefix}:*", **on_master)]
            assert gone  # every master holds a key of the store: on a cluster, at least a copy of the marker
            for key in gone:
                await redis_client.delete(key)
            with pytest.raises(DataLost):
                await store.load("agents.pay", {"c": None}, [RECORD.key])
            with pytest.raises(DataLost):
                await store.claim([BindingChange(RECORD.key, None, "c/scheduler-1")])
            with pytest.raises(DataLost):
                await store.save("agents.pay", {"c": ConversationState()})
            with pytest.raises(DataLost):
                await store.ping()
        finally:
            await store.close()
