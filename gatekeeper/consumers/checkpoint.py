"""The checkpoint: a partition's committed offset never passes a record whose outcome is not acknowledged.

The offset committed for a partition is its read watermark (one past the last record consumed), or its lowest
open offset when that is lower: a line in flight (in the batch being decided, or sent and not acknowledged), or
held for a handoff not known yet (the hold buffer). Offsets are committed at most every
``kafka.commit_interval_ms`` unless forced (a revocation, the shutdown), and only for partitions still assigned. In
exactly-once mode the offsets go into each partition's transaction instead (``delivery.ExactlyOnce`` with
``Checkpoint.offsets``), and ``commit`` is never called.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping

from aiokafka import TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError

from gatekeeper.config import KafkaSettings
from gatekeeper.consumers.client import Consumer
from gatekeeper.consumers.holds import TP, HoldBuffer, Pending, Watermarks, lowest_offsets, merge_lowest
from gatekeeper.consumers.sending import describe
from gatekeeper.metrics import Metrics

log = logging.getLogger("gatekeeper.consumers.loop")


class Checkpoint:
    """The watermarks, what is open (the hold buffer's lines, and the lines in flight its callers name) and the
    commits. ``on_error(operation, exc)`` hears of a commit the broker did not take."""

    def __init__(
        self,
        settings: KafkaSettings,
        metrics: Metrics,
        holds: HoldBuffer,
        on_error: Callable[[str, BaseException], None],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.watermarks = Watermarks()
        self._holds = holds
        self._on_error = on_error
        self._clock = clock
        self._last = 0.0  # when the last commit was attempted

    def offsets(
        self, in_flight: Iterable[Pending], assigned: Iterable[TP], tps: Iterable[TP] | None = None
    ) -> dict[TP, int]:
        """The offsets to commit now for the partitions still ``assigned`` (or only ``tps``): the watermarks that
        moved, none past a held line or a line ``in_flight``."""
        open_lowest = merge_lowest(self._holds.lowest(), lowest_offsets(in_flight))
        mine = set(assigned)
        return {tp: off for tp, off in self.watermarks.committable(open_lowest, tps).items() if tp in mine}

    async def commit(
        self,
        consumer: Consumer | None,
        in_flight: Iterable[Pending],
        tps: Iterable[TP] | None = None,
        *,
        force: bool = False,
    ) -> bool:
        """Commit what moved, none past a held line or a line ``in_flight``, at most every
        ``kafka.commit_interval_ms`` unless ``force``. False when the commit failed (it is tried again: the
        watermarks stay where they were)."""
        if consumer is None:
            return True
        now = self._clock()
        if not force and now - self._last < self.settings.commit_interval_ms / 1000:
            return True
        self._last = now
        offsets = self.offsets(in_flight, ((tp.topic, tp.partition) for tp in consumer.assignment()), tps)
        if not offsets:
            return True
        try:
            await asyncio.wait_for(
                consumer.commit({TopicPartition(t, p): off for (t, p), off in offsets.items()}),
                timeout=self.settings.request_timeout_ms / 1000,
            )
        except CommitFailedError as exc:
            self.metrics.kafka_errors.labels(operation="commit").inc()
            log.warning("commit refused: the group rebalanced", extra={"error": describe(exc)})
            return False
        except (KafkaError, TimeoutError) as exc:
            self.metrics.kafka_errors.labels(operation="commit").inc()
            self._on_error("commit", exc)
            return False
        self.committed(offsets)
        return True

    def committed(self, offsets: Mapping[TP, int]) -> None:
        """Offsets the broker took (by a commit, or in a transaction)."""
        self.watermarks.committed(offsets)
        for (topic, partition), off in offsets.items():
            self.metrics.committed.labels(topic=topic, partition=str(partition)).set(off)


__all__ = ["Checkpoint"]
