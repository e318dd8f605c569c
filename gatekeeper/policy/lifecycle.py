"""The handoff lifecycle, pure: every handoff closes exactly once (spec 5.4), and the gatekeeper closes the ones
whose time ran out.

Sans-I/O like the rest of ``gatekeeper.policy``: a conversation's state, the route and a time in; deadlines,
decisions and problems out. ``gatekeeper.sweeper`` is the I/O around it (the deadline index in Redis, publishing
the cancel and the alerts, exactly once).

**Deadlines** of a forwarded handoff that is still open (no DN, UN or FL from its receiver, no acknowledged CX, not
superseded by a re-issue), ``deadlines_of``:

- ``exp``: from ``exp=`` (``YYYYMMDDTHHMMZ``, UTC). Overdue from that minute on, exactly when the reference
  ``check_thread`` starts calling it orphaned (``now >= exp``, compared as text). A value the parser lets through
  that is not a real minute (``T0960Z``) is overdue from the first real minute that sorts at or after it.
- ``due``: from ``due=`` (``YYYYMMDD``). Overdue from the start of the next day, UTC (``now[:8] > due``).
- ``readback``: ``RoutePolicy.readback_timeout_seconds`` after the gatekeeper forwarded it, while no readback has
  passed and nothing cancelled it. Off by default (the protocol also lets the sender re-send instead).

**What happens when one passes** (``overdue``: the earliest deadline that passed and was not acted on yet):

==============================================  =========================================  ====================
the handoff                                     the gatekeeper                             alert
==============================================  =========================================  ====================
readback deadline, not cancelled                a CX ``why=TIMEOUT`` (``expire``)          none: not orphaned
exp/due, not cancelled, act not cleared         a CX ``why=EXPIRED`` (``expire``)          ``thread-orphaned``
exp/due, act cleared (an affirmative answer)    no CX: the act may be running              ``cleared-not-done``
exp/due, cancelled already, not acknowledged    no second CX                               ``thread-orphaned``
==============================================  =========================================  ====================

Each deadline is acted on once: the cancel is recorded (``GatekeeperCancel``), the expiry too (``MarkOverdue``),
and neither is pending after that. The gatekeeper's CX then belongs to the thread like a forwarded CX: remembered
under its id (so the receiver's ``AN re=<CX id> val=Y`` closes the handoff and frees its exec record binding) and
fed to the thread tracker (so a later DN that says the act ran is ``thread-done-after-cancel``, alerted at the
line by ``decide``).

**The CX** (``cancel_line``): ``from`` the handoff's sender, ``to`` its receiver, ``re=`` the handoff, its
``item``, ``why=EXPIRED`` or ``why=TIMEOUT``, ``p=`` the route's profile (none on a core-vocabulary route), and a
tail naming the deadline. Its id is ``<sender>-<n>`` with ``n = RESERVED_ID_MIN + line`` where ``line`` is the
handoff's line number in the conversation (``HandoffView.line_no``): inside the range 900000000-999999999 the
gatekeeper keeps for its own lines (an agent line using it is dead-lettered ``reserved-id``), in its cancels' part
(up to ``CANCEL_ID_MAX``, 949999999; the rest is its refusal notices', ``gatekeeper.notices``), unique per handoff,
and the same every time. The whole line is a function of the state and the route only, never of the clock, so a
cancel built again after a crash is byte for byte the one built before.

**Questions** (spec rule 2, an AQ always gets an AN): a delivered ``AQ`` with ``by=`` has a deadline
(``question_deadline``: a date as ``due=``, from the start of the next day; a time as ``exp=``) until an AN, or a UN
from the one asked, answers it (``AnswerQuestion``). Past it, ``unanswered`` raises ``unanswered-question`` once
(``MarkUnanswered`` on the question's line entry). A question kept without its text (an earlier release) has none.
Its index entry is under the question's id, in the deadline index only.

**Deliberate differences** from ``check_thread`` (each pinned by a test):

- a handoff superseded by a re-issue (``HandoffEntry.superseded_by``) is closed, never orphaned;
- a handoff whose act was cleared is not cancelled at its deadline but alerted ``cleared-not-done`` (where
  ``check_thread`` says ``thread-orphaned``: it is the same handoff, open past its time);
- the readback deadline is the gatekeeper's own; its CX is an ordinary cancel in the thread;
- a cancel from the wrong agent, or naming no handoff, is refused at the line (dead-lettered), so it never cancels.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator

import msgspec

from gatekeeper.policy.decide import line_digest, rw_time
from gatekeeper.policy.model import (
    RESERVED_ID_MAX,
    RESERVED_ID_MIN,
    Decision,
    Effect,
    FeedThread,
    GatekeeperCancel,
    MarkOverdue,
    MarkUnanswered,
    Reason,
    RememberLine,
    RoutePolicy,
    Verdict,
)
from gatekeeper.policy.state import ConversationState, HandoffEntry, LineEntry
from rwcore import HandoffView, Message, Problem, _native, encode_message, parse_line

EXPIRED = "EXPIRED"
TIMEOUT = "TIMEOUT"
ORPHANED = "thread-orphaned"
CLEARED_NOT_DONE = "cleared-not-done"
UNANSWERED = "unanswered-question"

#: What the gatekeeper says in the tail of its own cancels (kept short: a tail holds 300 characters).
_BEHALF = "cancelled by the gatekeeper on the sender's behalf"


class LifecycleError(ValueError):
    """A lifecycle operation named a handoff that is not open in the state (a bug in the caller)."""


class DeadlineKind(enum.StrEnum):
    EXP = "exp"
    DUE = "due"
    READBACK = "readback"

    @property
    def why(self) -> str:
        """The ``why=`` of the gatekeeper's cancel at this deadline."""
        return TIMEOUT if self is DeadlineKind.READBACK else EXPIRED


_ORDER = {DeadlineKind.EXP: 0, DeadlineKind.DUE: 1, DeadlineKind.READBACK: 2}


class Deadline(msgspec.Struct, frozen=True, gc=False):
    """One deadline of one handoff: overdue from ``at`` (epoch seconds) on. ``value`` is the slot's value as
    written (``exp=``, ``due=``), or the readback timeout (``300s``)."""

    ho: str
    kind: DeadlineKind
    at: float
    value: str

    @property
    def why(self) -> str:
        return self.kind.why

    def describe(self) -> str:
        if self.kind is DeadlineKind.READBACK:
            return f"no passing readback within {self.value}"
        return f"{self.kind.value}={self.value} passed"


class Action(enum.StrEnum):
    CANCEL = "cancel"  # write a CX on the sender's behalf (expire)
    CLEARED_NOT_DONE = "cleared-not-done"  # the act was cleared: alert, never cancel
    ORPHANED = "orphaned"  # cancelled already, still not closed: alert only


class Overdue(msgspec.Struct, frozen=True, gc=False):
    """A deadline that passed, and what the gatekeeper does about it."""

    deadline: Deadline
    action: Action

    @property
    def ho(self) -> str:
        return self.deadline.ho

    @property
    def why(self) -> str:
        return self.deadline.why

    @property
    def alert(self) -> str | None:
        """The alert this raises: ``thread-orphaned`` or ``cleared-not-done`` at an expiry, none at a readback
        deadline (a handoff in time with no readback is not orphaned)."""
        if self.deadline.kind is DeadlineKind.READBACK:
            return None
        return CLEARED_NOT_DONE if self.action is Action.CLEARED_NOT_DONE else ORPHANED


class IndexEntry(msgspec.Struct, frozen=True, gc=False):
    """One handoff's place in the deadline indexes the store keeps (see ``gatekeeper.redis_store``).

    ``open``: the handoff is open (in the open index, by ``opened_at``); ``due_at``: its earliest pending deadline
    (in the deadline index; None: not there); ``lapsed_at``: when the gatekeeper acted on its time running out (in
    the lapsed index, kept after it closes). A closed handoff's entry has ``open=False``: it leaves the open and
    deadline indexes. ``partition`` is the input partition of the conversation: the indexes are bucketed by it.

    A question (``AQ``) has an entry too, under its own id in ``ho``: never open, in the deadline index while its
    ``by=`` is pending (``question_deadline``), out of it once answered or alerted.
    """

    partition: int
    conversation: str
    ho: str
    open: bool
    opened_at: float | None = None
    due_at: float | None = None
    lapsed_at: float | None = None


# ---------------------------------------------------------------- time


# The calendar arithmetic is the engine's (native/engine/src/lifecycle.rs): the batch computes the index entries
# there, and the sweeper and the commands read the same deadlines through these.


def exp_deadline(exp: str | None) -> float | None:
    """When a handoff with this ``exp=`` becomes overdue: the first minute whose ``YYYYMMDDTHHMMZ`` sorts at or after
    it (the value itself when it is a real minute). None when the value is not a time (it never expires, as in the
    reference). Past the calendar's end (year 9999): infinity; before its start: 0."""
    return None if exp is None else _native.exp_deadline(exp)


def due_deadline(due: str | None) -> float | None:
    """When a handoff with this ``due=`` becomes overdue: the start (UTC) of the first day whose ``YYYYMMDD`` sorts
    after it, i.e. the day after a real date. None when the value is not a date."""
    return None if due is None else _native.due_deadline(due)


# ---------------------------------------------------------------- deadlines


def _live(state: ConversationState) -> Iterator[tuple[HandoffEntry, HandoffView]]:
    """The forwarded handoffs that are open: not closed or acknowledged-cancelled (the tracker), not superseded."""
    for ho in state.native.live_handoffs():
        view = state.tracker.handoff(ho)
        if view is not None:
            yield state.handoffs[ho], view


def _live_one(state: ConversationState, ho: str) -> tuple[HandoffEntry, HandoffView] | None:
    entry = state.handoffs.get(ho)
    view = state.tracker.handoff(ho)
    if entry is None or view is None or view.closed or entry.superseded_by is not None:
        return None
    return entry, view


def opened_at(state: ConversationState, ho: str) -> float | None:
    """When the gatekeeper forwarded the handoff (the time of its first decision)."""
    line = state.lines.get(ho)
    return None if line is None else line.at


def _deadlines(
    state: ConversationState,
    entry: HandoffEntry,
    view: HandoffView,
    readback_timeout: float | None,
    *,
    pending_only: bool = True,
) -> list[Deadline]:
    found = state.native.deadlines(entry.id, readback_timeout, pending_only) or []
    timeout = f"{readback_timeout:g}s" if readback_timeout else ""
    return [Deadline(entry.id, DeadlineKind(kind), at, value or timeout) for kind, at, value in found]


def deadlines_of(
    state: ConversationState, readback_timeout: float | None = None, *, ho: str | None = None
) -> list[Deadline]:
    """The pending deadlines (exp, due, readback) of every forwarded, still-open handoff of the conversation (or of
    ``ho`` only), earliest first. A deadline the gatekeeper already acted on is not pending."""
    if ho is not None:
        one = _live_one(state, ho)
        return [] if one is None else _deadlines(state, *one, readback_timeout)
    out = [d for entry, view in _live(state) for d in _deadlines(state, entry, view, readback_timeout)]
    out.sort(key=lambda d: (d.at, _ORDER[d.kind]))
    return out


def all_deadlines(state: ConversationState, ho: str, readback_timeout: float | None = None) -> list[Deadline]:
    """Every deadline the handoff has or had, pending or not, open or not (``gatekeeper handoffs show``)."""
    entry = state.handoffs.get(ho)
    view = state.tracker.handoff(ho)
    if entry is None or view is None:
        return []
    return _deadlines(state, entry, view, readback_timeout, pending_only=False)


def overdue(state: ConversationState, ho: str, now: float, readback_timeout: float | None = None) -> Overdue | None:
    """What is due for ``ho`` at ``now``: its earliest pending deadline that passed, with the action (see the
    module docstring), or None. Act on it and apply the decision, then ask again: a readback deadline and an
    expiry may both have passed (at most two rounds)."""
    one = _live_one(state, ho)
    if one is None:
        return None
    entry, view = one
    passed = [d for d in _deadlines(state, entry, view, readback_timeout) if d.at <= now]
    if not passed:
        return None
    first = passed[0]
    if first.kind is DeadlineKind.READBACK:
        return Overdue(first, Action.CANCEL)
    if view.cancelled:
        return Overdue(first, Action.ORPHANED)
    if entry.cleared_by is not None:
        return Overdue(first, Action.CLEARED_NOT_DONE)
    return Overdue(first, Action.CANCEL)


def overdue_all(state: ConversationState, now: float, readback_timeout: float | None = None) -> list[Overdue]:
    """``overdue`` for every open handoff of the conversation that has something due, in line order."""
    out = []
    for entry, _view in list(_live(state)):
        o = overdue(state, entry.id, now, readback_timeout)
        if o is not None:
            out.append(o)
    return out


def orphans(state: ConversationState) -> list[str]:
    """The handoffs the gatekeeper holds orphaned now: their expiry passed while they were open (an alert was raised)
    and they are still not closed. What ``check_thread`` reports as ``thread-orphaned`` at the time of the last
    sweep, the cleared-not-done ones included."""
    return [entry.id for entry, _ in _live(state) if entry.overdue is not None]


# ---------------------------------------------------------------- the gatekeeper's cancel


#: The gatekeeper's reserved range (``RESERVED_ID_MIN``-``RESERVED_ID_MAX``) is shared by its two kinds of line: its
#: cancels take ``RESERVED_ID_MIN + line number`` up to ``CANCEL_ID_MAX`` (a conversation of 49,999,999 lines), its
#: refusal notices (``gatekeeper.notices``) the numbers from ``NOTICE_ID_MIN`` on, so the two never share an id.
NOTICE_ID_MIN: int = _native.NOTICE_ID_MIN  # the notices' line is written natively (``engine::notices``)
CANCEL_ID_MAX = NOTICE_ID_MIN - 1
assert RESERVED_ID_MIN < CANCEL_ID_MAX < NOTICE_ID_MIN <= RESERVED_ID_MAX


def cancel_id(sender: str, line_no: int) -> str:
    """The id of the gatekeeper's cancel of the handoff at ``line_no``: ``<sender>-<RESERVED_ID_MIN + line_no>``, in
    the cancels' part of the reserved range (never a notice's)."""
    n = RESERVED_ID_MIN + line_no
    if not RESERVED_ID_MIN < n <= CANCEL_ID_MAX:
        raise LifecycleError(f"line {line_no} is beyond the gatekeeper's id range")
    return f"{sender}-{n}"


def _cancel_deadline(
    state: ConversationState, entry: HandoffEntry, view: HandoffView, why: str, rt: float | None
) -> Deadline | None:
    """The deadline a cancel with ``why`` answers: the readback's, or the earliest of exp and due."""
    kinds = (DeadlineKind.READBACK,) if why == TIMEOUT else (DeadlineKind.EXP, DeadlineKind.DUE)
    found = [d for d in _deadlines(state, entry, view, rt, pending_only=False) if d.kind in kinds]
    return found[0] if found else None


def cancel_line(state: ConversationState, ho: str, why: str, route: RoutePolicy) -> str:
    """The CX the gatekeeper writes for ``ho`` (see the module docstring): a valid line under the route's profile,
    the same every time for the same state and route. Raises ``LifecycleError`` when ``ho`` is not open."""
    if why not in (EXPIRED, TIMEOUT):
        raise LifecycleError(f"why={why}: the gatekeeper cancels with EXPIRED or TIMEOUT only")
    one = _live_one(state, ho)
    if one is None:
        raise LifecycleError(f"handoff {ho} is not open in this conversation")
    entry, view = one
    deadline = _cancel_deadline(state, entry, view, why, route.readback_timeout_seconds)
    reason = "its time ran out" if deadline is None else deadline.describe()
    tail = f"{reason}; {_BEHALF}"
    slots: dict[str, str] = {"why": why}
    if route.profile.declared is not None:
        slots["p"] = route.profile.name
    msg = Message(
        v="RW1",
        type="CX",
        id=cancel_id(view.sender, view.line_no),
        from_=view.sender,
        to=view.receiver,
        re=ho,
        item=view.item,
        slots=slots,
        tail=tail,
    )
    return encode_message(msg, route.profile)


def _problem_in_report(state: ConversationState, ho: str, now: float) -> Problem | None:
    """The ``thread-orphaned`` problem ``check_thread`` words for ``ho`` at ``now``, if it reports one."""
    for p in state.tracker.report(rw_time(now)).problems:
        if p.code == ORPHANED and p.message.startswith(f"{ho}: "):
            return p
    return None


def overdue_problem(state: ConversationState, o: Overdue, now: float) -> Problem | None:
    """The problem an overdue handoff is alerted with: ``thread-orphaned`` as ``check_thread`` words it, or
    ``cleared-not-done``; None at a readback deadline."""
    if o.alert is None:
        return None
    d = o.deadline
    if o.alert == CLEARED_NOT_DONE:
        entry = state.handoffs[o.ho]
        return Problem(
            code=CLEARED_NOT_DONE,
            message=(
                f"{o.ho}: open past {d.kind.value}={d.value} after its act was cleared ({entry.cleared_by}); "
                "not cancelled, the act may be running: ask the receiver for its DN"
            ),
            tier="thread",
            slot=d.kind.value,
            expected=f"closed by {d.value}",
            got=rw_time(now),
        )
    found = _problem_in_report(state, o.ho, max(now, d.at))
    if found is not None:
        return found
    return Problem(
        code=ORPHANED,
        message=(
            f"{o.ho}: orphaned, open past {d.kind.value}={d.value} with no DN, UN, FL or acknowledged CX; "
            "close it or cancel it"
        ),
        tier="thread",
        slot=d.kind.value,
        expected=f"closed by {d.value}",
        got=rw_time(now),
    )


def record_cancel(state: ConversationState, ho: str, line: str, now: float, route: RoutePolicy) -> Decision:
    """The decision that records the gatekeeper's cancel ``line`` of ``ho`` (built by ``cancel_line``, now or before a
    crash): the CX remembered under its id and fed to the thread, the cancel noted on the handoff and, for an
    ``EXPIRED`` cancel, the expiry acted on (with the ``thread-orphaned`` problem). Apply it with ``apply``."""
    parsed = parse_line(line, route.profile)
    msg = parsed.message
    if msg is None or parsed.errors or msg.type != "CX" or msg.re != ho:
        raise LifecycleError(f"not a cancel of {ho}: {line!r}")
    one = _live_one(state, ho)
    if one is None:
        raise LifecycleError(f"handoff {ho} is not open in this conversation")
    why = str(msg.slots.get("why"))
    problems: tuple[Problem, ...] = ()
    effects: list[Effect] = [
        RememberLine(
            msg.id,
            LineEntry(
                digest=line_digest(line.encode("utf-8")),
                type="CX",
                verdict=Verdict.FORWARD.value,
                reason=None,
                at=now,
                re=ho,
                text=line,
            ),
        ),
        FeedThread(msg),
        GatekeeperCancel(ho, msg.id, why, now),
    ]
    if why == EXPIRED:
        deadline = _cancel_deadline(state, *one, why, route.readback_timeout_seconds)
        if deadline is not None:
            problem = overdue_problem(state, Overdue(deadline, Action.CANCEL), now)
            problems = () if problem is None else (problem,)
        effects.append(MarkOverdue(ho, ORPHANED, now))
    return Decision(
        verdict=Verdict.ALERT if problems else Verdict.FORWARD,
        reason=Reason.CHECK_THREAD if problems else None,
        problems=problems,
        message=msg,
        decided_at=now,
        effects=tuple(effects),
    )


def expire(state: ConversationState, ho: str, why: str, now: float, route: RoutePolicy) -> tuple[str, Decision]:
    """Cancel ``ho`` on its sender's behalf: the CX line (``cancel_line``) and the decision that records it
    (``record_cancel``). Nothing changes until the decision is applied."""
    line = cancel_line(state, ho, why, route)
    return line, record_cancel(state, ho, line, now, route)


def mark_overdue(state: ConversationState, o: Overdue, now: float) -> Decision:
    """The decision for an expiry the gatekeeper does not cancel (``ORPHANED``: cancelled already;
    ``CLEARED_NOT_DONE``: the act may be running): the alert's problem, and the expiry marked as acted on."""
    if o.alert is None or o.action is Action.CANCEL:
        raise LifecycleError(f"{o.ho}: {o.action} at {o.deadline.kind} is not an alert-only expiry")
    problem = overdue_problem(state, o, now)
    return Decision(
        verdict=Verdict.ALERT,
        reason=Reason.CHECK_THREAD,
        problems=() if problem is None else (problem,),
        decided_at=now,
        effects=(MarkOverdue(o.ho, o.alert, now),),
    )


# ---------------------------------------------------------------- questions


class QuestionDeadline(msgspec.Struct, frozen=True, gc=False):
    """A question's ``by=`` (``value`` as written): overdue from ``at`` (epoch seconds) on."""

    aq: str
    at: float
    value: str


def by_deadline(by: str | None) -> float | None:
    """When a question with this ``by=`` is overdue: a time (``YYYYMMDDTHHMMZ``) as ``exp=`` (from that minute on),
    a date (``YYYYMMDD``) as ``due=`` (from the start of the next day, UTC). None when it is neither."""
    return None if by is None else _native.by_deadline(by)


def question_deadline(state: ConversationState, aq: str) -> QuestionDeadline | None:
    """The pending deadline of the question ``aq``: a delivered ``AQ`` with a ``by=`` (read from its kept line's
    slots, before the tail), not answered (an AN, or a UN from the one asked, accepted by ``decide``) and not
    alerted yet. None otherwise, and for a question kept by an earlier release without its text (no ``by=`` to
    read)."""
    found = state.native.question_deadline(aq)
    return None if found is None else QuestionDeadline(aq, found[0], found[1])


def unanswered(state: ConversationState, aq: str, now: float) -> Decision | None:
    """What is due for the question ``aq`` at ``now``: past its ``by=`` and still unanswered, the decision that raises
    ``unanswered-question`` (its problem, and ``MarkUnanswered``: raised once); else None."""
    d = question_deadline(state, aq)
    if d is None or d.at > now:
        return None
    line = state.lines[aq]
    assert line.text is not None
    msg = parse_line(line.text).message
    who = "" if msg is None else f" from {msg.from_} to {msg.to}"
    problem = Problem(
        code=UNANSWERED,
        message=f"{aq}: question{who} unanswered past by={d.value}: an AQ always gets an AN (or a UN)",
        tier="thread",
        slot="by",
        expected=f"answered by {d.value}",
        got=rw_time(now),
    )
    return Decision(
        verdict=Verdict.ALERT,
        reason=Reason.CHECK_THREAD,
        problems=(problem,),
        message=msg,
        decided_at=now,
        effects=(MarkUnanswered(aq, now),),
    )


# ---------------------------------------------------------------- the indexes


def _index_entry(
    state: ConversationState, conversation: str, partition: int, ho: str, readback_timeout: float | None
) -> IndexEntry | None:
    found = state.native.index_entry(ho, readback_timeout)
    if found is None:
        return None
    is_open, opened, due_at, lapsed_at = found
    return IndexEntry(partition, conversation, ho, is_open, opened, due_at, lapsed_at)


def index_entries(
    state: ConversationState, conversation: str, partition: int, readback_timeout: float | None = None
) -> dict[str, IndexEntry]:
    """The index entries of the open handoffs the state holds (those a batch loaded: its lines' handoffs, never the
    whole conversation), by handoff id, and of the questions it holds (by the question's id: in the deadline index
    while its ``by=`` is pending, out of it otherwise)."""
    out: dict[str, IndexEntry] = {}
    for entry, _view in _live(state):
        e = _index_entry(state, conversation, partition, entry.id, readback_timeout)
        if e is not None:
            out[entry.id] = e
    for line_id, line in state.lines.items():  # the loaded questions: pending ones in, the others out
        if line.type == "AQ" and line_id not in out:
            e = _index_entry(state, conversation, partition, line_id, readback_timeout)
            if e is not None:
                out[line_id] = e
    return out


def index_of(
    state: ConversationState,
    conversation: str,
    partition: int,
    handoffs: Iterable[str],
    readback_timeout: float | None = None,
) -> list[IndexEntry]:
    """The index entries of these handoffs as the state has them now: open ones with their next deadline, closed
    (or superseded) ones as closed entries, which leave the open and deadline indexes. Unknown ids are skipped."""
    out = []
    for ho in sorted(set(handoffs)):
        e = _index_entry(state, conversation, partition, ho, readback_timeout)
        if e is not None:
            out.append(e)
    return out


__all__ = [
    "CANCEL_ID_MAX",
    "CLEARED_NOT_DONE",
    "EXPIRED",
    "NOTICE_ID_MIN",
    "ORPHANED",
    "TIMEOUT",
    "UNANSWERED",
    "Action",
    "Deadline",
    "DeadlineKind",
    "IndexEntry",
    "LifecycleError",
    "Overdue",
    "QuestionDeadline",
    "all_deadlines",
    "by_deadline",
    "cancel_id",
    "cancel_line",
    "deadlines_of",
    "due_deadline",
    "exp_deadline",
    "expire",
    "index_entries",
    "index_of",
    "mark_overdue",
    "opened_at",
    "orphans",
    "overdue",
    "overdue_all",
    "overdue_problem",
    "question_deadline",
    "record_cancel",
    "unanswered",
]
