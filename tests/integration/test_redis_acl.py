"""The chart README's Redis ACL users, on the real Redis: the approver's, the daemon's and an operator's.

The ``ACL SETUSER`` lines are read from deploy/helm/gatekeeper/README.md ("Redis ACL users"), so the documentation
and this test cannot drift: each user is created under a name, a password and a key prefix of the test's own (the
``gk:`` of every key pattern becomes the test's prefix), then used by the gatekeeper's own code. The approver loads,
shows and deletes records and is refused the daemon's keys; the daemon decides threads that bind and release an
approval and is refused every write of a record or an item's index, by a command or by a script of its own; an
operator replays, lists and accepts a loss. ``ACL DRYRUN`` states each party's rights and refusals key by key.
"""

from __future__ import annotations

import asyncio
import calendar
import json
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from redis import exceptions as redis_exc
from redis.asyncio import RedisCluster
from typer.testing import CliRunner

from gatekeeper.cli import app
from gatekeeper.config import RedisSettings, Settings
from gatekeeper.generation import require
from gatekeeper.policy import BindingChange, ConversationState, Record, RoutePolicy, Verdict, bound_handoff
from gatekeeper.processor import Decision, Line, Processor
from gatekeeper.redis_store import Keys, RedisStore, client_from_settings
from gatekeeper.replay import RedisMarkers
from gatekeeper.store import CancelIntent, DataLost, StoreError
from rwcore import get_profile
from tests.seed import ACK, AN, CX, DN, HO, RB, RECORD_VALUES

README = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "gatekeeper" / "README.md"
DAEMON, APPROVER, OPERATOR = "gatekeeper", "gatekeeper-approver", "gatekeeper-operator"
ROUTE = "agents.pay"
RECORD = Record(item="inv:MD-2026-057", ask="PAY", values=RECORD_VALUES)
FORGED = Record(item="inv:FORGED-1", ask="PAY", values={**RECORD_VALUES, "item": "inv:FORGED-1", "amt": "99999.00"})
NOW = float(calendar.timegm(time.strptime("20261001T0900Z", "%Y%m%dT%H%MZ")))
#: A refusal, as Redis says it: a command's (``NOPERM``), a script's (it "can't access" a key), as redis-py and the
#: store (``StoreError``) pass it on.
REFUSED = re.compile(r"NOPERM|no permissions|can't access", re.IGNORECASE)
#: A key pattern of the README's lines: every one is under the prefix ``gk:`` (``~``, ``%R~``...), so the test's prefix
#: replaces it.
KEY_PATTERN = re.compile(r"^(%R|%W|%RW)?~gk:([a-z]+(:\*)?|\*)$")


def readme_users() -> dict[str, list[str]]:
    """The README's ``ACL SETUSER`` lines of the "Redis ACL users" section: each user's rules, by name."""
    text = README.read_text(encoding="utf-8")
    head = "\n## Redis ACL users\n"
    assert head in text, f"{README}: no section {head.strip()!r}"
    section = text.split(head, 1)[1].split("\n## ", 1)[0]
    users: dict[str, list[str]] = {}
    for line in section.splitlines():
        if line.startswith("ACL SETUSER "):
            _acl, _setuser, name, *rules = line.split()
            users[name] = rules
    return users


@dataclass(frozen=True)
class Users:
    """The README's users, created under the test's names and password, on its key prefix."""

    url: str
    prefix: str
    password: str
    names: dict[str, str]  # the README's name -> the test's

    def settings(self, party: str) -> RedisSettings:
        return RedisSettings(
            url=self.url,
            key_prefix=self.prefix,
            username=self.names[party],
            password=SecretStr(self.password),
            retention_seconds=3600,
            open_retention_seconds=86400,
        )

    def store(self, party: str) -> RedisStore:
        return RedisStore(self.settings(party))

    def client(self, party: str) -> Any:
        """A plain redis-py client logged in as ``party`` (what anyone holding its password can send)."""
        return client_from_settings(self.settings(party))

    def env(self, party: str) -> dict[str, str | None]:
        """The environment of a ``gatekeeper`` command run as ``party``."""
        return {
            "GK_REDIS__URL": self.url,
            "GK_REDIS__KEY_PREFIX": self.prefix,
            "GK_REDIS__USERNAME": self.names[party],
            "GK_REDIS__PASSWORD": self.password,
            "GK_CONFIG": None,
        }


async def _server_version(admin: Any) -> tuple[int, int]:
    info = await admin.info("server")
    if "redis_version" not in info:  # a cluster client answers per node
        info = next(iter(info.values()))
    major, minor = str(info["redis_version"]).split(".")[:2]
    return int(major), int(minor)


def _rules(rules: list[str], prefix: str, password: str, *, setinfo: bool, cluster: bool) -> list[str]:
    """The README's rules for the test's user: its password, its key prefix, and the README's notes applied (no
    ``+client|setinfo`` before Redis 7.2, ``+cluster|slots +command`` on a cluster)."""
    out: list[str] = []
    for rule in rules:
        if rule.startswith(">"):
            assert rule == ">CHANGE-ME", rule  # the README shows a placeholder, never a password
            out.append(f">{password}")
        elif "~" in rule:
            assert KEY_PATTERN.match(rule), f"{rule}: a key pattern outside the prefix gk:"
            out.append(rule.replace("~gk:", f"~{prefix}:", 1))
        elif rule == "+client|setinfo" and not setinfo:
            continue  # the README's note: Redis 7.0 has no CLIENT SETINFO
        else:
            assert rule not in ("allkeys", "allcommands", "+@all", "nopass"), rule
            out.append(rule)
    if cluster:
        out += ["+cluster|slots", "+command"]  # the README's note on a Redis Cluster
    return out


async def _acl(admin: Any, *args: Any) -> Any:
    """An ACL command; on a cluster every node has to know the users."""
    if isinstance(admin, RedisCluster):
        return await admin.execute_command("ACL", *args, target_nodes=admin.get_nodes())
    return await admin.execute_command("ACL", *args)


async def _dryrun(admin: Any, user: str, *command: Any) -> bool:
    """``ACL DRYRUN``: whether ``user`` may send ``command`` (the server's own check, nothing is run)."""
    where = {"target_nodes": admin.get_default_node()} if isinstance(admin, RedisCluster) else {}  # any node
    answer = await admin.execute_command("ACL", "DRYRUN", user, *command, **where)
    text = answer.decode() if isinstance(answer, bytes) else str(answer)
    assert text == "OK" or REFUSED.search(text), text
    return text == "OK"


async def _refused(call: Awaitable[Any]) -> None:
    with pytest.raises((redis_exc.ResponseError, StoreError)) as info:
        await call
    assert REFUSED.search(str(info.value)), info.value


@pytest.fixture
async def users(redis_url: str, redis_client: Any) -> AsyncIterator[Users]:
    # redis_client: the test's keys are deleted after it; the users are deleted here
    version = await _server_version(redis_client)
    assert version >= (7, 0), f"Redis {version}: read-only key patterns (%R~) and ACL DRYRUN need Redis 7.0"
    readme = readme_users()
    assert set(readme) == {DAEMON, APPROVER, OPERATOR}, sorted(readme)
    tag = secrets.token_hex(4)
    made = Users(
        url=redis_url,
        prefix=f"gkacl{tag}",
        password=secrets.token_urlsafe(24),
        names={name: f"gkt-acl-{tag}-{name}" for name in readme},
    )
    cluster = isinstance(redis_client, RedisCluster)
    try:
        for name, rules in readme.items():
            mine = _rules(rules, made.prefix, made.password, setinfo=version >= (7, 2), cluster=cluster)
            await _acl(redis_client, "SETUSER", made.names[name], *mine)
        yield made
    finally:
        await _acl(redis_client, "DELUSER", *made.names.values())


def _route() -> RoutePolicy:
    return RoutePolicy(name=ROUTE, profile=get_profile("pay"), hold_seconds=0.0)


async def _thread(proc: Processor, conversation: str, lines: tuple[str, ...], at: float) -> list[Decision]:
    out: list[Decision] = []
    for i, text in enumerate(lines):
        (d,) = await proc.process([Line(conversation, text.encode(), partition=0)], at + i)
        assert d.verdict is Verdict.FORWARD, (text, d.reason, d.problems)
        out.append(d)
    return out


# ---------------------------------------------------------------- the approver


def test_the_approver_loads_shows_and_deletes_records_and_nothing_else(users: Users, tmp_path: Path) -> None:
    asyncio.run(_daemon_starts(users))  # the marker the records commands check is the daemon's
    records = tmp_path / "records.json"
    records.write_text(
        json.dumps(
            {
                RECORD.item: {k: v for k, v in RECORD.values.items() if k != "item"},
                "sup:marlow": {"ask": "CHGBANK", "to": "payer", "resolved": {"prev": "20-45-17/33019284"}},
            }
        )
    )
    runner = CliRunner()
    env = users.env(APPROVER)
    res = runner.invoke(app, ["records", "load", str(records), "--profile", "pay"], env=env)
    assert res.exit_code == 0, res.output
    assert "loaded 2 records (2 new, 0 superseded)" in res.stdout
    res = runner.invoke(app, ["records", "load", str(records), "--supersede"], env=env)  # reads the bindings
    assert res.exit_code == 0 and "(0 new, 2 superseded)" in res.stdout, res.output
    res = runner.invoke(app, ["records", "get", RECORD.item, "--json"], env=env)
    assert res.exit_code == 0, res.output
    [shown] = json.loads(res.stdout)
    assert shown["ask"] == "PAY" and shown["binding"] is None
    res = runner.invoke(app, ["records", "delete", "sup:marlow", "--yes"], env=env)
    assert res.exit_code == 0 and "deleted 1 record" in res.stdout, res.output

    # the daemon's user cannot load one: Redis refuses it (exit 3, as every Redis trouble), and nothing is written
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps({FORGED.item: {k: v for k, v in FORGED.values.items() if k != "item"}}))
    res = runner.invoke(app, ["records", "load", str(forged)], env=users.env(DAEMON))
    assert res.exit_code == 3 and REFUSED.search(res.stderr), res.output
    res = runner.invoke(app, ["records", "get", FORGED.item], env=env)
    assert res.exit_code == 1, res.output

    asyncio.run(_approver_is_refused_the_daemon_s_keys(users))


async def _daemon_starts(users: Users) -> None:
    async with users.store(DAEMON) as daemon:
        assert await daemon.ensure_generation() is not None


async def _approver_is_refused_the_daemon_s_keys(users: Users) -> None:
    keys = Keys(users.prefix)
    bind, state = keys.binding(RECORD.key), keys.state(ROUTE, "conv-1")
    async with users.store(APPROVER) as approver:
        raw = users.client(APPROVER)
        try:
            # its own: records and their index, through the store
            assert await approver.get_records(RECORD.item) == [RECORD]
            await approver.put_record(Record("inv:MD-2026-058", "PAY", {**RECORD_VALUES, "item": "inv:MD-2026-058"}))
            assert await approver.delete_records("inv:MD-2026-058") == 1
            assert await approver.binding(RECORD.key) is None  # bindings: read
            assert await approver.generation() is not None  # the marker: read
            # the daemon's: a binding, the marker, a conversation (not even read), an epoch
            await _refused(raw.set(bind, "agents.pay/conv-1/scheduler-1"))
            await _refused(raw.delete(bind))
            await _refused(raw.hset(state, "h", "{}"))
            await _refused(raw.hgetall(state))
            await _refused(raw.set(keys.generation(), "mine"))
            await _refused(raw.incrby(keys.lifecycle("epoch", ROUTE, 0), 1))
            # and through the daemon's own code: a claim, a save, an accepted loss
            await _refused(approver.claim([BindingChange(RECORD.key, None, "agents.pay/conv-1/scheduler-1")]))
            await _refused(approver.save(ROUTE, {"conv-1": ConversationState()}))
            await _refused(approver.accept_loss())
        finally:
            await raw.aclose()
    assert await _dryrun_table(users, APPROVER) == {
        "SET record": True,
        "DEL record": True,
        "SADD index": True,
        "SREM index": True,
        "GET binding": True,
        "SET binding": False,
        "DEL binding": False,
        "HGETALL state": False,
        "HSET state": False,
        "ZADD open": False,
        "HSET cancel": False,
        "GET marker": True,
        "SET marker": False,
        "EXISTS epoch": True,
        "INCRBY epoch": False,
        "SET replay marker": False,
        "SCAN": False,
        "EVAL": False,
        "FLUSHALL": False,
        "CONFIG GET": False,
    }


async def _dryrun_table(users: Users, party: str) -> dict[str, bool]:
    """What ``party`` may do to one key of each kind, as ``ACL DRYRUN`` answers."""
    keys = Keys(users.prefix)
    rec, index = keys.record(RECORD.key), keys.index(RECORD.item)
    bind, state = keys.binding(RECORD.key), keys.state(ROUTE, "conv-1")
    marker = f"{users.prefix}:replaying:{{agents.pay/conv-1}}:0123456789ab"
    commands: dict[str, tuple[Any, ...]] = {
        "SET record": ("SET", rec, "{}"),
        "DEL record": ("DEL", rec),
        "SADD index": ("SADD", index, "PAY"),
        "SREM index": ("SREM", index, "PAY"),
        "GET binding": ("GET", bind),
        "SET binding": ("SET", bind, "x"),
        "DEL binding": ("DEL", bind),
        "HGETALL state": ("HGETALL", state),
        "HSET state": ("HSET", state, "h", "{}"),
        "ZADD open": ("ZADD", keys.lifecycle("open", ROUTE, 0), "1", "m"),
        "HSET cancel": ("HSET", keys.cancel(ROUTE, "conv-1", "scheduler-1"), "done", "1"),
        "GET marker": ("GET", keys.generation()),
        "SET marker": ("SET", keys.generation(), "x"),
        "EXISTS epoch": ("EXISTS", keys.lifecycle("epoch", ROUTE, 0)),
        "INCRBY epoch": ("INCRBY", keys.lifecycle("epoch", ROUTE, 0), "1"),
        "SET replay marker": ("SET", marker, "1", "EX", "60", "GET"),
        "SCAN": ("SCAN", "0"),
        "EVAL": ("EVAL", "return 1", "0"),
        "FLUSHALL": ("FLUSHALL",),
        "CONFIG GET": ("CONFIG", "GET", "maxmemory"),
    }
    admin = client_from_settings(RedisSettings(url=users.url))  # the test's own user (the fixture's is on its loop)
    try:
        return {what: await _dryrun(admin, users.names[party], *cmd) for what, cmd in commands.items()}
    finally:
        await admin.aclose()


# ---------------------------------------------------------------- the daemon


async def test_the_daemon_decides_with_the_records_it_cannot_write(users: Users, redis_client: Any) -> None:
    keys = Keys(users.prefix)
    async with users.store(APPROVER) as approver:
        await approver.put_record(RECORD)
    await redis_client.script_flush()  # the daemon loads its scripts itself (SCRIPT LOAD)
    async with users.store(DAEMON) as daemon:
        # its start: the marker, the partitions' epochs
        assert await daemon.ensure_generation() is not None
        assert await daemon.epochs_exist(ROUTE, [0]) is False
        proc = Processor(daemon, _route())
        proc.epochs = await daemon.take_epochs(ROUTE, [0])
        assert await daemon.epochs_exist(ROUTE, [0]) is True

        # a handoff binds the approval; cancelled and acknowledged, it releases it
        await _thread(proc, "conv-1", (HO, RB), NOW)
        assert bound_handoff(await daemon.binding(RECORD.key) or "") == "agents.pay/conv-1/scheduler-1"
        await _thread(proc, "conv-1", (CX, ACK), NOW + 10)
        assert await daemon.binding(RECORD.key) is None
        # a second handoff binds it again, is cleared and done: the approval stays spent
        await _thread(proc, "conv-2", (HO, RB, AN, DN), NOW + 20)
        assert bound_handoff(await daemon.binding(RECORD.key) or "") == "agents.pay/conv-2/scheduler-1"
        (again,) = await proc.process([Line("conv-3", HO.encode(), partition=0)], NOW + 30)
        assert (again.verdict, again.reason) == (Verdict.DEAD_LETTER, "record-used")

        # the sweeper's reads and writes
        view = await daemon.due_view(ROUTE, [0], NOW + 40, 100, forget_lapsed_before=NOW)
        assert view[0].open_count == 0  # both handoffs closed
        intent = CancelIntent("scheduler-900000001", "RW1 CX ...", "EXPIRED", "out", 0, 41, "one", 1, NOW)
        assert await daemon.claim_cancel(ROUTE, "conv-4", "scheduler-1", intent) is None
        assert (await daemon.intents(ROUTE, [("conv-4", "scheduler-1")]))[("conv-4", "scheduler-1")] == intent
        taken = await daemon.take_over_cancel(ROUTE, "conv-4", "scheduler-1", 1, "two", NOW + 1)
        assert taken is not None and taken.owner == "two"
        await daemon.finish_cancel(ROUTE, "conv-4", "scheduler-1", 42)
        assert await daemon.ping() is True

        # the console's reads, which the HTTP process makes with the daemon's user (gatekeeper.console.service)
        assert await daemon.index_size(ROUTE, "open", [0, 1]) == 0
        assert [m.conversation for m in await daemon.index_head(ROUTE, "lapsed", [0], 10, newest=True)] == []
        whole = (await daemon.load(ROUTE, {"conv-2": None}, ())).states["conv-2"]
        assert sorted(whole.lines) == ["payer-1", "payer-2", "scheduler-1", "scheduler-2"]

        # what it cannot do: write a record or an index, by a command, by the store's code, by a script of its own
        raw = users.client(DAEMON)
        try:
            rec, forged = keys.record(RECORD.key), keys.record(FORGED.key)
            await _refused(raw.set(forged, json.dumps(FORGED.to_dict())))  # issue 28: a raw SET was an approval
            await _refused(raw.set(rec, json.dumps({**RECORD.to_dict(), "values": FORGED.values})))
            await _refused(raw.delete(rec))
            await _refused(raw.sadd(keys.index(FORGED.item), "PAY"))
            await _refused(raw.srem(keys.index(RECORD.item), "PAY"))
            await _refused(raw.smembers(keys.index(RECORD.item)))  # not even read: the daemon has no use for it
            writes = await raw.script_load("return redis.call('SET', ARGV[1], ARGV[2])")
            await _refused(raw.evalsha(writes, 0, forged, json.dumps(FORGED.to_dict())))
            await _refused(raw.eval("return redis.call('DEL', ARGV[1])", 0, rec))
            await _refused(daemon.put_record(FORGED))
            await _refused(daemon.delete_records(RECORD.item, "PAY"))
            await _refused(raw.set(f"{users.prefix}:replaying:{{x}}:0", "1"))  # replay's: the operator's
        finally:
            await raw.aclose()
    async with users.store(APPROVER) as approver:
        assert await approver.get_records(RECORD.item) == [RECORD]
        assert await approver.get_records(FORGED.item) == []
    assert await redis_client.exists(keys.record(FORGED.key), keys.index(FORGED.item)) == 0

    table = await _dryrun_table(users, DAEMON)
    assert table == {
        "SET record": False,
        "DEL record": False,
        "SADD index": False,
        "SREM index": False,
        "GET binding": True,
        "SET binding": True,  # the README says so: its save changes bindings in the same script as the state
        "DEL binding": True,
        "HGETALL state": True,
        "HSET state": True,
        "ZADD open": True,
        "HSET cancel": True,
        "GET marker": True,
        "SET marker": True,
        "EXISTS epoch": True,
        "INCRBY epoch": True,
        "SET replay marker": False,
        "SCAN": False,
        "EVAL": False,
        "FLUSHALL": False,
        "CONFIG GET": False,
    }
    admin = redis_client
    assert await _dryrun(admin, users.names[DAEMON], "GET", keys.record(RECORD.key)) is True
    assert await _dryrun(admin, users.names[DAEMON], "MGET", keys.record(RECORD.key)) is True
    # an EVALSHA naming a record is refused before it runs: Redis takes a script's keys as written
    assert await _dryrun(admin, users.names[DAEMON], "EVALSHA", "0" * 40, "1", keys.record(RECORD.key)) is False


# ---------------------------------------------------------------- an operator


async def test_an_operator_replays_lists_and_accepts_a_loss(users: Users, redis_client: Any) -> None:
    keys = Keys(users.prefix)
    async with users.store(APPROVER) as approver:
        await approver.put_record(RECORD)
    async with users.store(DAEMON) as daemon, users.store(OPERATOR) as operator:
        assert await daemon.ensure_generation() is not None
        proc = Processor(daemon, _route())
        proc.epochs = await daemon.take_epochs(ROUTE, [0])
        await _thread(proc, "conv-1", (HO,), NOW)

        # gatekeeper handoffs / status: the lifecycle indexes (SCAN), a whole conversation, its cancel intent
        [(route, member)] = await operator.index(ROUTE, "open")
        assert (route, member.conversation, member.ho) == (ROUTE, "conv-1", "scheduler-1")
        whole = (await operator.load(ROUTE, {"conv-1": None}, ())).states["conv-1"]
        assert "scheduler-1" in whole.handoffs
        assert await operator.intents(ROUTE, [("conv-1", "scheduler-1")]) == {}

        # gatekeeper replay: the marker pinned, its in-flight markers, lines decided as the daemon does
        settings = Settings(redis=users.settings(OPERATOR))
        assert (await require(settings, operator, pin=True)).marker is not None
        markers = RedisMarkers(settings)
        try:
            mark = markers.key(ROUTE, "conv-1", RB.encode())
            assert await markers.begin([mark]) == set()
            assert await markers.begin([mark]) == {mark}  # an earlier replay did not finish it
            (d,) = await Processor(operator, _route()).process([Line("conv-1", RB.encode(), replay=True)], NOW + 1)
            assert d.verdict is Verdict.FORWARD, d.problems
            await markers.end([mark])
        finally:
            await markers.close()
        assert await redis_client.exists(mark) == 0

        raw = users.client(OPERATOR)
        try:
            await _refused(raw.set(keys.record(FORGED.key), json.dumps(FORGED.to_dict())))
            await _refused(raw.delete(keys.record(RECORD.key)))
            await _refused(raw.sadd(keys.index(FORGED.item), "PAY"))
            await _refused(operator.put_record(FORGED))
        finally:
            await raw.aclose()

        # gatekeeper redis accept-loss: a new marker, and the daemon that started on the old one stops
        before, after = await operator.accept_loss()
        assert before is not None and after != before and await operator.generation() == after
        with pytest.raises(DataLost):
            await daemon.ping()

    table = await _dryrun_table(users, OPERATOR)
    assert {k: v for k, v in table.items() if k.endswith(("record", "index"))} == dict.fromkeys(
        ("SET record", "DEL record", "SADD index", "SREM index"), False
    )
    assert table["SET replay marker"] and table["SCAN"] and table["HSET state"] and table["SET binding"]
    assert not (table["EVAL"] or table["FLUSHALL"] or table["CONFIG GET"])
    assert await _dryrun(redis_client, users.names[OPERATOR], "GET", keys.record(RECORD.key)) is True
