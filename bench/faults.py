"""The fault suite (issue 16, item 6): ``gatekeeper run`` under faults, on real Kafka and Redis; every input line
must still get an outcome.

    .venv/bin/python bench/faults.py                      # 20 SIGKILLs over 100,000 lines, each mode, then the rest
    .venv/bin/python bench/faults.py --kills 5 --lines 20000
    .venv/bin/python bench/faults.py --only sigkill,redis-pause,redis-restart,rebalance
    .venv/bin/python bench/faults.py --smoke              # tiny sizes, two kills, one freeze: about five minutes

Kafka and Redis come from the environment (``GK_KAFKA_BOOTSTRAP``, ``GK_REDIS_URL``: ``deploy/local/stack.sh env``);
``make test-faults`` runs it on a stack of its own. The helpers (topics, traffic, producing, the daemon as a
subprocess, the table) are ``bench/e2e.py``'s. Scenarios, each on topics and a key prefix of its own:

- ``sigkill``: the traffic is produced as a stream while the daemon is SIGKILLed ``--kills`` times (each time once
  its new process has made progress, after a random 0-1.5 s more) and restarted at once; then caught up. First
  at-least-once (duplicates allowed, counted), then exactly-once (``kafka.transactional: true``, the outcomes read
  ``read_committed``: duplicates must be 0).
- ``redis-pause``: ``CLIENT PAUSE 10000 ALL`` on the stack's Redis mid-stream (the data stays).
- ``redis-restart``: a redis-server of the suite's own with ``--appendonly yes --appendfsync always``, SIGKILLed
  mid-stream and started again 10 s later on the same port and data folder.
  Both Redis scenarios: the dead-letter reasons must equal those of a run of the same traffic without the fault,
  ``/readyz`` must turn 503 during the fault and 200 after it, and the stream must be caught up by itself.
- ``rebalance``: a second instance joins the group mid-stream, then leaves (SIGTERM).
- ``zombie``: two instances; one is frozen (SIGSTOP) for 16 s, past its 6 s session timeout, mid-stream, then
  thawed (SIGCONT), ``--freezes`` times; each mode. It wakes up believing it holds its partitions, often with a
  batch in flight: at-least-once, what it then writes is duplicated (counted); exactly-once, its producers were
  fenced by the new owner's, so nothing of it is visible to a ``read_committed`` reader, and it must not exit.
- ``broker-leader``: a three-broker KRaft cluster of the scenario's own (``bench/cluster.py``, RF 3,
  ``min.insync.replicas=2``); the leaders of the output partition and of input partition 0 SIGKILLed mid-stream
  and started again 10 s later; each mode.
- ``kafka-outage``: the same kind of cluster, every broker stopped gracefully (SIGTERM) for 12 s mid-stream, then
  started again: ``/readyz`` 503 within 5 s of the last node's exit and 200 after, at most 200 log lines through
  the outage, nothing lost.

Lost = lines sent - input coordinates with at least one outcome (``gk.original.partition``/``gk.original.offset``
on the output and dead-letter topics); duplicated = outcomes beyond one per coordinate. A scenario passes when
nothing is lost (and, exactly-once, nothing is duplicated; the Redis scenarios: also the checks above). Exit 1 when
one fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from redis.asyncio import Redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
import e2e
from e2e import Env, Traffic, say, table, traffic

PARTITIONS = 6


# ---------------------------------------------------------------- the daemon


class Daemon(e2e.Process):
    """``gatekeeper run`` on a config of the suite's (e2e's ``Process`` with more settings), restartable: each start
    logs to a file of its own, so the metrics URL found is the current process's."""

    def __init__(
        self,
        env: Env,
        name: str,
        topics: dict[str, str],
        prefix: str,
        *,
        group: str,
        transactional: bool = False,
        redis_url: str | None = None,
    ) -> None:
        kafka: dict[str, Any] = {
            "bootstrap_servers": e2e.BOOTSTRAP,
            "group_id": group,
            "session_timeout_ms": 6000,
            "request_timeout_ms": 10000,
        }
        if transactional:  # the transactional ids are per input partition, alike on every instance of the group
            kafka |= {"transactional": True}
        config = e2e.gatekeeper_config(topics, prefix, kafka, redis_url=redis_url) | {"grace_seconds": 5}
        self.dir = env.dir / f"{name}-{uuid.uuid4().hex[:6]}"
        self.dir.mkdir()
        (self.dir / "gk.yaml").write_text(yaml.safe_dump(config))
        self.starts = 0
        self.start()

    def start(self) -> None:
        self.starts += 1
        self.log = self.dir / f"process-{self.starts}.log"
        env_vars = {k: v for k, v in os.environ.items() if not k.startswith("GK_")}
        env_vars["PYTHONPATH"] = str(e2e.ROOT)
        cmd = [sys.executable, "-c", "from gatekeeper.cli import main; main()", "run", "-c", "gk.yaml"]
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(cmd, cwd=self.dir, stdout=subprocess.DEVNULL, stderr=log, env=env_vars)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def freeze(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.proc.send_signal(signal.SIGCONT)


# ---------------------------------------------------------------- outcomes


class Outcomes:
    """Reads the output and dead-letter topics from the start (``read_committed`` for exactly-once) and counts the
    outcomes per input coordinate, with each coordinate's first dead-letter reason."""

    def __init__(self, topics: dict[str, str], committed: bool) -> None:
        self.reader = AIOKafkaConsumer(
            bootstrap_servers=e2e.BOOTSTRAP,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed" if committed else "read_uncommitted",
        )
        self.tps = [TopicPartition(topics["out"], 0), TopicPartition(topics["dlq"], 0)]
        self.count: Counter[tuple[int, int]] = Counter()
        self.reasons: dict[tuple[int, int], str] = {}
        self.errors: list[str] = []  # the reader's own failed reads (retried)
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.reader.start()
        self.reader.assign(self.tps)
        await self.reader.seek_to_beginning(*self.tps)
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        """Count what arrives until stopped. A read that raises (a broker gone mid-fetch) is noted in ``errors`` and
        retried: a reader that died quietly would count every later outcome as lost."""
        while True:
            try:
                fetched = await self.reader.getmany(timeout_ms=200, max_records=5000)
            except Exception as exc:  # said with the results, then read again
                self.errors.append(f"{type(exc).__name__}: {exc}"[:200])
                await asyncio.sleep(0.5)
                continue
            for tp, recs in fetched.items():
                for r in recs:
                    h = {k: v.decode() for k, v in (r.headers or ())}
                    if h.get("gk.author") == "gatekeeper":  # its own lines (refusal notices, cancels): no outcome
                        continue
                    coord = (int(h["gk.original.partition"]), int(h["gk.original.offset"]))
                    self.count[coord] += 1
                    if tp.topic == self.tps[1].topic:
                        self.reasons.setdefault(coord, h.get("gk.reason", "?"))

    @property
    def total(self) -> int:
        return sum(self.count.values())

    @property
    def covered(self) -> int:
        return len(self.count)

    def reason_counts(self) -> Counter[str]:
        return Counter(self.reasons.values())

    async def wait(self, predicate: Callable[[Outcomes], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self):
                return True
            await asyncio.sleep(0.2)
        return predicate(self)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.reader.stop()


class Stream:
    """The traffic produced in the background at a steady rate; ``sent`` counts the acknowledged lines."""

    def __init__(self, topic: str, lines: Sequence[tuple[bytes, bytes]], rate: float) -> None:
        self.topic, self.lines, self.rate = topic, lines, rate
        self.sent = 0
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        # idempotent: a send retried across a broker fault (a leader change, an outage) writes its line once, so the
        # input topic holds exactly the lines acknowledged
        producer = AIOKafkaProducer(
            bootstrap_servers=e2e.BOOTSTRAP, acks="all", linger_ms=20, enable_idempotence=True, request_timeout_ms=60000
        )
        await producer.start()
        try:
            t0 = time.monotonic()
            step = max(1, int(self.rate / 20))  # a slice every 50 ms
            for start in range(0, len(self.lines), step):
                delay = t0 + start / self.rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                futures = [await producer.send(self.topic, v, key=k) for k, v in self.lines[start : start + step]]
                await asyncio.gather(*futures)
                self.sent += len(futures)
        finally:
            await producer.stop()

    @property
    def done(self) -> bool:
        return self.task is not None and self.task.done()

    async def finish(self) -> None:
        assert self.task is not None
        await self.task


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


class ReadyWatch:
    """Polls ``/readyz`` every 0.25 s: the moments it answered other than 200, and 200 again."""

    def __init__(self, url: str) -> None:
        self.url = f"{url}/readyz"
        self.seen: list[tuple[float, int]] = []
        self.task = asyncio.create_task(self._poll())

    async def _poll(self) -> None:
        while True:
            self.seen.append((time.monotonic(), await asyncio.to_thread(http_status, self.url)))
            await asyncio.sleep(0.25)

    def down_and_up(self, since: float) -> tuple[float | None, float | None]:
        """Seconds from ``since`` to the first not-ready answer, and from there to the first 200 after it."""
        down = next((t for t, s in self.seen if t >= since and s != 200), None)
        if down is None:
            return None, None
        up = next((t for t, s in self.seen if t > down and s == 200), None)
        return down - since, None if up is None else up - down

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


# ---------------------------------------------------------------- results


@dataclass
class Result:
    scenario: str
    mode: str
    faults: str
    sent: int
    covered: int
    total: int
    seconds: float
    checks: list[str] = field(default_factory=list)  # failed extra checks
    notes: str = ""

    @property
    def lost(self) -> int:
        return self.sent - self.covered

    @property
    def duplicated(self) -> int:
        return self.total - self.covered

    @property
    def passed(self) -> bool:
        return self.lost == 0 and not (self.mode == "exactly-once" and self.duplicated) and not self.checks

    def row(self) -> list[Any]:
        notes = "; ".join([*self.checks, self.notes] if self.notes else self.checks)
        verdict = "pass" if self.passed else "FAIL"
        return [
            self.scenario,
            self.mode,
            self.faults,
            self.sent,
            self.lost,
            self.duplicated,
            self.seconds,
            verdict,
            notes,
        ]


def _mode(transactional: bool) -> str:
    return "exactly-once" if transactional else "at-least-once"


#: What the failing scenarios said about their failures (the lines unanswered, the daemon's last words), said again
#: after the table: a CI log's excerpt shows its end, where the table and this are, not a scenario's middle.
WHY: list[str] = []


def say_why(text: str) -> None:
    say(text)
    WHY.append(text)


def say_why_again() -> None:
    if WHY:
        say("what the failing scenarios said (again, after the table):")
        for text in WHY:
            say(text)


async def _catch_up(outcomes: Outcomes, stream: Stream, timeout: float) -> None:
    await stream.finish()
    await outcomes.wait(lambda o: o.covered >= stream.sent, timeout)
    await asyncio.sleep(2.0)  # late duplicates show here
    if outcomes.covered < stream.sent:
        say_why(f"  unanswered after the catch-up: {await unanswered(outcomes, stream.topic)}")
        if outcomes.errors:
            say_why(f"  the outcome reader's failed reads ({len(outcomes.errors)}): {outcomes.errors[-3:]}")


async def unanswered(outcomes: Outcomes, topic: str) -> str:
    """Which input coordinates have no outcome, as ranges per partition (a stuck partition shows as one range to
    its end; a scattered loss as many)."""
    reader = AIOKafkaConsumer(bootstrap_servers=e2e.BOOTSTRAP)
    await reader.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        ends = await reader.end_offsets(tps)
    finally:
        await reader.stop()
    parts = []
    for tp in tps:
        gone = [off for off in range(ends[tp]) if (tp.partition, off) not in outcomes.count]
        if not gone:
            continue
        ranges, start = [], gone[0]
        for prev, off in zip(gone, [*gone[1:], None], strict=True):
            if off != prev + 1:
                ranges.append(f"{start}-{prev}" if prev > start else str(start))
                start = off if off is not None else start
        shown = ", ".join(ranges[:5]) + (f" and {len(ranges) - 5} more ranges" if len(ranges) > 5 else "")
        parts.append(f"partition {tp.partition} (end {ends[tp]}): {len(gone):,} at {shown}")
    return "; ".join(parts) or "none"


async def _progress(outcomes: Outcomes, daemon: Daemon, timeout: float = 60.0) -> bool:
    """True once ``daemon``'s current process has written an outcome (or the stream is all answered)."""
    before = outcomes.total
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if outcomes.total > before:
            return True
        if daemon.proc.poll() is not None:
            return False
        await asyncio.sleep(0.05)
    return False


# ---------------------------------------------------------------- scenarios


async def _prepare(env: Env, name: str, n: int, seed: int) -> tuple[Traffic, dict[str, str], str]:
    """The scenario's traffic, its topics and its Redis prefix, the traffic's records loaded under the prefix."""
    t = traffic(n, seed=seed, tag=name)
    topics = await env.topics(name)
    prefix = env.prefix(name)
    await env.load_records(prefix, t.records)
    return t, topics, prefix


async def scenario_sigkill(env: Env, n: int, kills: int, transactional: bool, seed: int) -> Result:
    mode = _mode(transactional)
    name = f"kill{'eos' if transactional else 'alo'}"
    t, topics, prefix = await _prepare(env, name, n, seed)
    say(f"sigkill ({mode}): {len(t.lines):,} lines, {kills} kills")
    outcomes = Outcomes(topics, committed=transactional)
    await outcomes.start()
    # The stream spans the kills: each cycle is a restart (about 6-8 s: start, join, the dead member's session) and
    # some progress, so about 8 s a kill.
    rate = max(200.0, min(3000.0, len(t.lines) / max(10.0, 8.0 * kills)))
    stream = Stream(topics["in"], t.lines, rate)
    rnd = random.Random(seed)
    t0 = time.monotonic()
    daemon = Daemon(env, name, topics, prefix, group=f"faults-{env.run}-{name}", transactional=transactional)
    done = 0
    notes = ""
    try:
        stream.start()
        for k in range(kills):
            if not await _progress(outcomes, daemon):
                notes = f"no progress before kill {k + 1}: {daemon.log.read_text(errors='replace')[-300:]!r}"
                break
            await asyncio.sleep(rnd.uniform(0.0, 1.5))
            daemon.kill()
            done += 1
            say(f"  kill {done}/{kills}: {stream.sent:,} sent, {outcomes.covered:,} answered")
            daemon.start()
        await _catch_up(outcomes, stream, timeout=max(120.0, n / 200))
    finally:
        daemon.stop()
        seconds = time.monotonic() - t0
        await outcomes.stop()
    return Result("sigkill", mode, f"{done} SIGKILL", stream.sent, outcomes.covered, outcomes.total, seconds, [], notes)


async def baseline_reasons(env: Env, lines: Sequence[tuple[bytes, bytes]], records: Sequence[Any]) -> Counter[str]:
    """The dead-letter reasons of the same traffic without a fault."""
    topics = await env.topics("base")
    prefix = env.prefix("base")
    await env.load_records(prefix, records)
    outcomes = Outcomes(topics, committed=False)
    await outcomes.start()
    await e2e.produce(topics["in"], lines)
    daemon = Daemon(env, "base", topics, prefix, group=f"faults-{env.run}-base")
    try:
        await outcomes.wait(lambda o: o.covered >= len(lines), timeout=max(120.0, len(lines) / 200))
    finally:
        daemon.stop()
        await outcomes.stop()
    reasons = outcomes.reason_counts()
    say(f"baseline: {outcomes.covered:,} of {len(lines):,} answered, dead-letter reasons {dict(reasons)}")
    return reasons


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PersistentRedis:
    """A redis-server of the suite's own that keeps its data over a restart (AOF, fsync on every write)."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="gk-faults-redis-"))
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        server = shutil.which("redis-server") or "redis-server"
        args = [server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes"]
        args += ["--appendfsync", "always", "--dir", str(self.dir), "--daemonize", "no", "--loglevel", "warning"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


async def scenario_redis(
    env: Env, kind: str, lines: Sequence[tuple[bytes, bytes]], records: Sequence[Any], base: Counter[str]
) -> Result:
    name = kind.replace("-", "")
    topics = await env.topics(name)
    prefix = env.prefix(name)
    own = PersistentRedis() if kind == "redis-restart" else None
    if own is not None:
        own.start()
        client = Redis.from_url(own.url)
        saved = env.redis
        env.redis = client
        try:
            await env.load_records(prefix, records)
        finally:
            env.redis = saved
        await client.aclose()
    else:
        await env.load_records(prefix, records)
    say(f"{kind}: {len(lines):,} lines, Redis out for 10 s mid-stream")
    outcomes = Outcomes(topics, committed=False)
    await outcomes.start()
    stream = Stream(topics["in"], lines, rate=max(200.0, len(lines) / 25.0))
    daemon = Daemon(
        env, name, topics, prefix, group=f"faults-{env.run}-{name}", redis_url=own.url if own is not None else None
    )
    t0 = time.monotonic()
    checks: list[str] = []
    notes = ""
    watch: ReadyWatch | None = None
    try:
        url = await asyncio.to_thread(daemon.metrics_url, 60.0)
        if url is None:
            raise RuntimeError(f"no metrics URL: {daemon.log.read_text(errors='replace')[-500:]}")
        watch = ReadyWatch(url)
        stream.start()
        await outcomes.wait(lambda o: o.covered >= len(lines) // 5, timeout=120)
        fault_at = time.monotonic()
        if own is None:
            await env.redis.execute_command("CLIENT", "PAUSE", "10000", "ALL")  # type: ignore[no-untyped-call]
            await asyncio.sleep(10.0)
        else:
            own.kill()
            await asyncio.sleep(10.0)
            own.start()
        ended_at = time.monotonic()
        await _catch_up(outcomes, stream, timeout=max(120.0, len(lines) / 200))
        await asyncio.sleep(1.0)
        down, up = watch.down_and_up(fault_at)
        if down is None or down > 5.0:
            checks.append("readyz stayed 200" if down is None else f"readyz 503 only after {down:.1f} s")
        elif up is None:
            checks.append("readyz never 200 again")
        else:
            back = fault_at + down + up - ended_at
            notes = f"readyz 503 {down:.1f} s after the fault, 200 {back:.1f} s after its end"
        reasons = outcomes.reason_counts()
        if reasons != base:
            checks.append(f"dead-letter reasons differ: {dict(reasons - base)} more, {dict(base - reasons)} fewer")
        else:
            same = f"dead-letter reasons as without the fault ({sum(base.values()):,})"
            notes = f"{notes}; {same}" if notes else same
    finally:
        if watch is not None:
            await watch.stop()
        daemon.stop()
        seconds = time.monotonic() - t0
        await outcomes.stop()
        if own is not None:
            own.close()
    fault = "CLIENT PAUSE 10 s" if own is None else "SIGKILL redis (AOF), 10 s"
    return Result(kind, "at-least-once", fault, stream.sent, outcomes.covered, outcomes.total, seconds, checks, notes)


async def scenario_rebalance(env: Env, n: int, seed: int) -> Result:
    name = "rebal"
    t, topics, prefix = await _prepare(env, name, n, seed)
    say(f"rebalance: {len(t.lines):,} lines, a second instance joins then leaves")
    outcomes = Outcomes(topics, committed=False)
    await outcomes.start()
    stream = Stream(topics["in"], t.lines, rate=max(200.0, len(t.lines) / 30.0))
    group = f"faults-{env.run}-{name}"
    first = Daemon(env, "rebal-a", topics, prefix, group=group)
    second: Daemon | None = None
    t0 = time.monotonic()
    notes = ""
    try:
        stream.start()
        await outcomes.wait(lambda o: o.covered >= len(t.lines) // 5, timeout=120)
        second = Daemon(env, "rebal-b", topics, prefix, group=group)
        await asyncio.to_thread(second.metrics_url, 60.0)
        mark = outcomes.total
        await asyncio.sleep(8.0)  # the group rebalances; both work
        joined = outcomes.total - mark
        code = second.proc.poll()
        second.stop()  # SIGTERM: it leaves the group, the partitions go back
        notes = f"second instance: {joined:,} outcomes in the 8 s it was in, exit {second.proc.returncode}"
        if code is not None:
            notes += f" (it had died: {code})"
        await _catch_up(outcomes, stream, timeout=max(120.0, n / 200))
    finally:
        first.stop()
        if second is not None:
            second.stop()
        seconds = time.monotonic() - t0
        await outcomes.stop()
    return Result(
        "rebalance",
        "at-least-once",
        "join + SIGTERM",
        stream.sent,
        outcomes.covered,
        outcomes.total,
        seconds,
        [],
        notes,
    )


ZOMBIE_PAUSE = 16.0  # seconds an instance is frozen: well past its 6 s session timeout


async def scenario_zombie(env: Env, n: int, transactional: bool, seed: int, cycles: int) -> Result:
    """Two instances in one group; one is frozen (SIGSTOP) mid-stream past its session timeout, so the group gives
    its partitions to the other, then thawed (SIGCONT): it wakes up believing it still holds them, maybe with a batch
    in flight (the stream is fast, so it usually is: at-least-once, what it then produces late is duplicated).
    Exactly-once: the new owner's producers fenced it, so nothing it commits late becomes visible to a
    ``read_committed`` reader (0 duplicates); it drops that work and rejoins, and must still be running. ``cycles``
    freezes, each once the stream has moved on."""
    mode = _mode(transactional)
    name = f"zombie{'eos' if transactional else 'alo'}"
    t, topics, prefix = await _prepare(env, name, n, seed)
    say(f"zombie ({mode}): {len(t.lines):,} lines, an instance frozen {ZOMBIE_PAUSE:g} s then thawed, {cycles}x")
    outcomes = Outcomes(topics, committed=transactional)
    await outcomes.start()
    # fast enough that the frozen instance is usually mid-batch, slow enough to last the freezes
    rate = min(1500.0, max(50.0, len(t.lines) / (cycles * (ZOMBIE_PAUSE + 12.0) + 10.0)))
    stream = Stream(topics["in"], t.lines, rate=rate)
    group = f"faults-{env.run}-{name}"
    zombie = Daemon(env, f"{name}-a", topics, prefix, group=group, transactional=transactional)
    other = Daemon(env, f"{name}-b", topics, prefix, group=group, transactional=transactional)
    t0 = time.monotonic()
    checks: list[str] = []
    taken_over = 0
    done = 0
    notes = ""
    try:
        await asyncio.to_thread(zombie.metrics_url, 60.0)
        await asyncio.to_thread(other.metrics_url, 60.0)
        stream.start()
        for _ in range(cycles):
            if not await _progress(outcomes, zombie, timeout=60.0):
                break
            await asyncio.sleep(5.0)  # both hold partitions again
            zombie.freeze()
            frozen_at = outcomes.total
            await asyncio.sleep(ZOMBIE_PAUSE)
            taken_over += outcomes.total - frozen_at
            zombie.thaw()
            done += 1
            say(f"  freeze {done}/{cycles}: {stream.sent:,} sent, {outcomes.covered:,} answered")
            await asyncio.sleep(6.0)  # it wakes up, is refused, rejoins
        await _catch_up(outcomes, stream, timeout=max(120.0, n / 150))
        for d in (zombie, other):
            if d.proc.poll() is not None:
                checks.append(f"{d.dir.name} exited {d.proc.returncode}")
        fenced = zombie.log.read_text(errors="replace").count("fenced or broken")
        notes = f"{taken_over:,} outcomes by the other while frozen; the thawed one logged {fenced} fence(s)"
    finally:
        zombie.thaw()
        zombie.stop()
        other.stop()
        seconds = time.monotonic() - t0
        await outcomes.stop()
    return Result(
        "zombie",
        mode,
        f"{done}x SIGSTOP {ZOMBIE_PAUSE:g} s (session 6 s), SIGCONT",
        stream.sent,
        outcomes.covered,
        outcomes.total,
        seconds,
        checks,
        notes,
    )


# ---------------------------------------------------------------- main

SCENARIOS = ("sigkill", "redis-pause", "redis-restart", "rebalance", "zombie", "broker-leader", "kafka-outage")


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=100_000, help="lines of the SIGKILL stream (default 100,000)")
    ap.add_argument("--kills", type=int, default=20, help="SIGKILLs per mode (default 20)")
    ap.add_argument("--other-lines", type=int, help="lines of the Redis and rebalance scenarios (default lines / 5)")
    ap.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated: " + ", ".join(SCENARIOS))
    ap.add_argument("--freezes", type=int, default=3, help="SIGSTOP/SIGCONT cycles of the zombie scenario (default 3)")
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--zombie-mode", choices=("both", "alo", "eos"), default="both", help=argparse.SUPPRESS)
    ap.add_argument("--keep", action="store_true", help="keep the daemons' configs and logs (their folder is printed)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes and two kills (under about two minutes)")
    args = ap.parse_args()
    if args.smoke:
        args.lines, args.kills, args.other_lines, args.freezes = 3000, 2, 2000, 1
    other = args.other_lines or max(1000, args.lines // 5)
    only = set(args.only.split(","))
    unknown = only - set(SCENARIOS)
    if unknown:
        ap.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    # the suite's own clients' reconnect errors while a fault lasts are expected: not on the terminal (the daemons'
    # logs are theirs, in their folders)
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    say(f"faults: Kafka {e2e.BOOTSTRAP}, Redis {e2e.REDIS_URL}")
    env = Env(PARTITIONS)
    results: list[Result] = []
    try:
        if "sigkill" in only:
            for transactional in (False, True):
                results.append(await scenario_sigkill(env, args.lines, args.kills, transactional, args.seed))
        if only & {"redis-pause", "redis-restart"}:
            t = traffic(other, seed=args.seed + 1, tag="redis")
            base = await baseline_reasons(env, t.lines, t.records)
            for kind in ("redis-pause", "redis-restart"):
                if kind in only:
                    results.append(await scenario_redis(env, kind, t.lines, t.records, base))
        if "rebalance" in only:
            results.append(await scenario_rebalance(env, other, args.seed + 2))
        if "zombie" in only:
            for transactional in (False, True) if args.zombie_mode == "both" else (args.zombie_mode == "eos",):
                results.append(await scenario_zombie(env, other, transactional, args.seed + 3, args.freezes))
        if only & {"broker-leader", "kafka-outage"}:  # on three-broker clusters of their own (bench/cluster.py)
            import cluster

            if "broker-leader" in only:
                for eos in (False, True):
                    results.append(await cluster.scenario_cluster(env.dir, other, args.seed + 4, transactional=eos))
            if "kafka-outage" in only:
                results.append(await cluster.scenario_outage(env.dir, other, args.seed + 5))
    finally:
        await env.close()
        if args.keep or not all(r.passed for r in results):
            say(f"the daemons' configs and logs (kept: {'--keep' if args.keep else 'a scenario failed'}): {env.dir}")
        else:
            shutil.rmtree(env.dir, ignore_errors=True)
    table(
        "fault suite",
        ["scenario", "mode", "faults injected", "lines sent", "lost", "duplicated", "seconds", "verdict", "notes"],
        [r.row() for r in results],
    )
    say_why_again()
    return 0 if results and all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
