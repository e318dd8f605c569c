"""What the gatekeeper remembers of one conversation, and the records it checks against.

All of it is plain data that serialises to JSON (``to_dict``/``from_dict``); the store keeps one document per
conversation, keyed with the conversation in a Redis Cluster hash tag.

- ``lines``: every line the gatekeeper decided, by message id: its digest, verdict, reason, problems and the time
  of the first decision. This is the memo that makes the same line get the same verdict on reprocessing, the
  duplicate-id check, and the tombstone that refuses replies to a dead-lettered line.
- ``handoffs``: every forwarded HO, with the record it was checked against (its ``resolved`` values and withheld
  ``expect_acc`` criteria), whether a re-issue superseded it, and which readback an affirmative answer cleared; and,
  from the lifecycle (``policy.lifecycle``), the CX the gatekeeper wrote for it and the alert raised at its expiry.
- ``readbacks``: every RB the gatekeeper checked, whether it passed, and whether a negative answer refused it.
- ``tracker``: rwcore's incremental thread tracker, fed every forwarded line: closes, cancels, acknowledgements.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rwcore import Problem, ThreadTracker

STATE_VERSION = 1


def _problem_from(d: Mapping[str, Any]) -> Problem:
    return Problem(
        code=d["code"],
        message=d["message"],
        tier=d.get("tier"),
        slot=d.get("slot"),
        expected=d.get("expected"),
        got=d.get("got"),
    )


@dataclass(frozen=True, slots=True)
class RecordKey:
    """Records are keyed by (item, ask): one approval per act."""

    item: str
    ask: str

    def __str__(self) -> str:
        return f"{self.item}|{self.ask}"


@dataclass(frozen=True, slots=True)
class Record:
    """An approved record, written by the approving system.

    ``values`` are the values the handoff must carry, as written on the line (``to``, ``ask`` and the profile's
    slots; ``item`` may be among them). ``resolved`` are values the receiver resolves itself (the account on file,
    ``prev``): the readback and the done report must match them. ``expect_acc`` are the sender's withheld criteria
    for a comprehension readback.
    """

    item: str
    ask: str
    values: Mapping[str, Any]
    resolved: Mapping[str, str] = field(default_factory=dict)
    expect_acc: tuple[str, ...] | None = None

    @property
    def key(self) -> RecordKey:
        return RecordKey(self.item, self.ask)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"item": self.item, "ask": self.ask, "values": dict(self.values)}
        if self.resolved:
            d["resolved"] = dict(self.resolved)
        if self.expect_acc is not None:
            d["expect_acc"] = list(self.expect_acc)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Record:
        acc = d.get("expect_acc")
        return cls(
            item=d["item"],
            ask=d["ask"],
            values=dict(d.get("values") or {}),
            resolved={str(k): str(v) for k, v in (d.get("resolved") or {}).items()},
            expect_acc=None if acc is None else tuple(str(x) for x in acc),
        )


@dataclass(frozen=True, slots=True)
class LineEntry:
    """The first decision about a line, by its message id."""

    digest: str
    type: str
    verdict: str
    reason: str | None
    at: float
    re: str | None = None
    problems: tuple[Problem, ...] = ()
    text: str | None = None  # kept for forwarded HOs and checked RBs: later checks need them

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"d": self.digest, "t": self.type, "v": self.verdict, "r": self.reason, "at": self.at}
        if self.re is not None:
            d["re"] = self.re
        if self.problems:
            d["p"] = [p.to_dict() for p in self.problems]
        if self.text is not None:
            d["x"] = self.text
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LineEntry:
        return cls(
            digest=d["d"],
            type=d["t"],
            verdict=d["v"],
            reason=d.get("r"),
            at=float(d["at"]),
            re=d.get("re"),
            problems=tuple(_problem_from(p) for p in d.get("p", ())),
            text=d.get("x"),
        )


@dataclass(slots=True)
class HandoffEntry:
    """A forwarded HO and what the gatekeeper knows about it beyond the thread tracker."""

    id: str
    item: str
    ask: str
    exec_ask: bool
    record: Record | None = None
    bound: bool = False  # this HO holds the exec record's binding
    superseded_by: str | None = None
    cleared_by: str | None = None  # the RB an affirmative answer cleared
    passed_rb: str | None = None  # the latest readback that passed
    # the lifecycle (gatekeeper.policy.lifecycle): the CX the gatekeeper wrote for it, and what it raised at expiry
    gk_cancel: str | None = None  # the id of the gatekeeper's CX
    gk_cancel_why: str | None = None  # EXPIRED or TIMEOUT
    gk_cancel_at: float | None = None
    overdue: str | None = None  # raised when exp=/due= passed while open: thread-orphaned or cleared-not-done
    overdue_at: float | None = None

    @property
    def lapsed_at(self) -> float | None:
        """When the gatekeeper first acted on this handoff's time running out (a cancel or an alert), if it did."""
        times = [t for t in (self.gk_cancel_at, self.overdue_at) if t is not None]
        return min(times) if times else None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"item": self.item, "ask": self.ask, "exec": self.exec_ask}
        if self.record is not None:
            d["rec"] = self.record.to_dict()
        for k in ("bound", "superseded_by", "cleared_by", "passed_rb"):
            v = getattr(self, k)
            if v:
                d[k] = v
        if self.gk_cancel is not None:
            d["gkcx"] = [self.gk_cancel, self.gk_cancel_why, self.gk_cancel_at]
        if self.overdue is not None:
            d["over"] = [self.overdue, self.overdue_at]
        return d

    @classmethod
    def from_dict(cls, hid: str, d: Mapping[str, Any]) -> HandoffEntry:
        rec = d.get("rec")
        gkcx = d.get("gkcx")
        over = d.get("over")
        return cls(
            id=hid,
            item=d["item"],
            ask=d["ask"],
            exec_ask=bool(d["exec"]),
            record=None if rec is None else Record.from_dict(rec),
            bound=bool(d.get("bound", False)),
            superseded_by=d.get("superseded_by"),
            cleared_by=d.get("cleared_by"),
            passed_rb=d.get("passed_rb"),
            gk_cancel=gkcx[0] if gkcx else None,
            gk_cancel_why=gkcx[1] if gkcx else None,
            gk_cancel_at=float(gkcx[2]) if gkcx and gkcx[2] is not None else None,
            overdue=over[0] if over else None,
            overdue_at=float(over[1]) if over and over[1] is not None else None,
        )


@dataclass(slots=True)
class ReadbackEntry:
    id: str
    ho: str
    passed: bool
    exp: str | None = None
    refused: bool = False  # a negative answer: this readback can no longer be cleared

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"ho": self.ho, "ok": self.passed}
        if self.exp:
            d["exp"] = self.exp
        if self.refused:
            d["refused"] = True
        return d

    @classmethod
    def from_dict(cls, rid: str, d: Mapping[str, Any]) -> ReadbackEntry:
        return cls(id=rid, ho=d["ho"], passed=bool(d["ok"]), exp=d.get("exp"), refused=bool(d.get("refused")))


@dataclass(slots=True)
class ConversationState:
    lines: dict[str, LineEntry] = field(default_factory=dict)
    handoffs: dict[str, HandoffEntry] = field(default_factory=dict)
    readbacks: dict[str, ReadbackEntry] = field(default_factory=dict)
    tracker: ThreadTracker = field(default_factory=ThreadTracker)
    seq: int = 0  # lines fed to the tracker

    def to_dict(self) -> dict[str, Any]:
        return {
            "v": STATE_VERSION,
            "lines": {k: e.to_dict() for k, e in self.lines.items()},
            "handoffs": {k: e.to_dict() for k, e in self.handoffs.items()},
            "readbacks": {k: e.to_dict() for k, e in self.readbacks.items()},
            "tracker": self.tracker.to_state(),
            "seq": self.seq,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ConversationState:
        if d.get("v") != STATE_VERSION:
            raise ValueError(f"conversation state version {d.get('v')!r} is not {STATE_VERSION}")
        return cls(
            lines={k: LineEntry.from_dict(e) for k, e in d["lines"].items()},
            handoffs={k: HandoffEntry.from_dict(k, e) for k, e in d["handoffs"].items()},
            readbacks={k: ReadbackEntry.from_dict(k, e) for k, e in d["readbacks"].items()},
            tracker=ThreadTracker.from_state(d["tracker"]),
            seq=int(d["seq"]),
        )

    def has_open_handoffs(self) -> bool:
        return any(
            h.superseded_by is None and (v := self.tracker.handoff(h.id)) is not None and not v.closed
            for h in self.handoffs.values()
        )
