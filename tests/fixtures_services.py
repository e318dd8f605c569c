"""Real Kafka and Redis for integration tests: a pytest plugin (loaded by ``tests/conftest.py``).

Fixtures
    ``kafka_bootstrap`` (session, str)      ``host:port`` of a Kafka 4.x broker
    ``redis_url`` (session, str)            ``redis://host:port/db``
    ``topic_factory`` (function, async)     ``await topic_factory(partitions=1, config=None) -> name``: a new,
                                            uniquely named topic whose partitions all have a leader; the
                                            topics a test created are deleted after it
    ``redis_client`` (function)             a ``redis.asyncio.Redis`` on ``redis_url`` (a ``RedisCluster`` on a
                                            cluster: see below); every key that appeared during the test is
                                            deleted after it (keys that existed before are kept, so a shared
                                            database is not flushed)
    ``redis_namespace`` (function, str)     a unique key prefix for the test, ``gk-test:<hex>:``

Where the services come from, first match wins:
    1. environment: ``GK_TEST_KAFKA_BOOTSTRAP`` / ``GK_TEST_REDIS_URL``, or the local stack's own
       ``GK_KAFKA_BOOTSTRAP`` / ``GK_REDIS_URL`` (what ``make test`` exports from ``stack.env``; the same file's
       ``GK_KAFKA__BOOTSTRAP_SERVERS`` / ``GK_REDIS__URL``, the gatekeeper's own names, are removed from the tests'
       environment: they would override the configuration files the tests write);
    2. testcontainers, when it is installed (extra ``docker``) and a Docker engine answers: ``apache/kafka``
       at the version ``deploy/local/kafka/pom.xml`` pins (``GK_TEST_KAFKA_IMAGE`` overrides) and ``redis:7``
       (``GK_TEST_REDIS_IMAGE``), stopped at the end of the session;
    3. the project's local stack: ``deploy/local/stack.sh start`` (left running for the next run; stop it with
       ``deploy/local/stack.sh stop``);
    otherwise the test errors with a message naming the three ways.

A Redis Cluster: ``GK_TEST_REDIS_CLUSTER_URL=redis://host:port/0`` (one node of the cluster, a seed; e.g. what
``deploy/local/redis_cluster.sh start`` prints: three masters on loopback) makes the Redis-facing tests use it:
    - ``redis_url`` is that url with ``?cluster=true`` added (it beats ``GK_TEST_REDIS_URL`` / ``GK_REDIS_URL``),
      once the node answers ``cluster_state:ok``; a cluster that does not answer fails the test (no fallback to
      the single Redis, nothing skips). The query parameter is ``redis.url``'s own (it means ``redis.cluster:
      true``), so every store a test builds from ``redis_url`` -- ``RedisSettings(url=redis_url)``, a
      configuration file, a ``gatekeeper`` subprocess -- is a cluster store, with no change to the tests;
    - ``redis_client`` is a ``redis.asyncio.RedisCluster``; the keys that appeared during the test are found by a
      SCAN of every master (redis-py's cluster ``scan_iter``) and deleted (its ``delete`` splits them per slot).
    Meant for the Redis-facing integration files (tests/integration/test_redis_store.py, test_lifecycle_store.py,
    test_pipeline.py, test_lifecycle.py, test_no_loss.py), one file at a time.

Integration tests never skip: a test that uses these fixtures is marked ``integration``, and an integration
test that reports "skipped" is turned into a failure.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shlex
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Generator, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

REPO = Path(__file__).resolve().parent.parent
STACK = REPO / "deploy" / "local" / "stack.sh"
KAFKA_POM = REPO / "deploy" / "local" / "kafka" / "pom.xml"
KAFKA_PROBE = REPO / "deploy" / "local" / "kafka_ready.py"

# The stack's env file also carries the addresses under the gatekeeper's own names, for an operator's shell (`set -a;
# . .local/stack/stack.env; set +a`). In the tests they would override every configuration file a test writes (a GK_
# variable beats the file), so they are taken out of the test process's environment; tests find the services through
# the names above.
CLI_ENV = ("GK_KAFKA__BOOTSTRAP_SERVERS", "GK_REDIS__URL")
for _name in CLI_ENV:
    os.environ.pop(_name, None)

CLUSTER_ENV = "GK_TEST_REDIS_CLUSTER_URL"


def _cluster_url() -> str | None:
    return os.environ.get(CLUSTER_ENV, "").strip() or None


def _plain_url(url: str) -> str:
    """The url without the gatekeeper's own ``cluster`` parameter (redis-py does not know it)."""
    from gatekeeper.config import RedisSettings

    return RedisSettings.split_cluster_param(url)[0]


SERVICE_FIXTURES = frozenset({"kafka_bootstrap", "redis_url", "topic_factory", "redis_client", "_gk_services"})

HOW_TO = (
    "Integration tests need a real Kafka and Redis. Provide them one of three ways:\n"
    "  1. set GK_TEST_KAFKA_BOOTSTRAP=host:port and GK_TEST_REDIS_URL=redis://host:port/0 (or the stack's\n"
    "     GK_KAFKA_BOOTSTRAP / GK_REDIS_URL, as `make test` does);\n"
    "  2. install the `docker` extra (pip install -e '.[docker]') and have a Docker engine running;\n"
    "  3. let the local stack run: deploy/local/stack.sh start (needs bash, Java 17+, Maven, redis-server)."
)


class TopicFactory(Protocol):
    def __call__(self, partitions: int = 1, *, config: dict[str, str] | None = None) -> Awaitable[str]: ...


def _env(*names: str) -> str | None:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


def _docker_answers() -> bool:
    try:
        import docker  # comes with testcontainers (extra `docker`)
        import testcontainers  # noqa: F401

        client = docker.from_env(timeout=5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _kafka_version() -> str:
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", KAFKA_POM.read_text())
    return match.group(1) if match else "latest"


def _wait_kafka(bootstrap: str, timeout: float) -> None:
    spec = importlib.util.spec_from_file_location("_gk_kafka_ready", KAFKA_PROBE)
    assert spec is not None and spec.loader is not None
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    if probe.main(["kafka_ready", bootstrap, str(timeout)]) != 0:
        raise RuntimeError(f"Kafka at {bootstrap} did not answer a metadata request within {timeout}s")


class _Services:
    """Resolves the services lazily, once per session: only tests that ask for them pay for them."""

    def __init__(self) -> None:
        self._backend: dict[str, str] | None = None
        self._source = ""
        self._containers: list[Any] = []

    @property
    def source(self) -> str:
        return self._source

    def kafka(self) -> str:
        env = _env("GK_TEST_KAFKA_BOOTSTRAP", "GK_KAFKA_BOOTSTRAP")
        return env if env else self._fallback()["kafka"]

    def redis(self) -> str:
        cluster = _cluster_url()
        if cluster is not None:
            try:
                _wait_cluster(_plain_url(cluster), 15)
            except Exception as exc:
                pytest.fail(
                    f"{CLUSTER_ENV}={cluster}: no Redis Cluster answers cluster_state:ok there "
                    f"({type(exc).__name__}: {exc}); start one with deploy/local/redis_cluster.sh start, or unset "
                    f"{CLUSTER_ENV}",
                    pytrace=False,
                )
            plain = _plain_url(cluster)
            return plain + ("&" if "?" in plain else "?") + "cluster=true"
        env = _env("GK_TEST_REDIS_URL", "GK_REDIS_URL")
        return env if env else self._fallback()["redis"]

    def _fallback(self) -> dict[str, str]:
        if self._backend is None:
            errors: list[str] = []
            if _docker_answers():
                try:
                    self._backend, self._source = self._start_containers(), "testcontainers"
                except Exception as exc:
                    errors.append(f"testcontainers: {type(exc).__name__}: {exc}")
            if self._backend is None:
                try:
                    self._backend, self._source = self._start_stack(), "local stack"
                except Exception as exc:
                    errors.append(f"local stack: {exc}")
            if self._backend is None:
                pytest.fail(HOW_TO + "\nWhat was tried:\n" + "\n".join(errors), pytrace=False)
        return self._backend

    def _start_containers(self) -> dict[str, str]:
        from testcontainers.core.container import DockerContainer

        kafka_image = os.environ.get("GK_TEST_KAFKA_IMAGE", f"apache/kafka:{_kafka_version()}")
        redis_image = os.environ.get("GK_TEST_REDIS_IMAGE", "redis:7")
        # The advertised listener must be the host's port, so it is chosen before the container starts.
        port = _free_port()
        kafka = DockerContainer(kafka_image).with_bind_ports(9092, port)
        for key, value in {
            "KAFKA_NODE_ID": "1",
            "KAFKA_PROCESS_ROLES": "broker,controller",
            "KAFKA_LISTENERS": "PLAINTEXT://:9092,CONTROLLER://:9093",
            "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://127.0.0.1:{port}",
            "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
            "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
            "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
            "KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS": "8",
            "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
            "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
            "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
            "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
            "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        }.items():
            kafka = kafka.with_env(key, value)
        redis_container = DockerContainer(redis_image).with_exposed_ports(6379)
        for container in (kafka, redis_container):
            container.start()
            self._containers.append(container)
        bootstrap = f"127.0.0.1:{port}"
        _wait_kafka(bootstrap, 120)
        host = redis_container.get_container_host_ip()
        redis_port = redis_container.get_exposed_port(6379)
        _wait_redis(f"redis://{host}:{redis_port}/0", 60)
        return {"kafka": bootstrap, "redis": f"redis://{host}:{redis_port}/0"}

    def _start_stack(self) -> dict[str, str]:
        if not STACK.exists():
            raise RuntimeError(f"{STACK} is missing")
        proc = subprocess.run(
            ["bash", str(STACK), "start"], cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"`{shlex.join(['bash', str(STACK), 'start'])}` exited {proc.returncode}:\n{proc.stderr.strip()}"
            )
        values = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
        try:
            return {"kafka": values["GK_KAFKA_BOOTSTRAP"], "redis": values["GK_REDIS_URL"]}
        except KeyError as exc:
            raise RuntimeError(f"stack.sh start printed no {exc.args[0]}: {proc.stdout!r}") from exc

    def close(self) -> None:
        while self._containers:
            container = self._containers.pop()
            # Best effort at session end; testcontainers' reaper removes leftovers.
            with contextlib.suppress(Exception):
                container.stop()


def _wait_redis(url: str, timeout: float) -> None:
    import redis

    deadline = time.monotonic() + timeout
    while True:
        client = redis.Redis.from_url(url, socket_timeout=2)
        try:
            if client.ping():
                return
        except redis.RedisError:
            if time.monotonic() > deadline:
                raise
        finally:
            client.close()
        time.sleep(0.2)


def _wait_cluster(url: str, timeout: float) -> None:
    import redis

    deadline = time.monotonic() + timeout
    while True:
        client = redis.Redis.from_url(url, socket_timeout=2)
        try:
            state = client.execute_command("CLUSTER INFO").get("cluster_state")  # parsed: {"cluster_state": "ok"}
            if state == "ok":
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster_state:{state}")
        except redis.RedisError:
            if time.monotonic() > deadline:
                raise
        finally:
            client.close()
        time.sleep(0.2)


def _redis_client(url: str) -> Any:
    import redis.asyncio as aioredis

    from gatekeeper.config import RedisSettings

    plain, cluster = RedisSettings.split_cluster_param(url)
    if cluster:
        return aioredis.RedisCluster.from_url(plain)
    return aioredis.Redis.from_url(plain)


# --- hooks -------------------------------------------------------------------------------------------------------


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SERVICE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if report.skipped and not hasattr(report, "wasxfail") and item.get_closest_marker("integration"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"integration tests may not skip (skip reason: {reason})\n{HOW_TO}"
    return report


# --- fixtures ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def _gk_services() -> Iterator[_Services]:
    services = _Services()
    try:
        yield services
    finally:
        services.close()


@pytest.fixture(scope="session")
def kafka_bootstrap(_gk_services: _Services) -> str:
    return _gk_services.kafka()


@pytest.fixture(scope="session")
def redis_url(_gk_services: _Services) -> str:
    return _gk_services.redis()


def _topic_stem(node_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", node_name).strip("-")[:80] or "t"


@pytest.fixture
async def topic_factory(kafka_bootstrap: str, request: pytest.FixtureRequest) -> AsyncIterator[TopicFactory]:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin: AIOKafkaAdminClient | None = None
    created: list[str] = []

    async def make(partitions: int = 1, *, config: dict[str, str] | None = None) -> str:
        nonlocal admin
        if admin is None:
            admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap, client_id="gk-test-admin")
            await admin.start()
        name = f"gk-test-{_topic_stem(request.node.name)}-{uuid.uuid4().hex[:8]}"
        response = await admin.create_topics([NewTopic(name, partitions, 1, topic_configs=config or {})])
        for topic_error in response.topic_errors:
            if topic_error[1] != 0:
                raise RuntimeError(f"creating topic {name}: {topic_error}")
        created.append(name)
        await _wait_for_leaders(admin, name, partitions)
        return name

    try:
        yield make
    finally:
        if admin is not None:
            try:
                if created:
                    await admin.delete_topics(created)
            finally:
                await admin.close()


async def _wait_for_leaders(admin: Any, topic: str, partitions: int, timeout: float = 30.0) -> None:
    import asyncio

    deadline = time.monotonic() + timeout
    while True:
        described = await admin.describe_topics([topic])
        ready = [
            p
            for t in described
            if t["topic"] == topic and t["error_code"] == 0
            for p in t["partitions"]
            if p["error_code"] == 0 and p["leader"] >= 0
        ]
        if len(ready) == partitions:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic}: {len(ready)}/{partitions} partitions have a leader after {timeout}s")
        await asyncio.sleep(0.05)


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[Any]:
    # on a cluster, scan_iter scans every master and delete() is split per slot by the client
    client = _redis_client(redis_url)
    before = {key async for key in client.scan_iter(count=1000)}
    try:
        yield client
    finally:
        await client.aclose()
        cleaner = _redis_client(redis_url)
        try:
            created = [key async for key in cleaner.scan_iter(count=1000) if key not in before]
            for start in range(0, len(created), 500):
                await cleaner.delete(*created[start : start + 500])
        finally:
            await cleaner.aclose()


@pytest.fixture
def redis_namespace() -> str:
    return f"gk-test:{uuid.uuid4().hex}:"
