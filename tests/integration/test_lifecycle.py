"""The handoff lifecycle through the real broker and real Redis: the gatekeeper cancels a handoff whose time ran out
(its clock injected, nothing sleeps for minutes), the receiver's acknowledgement closes it, a done report after it is
alerted, a readback deadline cancels with TIMEOUT, and there is one cancel per handoff with two gatekeepers, two
sweepers on one partition, and a sweeper killed between publishing and its bookkeeping."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from gatekeeper.config import Settings
from gatekeeper.consumers.client import AioKafka
from gatekeeper.consumers.deciding import route_policy
from gatekeeper.consumers.loop import Gatekeeper
from gatekeeper.consumers.sending import OutcomeSender
from gatekeeper.metrics import Metrics
from gatekeeper.policy import bound_handoff
from gatekeeper.policy.lifecycle import ORPHANED, UNANSWERED
from gatekeeper.processor import Line, Processor
from gatekeeper.redis_store import RedisStore
from gatekeeper.sweeper import KafkaPublisher, OutRecord, Sweeper, SweepRoute
from tests.integration._pipeline import Collected, Collector, Got, TopicFactory, make_route, settings_for, wait_ready
from tests.lifecycle.memory import Clock, Crash
from tests.policy.test_lifecycle import ANSWER, AQ, EXP, HO_EXP, RB_EXP, T_BY, T_EXP
from tests.policy.world import ACK, DN, NOW, RECORD

pytestmark = pytest.mark.integration


def cancels(got: Collected, conversation: str | None = None) -> list[Got]:
    return [
        r
        for r in got.output
        if r.h("gk.author") == "gatekeeper" and (conversation is None or r.key == conversation.encode())
    ]


def forwarded(got: Collected, conversation: str) -> list[str]:
    return [r.text for r in got.of("output", conversation) if r.h("gk.author") is None]


class Running:
    """Gatekeepers sharing one configuration (group, Redis prefix) and one clock, and a collector of the outputs."""

    def __init__(self, bootstrap: str, settings: Settings, clock: Clock) -> None:
        self.bootstrap = bootstrap
        self.settings = settings
        self.clock = clock
        self.store = RedisStore(settings.redis)
        route = settings.routes[0]
        self.route = route
        self.collector = Collector(
            bootstrap, {route.output: "output", route.dead_letter: "dead", route.alerts: "alerts"}
        )
        self.gatekeepers: list[tuple[Gatekeeper, asyncio.Task[None]]] = []

    async def start(self, n: int = 1) -> None:
        await self.collector.start()
        for _ in range(n):
            gk = Gatekeeper(self.settings, store=RedisStore(self.settings.redis), http=False, clock=self.clock)
            task = asyncio.create_task(gk.run())
            self.gatekeepers.append((gk, task))
        for gk, task in self.gatekeepers:
            await wait_ready(gk, task)

    async def send(self, conversation: str, *lines: str) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all")
        await producer.start()
        try:
            for line in lines:
                await producer.send_and_wait(self.route.input, line.encode(), key=conversation.encode())
        finally:
            await producer.stop()

    async def stop(self) -> None:
        for gk, _ in self.gatekeepers:
            gk.request_stop()
        for _, task in self.gatekeepers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 20.0)
        await self.collector.stop()
        await self.store.close()


@contextlib.asynccontextmanager
async def running(
    topics: TopicFactory, bootstrap: str, redis_url: str, *, instances: int = 1, partitions: int = 1, **route_kw: Any
) -> AsyncIterator[Running]:
    route = await make_route(topics, partitions, **route_kw)
    route["output"] = await topics(2)  # the cancel goes to its conversation's partition
    settings = settings_for(bootstrap, redis_url, [route], sweeper={"interval_seconds": 0.1, "takeover_seconds": 30.0})
    r = Running(bootstrap, settings, Clock(NOW))
    try:
        await r.store.put_record(RECORD)
        await r.start(instances)
        yield r
    finally:
        await r.stop()


async def test_a_handoff_past_its_exp_is_cancelled_acknowledged_and_a_late_done_report_alerted(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    async with running(topic_factory, kafka_bootstrap, redis_url) as r:
        await r.send("exp", HO_EXP, RB_EXP)
        await r.collector.wait(lambda g: len(forwarded(g, "exp")) >= 2)
        assert bound_handoff(await r.store.binding(RECORD.key) or "") == f"{r.settings.routes[0].input}/exp/scheduler-1"
        r.clock.now = T_EXP  # the gatekeeper's clock passes exp=
        got = await r.collector.wait(lambda g: len(cancels(g)) >= 1 and len(g.of("alerts", "exp")) >= 1)
        (cx,) = cancels(got, "exp")
        assert cx.text.startswith("RW1 CX scheduler-900000001 re=scheduler-1 from=scheduler to=payer")
        assert "why=EXPIRED" in cx.text and "p=pay" in cx.text
        assert cx.h("gk.cancel.handoff") == "scheduler-1" and cx.h("gk.conversation") == "exp"
        forwards = [x for x in got.output if x.key == b"exp" and x.h("gk.author") is None]
        assert cx.partition == forwards[0].partition  # after the conversation's lines, on its partition
        (alert,) = got.of("alerts", "exp")
        assert alert.doc["alert"] == ORPHANED and alert.doc["handoff"] == "scheduler-1"
        assert alert.doc["cancel"]["id"] == "scheduler-900000001" and "61102938" not in alert.text
        # the receiver acknowledges: the handoff is closed and the approval free again
        ack = ACK.replace("re=scheduler-3", "re=scheduler-900000001")
        await r.send("exp", ack)
        got = await r.collector.wait(lambda g: ack in forwarded(g, "exp"))
        assert await r.store.binding(RECORD.key) is None
        loaded = await r.store.load(r.route.input, {"exp": None}, [])
        view = loaded.states["exp"].tracker.handoff("scheduler-1")
        assert view is not None and view.closed
        # a done report that says the act ran after the cancel: forwarded, flagged, alerted
        await r.send("exp", DN)
        got = await r.collector.wait(lambda g: len(g.of("alerts", "exp")) >= 2)
        flagged = [x for x in got.of("output", "exp") if x.text == DN]
        assert flagged and flagged[0].h("gk.verdict") == "alert"
        assert "thread-done-after-cancel" in (flagged[0].h("gk.problems") or "")
        await r.collector.settle(0.5)
        assert len(cancels(r.collector.got, "exp")) == 1
        gk = r.gatekeepers[0][0]
        m = gk.metrics.registry.get_sample_value
        assert m("gatekeeper_cancels_total", {"route": r.route.input, "why": "EXPIRED"}) == 1
        assert m("gatekeeper_handoff_problems_total", {"route": r.route.input, "code": ORPHANED}) == 1
        assert m("gatekeeper_handoff_problems_total", {"route": r.route.input, "code": "thread-done-after-cancel"}) == 1


async def test_no_readback_in_time_is_cancelled_with_timeout(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    async with running(topic_factory, kafka_bootstrap, redis_url, readback_timeout_seconds=120.0) as r:
        silent = f"RW1 HO scheduler-1 p=pay from=scheduler to=payer item=inv:S-1 ask=REVIEW exp={EXP}"
        await r.send("silent", silent)
        await r.send("answered", HO_EXP)
        await r.collector.wait(lambda g: len(forwarded(g, "silent")) >= 1 and len(forwarded(g, "answered")) >= 1)
        r.clock.now = NOW + 60
        await r.send("answered", RB_EXP)  # a passing readback within the 120 s
        await r.collector.wait(lambda g: len(forwarded(g, "answered")) >= 2)
        r.clock.now = NOW + 120
        got = await r.collector.wait(lambda g: len(cancels(g)) >= 1)
        await r.collector.settle(0.5)
        (cx,) = cancels(got)
        assert cx.key == b"silent" and "why=TIMEOUT" in cx.text and cx.h("gk.cancel.why") == "TIMEOUT"
        assert "no passing readback within 120s" in cx.text
        assert got.alerts == []  # a handoff in time without a readback is not orphaned


async def test_two_gatekeepers_running_together_emit_one_cancel_per_handoff(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    convs = [f"two-{n}" for n in range(6)]
    async with running(topic_factory, kafka_bootstrap, redis_url, instances=2, partitions=2) as r:
        for n, conv in enumerate(convs):
            await r.send(conv, f"RW1 HO scheduler-1 p=pay from=scheduler to=payer item=inv:T-{n} ask=REVIEW exp={EXP}")
        await r.collector.wait(lambda g: all(forwarded(g, c) for c in convs))
        r.clock.now = T_EXP
        got = await r.collector.wait(lambda g: len(cancels(g)) >= len(convs))
        await r.collector.settle(1.0)
        assert sorted(x.key.decode() for x in cancels(got)) == sorted(convs)  # one each, none twice
        labels = {"route": r.route.input, "why": "EXPIRED"}
        per_instance = [
            gk.metrics.registry.get_sample_value("gatekeeper_cancels_total", labels) or 0 for gk, _ in r.gatekeepers
        ]
        assert sum(per_instance) == len(convs)


# ---------------------------------------------------------------- sweepers driven directly


class _Harness:
    """A route, its lines decided by a Processor straight into Redis, and Sweepers with real Kafka publishers."""

    def __init__(self, bootstrap: str, settings: Settings, clock: Clock) -> None:
        self.bootstrap = bootstrap
        self.settings = settings
        self.clock = clock
        self.route = settings.routes[0]
        self.policy = route_policy(self.route, settings)
        self.store = RedisStore(settings.redis)
        self.senders: list[OutcomeSender] = []
        self.publishers: list[KafkaPublisher] = []

    async def decide(self, conversation: str, *lines: str) -> None:
        proc = Processor(self.store, self.policy)
        await proc.process([Line(conversation, ln.encode(), partition=0) for ln in lines], self.clock.now)

    async def sweeper(self, publisher_wrapper: Any = None) -> Sweeper:
        sender = OutcomeSender(AioKafka(self.settings.kafka), self.settings.kafka, Metrics())
        await sender.producer()
        self.senders.append(sender)
        publisher = KafkaPublisher(self.settings.kafka, sender)
        self.publishers.append(publisher)
        route = SweepRoute(self.policy, self.route.output, self.route.alerts)
        return Sweeper(
            self.store,
            [route],
            publisher_wrapper(publisher) if publisher_wrapper else publisher,
            clock=self.clock,
            takeover_seconds=30.0,
        )

    async def sweep(self, sweeper: Sweeper) -> Any:
        return await sweeper.sweep([(self.route.input, 0)], now=self.clock.now)

    async def close(self) -> None:
        for p in self.publishers:
            await p.close()
        for sender in self.senders:
            await sender.close()
        await self.store.close()


@contextlib.asynccontextmanager
async def harness(topics: TopicFactory, bootstrap: str, redis_url: str) -> AsyncIterator[tuple[_Harness, Collector]]:
    route = await make_route(topics)
    settings = settings_for(bootstrap, redis_url, [route], group=f"gk-test-{uuid.uuid4().hex[:8]}")
    h = _Harness(bootstrap, settings, Clock(NOW))
    collector = Collector(bootstrap, {route["output"]: "output", route["alerts"]: "alerts"})
    await collector.start()
    try:
        await h.store.put_record(RECORD)
        yield h, collector
    finally:
        await collector.stop()
        await h.close()


class CrashAfterPublish:
    """The publisher of a sweeper killed right after its records were acknowledged, before its bookkeeping."""

    def __init__(self, inner: KafkaPublisher) -> None:
        self.inner = inner

    async def publish(self, records: Sequence[OutRecord]) -> list[int]:
        await self.inner.publish(records)
        raise Crash("killed after publishing, before the bookkeeping")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_two_sweepers_on_one_partition_publish_one_cancel_per_handoff(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    """Two instances that both believe they hold the partition (a rebalance in flight, a paused zombie)."""
    async with harness(topic_factory, kafka_bootstrap, redis_url) as (h, collector):
        convs = [f"race-{n}" for n in range(8)]
        for n, conv in enumerate(convs):
            await h.decide(
                conv, f"RW1 HO scheduler-1 p=pay from=scheduler to=payer item=inv:R-{n} ask=REVIEW exp={EXP}"
            )
        a, b = await h.sweeper(), await h.sweeper()
        h.clock.now = T_EXP
        ra, rb = await asyncio.gather(h.sweep(a), h.sweep(b))
        assert len(ra.cancels) + len(rb.cancels) == len(convs)
        got = await collector.wait(lambda g: len(cancels(g)) >= len(convs))
        await collector.settle(1.0)
        assert sorted(x.key.decode() for x in cancels(got)) == sorted(convs)
        for sweeper in (a, b):  # nothing left to do for either
            assert (await h.sweep(sweeper)).cancels == []


async def test_a_sweeper_killed_between_publishing_and_bookkeeping_is_not_repeated_on_restart(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    async with harness(topic_factory, kafka_bootstrap, redis_url) as (h, collector):
        await h.decide("crash", HO_EXP)
        doomed = await h.sweeper(CrashAfterPublish)
        h.clock.now = T_EXP
        with pytest.raises(Crash):
            await h.sweep(doomed)
        await collector.wait(lambda g: len(cancels(g)) >= 1)
        state = (await h.store.load(h.route.input, {"crash": None}, [])).states["crash"]
        assert state.handoffs["scheduler-1"].gk_cancel is None  # the bookkeeping never happened
        restarted = await h.sweeper()  # a new process: another owner
        report = await h.sweep(restarted)  # the dead sweeper's claim is still young: left alone
        assert report.cancels == [] and report.handled[0].what.startswith("skipped")
        h.clock.now = T_EXP + 31
        report = await h.sweep(restarted)
        assert [x.what for x in report.handled] == ["recovered"]
        await collector.settle(1.0)
        assert len(cancels(collector.got)) == 1  # found on the topic, not published again
        state = (await h.store.load(h.route.input, {"crash": None}, [])).states["crash"]
        assert state.handoffs["scheduler-1"].gk_cancel == "scheduler-900000001"
        assert (await h.sweep(restarted)).handled == []


class Hang:
    """A publisher whose produce never returns (a broker that stopped answering, a process about to be killed)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.entered = asyncio.Event()

    async def publish(self, records: Sequence[OutRecord]) -> list[int]:
        self.entered.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_gatekeeper_stopped_mid_cancel_and_restarted_emits_one_cancel(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    """The daemon's two-stage stop with a sweep in flight: the sweep is cancelled after the grace period (its cancel
    intent is claimed, nothing published), and the next gatekeeper publishes the cancel once."""
    route = await make_route(topic_factory)
    settings = settings_for(
        kafka_bootstrap,
        redis_url,
        [route],
        sweeper={"interval_seconds": 0.1, "takeover_seconds": 30.0},
        grace_seconds=0.5,
    )
    r = Running(kafka_bootstrap, settings, Clock(NOW))
    try:
        await r.store.put_record(RECORD)
        await r.start(1)
        gk, task = r.gatekeepers[0]
        assert gk.sweeper is not None
        hang = Hang(gk.sweeper.publisher)
        gk.sweeper.publisher = hang
        await r.send("stop", HO_EXP)
        await r.collector.wait(lambda g: len(forwarded(g, "stop")) >= 1)
        r.clock.now = T_EXP
        await asyncio.wait_for(hang.entered.wait(), 10.0)
        gk.request_stop()
        await asyncio.wait_for(task, 15.0)  # the hung sweep did not keep it from stopping
        intents = await r.store.intents(route["input"], [("stop", "scheduler-1")])
        assert not intents[("stop", "scheduler-1")].done
        assert cancels(r.collector.got) == []
        # restarted, after the takeover time: one cancel
        r.gatekeepers.clear()
        r.clock.now = T_EXP + 31
        gk2 = Gatekeeper(settings, store=RedisStore(settings.redis), http=False, clock=r.clock)
        r.gatekeepers.append((gk2, asyncio.create_task(gk2.run())))
        await wait_ready(*r.gatekeepers[0])
        got = await r.collector.wait(lambda g: len(cancels(g)) >= 1)
        await r.collector.settle(1.0)
        assert len(cancels(got, "stop")) == 1
    finally:
        await r.stop()


# ---------------------------------------------------------------- questions unanswered past by=


def question_alerts(got: Collected, conversation: str) -> list[Got]:
    return [x for x in got.of("alerts", conversation) if x.h("gk.alert") == UNANSWERED]


async def test_a_question_unanswered_past_by_is_alerted_once_and_an_answered_one_never(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    async with running(topic_factory, kafka_bootstrap, redis_url) as r:
        review = "RW1 HO scheduler-1 p=pay from=scheduler to=payer item=inv:Q-{} ask=REVIEW"  # no record, no exp
        await r.send("asked", review.format(1), AQ)
        await r.send("told", review.format(2), AQ)
        await r.collector.wait(lambda g: len(forwarded(g, "asked")) >= 2 and len(forwarded(g, "told")) >= 2)
        await r.send("told", ANSWER)
        await r.collector.wait(lambda g: ANSWER in forwarded(g, "told"))
        r.clock.now = T_BY - 60  # the last minute of the day named by by=: in time
        await r.collector.settle(0.5)
        assert r.collector.got.alerts == []
        r.clock.now = T_BY + 60
        got = await r.collector.wait(lambda g: len(question_alerts(g, "asked")) >= 1)
        await r.collector.settle(1.0)  # many sweeps (every 0.1 s): still one
        (alert,) = question_alerts(r.collector.got, "asked")
        doc = alert.doc
        assert (doc["question"], doc["from"], doc["to"], doc["by"]) == ("payer-8", "payer", "scheduler", "20261005")
        assert alert.h("gk.question") == "payer-8" and alert.doc["conversation"] == "asked"
        assert question_alerts(got, "told") == [] and cancels(got) == []
        assert len(r.collector.got.alerts) == 1
        gk = r.gatekeepers[0][0]
        m = gk.metrics.registry.get_sample_value
        assert m("gatekeeper_unanswered_questions_total", {"route": r.route.input}) == 1
        loaded = await r.store.load(r.route.input, {"asked": None}, [])
        assert loaded.states["asked"].lines["payer-8"].unanswered_at == T_BY + 60
        assert await r.store.index(r.route.input, "due") == []
        # a restarted gatekeeper (another process, another sweeper) raises it no second time
        gk.request_stop()
        await asyncio.wait_for(r.gatekeepers[0][1], 20.0)
        r.gatekeepers.clear()
        r.clock.now = T_BY + 86400
        gk2 = Gatekeeper(r.settings, store=RedisStore(r.settings.redis), http=False, clock=r.clock)
        r.gatekeepers.append((gk2, asyncio.create_task(gk2.run())))
        await wait_ready(*r.gatekeepers[0])
        await r.collector.settle(1.0)
        assert len(r.collector.got.alerts) == 1
        again = gk2.metrics.registry.get_sample_value("gatekeeper_unanswered_questions_total", {"route": r.route.input})
        assert again in (None, 0.0)
