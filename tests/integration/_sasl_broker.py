"""A private single-node Kafka secured as in production: SASL/SCRAM-SHA-512 clients, the KRaft ACL authorizer with
``allow.everyone.if.no.acl.found=false``, and the ACLs of ``deploy/helm/gatekeeper/README.md`` ("Kafka ACLs") for
one route (issue 16: tests that an agent cannot speak for another, nor forge the gatekeeper's output).

    with SaslBroker.start(tmp_dir) as broker:      # JVM up, users, topics and ACLs in place
        broker.bootstrap                           # 127.0.0.1:<port>, SASL_PLAINTEXT, SCRAM-SHA-512
        broker.security("gatekeeper")              # the gatekeeper's ``kafka.security`` settings
        broker.client_kwargs("agent-payer")        # aiokafka's keyword arguments for that user

The broker is the local stack's (``deploy/local/stack.sh``): Kafka's jars from the shared cache
(``~/.cache/rogerwilco-gatekeeper/kafka-<version>/libs``, fetched by ``stack.sh start``, which ``make test`` runs
first), broker and controller in one JVM with stack.sh's JVM flags, loopback only, free ports, its own data folder.
Without Java or the jars the fixture fails; it never skips.

Listeners (only ``CLIENT`` is what the tests and the gatekeeper use):

- ``CLIENT``: SASL_PLAINTEXT, SCRAM-SHA-512; users ``admin`` (a super user: creates topics and ACLs), ``gatekeeper``,
  ``agent-payer``, ``agent-scheduler``. Their SCRAM credentials are written into the metadata log when the storage
  is formatted (``StorageTool format --add-scram``), so they exist before the broker first starts.
- ``BROKER`` (inter-broker) and ``CONTROLLER``: PLAINTEXT on loopback, a test-only simplification. Their clients
  are the JVM itself, whose principal there is ``User:ANONYMOUS``, made a super user so that the broker's own
  requests (registration, cluster actions) pass the authorizer. Anything reaching those ports is a super user; in
  production they would use SASL or mTLS too. Nothing is advertised to clients on them: the tests connect to
  ``CLIENT`` only, and metadata answers with the listener a client connected on.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import importlib.util
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
KAFKA_POM = REPO / "deploy" / "local" / "kafka" / "pom.xml"
KAFKA_PROBE = REPO / "deploy" / "local" / "kafka_ready.py"
CACHE_DIR = Path(os.environ.get("GK_CACHE_DIR") or Path.home() / ".cache" / "rogerwilco-gatekeeper")
#: stack.sh's defaults (GK_KAFKA_HEAP_OPTS / GK_KAFKA_JVM_OPTS)
JVM_FLAGS = ["-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
MECHANISM = "SCRAM-SHA-512"
START_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0

USERS = ("admin", "gatekeeper", "agent-payer", "agent-scheduler")
AGENTS = ("agent-payer", "agent-scheduler")

# Kafka's protocol codes (org.apache.kafka.common.resource / acl): CreateAcls v1.
_TOPIC, _GROUP = 2, 3
_LITERAL = 3
_OPS = {"Read": 3, "Write": 4, "Describe": 8, "DescribeConfigs": 10}
_ALLOW = 3


@dataclass(frozen=True)
class RouteTopics:
    """The route of the chart README's example, and the consumer group of the gatekeeper."""

    input: str = "agents.pay"
    output: str = "agents.pay.checked"
    dead_letter: str = "agents.pay.dlq"
    alerts: str = "agents.pay.alerts"
    group: str = "gatekeeper"

    def outcomes(self) -> tuple[str, str, str]:
        return (self.output, self.dead_letter, self.alerts)


@dataclass(frozen=True)
class Acl:
    principal: str
    resource_type: int
    name: str
    operations: tuple[str, ...]


def route_acls(route: RouteTopics) -> list[Acl]:
    """The ACLs of deploy/helm/gatekeeper/README.md, "Kafka ACLs", for one route (without the transactional id:
    these tests run the gatekeeper idempotent, not transactional)."""
    gk = "User:gatekeeper"
    acls = [
        Acl(gk, _TOPIC, route.input, ("Read", "Describe")),
        Acl(gk, _TOPIC, route.output, ("Write", "Read", "Describe", "DescribeConfigs")),
        Acl(gk, _TOPIC, route.dead_letter, ("Write", "Describe", "DescribeConfigs")),
        Acl(gk, _TOPIC, route.alerts, ("Write", "Describe", "DescribeConfigs")),
        Acl(gk, _GROUP, route.group, ("Read", "Describe")),
    ]
    for agent in AGENTS:
        acls += [
            Acl(f"User:{agent}", _TOPIC, route.input, ("Write", "Describe")),
            Acl(f"User:{agent}", _TOPIC, route.output, ("Read", "Describe")),
            Acl(f"User:{agent}", _GROUP, agent, ("Read",)),
        ]
    return acls


def kafka_version() -> str:
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", KAFKA_POM.read_text())
    if match is None:
        pytest.fail(f"no <kafka.version> in {KAFKA_POM}", pytrace=False)
    return match.group(1)


def kafka_libs() -> Path:
    """The cached jars, or a failure saying how to get them (never a skip)."""
    version = kafka_version()
    libs = CACHE_DIR / f"kafka-{version}" / "libs"
    if shutil.which("java") is None:
        pytest.fail("the SASL/ACL broker needs java (17+) on the PATH", pytrace=False)
    if not (libs / f"kafka_2.13-{version}.jar").is_file():
        pytest.fail(
            f"the Kafka {version} jars are missing from {libs}; `deploy/local/stack.sh start` fetches them "
            "(`make test` runs it before pytest)",
            pytrace=False,
        )
    return libs


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _wait_metadata(bootstrap: str, timeout: float, pid: int) -> None:
    """stack.sh's readiness probe (a Metadata request on a plain socket), on the PLAINTEXT broker listener."""
    spec = importlib.util.spec_from_file_location("_gk_kafka_ready", KAFKA_PROBE)
    assert spec is not None and spec.loader is not None
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    rc = probe.main(["kafka_ready", bootstrap, str(timeout), str(pid)])
    if rc != 0:
        raise RuntimeError(f"the SASL broker did not answer on {bootstrap} (probe exit {rc})")


@dataclass
class SaslBroker:
    bootstrap: str
    passwords: dict[str, str]
    route: RouteTopics
    directory: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def security(self, user: str, password: str | None = None) -> dict[str, Any]:
        """``kafka.security`` for the gatekeeper's Settings (gatekeeper/config.py KafkaSecurity)."""
        return {
            "protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": MECHANISM,
            "sasl_username": user,
            "sasl_password": self.passwords[user] if password is None else password,
        }

    def client_kwargs(self, user: str, password: str | None = None) -> dict[str, Any]:
        """aiokafka's connection arguments for ``user`` (a wrong ``password`` to test a refusal)."""
        return {
            "bootstrap_servers": self.bootstrap,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": MECHANISM,
            "sasl_plain_username": user,
            "sasl_plain_password": self.passwords[user] if password is None else password,
            "request_timeout_ms": 10_000,
        }

    @property
    def log(self) -> Path:
        return self.directory / "kafka.out"

    def log_text(self) -> str:
        """The broker's log (log4j's file: authentication failures, authorizer decisions at INFO)."""
        with contextlib.suppress(OSError):
            return (self.directory / "kafka.log").read_text(errors="replace")
        return ""

    def tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    @classmethod
    @contextlib.contextmanager
    def start(cls, route: RouteTopics | None = None) -> Iterator[SaslBroker]:
        libs = kafka_libs()
        route = route or RouteTopics()
        directory = Path(tempfile.mkdtemp(prefix="gk-sasl-kafka-"))
        client, inter, controller = _free_ports(3)
        broker = cls(
            bootstrap=f"127.0.0.1:{client}",
            passwords={u: secrets.token_urlsafe(12) for u in USERS},
            route=route,
            directory=directory,
        )
        try:
            broker._write_config(client, inter, controller)
            broker._format(libs)
            broker._launch(libs)
            assert broker.process is not None
            try:
                _wait_metadata(f"127.0.0.1:{inter}", START_TIMEOUT, broker.process.pid)
                asyncio.run(broker._provision())
            except Exception as exc:
                raise RuntimeError(f"{exc}\n--- {broker.log} ---\n{broker.tail()}") from exc
            yield broker
        finally:
            broker._stop()
            shutil.rmtree(directory, ignore_errors=True)

    def _write_config(self, client: int, inter: int, controller: int) -> None:
        (self.directory / "data").mkdir()
        (self.directory / "server.properties").write_text(
            f"""\
# Written by tests/integration/_sasl_broker.py: one node, broker and controller, loopback only.
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:{controller}
# CLIENT: what clients use, SASL/SCRAM. BROKER and CONTROLLER: the JVM's own traffic, PLAINTEXT on loopback, whose
# principal (User:ANONYMOUS) is a super user below; a test-only simplification (production secures them too).
listeners=CLIENT://127.0.0.1:{client},BROKER://127.0.0.1:{inter},CONTROLLER://127.0.0.1:{controller}
advertised.listeners=CLIENT://127.0.0.1:{client},BROKER://127.0.0.1:{inter}
listener.security.protocol.map=CLIENT:SASL_PLAINTEXT,BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=BROKER
controller.listener.names=CONTROLLER
sasl.enabled.mechanisms={MECHANISM}
listener.name.client.sasl.enabled.mechanisms={MECHANISM}
listener.name.client.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin;User:ANONYMOUS
log.dirs={self.directory / "data"}
num.partitions=1
default.replication.factor=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=2
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=2
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=2
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=2
num.recovery.threads.per.data.dir=1
"""
        )
        (self.directory / "log4j2.xml").write_text(
            f"""\
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <File name="file" fileName="{self.directory / "kafka.log"}" append="true">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="state.change.logger" level="WARN"/>
    <Logger name="org.apache.kafka.clients" level="WARN"/>
    <Root level="INFO"><AppenderRef ref="file"/></Root>
  </Loggers>
</Configuration>
"""
        )

    def _java(self, libs: Path, *args: str, heap: bool = False) -> list[str]:
        flags = JVM_FLAGS if heap else JVM_FLAGS[2:]  # stack.sh: the heap flags for the broker only
        return [
            "java",
            *flags,
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.directory / 'log4j2.xml'}",
            f"-Dkafka.logs.dir={self.directory}",
            "-cp",
            f"{libs}/*",
            *args,
        ]

    def _format(self, libs: Path) -> None:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")  # as stack.sh makes one
        scram = [
            arg
            for user, password in self.passwords.items()
            for arg in ("--add-scram", f"{MECHANISM}=[name={user},password={password}]")
        ]
        cmd = self._java(
            libs,
            "kafka.tools.StorageTool",
            "format",
            "--standalone",
            f"--cluster-id={cluster_id}",  # one argument: a base64url id may start with "-"
            "-c",
            str(self.directory / "server.properties"),
            *scram,
        )
        with self.log.open("ab") as out:
            rc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT).returncode
        if rc != 0:
            raise RuntimeError(f"formatting the SASL broker's storage exited {rc}:\n{self.tail()}")

    def _launch(self, libs: Path) -> None:
        cmd = self._java(libs, "kafka.Kafka", str(self.directory / "server.properties"), heap=True)
        with self.log.open("ab") as out:
            # its own session: a ^C to pytest does not kill it mid-write; the fixture stops it
            self.process = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def _stop(self) -> None:
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    async def _provision(self) -> None:
        """As admin, over SASL: the route's topics, then its ACLs."""
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic
        from aiokafka.protocol.admin import CreateAclsRequest

        kw = self.client_kwargs("admin")
        admin = AIOKafkaAdminClient(**kw, client_id="gk-sasl-admin")
        deadline = time.monotonic() + 30
        while True:  # the SCRAM credentials are in the metadata log; the listener may lag the first metadata answer
            try:
                await admin.start()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        try:
            topics = [self.route.input, *self.route.outcomes()]
            response = await admin.create_topics([NewTopic(t, 1, 1) for t in topics])
            for name, code, *rest in response.topic_errors:
                if code != 0:
                    raise RuntimeError(f"creating topic {name}: error {code} {rest}")
            for acl in route_acls(self.route):
                for op in acl.operations:
                    request = CreateAclsRequest(
                        acl.resource_type, acl.name, _LITERAL, acl.principal, "*", _OPS[op], _ALLOW
                    )
                    answer = await admin._send_request(request)
                    for code, message in answer.creation_responses:
                        if code != 0:
                            raise RuntimeError(f"creating ACL {acl} {op}: error {code} {message}")
            await _wait_leaders(admin, topics)
        finally:
            await admin.close()


async def _wait_leaders(admin: Any, topics: list[str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        described = await admin.describe_topics(topics)
        ready = {
            t["topic"]
            for t in described
            if t["error_code"] == 0 and t["partitions"] and all(p["leader"] >= 0 for p in t["partitions"])
        }
        if ready == set(topics):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topics without a leader after {timeout}s: {set(topics) - ready}")
        await asyncio.sleep(0.05)
