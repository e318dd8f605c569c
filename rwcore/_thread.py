"""Every handoff closes (spec 5.4), as an incremental state machine.

``ThreadTracker`` is fed a conversation one decoded line at a time, in the order it was sent, and keeps only what
the closing rule needs: one record per HO, plus the indexes that let each reply find its handoff by id. A line costs
O(1) amortised (dict lookups by id; the thread is never rescanned), so a daemon can keep a tracker per conversation
and feed it forever. ``report(now)`` renders the whole thread's verdict in O(handoffs + cancels + invalid lines) and
returns exactly what the reference ``check_thread`` returns over the same lines at the same ``now``: the same
strings, in the same order, as typed ``Problem`` values with stable codes.

The rules, as the reference applies them (``line n`` is the line's 1-based number, blank and ``#`` lines counted):

- A DN, UN or FL whose ``re=`` names an HO that came before it, and which comes from that HO's receiver, closes it.
  More than one close is a problem (``thread-closed-twice``).
- A CX whose ``re=`` names an earlier HO cancels it, whoever sent it; one not from the HO's sender to its receiver is
  a problem (``thread-cancel-wrong-agent``). A cancel is acknowledged by a later ``AN val=Y`` whose ``re=`` is the
  CX's id and which comes from the HO's receiver; an acknowledged cancel closes the HO.
- A DN from the receiver after the HO's first CX with ``out`` other than ``NOOP`` reports an act done after the
  cancel (``thread-done-after-cancel``, the first such DN only). A cancelled HO neither closed nor acknowledged is a
  note (``thread-cancel-unacked``).
- An HO neither closed nor acknowledged is orphaned when ``now >= exp`` (both ``YYYYMMDDTHHMMZ``, compared as
  strings) or ``now[:8] > due`` (``thread-orphaned``), else it is a note (``thread-open``).
- A CX whose ``re=`` does not name an HO anywhere in the thread (a later HO counts; the id's last valid line must be
  an HO) is a problem (``thread-cancel-no-handoff``). This one depends on lines still to come, so ``feed`` never
  raises it; only ``report`` does.
- A line that does not parse is a problem (``thread-invalid-line``): ``line n: `` and its errors joined by ``; ``.

Problems come out in the reference's order: invalid lines first, then per HO in line order (wrong-agent cancels,
closed twice, done after cancel, orphaned), then cancels naming no HO. Notes per HO in line order.

Replies only count for HOs fed before them: lines fed out of the order they were sent give the verdict the reference
gives for that order. Line numbers must increase strictly (``feed`` defaults to the previous line number plus one).
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import replace as _replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from rwcore._errors import CodeInfo
from rwcore._types import CheckResult, Message, Problem

if TYPE_CHECKING:
    from rwcore._profiles import Profile

__all__ = ["STATE_VERSION", "THREAD_CODES", "HandoffView", "ThreadTracker", "check_thread", "now_utc", "thread_check"]

#: The version of ``ThreadTracker.to_state``'s format. ``from_state`` refuses any other.
STATE_VERSION = 1

CLOSERS = frozenset({"DN", "UN", "FL"})

# exp= values are YYYYMMDDTHHMMZ; one that is not never expires (the reference matches with re.match and $).
_TIME_RE = re.compile(r"^\d{8}T\d{4}Z$")

_TIER = "thread"

#: Every code the closing rule puts in a Problem (tier ``thread``), for ``rwcore.PROBLEM_CODES``.
THREAD_CODES: Mapping[str, CodeInfo] = MappingProxyType(
    {
        "thread-invalid-line": CodeInfo(_TIER, "problem", "a line of the conversation does not parse"),
        "thread-cancel-wrong-agent": CodeInfo(_TIER, "problem", "a CX not from the HO's sender to its receiver"),
        "thread-closed-twice": CodeInfo(_TIER, "problem", "an HO closed by more than one DN, UN or FL"),
        "thread-done-after-cancel": CodeInfo(_TIER, "problem", "a DN reports the act done after the HO's first CX"),
        "thread-orphaned": CodeInfo(_TIER, "problem", "an HO still open past its exp= or its due= date"),
        "thread-cancel-no-handoff": CodeInfo(_TIER, "problem", "a CX whose re= names no HO in the thread"),
        "thread-cancel-unacked": CodeInfo(_TIER, "note", "a CX the receiver has not acknowledged with AN val=Y"),
        "thread-open": CodeInfo(_TIER, "note", "an HO open and in time"),
    }
)


def now_utc() -> str:
    """The current UTC time as an ``exp=`` value, ``YYYYMMDDTHHMMZ``."""
    return _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%MZ")


def _expired(exp: str | None, now: str) -> bool:
    return bool(exp) and exp is not None and _TIME_RE.match(exp) is not None and now >= exp


def _opt_str(v: Any) -> str | None:
    """A slot value as the reference formats it (``f"{v}"``), or None when the reference treats it as absent."""
    return str(v) if v else None


@dataclass(slots=True)
class _Handoff:
    """The tracker's own mutable record of one HO (never handed out; ``HandoffView`` is the frozen copy)."""

    idx: int  # position in the tracker's list of HOs
    line_no: int
    id: str
    sender: str
    receiver: str
    item: str | None
    exp: str | None
    due: str | None
    # tuples, not lists: most HOs get one close and no cancel, and the shared empty tuple costs no allocation
    closes: tuple[tuple[str, str], ...] = ()  # (type, id) of each DN/UN/FL from the receiver, in order
    cancels: tuple[str, ...] = ()  # ids of each CX naming it, in order
    wrong: tuple[tuple[int, str, str, str], ...] = ()  # (line, CX id, from, to) of each CX not sender -> receiver
    acked: bool = False  # some cancel was acknowledged with AN val=Y from the receiver
    ran: tuple[str, str] | None = None  # (DN id, out) of the first DN after the first CX with out != NOOP

    @property
    def closed(self) -> bool:
        return bool(self.closes) or self.acked


@dataclass(frozen=True, slots=True)
class HandoffView:
    """One handoff as the tracker sees it now.

    ``closes`` lists the DN/UN/FL from the receiver as ``(type, id)``; ``cancels`` the ids of the CX naming it.
    ``closed`` is true once it is closed or a cancel was acknowledged; ``cancelled`` once any CX named it;
    ``done_after_cancel`` once a DN after the first CX reported the act done (``out`` other than ``NOOP``).
    """

    id: str
    sender: str
    receiver: str
    item: str | None
    exp: str | None
    due: str | None
    line_no: int
    closes: tuple[tuple[str, str], ...]
    cancels: tuple[str, ...]
    acked: bool
    closed: bool
    cancelled: bool
    done_after_cancel: bool


def _view(h: _Handoff) -> HandoffView:
    return HandoffView(
        id=h.id,
        sender=h.sender,
        receiver=h.receiver,
        item=h.item,
        exp=h.exp,
        due=h.due,
        line_no=h.line_no,
        closes=h.closes,
        cancels=h.cancels,
        acked=h.acked,
        closed=h.closed,
        cancelled=bool(h.cancels),
        done_after_cancel=h.ran is not None,
    )


# ---------------------------------------------------------------- problems, worded as the reference words them


def _p_invalid(line_no: int, errors: Sequence[Problem | str]) -> Problem:
    text = "; ".join(e.message if isinstance(e, Problem) else str(e) for e in errors)
    return Problem(code="thread-invalid-line", message=f"line {line_no}: {text}", tier=_TIER)


def _p_wrong_agent(h: _Handoff, line_no: int, cx_id: str, cx_from: str, cx_to: str) -> Problem:
    return Problem(
        code="thread-cancel-wrong-agent",
        message=(f"line {line_no}: CX {cx_id} must come from {h.sender} to {h.receiver}, the HO's sender and receiver"),
        tier=_TIER,
        slot="from",
        expected=f"{h.sender}->{h.receiver}",
        got=f"{cx_from}->{cx_to}",
    )


def _p_closed_twice(h: _Handoff) -> Problem:
    listed = ", ".join(f"{t} {i}" for t, i in h.closes)
    return Problem(
        code="thread-closed-twice",
        message=f"{h.id}: closed {len(h.closes)} times ({listed}); a handoff closes once",
        tier=_TIER,
        expected="1",
        got=str(len(h.closes)),
    )


def _p_done_after_cancel(h: _Handoff, ran: tuple[str, str]) -> Problem:
    dn_id, out = ran
    return Problem(
        code="thread-done-after-cancel",
        message=f"{h.id}: {dn_id} reports the act done after CX {h.cancels[0]} cancelled it; decide whether to UNDO it",
        tier=_TIER,
        slot="out",
        expected="NOOP",
        got=out,
    )


def _p_orphaned(h: _Handoff, now: str, by_exp: bool) -> Problem:
    slot, value = ("exp", h.exp) if by_exp else ("due", h.due)
    return Problem(
        code="thread-orphaned",
        message=(
            f"{h.id}: orphaned, open past {slot}={value} with no DN, UN, FL or acknowledged CX; close it or cancel it"
        ),
        tier=_TIER,
        slot=slot,
        expected=f"closed by {value}",
        got=now,
    )


def _p_no_handoff(line_no: int, cx_id: str, re_: str | None) -> Problem:
    return Problem(
        code="thread-cancel-no-handoff",
        message=f"line {line_no}: CX {cx_id} re={re_} does not name an HO in this thread",
        tier=_TIER,
        slot="re",
        expected="the id of an HO in this thread",
        got=re_,
    )


def _n_unacked(h: _Handoff) -> Problem:
    return Problem(
        code="thread-cancel-unacked",
        message=(
            f"{h.id}: CX {h.cancels[0]} sent, not yet acknowledged; "
            "the receiver must abandon any prepared statement and answer AN val=Y"
        ),
        tier=_TIER,
    )


def _n_open(h: _Handoff) -> Problem:
    return Problem(code="thread-open", message=f"{h.id}: open", tier=_TIER)


# ---------------------------------------------------------------- the tracker


class ThreadTracker:
    """The closing rule over one conversation, fed a line at a time. See the module docstring for the rules."""

    __slots__ = ("_by_id", "_cx_wait", "_cxs", "_hos", "_invalid", "_last", "_open", "_shadowed")

    def __init__(self) -> None:
        self._hos: list[_Handoff] = []  # every HO, in line order
        self._by_id: dict[str, tuple[_Handoff, ...]] = {}  # HO id -> the HOs with that id (usually one)
        self._open: dict[int, _Handoff] = {}  # index in _hos -> HO not yet closed; insertion order is line order
        self._cx_wait: dict[str, list[_Handoff]] = {}  # CX id -> HOs it cancels that no AN val=Y acknowledged yet
        self._cxs: list[tuple[int, str, str | None]] = []  # every CX: (line, id, re), for the no-HO check
        self._shadowed: set[str] = set()  # HO ids whose latest valid line is not an HO
        self._invalid: list[tuple[int, str]] = []  # (line, problem message)
        self._last = 0  # the last line number fed

    # ------------------------------------------------------------ feeding

    def _line(self, line_no: int | None) -> int:
        n = self._last + 1 if line_no is None else line_no
        if n <= self._last:
            raise ValueError(f"line numbers must increase: got {n} after {self._last}")
        self._last = n
        return n

    def feed(self, msg: Message, line_no: int | None = None) -> tuple[Problem, ...]:
        """Take the next valid line. Returns the problems it raises at once: a second close
        (``thread-closed-twice``, with the count so far), a DN after a cancel (``thread-done-after-cancel``) and a
        cancel from the wrong agent (``thread-cancel-wrong-agent``). ``report`` gives the whole verdict."""
        return self._take(msg, self._line(line_no), apply=True)

    def probe(self, msg: Message, line_no: int | None = None) -> tuple[Problem, ...]:
        """What ``feed`` would return for this line, without taking it: the tracker is left unchanged. O(1)."""
        n = self._last + 1 if line_no is None else line_no
        return self._take(msg, n, apply=False)

    def _take(self, msg: Message, n: int, *, apply: bool) -> tuple[Problem, ...]:
        problems: list[Problem] = []
        t = msg.type
        re_ = msg.re
        targets = self._by_id.get(re_, ()) if re_ is not None else ()
        if t in CLOSERS:
            for h in targets:
                if msg.from_ != h.receiver:
                    continue
                if not apply:
                    h = _replace(h, closes=(*h.closes, (t, msg.id)))
                else:
                    h.closes = (*h.closes, (t, msg.id))
                    self._close(h)
                if len(h.closes) > 1:
                    problems.append(_p_closed_twice(h))
                if t == "DN" and h.cancels and h.ran is None:
                    out = str(msg.slots.get("out"))
                    if out != "NOOP":
                        if apply:
                            h.ran = (msg.id, out)
                        problems.append(_p_done_after_cancel(h, (msg.id, out)))
        elif t == "CX":
            if apply:
                self._cxs.append((n, msg.id, re_))
            for h in targets:
                if msg.from_ != h.sender or msg.to != h.receiver:
                    problems.append(_p_wrong_agent(h, n, msg.id, msg.from_, msg.to))
                    if apply:
                        h.wrong = (*h.wrong, (n, msg.id, msg.from_, msg.to))
                if apply:
                    h.cancels = (*h.cancels, msg.id)
                    if not h.acked:
                        self._cx_wait.setdefault(msg.id, []).append(h)
        elif apply and t == "AN" and re_ is not None and str(msg.slots.get("val")) == "Y":
            waiting = self._cx_wait.get(re_)
            if waiting:
                keep = []
                for h in waiting:
                    if h.acked:
                        continue
                    if msg.from_ == h.receiver:
                        h.acked = True
                        self._close(h)
                    else:
                        keep.append(h)
                if keep:
                    self._cx_wait[re_] = keep
                else:
                    del self._cx_wait[re_]
        if not apply:
            return tuple(problems)
        if t == "HO":
            h = _Handoff(
                idx=len(self._hos),
                line_no=n,
                id=msg.id,
                sender=msg.from_,
                receiver=msg.to,
                item=msg.item,
                exp=_opt_str(msg.slots.get("exp")),
                due=_opt_str(msg.slots.get("due")),
            )
            self._open[h.idx] = h
            self._hos.append(h)
            self._by_id[msg.id] = (*self._by_id.get(msg.id, ()), h)
            self._shadowed.discard(msg.id)
        elif msg.id in self._by_id:
            self._shadowed.add(msg.id)
        return tuple(problems)

    def feed_invalid(self, line_no: int | None, errors: Sequence[Problem | str]) -> tuple[Problem, ...]:
        """Take a line that failed to parse, with its errors (problems or strings). Returns its one problem."""
        n = self._line(line_no)
        p = _p_invalid(n, errors)
        self._invalid.append((n, p.message))
        return (p,)

    def skip(self, line_no: int | None = None) -> None:
        """Count a line that carries no message (blank or ``#``), so later line numbers stay right."""
        self._line(line_no)

    def _close(self, h: _Handoff) -> None:
        self._open.pop(h.idx, None)

    # ------------------------------------------------------------ reading

    @property
    def last_line(self) -> int:
        """The last line number fed (0 before any)."""
        return self._last

    def report(self, now: str) -> CheckResult:
        """The thread's verdict at ``now`` (``YYYYMMDDTHHMMZ``): exactly the reference ``check_thread``'s."""
        problems = [Problem(code="thread-invalid-line", message=m, tier=_TIER) for _, m in self._invalid]
        notes: list[Problem] = []
        day = now[:8]
        for h in self._hos:
            for k, cx_id, cx_from, cx_to in h.wrong:
                problems.append(_p_wrong_agent(h, k, cx_id, cx_from, cx_to))
            if len(h.closes) > 1:
                problems.append(_p_closed_twice(h))
            if h.cancels:
                if h.ran is not None:
                    problems.append(_p_done_after_cancel(h, h.ran))
                elif not h.closes and not h.acked:
                    notes.append(_n_unacked(h))
            if h.closes or h.acked:
                continue
            by_exp = _expired(h.exp, now)
            if by_exp or (h.due is not None and day > h.due):
                problems.append(_p_orphaned(h, now, by_exp))
            else:
                notes.append(_n_open(h))
        for k, cx_id, re_ in self._cxs:
            if re_ is None or re_ not in self._by_id or re_ in self._shadowed:
                problems.append(_p_no_handoff(k, cx_id, re_))
        return CheckResult(problems=tuple(problems), notes=tuple(notes))

    def handoff(self, id: str) -> HandoffView | None:
        """The HO with this id (the latest, should the id repeat), or None."""
        hs = self._by_id.get(id)
        return _view(hs[-1]) if hs else None

    def flags(self, id: str) -> tuple[bool, bool] | None:
        """``(closed, cancelled)`` of the HO with this id (the latest), or None: two fields of ``handoff(id)``
        without building the view, for a caller that asks them for every line."""
        hs = self._by_id.get(id)
        if not hs:
            return None
        h = hs[-1]
        return h.closed, bool(h.cancels)

    def handoffs(self) -> Iterator[HandoffView]:
        """Every HO, in line order."""
        return (_view(h) for h in self._hos)

    def open_handoffs(self) -> Iterator[HandoffView]:
        """The HOs not yet closed (no close from the receiver, no acknowledged cancel), in line order."""
        return (_view(h) for h in list(self._open.values()))

    def __len__(self) -> int:
        return len(self._hos)

    # ------------------------------------------------------------ state

    def to_state(self) -> dict[str, Any]:
        """The tracker as JSON-serialisable plain data; ``from_state`` rebuilds it exactly.

        ``{"v": STATE_VERSION, "n": last line, "ho": [...], "cx": [[line, id, re], ...],
        "bad": [[line, message], ...], "sh": [ids]}``. Each ``ho`` entry is a list:
        ``[line, id, from, to, item, exp, due, closes, cancels, wrong, acked, ran]`` with ``closes`` a list of
        ``[type, id]``, ``cancels`` a list of CX ids, ``wrong`` a list of ``[line, CX id, from, to]``, ``acked``
        0 or 1 and ``ran`` ``[DN id, out]`` or null. Empty trailing fields are dropped to keep it small.
        """
        hos = [_encode_handoff(h) for h in self._hos]
        state: dict[str, Any] = {"v": STATE_VERSION, "n": self._last, "ho": hos}
        if self._cxs:
            state["cx"] = [list(c) for c in self._cxs]
        if self._invalid:
            state["bad"] = [list(b) for b in self._invalid]
        if self._shadowed:
            state["sh"] = sorted(self._shadowed)
        return state

    def _add(self, h: _Handoff) -> None:
        if not h.closed:
            self._open[h.idx] = h
        self._hos.append(h)
        self._by_id[h.id] = (*self._by_id.get(h.id, ()), h)
        if not h.acked:
            for cx_id in h.cancels:
                self._cx_wait.setdefault(cx_id, []).append(h)

    # ------------------------------------------------------------ a part of a conversation

    def handoff_state(self, id: str) -> list[Any] | None:
        """One handoff's record, in ``to_state``'s ``ho`` format (the latest HO with this id), or None."""
        hs = self._by_id.get(id)
        return _encode_handoff(hs[-1]) if hs else None

    @classmethod
    def partial(cls, handoffs: Iterable[Sequence[Any]], last_line: int) -> ThreadTracker:
        """A tracker holding only some handoffs of a conversation (records from ``handoff_state``), to be fed on
        from ``last_line``: for a caller that keeps each handoff's record apart and loads only those the next lines
        name, so that a line's cost never depends on the conversation's length (the gatekeeper's state store).

        Feeding it a line gives exactly what the whole tracker would, for the handoffs it holds, provided the caller
        loaded every handoff the line names (its ``re=``, and for an ``AN`` to a CX, the handoff that CX cancels) and
        ids are unique in the conversation. ``report`` covers only the handoffs held (no cancel naming nothing, no
        invalid line: those live in the whole tracker only). Raises ValueError on a malformed record."""
        t = cls()
        try:
            t._last = int(last_line)
            for rec in handoffs:
                t._add(_decode_handoff(rec, len(t._hos)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed handoff record: {exc}") from exc
        return t

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ThreadTracker:
        """Rebuild a tracker from ``to_state``'s output. Raises ValueError on another version or a malformed state."""
        if not isinstance(state, Mapping) or state.get("v") != STATE_VERSION:
            got = state.get("v") if isinstance(state, Mapping) else type(state).__name__
            raise ValueError(f"thread state version {got!r} is not {STATE_VERSION}")
        t = cls()
        try:
            t._last = int(state["n"])
            for rec in state.get("ho", ()):
                t._add(_decode_handoff(rec, len(t._hos)))
            t._cxs = [(int(k), str(i), None if r is None else str(r)) for k, i, r in state.get("cx", ())]
            t._invalid = [(int(k), str(m)) for k, m in state.get("bad", ())]
            t._shadowed = {str(s) for s in state.get("sh", ())}
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed thread state: {exc}") from exc
        return t


def _encode_handoff(h: _Handoff) -> list[Any]:
    rec: list[Any] = [
        h.line_no,
        h.id,
        h.sender,
        h.receiver,
        h.item,
        h.exp,
        h.due,
        [list(c) for c in h.closes],
        list(h.cancels),
        [list(w) for w in h.wrong],
        1 if h.acked else 0,
        list(h.ran) if h.ran is not None else None,
    ]
    while len(rec) > 5 and rec[-1] in (None, 0, []):
        rec.pop()
    return rec


def _decode_handoff(rec: Sequence[Any], idx: int) -> _Handoff:
    rec = list(rec) + [None] * (12 - len(rec))
    line_no, id_, sender, receiver, item, exp, due, closes, cancels, wrong, acked, ran = rec
    return _Handoff(
        idx=idx,
        line_no=int(line_no),
        id=str(id_),
        sender=str(sender),
        receiver=str(receiver),
        item=item,
        exp=exp,
        due=due,
        closes=tuple((str(a), str(b)) for a, b in closes or ()),
        cancels=tuple(str(c) for c in cancels or ()),
        wrong=tuple((int(k), str(i), str(f), str(to)) for k, i, f, to in wrong or ()),
        acked=bool(acked),
        ran=(str(ran[0]), str(ran[1])) if ran else None,
    )


# ---------------------------------------------------------------- the whole-thread check, built on the tracker


def _thread(lines: Iterable[str], resolve: Callable[[], Profile], now: str | None) -> CheckResult:
    from rwcore._codec import parse_line

    clock = now or now_utc()
    tracker = ThreadTracker()
    prof: Profile | None = None
    for n, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if prof is None:
            prof = resolve()  # as the reference, a bad profile name is refused at the first line, not before
        parsed = parse_line(line, prof)
        if parsed.message is None or parsed.errors:
            tracker.feed_invalid(n, parsed.errors)
        else:
            tracker.feed(parsed.message, n)
    return tracker.report(clock)


def thread_check(lines: Iterable[str], profile: Profile | str | None = None, now: str | None = None) -> CheckResult:
    """Every handoff closes: the lines of one conversation, in the order they were sent, checked at ``now``
    (``YYYYMMDDTHHMMZ``; the current UTC time when not given). Blank lines and ``#`` lines are skipped but counted.

    Each line is parsed under ``profile`` (a Profile or a name; None or ``"core"``: the core, under which a line
    carrying ``p=`` is parsed under the profile it names, as the reference does). An unknown profile name raises
    ``FormError`` when the first line is parsed.
    """
    from rwcore._profiles import resolve_profile

    return _thread(lines, lambda: resolve_profile(profile), now)


def check_thread(
    lines: Iterable[str], profile: str | None = None, now: str | None = None
) -> tuple[list[str], list[str]]:
    """The reference's ``check_thread``: (problems, notes) as lists of strings, the profile named as the reference
    names it (``"core"`` is refused, as ``load_profile`` refuses it)."""
    from rwcore._profiles import reference_profile

    return _thread(lines, lambda: reference_profile(profile), now).compat()
