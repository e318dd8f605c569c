"""A small in-memory world for testing the pure decision: conversations, records and bindings, and a clock."""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass, field

from gatekeeper.policy import (
    ConversationState,
    Decision,
    Mode,
    Overlay,
    Record,
    RecordKey,
    RoutePolicy,
    apply,
    decide,
)
from rwcore import get_profile
from tests.seed import ACK, AN, CX, DN, HO, RB, RECORD_VALUES

RECORD = Record(item="inv:MD-2026-057", ask="PAY", values=RECORD_VALUES)


def epoch(rw: str) -> float:
    """``YYYYMMDDTHHMMZ`` to epoch seconds."""
    return float(calendar.timegm(time.strptime(rw, "%Y%m%dT%H%MZ")))


NOW = epoch("20261001T0900Z")


def route(**kw: object) -> RoutePolicy:
    base: dict[str, object] = {"name": "agents.pay", "profile": get_profile("pay"), "hold_seconds": 30.0}
    base.update(kw)
    return RoutePolicy(**base)  # type: ignore[arg-type]


@dataclass
class World:
    """Conversations, records and bindings in memory. ``send`` decides a line and applies its effects."""

    policy: RoutePolicy = field(default_factory=route)
    records: dict[RecordKey, Record] = field(default_factory=dict)
    bindings: dict[RecordKey, str] = field(default_factory=dict)
    states: dict[str, ConversationState] = field(default_factory=dict)
    now: float = NOW
    #: what applying the last line's effects touched (``policy.apply``: the engine's effects, applied natively)
    touched: set[str] = field(default_factory=set)

    def add(self, record: Record) -> World:
        self.records[record.key] = record
        return self

    def state(self, conversation: str = "c1") -> ConversationState:
        return self.states.setdefault(conversation, ConversationState())

    def send(
        self,
        line: str | bytes,
        conversation: str | None = "c1",
        *,
        first_seen: float | None = None,
        replay: bool = False,
    ) -> Decision:
        raw = line.encode() if isinstance(line, str) else line
        state = self.state(conversation) if conversation is not None else ConversationState()
        overlay = Overlay(records=self.records, loaded_bindings=dict(self.bindings))
        d = decide(raw, conversation, state, overlay, self.policy, self.now, first_seen=first_seen, replay=replay)
        self.touched = apply(state, d, overlay)
        for change in overlay.changes():
            if change.after is None:
                self.bindings.pop(change.key, None)
            else:
                self.bindings[change.key] = change.after
        return d


def core_world(**kw: object) -> World:
    """A route under the core vocabulary only (any agent names)."""
    return World(policy=route(profile=get_profile(None), **kw))


def pay_world(**kw: object) -> World:
    return World(policy=route(**kw)).add(RECORD)


__all__ = [
    "ACK",
    "AN",
    "CX",
    "DN",
    "HO",
    "NOW",
    "RB",
    "RECORD",
    "Mode",
    "World",
    "core_world",
    "epoch",
    "pay_world",
    "route",
]
