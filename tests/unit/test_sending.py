"""The outcome sender's batch path: a batch's outcomes go as record batches, one per partition (more when one
fills), on the partition the producer's own partitioner would pick; each acknowledged send knows its offset."""

from __future__ import annotations

import pytest
from aiokafka.errors import KafkaError
from aiokafka.partitioner import DefaultPartitioner

from gatekeeper.config import KafkaSettings
from gatekeeper.consumers.outcomes import Outcome, OutcomeKind, Source
from gatekeeper.consumers.sending import OutcomeSender, Send
from gatekeeper.metrics import Metrics
from tests.unit.fake_kafka import Cluster, FakeKafka


def _cluster(batch_bytes: int = 16384) -> Cluster:
    c = Cluster(batch_bytes=batch_bytes)
    c.create("out", 3)
    c.create("dlq", 1)
    return c


def _send(n: int, key: bytes | None, topic: str = "out", size: int = 40) -> Send:
    source = Source("in", 0, n, b"v", key)
    value = b"%d:" % n + b"x" * size
    return Send(Outcome(OutcomeKind.OUTPUT, topic, key, value, (("gk.n", b"%d" % n),), source), "in")


async def _started(cluster: Cluster) -> tuple[OutcomeSender, FakeKafka]:
    kafka = FakeKafka(cluster)
    sender = OutcomeSender(kafka, KafkaSettings(), Metrics())
    await sender.start(["out", "dlq"])
    return sender, kafka


async def test_outcomes_go_as_one_batch_per_partition_where_the_partitioner_puts_their_key() -> None:
    cluster = _cluster()
    sender, kafka = await _started(cluster)
    keys = [b"conv-%d" % i for i in range(12)]
    sends = [_send(i, keys[i % 12]) for i in range(60)] + [_send(60, b"conv-1", topic="dlq")]
    await sender.send(sends)
    await sender.produce(sends)
    producer = kafka.producers[-1]
    used = {DefaultPartitioner()(k, [0, 1, 2], [0, 1, 2]) for k in keys}
    assert producer.batches_sent == len(used) + 1  # one per partition of out the keys land on, one for dlq
    for s in sends:
        assert s.acked
        p = DefaultPartitioner()(s.outcome.key, [0, 1, 2], [0, 1, 2]) if s.outcome.topic == "out" else 0
        assert s.meta.partition == p
        written = cluster.logs[(s.outcome.topic, p)][s.meta.offset]
        assert written.value == s.outcome.value and written.key == s.outcome.key  # its own offset, not its batch's
    for p in range(3):  # each partition's records in the order sent
        order = [int(r.value.split(b":")[0]) for r in cluster.logs[("out", p)]]
        assert order == sorted(order)


async def test_a_full_batch_is_sent_and_the_next_begins_in_order() -> None:
    cluster = _cluster(batch_bytes=400)  # about three records a batch
    sender, kafka = await _started(cluster)
    sends = [_send(i, b"one-conversation") for i in range(10)]
    await sender.send(sends)
    await sender.produce(sends)
    assert kafka.producers[-1].batches_sent >= 3
    [p] = {s.meta.partition for s in sends}
    assert [r.value for r in cluster.logs[("out", p)]] == [s.outcome.value for s in sends]
    assert [s.meta.offset for s in sends] == list(range(10))


async def test_a_record_larger_than_a_batch_goes_in_one_of_its_own() -> None:
    cluster = _cluster(batch_bytes=200)
    sender, _ = await _started(cluster)
    sends = [_send(0, b"k"), _send(1, b"k", size=1000), _send(2, b"k")]
    await sender.send(sends)
    await sender.produce(sends)
    [p] = {s.meta.partition for s in sends}
    assert [r.value for r in cluster.logs[("out", p)]] == [s.outcome.value for s in sends]


async def test_an_outcome_without_a_key_is_left_to_the_producers_partitioner() -> None:
    cluster = _cluster()
    sender, kafka = await _started(cluster)
    sends = [_send(0, None), _send(1, b"k")]
    await sender.send(sends)
    await sender.produce(sends)
    assert all(s.acked for s in sends) and kafka.producers[-1].batches_sent == 1
    assert sends[0].index == -1 and sends[0].meta.offset == 0


async def test_a_batch_that_fails_is_sent_again_record_by_record_and_nothing_twice() -> None:
    cluster = _cluster()
    cluster.fail_sends = 1
    sender, _ = await _started(cluster)
    sends = [_send(i, b"k") for i in range(5)]
    await sender.send(sends)
    with pytest.raises(KafkaError):  # the batch's records all failed: the producer is replaced, the caller retries
        await sender.produce(sends)
    assert not any(s.acked for s in sends)
    await sender.produce(sends)
    [p] = {s.meta.partition for s in sends}
    assert [r.value for r in cluster.logs[("out", p)]] == [s.outcome.value for s in sends]
