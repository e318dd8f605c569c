"""Where conversation state, records and exec bindings live: a small Protocol, an in-memory store for tests and
``gatekeeper check``, and (in ``gatekeeper.redis_store``) the Redis store the daemon uses.

The Protocol is batch-shaped on purpose: one call loads everything a batch needs, one call writes what it changed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gatekeeper.policy import BindingChange, ConversationState, Record, RecordKey


class StoreError(Exception):
    """The store cannot be reached or answered wrongly: infrastructure trouble, never a bad line."""


class RecordExists(Exception):
    """A record for (item, ask) is already loaded; supersede it explicitly."""


@dataclass(slots=True)
class Loaded:
    """What a batch reads: conversation states (new ones for conversations never seen), records, bindings."""

    states: dict[str, ConversationState] = field(default_factory=dict)
    records: dict[RecordKey, Record] = field(default_factory=dict)
    bindings: dict[RecordKey, str] = field(default_factory=dict)


class Store(Protocol):
    async def load(self, route: str, conversations: Collection[str], keys: Collection[RecordKey]) -> Loaded:
        """One round trip: the states of ``conversations`` on ``route``, and the records and bindings of ``keys``."""
        ...

    async def claim(self, changes: Sequence[BindingChange]) -> list[BindingChange]:
        """Apply binding changes with compare-and-set (each applies only if the binding still is ``before``).
        Returns the changes that did not apply: another handoff changed that binding first."""
        ...

    async def save(self, route: str, states: Mapping[str, ConversationState]) -> None:
        """One round trip: write the states of the conversations a batch changed."""
        ...

    async def put_record(self, record: Record, *, supersede: bool = False) -> None:
        """Load an approved record. Raises ``RecordExists`` unless ``supersede``."""
        ...

    async def get_records(self, item: str, ask: str | None = None) -> list[Record]: ...

    async def delete_records(self, item: str, ask: str | None = None) -> int: ...

    async def binding(self, key: RecordKey) -> str | None: ...

    async def ping(self) -> bool:
        """True when the store answers; raises ``StoreError`` when it cannot be reached (readiness)."""
        ...


class MemoryStore:
    """The Store in a process's memory: for unit tests, ``gatekeeper check`` and dry runs. States are kept as their
    serialised form, so a test sees exactly what the Redis store would round-trip."""

    def __init__(self) -> None:
        self._states: dict[tuple[str, str], dict[str, object]] = {}
        self._records: dict[RecordKey, Record] = {}
        self._bindings: dict[RecordKey, str] = {}

    async def load(self, route: str, conversations: Collection[str], keys: Collection[RecordKey]) -> Loaded:
        loaded = Loaded()
        for conv in conversations:
            raw = self._states.get((route, conv))
            loaded.states[conv] = ConversationState() if raw is None else ConversationState.from_dict(raw)
        for key in keys:
            if key in self._records:
                loaded.records[key] = self._records[key]
            if key in self._bindings:
                loaded.bindings[key] = self._bindings[key]
        return loaded

    async def claim(self, changes: Sequence[BindingChange]) -> list[BindingChange]:
        conflicts = []
        for ch in changes:
            current = self._bindings.get(ch.key)
            if current != ch.before and current != ch.after:
                conflicts.append(ch)
                continue
            if ch.after is None:
                self._bindings.pop(ch.key, None)
            else:
                self._bindings[ch.key] = ch.after
        return conflicts

    async def save(self, route: str, states: Mapping[str, ConversationState]) -> None:
        for conv, state in states.items():
            self._states[(route, conv)] = state.to_dict()

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
        return True

    def state(self, route: str, conversation: str) -> ConversationState | None:
        raw = self._states.get((route, conversation))
        return None if raw is None else ConversationState.from_dict(raw)


def _match(key: RecordKey, item: str, ask: str | None) -> bool:
    return key.item == item and (ask is None or key.ask == ask)
