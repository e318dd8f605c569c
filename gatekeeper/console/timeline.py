"""A conversation as the console draws it: every line the gatekeeper decided, in the thread's tree (a handoff, then
the lines that answer it, then the answers to those), with its verdict, reason and the check's problems, the
handoffs' approvals, bindings and deadlines, and what the gatekeeper did on its own (its cancels, its alerts at
expiry, the refusal notices its dead letters name).

Pure: it reads a loaded ``ConversationState`` (the whole conversation) and the route's dead letters of the
conversation the page found, and masks every line's text and every problem for its reader unless told not to.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.config import Route
from gatekeeper.console.letters import Letter
from gatekeeper.handoff_views import describe, when
from gatekeeper.masking import Masker
from gatekeeper.policy import ConversationState


@dataclass(slots=True)
class Row:
    """One line of the timeline (or an act of the gatekeeper's own, ``own=True``); ``depth``: its place in the
    thread's tree (set as the tree is walked)."""

    id: str
    type: str
    re: str | None
    depth: int
    at: float
    verdict: str
    reason: str | None
    text: str | None
    problems: tuple[dict[str, Any], ...] = ()
    own: bool = False
    note: str | None = None
    letter: str | None = None  # its dead letter on the route's topic (``--letter`` P:O), when the page found it

    @property
    def when(self) -> str:
        return when(self.at) or ""

    @property
    def indent(self) -> int:
        """The depth the page draws (deeper lines are drawn at 4)."""
        return self.depth if self.depth < 4 else 4


#: lines a page shows at most (about 500 bytes each: the page stays under ``http.max_answer_bytes``)
MAX_ROWS = 2000


@dataclass(frozen=True, slots=True)
class Timeline:
    route: str
    conversation: str
    rows: tuple[Row, ...]
    handoffs: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    left_out: int = 0  # lines past MAX_ROWS, not shown


def _problem(p: Any, masker: Masker | None) -> dict[str, Any]:
    q = p if masker is None else masker.problem(p)
    return {"code": q.code, "tier": q.tier, "slot": q.slot, "expected": q.expected, "got": q.got, "message": q.message}


def build(
    route: Route,
    conversation: str,
    state: ConversationState,
    letters: Sequence[Letter],
    now: float,
    *,
    sensitive: Iterable[str],
    unmask: bool = False,
) -> Timeline:
    """The timeline of one conversation (``letters``: the route's dead letters of it, newest first)."""
    slots = frozenset(sensitive)
    base = Masker.for_slots(slots)
    by_id: dict[str, Letter] = {}
    for x in letters:  # newest first: the first met is the live copy of a line's letters
        if x.id is not None and x.id not in by_id:
            by_id[x.id] = x
    rows: dict[str, Row] = {}
    for line_id, e in state.lines.items():
        letter = by_id.get(line_id)
        text = e.text if e.text is not None else (letter.line if letter is not None else None)
        masker = None if unmask else base.learn_line(e.text or "").learn_problems(e.problems)
        note = None
        if letter is not None:
            notice = next((h.value for h in letter.headers if h.name == "gk.notice.id"), None)
            if notice:
                note = f"refusal notice {notice} sent to its sender"
        rows[line_id] = Row(
            id=line_id,
            type=e.type,
            re=e.re,
            depth=0,
            at=e.at,
            verdict=e.verdict,
            reason=e.reason,
            text=text if masker is None or e.text is None else masker.text(text or ""),
            problems=tuple(_problem(p, masker) for p in e.problems),
            note=note,
            letter=None if letter is None else letter.letter,
        )
    own: list[Row] = []
    for ho, h in state.handoffs.items():
        if h.gk_cancel is not None and h.gk_cancel not in rows:
            at = h.gk_cancel_at or 0.0
            why = h.gk_cancel_why or "EXPIRED"
            own.append(Row(h.gk_cancel, "CX", ho, 0, at, "gatekeeper", None, None, own=True, note=f"why={why}"))
        if h.overdue is not None:
            at = h.overdue_at or 0.0
            own.append(Row(f"alert:{ho}", "alert", ho, 0, at, "alert", h.overdue, None, own=True))
    for r in own:
        rows.setdefault(r.id, r)
    ordered = _tree(rows)
    handoffs = tuple(_handoff(route, conversation, state, ho, now) for ho in sorted(state.handoffs)[:MAX_ROWS])
    return Timeline(route.input, conversation, tuple(ordered[:MAX_ROWS]), handoffs, max(0, len(ordered) - MAX_ROWS))


def _tree(rows: Mapping[str, Row]) -> list[Row]:
    """Depth-first from each root (a line that answers nothing, or a line whose target is not in the state), the
    children of a line in the order they were decided."""
    children: dict[str | None, list[Row]] = {}
    for r in rows.values():
        parent = r.re if r.re in rows and r.re != r.id else None
        children.setdefault(parent, []).append(r)
    for kids in children.values():
        kids.sort(key=lambda r: (r.at, r.id))
    out: list[Row] = []
    seen: set[str] = set()
    stack = [(r, 0) for r in reversed(children.get(None, []))]
    while stack:
        r, depth = stack.pop()
        if r.id in seen:
            continue
        seen.add(r.id)
        r.depth = depth
        out.append(r)
        stack.extend((c, depth + 1) for c in reversed(children.get(r.id, [])))
    for r in sorted(rows.values(), key=lambda r: (r.at, r.id)):  # a cycle of re= (never written so): shown flat
        if r.id not in seen:
            out.append(r)
    return out


def _handoff(route: Route, conversation: str, state: ConversationState, ho: str, now: float) -> dict[str, Any]:
    d = describe(route, conversation, state, ho, now)
    entry = state.handoffs[ho]
    if entry.relay_of is not None:
        d["approval"] = f"bound to {entry.relay_of}, which this handoff relays"
    elif entry.bound:
        d["approval"] = "bound to this handoff (one approval, one act)"
    elif entry.exec_ask:
        d["approval"] = "not bound"
    else:
        d["approval"] = "n/a (not an act)"
    return d


__all__ = ["Row", "Timeline", "build"]
