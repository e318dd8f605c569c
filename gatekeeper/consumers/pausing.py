"""Pausing: which assigned partitions the consumer reads, and why the others wait.

    pauses = Pauses()
    pauses.pause("backoff")            # every partition: an infrastructure reason (backoff, redis-data-lost)
    pauses.routes.add("agents.pay")    # one route alone: its dead-letter breaker tripped
    pauses.unopened |= {("agents.pay", 0)}   # exactly-once: no transactional producer yet (or ``broken``: fenced)
    pauses.apply(consumer)             # pause what must wait, resume the rest

A reason for every partition wins over the rest; without one, a partition waits when its route is paused alone or,
exactly-once, while it has no transactional producer. ``apply`` is idempotent and called after every change, and
after a fetch that may have raced one (a partition assigned before it could be paused).
"""

from __future__ import annotations

from aiokafka import TopicPartition

from gatekeeper.consumers.client import Consumer
from gatekeeper.consumers.holds import TP


class Pauses:
    """The reasons partitions wait. ``reasons``: why every partition is paused; ``routes``: routes paused alone;
    ``unopened`` and ``broken``: exactly-once partitions without their producer (not started yet, retried between
    batches; fenced, started again only at the next assignment)."""

    def __init__(self) -> None:
        self.reasons: set[str] = set()
        self.routes: set[str] = set()
        self.unopened: set[TP] = set()
        self.broken: set[TP] = set()

    def pause(self, why: str) -> None:
        self.reasons.add(why)

    def resume(self, why: str) -> bool:
        """Drop a reason; True when it held."""
        if why not in self.reasons:
            return False
        self.reasons.discard(why)
        return True

    @property
    def without_producer(self) -> set[TP]:
        """Exactly-once: the partitions that wait for their transactional producer."""
        return self.unopened | self.broken

    def stopped(self, assigned: set[TopicPartition]) -> set[TopicPartition]:
        """The assigned partitions that must not be read now."""
        if self.reasons:
            return set(assigned)
        closed = self.without_producer
        return {tp for tp in assigned if tp.topic in self.routes or (tp.topic, tp.partition) in closed}

    def apply(self, consumer: Consumer | None) -> None:
        """Pause what must wait and resume the rest (nothing without a consumer)."""
        if consumer is None:
            return
        stop = self.stopped(consumer.assignment())
        if stop:
            consumer.pause(*stop)
        go = [tp for tp in consumer.paused() if tp not in stop]
        if go:
            consumer.resume(*go)


__all__ = ["Pauses"]
