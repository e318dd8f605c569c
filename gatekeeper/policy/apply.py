"""Applying a decision: the one place conversation state and record bindings change.

A batch is processed as if line by line: each decision is applied in memory before the next line of the batch is
decided, and the store writes the result once. ``Overlay`` is the batch's view of records and bindings: what the
store loaded, plus the bindings this batch claimed or released (the store writes those with compare-and-set, so
two gatekeepers can never bind one approval to two handoffs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gatekeeper.policy.decide import EngineEffects
from gatekeeper.policy.model import (
    AnswerQuestion,
    Bind,
    Clear,
    Decision,
    Effect,
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


def apply(state: ConversationState, decision: Decision, overlay: Overlay) -> set[str]:
    """Apply a decision's effects, in order, to the conversation's state and the batch's bindings. Returns the
    handoffs (and questions) whose place in the lifecycle indexes they may change (``touched``).

    The state is native (``ConversationState``): each effect is one of its methods, which marks the fields it
    changed (``ConversationState.dirty``: what the store writes). The engine's effects (``EngineEffects``, what
    ``decide`` gives) are applied there whole, without making the policy's Python values of them. An effect naming
    an entry the state does not hold raises ``KeyError`` (a bug: the decision read it)."""
    s = state.changing()
    effects = decision.effects
    if isinstance(effects, EngineEffects):
        bindings, hit = s.apply_engine(effects.native, decision.problems)
        for kind, item, ask, holder in bindings:
            if kind == "bind":
                overlay.bind(RecordKey(item, ask), holder)
            else:
                overlay.release(RecordKey(item, ask), holder)
        return set(hit)
    for effect in effects:
        match effect:
            case RememberLine(id=line_id, entry=entry):
                s.remember_line(line_id, entry)
            case OpenHandoff(entry=entry):
                s.open_handoff(entry)
            case Supersede(ho=ho, by=by):
                s.supersede(ho, by)
            case RecordReadback(entry=entry):
                s.record_readback(entry)
            case PassReadback(ho=ho, rb=rb):
                s.pass_readback(ho, rb)
            case RefuseReadback(rb=rb):
                s.refuse_readback(rb)
            case Clear(ho=ho, rb=rb):
                s.clear(ho, rb)
            case FeedThread(message=msg):
                s.feed(msg)
            case Bind(key=key, holder=holder):
                overlay.bind(key, holder)
            case Release(key=key, holder=holder, ho=ho):
                overlay.release(key, holder)
                s.unbind(ho)
            case Relay(ho=ho, by=by):
                s.relay(ho, by)
            case AnswerQuestion(aq=aq, by=by):
                s.answer_question(aq, by)
            case MarkUnanswered(aq=aq, at=at):
                s.mark_unanswered(aq, at)
            case GatekeeperCancel(ho=ho, cx=cx, why=why, at=at):
                s.gatekeeper_cancel(ho, cx, why, at)
            case MarkOverdue(ho=ho, kind=kind, at=at):
                s.mark_overdue(ho, kind, at)
    return touched(state, effects)


def touched(state: ConversationState, effects: Iterable[Effect]) -> set[str]:
    """The handoffs whose place in the indexes these effects may change (apply them first: an answer to a cancel is
    traced to its handoff through the state): the handoff opened, superseded, read back, cleared, released, closed,
    cancelled or acknowledged; and the questions asked, answered or alerted. O(effects)."""
    out: set[str] = set()
    for eff in effects:
        match eff:
            case OpenHandoff(entry=entry):
                out.add(entry.id)
            case (
                Supersede(ho=ho)
                | PassReadback(ho=ho)
                | Clear(ho=ho)
                | Release(ho=ho)
                | GatekeeperCancel(ho=ho)
                | MarkOverdue(ho=ho)
            ):
                out.add(ho)
            case RememberLine(id=line_id, entry=line) if line.type == "AQ":
                out.add(line_id)
            case AnswerQuestion(aq=aq) | MarkUnanswered(aq=aq):
                out.add(aq)
            case FeedThread(message=msg) if msg.re is not None:
                if msg.type in ("DN", "UN", "FL", "CX"):
                    out.add(msg.re)
                elif msg.type == "AN":
                    target = state.lines.get(msg.re)
                    if target is not None and target.type == "CX" and target.re is not None:
                        out.add(target.re)
    return out
