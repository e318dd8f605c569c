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

# The seed's payment (specification section 8, "Before an irreversible act").
HO = (
    "RW1 HO scheduler-1 p=pay from=scheduler to=payer item=inv:MD-2026-057 ask=PAY rb=exec sup=marlow amt=5400.00 "
    "cur=GBP kind=GROSS acct=40-12-88/61102938 paid=20261002 ref=MD-2026-057 apref=FD-0929"
)
RB = (
    "RW1 RB payer-1 re=scheduler-1 from=payer to=scheduler item=inv:MD-2026-057 ask=PAY p=pay h=a7a82de76607 "
    "sup=marlow amt=5400.00 cur=GBP kind=GROSS acct=40-12-88/61102938 paid=20261002 ref=MD-2026-057 apref=FD-0929"
)
AN = "RW1 AN scheduler-2 re=payer-1 p=pay from=scheduler to=payer val=Y // readback matches the approved run; proceed"
DN = (
    "RW1 DN payer-2 re=scheduler-1 p=pay from=payer to=scheduler item=inv:MD-2026-057 out=OK sup=marlow amt=5400.00 "
    "cur=GBP kind=GROSS acct=40-12-88/61102938 paid=20261002 ref=MD-2026-057 apref=FD-0929 // as executed"
)
CX = "RW1 CX scheduler-3 re=scheduler-1 p=pay from=scheduler to=payer item=inv:MD-2026-057 why=REVOKED"
ACK = "RW1 AN payer-3 re=scheduler-3 p=pay from=payer to=scheduler val=Y // statement abandoned; nothing paid"

RECORD = Record(
    item="inv:MD-2026-057",
    ask="PAY",
    values={
        "to": "payer",
        "item": "inv:MD-2026-057",
        "ask": "PAY",
        "sup": "marlow",
        "amt": "5400.00",
        "cur": "GBP",
        "kind": "GROSS",
        "acct": "40-12-88/61102938",
        "paid": "20261002",
        "ref": "MD-2026-057",
        "apref": "FD-0929",
    },
)


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
        apply(state, d, overlay)
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
