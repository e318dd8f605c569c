"""Kafka administration for the operator's commands: the configured topics, their offsets, a group's lag.

Used by ``gatekeeper topics``, ``gatekeeper status``, ``gatekeeper replay`` and the demo; never by the daemon's data
path. Every call is bounded by a timeout: a broker that does not answer in time raises ``KafkaUnavailable`` (the
commands exit 3 with one line), never a hang.

- ``route_topics(settings)``: the topics of every route (input, output, dead_letter, alerts), each once;
- ``describe_topics`` / ``create_topics``: what exists (partitions, replication, a few configs) and creating what is
  missing (idempotent: an existing topic is left as it is and reported as such);
- ``partition_offsets``: the first and next offset of every partition of a topic (a dead-letter topic's depth);
- ``group_lag``: per partition, the group's committed offset, the end offset and the lag between them.

aiokafka is imported inside the functions: commands that never talk to Kafka do not pay for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from gatekeeper.config import KafkaSettings, Route, Settings
from gatekeeper.errors import Unavailable, UsageError

if TYPE_CHECKING:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.admin import AIOKafkaAdminClient

T = TypeVar("T")

TopicKind = Literal["input", "output", "dead_letter", "alerts"]
KINDS: tuple[TopicKind, ...] = ("input", "output", "dead_letter", "alerts")
#: The topic configurations ``describe`` shows.
SHOWN_CONFIGS = ("retention.ms", "cleanup.policy", "max.message.bytes", "min.insync.replicas")
DEFAULT_TIMEOUT = 10.0


class KafkaUnavailable(Unavailable):
    """The broker could not be reached, or did not answer, within the timeout."""


class TopicError(UsageError):
    """A topic is missing or the broker refused an operation on it (the message says which and why)."""


def quiet_client_logs() -> None:
    """aiokafka logs every failed connection attempt; a command reports the failure itself, in one line."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


@dataclass(frozen=True, slots=True)
class RouteTopic:
    name: str
    kind: TopicKind
    route: str  # the route's input topic


def route_topics(settings: Settings, routes: Sequence[Route] | None = None) -> list[RouteTopic]:
    """Every topic of ``routes`` (default: all), in route order, each topic once (a shared topic keeps its first
    route and kind)."""
    seen: set[str] = set()
    out: list[RouteTopic] = []
    for r in settings.routes if routes is None else routes:
        for kind in KINDS:
            name = getattr(r, kind)
            if name not in seen:
                seen.add(name)
                out.append(RouteTopic(name, kind, r.input))
    return out


@dataclass(slots=True)
class TopicInfo:
    name: str
    exists: bool
    partitions: int = 0
    replication_factor: int = 0
    configs: dict[str, str] = field(default_factory=dict)
    error: str | None = None


async def _bounded(aw: Awaitable[T], timeout: float, kafka: KafkaSettings, what: str) -> T:
    from aiokafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError

    try:
        return await asyncio.wait_for(aw, timeout)
    except TimeoutError:
        raise KafkaUnavailable(
            f"kafka at {kafka.bootstrap_servers}: {what} did not answer within {timeout:g}s"
        ) from None
    except (KafkaConnectionError, KafkaTimeoutError, OSError) as exc:
        raise KafkaUnavailable(f"kafka at {kafka.bootstrap_servers} is unreachable: {_describe(exc)}") from None
    except KafkaError as exc:
        if getattr(exc, "retriable", False):
            raise KafkaUnavailable(f"kafka at {kafka.bootstrap_servers}: {what} failed: {_describe(exc)}") from None
        raise


def _describe(exc: BaseException) -> str:
    name, text = type(exc).__name__, str(exc)
    if not text:
        return name
    return text if text.startswith(name) else f"{name}: {text}"


@contextlib.asynccontextmanager
async def admin_client(kafka: KafkaSettings, timeout: float = DEFAULT_TIMEOUT) -> AsyncIterator[AIOKafkaAdminClient]:
    from gatekeeper.consumers.kafka import make_admin

    quiet_client_logs()
    admin = make_admin(kafka)
    try:
        await _bounded(admin.start(), timeout, kafka, "connecting")
        yield admin
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(admin.close(), 5.0)


def reader_consumer(kafka: KafkaSettings, role: str, group_id: str | None = None, **extra: Any) -> AIOKafkaConsumer:
    """A consumer (not started) that commits nothing: outside any group (``group_id=None``: manual assignment) or,
    with ``group_id``, one that only reads that group's committed offsets (it never subscribes, so it never joins).
    ``read_committed`` when the deployment is transactional: exactly-once deployments write their outcomes in
    transactions, and an aborted one is never read. ``role`` names it (``<client_id>-<role>``); ``extra``: the
    reader's own settings. The operator's commands, the gate's correlator and the console read with it."""
    from aiokafka import AIOKafkaConsumer

    from gatekeeper.consumers.kafka import client_kwargs

    kw = client_kwargs(kafka)
    kw.update(
        client_id=f"{kafka.client_id}-{role}",
        group_id=group_id,
        enable_auto_commit=False,
        isolation_level="read_committed" if kafka.transactional else "read_uncommitted",
        **extra,
    )
    return AIOKafkaConsumer(**kw)


@contextlib.asynccontextmanager
async def plain_consumer(
    kafka: KafkaSettings, timeout: float = DEFAULT_TIMEOUT, group_id: str | None = None
) -> AsyncIterator[AIOKafkaConsumer]:
    """A consumer outside any group (``group_id=None``: manual assignment, nothing committed) or, with
    ``group_id``, one that only reads that group's committed offsets (it never subscribes, so it never joins).
    ``read_committed`` when the deployment is transactional (``reader_consumer``), started and stopped."""
    quiet_client_logs()
    consumer = reader_consumer(kafka, "ops", group_id, auto_offset_reset="earliest", max_poll_records=500)
    try:
        await _bounded(consumer.start(), timeout, kafka, "connecting")
        yield consumer
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(consumer.stop(), 5.0)


async def describe_topics(
    kafka: KafkaSettings, names: Iterable[str], timeout: float = DEFAULT_TIMEOUT
) -> dict[str, TopicInfo]:
    """What the broker knows of each topic: exists, partitions, replication factor and ``SHOWN_CONFIGS``."""
    names = list(dict.fromkeys(names))
    async with admin_client(kafka, timeout) as admin:
        return await _describe_with(admin, kafka, names, timeout)


async def _describe_with(
    admin: AIOKafkaAdminClient, kafka: KafkaSettings, names: list[str], timeout: float
) -> dict[str, TopicInfo]:
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    out: dict[str, TopicInfo] = {}
    described = await _bounded(admin.describe_topics(names), timeout, kafka, "describing topics")
    for d in described:
        name = str(d["topic"])
        code = int(d["error_code"])
        if code == 3:  # UNKNOWN_TOPIC_OR_PARTITION
            out[name] = TopicInfo(name, exists=False)
            continue
        if code != 0:
            out[name] = TopicInfo(name, exists=False, error=f"error code {code}")
            continue
        parts = d["partitions"]
        rf = max((len(p["replicas"]) for p in parts), default=0)
        out[name] = TopicInfo(name, exists=True, partitions=len(parts), replication_factor=rf)
    existing = [n for n in names if out.get(n) is not None and out[n].exists]
    if existing:
        resources = [
            ConfigResource(ConfigResourceType.TOPIC, n, configs={k: None for k in SHOWN_CONFIGS}) for n in existing
        ]
        with contextlib.suppress(KafkaUnavailable):
            for response in await _bounded(admin.describe_configs(resources), timeout, kafka, "describing configs"):
                for resource in getattr(response, "resources", ()):
                    error_code, _msg, _rtype, name, entries = resource[:5]
                    if error_code != 0 or str(name) not in out:
                        continue
                    for entry in entries:
                        if entry[0] in SHOWN_CONFIGS and entry[1] is not None:
                            out[str(name)].configs[str(entry[0])] = str(entry[1])
    for n in names:
        out.setdefault(n, TopicInfo(n, exists=False))
    return out


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=dict)


async def create_topics(
    kafka: KafkaSettings, specs: Sequence[TopicSpec], timeout: float = DEFAULT_TIMEOUT
) -> dict[str, Literal["created", "exists"]]:
    """Create the topics of ``specs`` that do not exist yet. Returns, per topic, ``created`` or ``exists`` (an
    existing topic is left as it is: its partitions and configs are not changed). Raises ``TopicError`` when the
    broker refuses one (the others may have been created)."""
    from aiokafka.admin import NewTopic

    result: dict[str, Literal["created", "exists"]] = {}
    async with admin_client(kafka, timeout) as admin:
        known = await _describe_with(admin, kafka, [s.name for s in specs], timeout)
        missing = [s for s in specs if not known[s.name].exists]
        for s in specs:
            if known[s.name].exists:
                result[s.name] = "exists"
        if not missing:
            return result
        new = [
            NewTopic(s.name, s.partitions, s.replication_factor, topic_configs=dict(s.configs) or None) for s in missing
        ]
        response = await _bounded(admin.create_topics(new), timeout, kafka, "creating topics")
        errors: list[str] = []
        for topic, code, message in _topic_errors(response):
            if code == 0:
                result[topic] = "created"
            elif code == 36:  # TOPIC_ALREADY_EXISTS: created meanwhile by someone else
                result[topic] = "exists"
            else:
                errors.append(f"{topic}: {message or f'error code {code}'}")
        if errors:
            raise TopicError("the broker refused to create " + "; ".join(errors))
        # a new topic's partitions need a leader before they can be used
        await _wait_for_leaders(admin, kafka, [s.name for s in missing], timeout)
    return result


def _topic_errors(response: Any) -> list[tuple[str, int, str | None]]:
    out = []
    for entry in getattr(response, "topic_errors", ()):
        topic, code = entry[0], entry[1]
        message = entry[2] if len(entry) > 2 else None
        out.append((str(topic), int(code), message))
    return out


async def _wait_for_leaders(admin: AIOKafkaAdminClient, kafka: KafkaSettings, names: list[str], timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        described = await _bounded(admin.describe_topics(names), timeout, kafka, "describing topics")
        ready = all(
            int(d["error_code"]) == 0 and d["partitions"] and all(p["leader"] >= 0 for p in d["partitions"])
            for d in described
        )
        if ready or loop.time() > deadline:
            return
        await asyncio.sleep(0.1)


async def topic_partitions(
    consumer: AIOKafkaConsumer, kafka: KafkaSettings, topic: str, timeout: float = DEFAULT_TIMEOUT
) -> list[int]:
    """The partition numbers of ``topic``; raises ``TopicError`` when it does not exist."""
    parts = consumer.partitions_for_topic(topic)
    if not parts:
        with contextlib.suppress(Exception):
            await _bounded(consumer._client._wait_on_metadata(topic), timeout, kafka, "reading metadata")
        parts = consumer.partitions_for_topic(topic)
    if not parts:
        raise TopicError(f"topic {topic} does not exist")
    return sorted(parts)


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    topic: str
    partition: int
    first: int  # the earliest offset still on the broker
    next: int  # the offset the next record will get (high water mark)

    @property
    def depth(self) -> int:
        return max(0, self.next - self.first)


async def partition_offsets(
    consumer: AIOKafkaConsumer, kafka: KafkaSettings, topic: str, timeout: float = DEFAULT_TIMEOUT
) -> list[PartitionOffsets]:
    from aiokafka import TopicPartition

    tps = [TopicPartition(topic, p) for p in await topic_partitions(consumer, kafka, topic, timeout)]
    first = await _bounded(consumer.beginning_offsets(tps), timeout, kafka, "reading offsets")
    last = await _bounded(consumer.end_offsets(tps), timeout, kafka, "reading offsets")
    return [PartitionOffsets(topic, tp.partition, int(first[tp]), int(last[tp])) for tp in tps]


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None  # None: the group never committed on this partition (it starts from the beginning)
    end: int
    first: int

    @property
    def lag(self) -> int:
        start = self.first if self.committed is None else max(self.committed, self.first)
        return max(0, self.end - start)


async def _group_offsets(admin: AIOKafkaAdminClient, kafka: KafkaSettings, group: str, timeout: float) -> Any:
    """The group's committed offsets. The coordinator may not be there yet (a new broker creates its offsets topic
    on the first request): retriable answers are retried until ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            left = max(0.5, deadline - loop.time())
            return await _bounded(admin.list_consumer_group_offsets(group), left, kafka, "reading the group")
        except KafkaUnavailable:
            if loop.time() >= deadline:
                raise
            await asyncio.sleep(0.2)


async def group_lag(
    kafka: KafkaSettings, group: str, topics: Iterable[str], timeout: float = DEFAULT_TIMEOUT
) -> list[PartitionLag]:
    """The group's lag on every partition of ``topics``: end offset minus committed offset (read without joining
    the group). Raises ``TopicError`` for a topic that does not exist."""
    from aiokafka import TopicPartition

    out: list[PartitionLag] = []
    async with admin_client(kafka, timeout) as admin, plain_consumer(kafka, timeout) as consumer:
        committed = await _group_offsets(admin, kafka, group, timeout)
        for topic in dict.fromkeys(topics):
            offsets = await partition_offsets(consumer, kafka, topic, timeout)
            for po in offsets:
                meta = committed.get(TopicPartition(topic, po.partition))
                offset = None if meta is None or meta.offset < 0 else int(meta.offset)
                out.append(PartitionLag(topic, po.partition, offset, po.next, po.first))
    return out


__all__ = [
    "DEFAULT_TIMEOUT",
    "KINDS",
    "SHOWN_CONFIGS",
    "KafkaUnavailable",
    "PartitionLag",
    "PartitionOffsets",
    "RouteTopic",
    "TopicError",
    "TopicInfo",
    "TopicSpec",
    "admin_client",
    "create_topics",
    "describe_topics",
    "group_lag",
    "partition_offsets",
    "plain_consumer",
    "quiet_client_logs",
    "route_topics",
    "topic_partitions",
]
