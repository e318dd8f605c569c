"""The gatekeeper end to end, on the local broker and Redis, against a raw Kafka passthrough in the same run.

    .venv/bin/python bench/e2e.py                         # every section, 1,000,000 lines (tens of minutes here)
    .venv/bin/python bench/e2e.py --lines 200000          # fewer lines
    .venv/bin/python bench/e2e.py --only throughput,growth
    .venv/bin/python bench/e2e.py --smoke                 # a few thousand lines per section: it runs, no figures
    .venv/bin/python bench/e2e.py --only throughput,latency --librdkafka   # and the passthrough on librdkafka

Kafka and Redis come from the environment (``GK_KAFKA_BOOTSTRAP``, ``GK_REDIS_URL``: ``deploy/local/stack.sh env``).
Every run makes topics and a Redis key prefix of its own and deletes them afterwards. The gatekeeper runs as
``gatekeeper run`` with its default settings (one route, 6 input partitions), the baseline as ``bench/passthrough.py``
(the gatekeeper's own client settings): each its own process, as in production. ``--librdkafka`` runs the same
passthrough on confluent-kafka as well (throughput and latency), a client whose protocol is librdkafka's C: what
the clients' Python costs, beside what the gatekeeper costs.

Sections (each prints a table; ratios are against figures taken in the same run):

- ``throughput``: catch-up on the same traffic (payment flows with ``rb=exec`` and the tool's readback, drafting
  flows with ``rb=acc``, cancels, a few per cent faulty and invalid lines; many conversations keyed by id), first
  through the passthrough, then through the gatekeeper: sustained lines/s (between 5% and 95% of the outcomes), the
  ratio, CPU ms per 1,000 lines (the process's user + system time), Redis round trips per batch (its metrics),
  Redis's own CPU per 1,000 lines (``INFO cpu``, over the same window);
- ``latency``: the gatekeeper fed at a fixed rate, 90% and 50% of its measured throughput and 1,000 lines/s:
  producer timestamp to outcome timestamp, p50 and p99; beside them the passthrough's on the same traffic at the same
  rates (its outputs stamped with the input's timestamp): what the broker, the clients and the benchmark add with no
  work done; each process's CPU per 1,000 lines at that rate (what a live worker pays), and Redis's; and the
  gatekeeper's batches (lines in each, and how often one came: a live line waits for the batch being decided when
  it arrives, then for its own);
- ``growth``: per-line cost in conversations of 10, 1,000 and 10,000 lines (one partition, the same line count);
- ``open``: throughput and Redis memory per open handoff with 10,000 and 100,000 handoffs open (``--open`` for
  others, 1,000,000 included);
- ``pair``: two gatekeepers in one group on the 6 partitions: their combined rate, and that no outcome came twice.

A benchmark, not a test: it prints figures; nothing asserts them (shared machines are noisy).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from redis.asyncio import Redis

from gatekeeper.consumers.sending import partition_of
from gatekeeper.policy import Record, RecordKey
from gatekeeper.redis_store import Keys
from rwcore import make_rb

sys.path.insert(0, str(Path(__file__).resolve().parent))
import long_conversation

ROOT = Path(__file__).resolve().parents[1]
CODE: str | None = None  # --code: run the gatekeeper from another checkout (the same run measures before and after)
SPY_NATIVE = False  # --profile-native: py-spy records the native frames too
FAULTY = 0.05  # --faulty: the throughput section's share of refused flows
BOOTSTRAP = os.environ.get("GK_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
REDIS_URL = os.environ.get("GK_REDIS_URL", "redis://127.0.0.1:6379/0")


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- traffic


@dataclass
class Traffic:
    lines: list[tuple[bytes, bytes]] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)


def _payment(i: int) -> tuple[list[str], Record]:
    acct = f"40-12-{i % 97:02d}/{61100000 + i:08d}"
    item = f"inv:B-{i}"
    values = {
        "to": "payer",
        "item": item,
        "ask": "PAY",
        "sup": "marlow",
        "amt": f"{100 + i % 9000}.00",
        "cur": "GBP",
        "kind": "GROSS",
        "acct": acct,
        "paid": "20261002",
        "ref": f"B-{i}",
        "apref": f"FD-{i}",
    }
    ho = (
        f"RW1 HO scheduler-1 p=pay from=scheduler to=payer item={item} ask=PAY rb=exec sup=marlow "
        f"amt={values['amt']} cur=GBP kind=GROSS acct={acct} paid=20261002 ref=B-{i} apref=FD-{i}"
    )
    rb = make_rb(ho, "payer-1", profile="pay")
    an = "RW1 AN scheduler-2 re=payer-1 p=pay from=scheduler to=payer val=Y"
    dn = (
        f"RW1 DN payer-2 re=scheduler-1 p=pay from=payer to=scheduler item={item} out=OK sup=marlow "
        f"amt={values['amt']} cur=GBP kind=GROSS acct={acct} paid=20261002 ref=B-{i} apref=FD-{i}"
    )
    return [ho, rb, an, dn], Record(item=item, ask="PAY", values=values)


def _drafting(i: int) -> tuple[list[str], Record]:
    item = f"doc:B-{i}"
    acc = ["len:120w", "tone:plain"]
    ho = f"RW1 HO scheduler-1 p=pay from=scheduler to=desk item={item} ask=DRAFT rb=acc sup=marlow"
    rb = make_rb(ho, "desk-1", profile="pay", acc=acc)
    dn = f"RW1 DN desk-2 re=scheduler-1 p=pay from=desk to=scheduler item={item} out=OK"
    rec = Record(item=item, ask="DRAFT", values={"to": "desk", "sup": "marlow"}, expect_acc=tuple(acc))
    return [ho, rb, dn], rec


def _cancel(i: int) -> list[str]:
    item = f"doc:C-{i}"
    return [
        f"RW1 HO scheduler-1 p=pay from=scheduler to=desk item={item} ask=REVIEW sup=marlow",
        f"RW1 CX scheduler-2 re=scheduler-1 p=pay from=scheduler to=desk item={item} why=REVOKED",
        "RW1 AN desk-1 re=scheduler-2 p=pay from=desk to=scheduler val=Y",
    ]


def _faulty(i: int) -> list[str]:
    lines, _ = _payment(i)
    bad = lines[0].replace("acct=40-12-", "acct=40-21-")  # a digit swap: check-ho, and its readback refused
    return [bad, lines[1], f"RW1 HO scheduler-3 p=pay from=scheduler to=payer ask=PAYY item=inv:B-{i}"]


def traffic(n: int, seed: int = 7, tag: str = "", faulty: float = 0.05) -> Traffic:
    """About ``n`` lines of many conversations, interleaved (a conversation's lines stay in order). ``faulty``: the
    share of conversations that are refused flows (a handoff without its record, its readback, a misspelt ask);
    the others are payment, drafting and cancel flows in the proportions 10:6:3."""
    rnd = random.Random(seed)
    t = Traffic()
    flows: list[tuple[bytes, list[str]]] = []
    i = 0
    total = 0
    while total < n:
        i += 1
        r = rnd.random()
        if faulty != 0.05:  # the default keeps the random sequence (and the traffic) of earlier runs
            r = 0.95 + r * 0.05 if r < faulty else (r - faulty) / (1 - faulty) * 0.95
        if r < 0.5:
            lines, rec = _payment(i)
            t.records.append(rec)
        elif r < 0.8:
            lines, rec = _drafting(i)
            t.records.append(rec)
        elif r < 0.95:
            lines = _cancel(i)
        else:
            lines = _faulty(i)
        flows.append((f"c{tag}-{i}".encode(), lines))
        total += len(lines)
    # interleave: a window of 64 conversations in flight, as many agents at once
    live: list[tuple[bytes, list[str]]] = []
    pending = iter(flows)
    while True:
        while len(live) < 64:
            nxt = next(pending, None)
            if nxt is None:
                break
            live.append((nxt[0], list(nxt[1])))
        if not live:
            break
        k = rnd.randrange(len(live))
        key, rest = live[k]
        t.lines.append((key, rest.pop(0).encode()))
        if not rest:
            live.pop(k)
    return t


def long_conversations(n_lines: int, per_conversation: int, tag: str) -> list[tuple[bytes, bytes]]:
    """Conversations of ``per_conversation`` lines (``long_conversation.lines``: REVIEW handoffs, each HO, RB, DN
    and a statement), interleaved round robin, so every conversation grows at the same pace."""
    convs = max(1, n_lines // per_conversation)
    one = long_conversation.lines(per_conversation // 4 + 1)[:per_conversation]
    return [(f"g{tag}-{c}".encode(), line.encode()) for line in one for c in range(convs)]


# ---------------------------------------------------------------- services


class Env:
    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.run = uuid.uuid4().hex[:8]
        self.created: list[str] = []
        self.prefixes: list[str] = []
        self.redis = Redis.from_url(REDIS_URL)
        self.dir = Path(tempfile.mkdtemp(prefix="gk-e2e-"))

    async def topics(self, name: str, partitions: int | None = None) -> dict[str, str]:
        names = {k: f"e2e-{self.run}-{name}.{k}" for k in ("in", "out", "dlq", "alerts")}
        admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
        await admin.start()
        try:
            parts = partitions or self.partitions
            await admin.create_topics([NewTopic(t, parts if k == "in" else 1, 1) for k, t in names.items()])
        finally:
            await admin.close()
        self.created += names.values()
        return names

    async def close(self) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
        await admin.start()
        with contextlib.suppress(Exception):
            await admin.delete_topics(self.created)
        await admin.close()
        for prefix in self.prefixes:
            cursor = 0
            while True:
                cursor, keys = await self.redis.scan(cursor, match=f"{prefix}:*", count=5000)
                if keys:
                    await self.redis.unlink(*keys)
                if cursor == 0:
                    break
        await self.redis.aclose()

    def prefix(self, name: str) -> str:
        p = f"e2e{self.run}{name}"[:32]
        self.prefixes.append(p)
        return p

    async def load_records(self, prefix: str, records: Sequence[Record]) -> None:
        """The approvals, written as ``gatekeeper records load`` writes them (the key layout of ``redis_store``)."""
        keys = Keys(prefix)
        for start in range(0, len(records), 5000):
            pipe = self.redis.pipeline(transaction=False)
            for rec in records[start : start + 5000]:
                pipe.set(keys.record(RecordKey(rec.item, rec.ask)), json.dumps(rec.to_dict(), separators=(",", ":")))
                pipe.sadd(keys.index(rec.item), rec.ask)
            await pipe.execute()

    async def memory(self) -> int:
        info = await self.redis.info("memory")
        return int(info["used_memory"])


async def produce(topic: str, lines: Sequence[tuple[bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", linger_ms=20, max_batch_size=262144)
    await producer.start()
    try:
        futures = []
        for key, value in lines:
            futures.append(await producer.send(topic, value, key=key))
            if len(futures) >= 20000:
                await asyncio.gather(*futures)
                futures = []
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def outcome_count(consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> int:
    """The records on the outcome partitions, as their end offsets (exactly-once, each transaction's commit marker
    takes an offset too: ``read_outcomes`` reads the records)."""
    ends = await consumer.end_offsets(tps)
    return sum(ends.values())


async def read_outcomes(
    topics: dict[str, str], *, committed: bool = False, timeout: float = 120.0
) -> list[tuple[str, Any]]:
    """Every record on the outcome topics, as (topic, record), read from the beginning to the end offsets (with
    ``committed``, as a ``read_committed`` consumer reads them: what downstream sees of an exactly-once run)."""
    isolation = "read_committed" if committed else "read_uncommitted"
    reader = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP, isolation_level=isolation, enable_auto_commit=False)
    await reader.start()
    tps = [TopicPartition(topics["out"], 0), TopicPartition(topics["dlq"], 0)]
    reader.assign(tps)
    await reader.seek_to_beginning(*tps)
    out: list[tuple[str, Any]] = []
    try:
        ends = await reader.end_offsets(tps)  # read_committed: the last stable offsets
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            positions = [await reader.position(tp) for tp in tps]
            if all(pos >= ends[tp] for pos, tp in zip(positions, tps, strict=True)):
                break
            for tp, recs in (await reader.getmany(timeout_ms=500)).items():
                out.extend((tp.topic, r) for r in recs)
    finally:
        await reader.stop()
    return out


def twice(outcomes: list[tuple[str, Any]]) -> int:
    """The records that repeat one already on the same topic: an outcome is the same as another when it answers
    for the same input record (``gk.original.partition``, ``gk.original.offset``), a refusal notice (which names no
    input record) when its line is the same. Outcomes minus lines is not the measure: a dead-lettered line's
    refusal notice is a second record for one line, by design."""
    seen: set[tuple[str, bytes | None, bytes | None]] = set()
    for topic, r in outcomes:
        h = dict(r.headers or ())
        if "gk.notice.refused" in h:
            seen.add((topic, b"notice", r.value))
        else:
            seen.add((topic, h.get("gk.original.partition"), h.get("gk.original.offset")))
    return len(outcomes) - len(seen)


def gatekeeper_config(
    topics: dict[str, str], prefix: str, kafka: dict[str, Any], *, redis_url: str | None = None
) -> dict[str, Any]:
    """A ``gatekeeper run`` config: one ``pay`` route over ``topics``, Redis keys under ``prefix``, JSON logs."""
    return {
        "kafka": kafka,
        "redis": {"url": redis_url or REDIS_URL, "key_prefix": prefix},
        "http": {"host": "127.0.0.1", "port": 0},
        "routes": [
            {
                "input": topics["in"],
                "output": topics["out"],
                "dead_letter": topics["dlq"],
                "alerts": topics["alerts"],
                "profile": "pay",
            }
        ],
        "log_format": "json",
    }


class Process:
    """``gatekeeper run`` (or the passthrough) as a subprocess, on a config of its own."""

    def __init__(
        self,
        env: Env,
        name: str,
        topics: dict[str, str],
        prefix: str,
        *,
        group: str,
        passthrough: bool,
        transactional: bool = False,
        stamp: bool = False,
        client: str = "aiokafka",
        overrides: dict[str, dict[str, Any]] | None = None,
    ):
        kafka: dict[str, Any] = {"bootstrap_servers": BOOTSTRAP, "group_id": group}
        if transactional:
            kafka["transactional"] = True
        config = gatekeeper_config(topics, prefix, kafka)
        for section, values in (overrides or {}).items():  # e.g. {"http": {"rate_limit": 0}}
            config[section] = {**config.get(section, {}), **values}
        self.dir = env.dir / f"{name}-{uuid.uuid4().hex[:6]}"
        self.dir.mkdir()
        (self.dir / "gk.yaml").write_text(yaml.safe_dump(config))
        self.log = self.dir / "process.log"
        cmd = (
            [sys.executable, str(ROOT / "bench" / "passthrough.py"), "gk.yaml", "--client", client]
            + (["--stamp"] if stamp else [])
            if passthrough
            else [
                sys.executable,
                "-c",
                "from gatekeeper.cli import main; main()",
                "run",
                "-c",
                "gk.yaml",
            ]
        )
        env_vars = {k: v for k, v in os.environ.items() if not k.startswith("GK_")}
        env_vars["PYTHONPATH"] = CODE or str(ROOT)
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(cmd, cwd=self.dir, stdout=subprocess.DEVNULL, stderr=log, env=env_vars)

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks

    def metrics_url(self, timeout: float = 30.0) -> str | None:
        """The metrics URL ``gatekeeper run`` prints on stderr once it listens."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.findall(r"metrics on (http://\S+)/metrics", self.log.read_text(errors="replace"))
            if found:
                return str(found[-1])
            time.sleep(0.2)
        return None

    def metric(self, name: str) -> float:
        url = self.metrics_url(1.0)
        if url is None:
            return float("nan")
        text = urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()
        return sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines() if ln.startswith(name))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@dataclass
class Catchup:
    lines: int
    rate: float
    cpu_ms_per_1000: float
    seconds: float
    outcomes: int
    redis_ms_per_1000: float = float("nan")  # Redis's own CPU over the same window (a gatekeeper's catch-up)

    @property
    def busy(self) -> float:
        """The share of one core the process used over the measured window (its CPU time over the wall time): a
        single-threaded worker near 1.0 is bound by its own CPU, one well below it waits for something else."""
        return self.rate * self.cpu_ms_per_1000 / 1e6


async def redis_cpu(redis: Redis) -> float:
    """Redis's CPU seconds so far (user and system, ``INFO cpu``): what it spent between two readings is the
    traffic's (an idle gatekeeper's probes cost it 0.2% of a core)."""
    info = await redis.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def catch_up(
    procs: Sequence[Process], topics: dict[str, str], n: int, timeout: float, redis: Redis | None = None
) -> Catchup:
    """Wait until every one of ``n`` input lines has its outcome; the sustained rate between 5% and 95% (and, with
    ``redis``, Redis's CPU over the same window)."""
    watch = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP)
    await watch.start()
    tps = [TopicPartition(topics["out"], 0), TopicPartition(topics["dlq"], 0)]
    t0 = time.monotonic()
    lo_t = hi_t = None
    lo_cpu = hi_cpu = lo_redis = hi_redis = 0.0
    done = 0
    try:
        while time.monotonic() - t0 < timeout:
            done = await outcome_count(watch, tps)
            now = time.monotonic()
            if lo_t is None and done >= 0.05 * n:
                lo_t, lo_n, lo_cpu = now, done, sum(p.cpu_seconds() for p in procs)
                lo_redis = await redis_cpu(redis) if redis is not None else 0.0
            if hi_t is None and done >= 0.95 * n:
                hi_t, hi_n, hi_cpu = now, done, sum(p.cpu_seconds() for p in procs)
                hi_redis = await redis_cpu(redis) if redis is not None else 0.0
            if done >= n:
                break
            await asyncio.sleep(0.1)
        total = time.monotonic() - t0
        await asyncio.sleep(1.0)  # anything beyond n (an outcome twice) shows here
        done = await outcome_count(watch, tps)
    finally:
        await watch.stop()
    if lo_t is None or hi_t is None or hi_t <= lo_t:
        return Catchup(n, float("nan"), float("nan"), total, done)
    rate = (hi_n - lo_n) / (hi_t - lo_t)
    per = 1e6 / max(1, hi_n - lo_n)
    redis_ms = per * (hi_redis - lo_redis) if redis is not None else float("nan")
    return Catchup(n, rate, per * (hi_cpu - lo_cpu), total, done, redis_ms)


# ---------------------------------------------------------------- sections


def table(title: str, head: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(c) for c in head], *[[_fmt(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    print(f"\n{title}")
    for k, r in enumerate(cells):
        print("  " + "  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths, strict=True))))
        if k == 0:
            print("  " + "  ".join("-" * w for w in widths))
    sys.stdout.flush()


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if v != v:
            return "n/a"
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


async def gatekeeper_run(
    env: Env,
    name: str,
    lines: Sequence[tuple[bytes, bytes]],
    records: Sequence[Record],
    partitions: int | None = None,
    instances: int = 1,
    keep: bool = False,
    profile: str | None = None,
    transactional: bool = False,
) -> tuple[Catchup, list[Process], dict[str, str], str]:
    topics = await env.topics(name, partitions)
    prefix = env.prefix(name)
    await env.load_records(prefix, records)
    await produce(topics["in"], lines)
    group = f"e2e-{env.run}-{name}"
    procs = [
        Process(env, name, topics, prefix, group=group, passthrough=False, transactional=transactional)
        for _ in range(instances)
    ]
    spy = None
    if profile:
        spy = subprocess.Popen(
            [
                shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy"),
                "record",
                "--pid",
                str(procs[0].proc.pid),
                "--format",
                "raw",
                "-o",
                profile,
                "--rate",
                "250",
                *(["--native"] if SPY_NATIVE else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    try:
        result = await catch_up(procs, topics, len(lines), timeout=max(120.0, len(lines) / 500), redis=env.redis)
    finally:
        if spy is not None:
            spy.send_signal(2)  # SIGINT: py-spy writes its file
            with contextlib.suppress(subprocess.TimeoutExpired):
                spy.wait(30)
        if not keep:
            for p in procs:
                p.stop()
    return result, procs, topics, prefix


def top_entries(raw: str, n: int = 25) -> list[tuple[str, float, float]]:
    """The profile's top entries from py-spy's collapsed stacks: (function, % of samples inside it, % on top)."""
    inclusive: dict[str, int] = {}
    own: dict[str, int] = {}
    total = 0
    for line in Path(raw).read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        k = int(count)
        total += k
        frames = [_frame(f) for f in stack.split(";")]
        for f in set(frames):
            inclusive[f] = inclusive.get(f, 0) + k
        own[frames[-1]] = own.get(frames[-1], 0) + k
    top = sorted(own, key=lambda f: -own[f])[:n]
    return [(f, 100 * inclusive[f] / total, 100 * own[f] / total) for f in top]


def _frame(f: str) -> str:
    """``func (path/file.py:12)`` -> ``func (file.py)``."""
    name, sep, where = f.partition(" (")
    return f"{name} ({where.split(':')[0].rsplit('/', 1)[-1]})" if sep else f


async def section_throughput(
    env: Env, n: int, profile: str | None = None, exactly_once: bool = False, librdkafka: bool = False
) -> float:
    t = traffic(n, tag="t", faulty=FAULTY)
    say(f"throughput: {len(t.lines):,} lines, {len(t.records):,} records, {FAULTY:.0%} of the flows refused")
    base = await passthrough_run(env, "pass", t.lines, "aiokafka")
    rdk = await passthrough_run(env, "passrdk", t.lines, "librdkafka") if librdkafka else None
    gk, procs, _, _ = await gatekeeper_run(env, "gk", t.lines, t.records, keep=True, profile=profile)
    batches = procs[0].metric("gatekeeper_batch_size_count")
    trips = procs[0].metric("gatekeeper_redis_round_trips_total")
    for p in procs:
        p.stop()
    rows: list[list[Any]] = [
        ["raw passthrough", base.rate, 1.0, base.cpu_ms_per_1000, base.busy, "-", "-", base.outcomes],
    ]
    if rdk is not None:  # the same loop on librdkafka; its ratio, too, is against the aiokafka passthrough
        rows.append(
            [
                "raw passthrough, librdkafka",
                rdk.rate,
                rdk.rate / base.rate,
                rdk.cpu_ms_per_1000,
                rdk.busy,
                "-",
                "-",
                rdk.outcomes,
            ]
        )
    rows.append(
        [
            "gatekeeper",
            gk.rate,
            gk.rate / base.rate,
            gk.cpu_ms_per_1000,
            gk.busy,
            _per(trips, batches),
            gk.redis_ms_per_1000,
            gk.outcomes,
        ]
    )
    if exactly_once:  # the same traffic, kafka.transactional: a transaction per input partition and batch
        eos, procs, eos_topics, _ = await gatekeeper_run(
            env, "gkeos", t.lines, t.records, keep=True, transactional=True
        )
        batches = procs[0].metric("gatekeeper_batch_size_count")
        trips = procs[0].metric("gatekeeper_redis_round_trips_total")
        for p in procs:
            p.stop()
        eos.outcomes = len(await read_outcomes(eos_topics, committed=True))  # end offsets count commit markers too
        rows.append(
            [
                "gatekeeper, exactly-once",
                eos.rate,
                eos.rate / base.rate,
                eos.cpu_ms_per_1000,
                eos.busy,
                _per(trips, batches),
                eos.redis_ms_per_1000,
                eos.outcomes,
            ]
        )
    table(
        f"throughput: catch-up on {len(t.lines):,} lines, {env.partitions} partitions",
        [
            "consumer",
            "lines/s",
            "ratio",
            "CPU ms / 1,000 lines",
            "busy",
            "Redis round trips / batch",
            "Redis CPU ms / 1,000 lines",
            "outcomes",
        ],
        rows,
    )
    if profile and Path(profile).exists():
        table(
            f"the gatekeeper's profile during the catch-up (py-spy, {profile})",
            ["function (file)", "inside %", "on top %"],
            top_entries(profile),
        )
    return gk.rate


async def passthrough_run(env: Env, name: str, lines: Sequence[tuple[bytes, bytes]], client: str) -> Catchup:
    """A catch-up of ``lines`` through ``bench/passthrough.py`` on ``client``, on topics of its own."""
    topics = await env.topics(name)
    await produce(topics["in"], lines)
    proc = Process(env, name, topics, env.prefix(name), group=f"e2e-{env.run}-{name}", passthrough=True, client=client)
    try:
        return await catch_up([proc], topics, len(lines), timeout=max(120.0, len(lines) / 1000))
    finally:
        proc.stop()


def _per(count: float, batches: float) -> float:
    return count / batches if batches else float("nan")


async def section_latency(env: Env, rate: float, seconds: float, librdkafka: bool = False) -> None:
    """The gatekeeper at 90% and 50% of its rate and at a fixed 1,000 lines/s (a busy route's load, the same on
    every machine), and the passthrough (stamping each output with the input's timestamp as the gatekeeper's
    outcomes carry it) on the same traffic at the same rate: what the broker, the clients and this benchmark's own
    producer and reader add on this machine, with no work done. With ``librdkafka``, the passthrough on
    confluent-kafka as well."""
    clients = [None, "aiokafka", "librdkafka"][: 3 if librdkafka else 2]  # None: the gatekeeper
    rows = []
    loads = [
        ("90% of throughput", rate * 0.9, "90"),
        ("50% of throughput", rate * 0.5, "50"),
        ("1,000 lines/s", 1000.0, "1k"),
    ]
    for label, wanted, tag in loads:
        target = max(100.0, wanted)
        n = int(target * seconds)
        t = traffic(n, seed=11, tag=f"l{tag}")
        measured = []
        cpus: list[float] = []  # the gatekeeper's, then the passthroughs'
        redis_ms = float("nan")  # Redis's CPU while the gatekeeper ran (the passthrough does not use it)
        batch_lines = every_ms = float("nan")  # the gatekeeper's batches: lines in each, and how often one came
        for client in clients:
            passthrough = client is not None
            name = f"lat{tag}{client or ''}"
            topics = await env.topics(name)
            prefix = env.prefix(name)
            if not passthrough:
                await env.load_records(prefix, t.records)
            proc = Process(
                env,
                "lat",
                topics,
                prefix,
                group=f"e2e-{env.run}-{name}",
                passthrough=passthrough,
                stamp=passthrough,
                client=client or "aiokafka",
            )
            try:
                await asyncio.sleep(4.0)  # joined
                cpu, redis0 = proc.cpu_seconds(), await redis_cpu(env.redis)
                batches = None if passthrough else _batches(proc)
                measured.append(await paced(topics, t.lines, target))
                cpus.append(1e6 * (proc.cpu_seconds() - cpu) / n)
                if batches is not None:
                    redis_ms = 1e6 * (await redis_cpu(env.redis) - redis0) / n
                    count, lines = (after - before for after, before in zip(_batches(proc), batches, strict=True))
                    batch_lines, every_ms = lines / count, 1000 * n / target / count
            finally:
                proc.stop()
        gk, base = measured[:2]
        row = [label, target, len(gk), _pct(gk, 50), _pct(gk, 99), _pct(base, 50), _pct(base, 99), cpus[0], cpus[1]]
        if librdkafka:
            row += [_pct(measured[2], 50), _pct(measured[2], 99), cpus[2]]
        rows.append([*row, redis_ms, batch_lines, every_ms])
    table(
        "latency: producer timestamp to outcome timestamp (ms); CPU: the process's, ms per 1,000 lines at that load "
        "(Redis's: while the gatekeeper ran); the gatekeeper's batches: lines in each, and the traffic's seconds over "
        "their number",
        [
            "load",
            "lines/s",
            "lines",
            "p50",
            "p99",
            "passthrough p50",
            "passthrough p99",
            "CPU",
            "passthrough CPU",
            *(["librdkafka p50", "librdkafka p99", "librdkafka CPU"] if librdkafka else []),
            "Redis CPU",
            "lines a batch",
            "a batch every (ms)",
        ],
        rows,
    )


def _batches(proc: Process) -> tuple[float, float]:
    """The gatekeeper's decided batches so far, and their lines (its ``gatekeeper_batch_size`` histogram). A live
    line waits for the batch being decided when it arrives and then for its own: how often a batch comes is most of
    the latency at a paced rate."""
    return proc.metric("gatekeeper_batch_size_count"), proc.metric("gatekeeper_batch_size_sum")


def _pct(values: list[float], q: int) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q / 100))]


async def paced(topics: dict[str, str], lines: Sequence[tuple[bytes, bytes]], rate: float) -> list[float]:
    """Produce at ``rate`` lines/s; read the outcomes; latency = outcome timestamp - gk.original.timestamp.

    Line k is due ``k / rate`` seconds after the start. Each turn (about a millisecond apart at these rates) the lines
    due go out as one record batch per input partition, placed by key as the producer's partitioner places them
    (``partition_of``), each stamped as it is appended: the latency runs from there. A ``send()`` per line cost this
    process about as much CPU as the gatekeeper spent at the same rate, on a machine whose two cores the worker, the
    broker and Redis share (bench/README.md, "the benchmark's own producer")."""
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", linger_ms=1)
    reader = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP, enable_auto_commit=False, auto_offset_reset="earliest")
    await producer.start()
    await reader.start()
    tps = [TopicPartition(topics["out"], 0), TopicPartition(topics["dlq"], 0)]
    reader.assign(tps)
    lat: list[float] = []

    async def read() -> None:
        while len(lat) < len(lines):
            batch = await reader.getmany(timeout_ms=200)
            for recs in batch.values():
                for r in recs:
                    sent = dict(r.headers or ()).get("gk.original.timestamp")
                    if sent is not None:
                        lat.append(r.timestamp - int(sent))

    reading = asyncio.create_task(read())
    try:
        topic = topics["in"]
        parts = tuple(sorted(await producer.partitions_for(topic)))
        futures = []
        start, k = time.monotonic(), 0
        while k < len(lines):
            due = min(len(lines), int((time.monotonic() - start) * rate) + 1)
            batches: dict[int, Any] = {}
            for key, value in lines[k:due]:
                partition = partition_of(key, parts)
                batch = batches.get(partition)
                if batch is None:
                    batch = batches[partition] = producer.create_batch()
                if batch.append(timestamp=None, key=key, value=value) is None:  # full: send it, start another
                    futures.append(await producer.send_batch(batch, topic, partition=partition))
                    batch = batches[partition] = producer.create_batch()
                    batch.append(timestamp=None, key=key, value=value)
            for partition, batch in batches.items():
                futures.append(await producer.send_batch(batch, topic, partition=partition))
            k = due
            await asyncio.sleep(max(0.0, start + k / rate - time.monotonic()))
        await asyncio.gather(*futures)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reading, 60)
    finally:
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading
        await producer.stop()
        await reader.stop()
    return lat[len(lat) // 10 :]  # the first tenth warms up


async def probe(
    proc: Process, topics: dict[str, str], lines: Sequence[tuple[bytes, bytes]], rate: float
) -> tuple[float, float]:
    """Send ``lines`` one at a time at ``rate`` (each its own batch, as a live conversation's lines arrive) and
    return the gatekeeper's CPU per line (µs, its idle polling taken out) and the median latency (ms)."""
    reader = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP, enable_auto_commit=False)
    await reader.start()
    tps = [TopicPartition(topics["out"], 0), TopicPartition(topics["dlq"], 0)]
    reader.assign(tps)
    await reader.seek_to_end(*tps)
    for tp in tps:
        await reader.position(tp)
    idle_start, t_idle = proc.cpu_seconds(), time.monotonic()
    await asyncio.sleep(3.0)
    idle_per_s = (proc.cpu_seconds() - idle_start) / (time.monotonic() - t_idle)
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", linger_ms=0)
    await producer.start()
    lat: list[float] = []
    try:
        cpu0, t0 = proc.cpu_seconds(), time.monotonic()
        for k, (key, value) in enumerate(lines):
            delay = t0 + k / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await (await producer.send(topics["in"], value, key=key))
        deadline = time.monotonic() + 30
        while len(lat) < len(lines) and time.monotonic() < deadline:
            for recs in (await reader.getmany(timeout_ms=200)).values():
                for r in recs:
                    sent = dict(r.headers or ()).get("gk.original.timestamp")
                    if sent is not None:
                        lat.append(r.timestamp - int(sent))
        busy = proc.cpu_seconds() - cpu0 - idle_per_s * (time.monotonic() - t0)
    finally:
        await producer.stop()
        await reader.stop()
    return 1e6 * max(0.0, busy) / len(lines), statistics.median(lat) if lat else float("nan")


async def section_growth(env: Env, n: int) -> None:
    """Conversations grown to 10, 1,000 and 10,000 lines (caught up first, not measured); then 200 more lines,
    sent one at a time over them: the cost of a line arriving in a conversation of that length."""
    rows = []
    base = None
    for per in (10, 1000, 10000):
        name = f"grow{per}"
        lines = long_conversations(max(n, per), per, tag=str(per))
        topics = await env.topics(name, 1)
        prefix = env.prefix(name)
        await produce(topics["in"], lines)
        say(f"growth: {len(lines):,} lines in conversations of {per:,}, then 200 more one at a time")
        proc = Process(env, name, topics, prefix, group=f"e2e-{env.run}-{name}", passthrough=False)
        try:
            await catch_up([proc], topics, len(lines), timeout=max(120.0, len(lines) / 300))
            keys = sorted({k for k, _ in lines})
            more = [
                (keys[i % len(keys)], f"RW1 ST desk-{50_000 + i} p=pay from=desk to=scheduler item=doc:x{i}".encode())
                for i in range(200)
            ]
            us, p50 = await probe(proc, topics, more, rate=40.0)
        finally:
            proc.stop()
        base = base or us
        rows.append([f"{per:,} lines", us, us / base if base else float("nan"), p50])
    table(
        "growth: a line arriving alone in a conversation of N lines (one partition)",
        ["conversation", "CPU µs per line", "vs 10 lines", "latency p50 ms"],
        rows,
    )


async def section_open(env: Env, n: int, sizes: Sequence[int]) -> None:
    rows = []
    base = None
    for k in sizes:
        name = f"open{k}"
        topics = await env.topics(name)
        prefix = env.prefix(name)
        before = await env.memory()
        opens = [
            (f"o{k}-{i}".encode(), f"RW1 HO scheduler-1 p=pay from=scheduler to=desk item=doc:o{i} ask=REVIEW".encode())
            for i in range(k)
        ]
        say(f"open: {k:,} handoffs to open first")
        await produce(topics["in"], opens)
        proc = Process(env, name, topics, prefix, group=f"e2e-{env.run}-{name}", passthrough=False)
        try:
            await catch_up([proc], topics, k, timeout=max(120.0, k / 400))
            per_open = (await env.memory() - before) / k
            t = traffic(n, seed=13, tag=name)
            await env.load_records(prefix, t.records)
            await produce(topics["in"], t.lines)
            res = await catch_up([proc], topics, k + len(t.lines), timeout=max(120.0, n / 500))
        finally:
            proc.stop()
        base = base or res.rate
        rows.append([f"{k:,} open", res.rate, res.rate / base, per_open])
    table(
        f"open handoffs: catch-up on {n:,} lines with handoffs open",
        ["open", "lines/s", "vs the first", "Redis bytes / open handoff"],
        rows,
    )


async def section_pair(env: Env, n: int) -> None:
    t = traffic(n, seed=17, tag="p")
    res, _, topics, _ = await gatekeeper_run(env, "pair", t.lines, t.records, instances=2)
    outcomes = await read_outcomes(topics)
    table(
        "two gatekeepers in one group, 6 partitions",
        ["instances", "lines/s", "outcomes", "lines", "twice"],
        [[2, res.rate, len(outcomes), len(t.lines), twice(outcomes)]],
    )


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=1_000_000, help="lines per throughput run (default 1,000,000)")
    ap.add_argument("--growth-lines", type=int, default=20_000)
    ap.add_argument("--open", default="10000,100000", help="open handoffs to measure with, comma-separated")
    ap.add_argument("--latency-seconds", type=float, default=20.0)
    ap.add_argument(
        "--rate",
        type=float,
        default=None,
        help="the latency section's full load, lines/s (default: the throughput section's rate, or 3,000 without it)",
    )
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--only", default="throughput,latency,growth,open,pair")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: checks the benchmark runs, figures mean nothing")
    ap.add_argument(
        "--profile", metavar="FILE", help="py-spy the gatekeeper during the throughput catch-up (raw stacks)"
    )
    ap.add_argument(
        "--profile-native",
        action="store_true",
        help="with --profile: the native frames too (the engine, the allocator, msgspec's deallocations)",
    )
    ap.add_argument(
        "--faulty",
        type=float,
        default=0.05,
        help="throughput: the share of refused flows (default 0.05; 1.0: an agent flooding refused lines, each "
        "dead-lettered, logged and answered with a notice)",
    )
    ap.add_argument(
        "--exactly-once", action="store_true", help="throughput: also the gatekeeper with kafka.transactional"
    )
    ap.add_argument(
        "--librdkafka",
        action="store_true",
        help="throughput and latency: also the passthrough on confluent-kafka (librdkafka's C, not Python, for the "
        "protocol): what a Kafka client whose per-record work is not Python costs here",
    )
    ap.add_argument(
        "--code", metavar="DIR", help="run the gatekeeper from this checkout (PYTHONPATH), e.g. an older one"
    )
    args = ap.parse_args()
    global CODE, SPY_NATIVE, FAULTY
    CODE = str(Path(args.code).resolve()) if args.code else None  # the processes run in folders of their own
    SPY_NATIVE = args.profile_native
    FAULTY = args.faulty
    only = set(args.only.split(","))
    if args.smoke:
        args.lines, args.growth_lines, args.open, args.latency_seconds = 3000, 2000, "500", 3.0
    env = Env(args.partitions)
    rate = 3000.0 if args.rate is None else args.rate
    try:
        if "throughput" in only:
            measured = await section_throughput(env, args.lines, args.profile, args.exactly_once, args.librdkafka)
            rate = measured if args.rate is None else rate
        if "latency" in only:
            await section_latency(env, rate, args.latency_seconds, args.librdkafka)
        if "growth" in only:
            await section_growth(env, args.growth_lines)
        if "open" in only:
            await section_open(env, min(args.lines, 100_000), [int(x) for x in args.open.split(",")])
        if "pair" in only:
            await section_pair(env, args.lines)
    finally:
        await env.close()


if __name__ == "__main__":
    asyncio.run(main())
