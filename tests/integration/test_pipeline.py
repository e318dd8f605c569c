"""The gatekeeper end to end, through the real broker and real Redis: one conversation per scenario, asserting what
arrives on the output, dead-letter and alert topics."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest

from gatekeeper import __version__
from gatekeeper.policy import Record
from gatekeeper.store import StoreError
from tests.integration._pipeline import Collected, Pipeline, TopicFactory, committed, make_route, until
from tests.policy.world import ACK, AN, CX, DN, HO, RB, RECORD

pytestmark = pytest.mark.integration

ACCT = "40-12-88/61102938"
LOOKALIKE = "40-12-88/61102983"


def done(conversation: str, n: int) -> object:
    return lambda got: got.count(conversation) >= n


async def test_a_clean_payment_is_forwarded_line_by_line(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        await p.store.put_record(RECORD)
        await p.send("clean", HO, RB, AN, DN)
        got = await p.collect(done("clean", 4))
        out = got.of("output", "clean")
        assert [r.text for r in out] == [HO, RB, AN, DN]
        assert got.of("dead", "clean") == [] and got.of("alerts", "clean") == []
        first = out[0]
        assert first.h("gk.verdict") == "forward" and first.h("gk.version") == __version__
        assert first.h("gk.original.topic") == p.route().input
        assert [r.h("gk.original.offset") for r in out] == ["0", "1", "2", "3"]
        assert first.h(
            "gk.checked.at",
        ).endswith("Z")  # type: ignore[union-attr]


async def test_a_swapped_digit_in_the_handoff_is_dead_lettered_never_forwarded(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    bad = HO.replace(ACCT, LOOKALIKE)
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        await p.store.put_record(RECORD)
        await p.send("swap", bad, headers=[("traceparent", b"00-1-01")])
        got = await p.collect(done("swap", 1))
        await p.collector.settle()
        assert got.of("output", "swap") == []
        (dl,) = got.of("dead", "swap")
        assert dl.value == bad.encode() and dl.key == b"swap"
        assert dl.h("gk.reason") == "check-ho" and dl.h("gk.check") == "check_ho"
        assert (dl.h("gk.original.topic"), dl.h("gk.original.partition"), dl.h("gk.original.offset")) == (
            p.route().input,
            "0",
            "0",
        )
        assert dl.h("gk.attempt") == "1" and dl.h("gk.conversation") == "swap" and dl.h("gk.version") == __version__
        assert dl.h("gk.decided.at") and dl.h("gk.tier") and dl.h("gk.original.timestamp")
        assert dl.h("traceparent") == "00-1-01"
        problems = json.loads(dl.h("gk.problems") or "[]")
        assert any(pr["slot"] == "acct" for pr in problems)
        text = dl.h("gk.problems") or ""
        assert ACCT not in text and LOOKALIKE not in text and "****2983" in text


async def test_an_exec_ask_without_rb_exec_is_dead_lettered(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        await p.store.put_record(RECORD)
        await p.send("norb", HO.replace(" rb=exec", ""))
        got = await p.collect(done("norb", 1))
        (dl,) = got.of("dead", "norb")
        assert dl.h("gk.reason") == "check-ho"
        assert got.of("output", "norb") == []


async def test_a_lookalike_in_the_tools_statement_and_its_clearance_are_refused(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        await p.store.put_record(RECORD)
        await p.send("tool", HO, RB.replace(ACCT, LOOKALIKE), AN)
        got = await p.collect(done("tool", 3))
        assert [r.text for r in got.of("output", "tool")] == [HO]
        rb, an = got.of("dead", "tool")
        assert rb.h("gk.reason") == "check-rb" and rb.h("gk.check") == "check_rb_full"
        assert an.h("gk.reason") == "refused-handoff"
        assert LOOKALIKE not in (rb.h("gk.problems") or "")


async def test_a_done_report_with_another_amount_is_forwarded_flagged_with_an_alert(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    bad_dn = DN.replace("amt=5400.00", "amt=5100.00")
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        await p.store.put_record(RECORD)
        await p.send("dn", HO, RB, AN, bad_dn)
        got = await p.collect(lambda g: g.count("dn") >= 4 and len(g.of("alerts", "dn")) >= 1)
        out = got.of("output", "dn")
        assert [r.text for r in out] == [HO, RB, AN, bad_dn]
        flagged = out[-1]
        assert flagged.h("gk.verdict") == "alert" and flagged.h("gk.reason") == "check-dn"
        (alert,) = got.of("alerts", "dn")
        doc = alert.doc
        assert doc["alert"] == "check-dn" and doc["conversation"] == "dn" and doc["id"] == "payer-2"
        assert doc["type"] == "DN" and doc["original"]["offset"] == 3 and doc["original"]["topic"] == p.route().input
        assert ACCT not in alert.text and any(pr["slot"] == "amt" for pr in doc["problems"])


async def test_a_done_report_after_an_acknowledged_cancel_raises_an_alert(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        await p.store.put_record(RECORD)
        await p.send("cx", HO, RB, CX, ACK, DN)
        got = await p.collect(lambda g: g.count("cx") >= 5 and len(g.of("alerts", "cx")) >= 1)
        out = got.of("output", "cx")
        assert [r.text for r in out] == [HO, RB, CX, ACK, DN]
        assert out[-1].h("gk.verdict") == "alert"
        (alert,) = got.of("alerts", "cx")
        assert alert.doc["type"] == "DN"


DRAFT_HO = (
    "RW1 HO research-1 from=research to=writer item=gh:crox/site#42 ask=DRAFT due=20261002 rb=acc "
    "keys=len+tone+must+no // hero copy"
)
DRAFT_RB = (
    "RW1 RB writer-1 re=research-1 from=writer to=research item=gh:crox/site#42 ask=DRAFT due=20261002 "
    "acc=len:150w+tone:plain+must:monday-problem+no:em-dash do=copy"
)
DRAFT_RECORD = Record(
    "gh:crox/site#42",
    "DRAFT",
    {"to": "writer", "ask": "DRAFT", "due": "20261002"},
    expect_acc=("len:120w", "tone:plain", "no:em-dash", "must:monday-problem"),
)


async def test_a_comprehension_readback_that_contradicts_the_withheld_length_is_refused(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    route = await make_route(topic_factory, profile="core")
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, [route]) as p:
        await p.store.put_record(DRAFT_RECORD)
        await p.send("acc", DRAFT_HO, DRAFT_RB)
        got = await p.collect(done("acc", 2))
        assert [r.text for r in got.of("output", "acc")] == [DRAFT_HO]
        (dl,) = got.of("dead", "acc")
        assert dl.h("gk.reason") == "check-rb"
        assert any(pr["tier"] == "comprehension" for pr in json.loads(dl.h("gk.problems") or "[]"))


INVALID = {
    "unknown-code": HO.replace("ask=PAY", "ask=PAYY").encode(),
    "bad-money": HO.replace("amt=5400.00", "amt=5,400.00").encode(),
    "id-shape": HO.replace("scheduler-1", "sched-1", 1).encode(),
    "long-tail": (HO + " // " + "x" * 301).encode(),
    "version": HO.replace("RW1", "RW2", 1).encode(),
    "not-utf8": HO.encode() + b" // caf\xe9",
    "two-lines": (HO + " // first\nRW1 AN scheduler-9 re=payer-1 from=scheduler to=payer val=Y").encode(),
}


async def test_invalid_lines_are_dead_lettered_invalid(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        await p.store.put_record(RECORD)
        for name, value in INVALID.items():
            await p.send(f"inv-{name}", value)

        def all_in(g: Collected) -> bool:
            return all(g.count(f"inv-{name}") >= 1 for name in INVALID)

        got = await p.collect(all_in)
        for name, value in INVALID.items():
            assert got.of("output", f"inv-{name}") == [], name
            (dl,) = got.of("dead", f"inv-{name}")
            assert dl.h("gk.reason") == "invalid", name
            assert dl.value == value, name  # the original bytes, unchanged (not-UTF-8 included)


async def test_a_sender_the_route_does_not_allow_is_dead_lettered(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    route = await make_route(topic_factory, senders=["scheduler"])
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, [route]) as p:
        await p.store.put_record(RECORD)
        await p.send("bind", HO, RB)
        got = await p.collect(done("bind", 2))
        assert [r.text for r in got.of("output", "bind")] == [HO]
        (dl,) = got.of("dead", "bind")
        assert dl.h("gk.reason") == "sender-binding"


async def test_one_approval_one_act_across_conversations(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        await p.store.put_record(RECORD)
        await p.send("first", HO)
        await p.collect(done("first", 1))
        await p.send("second", HO)
        got = await p.collect(done("second", 1))
        assert [r.text for r in got.of("output", "first")] == [HO]
        (dl,) = got.of("dead", "second")
        assert dl.h("gk.reason") == "record-used"
        assert f"{p.route().input}/first/scheduler-1" in (dl.h("gk.problems") or "")


async def test_dry_run_forwards_everything_and_marks_would_be_dead_letters(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    route = await make_route(topic_factory, mode="dry-run")
    bad = HO.replace(ACCT, LOOKALIKE)
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, [route]) as p:
        await p.store.put_record(RECORD)
        await p.send("dry", bad)
        await p.send("dry-ok", HO)
        got = await p.collect(lambda g: g.count("dry") >= 1 and g.count("dry-ok") >= 1)
        await p.collector.settle()
        assert got.dead == []
        (would,) = got.of("output", "dry")
        (ok,) = got.of("output", "dry-ok")
        assert would.value == bad.encode() and ok.value == HO.encode()
        assert would.h("gk.dry-run") == "true" and ok.h("gk.dry-run") == "true"
        assert would.h("gk.would.verdict") == "dead-letter" and would.h("gk.would.reason") == "check-ho"
        assert ok.h("gk.would.verdict") is None
        metric = p.gatekeeper.metrics.would_dead_letter.labels(route=route["input"], reason="check-ho")
        assert metric._value.get() == 1


async def test_a_reply_whose_handoff_never_comes_is_held_then_refused(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    route = await make_route(topic_factory, hold_seconds=1.0)
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, [route]) as p:
        await p.store.put_record(RECORD)
        await p.send("held", RB, AN)
        await p.send("other", HO)  # the partition is not blocked by the held lines
        got = await p.collect(done("other", 1))
        assert got.count("held") == 0 and p.gatekeeper.held == 2
        got = await p.collect(done("held", 2))
        rb, an = got.of("dead", "held")
        assert rb.h("gk.reason") == "unknown-handoff" and an.h("gk.reason") == "refused-handoff"
        assert p.gatekeeper.held == 0


async def test_a_dead_letter_too_large_for_its_topic_is_trimmed_not_blocking(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    route = await make_route(topic_factory)
    route["dead_letter"] = await topic_factory(1, config={"max.message.bytes": "1200"})
    bad = HO.replace(ACCT, LOOKALIKE).replace("amt=5400.00", "amt=5400.01").replace("GBP", "EUR")
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, [route]) as p:
        await p.store.put_record(RECORD)
        await p.send("big", bad + " // " + "y" * 280)
        await p.send("after", HO)
        got = await p.collect(lambda g: g.count("big") >= 1 and g.count("after") >= 1)
        (dl,) = got.of("dead", "big")
        assert dl.h("gk.reason") == "check-ho" and dl.h("gk.original.offset") == "0"
        assert (dl.h("gk.trimmed") or "").startswith("problems") and dl.h("gk.problems") is None
        assert dl.value.startswith(bad.encode())


async def test_a_refusal_by_the_broker_is_trimmed_too(
    topic_factory: TopicFactory,
    kafka_bootstrap: str,
    redis_url: str,
    redis_client: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The topic's limit unknown beforehand: the broker refuses, the producer is replaced, the outcome trimmed."""
    from gatekeeper.consumers.client import AioKafka

    async def unknown(*_: object) -> dict[str, int]:
        return {}

    monkeypatch.setattr(AioKafka, "topic_limits", unknown)
    route = await make_route(topic_factory)
    route["dead_letter"] = await topic_factory(1, config={"max.message.bytes": "1200"})
    bad = HO.replace(ACCT, LOOKALIKE).replace("amt=5400.00", "amt=5400.01").replace("GBP", "EUR")
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, [route]) as p:
        await p.store.put_record(RECORD)
        await p.send("big", bad + " // " + "y" * 280, bad.replace("scheduler-1", "scheduler-2", 1))
        got = await p.collect(lambda g: g.count("big") >= 2)
        first, second = got.of("dead", "big")
        assert first.h("gk.trimmed") and first.h("gk.original.offset") == "0"
        assert second.h("gk.original.offset") == "1" and second.h("gk.reason") == "check-ho"
        assert second.h("gk.problems") is not None  # its batch-mate's refusal did not trim it
        assert p.gatekeeper.metrics.trimmed.labels(route=route["input"], kind="dead-letter")._value.get() >= 1


class _Wrapped:
    """The Redis store, with the load a subclass changes; everything else the store's own."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class FlakyStore(_Wrapped):
    """The Redis store, failing its first ``fail`` loads as if Redis were down."""

    def __init__(self, inner: Any, fail: int) -> None:
        super().__init__(inner)
        self.fail = fail

    async def load(self, *args: Any, **kw: Any) -> Any:
        if self.fail > 0:
            self.fail -= 1
            raise StoreError("redis 127.0.0.1:1: load failed: ConnectionError: refused (test)")
        return await self.inner.load(*args, **kw)


async def test_redis_trouble_pauses_and_retries_never_dead_letters(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    flaky: list[FlakyStore] = []

    def wrap(store: Any) -> FlakyStore:
        flaky.append(FlakyStore(store, 0))
        return flaky[0]

    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, wrap_store=wrap) as p:
        await p.store.put_record(RECORD)
        flaky[0].fail = 3
        states: list[dict[str, Any]] = []

        async def watch() -> None:
            while True:
                ready, detail = p.gatekeeper.readiness()
                if not ready:
                    states.append(detail)
                await asyncio.sleep(0.05)

        watcher = asyncio.create_task(watch())
        await p.send("flaky", HO, RB, AN, DN)
        got = await p.collect(done("flaky", 4))
        watcher.cancel()
        assert [r.text for r in got.of("output", "flaky")] == [HO, RB, AN, DN]
        assert got.dead == []
        assert any(s.get("reason") == "redis unavailable" for s in states), states
        assert p.gatekeeper.metrics.redis_errors._value.get() >= 3
        assert p.gatekeeper.readiness()[0]
        group, topic = p.settings.kafka.group_id, p.route().input
    assert await committed(kafka_bootstrap, group, topic) == {0: 4}


class GatedStore(_Wrapped):
    """The Redis store whose loads after the first ``free`` wait for ``go``: a Redis slow to answer one batch."""

    def __init__(self, inner: Any, free: int) -> None:
        super().__init__(inner)
        self.free = free
        self.go = asyncio.Event()
        self.waiting = False

    async def load(self, *args: Any, **kw: Any) -> Any:
        if self.free > 0:
            self.free -= 1
        else:
            self.waiting = True
            await self.go.wait()
            self.waiting = False
        return await self.inner.load(*args, **kw)


async def test_the_batch_before_is_committed_while_the_next_waits_for_redis(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    """At-least-once, a batch sent is acknowledged by the broker and committed while the batch read after it waits
    for its Redis load (the settling runs beside the deciding); the batch after goes out only once its load
    returns, and each line once, in order. Fails where the settling waited behind the deciding."""
    gated: list[GatedStore] = []

    def wrap(store: Any) -> GatedStore:
        gated.append(GatedStore(store, free=1))
        return gated[0]

    async with Pipeline.create(
        topic_factory, kafka_bootstrap, redis_url, wrap_store=wrap, kafka={"max_batch": 1, "commit_interval_ms": 0}
    ) as p:
        await p.store.put_record(RECORD)
        group, topic = p.settings.kafka.group_id, p.route().input
        await p.send("gated", HO, RB)  # read in one fetch, decided one a batch: the RB's batch behind the HO's
        await until(lambda: gated[0].waiting)
        deadline = asyncio.get_running_loop().time() + 20
        while await committed(kafka_bootstrap, group, topic) != {0: 1}:
            assert asyncio.get_running_loop().time() < deadline, "the HO's batch was not committed meanwhile"
            await asyncio.sleep(0.1)
        assert gated[0].waiting  # still waiting: the commit did not wait for it
        gated[0].go.set()
        got = await p.collect(done("gated", 2))
        assert [r.text for r in got.of("output", "gated")] == [HO, RB]
        assert got.dead == []
    assert await committed(kafka_bootstrap, group, topic) == {0: 2}


async def test_exactly_once_mode_commits_offsets_in_the_transaction(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    kafka = {"transactional": True, "transactional_id_prefix": f"gk-test-{uuid.uuid4().hex[:8]}"}
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, kafka=kafka) as p:
        await p.store.put_record(RECORD)
        await p.send("eos", HO, RB.replace(ACCT, LOOKALIKE))
        got = await p.collect(done("eos", 2))
        assert [r.text for r in got.of("output", "eos")] == [HO]
        assert [r.h("gk.reason") for r in got.of("dead", "eos")] == ["check-rb"]
        group, topic = p.settings.kafka.group_id, p.route().input
        for _ in range(50):
            if await committed(kafka_bootstrap, group, topic) == {0: 2}:
                break
            await asyncio.sleep(0.1)
    assert await committed(kafka_bootstrap, group, topic) == {0: 2}


async def test_a_rebalance_commits_what_was_done_and_loses_nothing(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    """A second instance joins the group mid-stream: the first commits on revocation; every line is answered
    exactly once (nothing lost, nothing repeated)."""
    from gatekeeper.consumers.loop import Gatekeeper
    from tests.integration._pipeline import produce, wait_ready

    route = await make_route(topic_factory, partitions=2)
    n = 400
    lines = [
        (
            f"rb-{i % 20}".encode(),
            f"RW1 HO scheduler-{i} p=pay from=scheduler to=payer item=run:r{i % 20} ask=RECON".encode(),
            (),
        )
        for i in range(n)
    ]
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, [route]) as p:
        await produce(kafka_bootstrap, route["input"], lines[: n // 2])
        await p.collect(lambda g: len(g.output) >= n // 4)
        assert p.collector.got.dead == []
        second = Gatekeeper(p.settings, store=p.store, http=False)
        task = asyncio.create_task(second.run())
        try:
            await wait_ready(second, task)
            await produce(kafka_bootstrap, route["input"], lines[n // 2 :])
            got = await p.collect(lambda g: len(g.output) + len(g.dead) >= n)
            await p.collector.settle(1.0)
        finally:
            second.request_stop()
            await asyncio.wait_for(task, 20)
    coords = [(r.h("gk.original.partition"), r.h("gk.original.offset")) for r in got.output + got.dead]
    assert len(set(coords)) == n
    assert len(coords) == n, f"{len(coords) - n} lines answered twice"


async def test_a_reply_that_overtakes_its_handoff_is_held_until_the_handoff_arrives(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    """Keyless records name their conversation in a header, so one conversation spans partitions: the readback is
    consumed before its handoff, held without blocking, and decided once the handoff has been."""
    from tests.integration._pipeline import produce

    route = await make_route(topic_factory, partitions=2, conversation_header="conv", hold_seconds=10.0)
    headers = [("conv", b"split")]
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, [route]) as p:
        await p.store.put_record(RECORD)
        await produce(kafka_bootstrap, route["input"], [(None, RB.encode(), headers)], partition=1)
        for _ in range(100):
            if p.gatekeeper.held == 1:
                break
            await asyncio.sleep(0.05)
        assert p.gatekeeper.held == 1
        await produce(kafka_bootstrap, route["input"], [(None, HO.encode(), headers)], partition=0)
        got = await p.collect(lambda g: len([r for r in g.output if r.h("gk.conversation") == "split"]) >= 2)
        out = [r for r in got.output if r.h("gk.conversation") == "split"]
        assert [r.text for r in out] == [HO, RB]
        assert got.dead == [] and p.gatekeeper.held == 0
