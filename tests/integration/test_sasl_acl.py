"""Sender authentication on a broker secured as in production (issue 16, item 1): SASL/SCRAM-SHA-512, the KRaft
authorizer with ``allow.everyone.if.no.acl.found=false`` and the chart README's ACLs for one route
(``tests/integration/_sasl_broker.py``). The real gatekeeper runs as ``User:gatekeeper``; each agent produces as its
own SCRAM user and signs with its own key.

- the payer clearing its own payment (a clearance ``from=scheduler`` signed with the payer's key) and a done report
  in another agent's name are dead-lettered ``sender-auth``; each agent's own lines are forwarded;
- the ACLs bite: an agent cannot write the gatekeeper's output or dead-letter topic (so a line on the output has
  passed the gatekeeper), and a wrong password does not connect.

Transport identity (SCRAM) and message identity (``rw-sig``) are independent: the broker knows which user produced
a record, the gatekeeper knows which agent signed a line, and an agent allowed to write the input still cannot
speak for another agent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaConnectionError, TopicAuthorizationFailedError

from gatekeeper.consumers.loop import Gatekeeper
from gatekeeper.redis_store import RedisStore
from tests.integration._pipeline import Collector, settings_for, wait_ready
from tests.integration._sasl_broker import SaslBroker
from tests.integration.test_sender_auth import DN_AS_SCHEDULER, KEYS, PAYER, SCHEDULER, n, signed
from tests.policy.world import AN, DN, HO, RB, RECORD

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sasl_broker() -> Iterator[SaslBroker]:
    with SaslBroker.start() as broker:
        yield broker


class SaslCollector(Collector):
    """The pipeline's collector, connected as a SASL user (the admin: nobody else may read the dead letters)."""

    def __init__(self, broker: SaslBroker, user: str, topics: dict[str, str]) -> None:
        super().__init__(broker.bootstrap, topics)
        self.kwargs = broker.client_kwargs(user)

    async def start(self) -> None:
        self._consumer = AIOKafkaConsumer(**self.kwargs, enable_auto_commit=False, auto_offset_reset="earliest")
        await self._consumer.start()
        tps = [TopicPartition(topic, 0) for topic in self.kinds]  # the broker's topics have one partition
        self._consumer.assign(tps)
        await self._consumer.seek_to_beginning(*tps)
        self._task = asyncio.create_task(self._run())


class Agent:
    """An agent's producer, as its own SCRAM user (idempotent, like the gatekeeper's)."""

    def __init__(self, broker: SaslBroker, user: str, password: str | None = None) -> None:
        self.producer = AIOKafkaProducer(
            **broker.client_kwargs(user, password), acks="all", enable_idempotence=True, linger_ms=0
        )

    async def send(self, topic: str, conversation: str, line: str, headers: Sequence[tuple[str, bytes]]) -> None:
        await (await self.producer.send(topic, line.encode(), key=conversation.encode(), headers=list(headers)))


@contextlib.asynccontextmanager
async def agents(broker: SaslBroker, *users: str) -> AsyncIterator[list[Agent]]:
    started: list[Agent] = []
    try:
        for user in users:
            agent = Agent(broker, user)
            await agent.producer.start()
            started.append(agent)
        yield started
    finally:
        for agent in started:
            await agent.producer.stop()


@contextlib.asynccontextmanager
async def gatekeeper(broker: SaslBroker, redis_url: str) -> AsyncIterator[tuple[Gatekeeper, SaslCollector]]:
    """The real gatekeeper as User:gatekeeper, in the group the ACLs name, on a route with sender_auth."""
    r = broker.route
    route = {
        "input": r.input,
        "output": r.output,
        "dead_letter": r.dead_letter,
        "alerts": r.alerts,
        "profile": "pay",
        "hold_seconds": 2.0,
        "sender_auth": True,
    }
    settings = settings_for(
        broker.bootstrap,
        redis_url,
        [route],
        group=r.group,
        sender_auth=KEYS,
        kafka={"security": broker.security("gatekeeper")},
    )
    store = RedisStore(settings.redis)
    await store.put_record(RECORD)
    collector = SaslCollector(broker, "admin", {r.output: "output", r.dead_letter: "dead", r.alerts: "alerts"})
    await collector.start()
    gk = Gatekeeper(settings, store=store, http=False, startup_timeout=20.0)
    task = asyncio.create_task(gk.run())
    try:
        await wait_ready(gk, task)
        yield gk, collector
    finally:
        gk.request_stop()
        try:
            await asyncio.wait_for(task, 20.0)
        finally:
            await collector.stop()
            await store.close()


async def read_as(broker: SaslBroker, user: str, topic: str, count: int, timeout: float = 15.0) -> list[Any]:
    """``count`` records of ``topic`` read by ``user`` in its own consumer group (its ACLs: Read on the topic and
    the group)."""
    consumer = AIOKafkaConsumer(
        topic, **broker.client_kwargs(user), group_id=user, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    got: list[Any] = []
    try:
        async with asyncio.timeout(timeout):
            while len(got) < count:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    got.extend(records)
        await consumer.commit()
        return got
    finally:
        await consumer.stop()


async def test_an_agent_cannot_speak_for_another_on_a_secured_broker(
    sasl_broker: SaslBroker, redis_url: str, redis_client: object
) -> None:
    topic = sasl_broker.route.input
    c = "sasl-attack"
    async with (
        gatekeeper(sasl_broker, redis_url) as (_, collector),
        agents(sasl_broker, "agent-scheduler", "agent-payer") as (scheduler, payer),
    ):
        await scheduler.send(topic, c, HO, signed(SCHEDULER, "scheduler-k1", c, HO, topic))
        await payer.send(topic, c, RB, signed(PAYER, "payer-k1", c, RB, topic))
        await payer.send(topic, c, AN, signed(PAYER, "payer-k1", c, AN, topic))  # the payer clears its own payment
        await payer.send(topic, c, DN_AS_SCHEDULER, signed(PAYER, "payer-k1", c, DN_AS_SCHEDULER, topic))
        await scheduler.send(topic, c, AN, signed(SCHEDULER, "scheduler-k1", c, AN, topic))  # the real clearance
        await payer.send(topic, c, DN, signed(PAYER, "payer-k1", c, DN, topic))  # the real done report
        got = await collector.wait(n(c, 6))
        await collector.settle()
        assert [r.text for r in got.of("output", c)] == [HO, RB, AN, DN]
        dead = got.of("dead", c)
        assert [r.text for r in dead] == [AN, DN_AS_SCHEDULER]
        assert [r.h("gk.reason") for r in dead] == ["sender-auth", "sender-auth"]
        assert all("sender-auth-wrong-agent" in (r.h("gk.problems") or "") for r in dead)
        assert got.of("alerts", c) == []
        # the output is readable by the agents (their Read ACLs and groups), and holds only the genuine lines
        for user in ("agent-payer", "agent-scheduler"):
            forwarded = await read_as(sasl_broker, user, sasl_broker.route.output, 4)
            assert [(r.key, r.value) for r in forwarded] == [(c.encode(), line.encode()) for line in (HO, RB, AN, DN)]


@pytest.mark.parametrize("kind", ["output", "dead_letter", "alerts"])
async def test_an_agent_cannot_write_the_gatekeepers_topics(sasl_broker: SaslBroker, kind: str) -> None:
    topic = getattr(sasl_broker.route, kind)
    async with agents(sasl_broker, "agent-payer") as (payer,):
        with pytest.raises(TopicAuthorizationFailedError):
            async with asyncio.timeout(15):
                await payer.send(topic, "forged", AN, signed(PAYER, "payer-k1", "forged", AN, topic))


async def test_an_agent_cannot_read_the_dead_letters(sasl_broker: SaslBroker) -> None:
    with pytest.raises(TopicAuthorizationFailedError):
        await read_as(sasl_broker, "agent-payer", sasl_broker.route.dead_letter, 1, timeout=10)


async def test_a_wrong_password_cannot_connect(sasl_broker: SaslBroker) -> None:
    async with agents(sasl_broker, "agent-payer"):  # the right password connects...
        pass
    agent = Agent(sasl_broker, "agent-payer", password="not-the-password")
    with pytest.raises(KafkaConnectionError):  # ...a wrong one does not (aiokafka: "Unable to bootstrap")
        async with asyncio.timeout(15):
            await agent.producer.start()
    await agent.producer.stop()
    # and that was the broker refusing the credentials, not a closed port
    async with asyncio.timeout(10):
        while "invalid credentials with SASL mechanism SCRAM-SHA-512" not in sasl_broker.log_text():
            await asyncio.sleep(0.1)
