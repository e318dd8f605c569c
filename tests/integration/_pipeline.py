"""Helpers to run a gatekeeper against real Kafka and Redis in a test: topics, settings, produce, collect.

    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:   # topics + a running gatekeeper
        await p.store.put_record(RECORD)
        await p.send("conv-1", HO, RB)
        got = await p.collect(lambda r: r.count("conv-1") >= 2)
        assert got.output("conv-1") == [HO, RB]

The gatekeeper runs in-process as an asyncio task (no HTTP, no signal handlers) with its own consumer group and
Redis key prefix, so tests never see each other's state.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from typer.testing import CliRunner

from gatekeeper.cli import app as cli_app
from gatekeeper.config import Settings
from gatekeeper.consumers.loop import Gatekeeper
from gatekeeper.redis_store import RedisStore

TopicFactory = Callable[..., Awaitable[str]]


@dataclass
class Got:
    """Records collected from one topic: (key, value, headers) in the order they arrived per partition."""

    key: bytes | None
    value: bytes
    headers: dict[str, bytes]
    topic: str
    partition: int
    offset: int

    def h(self, name: str) -> str | None:
        v = self.headers.get(name)
        return None if v is None else v.decode()

    @property
    def text(self) -> str:
        return self.value.decode("utf-8", errors="replace")

    @property
    def doc(self) -> Any:
        return json.loads(self.value)


@dataclass
class Collected:
    output: list[Got] = field(default_factory=list)
    dead: list[Got] = field(default_factory=list)
    alerts: list[Got] = field(default_factory=list)
    #: the gatekeeper's refusal notices, read from an output topic (``gatekeeper.notices``): kept apart from the
    #: forwarded lines, which ``output`` holds
    notices: list[Got] = field(default_factory=list)

    def of(self, kind: str, conversation: str) -> list[Got]:
        records: list[Got] = getattr(self, kind)
        return [r for r in records if r.key == conversation.encode()]

    def count(self, conversation: str) -> int:
        """Forward-or-dead-letter records of a conversation (alerts come in addition)."""
        return len(self.of("output", conversation)) + len(self.of("dead", conversation))


def settings_for(
    bootstrap: str,
    redis_url: str,
    routes: Sequence[dict[str, Any]],
    *,
    group: str | None = None,
    prefix: str | None = None,
    **extra: Any,
) -> Settings:
    """Settings for a test: its own consumer group and Redis key prefix, short batches."""
    data: dict[str, Any] = {
        "kafka": {
            "bootstrap_servers": bootstrap,
            "group_id": group or f"gk-test-{uuid.uuid4().hex[:8]}",
            "batch_timeout_ms": 50,
            "request_timeout_ms": 10_000,
        },
        "redis": {"url": redis_url, "key_prefix": prefix or f"gkt{uuid.uuid4().hex[:10]}"},
        "http": {"host": "127.0.0.1", "port": 0},
        "routes": list(routes),
        "grace_seconds": 5.0,
        "log_format": "text",
        "log_level": "INFO",
    }
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(data.get(k), dict):
            data[k] = {**data[k], **v}
        else:
            data[k] = v
    return Settings.model_validate(data)


async def make_route(topics: TopicFactory, partitions: int = 1, **kw: Any) -> dict[str, Any]:
    """A route on fresh topics (input, output, dead-letter, alerts)."""
    route: dict[str, Any] = {
        "input": await topics(partitions),
        "output": await topics(1),
        "dead_letter": await topics(1),
        "alerts": await topics(1),
        "profile": "pay",
        "hold_seconds": 2.0,
    }
    route.update(kw)
    return route


async def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes, Sequence[tuple[str, bytes]]]],
    partition: int | None = None,
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, value, key=key, headers=list(headers), partition=partition)
            for key, value, headers in records
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


class Collector:
    """Reads topics from the beginning (no group) into memory, in the background."""

    def __init__(self, bootstrap: str, topics: dict[str, str]) -> None:
        self.bootstrap = bootstrap
        self.kinds = topics  # topic -> kind (output, dead, alerts)
        self.got = Collected()
        self._task: asyncio.Task[None] | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._changed = asyncio.Event()

    async def start(self) -> None:
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
        )
        await self._consumer.start()
        tps = []
        for topic in self.kinds:
            parts = self._consumer.partitions_for_topic(topic)
            if not parts:
                await self._consumer._client._wait_on_metadata(topic)  # a fresh topic's metadata
                parts = self._consumer.partitions_for_topic(topic) or {0}
            tps.extend(TopicPartition(topic, p) for p in parts)
        self._consumer.assign(tps)
        await self._consumer.seek_to_beginning(*tps)
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        assert self._consumer is not None
        while True:
            batch = await self._consumer.getmany(timeout_ms=100)
            for tp, records in batch.items():
                kind = self.kinds[tp.topic]
                for r in records:
                    got = Got(r.key, r.value or b"", dict(r.headers or ()), tp.topic, tp.partition, r.offset)
                    notice = kind == "output" and "gk.notice.reason" in got.headers
                    target: list[Got] = getattr(self.got, "notices" if notice else kind)
                    target.append(got)
            if batch:
                self._changed.set()

    async def wait(self, predicate: Callable[[Collected], bool], timeout: float = 30.0) -> Collected:
        deadline = time.monotonic() + timeout
        while not predicate(self.got):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out after {timeout}s; collected {self.summary()}")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(left, 0.5))
        return self.got

    async def settle(self, quiet: float = 0.5) -> Collected:
        """Wait until nothing new has arrived for ``quiet`` seconds (to see that nothing more comes)."""
        while True:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), quiet)
            except TimeoutError:
                return self.got

    def summary(self) -> str:
        g = self.got
        return (
            f"output={[r.text[:40] for r in g.output]} dead={[r.text[:40] for r in g.dead]} alerts={len(g.alerts)} "
            f"notices={[r.text[:40] for r in g.notices]}"
        )

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()


@dataclass
class Pipeline:
    """One test's topics, a running gatekeeper and a collector of its outcome topics."""

    bootstrap: str
    settings: Settings
    store: RedisStore
    gatekeeper: Gatekeeper
    collector: Collector
    task: asyncio.Task[None]

    @property
    def routes(self) -> list[Any]:
        return list(self.settings.routes)

    def route(self, i: int = 0) -> Any:
        return self.settings.routes[i]

    async def send(
        self, conversation: str | None, *lines: str | bytes, route: int = 0, headers: Sequence[tuple[str, bytes]] = ()
    ) -> None:
        key = conversation.encode() if conversation is not None else None
        values = [line.encode() if isinstance(line, str) else line for line in lines]
        await produce(self.bootstrap, self.route(route).input, [(key, v, headers) for v in values])

    async def collect(self, predicate: Callable[[Collected], bool], timeout: float = 30.0) -> Collected:
        return await self.collector.wait(predicate, timeout)

    @classmethod
    @contextlib.asynccontextmanager
    async def create(
        cls,
        topics: TopicFactory,
        bootstrap: str,
        redis_url: str,
        routes: Sequence[dict[str, Any]] | None = None,
        *,
        wrap_store: Callable[[RedisStore], Any] | None = None,
        serve_http: bool = False,
        **settings_kw: Any,
    ) -> AsyncIterator[Pipeline]:
        if routes is None:
            routes = [await make_route(topics)]
        settings = settings_for(bootstrap, redis_url, routes, **settings_kw)
        store = RedisStore(settings.redis)
        kinds: dict[str, str] = {}
        for r in settings.routes:
            kinds.update({r.output: "output", r.dead_letter: "dead", r.alerts: "alerts"})
        collector = Collector(bootstrap, kinds)
        await collector.start()
        gk = Gatekeeper(
            settings, store=wrap_store(store) if wrap_store else store, http=serve_http, startup_timeout=20.0
        )
        task = asyncio.create_task(gk.run())
        pipeline = cls(bootstrap, settings, store, gk, collector, task)
        try:
            await wait_ready(gk, task)
            yield pipeline
        finally:
            gk.request_stop()
            try:
                await asyncio.wait_for(task, 20.0)
            finally:
                await collector.stop()
                await store.close()


async def until(predicate: Callable[[], object], timeout: float = 20.0) -> float:
    """Wait until ``predicate()`` is true (polled every 50 ms; fails after ``timeout`` seconds): the seconds waited."""
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < timeout, "timed out"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def wait_ready(gk: Gatekeeper, task: asyncio.Task[None], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not gk.readiness()[0]:
        if task.done():
            task.result()
            raise AssertionError("the gatekeeper stopped before it was ready")
        if time.monotonic() > deadline:
            raise AssertionError(f"gatekeeper not ready after {timeout}s: {gk.readiness()[1]}")
        await asyncio.sleep(0.05)


async def committed(bootstrap: str, group: str, topic: str, partitions: int = 1) -> dict[int, int | None]:
    """The group's committed offsets of a topic (read without joining the group)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        return {p: await consumer.committed(TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        await consumer.stop()


async def cli(*args: str) -> Any:
    """The command line, in a thread (it runs its own event loop)."""
    return await asyncio.to_thread(CliRunner().invoke, cli_app, list(args))


def config_file(path: Path, settings: Settings) -> Path:
    """``settings`` as a YAML file at ``path``, for the command line's ``-c``."""
    path.write_text(yaml.safe_dump(json.loads(settings.model_dump_json())))
    return path
