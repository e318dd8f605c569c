"""An in-memory world for the lifecycle: a MemoryStore, a Processor per route, a Sweeper and a Publisher that keeps
what it publishes in memory (with ways to fail, as a crash would), all on one injected clock."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka.partitioner import murmur2

from gatekeeper.metrics import Metrics
from gatekeeper.policy import ConversationState, Decision, RoutePolicy
from gatekeeper.processor import Line, Processor
from gatekeeper.store import MemoryStore
from gatekeeper.sweeper import OutRecord, Sweeper, SweepReport, SweepRoute


class Crash(BaseException):
    """A simulated crash of the sweeper's process: a BaseException, as a kill is nothing the process can catch (the
    sweeper sets aside a handoff whose handling raises an ordinary exception: a bug, not a crash)."""


@dataclass
class Stored:
    key: bytes
    value: bytes
    headers: dict[str, bytes]
    offset: int

    @property
    def text(self) -> str:
        return self.value.decode()

    @property
    def doc(self) -> Any:
        return json.loads(self.value)


class MemoryPublisher:
    """Topics in memory. ``crash_before`` / ``crash_after``: the next publish raises ``Crash`` before writing, or
    after writing (and before the caller learns the offsets)."""

    def __init__(self, partitions: int = 3) -> None:
        self.partitions = partitions
        self.topics: dict[str, dict[int, list[Stored]]] = {}
        self.crash_before = 0
        self.crash_after = 0
        self.finds = 0

    def _part(self, topic: str, p: int) -> list[Stored]:
        return self.topics.setdefault(topic, {}).setdefault(p, [])

    async def partition_for(self, topic: str, key: bytes) -> int:
        await asyncio.sleep(0)  # let a concurrent sweeper run in between, as network I/O would
        return (murmur2(key) & 0x7FFFFFFF) % self.partitions

    async def end_offset(self, topic: str, partition: int) -> int:
        await asyncio.sleep(0)
        return len(self._part(topic, partition))

    async def publish(self, records: Sequence[OutRecord]) -> list[int]:
        await asyncio.sleep(0)
        if self.crash_before:
            self.crash_before -= 1
            raise Crash("killed before publishing")
        offsets = []
        for r in records:
            p = r.partition if r.partition is not None else await self.partition_for(r.topic, r.key)
            part = self._part(r.topic, p)
            part.append(Stored(r.key, r.value, dict(r.headers), len(part)))
            offsets.append(len(part) - 1)
        if self.crash_after:
            self.crash_after -= 1
            raise Crash("killed after publishing")
        return offsets

    async def find(self, topic: str, partition: int, start: int, key: bytes, value: bytes) -> int | None:
        self.finds += 1
        for r in self._part(topic, partition)[start:]:
            if r.key == key and r.value == value:
                return r.offset
        return None

    def records(self, topic: str) -> list[Stored]:
        return [r for p in sorted(self.topics.get(topic, {})) for r in self.topics[topic][p]]


@dataclass
class Clock:
    now: float

    def __call__(self) -> float:
        return self.now


@dataclass
class Lifecycle:
    """One route: lines go through the Processor (as the daemon decides them), sweeps through a Sweeper."""

    policy: RoutePolicy
    clock: Clock
    store: MemoryStore = field(default_factory=MemoryStore)
    publisher: MemoryPublisher = field(default_factory=MemoryPublisher)
    metrics: Metrics = field(default_factory=Metrics)
    output: str = "out"
    alerts: str = "alerts"
    dry_run: bool = False
    takeover_seconds: float = 60.0
    partition: int = 0

    def __post_init__(self) -> None:
        self.processor = Processor(self.store, self.policy)
        self.sweeper = self.new_sweeper()

    def new_sweeper(self, owner: str | None = None) -> Sweeper:
        route = SweepRoute(self.policy, self.output, self.alerts, dry_run=self.dry_run)
        return Sweeper(
            self.store,
            [route],
            self.publisher,
            clock=self.clock,
            metrics=self.metrics,
            owner=owner,
            takeover_seconds=self.takeover_seconds,
        )

    async def send(self, conversation: str, *lines: str) -> list[Decision]:
        batch = [Line(conversation, ln.encode(), first_seen=self.clock.now, partition=self.partition) for ln in lines]
        return await self.processor.process(batch, self.clock.now)

    async def sweep(self, sweeper: Sweeper | None = None) -> SweepReport:
        return await (sweeper or self.sweeper).sweep([(self.policy.name, self.partition)], now=self.clock.now)

    def state(self, conversation: str) -> ConversationState:
        s = self.store.state(self.policy.name, conversation)
        assert s is not None
        return s

    def cancels(self) -> list[Stored]:
        return [r for r in self.publisher.records(self.output) if r.headers.get("gk.author") == b"gatekeeper"]

    def alerts_(self) -> list[Stored]:
        return self.publisher.records(self.alerts)
