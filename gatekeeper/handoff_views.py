"""One handoff of a conversation's state, described for a reader: its status in words, its approval, its deadlines
and its thread (the lines that answer it). Pure functions of the state that ``gatekeeper handoffs`` and the console
both show; nothing here reads Redis or masks (the caller masks the lines' text for its reader)."""

from __future__ import annotations

from typing import Any

from gatekeeper.config import Route
from gatekeeper.consumers.outcomes import iso
from gatekeeper.policy import ConversationState
from gatekeeper.policy.lifecycle import all_deadlines, deadlines_of, opened_at


def when(t: float | None) -> str | None:
    """An epoch time as ISO-8601 UTC with milliseconds; None for none or never."""
    return None if t is None or t == float("inf") else iso(t)


def status_of(state: ConversationState, ho: str) -> str:
    """One word or phrase: open, cancelled (not acknowledged), closed (how), superseded."""
    entry = state.handoffs.get(ho)
    view = state.tracker.handoff(ho)
    if entry is None or view is None:
        return "unknown"
    if entry.superseded_by is not None:
        return f"superseded by {entry.superseded_by}"
    if view.closes:
        return "closed by " + ", ".join(f"{t} {i}" for t, i in view.closes)
    if view.acked:
        return "closed: cancel acknowledged"
    if view.cancelled:
        by = "the gatekeeper" if entry.gk_cancel in view.cancels else "the sender"
        return f"cancelled by {by}, not acknowledged"
    if entry.cleared_by is not None:
        return f"open, act cleared ({entry.cleared_by})"
    return "open"


def describe(route: Route, conversation: str, state: ConversationState, ho: str, now: float) -> dict[str, Any]:
    """One handoff as ``list --json`` and ``show --json`` print it."""
    entry = state.handoffs[ho]
    view = state.tracker.handoff(ho)
    rt = route.readback_timeout_seconds
    pending = {(d.kind, d.at) for d in deadlines_of(state, rt, ho=ho)}
    deadlines = [
        {
            "kind": d.kind.value,
            "value": d.value,
            "at": when(d.at),
            "epoch": None if d.at == float("inf") else d.at,
            "state": "pending" if (d.kind, d.at) in pending else ("acted on" if d.at <= now else "no longer applies"),
            "passed": d.at <= now,
        }
        for d in all_deadlines(state, ho, rt)
    ]
    nxt = next((d for d in deadlines if d["state"] == "pending"), None)
    return {
        "route": route.input,
        "conversation": conversation,
        "handoff": ho,
        "from": None if view is None else view.sender,
        "to": None if view is None else view.receiver,
        "item": entry.item,
        "ask": entry.ask,
        "exec": entry.exec_ask,
        "status": status_of(state, ho),
        "opened_at": when(opened_at(state, ho)),
        "next_deadline": None if nxt is None else f"{nxt['kind']} {nxt['at']}",
        "deadlines": deadlines,
        "bound": entry.bound,
        "passed_rb": entry.passed_rb,
        "cleared_by": entry.cleared_by,
        "superseded_by": entry.superseded_by,
        "relay_of": entry.relay_of,
        "relayed_by": entry.relayed_by,
        "closes": [] if view is None else [f"{t} {i}" for t, i in view.closes],
        "cancels": [] if view is None else list(view.cancels),
        "acknowledged": bool(view and view.acked),
        "gatekeeper_cancel": None
        if entry.gk_cancel is None
        else {"id": entry.gk_cancel, "why": entry.gk_cancel_why, "at": when(entry.gk_cancel_at)},
        "overdue": None if entry.overdue is None else {"alert": entry.overdue, "at": when(entry.overdue_at)},
    }


def thread_of(state: ConversationState, ho: str) -> list[dict[str, Any]]:
    """The conversation's lines that belong to the handoff: the HO, the lines that answer it, and the answers to
    those (an AN to a readback or to a cancel), in the order they were decided."""
    ids = {ho}
    grew = True
    while grew:
        grew = False
        for line_id, e in state.lines.items():
            if line_id not in ids and e.re in ids:
                ids.add(line_id)
                grew = True
    rows = []
    for line_id in ids:
        found = state.lines.get(line_id)
        if found is None:
            continue
        e = found
        rows.append(
            {
                "id": line_id,
                "type": e.type,
                "re": e.re,
                "verdict": e.verdict,
                "reason": e.reason,
                "at": when(e.at),
                "epoch": e.at,
                "text": e.text,
                "problems": [p.code for p in e.problems],
            }
        )
    rows.sort(key=lambda r: (r["epoch"], r["id"]))
    return rows


__all__ = ["describe", "status_of", "thread_of", "when"]
