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
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import msgspec
import orjson

from rwcore import Message, Problem, ThreadTracker, _native
from rwcore._codec import native_problems

STATE_VERSION = 2  # the per-entry form; 1 was one JSON document per conversation
HEADER = "h"
EPOCH = "e"  # the owner epoch of the last write (``store.Store.save``'s fence); not part of the decision's state
_KINDS = ("l:", "o:", "r:", "t:")


class RecordKey(msgspec.Struct, frozen=True, gc=False):
    """Records are keyed by (item, ask): one approval per act."""

    item: str
    ask: str

    def __str__(self) -> str:
        return f"{self.item}|{self.ask}"


class Record(msgspec.Struct, frozen=True, gc=False):
    """An approved record, written by the approving system.

    ``values`` are the values the handoff must carry, as written on the line (``to``, ``ask`` and the profile's
    slots; ``item`` may be among them). ``resolved`` are values the receiver resolves itself (the account on file,
    ``prev``): the readback and the done report must match them. ``expect_acc`` are the sender's withheld criteria
    for a comprehension readback. ``signature`` is the approving system's signature of all of that
    (``gatekeeper.approvals``: ``v1 <approver key id> <signature>``), None when unsigned.

    A struct, so that a record read from Redis is decoded straight into one (its stored form is ``to_dict``'s, the
    signature under ``sig``); a stored record whose fields are of other types is read by ``from_dict``, which turns
    them into these, as every record was read before.
    """

    item: str
    ask: str
    values: Mapping[str, Any]
    resolved: Mapping[str, str] = {}
    expect_acc: tuple[str, ...] | None = None
    signature: str | None = msgspec.field(default=None, name="sig")

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


class ReadbackEntry(msgspec.Struct):
    id: str
    ho: str
    passed: bool
    exp: str | None = None
    refused: bool = False  # a negative answer: this readback can no longer be cleared


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


_T = TypeVar("_T")


def _line(raw: tuple[Any, ...]) -> LineEntry:
    digest, typ, verdict, reason, at, re_, problems, text, answered, unanswered_at = raw
    return LineEntry(
        digest=digest,
        type=typ,
        verdict=verdict,
        reason=reason,
        at=at,
        re=re_,
        problems=tuple(native_problems(problems)),
        text=text,
        answered=answered,
        unanswered_at=unanswered_at,
    )


def _handoff(hid: str, raw: tuple[Any, ...]) -> HandoffEntry:
    (item, ask, exec_ask, rec, bound, holder, superseded_by, relay_of, relayed_by, cleared_by, passed_rb) = raw[:11]
    gk_cancel, gk_cancel_why, gk_cancel_at, overdue, overdue_at = raw[11:]
    record = None
    if rec is not None:
        r_item, r_ask, values, resolved, expect_acc, signature = rec
        record = Record(r_item, r_ask, values, resolved, expect_acc, signature)
    return HandoffEntry(
        id=hid,
        item=item,
        ask=ask,
        exec_ask=exec_ask,
        record=record,
        bound=bound,
        holder=holder,
        superseded_by=superseded_by,
        relay_of=relay_of,
        relayed_by=relayed_by,
        cleared_by=cleared_by,
        passed_rb=passed_rb,
        gk_cancel=gk_cancel,
        gk_cancel_why=gk_cancel_why,
        gk_cancel_at=gk_cancel_at,
        overdue=overdue,
        overdue_at=overdue_at,
    )


def _readback(rid: str, raw: tuple[Any, ...]) -> ReadbackEntry:
    ho, passed, exp, refused = raw
    return ReadbackEntry(id=rid, ho=ho, passed=passed, exp=exp, refused=refused)


_MISSING: Any = object()


class _Entries(Mapping[str, _T]):
    """The state's entries of one kind, read-only, each made into the policy's value on first read (the state
    changes only through ``apply``, which forgets what was made)."""

    __slots__ = ("_kind", "_make", "_memo", "_read", "_s")

    def __init__(self, s: _native.State, kind: str, read: Callable[[str], Any], make: Callable[[str, Any], _T]) -> None:
        self._s, self._kind, self._read, self._make = s, kind, read, make
        self._memo: dict[str, _T] = {}

    def __getitem__(self, key: str) -> _T:
        hit = self._memo.get(key, _MISSING)
        if hit is _MISSING:
            raw = self._read(key) if isinstance(key, str) else None
            if raw is None:
                raise KeyError(key)
            hit = self._memo[key] = self._make(key, raw)
        return hit  # type: ignore[no-any-return]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and (key in self._memo or self._s.has(self._kind, key))

    def __iter__(self) -> Iterator[str]:
        return iter(self._s.ids(self._kind))

    def __len__(self) -> int:
        return self._s.count(self._kind)

    def __repr__(self) -> str:
        return repr(dict(self.items()))

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, _T]:
        """A snapshot: a dict of copies of the entries."""
        return {k: msgspec.structs.replace(v) for k, v in self.items()}  # type: ignore[type-var]


class ConversationState:
    """The loaded part of one conversation's state (see the module docstring), or the whole of a new one.

    The entries are held natively (``rwcore._native.State``, the engine's ``state.rs``): the decision reads them
    there, ``apply`` changes them there, and a save writes the fields they changed in the bytes the gatekeeper has
    always written. ``lines``, ``handoffs`` and ``readbacks`` are read-only mappings of the policy's values, and
    ``tracker`` a copy of the thread tracker of the loaded handoffs, for the Python readers (the lifecycle, the
    sweeper, the HTTP API and the console).

    ``dirty``: the fields ``apply`` changed since it was loaded; ``base_open``: the header's open count as loaded;
    ``open_at_load``: which loaded handoffs were open then; ``legacy``: it was converted from a version-1 document
    (the store deletes the document once the fields are written)."""

    __slots__ = ("_handoffs", "_lines", "_readbacks", "_tracker", "native")

    def __init__(self, _state: _native.State | None = None) -> None:
        #: the native state, for the engine to read (to change it: ``changing``)
        self.native = _state if _state is not None else _native.State()
        self._forget()

    def _forget(self) -> None:
        self._lines: _Entries[LineEntry] | None = None
        self._handoffs: _Entries[HandoffEntry] | None = None
        self._readbacks: _Entries[ReadbackEntry] | None = None
        self._tracker: ThreadTracker | None = None

    def changing(self) -> _native.State:
        """The native state, to change (``policy.apply`` only): what the readers made of it is forgotten."""
        self._forget()
        return self.native

    # ------------------------------------------------------------ the entries

    @property
    def lines(self) -> Mapping[str, LineEntry]:
        if self._lines is None:
            self._lines = _Entries(self.native, "l", self.native.line, lambda _k, raw: _line(raw))
        return self._lines

    @property
    def handoffs(self) -> Mapping[str, HandoffEntry]:
        if self._handoffs is None:
            self._handoffs = _Entries(self.native, "o", self.native.handoff, _handoff)
        return self._handoffs

    @property
    def readbacks(self) -> Mapping[str, ReadbackEntry]:
        if self._readbacks is None:
            self._readbacks = _Entries(self.native, "r", self.native.readback, _readback)
        return self._readbacks

    @property
    def tracker(self) -> ThreadTracker:
        if self._tracker is None:
            self._tracker = ThreadTracker(self.native.tracker())
        return self._tracker

    @property
    def seq(self) -> int:
        """Lines fed to the thread (the whole conversation's count)."""
        return self.native.seq

    @property
    def base_open(self) -> int:
        return self.native.base_open

    @property
    def open_at_load(self) -> frozenset[str]:
        return self.native.open_at_load

    @property
    def dirty(self) -> set[str]:
        return self.native.dirty

    @property
    def legacy(self) -> bool:
        return self.native.legacy

    # ------------------------------------------------------------ open handoffs

    def is_open(self, ho: str) -> bool:
        return self.native.is_open(ho)

    def open_delta(self) -> int:
        """How the conversation's open count moved since the load: the loaded handoffs open now, less those open
        then (a handoff opens or closes only through a line that names it, so it is loaded)."""
        return self.native.open_delta()

    def open_count(self) -> int:
        return self.native.open_count()

    def has_open_handoffs(self) -> bool:
        return self.open_count() > 0

    # ------------------------------------------------------------ fields

    def field(self, name: str) -> str | None:
        """One field's value as stored (None: the entry does not exist). ValueError: not a state field."""
        return self.native.field(name)

    def changed_fields(self) -> dict[str, str]:
        """What a save writes: every field ``apply`` marked, and the header."""
        return self.native.changed_fields()

    def save_args(
        self, epoch: int | None, ttl_open: int, ttl: int, now: str, oldest: str, collect_per_save: int, *, json: bool
    ) -> Any:
        """What the Redis save sends of this conversation after its keys, in the save script's order (the epoch,
        the TTL: ``ttl_open`` while a handoff is open, the legacy flag, the scores ``now`` and ``oldest``, how many
        entries to collect, the ids queued, the changed fields): JSON bytes (``json``) or a list."""
        return self.native.save_args(epoch, ttl_open, ttl, now, oldest, collect_per_save, json)

    def collection(self) -> list[str]:
        """The ids a save puts in the collection queue: the lines it decided (not handoffs: those once closed), and
        the handoffs that are closed now among those it changed."""
        return self.native.collection()

    def all_fields(self) -> dict[str, str]:
        return self.native.all_fields()

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> ConversationState:
        """A state from stored fields (all of a conversation's, or the part a batch loaded). No header: a new
        conversation. Raises ValueError on another version, or on an entry that does not read."""
        return cls(_native.State.from_fields(fields))

    @classmethod
    def from_reply(cls, reply: list[bytes | str]) -> ConversationState:
        """``from_fields`` of a Redis reply as it comes (names and values alternating, ``bytes``), without a dict of
        decoded strings made first. Raises ValueError as ``from_fields`` does, and on a name or value not UTF-8 or
        a reply of an odd length."""
        return cls(_native.State.from_reply(reply))

    def copy(self) -> ConversationState:
        """An independent copy (the guard of ``gatekeeper.processor`` rolls a line's effects back with it)."""
        return ConversationState(self.native.copy())

    def __copy__(self) -> ConversationState:
        return self.copy()

    def __deepcopy__(self, memo: dict[int, Any]) -> ConversationState:
        return self.copy()

    # ------------------------------------------------------------ version 1: one document

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ConversationState:
        """A version-1 document (earlier releases), converted: the whole conversation, every field to be written.
        Its entries are in the form of the fields'."""
        if d.get("v") != 1:
            raise ValueError(f"conversation state document version {d.get('v')!r} is not 1")
        whole = ThreadTracker.from_state(d["tracker"])
        fields = {HEADER: _dumps({"v": STATE_VERSION, "seq": int(d["seq"]), "open": 0})}
        for prefix, entries in (("l:", d["lines"]), ("o:", d["handoffs"]), ("r:", d["readbacks"])):
            fields.update((prefix + k, _dumps(e)) for k, e in entries.items())
        for h in d["handoffs"]:
            rec = whole.handoff_state(h)
            if rec is not None:
                fields["t:" + h] = _dumps(rec)
        s = _native.State.from_fields(fields)
        s.base_open = 0
        s.set_open_at_load([])  # counted from nothing: every open handoff is new to the header
        s.legacy = True
        s.mark_all()
        return cls(s)
