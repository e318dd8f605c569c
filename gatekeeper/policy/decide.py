"""The decision: one line, its conversation's state, the records, the route's policy and the time -> a verdict.

Pure: no I/O, no clock, no randomness. The daemon, ``gatekeeper check`` and ``gatekeeper replay`` all call
``decide`` and then ``apply`` the decision's effects to the state they hold. The rows of the verdict table are
applied top to bottom and the first that matches decides (see docs/verdicts.md for the table as built).
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import msgspec

from gatekeeper.policy.authority import Role, Target, refusal
from gatekeeper.policy.gate import conversation_problem, impossible_dates, screen
from gatekeeper.policy.model import (
    AFFIRMATIVE,
    CANCEL_WHY,
    NEGATIVE,
    RESERVED_ID_MAX,
    RESERVED_ID_MIN,
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
    id_number,
    is_reserved_id,
)
from gatekeeper.policy.state import (
    ConversationState,
    HandoffEntry,
    LineEntry,
    ReadbackEntry,
    Record,
    RecordKey,
)
from rwcore import (
    Message,
    Parsed,
    Problem,
    _native,
    dn_check,
    ho_check,
    parse_line,
    rb_check,
    translation_check,
)
from rwcore._codec import native_problems

REPLY_TYPES = frozenset({"RB", "AN", "DN", "UN", "FL", "CX"})
_RB_OWN = frozenset({"h", "eta", "acc", "do", "not", "asm", "p", "exp"})


def line_digest(raw: bytes) -> str:
    """A line's identity within its conversation, with its message id: SHA-256 of the bytes, 16 hex."""
    return hashlib.sha256(raw).hexdigest()[:16]


@functools.lru_cache(maxsize=256)
def rw_time(epoch: float) -> str:
    """An epoch time as RW1's ``YYYYMMDDTHHMMZ``. Memoised: a batch's lines share their decision time."""
    return time.strftime("%Y%m%dT%H%MZ", time.gmtime(epoch))


def _p(code: str, message: str, tier: str, slot: str | None = None, expected: Any = None, got: Any = None) -> Problem:
    return Problem(
        code=code,
        message=message,
        tier=tier,
        slot=slot,
        expected=None if expected is None else str(expected),
        got=None if got is None else str(got),
    )


def _expired(exp: object, now_rw: str) -> bool:
    return isinstance(exp, str) and len(exp) == 14 and now_rw >= exp


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


#: The stored lines (HOs, checked RBs) parsed last, for the replies that need them again: a bounded FIFO. Small on
#: purpose: replies mostly follow their handoff within moments, a miss costs one parse, and every message kept here
#: outlives the young collections (at 20,000 entries the cache was most of what the daemon's middle and oldest
#: generations held: 50 ms collections, the p99 latency at half load). An ``OrderedDict``: a plain dict's oldest
#: entry is found by scanning past the slots of every entry deleted before it (1.4 µs an insert at 2,048, 0.3 here).
_STORED: OrderedDict[tuple[str | None, str], Message] = OrderedDict()
_STORED_MAX = 2_048


def _stored_message(text: str, route: RoutePolicy) -> Message:
    """A line the state kept (an HO, a checked RB), parsed once while it is recent: later replies need it again. A
    line kept by this process is here from its own decision (``_keep``), not parsed a second time."""
    key = (route.profile.name, text)
    msg = _STORED.get(key)
    if msg is None:
        parsed = parse_line(text, route.profile)
        assert parsed.message is not None, "a stored line no longer parses"
        msg = _keep(key, parsed.message)
    return msg


def _keep(key: tuple[str | None, str], msg: Message) -> Message:
    if len(_STORED) >= _STORED_MAX:
        _STORED.popitem(last=False)  # the oldest
    _STORED[key] = msg
    return msg


def holder_of(route: str, conversation: str, ho_id: str, digest: str, at: float) -> str:
    """The value of an exec binding: which handoff holds the approval, ``<route>/<conversation>/<HO id>#<digest>``
    (its identity: route, conversation, id and the line's digest), then ``@<epoch seconds>`` when it was bound.

    A route (a topic name) has no ``/``; an id no ``#`` or ``@``; the digest is 16 hex: read from the right, the
    value has one meaning whatever the conversation holds. A copy of the handoff on another route or in another
    conversation is another identity, so it can never "already hold" the approval."""
    return f"{route}/{conversation}/{ho_id}#{digest}@{int(at)}"


def legacy_holder(conversation: str, ho_id: str) -> str:
    """The binding value of a handoff bound by an earlier release (``<conversation>/<HO id>``): released as it was
    written."""
    return f"{conversation}/{ho_id}"


def holder_identity(holder: str) -> str:
    """A binding's handoff without the time it was bound."""
    return holder.rpartition("@")[0] or holder


def bound_at(holder: str) -> float | None:
    """When a binding was made (None: a binding of an earlier release, or not one of ours)."""
    stamp = holder.rpartition("@")[2]
    return float(stamp) if stamp.isascii() and stamp.isdigit() and "@" in holder else None


def bound_handoff(holder: str) -> str:
    """A binding's handoff as a problem shows it: route, conversation and id (not the digest, not the time)."""
    return holder_identity(holder).rpartition("#")[0] or holder


class _Decider:
    """One decision. A class only to share its inputs between the rows; ``decide`` is the interface."""

    def __init__(
        self,
        raw: bytes,
        conversation: str | None,
        state: ConversationState,
        records: RecordView,
        route: RoutePolicy,
        now: float,
        first_seen: float | None,
        replay: bool,
        prepared: Prepared | None,
        sender: SenderProof | None = None,
    ) -> None:
        self.raw = raw
        self.sender = sender
        self.prepared = prepared
        self.conversation = conversation
        self.state = state
        self.records = records
        self.route = route
        self.now = now
        self.now_rw = rw_time(now)
        self.first_seen = now if first_seen is None else first_seen
        self.replay = replay
        self.digest = line_digest(raw)
        self.text: str | None = None
        self.msg: Message | None = None

    # ------------------------------------------------------------ building decisions

    def _decision(
        self,
        verdict: Verdict,
        reason: Reason | None,
        problems: Iterable[Problem] = (),
        notes: Iterable[Problem] = (),
        effects: Iterable[Effect] = (),
        keep_text: bool = False,
        raise_alert: bool = False,
        feed: bool = True,
    ) -> Decision:
        problems = tuple(problems)
        effects = list(effects)
        msg = self.msg
        if msg is not None and verdict is not Verdict.HOLD:
            entry = LineEntry(
                digest=self.digest,
                type=msg.type,
                verdict=verdict.value,
                reason=None if reason is None else reason.value,
                at=self.now,
                re=msg.re,
                problems=problems,
                text=self.text if keep_text else None,
            )
            if keep_text and self.text is not None:  # its replies will need it: parsed already (a frozen Message)
                _keep((self.route.profile.name, self.text), msg)
            effects.insert(0, RememberLine(msg.id, entry))
            if verdict is not Verdict.DEAD_LETTER and feed:
                effects.append(FeedThread(msg))
        return Decision(
            verdict=verdict,
            reason=reason,
            problems=problems,
            notes=tuple(notes),
            message=msg,
            decided_at=self.now,
            raise_alert=raise_alert,
            effects=tuple(effects),
        )

    def _dead(self, reason: Reason, *problems: Problem, **kw: Any) -> Decision:
        return self._decision(Verdict.DEAD_LETTER, reason, problems, **kw)

    def _hold_or(self, reason: Reason, problem: Problem, verdict: Verdict = Verdict.DEAD_LETTER) -> Decision:
        """A reply whose handoff is not known yet: held within the window, then refused (or alerted). A reply
        that names a line this conversation knows, of the wrong type, is decided at once."""
        known = self.msg is not None and self.msg.re in self.state.lines
        if not known and self.now - self.first_seen < self.route.hold_seconds:
            return Decision(Verdict.HOLD, Reason.AWAITING_HANDOFF, (problem,), message=self.msg, decided_at=self.now)
        return self._decision(verdict, reason, (problem,))

    # ------------------------------------------------------------ the table, top to bottom

    def decide(self) -> Decision:
        if self.conversation is None:
            return self._dead(
                Reason.NO_CONVERSATION,
                _p("no-conversation", "the record has no conversation id (the Kafka record key)", "gate"),
            )
        refused_key = conversation_problem(self.conversation)
        if refused_key is not None:
            return self._dead(Reason.NO_CONVERSATION, refused_key)
        prepared = self.prepared or prepare(self.raw, self.route)
        if prepared.text is None or prepared.parsed is None:
            return self._dead(Reason.INVALID, *prepared.gate_problems)
        self.text = prepared.text
        parsed = prepared.parsed
        if parsed.message is None:
            return self._invalid(parsed.errors, parsed.raw)
        msg = parsed.message
        named = msg.slots.get("p")
        if named is not None and named != self.route.profile.name:
            return self._invalid(
                (
                    _p(
                        "profile-mismatch",
                        f"the line names profile p={named} but this route's profile is {self.route.profile.name}",
                        "form",
                        "p",
                        self.route.profile.name,
                        named,
                    ),
                ),
                parsed.raw,
            )
        impossible = impossible_dates(msg, self.route.profile)
        if impossible:
            return self._invalid(impossible, parsed.raw)
        if self.route.senders is not None and msg.from_ not in self.route.senders:
            return self._dead(
                Reason.SENDER_BINDING,
                _p(
                    "sender-binding",
                    f"from={msg.from_} may not publish on route {self.route.name}",
                    "gate",
                    "from",
                    "+".join(sorted(self.route.senders)),
                    msg.from_,
                ),
            )
        if self.route.sender_auth:
            refused = self._sender_auth(msg.from_)
            if refused is not None:
                return refused
        if msg.type == "CX" and msg.slots.get("why") not in CANCEL_WHY:
            why = msg.slots.get("why")
            return self._invalid(
                (
                    _p(
                        "cancel-why",
                        f"CX {msg.id}: a cancel says why, one of {' '.join(sorted(CANCEL_WHY))}; got "
                        f"{'none' if why is None else f'why={why}'}",
                        "form",
                        "why",
                        "+".join(sorted(CANCEL_WHY)),
                        why,
                    ),
                ),
                parsed.raw,
            )
        if is_reserved_id(msg.id):
            return self._dead(
                Reason.RESERVED_ID,
                _p(
                    "reserved-id",
                    f"id {msg.id}: numbers {RESERVED_ID_MIN}-{RESERVED_ID_MAX} are reserved for the gatekeeper",
                    "gate",
                    "id",
                    None,
                    msg.id,
                ),
            )
        self.msg = msg
        seen = self.state.lines.get(msg.id)
        if seen is not None:
            if seen.digest != self.digest:
                # the id belongs to the first line: nothing about this one is remembered
                return Decision(
                    verdict=Verdict.DEAD_LETTER,
                    reason=Reason.DUPLICATE_ID,
                    problems=(
                        _p(
                            "duplicate-id",
                            f"id {msg.id} was already used in this conversation for a different line",
                            "conversation",
                            "id",
                            None,
                            msg.id,
                        ),
                    ),
                    message=msg,
                    decided_at=self.now,
                )
            if not (self.replay and seen.verdict == Verdict.DEAD_LETTER.value):
                return self._repeat(seen)
        if msg.type in REPLY_TYPES and msg.re is not None:
            target = self.state.lines.get(msg.re)
            if target is not None and target.verdict == Verdict.DEAD_LETTER.value:
                ran = msg.type == "DN" and msg.slots.get("out") != "NOOP"
                return self._dead(
                    Reason.REFUSED_HANDOFF,
                    _p(
                        "refused-handoff",
                        f"{msg.type} {msg.id} replies to {msg.re}, which was dead-lettered ({target.reason})",
                        "conversation",
                        "re",
                        None,
                        msg.re,
                    ),
                    raise_alert=ran,
                )
        thread = self._target(msg)
        if thread is not None:
            refused = self._authorize(msg, *thread)
            if refused is not None:
                return refused
        handler = getattr(self, f"_on_{msg.type}", None)
        if handler is None:
            return self._decision(Verdict.FORWARD, None)
        result: Decision = handler(msg)
        return result

    def _target(self, msg: Message) -> tuple[Target, dict[Role, str]] | None:
        """What the line's ``re=`` names, and the parties of its thread (``policy.authority``); None when it names
        nothing this conversation knows (or a line no rule is about). An HO's target is always a handoff: the one
        it names, or the one whose readback it names (a re-issue after a failed readback)."""
        line = self.state.lines.get(msg.re) if msg.re is not None else None
        if line is None or (line.verdict == Verdict.DEAD_LETTER.value and not (msg.type == "HO" and line.type == "RB")):
            return None
        if line.type == "AQ":
            if line.text is None:  # a question kept by an earlier release: its parties are not known
                return None
            aq = _stored_message(line.text, self.route)
            return Target.QUESTION, {Role.ASKER: aq.from_, Role.ASKED: aq.to or ""}
        if line.type == "HO":
            kind, ho_id = Target.HANDOFF, msg.re or ""
        elif line.type == "RB":
            rb = self.state.readbacks.get(msg.re or "")
            if rb is None:
                return None
            kind, ho_id = (Target.HANDOFF if msg.type == "HO" else Target.READBACK), rb.ho
        elif line.type == "CX":
            kind, ho_id = Target.CANCEL, line.re or ""
        else:
            return None
        entry = self.state.handoffs.get(ho_id)
        if entry is None:
            return None
        ho = self._message(entry.id)
        return kind, {Role.SENDER: ho.from_, Role.RECEIVER: ho.to or ""}

    def _authorize(self, msg: Message, kind: Target, parties: dict[Role, str]) -> Decision | None:
        """The authority table's word on a line replying to ``kind`` (None: its sender holds a role that may send
        it). A refused line changes nothing in the target's thread: a dead letter, or a done report delivered
        flagged and alerted that closes nothing."""
        found = refusal(msg.type, kind, msg.from_, msg.to or "", parties)
        if found is None:
            return None
        r, expected = found
        problem = _p(
            r.refusal.code,
            f"{msg.type} {msg.id} re={msg.re}: a {msg.type} to {kind} comes from {expected}; got "
            f"from={msg.from_} to={msg.to}",
            "thread",
            "from",
            expected,
            f"{msg.from_}->{msg.to}",
        )
        if r.refusal.verdict is Verdict.ALERT:
            return self._decision(Verdict.ALERT, r.refusal.reason, (problem,), feed=False)
        return self._dead(r.refusal.reason, problem, raise_alert=r.refusal.alert)

    def _sender_auth(self, from_: str) -> Decision | None:
        """Fail closed on a route that requires signed lines: the record must carry a valid signature of a
        configured key (``self.sender``, verified where the headers were known) whose agent is the line's ``from=``.
        Nothing of a refused line is remembered: an unsigned line cannot take an id from its real sender."""
        proof = self.sender
        if proof is None:
            proof = SenderProof(failure="sender-auth-unverified", detail="the record's signature was not verified")
        if proof.agent is None:
            return self._dead(
                Reason.SENDER_AUTH,
                _p(
                    proof.failure or "sender-auth",
                    f"sender authentication: {proof.detail or 'no valid signature'} (route {self.route.name} "
                    f"takes lines signed by their from= agent's key only)",
                    "gate",
                    "from",
                    f"a signature of {from_}",
                    proof.key_id,
                ),
            )
        if proof.agent != from_:
            return self._dead(
                Reason.SENDER_AUTH,
                _p(
                    "sender-auth-wrong-agent",
                    f"sender authentication: the line says from={from_} but is signed with key {proof.key_id} of "
                    f"agent {proof.agent}",
                    "gate",
                    "from",
                    proof.agent,
                    from_,
                ),
            )
        return None

    def _signed_by(self, agent: str) -> bool:
        """Whether the record is signed by ``agent``'s key, or the route does not ask (``_invalid``'s tombstone)."""
        return not self.route.sender_auth or (self.sender is not None and self.sender.agent == agent)

    def _invalid(self, errors: Iterable[Problem], raw: dict[str, Any]) -> Decision:
        """An invalid line. It leaves a tombstone under its id when the id is well formed and its sender may use
        this route, so that replies to it are refused; otherwise nothing is remembered."""
        decision = self._dead(Reason.INVALID, *errors)
        rid, rfrom, rtype = raw.get("id"), raw.get("from"), raw.get("type")
        if (
            isinstance(rid, str)
            and isinstance(rfrom, str)
            and isinstance(rtype, str)
            and rid.isascii()
            and rid.startswith(f"{rfrom}-")
            and (number := id_number(rid)) is not None
            and number < RESERVED_ID_MIN
            and (self.route.senders is None or rfrom in self.route.senders)
            and self._signed_by(rfrom)
            and rid not in self.state.lines
        ):
            entry = LineEntry(
                digest=self.digest,
                type=rtype,
                verdict=Verdict.DEAD_LETTER.value,
                reason=Reason.INVALID.value,
                at=self.now,
                re=raw.get("re") if isinstance(raw.get("re"), str) else None,
                problems=decision.problems,
            )
            return Decision(
                verdict=decision.verdict,
                reason=decision.reason,
                problems=decision.problems,
                decided_at=self.now,
                effects=(RememberLine(rid, entry),),
            )
        return decision

    def _repeat(self, seen: LineEntry) -> Decision:
        verdict = Verdict(seen.verdict)
        msg = self.msg
        clears = None
        if msg is not None and msg.type == "AN" and verdict is not Verdict.DEAD_LETTER:
            clears = self._clears(msg)
        return Decision(
            verdict=verdict,
            reason=None if seen.reason is None else Reason(seen.reason),
            problems=seen.problems,
            message=msg,
            decided_at=seen.at,
            repeated=True,
            clears=clears,
        )

    def _clears(self, an: Message) -> tuple[str, str] | None:
        """The statement an affirmative answer clears: the digests of its readback and of that readback's handoff."""
        if str(an.slots.get("val")) not in AFFIRMATIVE:
            return None
        rb = self.state.readbacks.get(an.re or "")
        if rb is None:
            return None
        rb_line, ho_line = self.state.lines.get(rb.id), self.state.lines.get(rb.ho)
        if rb_line is None or ho_line is None:
            return None
        return (rb_line.digest, ho_line.digest)

    # ------------------------------------------------------------ HO

    def _on_HO(self, ho: Message) -> Decision:
        exp = ho.slots.get("exp")
        if _expired(exp, self.now_rw):
            return self._dead(
                Reason.EXPIRED,
                _p("expired-ho", f"expired: the HO expired at {exp} (now {self.now_rw})", "expiry", "exp", exp),
            )
        ask = str(ho.slots.get("ask"))
        item = ho.item or ""
        key = RecordKey(item, ask)
        exec_ask = bool(self.route.profile.exec_slots(ask))
        reissued = self._reissued(ho)
        if reissued is not None and (reissued.item, reissued.ask) != (item, ask):
            return self._dead(
                Reason.CHECK_THREAD,
                _p(
                    "thread-reissue-other-item",
                    f"HO {ho.id} re-issues {reissued.id} (re={ho.re}) for another item or ask: a re-issue carries "
                    f"item {reissued.item} ask {reissued.ask}",
                    "thread",
                    "item",
                    f"{reissued.item} {reissued.ask}",
                    f"{item} {ask}",
                ),
            )
        if exec_ask and ho.from_ == ho.to:
            return self._dead(
                Reason.CHECK_HO,
                _p(
                    "ho-self",
                    f"HO {ho.id}: an irreversible act ({ask}) is never handed by an agent to itself "
                    f"(from={ho.from_} to={ho.to}): separation of duties",
                    "record",
                    "to",
                    f"an agent other than {ho.from_}",
                    ho.to,
                ),
            )
        relayed = self._relayed(ho)
        if relayed is not None:
            return self._relay(ho, relayed, item, ask, exec_ask)
        record = self.records.record(key)
        if record is None and exec_ask:
            return self._dead(
                Reason.NO_RECORD,
                _p("no-record", f"no approved record for item {item} ask {ask}", "record", "item", None, item),
            )
        if record is not None and self.route.record_check is not None:
            unproven = self.route.record_check(record)  # the approver's signature (gatekeeper.approvals)
            if unproven is not None:
                return self._dead(Reason.NO_RECORD, unproven)
        notes: tuple[Problem, ...] = ()
        if record is not None:
            result = ho_check(ho, record.values, self.route.profile)
            if result.problems:
                return self._dead(Reason.CHECK_HO, *result.problems)
            notes = result.notes
        effects: list[Effect] = []
        supersedes = self._superseded_handoff(ho)
        holder: str | None = None
        if exec_ask:
            holder = holder_of(self.route.name, self.conversation or "", ho.id, self.digest, self.now)
            bound = self.records.binding(key)
            prior = supersedes if supersedes is not None and supersedes.bound else None
            prior_holder = None if prior is None else self._holder(prior)
            if bound is not None and bound != prior_holder:
                refused = self._bound_elsewhere(bound, holder, item, ask)
                if refused is not None:
                    return refused
                holder = bound  # this very handoff, redelivered after its binding landed and before its state did
            if prior is not None and prior_holder is not None:
                effects.append(Release(key, prior_holder, prior.id))
            effects.append(Bind(key, holder, ho.id))
        if ask == "UNDO":
            ctx = ho.slots.get("ctx") or ()
            ids = ctx if isinstance(ctx, tuple) else (ctx,)
            if not any(
                (e := self.state.lines.get(str(i))) is not None and e.type == "DN" and e.verdict != "dead-letter"
                for i in ids
            ):
                return self._dead(
                    Reason.CHECK_HO,
                    _p(
                        "undo-no-done",
                        "ask=UNDO: ctx= names no done report in this conversation",
                        "record",
                        "ctx",
                        None,
                        "+".join(str(i) for i in ids) or None,
                    ),
                )
        if supersedes is not None:
            effects.append(Supersede(supersedes.id, ho.id))
        entry = HandoffEntry(
            id=ho.id, item=item, ask=ask, exec_ask=exec_ask, record=record, bound=exec_ask, holder=holder
        )
        effects.insert(0, OpenHandoff(entry))
        return self._decision(Verdict.FORWARD, None, notes=notes, effects=effects, keep_text=True)

    def _bound_elsewhere(self, bound: str, holder: str, item: str, ask: str) -> Decision | None:
        """The refusal of a handoff whose approval is bound (``bound``) and not to the handoff it supersedes. None
        when ``bound`` is this very handoff (its identity: route, conversation, id, digest) bound less than the
        state's shortest retention ago: a redelivery whose binding landed and whose state write did not (a crash
        between the two on a Redis Cluster). Bound longer ago, its state is gone: this is a copy of a spent
        approval's handoff, decided as new only because the conversation forgot it; refused."""
        if holder_identity(bound) == holder_identity(holder):
            at = bound_at(bound)
            if at is not None and self.now - at < self.route.state_ttl_seconds:
                return None
            why = (
                f"the approval for item {item} ask {ask} was spent by this very handoff ({bound_handoff(bound)}), "
                "whose state is gone (kept for its retention, then expired): a copy is not a new approval; "
                "one approval, one act"
            )
        else:
            why = (
                f"the approval for item {item} ask {ask} is bound to another handoff ({bound_handoff(bound)}); "
                "one approval, one act"
            )
        return self._dead(Reason.RECORD_USED, _p("record-used", why, "record", "item", None, bound_handoff(bound)))

    def _holder(self, entry: HandoffEntry) -> str:
        """The binding value ``entry`` holds (bound by an earlier release: the value it wrote then)."""
        return entry.holder or legacy_holder(self.conversation or "", entry.id)

    def _relayed(self, ho: Message) -> HandoffEntry | None:
        """The handoff an HO relays (spec 5.3): ``re=`` names a handoff and the HO comes from its receiver."""
        line = self.state.lines.get(ho.re or "")
        target = self._target(ho)
        if line is None or line.type != "HO" or target is None:
            return None
        parties = target[1]
        if parties.get(Role.RECEIVER) != ho.from_ or parties.get(Role.SENDER) == ho.from_:
            return None
        return self.state.handoffs.get(ho.re or "")

    def _relay(self, ho: Message, of: HandoffEntry, item: str, ask: str, exec_ask: bool) -> Decision:
        """A relay: the handoff ``of`` forwarded by its receiver. Its slots stand as the record: every slot of the
        original but its envelope (``from``, ``to``, ``re``) and the per-hop ones (``rb``, ``exp``, ``p``, ``h``)
        must be carried unchanged, item and ask included; what the relay adds may be new. Only after the original's
        own readback passed and, for an exec ask, was cleared; only once (one approval, one act): a second relay is
        ``record-used``. The approval stays bound to the original; the relay's readback, clearance and done report
        are checked against the relay, as any handoff's."""
        original = self._message(of.id)
        problems: list[Problem] = []
        if not self._open(of):
            problems.append(_p("relay-closed", f"HO {ho.id} relays {of.id}, which is closed", "record", "re"))
        if of.passed_rb is None:
            problems.append(
                _p("relay-before-readback", f"HO {ho.id} relays {of.id} before its readback passed", "record", "re")
            )
        elif of.exec_ask and _asks_exec(original) and of.cleared_by is None:
            problems.append(
                _p("relay-not-cleared", f"HO {ho.id} relays {of.id} before its sender cleared it", "record", "re")
            )
        values = {k: _show(v) for k, v in original.slots.items() if k not in _PER_HOP}
        values.update(item=of.item, ask=of.ask)
        result = ho_check(ho, values, self.route.profile)
        problems.extend(result.problems)
        if problems:
            return self._dead(Reason.CHECK_HO, *problems)
        if of.relayed_by is not None:
            return self._dead(
                Reason.RECORD_USED,
                _p(
                    "record-used",
                    f"HO {ho.id}: {of.id} was already relayed by {of.relayed_by}; one approval, one act",
                    "record",
                    "re",
                    None,
                    of.relayed_by,
                ),
            )
        entry = HandoffEntry(id=ho.id, item=item, ask=ask, exec_ask=exec_ask, record=of.record, relay_of=of.id)
        return self._decision(
            Verdict.FORWARD,
            None,
            notes=result.notes,
            effects=(OpenHandoff(entry), Relay(of.id, ho.id)),
            keep_text=True,
        )

    def _reissued(self, ho: Message) -> HandoffEntry | None:
        """The handoff an HO re-issues: ``re=`` names it (or its readback) and the HO comes from its sender (the
        authority table let only its sender and its receiver, a relay, through)."""
        target = self._target(ho)
        if target is None or target[1].get(Role.SENDER) != ho.from_:
            return None
        line = self.state.lines.get(ho.re or "")
        if line is not None and line.type == "RB":
            rb = self.state.readbacks.get(ho.re or "")
            return None if rb is None else self.state.handoffs.get(rb.ho)
        return self.state.handoffs.get(ho.re or "")

    def _superseded_handoff(self, ho: Message) -> HandoffEntry | None:
        """The handoff a re-issue replaces: ``re=`` names a readback that failed (its handoff), or an open
        handoff of this conversation that has no passing readback (a re-send after no readback came). Only its
        sender re-issues it; a relay by its receiver replaces nothing."""
        if ho.re is None or self._reissued(ho) is None:
            return None
        target = self.state.lines.get(ho.re)
        if target is None:
            return None
        if target.type == "RB":
            rb = self.state.readbacks.get(ho.re)
            failed = target.verdict == Verdict.DEAD_LETTER.value or (rb is not None and not rb.passed)
            original = self.state.handoffs.get(rb.ho if rb is not None else (target.re or ""))
            if failed and original is not None and self._open(original):
                return original
            return None
        if target.type == "HO":
            original = self.state.handoffs.get(ho.re)
            if original is not None and self._open(original) and original.passed_rb is None:
                return original
        return None

    # ------------------------------------------------------------ RB

    def _on_RB(self, rb: Message) -> Decision:
        ho_entry = self.state.handoffs.get(rb.re or "")
        if ho_entry is None:
            return self._hold_or(
                Reason.UNKNOWN_HANDOFF,
                _p("unknown-handoff", f"RB {rb.id} re={rb.re}: no such handoff in this conversation", "receipt", "re"),
            )
        ho = self._message(ho_entry.id)
        problems: list[Problem] = []
        if not self._open(ho_entry):
            problems.append(
                _p("handoff-closed", f"RB {rb.id} reads back {ho_entry.id}, which is closed", "receipt", "re")
            )
        record = ho_entry.record
        result = rb_check(
            ho,
            rb,
            self.route.profile,
            expect_acc=None if record is None else record.expect_acc,
            now=self.now_rw,
        )
        problems.extend(result.problems)
        problems.extend(self._resolved_problems(ho, rb, record, "tier5 execution", "RB", "resolved"))
        notes = list(result.notes)
        comprehension = _rb_levels(ho) & _COMPREHENSION_LEVELS
        if comprehension and (record is None or record.expect_acc is None):
            unverified = _p(
                UNVERIFIED_COMPREHENSION,
                f"RB {rb.id}: {ho.id} asks rb={'+'.join(sorted(comprehension))}, and no withheld criteria "
                "(expect_acc) are on record: the comprehension was not verified",
                "tier4 comprehension",
                "acc",
            )
            if self.route.refuse_unverified_comprehension:
                problems.append(unverified)
            else:
                notes.append(unverified)
        exp = rb.slots.get("exp")
        entry = ReadbackEntry(id=rb.id, ho=ho_entry.id, passed=not problems, exp=str(exp) if exp else None)
        if problems:
            return self._dead(Reason.CHECK_RB, *problems, effects=(RecordReadback(entry),))
        return self._decision(
            Verdict.FORWARD,
            None,
            notes=notes,
            effects=(RecordReadback(entry), PassReadback(ho_entry.id, rb.id)),
            keep_text=True,
        )

    def _resolved_problems(
        self, ho: Message, reply: Message, record: Record | None, tier: str, what: str, code_tier: str
    ) -> list[Problem]:
        """The execution slots the receiver resolved itself (absent from the HO) against the record's ``resolved``.
        Fail closed: a resolved value the record does not hold cannot be verified, so it is refused."""
        exec_slots = self.route.profile.exec_slots(str(ho.slots.get("ask")))
        if not exec_slots or not _asks_exec(ho):
            return []
        resolved = {} if record is None else record.resolved
        problems = []
        for k in exec_slots:
            if k in ho.slots or k not in reply.slots:
                continue
            got = _show(reply.slots[k])
            want = resolved.get(k)
            if want is None:
                problems.append(
                    _p(
                        "resolved-unverified",
                        f"{tier}: {k}={got} was resolved by the receiver and the record holds no value to check it",
                        code_tier,
                        k,
                        None,
                        got,
                    )
                )
            elif want != got:
                problems.append(
                    _p(
                        "resolved-mismatch",
                        f"{tier}: {k} mismatch: record {want} vs {what} {got}",
                        code_tier,
                        k,
                        want,
                        got,
                    )
                )
        return problems

    # ------------------------------------------------------------ AN

    def _on_AN(self, an: Message) -> Decision:
        val = str(an.slots.get("val"))
        target = self.state.lines.get(an.re or "")
        affirmative = val in AFFIRMATIVE
        if target is None:
            reason = Reason.CLEARANCE if affirmative else Reason.UNKNOWN_HANDOFF
            return self._hold_or(
                reason,
                _p("unknown-reference", f"AN {an.id} re={an.re}: no such line in this conversation", "receipt", "re"),
            )
        if target.type == "CX":
            return self._acknowledge(an, affirmative)
        if target.type == "AQ":
            return self._answer(an, target)
        if target.type != "RB":
            return self._decision(Verdict.FORWARD, None)
        rb = self.state.readbacks.get(an.re or "")
        if not affirmative:
            if val in NEGATIVE and rb is not None:
                return self._decision(Verdict.FORWARD, None, effects=(RefuseReadback(rb.id),))
            return self._decision(Verdict.FORWARD, None)
        problems = self._clearance_problems(an, rb)
        if problems or rb is None:
            return self._dead(Reason.CLEARANCE, *problems)
        decision = self._decision(Verdict.FORWARD, None, effects=(Clear(rb.ho, rb.id),))
        return msgspec.structs.replace(decision, clears=self._clears(an))

    def _acknowledge(self, an: Message, affirmative: bool) -> Decision:
        """An answer to a cancel. The receiver's ``val=Y`` ends the handoff without the act: its record is free."""
        cx = self.state.lines[an.re or ""]
        ho_entry = self.state.handoffs.get(cx.re or "")
        effects: list[Effect] = []
        if affirmative and ho_entry is not None:  # from its receiver: the authority table saw to it
            effects = self._release(ho_entry)
        return self._decision(Verdict.FORWARD, None, effects=effects)

    def _clearance_problems(self, an: Message, rb: ReadbackEntry | None) -> list[Problem]:
        """Fail closed: an affirmative answer clears the act only for a readback that passed, was not refused,
        has not expired, and whose handoff is open and not cleared for another readback. (That it comes from the
        handoff's sender to its receiver is the authority table's rule.)"""
        if rb is None:
            return [_p("clearance-unknown", f"AN {an.id}: readback {an.re} is unknown", "clearance", "re")]
        problems = []
        ho_entry = self.state.handoffs.get(rb.ho)
        if not rb.passed:
            problems.append(_p("clearance-failed", f"readback {rb.id} did not pass its check", "clearance", "re"))
        if rb.refused:
            problems.append(
                _p("clearance-refused", f"readback {rb.id} was already answered negatively", "clearance", "re")
            )
        if rb.exp and _expired(rb.exp, self.now_rw):
            problems.append(
                _p(
                    "clearance-expired",
                    f"the statement {rb.id} expired at {rb.exp} (now {self.now_rw})",
                    "clearance",
                    "exp",
                    rb.exp,
                )
            )
        if ho_entry is None:
            problems.append(_p("clearance-unknown", f"the handoff of {rb.id} is unknown", "clearance", "re"))
            return problems
        ho = self._message(ho_entry.id)
        ho_exp = ho.slots.get("exp")
        if _expired(ho_exp, self.now_rw):
            problems.append(
                _p(
                    "clearance-expired",
                    f"the handoff {ho.id} expired at {ho_exp} (now {self.now_rw})",
                    "clearance",
                    "exp",
                    ho_exp,
                )
            )
        if not self._open(ho_entry):
            problems.append(
                _p("clearance-closed", f"the handoff {ho.id} is closed, cancelled or superseded", "clearance", "re")
            )
        if ho_entry.cleared_by is not None and ho_entry.cleared_by != rb.id:
            problems.append(  # one approval, one act: a second statement of the same handoff is never cleared
                _p(
                    "clearance-second-statement",
                    f"the handoff {ho.id} was already cleared for the statement {ho_entry.cleared_by}: one "
                    "clearance per handoff (answering the same readback again is allowed)",
                    "clearance",
                    "re",
                    ho_entry.cleared_by,
                    rb.id,
                )
            )
        return problems

    # ------------------------------------------------------------ DN, UN, FL

    def _on_DN(self, dn: Message) -> Decision:
        ho_entry = self.state.handoffs.get(dn.re or "")
        if ho_entry is None:
            return self._hold_or(
                Reason.UNKNOWN_HANDOFF,
                _p("unknown-handoff", f"DN {dn.id} re={dn.re}: no such handoff in this conversation", "receipt", "re"),
                verdict=Verdict.ALERT,
            )
        ho = self._message(ho_entry.id)
        plan_rb = self._plan_readback(ho_entry)
        result = dn_check(ho, dn, self.route.profile, plan_rb)
        problems = list(result.problems)
        if plan_rb is None:
            problems.extend(self._resolved_problems(ho, dn, ho_entry.record, "executed", "DN", "executed"))
        ran = dn.slots.get("out") != "NOOP"
        if ho_entry.exec_ask and _asks_exec(ho) and ran and ho_entry.cleared_by is None:
            problems.append(
                _p(
                    "done-not-cleared",
                    f"{dn.id} reports the act done, but no affirmative answer cleared a readback of {ho.id}",
                    "executed",
                    "out",
                )
            )
        ho_exp = ho.slots.get("exp")
        if ran and _expired(ho_exp, self.now_rw):
            problems.append(
                _p(
                    "acted-after-expiry",
                    f"{dn.id} reports the act of {ho.id} done at {self.now_rw}, after the handoff's exp={ho_exp} "
                    "(never act past exp=)",
                    "executed",
                    "exp",
                    ho_exp,
                    self.now_rw,
                )
            )
        levels = _rb_levels(ho) & _PLANNED_LEVELS
        if ran and levels and ho_entry.passed_rb is None:
            problems.append(
                _p(
                    "done-without-readback",
                    f"{dn.id} reports the act of {ho.id} done, but its rb={'+'.join(sorted(levels))} readback never "
                    "passed",
                    "executed",
                    "rb",
                )
            )
        problems.extend(self._thread_problems(dn))
        effects: list[Effect] = []
        if not ran:
            effects.extend(self._release(ho_entry))
        if problems:
            return self._decision(Verdict.ALERT, Reason.CHECK_DN, problems, result.notes, effects=effects)
        return self._decision(Verdict.FORWARD, None, notes=result.notes, effects=effects)

    def _on_UN(self, msg: Message) -> Decision:
        target = self.state.lines.get(msg.re or "")
        if target is not None and target.type == "AQ":
            return self._answer(msg, target)
        return self._close_without_act(msg)

    def _on_FL(self, msg: Message) -> Decision:
        return self._close_without_act(msg)

    def _close_without_act(self, msg: Message) -> Decision:
        ho_entry = self.state.handoffs.get(msg.re or "")
        if ho_entry is None:
            return self._hold_or(
                Reason.UNKNOWN_HANDOFF,
                _p(
                    "unknown-handoff",
                    f"{msg.type} {msg.id} re={msg.re}: no such handoff in this conversation",
                    "receipt",
                    "re",
                ),
                verdict=Verdict.ALERT,
            )
        problems = self._thread_problems(msg)
        effects = self._release(ho_entry)  # from its receiver: the authority table saw to it
        if problems:
            return self._decision(Verdict.ALERT, Reason.CHECK_THREAD, problems, effects=effects)
        return self._decision(Verdict.FORWARD, None, effects=effects)

    # ------------------------------------------------------------ CX

    def _on_CX(self, cx: Message) -> Decision:
        ho_entry = self.state.handoffs.get(cx.re or "")
        if ho_entry is None:
            return self._hold_or(
                Reason.CHECK_THREAD,
                _p("thread-cancel-no-handoff", f"CX {cx.id} re={cx.re} does not name an HO in this thread", "thread"),
            )
        return self._decision(Verdict.FORWARD, None)  # from its sender to its receiver: the authority table

    # ------------------------------------------------------------ AQ and its answers

    def _on_AQ(self, aq: Message) -> Decision:
        """A question: kept, so its answer can be checked against whom it asked and what it allows."""
        return self._decision(Verdict.FORWARD, None, keep_text=True)

    def _answer(self, msg: Message, target: LineEntry) -> Decision:
        """An AN or a UN to a question (the authority table saw that it comes from the one asked to the asker):
        once per question, and an AN's ``val`` within what the question allows."""
        if target.text is None:  # a question kept by an earlier release: nothing to check it against
            return self._decision(Verdict.FORWARD, None)
        aq = _stored_message(target.text, self.route)
        problems = []
        if target.answered is not None:
            problems.append(
                _p(
                    "thread-question-answered",
                    f"{msg.type} {msg.id}: question {aq.id} was already answered by {target.answered}",
                    "thread",
                    "re",
                    None,
                    target.answered,
                )
            )
        if msg.type == "AN":
            problems.extend(_answer_problems(msg, aq))
        if problems:
            return self._dead(Reason.CHECK_THREAD, *problems)
        return self._decision(Verdict.FORWARD, None, effects=(AnswerQuestion(aq.id, msg.id),))

    # ------------------------------------------------------------ ST

    def _on_ST(self, st: Message) -> Decision:
        problems = translation_check(st, self.route.profile)
        if problems:
            return self._dead(Reason.TRANSLATION, *problems)
        return self._decision(Verdict.FORWARD, None)

    # ------------------------------------------------------------ helpers

    def _message(self, line_id: str) -> Message:
        entry = self.state.lines[line_id]
        assert entry.text is not None, f"line {line_id} was not kept"
        return _stored_message(entry.text, self.route)

    def _open(self, entry: HandoffEntry) -> bool:
        if entry.superseded_by is not None:
            return False
        flags = self.state.tracker.flags(entry.id)
        return flags is None or not (flags[0] or flags[1])

    def _plan_readback(self, entry: HandoffEntry) -> Message | None:
        rb_id = entry.cleared_by or entry.passed_rb
        return None if rb_id is None else self._message(rb_id)

    def _thread_problems(self, msg: Message) -> list[Problem]:
        """What the thread tracker would raise if this line were fed: closed twice, done after a cancel."""
        return list(self.state.tracker.probe(msg, self.state.seq + 1))

    def _release(self, entry: HandoffEntry) -> list[Effect]:
        if not entry.bound:
            return []
        return [Release(RecordKey(entry.item, entry.ask), self._holder(entry), entry.id)]


def _asks_exec(ho: Message) -> bool:
    return "exec" in _rb_levels(ho)


def _rb_levels(ho: Message) -> frozenset[str]:
    rb = ho.slots.get("rb") or ()
    levels = rb if isinstance(rb, tuple) else (rb,)
    return frozenset(str(x).lower() for x in levels)


#: The readback levels whose comprehension tier checks the receiver's acc= against the sender's withheld criteria.
_COMPREHENSION_LEVELS = frozenset({"acc", "plan"})
#: The note on a comprehension readback forwarded with nothing on record to check it against (``gk.notes``).
UNVERIFIED_COMPREHENSION = "comprehension-unverified"
#: The slots a relay may set anew (its envelope and its own hop): every other slot of the handoff it relays is kept.
_PER_HOP = frozenset({"from", "to", "re", "rb", "exp", "p", "h"})
#: The readback levels that make a readback the plan of the act: a done report without one that passed is flagged.
_PLANNED_LEVELS = frozenset({"exec", "all", "acc", "plan"})


def _answer_problems(an: Message, aq: Message) -> list[Problem]:
    """An answer's ``val`` against its question's ``need`` (and ``opts``): the spec's answer shapes (native:
    ``engine::rules::answer_wants``)."""
    opts = aq.slots.get("opts") or ()
    allowed = [str(o) for o in (opts if isinstance(opts, tuple) else (opts,))]
    need = str(aq.slots.get("need") or "")
    return native_problems(_native.answer_problems(an.id, aq.id, need, _show(an.slots.get("val")), allowed, an.tail))


def _show(v: object) -> str:
    if isinstance(v, tuple):
        return "+".join(str(x) for x in v)
    if isinstance(v, bool):
        return "Y" if v else "N"
    return str(v)


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
    return _Decider(raw, conversation, state, records, route, now, first_seen, replay, prepared, sender).decide()
