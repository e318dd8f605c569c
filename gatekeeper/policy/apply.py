"""Applying a decision: the one place conversation state and record bindings change.

A batch is processed as if line by line: each decision is applied in memory before the next line of the batch is
decided, and the store writes the result once. ``Overlay`` is the batch's view of records and bindings: what the
store loaded, plus the bindings this batch claimed or released (the store writes those with compare-and-set, so
two gatekeepers can never bind one approval to two handoffs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import msgspec

from gatekeeper.policy.model import (
    AnswerQuestion,
    Bind,
    Clear,
    Decision,
    FeedThread,
    GatekeeperCancel,
    MarkOverdue,
    MarkUnanswered,
    OpenHandoff,
    PassReadback,
    RecordReadback,
    RefuseReadback,
    Relay,
    Release,
    RememberLine,
    Supersede,
)
from gatekeeper.policy.state import ConversationState, Record, RecordKey


@dataclass(frozen=True, slots=True)
class BindingChange:
    """The binding of ``key`` goes from ``before`` (as loaded) to ``after`` (None: released)."""

    key: RecordKey
    before: str | None
    after: str | None


@dataclass(slots=True)
class Overlay:
    """Records and bindings as loaded for a batch, with the batch's own binding changes on top."""

    records: Mapping[RecordKey, Record] = field(default_factory=dict)
    loaded_bindings: Mapping[RecordKey, str] = field(default_factory=dict)
    _bindings: dict[RecordKey, str | None] = field(default_factory=dict)
    _released: dict[RecordKey, str] = field(default_factory=dict)  # released without being loaded: from this holder

    def record(self, key: RecordKey) -> Record | None:
        return self.records.get(key)

    def binding(self, key: RecordKey) -> str | None:
        if key in self._bindings:
            return self._bindings[key]
        return self.loaded_bindings.get(key)

    def bind(self, key: RecordKey, holder: str) -> None:
        self._bindings[key] = holder

    def release(self, key: RecordKey, holder: str) -> None:
        if self.binding(key) == holder:
            self._bindings[key] = None
        elif key not in self.loaded_bindings and key not in self._bindings:
            # a binding the batch did not load (a reply in a later batch than its HO): released by compare-and-set
            # from its holder, which changes nothing when another handoff holds it
            self._bindings[key] = None
            self._released[key] = holder

    def checkpoint(self) -> tuple[dict[RecordKey, str | None], dict[RecordKey, str]]:
        """The batch's binding changes so far, to ``rollback`` to (a line whose effects could not be applied)."""
        return dict(self._bindings), dict(self._released)

    def rollback(self, checkpoint: tuple[dict[RecordKey, str | None], dict[RecordKey, str]]) -> None:
        self._bindings, self._released = dict(checkpoint[0]), dict(checkpoint[1])

    def changes(self) -> list[BindingChange]:
        out = []
        for key, after in self._bindings.items():
            before = self._released.get(key, self.loaded_bindings.get(key))
            if before != after:
                out.append(BindingChange(key, before, after))
        return out


def apply(state: ConversationState, decision: Decision, overlay: Overlay) -> None:
    """Apply a decision's effects, in order, to the conversation's state and the batch's bindings, marking the
    state's fields each effect changes (``ConversationState.dirty``: what the store writes)."""
    for effect in decision.effects:
        match effect:
            case RememberLine(id=line_id, entry=entry):
                state.lines[line_id] = entry
                state.mark(f"l:{line_id}")
            case OpenHandoff(entry=entry):
                state.handoffs[entry.id] = msgspec.structs.replace(entry)  # the state owns its entries
                state.mark(f"o:{entry.id}")
            case Supersede(ho=ho, by=by):
                state.handoffs[ho].superseded_by = by
                state.handoffs[ho].bound = False
                state.mark(f"o:{ho}")
            case RecordReadback(entry=entry):
                state.readbacks[entry.id] = msgspec.structs.replace(entry)
                state.mark(f"r:{entry.id}")
            case PassReadback(ho=ho, rb=rb):
                state.handoffs[ho].passed_rb = rb
                state.mark(f"o:{ho}")
            case RefuseReadback(rb=rb):
                state.readbacks[rb].refused = True
                state.mark(f"r:{rb}")
            case Clear(ho=ho, rb=rb):
                state.handoffs[ho].cleared_by = rb
                state.mark(f"o:{ho}")
            case FeedThread(message=msg):
                state.seq += 1
                state.tracker.feed(msg, state.seq)
                # what a line can change in the thread: its own handoff, the one it replies to, and for an answer
                # to a cancel, the handoff the cancel names
                target = state.lines.get(msg.re) if msg.re is not None else None
                state.mark_thread(msg.id, msg.re, target.re if target is not None else None)
            case Bind(key=key, holder=holder):
                overlay.bind(key, holder)
            case Release(key=key, holder=holder, ho=ho):
                overlay.release(key, holder)
                if ho in state.handoffs:
                    state.handoffs[ho].bound = False
                    state.mark(f"o:{ho}")
            case Relay(ho=ho, by=by):
                state.handoffs[ho].relayed_by = by
                state.mark(f"o:{ho}")
            case AnswerQuestion(aq=aq, by=by):
                state.lines[aq] = msgspec.structs.replace(state.lines[aq], answered=by)
                state.mark(f"l:{aq}")
            case MarkUnanswered(aq=aq, at=at):
                state.lines[aq] = msgspec.structs.replace(state.lines[aq], unanswered_at=at)
                state.mark(f"l:{aq}")
            case GatekeeperCancel(ho=ho, cx=cx, why=why, at=at):
                entry = state.handoffs[ho]
                entry.gk_cancel, entry.gk_cancel_why, entry.gk_cancel_at = cx, why, at
                state.mark(f"o:{ho}")
            case MarkOverdue(ho=ho, kind=kind, at=at):
                entry = state.handoffs[ho]
                entry.overdue, entry.overdue_at = kind, at
                state.mark(f"o:{ho}")
