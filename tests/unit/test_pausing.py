"""Pausing: an infrastructure reason pauses every partition, a tripped route or a partition without its producer
only itself; resuming gives back exactly what no reason holds."""

from __future__ import annotations

import asyncio

from aiokafka import TopicPartition

from gatekeeper.consumers.pausing import Pauses
from tests.unit.fake_kafka import Cluster, FakeConsumer


def _consumer() -> FakeConsumer:
    cluster = Cluster()
    cluster.create("agents.pay", partitions=2)
    cluster.create("agents.mail", partitions=1)
    consumer = FakeConsumer(cluster, ["agents.pay", "agents.mail"], None)
    asyncio.run(consumer.start())
    return consumer


PAY0, PAY1, MAIL0 = TopicPartition("agents.pay", 0), TopicPartition("agents.pay", 1), TopicPartition("agents.mail", 0)


def test_a_reason_pauses_every_partition_until_the_last_reason_goes() -> None:
    consumer, pauses = _consumer(), Pauses()
    pauses.pause("backoff")
    pauses.pause("redis-data-lost")
    pauses.apply(consumer)
    assert consumer.paused() == {PAY0, PAY1, MAIL0}
    assert pauses.resume("backoff") is True
    assert pauses.resume("backoff") is False  # not held any more: nothing changes
    pauses.apply(consumer)
    assert consumer.paused() == {PAY0, PAY1, MAIL0}
    pauses.resume("redis-data-lost")
    pauses.apply(consumer)
    assert consumer.paused() == set()


def test_a_route_paused_alone_and_a_partition_without_its_producer_wait_the_rest_read() -> None:
    consumer, pauses = _consumer(), Pauses()
    pauses.routes.add("agents.pay")
    pauses.broken.add(("agents.mail", 0))
    pauses.apply(consumer)
    assert consumer.paused() == {PAY0, PAY1, MAIL0}
    pauses.routes.discard("agents.pay")
    pauses.apply(consumer)
    assert consumer.paused() == {MAIL0}
    assert pauses.without_producer == {("agents.mail", 0)}
    pauses.broken.clear()
    pauses.unopened.add(("agents.pay", 1))
    pauses.apply(consumer)
    assert consumer.paused() == {PAY1}


def test_every_partition_reason_wins_and_its_end_restores_the_per_partition_waits() -> None:
    consumer, pauses = _consumer(), Pauses()
    pauses.unopened.add(("agents.pay", 0))
    pauses.pause("backoff")
    pauses.apply(consumer)
    assert consumer.paused() == {PAY0, PAY1, MAIL0}
    pauses.resume("backoff")
    pauses.apply(consumer)
    assert consumer.paused() == {PAY0}


def test_no_consumer_yet_is_nothing_to_apply() -> None:
    pauses = Pauses()
    pauses.pause("backoff")
    pauses.apply(None)
    assert pauses.stopped({PAY0}) == {PAY0}
