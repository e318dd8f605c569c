"""What the gatekeeper remembers of one conversation, and the records it checks against.

A conversation's state is **many small entries**, not one document, so that a line's cost never depends on how long
its conversation is. Each entry is a field of the conversation's Redis hash (``gatekeeper.redis_store``; the
in-memory store keeps the same fields):

=============  ===================================================================================================
field          what
=============  ===================================================================================================
``h``          the header: the format version, ``seq`` (lines fed to the thread so far: the next line's number)
               and ``open`` (how many handoffs of the conversation are open: the state's retention)
``l:<id>``     a line's first decision (``LineEntry``): digest, verdict, reason, problems, when; the text of a
               forwarded HO or a checked RB. The memo that makes the same line get the same verdict, the
               duplicate-id check, and the tombstone that refuses replies to a dead-lettered line.
``o:<id>``     a forwarded HO (``HandoffEntry``): the record it was checked against, its binding, supersession,
               clearance and lifecycle
``r:<id>``     a checked RB (``ReadbackEntry``): whether it passed, whether a negative answer refused it
``t:<id>``     the HO's thread record (``rwcore.ThreadTracker.handoff_state``): its closes, cancels, acknowledgement
``e``          the owner epoch of the last write (the store's fence: a write under an older epoch is refused)
=============  ===================================================================================================

**A batch loads only what its lines name** (``wanted_fields``, the closure of the ids they carry): for each id a
line names (its own, ``re=``, ``ctx=``) the four entries of that id; then, for each entry found, the four entries of
the ids it points to (a line's ``re=``, a readback's handoff, a handoff's passing or clearing readback). Two levels
are enough: every decision reads at most a reply's target and what that target points to (an answer to a readback
reads the readback's handoff; a done report reads its handoff's plan). The loaded ``ConversationState`` holds those
entries, and its thread is a partial ``ThreadTracker`` of the loaded handoffs; everything the decision reads of it
was loaded, so a missing entry means "not in the conversation", exactly as in a whole state.

**A batch writes only what changed**: ``apply`` marks the fields each effect changes (``dirty``), and the store
writes those and the header. ``open`` moves by the number of loaded handoffs that opened or closed
(``open_delta``), so no line walks the conversation to know whether it still has an open handoff.

**A conversation that talks all month still bounds its memory.** Each save records, in the conversation's
collection queue (a sorted set beside its hash), the lines it decided (by id, when) and the handoffs that closed.
An entry whose time in the queue is older than ``retention_seconds`` goes (``collectable``): a handoff that is closed
(its ``l:``, ``o:`` and ``t:`` entries), a reply whose handoff is closed or gone (its ``l:`` and ``r:`` entries: a
readback, a cancel, an answer...), a line that replies to nothing. A reply to a handoff still open stays (its
readback is the plan of the done report to come, its cancel waits for the acknowledgement) and is looked at again
later. What goes is only what no decision to come can read: a line older than the retention is not redelivered, and
its handoff is closed. Each save takes at most a few dozen from the queue, so no save walks the conversation.

Version 1 (the whole-document form of earlier releases) is read and converted on first touch (``from_dict``): the
store writes it as fields and deletes the document.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
import orjson

from rwcore import Message, Problem, ThreadTracker

STATE_VERSION = 2  # the per-entry form; 1 was one JSON document per conversation
HEADER = "h"
EPOCH = "e"  # the owner epoch of the last write (``store.Store.save``'s fence); not part of the decision's state
_KINDS = ("l:", "o:", "r:", "t:")


def _problem_from(d: Mapping[str, Any]) -> Problem:
    return Problem(
        code=d["code"],
        message=d["message"],
        tier=d.get("tier"),
        slot=d.get("slot"),
        expected=d.get("expected"),
        got=d.get("got"),
    )


class RecordKey(msgspec.Struct, frozen=True, gc=False):
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
    for a comprehension readback. ``signature`` is the approving system's signature of all of that
    (``gatekeeper.approvals``: ``v1 <approver key id> <signature>``), None when unsigned.
    """

    item: str
    ask: str
    values: Mapping[str, Any]
    resolved: Mapping[str, str] = field(default_factory=dict)
    expect_acc: tuple[str, ...] | None = None
    signature: str | None = None

    @property
    def key(self) -> RecordKey:
        return RecordKey(self.item, self.ask)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"item": self.item, "ask": self.ask, "values": dict(self.values)}
        if self.resolved:
            d["resolved"] = dict(self.resolved)
        if self.expect_acc is not None:
            d["expect_acc"] = list(self.expect_acc)
        if self.signature is not None:
            d["sig"] = self.signature
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
            signature=d["sig"] if isinstance(d.get("sig"), str) else None,
        )


class LineEntry(msgspec.Struct, frozen=True, gc=False):
    """The first decision about a line, by its message id."""

    digest: str
    type: str
    verdict: str
    reason: str | None
    at: float
    re: str | None = None
    problems: tuple[Problem, ...] = ()
    text: str | None = None  # kept for forwarded HOs, checked RBs and questions: later checks need them
    answered: str | None = None  # a question's: the line that answered it (an AN, or a UN from the one asked)
    unanswered_at: float | None = None  # a question's: when the gatekeeper raised unanswered-question (past by=)

    def to_dict(self) -> dict[str, Any]:
        # ``at`` to the millisecond and no ``r`` for no reason: every open handoff keeps one of these (memory)
        d: dict[str, Any] = {"d": self.digest, "t": self.type, "v": self.verdict, "at": round(self.at, 3)}
        if self.reason is not None:
            d["r"] = self.reason
        if self.re is not None:
            d["re"] = self.re
        if self.problems:
            d["p"] = [p.to_dict() for p in self.problems]
        if self.text is not None:
            d["x"] = self.text
        if self.answered is not None:
            d["ans"] = self.answered
        if self.unanswered_at is not None:
            d["una"] = round(self.unanswered_at, 3)
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
            answered=d.get("ans"),
            unanswered_at=None if d.get("una") is None else float(d["una"]),
        )


class HandoffEntry(msgspec.Struct):
    """A forwarded HO and what the gatekeeper knows about it beyond the thread tracker."""

    id: str
    item: str
    ask: str
    exec_ask: bool
    record: Record | None = None
    bound: bool = False  # this HO holds the exec record's binding
    holder: str | None = (
        None  # the binding's value it holds (``policy.decide.holder_of``); None: bound by an earlier release
    )
    superseded_by: str | None = None
    relay_of: str | None = None  # a relay (spec 5.3): the handoff it forwards, whose receiver sent it
    relayed_by: str | None = None  # the relay that forwards this handoff (one: one approval, one act)
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
            rec = self.record.to_dict()
            rec.pop("sig", None)  # checked when the handoff was: the handoff's copy needs no signature (memory)
            if rec["item"] == self.item and rec["ask"] == self.ask:  # the usual case: not written twice (memory)
                del rec["item"], rec["ask"]
            d["rec"] = rec
        if self.bound:  # the binding's value it holds, where known (True: bound by an earlier release)
            d["bound"] = self.holder or True
        for k in ("superseded_by", "relay_of", "relayed_by", "cleared_by", "passed_rb"):
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
        bound = d.get("bound", False)
        return cls(
            id=hid,
            item=d["item"],
            ask=d["ask"],
            exec_ask=bool(d["exec"]),
            record=None if rec is None else Record.from_dict({"item": d["item"], "ask": d["ask"], **rec}),
            bound=bool(bound),
            holder=bound if isinstance(bound, str) else None,
            superseded_by=d.get("superseded_by"),
            relay_of=d.get("relay_of"),
            relayed_by=d.get("relayed_by"),
            cleared_by=d.get("cleared_by"),
            passed_rb=d.get("passed_rb"),
            gk_cancel=gkcx[0] if gkcx else None,
            gk_cancel_why=gkcx[1] if gkcx else None,
            gk_cancel_at=float(gkcx[2]) if gkcx and gkcx[2] is not None else None,
            overdue=over[0] if over else None,
            overdue_at=float(over[1]) if over and over[1] is not None else None,
        )


class ReadbackEntry(msgspec.Struct):
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


def _dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode("utf-8")  # compact, UTF-8, the keys in insertion order: as json.dumps wrote it


def entry_fields(line_id: str) -> tuple[str, ...]:
    """The four fields an id may have (``_KINDS``, in its order)."""
    return ("l:" + line_id, "o:" + line_id, "r:" + line_id, "t:" + line_id)


def _pointers(name: str, value: Mapping[str, Any]) -> Iterable[str]:
    """The ids an entry points to: what a decision about a line naming it may read next."""
    if name.startswith("l:"):
        re_ = value.get("re")
        return (re_,) if isinstance(re_, str) else ()
    if name.startswith("r:"):
        ho = value.get("ho")
        return (ho,) if isinstance(ho, str) else ()
    if name.startswith("o:"):
        return tuple(v for k in ("cleared_by", "passed_rb") if isinstance(v := value.get(k), str))
    return ()


def wanted_fields(ids: Collection[str], get: Callable[[Collection[str]], Mapping[str, str]]) -> dict[str, str]:
    """The closure of ``ids`` (see the module docstring): the header, every entry of each id, then every entry of
    the ids those point to. ``get(fields)`` returns the fields that exist. ``gatekeeper.redis_store`` runs the same
    closure in a Lua script (one round trip); the in-memory store runs this one."""
    first = {f for i in ids for f in entry_fields(i)}
    found = dict(get([HEADER, *sorted(first)]))
    second: set[str] = set()
    for name, raw in found.items():
        if name == HEADER or name.startswith("t:"):
            continue
        second.update(_pointers(name, orjson.loads(raw)))
    more = {f for i in second for f in entry_fields(i)} - first
    if more:
        found.update(get(sorted(more)))
    return found


def _closed(fields: Mapping[str, str], ho: str) -> bool:
    """Whether the handoff ``ho`` is closed (or superseded) by its stored entries; a handoff with no entry: closed."""
    thread = fields.get(f"t:{ho}")
    entry = fields.get(f"o:{ho}")
    if thread is None or entry is None:
        return True
    if orjson.loads(entry).get("superseded_by"):
        return True
    rec = orjson.loads(thread)
    closes = rec[7] if len(rec) > 7 else None
    acked = rec[10] if len(rec) > 10 else 0
    return bool(closes) or acked == 1


#: How many ids of its collection queue one save looks at, besides twice the ids it adds.
COLLECT_PER_SAVE = 50


def collect(
    fields: dict[str, str], queue: dict[str, float], added: Collection[str], now: float, retention: float
) -> None:
    """One save's part of the collection (the in-memory stores'; the Redis save script does the same): queue the
    ``added`` ids at ``now``, then look at the oldest ids queued longer than ``retention`` ago, at most
    ``COLLECT_PER_SAVE + 2 * len(added)``: drop the fields of those ``collectable``, queue the others again."""
    for i in added:  # the queue is kept in the order ids were queued: the oldest first, so no save sorts it
        queue.pop(i, None)
        queue[i] = now
    cutoff = now - retention
    due = list(
        itertools.islice(
            itertools.takewhile(lambda kv: kv[1] <= cutoff, queue.items()), COLLECT_PER_SAVE + 2 * len(added)
        )
    )
    for i, _ in due:
        gone = collectable(fields, i)
        del queue[i]
        if gone is None:
            queue[i] = now  # looked at again later
            continue
        for name in gone:
            fields.pop(name, None)


def collectable(fields: Mapping[str, str], line_id: str) -> tuple[str, ...] | None:
    """The fields that may go once ``line_id`` has been in the collection queue longer than the retention (see the
    module docstring), or None while they must stay (a reply to a handoff still open). ``gatekeeper.redis_store``'s
    save script applies the same rule in Lua."""
    if f"o:{line_id}" in fields:  # a handoff: its own entries, once closed
        return entry_fields(line_id) if _closed(fields, line_id) else None
    line = fields.get(f"l:{line_id}")
    if line is None:
        return entry_fields(line_id)
    target = orjson.loads(line).get("re")
    if isinstance(target, str) and f"o:{target}" in fields and not _closed(fields, target):
        return None
    if isinstance(target, str) and f"r:{target}" in fields:  # an answer to a readback: to the readback's handoff
        ho = orjson.loads(fields[f"r:{target}"]).get("ho")
        if isinstance(ho, str) and f"o:{ho}" in fields and not _closed(fields, ho):
            return None
    return entry_fields(line_id)


def line_ids(msg: Message | None, raw: Mapping[str, Any] | None = None) -> set[str]:
    """The ids a line names, whose entries its decision may read: its own, its ``re=``, its ``ctx=``. For a line
    that did not parse, the id and ``re=`` its raw fields carry (its tombstone)."""
    out: set[str] = set()
    if msg is not None:
        out.add(msg.id)
        if msg.re:
            out.add(msg.re)
        ctx = msg.slots.get("ctx")
        if isinstance(ctx, str):
            out.add(ctx)
        elif isinstance(ctx, tuple):
            out.update(str(c) for c in ctx)
    elif raw is not None:
        out.update(v for k in ("id", "re") if isinstance(v := raw.get(k), str))
    return out


@dataclass(slots=True)
class ConversationState:
    """The loaded part of one conversation's state (see the module docstring), or the whole of a new one.

    ``dirty``: the fields ``apply`` changed since it was loaded; ``base_open``: the header's open count as loaded;
    ``open_at_load``: which loaded handoffs were open then; ``legacy``: it was converted from a version-1 document
    (the store deletes the document once the fields are written)."""

    lines: dict[str, LineEntry] = field(default_factory=dict)
    handoffs: dict[str, HandoffEntry] = field(default_factory=dict)
    readbacks: dict[str, ReadbackEntry] = field(default_factory=dict)
    tracker: ThreadTracker = field(default_factory=ThreadTracker)
    seq: int = 0  # lines fed to the thread (the whole conversation's count)
    base_open: int = 0
    open_at_load: frozenset[str] = frozenset()
    dirty: set[str] = field(default_factory=set)
    legacy: bool = False

    # ------------------------------------------------------------ open handoffs

    def is_open(self, ho: str) -> bool:
        h = self.handoffs.get(ho)
        if h is None or h.superseded_by is not None:
            return False
        flags = self.tracker.flags(ho)
        return flags is not None and not flags[0]

    def open_delta(self) -> int:
        """How the conversation's open count moved since the load: the loaded handoffs open now, less those open
        then (a handoff opens or closes only through a line that names it, so it is loaded)."""
        return sum(1 for h in self.handoffs if self.is_open(h)) - len(self.open_at_load)

    def open_count(self) -> int:
        return self.base_open + self.open_delta()

    def has_open_handoffs(self) -> bool:
        return self.open_count() > 0

    # ------------------------------------------------------------ fields

    def mark(self, *names: str) -> None:
        self.dirty.update(names)

    def mark_thread(self, *ids: str | None) -> None:
        """The thread records of these handoffs may have changed (those loaded or created)."""
        self.dirty.update(f"t:{i}" for i in ids if i is not None and i in self.handoffs)
        self.dirty.add(HEADER)

    def header(self) -> dict[str, Any]:
        return {"v": STATE_VERSION, "seq": self.seq, "open": self.open_count()}

    def field(self, name: str) -> str | None:
        """One field's value as stored (None: the entry does not exist)."""
        if name == HEADER:
            return _dumps(self.header())
        kind, key = name[:2], name[2:]
        if kind == "l:":
            line = self.lines.get(key)
            return None if line is None else _dumps(line.to_dict())
        if kind == "o:":
            ho = self.handoffs.get(key)
            return None if ho is None else _dumps(ho.to_dict())
        if kind == "r:":
            rb = self.readbacks.get(key)
            return None if rb is None else _dumps(rb.to_dict())
        if kind == "t:":
            rec = self.tracker.handoff_state(key)
            return None if rec is None else _dumps(rec)
        raise ValueError(f"not a state field: {name!r}")

    def changed_fields(self) -> dict[str, str]:
        """What a save writes: every field ``apply`` marked, and the header."""
        out = {HEADER: self.field(HEADER) or ""}
        for name in self.dirty:
            value = self.field(name)
            if value is not None:
                out[name] = value
        return out

    def collection(self) -> list[str]:
        """The ids a save puts in the collection queue: the lines it decided (not handoffs: those once closed), and
        the handoffs that are closed now among those it changed."""
        out = set()
        for name in self.dirty:
            kind, key = name[:2], name[2:]
            line = kind == "l:" and key not in self.handoffs
            if line or (kind in ("o:", "t:") and not self.is_open(key)):
                out.add(key)
        return sorted(out)

    def all_fields(self) -> dict[str, str]:
        names = [HEADER]
        for prefix, ids in (("l:", self.lines), ("o:", self.handoffs), ("r:", self.readbacks), ("t:", self.handoffs)):
            names.extend(prefix + i for i in ids)
        return {n: v for n in names if (v := self.field(n)) is not None}

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> ConversationState:
        """A state from stored fields (all of a conversation's, or the part a batch loaded). No header: a new
        conversation. Raises ValueError on another version."""
        head = orjson.loads(fields[HEADER]) if HEADER in fields else {"v": STATE_VERSION, "seq": 0, "open": 0}
        if head.get("v") != STATE_VERSION:
            raise ValueError(f"conversation state version {head.get('v')!r} is not {STATE_VERSION}")
        st = cls(seq=int(head["seq"]), base_open=int(head["open"]))
        threads = []
        for name, raw in fields.items():
            if name == EPOCH:
                continue
            kind, key = name[:2], name[2:]
            if kind == "l:":
                st.lines[key] = LineEntry.from_dict(orjson.loads(raw))
            elif kind == "o:":
                st.handoffs[key] = HandoffEntry.from_dict(key, orjson.loads(raw))
            elif kind == "r:":
                st.readbacks[key] = ReadbackEntry.from_dict(key, orjson.loads(raw))
            elif kind == "t:":
                threads.append(orjson.loads(raw))
        threads.sort(key=lambda rec: int(rec[0]))  # line order, as the whole tracker keeps them
        st.tracker = ThreadTracker.partial(threads, last_line=st.seq)
        st.open_at_load = frozenset(h for h in st.handoffs if st.is_open(h))
        return st

    def copy(self) -> ConversationState:
        """An independent copy (the guard of ``gatekeeper.processor`` rolls a line's effects back with it)."""
        st = ConversationState.from_fields(self.all_fields())
        st.base_open, st.open_at_load = self.base_open, self.open_at_load
        st.dirty, st.legacy = set(self.dirty), self.legacy
        return st

    # ------------------------------------------------------------ version 1: one document

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ConversationState:
        """A version-1 document (earlier releases), converted: the whole conversation, every field to be written."""
        if d.get("v") != 1:
            raise ValueError(f"conversation state document version {d.get('v')!r} is not 1")
        whole = ThreadTracker.from_state(d["tracker"])
        st = cls(
            lines={k: LineEntry.from_dict(e) for k, e in d["lines"].items()},
            handoffs={k: HandoffEntry.from_dict(k, e) for k, e in d["handoffs"].items()},
            readbacks={k: ReadbackEntry.from_dict(k, e) for k, e in d["readbacks"].items()},
            seq=int(d["seq"]),
            legacy=True,
        )
        records = [rec for h in st.handoffs if (rec := whole.handoff_state(h)) is not None]
        st.tracker = ThreadTracker.partial(records, last_line=st.seq)
        st.base_open = 0
        st.open_at_load = frozenset()  # counted from nothing: every open handoff is new to the header
        st.dirty = set(st.all_fields())
        return st
