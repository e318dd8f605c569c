"""Delivery: how a decided batch's outcomes reach Kafka, and when its lines count as done. One sink a mode, one
interface: the work loop asks the mode one thing only, whether partitions are opened before they are read.

    sink = sink_for(settings.kafka, sender, checkpoint)      # AtLeastOnce, or ExactlyOnce (kafka.transactional)
    finished = await sink.settle()                            # the batch delivered before, acknowledged now, or None
    d = await sink.deliver(batch, assigned)                   # Delivered(sent, finished, rest, error, broken)
    await sink.commit(consumer, in_flight, tps, force=...)    # the offsets, never past an open line
    sink.waiting / sink.in_flight / sink.drop(tps)            # the batch sent and not acknowledged yet
    await sink.open(partitions) / await sink.release(tps)     # exactly-once: the partitions' own producers

**At-least-once** (``AtLeastOnce``, the default): ``deliver`` hands the batch's records to the idempotent producer
and returns without waiting: the batch is *unacknowledged* and the worker decides the next one meanwhile.
``settle`` waits for its acknowledgements (sending again what failed); the worker calls it before the next batch's
records go out (they never overtake these), between batches, at a revocation and at the stop, then counts the
settled batch and commits. The consumer's offsets are committed by ``commit`` (``Checkpoint.commit``: at most every
``kafka.commit_interval_ms`` unless forced), never past a line in flight or held. A revocation ``drop``s the
revoked partitions' unacknowledged lines: their new owner reads them again.

**Exactly-once** (``ExactlyOnce``, ``kafka.transactional``): each input partition has a transactional producer of
its own (``open`` at assignment fences the partition's previous owner; ``release`` at revocation). ``deliver`` runs
one transaction per input partition of the batch: its outcomes and its offset (``Checkpoint.offsets``: the
watermark, none past a line held now or still held). It returns what finished, what failed (aborted: retried on the
same producer, ``rest`` and ``error``) and the partitions whose producer is gone (``broken``: fenced; the worker
drops their work and rejoins the group). Nothing is ever unacknowledged between batches, and ``commit`` has nothing
to do: the offsets went into the transactions.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import NamedTuple, Protocol

from gatekeeper.config import KafkaSettings
from gatekeeper.consumers.checkpoint import Checkpoint
from gatekeeper.consumers.client import Consumer
from gatekeeper.consumers.deciding import Batch
from gatekeeper.consumers.holds import TP, Pending
from gatekeeper.consumers.sending import OutcomeSender


class Delivered(NamedTuple):
    """What ``deliver`` did with a batch."""

    sent: Batch  # the part whose records went out: its held lines are held from now on
    finished: Batch | None  # acknowledged and committed: count it now (None: not yet, ``settle`` says when)
    rest: Batch | None = None  # to retry after the backoff, for ``error``
    error: BaseException | None = None
    broken: Mapping[TP, str] = {}  # exactly-once: partitions whose producer is gone (why)


class Sink(Protocol):
    #: the partitions must have a producer of their own (``open``) before they are read
    opens_partitions: bool

    @property
    def waiting(self) -> bool: ...

    @property
    def in_flight(self) -> list[Pending]: ...

    async def deliver(self, b: Batch, assigned: Callable[[], Collection[TP]]) -> Delivered: ...

    async def settle(self) -> Batch | None: ...

    def take(self) -> Batch | None: ...

    def drop(self, tps: Collection[TP]) -> None: ...

    async def commit(
        self, consumer: Consumer | None, in_flight: Iterable[Pending], tps: Iterable[TP] | None, *, force: bool
    ) -> bool: ...

    async def open(self, partitions: Iterable[TP]) -> set[TP]: ...

    async def release(self, tps: Iterable[TP]) -> None: ...


class AtLeastOnce:
    """The idempotent producer; a batch's acknowledgements awaited while the next batch is decided."""

    opens_partitions = False

    def __init__(self, sender: OutcomeSender, checkpoint: Checkpoint) -> None:
        self._sender = sender
        self._checkpoint = checkpoint
        self._unacked: Batch | None = None  # sent, its acknowledgements not all in yet

    @property
    def waiting(self) -> bool:
        return self._unacked is not None

    @property
    def in_flight(self) -> list[Pending]:
        return self._unacked.lines if self._unacked is not None else []

    async def deliver(self, b: Batch, assigned: Callable[[], Collection[TP]]) -> Delivered:
        """Hand the records over (the batch before must be settled first: ``settle``). Raises ``KafkaError``."""
        assert b.sends is not None and self._unacked is None
        await self._sender.send(b.sends)
        self._unacked = b
        return Delivered(b, None)

    async def settle(self) -> Batch | None:
        """Wait for the acknowledgements of the batch sent last (sending again what failed); returns it, or None
        when none waits. Raises ``KafkaError`` or ``ProduceTimeout``: it stays unacknowledged."""
        b = self._unacked
        if b is None:
            return None
        assert b.sends is not None
        await self._sender.produce(b.sends)
        self._unacked = None
        return b

    def take(self) -> Batch | None:
        """The unacknowledged batch, taken back to be delivered again (its settle failed)."""
        b, self._unacked = self._unacked, None
        return b

    def drop(self, tps: Collection[TP]) -> None:
        u = self._unacked
        if u is not None and any(p.tp in tps for p in u.lines):
            part = u.only({p.tp for p in u.lines} - set(tps))
            self._unacked = part if part.lines else None

    async def commit(
        self, consumer: Consumer | None, in_flight: Iterable[Pending], tps: Iterable[TP] | None, *, force: bool
    ) -> bool:
        return await self._checkpoint.commit(consumer, [*in_flight, *self.in_flight], tps, force=force)

    async def open(self, partitions: Iterable[TP]) -> set[TP]:
        return set(partitions)

    async def release(self, tps: Iterable[TP]) -> None:
        return None


class ExactlyOnce:
    """A transactional producer per input partition; a batch is one transaction per partition, offsets included."""

    opens_partitions = True

    def __init__(self, sender: OutcomeSender, checkpoint: Checkpoint, group_id: str) -> None:
        self._sender = sender
        self._checkpoint = checkpoint
        self._group_id = group_id

    @property
    def waiting(self) -> bool:
        return False

    @property
    def in_flight(self) -> list[Pending]:
        return []

    async def deliver(self, b: Batch, assigned: Callable[[], Collection[TP]]) -> Delivered:
        """The batch's transactions, one per input partition, each with its offset among the partitions
        ``assigned()``. Raises only what ``produce_transactions`` raises."""
        assert b.sends is not None

        def offsets() -> dict[TP, int]:  # the watermarks, none past a line held now or still held
            return self._checkpoint.offsets((p for p, _ in b.held), assigned())

        result = await self._sender.produce_transactions(b.sends, offsets, self._group_id)
        if result.committed:
            self._checkpoint.committed(result.committed)
        unfinished = result.unfinished
        if not unfinished:
            return Delivered(b, b)
        done = b.only(b.partitions() - unfinished)
        rest = b.only(set(result.failed))
        error = next(iter(result.failed.values()), None)
        return Delivered(done, done, rest if rest.lines else None, error, dict(result.broken))

    async def settle(self) -> Batch | None:
        return None

    def take(self) -> Batch | None:
        return None

    def drop(self, tps: Collection[TP]) -> None:
        return None

    async def commit(
        self, consumer: Consumer | None, in_flight: Iterable[Pending], tps: Iterable[TP] | None, *, force: bool
    ) -> bool:
        return True  # the offsets went into the transactions

    async def open(self, partitions: Iterable[TP]) -> set[TP]:
        return await self._sender.open(partitions)

    async def release(self, tps: Iterable[TP]) -> None:
        await self._sender.release(tps)


def sink_for(settings: KafkaSettings, sender: OutcomeSender, checkpoint: Checkpoint) -> AtLeastOnce | ExactlyOnce:
    if settings.transactional:
        return ExactlyOnce(sender, checkpoint, settings.group_id)
    return AtLeastOnce(sender, checkpoint)


__all__ = ["AtLeastOnce", "Delivered", "ExactlyOnce", "Sink", "sink_for"]
