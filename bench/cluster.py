"""The three-broker scenario of the fault suite (issue 16, item 6): ``gatekeeper run`` on a three-node KRaft cluster
on loopback (RF 3, ``min.insync.replicas=2``) while the leader of the output partition and the leader of input
partition 0 are SIGKILLed mid-stream (each started again about 10 s later): nothing may be lost (and, exactly-once,
nothing duplicated).

    set -a; . .local/stack/stack.env; set +a    # Redis from GK_REDIS_URL (the cluster is the scenario's own)
    .venv/bin/python bench/cluster.py --lines 5000
    .venv/bin/python bench/cluster.py --lines 20000 --only exactly-once

The cluster: three JVMs (``process.roles=broker,controller``, node ids 1-3, static ``controller.quorum.voters``)
from the jars ``deploy/local/stack.sh`` caches (``~/.cache/rogerwilco-gatekeeper/kafka-<version>/libs``), on free
loopback ports, all state in a temp dir deleted at the end. Java 17+ on the PATH.

Each mode gets a cluster of its own (about 20 s to start on 2 cores). Lost and duplicated are counted as in
``bench/faults.py`` (``Outcomes``: per input coordinate, from the ``gk.original.*`` headers); "lines sent" is the
number of lines in the input topic (the stream's producer is idempotent, so that equals the acknowledged sends;
a difference is noted).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
import e2e
import faults
from e2e import say, table, traffic

ROOT = Path(__file__).resolve().parents[1]
CACHE_DIR = Path(os.environ.get("GK_CACHE_DIR") or Path.home() / ".cache" / "rogerwilco-gatekeeper")
NODES = (1, 2, 3)
JVM = ["-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"]
SCENARIO_TIMEOUT = 240.0  # seconds, the whole scenario of one mode (cluster start and stop included)


def kafka_libs() -> Path:
    pom = (ROOT / "deploy" / "local" / "kafka" / "pom.xml").read_text()
    found = re.search(r"<kafka.version>(.*?)</kafka.version>", pom)
    if found is None:
        raise RuntimeError("no <kafka.version> in deploy/local/kafka/pom.xml")
    libs = CACHE_DIR / f"kafka-{found.group(1)}" / "libs"
    if not (libs / f"kafka_2.13-{found.group(1)}.jar").is_file():
        raise RuntimeError(f"{libs} lacks the Kafka jars: run deploy/local/stack.sh start once to fetch them")
    return libs


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


LOG4J = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <File name="file" fileName="{log}" append="true"><PatternLayout pattern="[%d] %p %m (%c)%n"/></File>
  </Appenders>
  <Loggers>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="state.change.logger" level="WARN"/>
    <Logger name="org.apache.kafka.clients" level="WARN"/>
    <Root level="INFO"><AppenderRef ref="file"/></Root>
  </Loggers>
</Configuration>
"""


class KraftCluster:
    """Three Kafka nodes on 127.0.0.1, each broker and controller, static voters, RF 3 and ``min.insync.replicas=2``
    by default. ``kill`` is a SIGKILL; ``restart`` starts the node again on its ports and data (no new format)."""

    def __init__(self, *, start_timeout: float = 120.0) -> None:
        self.libs = kafka_libs()
        self.dir = Path(tempfile.mkdtemp(prefix="gk-cluster-"))
        self.start_timeout = start_timeout
        ports = free_ports(2 * len(NODES))
        self.broker_port = {n: ports[i] for i, n in enumerate(NODES)}
        self.controller_port = {n: ports[len(NODES) + i] for i, n in enumerate(NODES)}
        self.cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        for n in NODES:
            self._write_config(n)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.broker_port[n]}" for n in NODES)

    def _node_dir(self, node: int) -> Path:
        return self.dir / f"node-{node}"

    def _write_config(self, node: int) -> None:
        d = self._node_dir(node)
        (d / "data").mkdir(parents=True)
        voters = ",".join(f"{n}@127.0.0.1:{self.controller_port[n]}" for n in NODES)
        broker, controller = self.broker_port[node], self.controller_port[node]
        props = {
            "process.roles": "broker,controller",
            "node.id": node,
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": d / "data",
            "num.partitions": 1,
            "default.replication.factor": 3,
            "min.insync.replicas": 2,
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": 3,
            "offsets.topic.num.partitions": 8,
            "transaction.state.log.replication.factor": 3,
            "transaction.state.log.min.isr": 2,
            "transaction.state.log.num.partitions": 8,
            "share.coordinator.state.topic.replication.factor": 3,
            "share.coordinator.state.topic.min.isr": 2,
            "share.coordinator.state.topic.num.partitions": 4,
            "group.initial.rebalance.delay.ms": 0,
            # a small machine (2 cores) runs three of these
            "num.network.threads": 2,
            "num.io.threads": 2,
            "num.replica.fetchers": 1,
            "background.threads": 2,
            "num.recovery.threads.per.data.dir": 1,
            "log.cleaner.threads": 1,
            "log.cleaner.dedupe.buffer.size": 16 * 1024 * 1024,
        }
        (d / "server.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (d / "log4j2.xml").write_text(LOG4J.format(log=d / "kafka.log"))

    def _java(self, node: int, *args: str, heap: bool = True) -> list[str]:
        d = self._node_dir(node)
        opts = JVM if heap else JVM[2:]
        logs = [f"-Dlog4j2.configurationFile={d / 'log4j2.xml'}", f"-Dkafka.logs.dir={d}"]
        return ["java", *opts, *logs, "-cp", f"{self.libs}/*", *args]

    def _format(self, node: int) -> None:
        d = self._node_dir(node)
        cmd = self._java(
            node,
            "kafka.tools.StorageTool",
            "format",
            f"--cluster-id={self.cluster_id}",  # one argument: a base64url id may start with "-"
            "-c",
            str(d / "server.properties"),
            heap=False,
        )
        with (d / "kafka.out").open("ab") as out:
            rc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out, timeout=120).returncode
        if rc != 0:
            raise RuntimeError(f"formatting node {node} failed (exit {rc}): {(d / 'kafka.out').read_text()[-800:]}")

    def _spawn(self, node: int) -> None:
        d = self._node_dir(node)
        cmd = self._java(node, "kafka.Kafka", str(d / "server.properties"))
        with (d / "kafka.out").open("ab") as out:
            # a process group of its own: ^C on the bench does not reach the JVMs mid-write; stop() ends them
            self.procs[node] = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True
            )

    async def start(self) -> None:
        """Format the three nodes' storage (same cluster id), start them, wait until each answers metadata."""
        await asyncio.gather(*(asyncio.to_thread(self._format, n) for n in NODES))
        for n in NODES:
            self._spawn(n)
        await asyncio.gather(*(self.wait_ready(n) for n in NODES))
        # and until the cluster metadata names all three brokers
        deadline = time.monotonic() + self.start_timeout
        while len(await self.brokers()) < len(NODES):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster did not show {len(NODES)} brokers in {self.start_timeout:.0f} s")
            await asyncio.sleep(0.5)

    async def wait_ready(self, node: int, timeout: float | None = None) -> None:
        """Until ``node`` answers a metadata request (stack.sh's probe, on a thread)."""
        probe = [sys.executable, str(ROOT / "deploy" / "local" / "kafka_ready.py")]
        probe += [f"127.0.0.1:{self.broker_port[node]}", str(int(timeout or self.start_timeout))]
        probe.append(str(self.procs[node].pid))
        rc = await asyncio.to_thread(subprocess.run, probe, timeout=(timeout or self.start_timeout) + 30)
        if rc.returncode != 0:
            log = self._node_dir(node) / "kafka.log"
            tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
            raise RuntimeError(f"node {node} did not answer metadata (probe exit {rc.returncode}): {tail}")

    async def _client(self) -> AIOKafkaClient:
        client = AIOKafkaClient(bootstrap_servers=self.bootstrap, request_timeout_ms=5000, metadata_max_age_ms=1000)
        await asyncio.wait_for(client.bootstrap(), 30)
        return client

    async def brokers(self) -> set[int]:
        client = await self._client()
        try:
            await asyncio.wait_for(client.force_metadata_update(), 15)
            return {b.nodeId for b in client.cluster.brokers()}
        finally:
            await client.close()

    async def leader(self, topic: str, partition: int, timeout: float = 30.0) -> int:
        """The node leading ``topic``-``partition`` (fresh metadata; waits while it has none)."""
        deadline = time.monotonic() + timeout
        while True:
            client = await self._client()
            try:
                await asyncio.wait_for(client.force_metadata_update(), 15)
                leader = client.cluster.leader_for_partition(TopicPartition(topic, partition))
            finally:
                await client.close()
            if leader is not None and leader >= 0:
                return int(leader)
            if time.monotonic() > deadline:
                raise RuntimeError(f"no leader for {topic}-{partition} in {timeout:.0f} s")
            await asyncio.sleep(0.5)

    async def create_topics(self, names: dict[str, str], input_partitions: int) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=30000)
        await admin.start()
        try:
            new = [NewTopic(t, input_partitions if k == "in" else 1, 3) for k, t in names.items()]
            await admin.create_topics(new)
        finally:
            await admin.close()
        for topic in names.values():  # every partition has a leader before traffic starts
            for p in range(input_partitions if topic == names["in"] else 1):
                await self.leader(topic, p)

    def alive(self, node: int) -> bool:
        proc = self.procs.get(node)
        return proc is not None and proc.poll() is None

    def kill(self, node: int) -> None:
        proc = self.procs[node]
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)

    async def restart(self, node: int, *, wait: bool = True) -> None:
        if self.alive(node):
            raise RuntimeError(f"node {node} is running")
        self._spawn(node)
        if wait:
            await self.wait_ready(node)

    def stop(self) -> None:
        """SIGTERM all, up to 20 s, then SIGKILL; delete the dir."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 20
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------- the scenario


async def _input_lines(topic: str, partitions: int) -> int:
    """The lines in the input topic (the sum of its partitions' end offsets)."""
    reader = AIOKafkaConsumer(bootstrap_servers=e2e.BOOTSTRAP, request_timeout_ms=10000)
    await reader.start()
    try:
        ends = await reader.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    finally:
        await reader.stop()
    return sum(ends.values())


def _log_records(daemon: faults.Daemon) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """The daemon's log lines (stderr, each process's in turn), each with its JSON record (None: not one, e.g. a
    traceback's line)."""
    for path in sorted(daemon.dir.glob("process-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                rec = None
            yield line, rec if isinstance(rec, dict) else None


def _log_summary(daemon: faults.Daemon) -> str:
    """The daemon's warnings and errors (JSON log lines on stderr): counts and the most frequent messages."""
    levels: Counter[str] = Counter()
    messages: Counter[str] = Counter()
    for _, rec in _log_records(daemon):
        level = "" if rec is None else str(rec.get("level", ""))
        if rec is None or level not in ("warning", "error", "critical"):
            continue
        levels[level] += 1
        messages[str(rec.get("msg") or rec.get("message") or "?")[:60]] += 1
    if not levels:
        return "daemon log: no warning"
    top = "; ".join(f"{m!r} x{c}" for m, c in messages.most_common(3))
    return f"daemon log: {levels['warning']} warnings, {levels['error'] + levels['critical']} errors ({top})"


async def _say_why_lost(daemon: faults.Daemon, outcomes: faults.Outcomes, in_topic: str) -> None:
    """Lines were lost: which (offset ranges per input partition), how far each input partition was answered, the
    outcome topics' high watermarks and last stable offsets (a transaction left open shows there), and the daemon's
    last words, its own (``gatekeeper.*``, its dead letters' lines left out) apart from the Kafka client's
    reconnect noise; each log line cut at 240 characters. Said during the scenario and again after the table
    (``faults.say_why``)."""
    own: list[str] = []
    client: list[str] = []
    for line, rec in _log_records(daemon):
        if rec is None:
            own.append(line[:240])  # not a JSON record (a traceback's line): shown
        elif rec.get("level") != "debug" and rec.get("msg") != "line dead-letter":  # a dead letter is the traffic's
            (own if str(rec.get("logger", "")).startswith("gatekeeper") else client).append(line[:240])
    by_partition: dict[int, int] = {}
    for part, offset in outcomes.count:
        by_partition[part] = max(by_partition.get(part, -1), offset)
    why = faults.say_why
    why(f"  broker-leader: {outcomes.total:,} outcomes cover {outcomes.covered:,} lines")
    why(f"  unanswered: {await faults.unanswered(outcomes, in_topic)}")
    why(f"  the highest input offset answered per input partition: {dict(sorted(by_partition.items()))}")
    if outcomes.errors:
        why(f"  the outcome reader's failed reads ({len(outcomes.errors)}, retried): {outcomes.errors[-3:]}")
    for tp in outcomes.tps:
        why(
            f"  {tp.topic}-{tp.partition}: high watermark {outcomes.reader.highwater(tp)}, "
            f"last stable offset {outcomes.reader.last_stable_offset(tp)}"
        )
    why("  the daemon's last log lines of its own:")
    for line in own[-24:]:
        why(f"    {line}")
    why("  and the Kafka client's last:")
    for line in client[-8:]:
        why(f"    {line}")


async def _grow(outcomes: faults.Outcomes, timeout: float) -> bool:
    """True once some outcome more arrived."""
    before = outcomes.total
    return await outcomes.wait(lambda o: o.total > before, timeout)


async def scenario_cluster(env_dir: Path, n: int, seed: int, *, transactional: bool) -> faults.Result:
    """The ``broker-leader`` scenario, one mode, on a cluster of its own, bounded by ``SCENARIO_TIMEOUT``."""
    mode = faults._mode(transactional)
    cluster = KraftCluster()
    holder: dict[str, Any] = {}
    t0 = time.monotonic()
    try:
        return await asyncio.wait_for(_run(cluster, env_dir, n, seed, transactional, holder), SCENARIO_TIMEOUT)
    except Exception as exc:  # a failed or timed-out run is a FAIL row, with what is known
        outcomes: faults.Outcomes | None = holder.get("outcomes_snapshot")
        sent = holder.get("sent", 0)
        covered = outcomes.covered if outcomes else 0
        total = outcomes.total if outcomes else 0
        what = "timed out" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
        log = holder.get("daemon_log", "")
        return faults.Result(
            "broker-leader",
            mode,
            holder.get("faults", "-"),
            max(sent, 1),
            covered,
            total,
            time.monotonic() - t0,
            [what[:300]],
            f"daemon log: {log[-300:]!r}" if log else "",
        )
    finally:
        await asyncio.to_thread(cluster.stop)


def _point_at(cluster: KraftCluster, env_dir: Path) -> tuple[e2e.Env, str]:
    """faults' and e2e's helpers (Daemon, Outcomes, Stream, Env) read the module global ``e2e.BOOTSTRAP`` when they
    are called: it points at the cluster until ``_unpoint``. The ``Env`` (Redis from ``GK_REDIS_URL``) keeps its
    daemons' folders in ``env_dir``; the scenario's topics are the cluster's (``_world``). Returns it and the
    address to restore."""
    saved = e2e.BOOTSTRAP
    e2e.BOOTSTRAP = cluster.bootstrap
    env = e2e.Env(faults.PARTITIONS)
    shutil.rmtree(env.dir, ignore_errors=True)
    env.dir = env_dir
    return env, saved


async def _unpoint(env: e2e.Env, saved: str) -> None:
    env.created = []  # the topics go with the cluster; env.close removes the Redis keys
    with contextlib.suppress(Exception):
        await asyncio.wait_for(env.close(), 30)
    e2e.BOOTSTRAP = saved


async def _world(cluster: KraftCluster, env: e2e.Env, name: str, n: int, seed: int) -> tuple[Any, dict[str, str], str]:
    """The scenario's traffic, its topics on the cluster (RF 3) and its Redis prefix, the records loaded."""
    t = traffic(n, seed=seed, tag=name)
    topics = {k: f"e2e-{env.run}-{name}.{k}" for k in ("in", "out", "dlq", "alerts")}
    await cluster.create_topics(topics, faults.PARTITIONS)
    prefix = env.prefix(name)
    await env.load_records(prefix, t.records)
    return t, topics, prefix


async def _run(
    cluster: KraftCluster, env_dir: Path, n: int, seed: int, transactional: bool, holder: dict[str, Any]
) -> faults.Result:
    mode = faults._mode(transactional)
    name = f"cluster{'eos' if transactional else 'alo'}"
    say(f"broker-leader ({mode}): starting a three-node KRaft cluster")
    t_start = time.monotonic()
    await cluster.start()
    say(f"  cluster up in {time.monotonic() - t_start:.1f} s: {cluster.bootstrap}")
    env, saved = _point_at(cluster, env_dir)
    daemon: faults.Daemon | None = None
    outcomes: faults.Outcomes | None = None
    tasks: list[asyncio.Task[None]] = []
    try:
        t, topics, prefix = await _world(cluster, env, name, n, seed)
        say(f"  {len(t.lines):,} lines; the output's leader and input partition 0's leader SIGKILLed mid-stream")
        outcomes = faults.Outcomes(topics, committed=transactional)
        holder["outcomes_snapshot"] = outcomes
        await outcomes.start()
        # the stream lasts about 40 s: the faults (two kills, a restart 10 s after each) fall inside it
        stream = faults.Stream(topics["in"], t.lines, rate=max(100.0, len(t.lines) / 40.0))
        t0 = time.monotonic()
        daemon = faults.Daemon(env, name, topics, prefix, group=f"faults-{env.run}-{name}", transactional=transactional)
        stream.start()
        if not await outcomes.wait(lambda o: o.covered >= 0.3 * len(t.lines), timeout=90):
            raise RuntimeError(f"no 30% of outcomes in 90 s ({outcomes.covered:,})")
        out_leader = await cluster.leader(topics["out"], 0)
        in_leader = await cluster.leader(topics["in"], 0)

        async def restart_later(node: int) -> None:
            await asyncio.sleep(10.0)
            await cluster.restart(node)
            say(f"  node {node} restarted, answers metadata ({stream.sent:,} sent, {outcomes.covered:,} answered)")

        cluster.kill(out_leader)
        killed = [f"out-0 (node {out_leader})"]
        holder["faults"] = f"leader of {killed[0]} SIGKILLed"
        say(
            f"  SIGKILL node {out_leader}, leader of out-0 (and in-0: {in_leader == out_leader}); "
            f"{stream.sent:,} sent, {outcomes.covered:,} answered"
        )
        tasks.append(asyncio.create_task(restart_later(out_leader)))
        if in_leader == out_leader:
            killed = [f"out-0 and in-0 (node {out_leader})"]
        else:
            # progress again: out-0 has a new leader and outcomes arrive after that (not just the dead-letter
            # partition's, or what was in flight)
            deadline = time.monotonic() + 60
            while await cluster.leader(topics["out"], 0) == out_leader:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"out-0 still led by the dead node {out_leader} after 60 s")
                await asyncio.sleep(0.5)
            if not await _grow(outcomes, timeout=60):
                raise RuntimeError("no outcome in 60 s after out-0's new leader")
            in_leader = await cluster.leader(topics["in"], 0)  # unchanged: it was not on the dead node
            cluster.kill(in_leader)
            killed.append(f"in-0 (node {in_leader})")
            say(
                f"  outcomes again; SIGKILL node {in_leader}, leader of in-0; "
                f"{stream.sent:,} sent, {outcomes.covered:,} answered"
            )
            tasks.append(asyncio.create_task(restart_later(in_leader)))
        faults_text = "leader of " + " and ".join(killed) + " SIGKILLed, restarted 10 s later"
        holder["faults"] = faults_text
        for task in tasks:
            await task
        try:
            await stream.finish()
        finally:
            holder["sent"] = stream.sent
        await outcomes.wait(lambda o: o.covered >= stream.sent, timeout=max(90.0, n / 200))
        await asyncio.sleep(2.0)  # late duplicates show here
        in_topic = await _input_lines(topics["in"], faults.PARTITIONS)
        notes = f"leaders after: out-0 node {await cluster.leader(topics['out'], 0)}, in-0 node "
        notes += f"{await cluster.leader(topics['in'], 0)}"
        if in_topic != stream.sent:
            notes += f"; input topic holds {in_topic:,} lines, {stream.sent:,} acknowledged"
        if daemon.proc.poll() is not None:
            notes += f"; the daemon exited {daemon.proc.returncode}"
        if outcomes.errors:
            notes += f"; the outcome reader's reads failed {len(outcomes.errors)} time(s), retried"
        notes += f"; {_log_summary(daemon)}"
        if outcomes.covered < stream.sent:  # lost lines: what the daemon said last, where CI shows it
            await _say_why_lost(daemon, outcomes, topics["in"])
        seconds = time.monotonic() - t0
        return faults.Result(
            "broker-leader",
            mode,
            faults_text,
            max(in_topic, stream.sent),
            outcomes.covered,
            outcomes.total,
            seconds,
            [],
            notes,
        )
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if daemon is not None:
            await asyncio.to_thread(daemon.stop)
            with contextlib.suppress(OSError):
                holder["daemon_log"] = "".join(
                    p.read_text(errors="replace") for p in sorted(daemon.dir.glob("process-*.log"))
                )
        if outcomes is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(outcomes.stop(), 20)
        await _unpoint(env, saved)


OUTAGE_SECONDS = 12.0  # the whole cluster stopped this long (the graceful broker stop: 12.5 s)


async def scenario_outage(env_dir: Path, n: int, seed: int) -> faults.Result:
    """``kafka-outage``: every node of the cluster stopped gracefully (SIGTERM) mid-stream for ``OUTAGE_SECONDS``,
    then started again. ``/readyz`` must turn 503 within 5 s of the last node's exit (a node can take up to 30 s to
    stop) and 200 again after; the daemon's log stays bounded through the outage (its repeat filter: at most 10
    records of a kind per 10 s, then a summary line); nothing lost. At-least-once."""
    cluster = KraftCluster()
    t0 = time.monotonic()
    try:
        return await asyncio.wait_for(_outage(cluster, env_dir, n, seed), SCENARIO_TIMEOUT)
    except Exception as exc:
        what = "timed out" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
        return faults.Result("kafka-outage", "at-least-once", "-", 1, 0, 0, time.monotonic() - t0, [what[:300]], "")
    finally:
        await asyncio.to_thread(cluster.stop)


def _log_lines(daemon: faults.Daemon) -> int:
    """How many lines the daemon logged (counted, not parsed: called mid-outage, in the event loop)."""
    return sum(len(p.read_text(errors="replace").splitlines()) for p in daemon.dir.glob("process-*.log"))


async def _outage(cluster: KraftCluster, env_dir: Path, n: int, seed: int) -> faults.Result:
    name = "outage"
    say("kafka-outage (at-least-once): starting a three-node KRaft cluster")
    await cluster.start()
    env, saved = _point_at(cluster, env_dir)
    daemon: faults.Daemon | None = None
    outcomes: faults.Outcomes | None = None
    watch: faults.ReadyWatch | None = None
    try:
        t, topics, prefix = await _world(cluster, env, name, n, seed)
        say(f"  {len(t.lines):,} lines; every broker stopped (SIGTERM) for {OUTAGE_SECONDS:g} s mid-stream")
        outcomes = faults.Outcomes(topics, committed=False)
        await outcomes.start()
        stream = faults.Stream(topics["in"], t.lines, rate=max(100.0, len(t.lines) / 40.0))
        t0 = time.monotonic()
        daemon = faults.Daemon(env, name, topics, prefix, group=f"faults-{env.run}-{name}")
        url = await asyncio.to_thread(daemon.metrics_url, 60.0)
        if url is None:
            raise RuntimeError(f"no metrics URL: {daemon.log.read_text(errors='replace')[-500:]}")
        watch = faults.ReadyWatch(url)
        stream.start()
        if not await outcomes.wait(lambda o: o.covered >= 0.3 * len(t.lines), timeout=90):
            raise RuntimeError(f"no 30% of outcomes in 90 s ({outcomes.covered:,})")
        lines_before = _log_lines(daemon)
        stopped_at = time.monotonic()
        # a node may take its time to stop (its controlled shutdown waits for a controller quorum that is stopping
        # too; SIGKILL after 30 s) and answers metadata meanwhile: the cluster is down when its last node is gone
        gone_at = max(await asyncio.gather(*(asyncio.to_thread(_terminate, cluster, node) for node in NODES)))
        say(f"  cluster stopped in {gone_at - stopped_at:.1f} s; {stream.sent:,} sent, {outcomes.covered:,} answered")
        await asyncio.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - stopped_at)))
        outage = time.monotonic() - stopped_at
        logged = _log_lines(daemon) - lines_before
        for node in NODES:
            await cluster.restart(node, wait=False)
        await asyncio.gather(*(cluster.wait_ready(node) for node in NODES))
        say(f"  cluster back after {outage:.1f} s; {stream.sent:,} sent, {outcomes.covered:,} answered")
        await stream.finish()
        await outcomes.wait(lambda o: o.covered >= stream.sent, timeout=max(90.0, n / 200))
        await asyncio.sleep(2.0)
        down, up = watch.down_and_up(stopped_at)
        stopping = gone_at - stopped_at
        checks: list[str] = []
        if down is None or down > stopping + 5.0:
            late = f"readyz 503 only {down - stopping:.1f} s after the last node was gone" if down is not None else ""
            checks.append(late or "readyz stayed 200")
        elif up is None:
            checks.append("readyz never 200 again")
        if logged > 200:
            checks.append(f"{logged:,} log lines during the outage")
        if daemon.proc.poll() is not None:
            checks.append(f"the daemon exited {daemon.proc.returncode}")
        notes = f"{logged} log lines during the {outage:.1f} s outage"
        if stopping > 2.0:
            notes += f" (the nodes took {stopping:.1f} s to stop)"
        if down is not None:
            notes += f"; readyz 503 {down:.1f} s after the stop began"
            if up is not None:
                notes += f", 200 {up:.1f} s later"
        in_topic = await _input_lines(topics["in"], faults.PARTITIONS)
        return faults.Result(
            "kafka-outage",
            "at-least-once",
            f"all 3 brokers SIGTERM, {OUTAGE_SECONDS:g} s",
            max(in_topic, stream.sent),
            outcomes.covered,
            outcomes.total,
            time.monotonic() - t0,
            checks,
            notes,
        )
    finally:
        if watch is not None:
            await watch.stop()
        if daemon is not None:
            await asyncio.to_thread(daemon.stop)
        if outcomes is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(outcomes.stop(), 20)
        await _unpoint(env, saved)


def _terminate(cluster: KraftCluster, node: int) -> float:
    """A graceful stop of one node: SIGTERM, and wait (SIGKILL after 30 s). Returns when its process was gone
    (``time.monotonic``)."""
    proc = cluster.procs[node]
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return time.monotonic()


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=5000, help="lines of the stream (default 5,000)")
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--only", choices=("at-least-once", "exactly-once", "outage"), help="one (default: both modes)")
    args = ap.parse_args()
    # the clients' reconnect errors while a node is down are expected: not on the terminal
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    say(f"cluster: Redis {e2e.REDIS_URL}")
    results: list[faults.Result] = []
    env_dir = Path(tempfile.mkdtemp(prefix="gk-cluster-bench-"))
    try:
        if args.only == "outage":
            results.append(await scenario_outage(env_dir, args.lines, args.seed))
        for transactional in (False, True):
            if args.only and args.only != faults._mode(transactional):
                continue
            results.append(await scenario_cluster(env_dir, args.lines, args.seed, transactional=transactional))
    finally:
        shutil.rmtree(env_dir, ignore_errors=True)
    table(
        "fault suite: three-broker cluster",
        ["scenario", "mode", "faults injected", "lines sent", "lost", "duplicated", "seconds", "verdict", "notes"],
        [r.row() for r in results],
    )
    faults.say_why_again()
    return 0 if results and all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
