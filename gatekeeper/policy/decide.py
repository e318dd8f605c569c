"""The decision: one line, its conversation's state, the records, the route's policy and the time -> a verdict.

Pure: no I/O, no clock, no randomness. The daemon, ``gatekeeper check`` and ``gatekeeper replay`` all call
``decide`` and then ``apply`` the decision's effects to the state they hold. The rows of the verdict table are
applied top to bottom and the first that matches decides (see docs/verdicts.md for the table as built).

The rows run natively (``native/engine/src/decide.rs``); this module hands the engine the line, the state, the
records and the route, and turns what it decides into the policy's ``Decision``; its effects stay the engine's
(``EngineEffects``), which ``apply`` applies natively to the state (the policy's effect values are made only if read).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast, overload

import msgspec

from gatekeeper.policy.gate import screen
from gatekeeper.policy.model import (
    AnswerQuestion,
    Bind,
    Clear,
    Decision,
    Effect,
    FeedThread,
    OpenHandoff,
    PassReadback,
    Reason,
    RecordReadback,
    RecordView,
    RefuseReadback,
    Relay,
    Release,
    RememberLine,
    RoutePolicy,
    SenderProof,
    Supersede,
    Verdict,
    is_reserved_id,
)
from gatekeeper.policy.state import (
    ConversationState,
    HandoffEntry,
    LineEntry,
    ReadbackEntry,
    RecordKey,
)
from rwcore import Message, Parsed, Problem, _native, parse_line
from rwcore._codec import MESSAGE_KIT, _switch, native_problems
from rwcore._errors import problem


def line_digest(raw: bytes) -> str:
    """A line's identity within its conversation, with its message id: SHA-256 of the bytes, 16 hex."""
    digest: str = _native.line_digest(raw)
    return digest


def rw_time(epoch: float) -> str:
    """An epoch time as RW1's ``YYYYMMDDTHHMMZ`` (UTC)."""
    stamp: str = _native.rw_time(epoch)
    return stamp


def _p(code: str, message: str, tier: str, slot: str | None = None, expected: Any = None, got: Any = None) -> Problem:
    return Problem(
        code=code,
        message=message,
        tier=tier,
        slot=slot,
        expected=None if expected is None else str(expected),
        got=None if got is None else str(got),
    )


class Prepared(msgspec.Struct, frozen=True, gc=False):
    """A value screened by the gate and parsed under the route's profile: computed once per line, so the batch
    driver can read an HO's (item, ask) before the batch and ``decide`` does not parse the line again."""

    text: str | None
    gate_problems: tuple[Problem, ...]
    parsed: Parsed | None


def prepare(raw: bytes, route: RoutePolicy) -> Prepared:
    text, problems = screen(raw, route.max_line_bytes)
    if text is None:
        return Prepared(None, problems, None)
    return Prepared(text, (), parse_line(text, route.profile))


def holder_of(route: str, conversation: str, ho_id: str, digest: str, at: float) -> str:
    """The value of an exec binding: which handoff holds the approval, ``<route>/<conversation>/<HO id>#<digest>``
    (its identity: route, conversation, id and the line's digest), then ``@<epoch seconds>`` when it was bound.

    A route (a topic name) has no ``/``; an id no ``#`` or ``@``; the digest is 16 hex: read from the right, the
    value has one meaning whatever the conversation holds. A copy of the handoff on another route or in another
    conversation is another identity, so it can never "already hold" the approval."""
    holder: str = _native.holder_of(route, conversation, ho_id, digest, at)
    return holder


def holder_identity(holder: str) -> str:
    """A binding's handoff without the time it was bound."""
    identity: str = _native.holder_identity(holder)
    return identity


def bound_at(holder: str) -> float | None:
    """When a binding was made (None: a binding of an earlier release, or not one of ours)."""
    at: float | None = _native.bound_at(holder)
    return at


def bound_handoff(holder: str) -> str:
    """A binding's handoff as a problem shows it: route, conversation and id (not the digest, not the time)."""
    shown: str = _native.bound_handoff(holder)
    return shown


#: How much of an exception's text an internal-error dead letter carries.
ERROR_TEXT_MAX = 200


def error_text(exc: BaseException) -> str:
    """``OverflowError: date value out of range``: an exception's class and the start of its message, one line."""
    try:
        text = " ".join(str(exc).split())
    except Exception:  # an exception whose message itself raises: its class is still worth saying
        text = "(its message cannot be shown)"
    if len(text) > ERROR_TEXT_MAX:
        text = text[: ERROR_TEXT_MAX - 3] + "..."
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


def internal_error(
    raw: bytes,
    state: ConversationState,
    route: RoutePolicy,
    now: float,
    exc: BaseException,
    prepared: Prepared | None = None,
    sender: SenderProof | None = None,
) -> Decision:
    """The decision for a line whose deciding raised ``exc`` (a bug: never the line's fault, never infrastructure):
    dead-lettered ``internal-error`` and alerted. When the line parses to an id this conversation has not used, that
    id keeps a tombstone, so a redelivery gets the same verdict without deciding it again and replies to it are
    refused; a replay decides it again (once the bug is fixed, it passes as any line would). On a route with
    ``sender_auth`` the tombstone is left only when ``sender`` proves the line's ``from=`` agent signed it (an
    unsigned line cannot take an id from its real sender)."""
    problem = _p(
        "internal-error",
        f"internal error: {error_text(exc)} (the gatekeeper failed deciding this line; its log has the details)",
        "gatekeeper",
        None,
        None,
        type(exc).__name__,
    )
    msg: Message | None = None
    try:
        parsed = prepared.parsed if prepared is not None else prepare(raw, route).parsed
        msg = parsed.message if parsed is not None else None
    except Exception:  # the parse is what raised: nothing about the line can be trusted
        msg = None
    effects: tuple[Effect, ...] = ()
    signed = not route.sender_auth or (msg is not None and sender is not None and sender.agent == msg.from_)
    if msg is not None and signed and msg.id not in state.lines and not is_reserved_id(msg.id):
        entry = LineEntry(
            digest=line_digest(raw),
            type=msg.type,
            verdict=Verdict.DEAD_LETTER.value,
            reason=Reason.INTERNAL_ERROR.value,
            at=now,
            re=msg.re,
            problems=(problem,),
        )
        effects = (RememberLine(msg.id, entry),)
    return Decision(
        Verdict.DEAD_LETTER,
        Reason.INTERNAL_ERROR,
        (problem,),
        message=msg,
        decided_at=now,
        raise_alert=True,
        effects=effects,
    )


#: each route's policy as the engine reads it (``_native.DecideRoute``), by the policy's identity: a route's policy is
#: made once (``consumers.deciding.route_policy``), and a handful of them live at a time
_ROUTES: dict[int, tuple[RoutePolicy, _native.DecideRoute]] = {}


def native_route(route: RoutePolicy) -> _native.DecideRoute:
    """What the engine reads of ``route`` (its profile's grammar, senders, limits), read once per policy object."""
    found = _ROUTES.get(id(route))
    if found is not None and found[0] is route:
        return found[1]
    if len(_ROUTES) >= 256:  # policies made per call (tests, ``gatekeeper check``): forget the old ones
        _ROUTES.clear()
    native = _native.DecideRoute(route)
    _ROUTES[id(route)] = (route, native)
    return native


def decide(
    raw: bytes,
    conversation: str | None,
    state: ConversationState,
    records: RecordView,
    route: RoutePolicy,
    now: float,
    *,
    first_seen: float | None = None,
    replay: bool = False,
    prepared: Prepared | None = None,
    sender: SenderProof | None = None,
) -> Decision:
    """Decide one line. ``now`` is the gatekeeper's clock (epoch seconds) at this decision; ``first_seen`` is when
    the line was first consumed (for the hold window of a reply whose handoff is unknown); ``replay`` re-decides a
    line whose stored first decision was a dead letter (``gatekeeper replay``) instead of returning that decision.
    ``prepared`` is ``prepare(raw, route)`` when the caller already has it. ``sender`` is what verifying the record's
    signature found (``gatekeeper.auth``): on a route with ``sender_auth`` a line without a proof of its ``from=``
    agent is dead-lettered ``sender-auth`` (None there: refused as unverified).
    The caller applies ``decision.effects`` with ``apply`` before deciding the next line of the conversation."""
    if prepared is None and conversation is not None:
        prepared = prepare(raw, route)
    msg: Message | None = None
    invalid = "gate"
    raw_fields: tuple[Any, Any, Any, Any] | None = None
    if prepared is not None and prepared.parsed is not None:
        msg = prepared.parsed.message
        if msg is None:
            invalid = "parse"
            fields = prepared.parsed.raw
            raw_fields = (fields.get("id"), fields.get("from"), fields.get("type"), fields.get("re"))
    native = state.native
    text = prepared.text if prepared is not None else None
    out = _native.decide_line(
        raw,
        conversation,
        msg,
        invalid,
        raw_fields,
        native,
        records,
        native_route(route),
        RecordKey,
        now,
        first_seen,
        replay,
        sender,
        text,
    )
    kind = out[0]
    if kind == "internal":  # the state could not be read: raised as Python raised it, an internal error
        _, cls, message = out
        raise (KeyError if cls == "KeyError" else AssertionError)(message)
    if kind == "repeat":
        assert msg is not None  # a repeat is of a parsed line
        return _repeat(state, msg, out[1])
    _, verdict, reason, found, notes, with_message, raise_alert, effects, clears = out
    if found == "gate":
        problems = prepared.gate_problems if prepared is not None else ()
    elif found == "parse":
        problems = tuple(prepared.parsed.errors) if prepared is not None and prepared.parsed is not None else ()
    else:
        problems = tuple(native_problems(found))
    message = msg if with_message else None
    return Decision(
        verdict=Verdict(verdict),
        reason=None if reason is None else Reason(reason),
        problems=problems,
        notes=tuple(native_problems(notes)) if notes else (),
        message=message,
        decided_at=now,
        raise_alert=raise_alert,
        # a registered Sequence (a struct cannot derive from the ABC too): cast for the type checker
        effects=cast(Sequence[Effect], EngineEffects(effects, (problems, msg, text, now, state, records)))
        if len(effects)
        else (),
        clears=clears,
    )


def _repeat(state: ConversationState, msg: Message, clears: tuple[str, str] | None) -> Decision:
    """The decision of a line that repeats its stored first decision (a batch decided again after a failed write)."""
    seen = state.lines[msg.id]
    return Decision(
        verdict=Verdict(seen.verdict),
        reason=None if seen.reason is None else Reason(seen.reason),
        problems=seen.problems,
        message=msg,
        decided_at=seen.at,
        repeated=True,
        clears=clears,
    )


def prepare_batch(
    values: Sequence[bytes], conversations: Sequence[str | None], route: RoutePolicy
) -> tuple[_native.PreparedBatch, dict[str, set[str]], set[RecordKey]]:
    """A route's lines screened and parsed once, natively (``native/python/src/batch.rs``), for ``decide_batch``;
    with the ids each conversation's lines name (``state.line_ids``: what the store loads for them) and the
    (item, ask) of each handoff among them (its record and binding are loaded with the batch)."""
    return _native.prepare_batch(
        native_route(route), list(values), list(conversations), _switch(route.profile), MESSAGE_KIT, RecordKey
    )


def decide_batch(
    prepared: _native.PreparedBatch,
    lines: Sequence[tuple[bytes, str | None, float | None, bool, int | None, SenderProof | None]],
    states: dict[str, ConversationState],
    overlay: RecordView,
    route: RoutePolicy,
    now: float,
    queued: Callable[[str, float], Decision],
) -> tuple[list[Decision], set[str], dict[str, set[str]]]:
    """``decide`` and ``apply`` for each of a route's prepared lines in order (each ``(value, conversation,
    first_seen, replay, partition, sender)``), in one native call: the decisions, the conversations whose state
    changed (``states`` and ``overlay`` are changed in place) and, per conversation of a line with an input partition,
    the handoffs its decisions touched (for the lifecycle index). A line after a held one of its conversation gets
    ``queued(conversation, now)``. Raises on any error deciding a line: the caller decides the batch again from a
    fresh load line by line (``gatekeeper.processor``)."""
    return _native.decide_batch(prepared, native_route(route), list(lines), states, overlay, now, (*_KIT, queued))


class EngineEffects(msgspec.Struct, gc=False):
    """A decision's effects as the engine made them (``rwcore._native.Effects``): ``policy.apply`` applies them
    natively, whole; the policy's values of them (``RememberLine``, ``OpenHandoff``...) are made only when read. A
    sequence of those values (registered as a ``Sequence``); a struct, so the engine makes one a line without a
    Python ``__init__``."""

    native: _native.Effects
    #: what the values are made of when read: the decision's problems, the message, the line's text as the gate
    #: read it (``bytes`` from a batch, decoded only when read), the time, the state and the records
    source: tuple[tuple[Problem, ...], Message | None, str | bytes | None, float, ConversationState, RecordView]
    made: tuple[Effect, ...] | None = None

    def _values(self) -> tuple[Effect, ...]:
        if self.made is None:
            self.made = tuple(_effect(e, *self.source) for e in self.native.tuples())
        return self.made

    def __len__(self) -> int:
        return len(self.native)

    @overload
    def __getitem__(self, i: int) -> Effect: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[Effect, ...]: ...
    def __getitem__(self, i: int | slice) -> Effect | tuple[Effect, ...]:
        return self._values()[i]

    def __iter__(self) -> Iterator[Effect]:
        return iter(self._values())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._values())


Sequence.register(EngineEffects)


def _effect(
    e: tuple[Any, ...],
    problems: tuple[Problem, ...],
    msg: Message | None,
    text: str | bytes | None,
    now: float,
    state: ConversationState,
    records: RecordView,
) -> Effect:
    """One of the engine's effects as the policy's value (``text`` as bytes: UTF-8, the gate let it through)."""
    kind = e[0]
    if kind == "line":
        _, line_id, digest, typ, verdict, reason, re_, keep_text = e
        entry = LineEntry(
            digest=digest,
            type=typ,
            verdict=verdict,
            reason=reason,
            at=now,
            re=re_,
            problems=problems,
            text=(text.decode("utf-8") if isinstance(text, bytes) else text) if keep_text else None,
        )
        return RememberLine(line_id, entry)
    if kind == "open":
        _, ho_id, item, ask, exec_ask, record_kind, record_of, bound, holder, relay_of = e
        record = None
        if record_kind == "lookup":
            record = records.record(RecordKey(item, ask))
        elif record_kind == "handoff":
            record = state.handoffs[record_of].record
        handoff = HandoffEntry(
            id=ho_id,
            item=item,
            ask=ask,
            exec_ask=exec_ask,
            record=record,
            bound=bound,
            holder=holder,
            relay_of=relay_of,
        )
        return OpenHandoff(handoff)
    if kind == "feed":
        assert msg is not None
        return FeedThread(msg)
    if kind == "readback":
        _, rb_id, ho, passed, exp = e
        return RecordReadback(ReadbackEntry(id=rb_id, ho=ho, passed=passed, exp=exp))
    if kind in ("bind", "release"):
        _, item, ask, holder, ho = e
        return (Bind if kind == "bind" else Release)(RecordKey(item, ask), holder, ho)
    simple: dict[str, Any] = {
        "supersede": Supersede,
        "pass": PassReadback,
        "refuse": RefuseReadback,
        "clear": Clear,
        "relay": Relay,
        "answer": AnswerQuestion,
    }
    effect: Effect = simple[kind](*e[1:])
    return effect


#: what ``decide_batch`` makes its values with (``native/python/src/batch.rs``'s ``Kit``), less the caller's ``queued``
_KIT = (
    Decision,
    {v.value: v for v in Verdict},
    {r.value: r for r in Reason},
    problem,
    EngineEffects,
    _repeat,
    ConversationState,
    RecordKey,
)
