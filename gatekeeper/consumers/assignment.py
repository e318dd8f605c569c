"""The assignment: the input partitions this instance holds, the owner epoch it took for each (its writes to a
partition's conversations are fenced by it: an instance that lost the partition cannot write over its new owner),
and, exactly-once, when each was opened again (a line read before that may come from a stale offset).

It owns what the group's rebalances change, and nothing of the batch: the worker (``consumers.loop``) tells it what
was assigned or revoked, and asks it which partitions and lines are still its own.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from typing import Any, Protocol

from gatekeeper.consumers.deciding import RouteRuntime
from gatekeeper.consumers.holds import TP
from gatekeeper.store import StoreError

log = logging.getLogger("gatekeeper.consumers.loop")  # the worker's logger: operators filter on it


class EpochStore(Protocol):
    async def take_epochs(self, route: str, partitions: Collection[int]) -> dict[int, int]: ...


class Assignment:
    """The partitions held, their owner epochs (kept on each route's processor, which writes with them) and their
    open-generations."""

    def __init__(self, routes: Mapping[str, RouteRuntime]) -> None:
        self._routes = routes
        self.partitions: set[TP] = set()
        self._unfenced: set[TP] = set()  # held, with no owner epoch taken yet (Redis was down, or not checked yet)
        #: exactly-once: each open of a partition's producer counts a generation; a batch read before its
        #: partition's last open may hold lines from a stale offset (the fenced owner's last transaction may have
        #: moved it), and drops them: they are read again
        self.generation = 0
        self._reopened: dict[TP, int] = {}
        #: the generation marker was checked at startup: owner epochs may be taken (they mark history)
        self.settled = False

    def __len__(self) -> int:
        return len(self.partitions)

    def __contains__(self, tp: object) -> bool:
        return tp in self.partitions

    def assign(self, tps: Iterable[TP]) -> set[TP]:
        """The group's new assignment: every partition in it needs an owner epoch taken afresh (a partition given
        back to this instance gets a new one: the old one is stale). Returns the partitions."""
        self.partitions = set(tps)
        for name, rt in self._routes.items():
            for p in [p for p in rt.processor.epochs if (name, p) in self.partitions]:
                del rt.processor.epochs[p]
        self._unfenced = set(self.partitions)
        return self.partitions

    def revoke(self, tps: Collection[TP]) -> None:
        """Partitions given away: their epochs are forgotten (writes to them are no longer this instance's)."""
        for topic, partition in tps:
            if topic in self._routes:
                self._routes[topic].processor.epochs.pop(partition, None)
        self.partitions -= set(tps)

    async def take_epochs(self, store: EpochStore) -> None:
        """Take the owner epoch of every held partition that has none yet (one round trip per route). Raises
        ``StoreError``: the batch waits, its writes are never made unfenced."""
        if not self.settled:
            raise StoreError("the generation marker is not checked yet")
        pending = self._unfenced & self.partitions
        by_route: dict[str, list[int]] = {}
        for topic, partition in pending:
            if topic in self._routes:
                by_route.setdefault(topic, []).append(partition)
        for name, parts in by_route.items():
            epochs = await store.take_epochs(name, parts)
            self._routes[name].processor.epochs.update(epochs)
            self._unfenced -= {(name, p) for p in parts}
            log.info("owner epochs taken", extra={"route": name, "epochs": {str(p): e for p, e in epochs.items()}})
        self._unfenced &= self.partitions

    def epochs(self) -> dict[TP, int]:
        """The owner epoch of each partition that has one."""
        return {(name, p): e for name, rt in self._routes.items() for p, e in rt.processor.epochs.items()}

    def reopened(self, tps: Iterable[TP]) -> None:
        """Exactly-once: these partitions' producers started and their offsets were read again: a new generation."""
        self.generation += 1
        for tp in tps:
            self._reopened[tp] = self.generation

    def stale(self, tps: Iterable[TP], generation: int) -> set[TP]:
        """Of the partitions of a batch read at ``generation``, those no longer this instance's to decide: given
        away, or (exactly-once) opened again since it was read."""
        return {tp for tp in tps if tp not in self.partitions or self._reopened.get(tp, 0) > generation}

    def only_held(self, records: dict[Any, list[Any]]) -> dict[Any, list[Any]]:
        """The fetched records of the partitions held: a fetch that raced a revocation may bring records of a
        partition given away, whose watermark would then outlive the assignment (and, the partition given back
        later, let a commit pass lines this instance never read)."""
        if all((tp.topic, tp.partition) in self.partitions for tp in records):
            return records
        return {tp: recs for tp, recs in records.items() if (tp.topic, tp.partition) in self.partitions}


__all__ = ["Assignment"]
