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

The state machine itself is native (native/rw1/src/thread.rs); ``ThreadTracker`` is its Python face.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from rwcore import _native
from rwcore._codec import native_problems
from rwcore._errors import CodeInfo
from rwcore._types import CheckResult, Message, Problem

if TYPE_CHECKING:
    from rwcore._profiles import Profile

__all__ = ["STATE_VERSION", "THREAD_CODES", "HandoffView", "ThreadTracker", "check_thread", "now_utc", "thread_check"]

#: The version of ``ThreadTracker.to_state``'s format. ``from_state`` refuses any other.
STATE_VERSION = 1

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


def _found(found: list[tuple[str, str, str, str | None, str | None, str | None]]) -> tuple[Problem, ...]:
    return tuple(native_problems(found)) if found else ()


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


class ThreadTracker:
    """The closing rule over one conversation, fed a line at a time. See the module docstring for the rules.

    The state machine is native (native/rw1/src/thread.rs); this class hands it messages and turns what it gives
    into rwcore's values."""

    __slots__ = ("_t",)

    def __init__(self, _native_tracker: _native.Tracker | None = None) -> None:
        self._t = _native_tracker if _native_tracker is not None else _native.Tracker()

    # ------------------------------------------------------------ feeding

    def feed(self, msg: Message, line_no: int | None = None) -> tuple[Problem, ...]:
        """Take the next valid line. Returns the problems it raises at once: a second close
        (``thread-closed-twice``, with the count so far), a DN after a cancel (``thread-done-after-cancel``) and a
        cancel from the wrong agent (``thread-cancel-wrong-agent``). ``report`` gives the whole verdict. Raises
        ValueError when ``line_no`` is not above the last line fed."""
        return _found(self._t.feed(msg, line_no))

    def probe(self, msg: Message, line_no: int | None = None) -> tuple[Problem, ...]:
        """What ``feed`` would return for this line, without taking it: the tracker is left unchanged. O(1)."""
        return _found(self._t.probe(msg, line_no))

    def feed_invalid(self, line_no: int | None, errors: Sequence[Problem | str]) -> tuple[Problem, ...]:
        """Take a line that failed to parse, with its errors (problems or strings). Returns its one problem."""
        messages = [e.message if isinstance(e, Problem) else str(e) for e in errors]
        return _found(self._t.feed_invalid(line_no, messages))

    def skip(self, line_no: int | None = None) -> None:
        """Count a line that carries no message (blank or ``#``), so later line numbers stay right."""
        self._t.skip(line_no)

    # ------------------------------------------------------------ reading

    @property
    def last_line(self) -> int:
        """The last line number fed (0 before any)."""
        return self._t.last_line

    def report(self, now: str) -> CheckResult:
        """The thread's verdict at ``now`` (``YYYYMMDDTHHMMZ``): exactly the reference ``check_thread``'s."""
        problems, notes = self._t.report(now)
        return CheckResult(problems=_found(problems), notes=_found(notes))

    def handoff(self, id: str) -> HandoffView | None:
        """The HO with this id (the latest, should the id repeat), or None."""
        v = self._t.handoff(id)
        return HandoffView(*v) if v is not None else None

    def flags(self, id: str) -> tuple[bool, bool] | None:
        """``(closed, cancelled)`` of the HO with this id (the latest), or None: two fields of ``handoff(id)``
        without building the view, for a caller that asks them for every line."""
        return self._t.flags(id)

    def handoffs(self) -> Iterator[HandoffView]:
        """Every HO, in line order."""
        return (HandoffView(*v) for v in self._t.views(False))

    def open_handoffs(self) -> Iterator[HandoffView]:
        """The HOs not yet closed (no close from the receiver, no acknowledged cancel), in line order."""
        return (HandoffView(*v) for v in self._t.views(True))

    def __len__(self) -> int:
        return len(self._t)

    # ------------------------------------------------------------ state

    def to_state(self) -> dict[str, Any]:
        """The tracker as JSON-serialisable plain data; ``from_state`` rebuilds it exactly.

        ``{"v": STATE_VERSION, "n": last line, "ho": [...], "cx": [[line, id, re], ...],
        "bad": [[line, message], ...], "sh": [ids]}``. Each ``ho`` entry is a list:
        ``[line, id, from, to, item, exp, due, closes, cancels, wrong, acked, ran]`` with ``closes`` a list of
        ``[type, id]``, ``cancels`` a list of CX ids, ``wrong`` a list of ``[line, CX id, from, to]``, ``acked``
        0 or 1 and ``ran`` ``[DN id, out]`` or null. Empty trailing fields are dropped to keep it small.
        """
        return self._t.to_state()

    def handoff_state(self, id: str) -> list[Any] | None:
        """One handoff's record, in ``to_state``'s ``ho`` format (the latest HO with this id), or None."""
        return self._t.handoff_state(id)

    @classmethod
    def partial(cls, handoffs: Iterable[Sequence[Any]], last_line: int) -> ThreadTracker:
        """A tracker holding only some handoffs of a conversation (records from ``handoff_state``), to be fed on
        from ``last_line``: for a caller that keeps each handoff's record apart and loads only those the next lines
        name, so that a line's cost never depends on the conversation's length (the gatekeeper's state store).

        Feeding it a line gives exactly what the whole tracker would, for the handoffs it holds, provided the caller
        loaded every handoff the line names (its ``re=``, and for an ``AN`` to a CX, the handoff that CX cancels) and
        ids are unique in the conversation. ``report`` covers only the handoffs held (no cancel naming nothing, no
        invalid line: those live in the whole tracker only). Raises ValueError on a malformed record."""
        return cls(_native.Tracker.partial(handoffs, last_line))

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ThreadTracker:
        """Rebuild a tracker from ``to_state``'s output. Raises ValueError on another version or a malformed state."""
        return cls(_native.Tracker.from_state(state))


# ---------------------------------------------------------------- the whole-thread check, built on the tracker


def _thread(lines: Iterable[str], resolve: Callable[[], Profile], now: str | None) -> CheckResult:
    from rwcore._codec import _switch, parse_line

    clock = now or now_utc()
    tracker = ThreadTracker()
    feed_line = tracker._t.feed_line  # parsed and taken natively, no Message made (parse_line below: the rest)
    prof: Profile | None = None
    for n, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if prof is None:
            prof = resolve()  # as the reference, a bad profile name is refused at the first line, not before
            grammar, switch = prof.grammar, _switch(prof)
        if type(line) is str and feed_line(line, n, grammar, switch):
            continue
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
