"""The sinks of ``consumers.delivery``, each held to its mode's rule: at-least-once, an unacknowledged batch stays
open (never committed past) until it is settled, and a revocation drops its revoked lines; exactly-once, a batch's
partitions end apart (committed, aborted to retry, or broken), and only the committed ones count as finished.

The sender is a stub behind the seam the sinks use (``send``, ``produce``, ``produce_transactions``); the worker's
tests (``test_worker.py``, on the in-memory Kafka) and the integration suite run the sinks with the real sender."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiokafka import TopicPartition

from gatekeeper.config import KafkaSettings
from gatekeeper.consumers.checkpoint import Checkpoint
from gatekeeper.consumers.deciding import Batch
from gatekeeper.consumers.delivery import AtLeastOnce, ExactlyOnce, sink_for
from gatekeeper.consumers.holds import TP, HoldBuffer, HoldLimits, Pending
from gatekeeper.consumers.outcomes import Outcome, OutcomeKind, Source
from gatekeeper.consumers.sending import Send, Transactions
from gatekeeper.metrics import Metrics

TOPIC = "agents.pay"


def line(partition: int, offset: int) -> Pending:
    return Pending(Source(TOPIC, partition, offset, b"RW1 HO h%d" % offset, key=b"c"), TOPIC, "c", 0.0)


def batch(*coords: tuple[int, int]) -> Batch:
    b = Batch([line(p, o) for p, o in coords])
    b.sends = [Send(Outcome(OutcomeKind.OUTPUT, "out", b"c", p.source.value, (), p.source), TOPIC) for p in b.lines]
    return b


class StubSender:
    def __init__(self, transactions: Transactions | None = None) -> None:
        self.transactions = transactions or Transactions()
        self.sent: list[Sequence[Send]] = []
        self.produced: list[Sequence[Send]] = []
        self.offsets: dict[TP, int] = {}

    async def send(self, sends: Sequence[Send]) -> None:
        self.sent.append(sends)

    async def produce(self, sends: Sequence[Send]) -> None:
        self.produced.append(sends)

    async def produce_transactions(
        self, sends: Sequence[Send], offsets: Callable[[], Mapping[TP, int]], group_id: str
    ) -> Transactions:
        self.offsets = dict(offsets())
        return self.transactions


class StubConsumer:
    def __init__(self, partitions: Sequence[int]) -> None:
        self.partitions = partitions
        self.commits: list[dict[TopicPartition, int]] = []

    def assignment(self) -> set[TopicPartition]:
        return {TopicPartition(TOPIC, p) for p in self.partitions}

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self.commits.append(offsets)


def checkpoint(**kafka: Any) -> Checkpoint:
    settings = KafkaSettings(commit_interval_ms=0, **kafka)
    return Checkpoint(settings, Metrics(), HoldBuffer(1.0, HoldLimits()), lambda op, exc: None)


def test_the_mode_picks_the_sink() -> None:
    sender: Any = StubSender()
    assert isinstance(sink_for(KafkaSettings(), sender, checkpoint()), AtLeastOnce)
    assert isinstance(sink_for(KafkaSettings(transactional=True), sender, checkpoint()), ExactlyOnce)


async def test_at_least_once_never_commits_past_a_line_not_acknowledged() -> None:
    sender, cp = StubSender(), checkpoint()
    sink = AtLeastOnce(sender, cp)  # type: ignore[arg-type]
    consumer = StubConsumer([0])
    b = batch((0, 0), (0, 1), (0, 2))
    for p in b.lines:
        cp.watermarks.consumed(p.tp, p.offset)
    d = await sink.deliver(b, lambda: {(TOPIC, 0)})
    assert d.sent is b and d.finished is None and sink.waiting and sender.sent == [b.sends]
    await sink.commit(consumer, [], None, force=True)  # type: ignore[arg-type]
    assert consumer.commits == [{TopicPartition(TOPIC, 0): 0}]  # the first unacknowledged line is the floor
    assert await sink.settle() is b and not sink.waiting and sender.produced == [b.sends]
    await sink.commit(consumer, [], None, force=True)  # type: ignore[arg-type]
    assert consumer.commits[-1] == {TopicPartition(TOPIC, 0): 3}
    assert await sink.settle() is None


async def test_at_least_once_drops_a_revoked_partitions_unacknowledged_lines() -> None:
    sink = AtLeastOnce(StubSender(), checkpoint())  # type: ignore[arg-type]
    await sink.deliver(batch((0, 5), (1, 7), (0, 6)), lambda: set())
    sink.drop({(TOPIC, 1)})
    assert [(p.tp, p.offset) for p in sink.in_flight] == [((TOPIC, 0), 5), ((TOPIC, 0), 6)]
    taken = sink.take()
    assert taken is not None and taken.sends is not None and len(taken.sends) == 2
    assert not sink.waiting and sink.take() is None
    await sink.deliver(batch((1, 8)), lambda: set())
    sink.drop({(TOPIC, 1)})
    assert not sink.waiting  # nothing left of it: nothing waits


async def test_exactly_once_finishes_only_the_partitions_whose_transaction_committed() -> None:
    boom = RuntimeError("transaction aborted")
    txns = Transactions(committed={(TOPIC, 0): 2}, failed={(TOPIC, 1): boom}, broken={(TOPIC, 2): "fenced"})
    sender, cp = StubSender(txns), checkpoint(transactional=True)
    sink = ExactlyOnce(sender, cp, "group")  # type: ignore[arg-type]
    b = batch((0, 0), (1, 0), (2, 0), (0, 1))
    for p in b.lines:
        cp.watermarks.consumed(p.tp, p.offset)
    d = await sink.deliver(b, lambda: {(TOPIC, 0), (TOPIC, 1), (TOPIC, 2)})
    assert d.finished is d.sent and d.finished is not None
    assert [(p.source.partition, p.offset) for p in d.finished.lines] == [(0, 0), (0, 1)]
    assert d.rest is not None and [(p.source.partition, p.offset) for p in d.rest.lines] == [(1, 0)]
    assert d.error is boom and dict(d.broken) == {(TOPIC, 2): "fenced"}
    assert sender.offsets == {(TOPIC, 0): 2, (TOPIC, 1): 1, (TOPIC, 2): 1}  # each partition's, in its transaction
    assert cp.watermarks.last_committed((TOPIC, 0)) == 2 and cp.watermarks.last_committed((TOPIC, 1)) is None
    assert not sink.waiting and sink.in_flight == [] and await sink.settle() is None
    assert await sink.commit(StubConsumer([0]), [], None, force=True)  # type: ignore[arg-type]


async def test_exactly_once_a_batch_all_committed_is_finished_whole() -> None:
    txns = Transactions(committed={(TOPIC, 0): 1})
    sink = ExactlyOnce(StubSender(txns), checkpoint(transactional=True), "group")  # type: ignore[arg-type]
    b = batch((0, 0))
    d = await sink.deliver(b, lambda: {(TOPIC, 0)})
    assert d.finished is b and d.rest is None and d.error is None and not d.broken
