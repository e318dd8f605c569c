"""Where conversation state, records and exec bindings live: a small Protocol, an in-memory store for tests and
``gatekeeper check``, and (in ``gatekeeper.redis_store``) the Redis store the daemon uses.

The Protocol is batch-shaped on purpose: one call loads everything a batch needs, one call writes what it changed.
A conversation's state is many small entries (``policy.state``): ``load`` takes, per conversation, the ids the
batch's lines name and returns only the entries those lines' decisions can read (``policy.state.wanted_fields``);
``save`` writes only the entries that changed.

``LifecycleStore`` adds what the handoff lifecycle's sweeper needs (``gatekeeper.sweeper``): the deadline indexes,
bucketed by input partition, and the cancel intents that make one cancel per handoff. ``save`` writes a batch's
index changes (``policy.lifecycle.IndexEntry``) in the same round trip as the states.
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import Collection, Mapping, MutableMapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, Protocol

from gatekeeper.errors import GatekeeperError, Unavailable
from gatekeeper.policy import BindingChange, ConversationState, Record, RecordKey
from gatekeeper.policy.lifecycle import IndexEntry
from gatekeeper.policy.state import EPOCH, collect, wanted_fields

#: What a batch loads of one conversation: the ids its lines name (``policy.state.line_ids``), or None for the
#: whole conversation (the operator's commands, ``gatekeeper handoffs``).
Wants = Mapping[str, Collection[str] | None]


class StoreError(Unavailable):
    """The store cannot be reached or answered wrongly: infrastructure trouble, never a bad line."""


class Fenced(StoreError):
    """A state write refused: a newer owner of the conversation's input partition wrote it (a higher epoch). This
    instance lost the partition in a rebalance and has not noticed yet: its batch must not land."""

    def __init__(self, message: str, conversations: Collection[str]) -> None:
        super().__init__(message)
        self.conversations = tuple(conversations)


class DataLost(StoreError):
    """Redis answers but is not the Redis this instance started on: its generation marker (``<prefix>:generation``)
    is missing or different, so it restarted without persistence, was flushed, or failed over to an empty replica.
    Its states, records and exec bindings are gone: nothing may be decided against it (an approval already used
    could be used again). Never recovers by itself: an operator restores the data and runs
    ``gatekeeper redis accept-loss``, then restarts the gatekeepers."""

    def __init__(self, message: str, expected: str | None = None, found: str | None = None) -> None:
        super().__init__(message)
        self.expected = expected
        self.found = found


class RecordExists(GatekeeperError):
    """A record for (item, ask) is already loaded; supersede it explicitly."""


@dataclass(slots=True)
class Loaded:
    """What a batch reads: conversation states (new ones for conversations never seen), records, bindings."""

    states: dict[str, ConversationState] = field(default_factory=dict)
    records: dict[RecordKey, Record] = field(default_factory=dict)
    bindings: dict[RecordKey, str] = field(default_factory=dict)


IndexKind = Literal["due", "open", "lapsed"]
INDEX_KINDS: tuple[IndexKind, ...] = ("due", "open", "lapsed")


@dataclass(frozen=True, slots=True)
class Indexed:
    """One member of a lifecycle index: a handoff of a conversation, and its score (epoch seconds: the next deadline,
    when it was forwarded, or when the gatekeeper acted on it)."""

    partition: int
    conversation: str
    ho: str
    score: float


@dataclass(frozen=True, slots=True)
class DueView:
    """What one sweep of one (route, partition) reads in one round trip: the handoffs whose deadline passed (earliest
    first), how many handoffs are open, and the oldest open one."""

    due: list[Indexed]
    open_count: int
    oldest: Indexed | None


@dataclass(frozen=True, slots=True)
class CancelIntent:
    """A cancel the sweeper started, recorded before its CX is published and marked done once it is acknowledged.

    ``line`` is the exact CX; ``topic``/``partition`` where it goes; ``offset`` the end of that partition before it
    was published (recovery looks for the line from there). ``owner`` is the sweeper holding it, ``token`` a fencing
    number that grows with every takeover, ``at`` when it was claimed or taken over (the sweeper's clock).
    """

    cx: str
    line: str
    why: str
    topic: str
    partition: int
    offset: int
    owner: str
    token: int
    at: float
    done: bool = False
    published: int | None = None  # the offset the CX was acknowledged at (or found at)

    def fields(self) -> dict[str, str]:
        """As flat string fields (a Redis hash)."""
        out = {k: json.dumps(v) if not isinstance(v, str) else v for k, v in asdict(self).items() if v is not None}
        out["done"] = "1" if self.done else "0"
        return out

    @classmethod
    def from_fields(cls, d: Mapping[str, str]) -> CancelIntent:
        def num(k: str) -> Any:
            return json.loads(d[k])

        return cls(
            cx=d["cx"],
            line=d["line"],
            why=d["why"],
            topic=d["topic"],
            partition=int(num("partition")),
            offset=int(num("offset")),
            owner=d["owner"],
            token=int(num("token")),
            at=float(num("at")),
            done=d.get("done") == "1",
            published=int(num("published")) if d.get("published") not in (None, "null") else None,
        )


class BatchStore(Protocol):
    """What deciding a batch uses of the store (``processor.Processor``): one load, one save, and giving back claims
    a batch decided again no longer holds."""

    async def load(self, route: str, wants: Wants, keys: Collection[RecordKey]) -> Loaded:
        """One round trip: per conversation of ``wants`` on ``route``, the part of its state the named ids need
        (all of it for None; a new, empty state for a conversation never seen), and the records and bindings of
        ``keys``."""
        ...

    async def claim(self, changes: Sequence[BindingChange]) -> list[BindingChange]:
        """Apply binding changes with compare-and-set (each applies only if the binding still is ``before``).
        Returns the changes that did not apply: another handoff changed that binding first."""
        ...

    async def save(
        self,
        route: str,
        states: Mapping[str, ConversationState],
        deadlines: Sequence[IndexEntry] = (),
        fences: Mapping[str, int] | None = None,
        now: float | None = None,
        claims: Sequence[BindingChange] = (),
    ) -> list[BindingChange]:
        """One round trip on a single Redis (two on a cluster when ``claims`` is not empty): apply the batch's
        binding changes ``claims`` as ``claim`` does and, unless one that binds conflicted (``blocking``: then
        nothing else is written, and the batch must be decided again), write the entries the batch changed in
        these conversations (``changed_fields``), renew their retention, collect what is older than the retention
        (``policy.state.collect``, at ``now``: the decisions' time; the store's clock when None), and write the
        lifecycle index entries of their handoffs (``deadlines``: an open entry is added or moved, a closed one
        leaves the open and deadline indexes; an entry with ``lapsed_at`` is in the lapsed index).

        ``fences``: per conversation, the writer's epoch on its input partition (``take_epochs``). A conversation
        last written under a higher epoch is not written, and ``Fenced`` is raised naming it (the other
        conversations of the call are written: their writer still owns them).

        Returns the changes of ``claims`` that did not apply."""
        ...


class Store(BatchStore, Protocol):
    """The store: a batch's load and save, the owner epochs, the records, the bindings, the health probe."""

    async def take_epochs(self, route: str, partitions: Collection[int]) -> dict[int, int]:
        """A new owner epoch for each of these input partitions (one round trip), taken when they are assigned:
        higher than any taken before for that partition, by any instance."""
        ...

    async def put_record(self, record: Record, *, supersede: bool = False) -> None:
        """Load an approved record. Raises ``RecordExists`` unless ``supersede``."""
        ...

    async def get_records(self, item: str, ask: str | None = None) -> list[Record]: ...

    async def delete_records(self, item: str, ask: str | None = None) -> int: ...

    async def binding(self, key: RecordKey) -> str | None: ...

    async def ping(self) -> bool:
        """True when the store answers; raises ``StoreError`` when it cannot be reached (readiness), ``DataLost``
        when its generation marker is not the one ``ensure_generation`` (of the daemon's stores) found."""
        ...


class LifecycleStore(Store, Protocol):
    """The Store plus what the sweeper needs. ``RedisStore`` and ``MemoryStore`` implement it."""

    async def due_view(
        self, route: str, partitions: Collection[int], now: float, limit: int, *, forget_lapsed_before: float | None
    ) -> dict[int, DueView]:
        """One round trip: per partition, the handoffs whose deadline is at or before ``now`` (at most ``limit``),
        the open count and the oldest open handoff. Lapsed entries older than ``forget_lapsed_before`` are dropped."""
        ...

    async def index(self, route: str | None, kind: IndexKind) -> list[tuple[str, Indexed]]:
        """Every member of one index, of one route or all (``gatekeeper handoffs list``): (route, member)."""
        ...

    async def index_head(
        self, route: str, kind: IndexKind, partitions: Collection[int], limit: int, *, newest: bool = False
    ) -> list[Indexed]:
        """At most ``limit`` members of one index of these partitions of ``route``, the lowest scores first (the
        highest first with ``newest``): the console's bounded read, one ZRANGE per partition and no SCAN."""
        ...

    async def index_size(self, route: str, kind: IndexKind, partitions: Collection[int]) -> int:
        """How many members one index of these partitions of ``route`` has (ZCARD of each)."""
        ...

    async def intents(self, route: str, keys: Collection[tuple[str, str]]) -> dict[tuple[str, str], CancelIntent]:
        """One round trip: the cancel intents of these (conversation, handoff) pairs that exist."""
        ...

    async def claim_cancel(self, route: str, conversation: str, ho: str, intent: CancelIntent) -> CancelIntent | None:
        """Record ``intent`` unless one exists (atomically). None: recorded (or already recorded, the same intent: a
        retried claim); else the intent that was there."""
        ...

    async def take_over_cancel(
        self, route: str, conversation: str, ho: str, seen_token: int, owner: str, at: float
    ) -> CancelIntent | None:
        """Take a pending intent over: only if its token still is ``seen_token`` (nobody took it meanwhile) and it
        is not done. Returns the intent as taken (owner, token + 1, at), or None when another sweeper got there."""
        ...

    async def finish_cancel(self, route: str, conversation: str, ho: str, published: int) -> None:
        """Mark the intent done: its CX is on the topic at offset ``published``."""
        ...


def pick(stored: Mapping[str, str], names: Collection[str]) -> dict[str, str]:
    """The fields among ``names`` that ``stored`` has (the in-memory stores' ``HMGET``)."""
    return {n: stored[n] for n in names if n in stored}


def blocking(conflicts: Sequence[BindingChange]) -> bool:
    """Whether conflicts of a batch's binding changes stop its writes: one that binds does (another handoff bound
    that approval first); a release that finds the binding no longer the handoff's has nothing to release."""
    return any(c.after is not None for c in conflicts)


def claim_in_memory(
    bindings: MutableMapping[RecordKey, str | None], changes: Sequence[BindingChange]
) -> list[BindingChange]:
    """``Store.claim`` over a dict of bindings: each change applies when the binding is still what it expected (or
    already what it wants), else it is a conflict. An ``after`` of None unbinds, kept as None (known unbound). The
    Redis store's Lua does the same, atomically."""
    conflicts = []
    for ch in changes:
        current = bindings.get(ch.key)
        if current != ch.before and current != ch.after:
            conflicts.append(ch)
        else:
            bindings[ch.key] = ch.after
    return conflicts


class MemoryStore:
    """The Store in a process's memory: for unit tests, ``gatekeeper check`` and dry runs. States are kept as their
    fields, serialised, so a test sees exactly what the Redis store would round-trip, and loads only what a batch
    names, as the Redis store does."""

    def __init__(self, retention_seconds: float = 7 * 86400) -> None:
        self.retention_seconds = retention_seconds
        self._states: dict[tuple[str, str], dict[str, str]] = {}
        self._queues: dict[tuple[str, str], dict[str, float]] = {}  # the collection queue of each conversation
        self._records: dict[RecordKey, Record] = {}
        self._bindings: dict[RecordKey, str | None] = {}
        self._index: dict[tuple[str, int, IndexKind], dict[tuple[str, str], float]] = {}
        self._intents: dict[tuple[str, str, str], CancelIntent] = {}
        self._epochs: dict[tuple[str, int], int] = {}
        self.generation: str | None = None  # the marker "in Redis" (None: never written, or lost)
        self._expected: str | None = None  # the marker this store started on (``ensure_generation``)

    # ------------------------------------------------------------ the generation marker (tests: ``lose_data``)

    async def ensure_generation(self, *, create: bool = True) -> str | None:
        """The generation marker, written at first use (as ``RedisStore.ensure_generation``)."""
        if self.generation is None:
            if not create:
                self._expected = ""
                return None
            self.generation = uuid.uuid4().hex
        self._expected = self.generation
        return self.generation

    async def epochs_exist(self, route: str, partitions: Collection[int]) -> bool:
        return any((route, p) in self._epochs for p in partitions)

    def lose_data(self) -> None:
        """Simulate a Redis that restarted without persistence (tests): everything and the marker are gone."""
        for kept in (self._states, self._queues, self._records, self._bindings, self._index, self._intents):
            kept.clear()
        self._epochs.clear()
        self.generation = None

    def _check(self) -> None:
        if self._expected is not None and self.generation != self._expected:
            raise DataLost("redis lost its data: the generation marker is missing", self._expected, self.generation)

    async def load(self, route: str, wants: Wants, keys: Collection[RecordKey]) -> Loaded:
        self._check()
        loaded = Loaded()
        for conv, ids in wants.items():
            stored = self._states.get((route, conv), {})
            fields = dict(stored) if ids is None else wanted_fields(ids, functools.partial(pick, stored))
            loaded.states[conv] = ConversationState.from_fields(fields)
        for key in keys:
            if key in self._records:
                loaded.records[key] = self._records[key]
            bound = self._bindings.get(key)
            if bound is not None:
                loaded.bindings[key] = bound
        return loaded

    async def claim(self, changes: Sequence[BindingChange]) -> list[BindingChange]:
        self._check()
        return claim_in_memory(self._bindings, changes)

    async def take_epochs(self, route: str, partitions: Collection[int]) -> dict[int, int]:
        out = {}
        for p in partitions:
            out[p] = self._epochs[(route, p)] = self._epochs.get((route, p), 0) + 1
        return out

    async def save(
        self,
        route: str,
        states: Mapping[str, ConversationState],
        deadlines: Sequence[IndexEntry] = (),
        fences: Mapping[str, int] | None = None,
        now: float | None = None,
        claims: Sequence[BindingChange] = (),
    ) -> list[BindingChange]:
        self._check()
        conflicts = claim_in_memory(self._bindings, claims)
        if blocking(conflicts):
            return conflicts
        at = time.time() if now is None else now
        refused = []
        for conv, state in states.items():
            stored = self._states.setdefault((route, conv), {})
            epoch = None if fences is None else fences.get(conv)
            if epoch is not None:
                if int(stored.get(EPOCH, "0")) > epoch:
                    refused.append(conv)
                    continue
                stored[EPOCH] = str(epoch)
            stored.update(state.changed_fields())
            queue = self._queues.setdefault((route, conv), {})
            collect(stored, queue, state.collection(), at, self.retention_seconds)
        index_refused = 0
        for e in deadlines:
            epoch = None if fences is None else fences.get(e.conversation)
            if epoch is not None and self._epochs.get((route, e.partition), 0) > epoch:
                index_refused += 1  # as the Redis index script: the partition's epoch moved on
                continue
            member = (e.conversation, e.ho)
            due = self._index.setdefault((route, e.partition, "due"), {})
            opened = self._index.setdefault((route, e.partition, "open"), {})
            if e.due_at is not None:  # an open handoff's next deadline, or a pending question's by=
                due[member] = e.due_at
            else:
                due.pop(member, None)
            if e.open:
                opened[member] = e.opened_at if e.opened_at is not None else 0.0
            else:
                opened.pop(member, None)
            if e.lapsed_at is not None:
                self._index.setdefault((route, e.partition, "lapsed"), {})[member] = e.lapsed_at
        if refused or index_refused:
            raise Fenced(f"a newer owner wrote {len(refused)} conversation(s) of this batch", refused)
        return conflicts

    async def due_view(
        self, route: str, partitions: Collection[int], now: float, limit: int, *, forget_lapsed_before: float | None
    ) -> dict[int, DueView]:
        out: dict[int, DueView] = {}
        for p in partitions:
            due = self._index.get((route, p, "due"), {})
            opened = self._index.get((route, p, "open"), {})
            lapsed = self._index.get((route, p, "lapsed"), {})
            if forget_lapsed_before is not None:
                for m in [m for m, t in lapsed.items() if t < forget_lapsed_before]:
                    del lapsed[m]
            ready = sorted((t, m) for m, t in due.items() if t <= now)[:limit]
            oldest = min(((t, m) for m, t in opened.items()), default=None)
            out[p] = DueView(
                due=[Indexed(p, m[0], m[1], t) for t, m in ready],
                open_count=len(opened),
                oldest=None if oldest is None else Indexed(p, oldest[1][0], oldest[1][1], oldest[0]),
            )
        return out

    async def index(self, route: str | None, kind: IndexKind) -> list[tuple[str, Indexed]]:
        out: list[tuple[str, Indexed]] = []
        for (r, p, k), members in sorted(self._index.items()):
            if k == kind and (route is None or r == route):
                out.extend((r, Indexed(p, m[0], m[1], t)) for m, t in sorted(members.items(), key=lambda kv: kv[1]))
        return out

    async def index_head(
        self, route: str, kind: IndexKind, partitions: Collection[int], limit: int, *, newest: bool = False
    ) -> list[Indexed]:
        out = [
            Indexed(p, m[0], m[1], t)
            for (r, p, k), members in self._index.items()
            if r == route and k == kind and p in partitions
            for m, t in members.items()
        ]
        out.sort(key=lambda m: m.score, reverse=newest)
        return out[:limit]

    async def index_size(self, route: str, kind: IndexKind, partitions: Collection[int]) -> int:
        return sum(len(m) for (r, p, k), m in self._index.items() if r == route and k == kind and p in partitions)

    async def intents(self, route: str, keys: Collection[tuple[str, str]]) -> dict[tuple[str, str], CancelIntent]:
        return {k: i for k in keys if (i := self._intents.get((route, *k))) is not None}

    async def claim_cancel(self, route: str, conversation: str, ho: str, intent: CancelIntent) -> CancelIntent | None:
        existing = self._intents.get((route, conversation, ho))
        if existing is not None:
            return None if existing == intent else existing
        self._intents[(route, conversation, ho)] = intent
        return None

    async def take_over_cancel(
        self, route: str, conversation: str, ho: str, seen_token: int, owner: str, at: float
    ) -> CancelIntent | None:
        cur = self._intents.get((route, conversation, ho))
        if cur is None or cur.token != seen_token or cur.done:
            return None
        new = replace(cur, owner=owner, token=cur.token + 1, at=at)
        self._intents[(route, conversation, ho)] = new
        return new

    async def finish_cancel(self, route: str, conversation: str, ho: str, published: int) -> None:
        cur = self._intents.get((route, conversation, ho))
        if cur is not None:
            self._intents[(route, conversation, ho)] = replace(cur, done=True, published=published)

    async def put_record(self, record: Record, *, supersede: bool = False) -> None:
        if record.key in self._records and not supersede:
            raise RecordExists(f"a record for item {record.item} ask {record.ask} exists; supersede it explicitly")
        self._records[record.key] = record

    async def get_records(self, item: str, ask: str | None = None) -> list[Record]:
        return [r for k, r in sorted(self._records.items(), key=lambda kv: kv[0].ask) if _match(k, item, ask)]

    async def delete_records(self, item: str, ask: str | None = None) -> int:
        doomed = [k for k in self._records if _match(k, item, ask)]
        for k in doomed:
            del self._records[k]
        return len(doomed)

    async def binding(self, key: RecordKey) -> str | None:
        return self._bindings.get(key)

    async def ping(self) -> bool:
        self._check()
        return True

    def state(self, route: str, conversation: str) -> ConversationState | None:
        """A whole conversation's state (tests), or None when it was never written."""
        raw = self._states.get((route, conversation))
        return None if raw is None else ConversationState.from_fields(raw)

    def fields(self, route: str, conversation: str) -> dict[str, str]:
        """A conversation's stored fields, as written (tests)."""
        return dict(self._states.get((route, conversation), {}))


def _match(key: RecordKey, item: str, ask: str | None) -> bool:
    return key.item == item and (ask is None or key.ask == ask)
