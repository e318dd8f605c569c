"""No producer can stop or stall the gatekeeper, on real Kafka and Redis.

- Poison lines of every class the attacker's probe found (a deadline at the calendar's end, an id with thousands of
  digits on a handoff, a done report and an invalid line, impossible dates, bytes that are not text, a forged
  ``gk.attempt``) and a line that makes the decision itself raise (a bug injected for the test), mixed with clean
  flows on three partitions: the daemon stays up, every input offset gets exactly one outcome, every clean line is
  forwarded, every poison line gets its reason.
- A flood of replies to handoffs nobody sent, past the hold bounds: clean flows on other keys are answered at once,
  the flood is decided (fail closed) instead of pausing intake, and readiness says the holds are under pressure.
- A dead-letter flood trips the route's breaker: one ``dead-letter-flood`` alert, the route paused, then resumed.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import gatekeeper.consumers.deciding as deciding_module
import gatekeeper.processor as processor_module
from gatekeeper.consumers.outcomes import build_all as real_build_all
from gatekeeper.policy import decide as real_decide
from tests.bugs import batch_raising_on
from tests.integration._pipeline import Collected, Pipeline, TopicFactory, make_route

pytestmark = pytest.mark.integration

HUGE = "7" * 4400  # past Python's 4,300-digit int() limit, under the default max_line_bytes


def clean_flow(i: int) -> list[str]:
    return [
        f"RW1 HO scheduler-1 p=pay from=scheduler to=desk item=doc:c{i} ask=DRAFT",
        f"RW1 DN desk-1 re=scheduler-1 p=pay from=desk to=scheduler item=doc:c{i} out=OK",
    ]


#: (conversation, line, headers, the outcome: verdict, reason)
POISON: list[tuple[str, bytes, tuple[tuple[str, bytes], ...], tuple[str, str | None]]] = [
    (
        "p-calendar-end",
        b"RW1 HO scheduler-1 p=pay from=scheduler to=desk item=doc:x ask=DRAFT exp=99991231T2500Z",
        (),
        ("dead-letter", "invalid"),
    ),
    (
        "p-huge-ho",
        f"RW1 HO scheduler-{HUGE} p=pay from=scheduler to=desk item=doc:x ask=DRAFT".encode(),
        (),
        ("forward", None),
    ),
    (
        "p-huge-dn",
        f"RW1 DN desk-{HUGE} re=scheduler-5 p=pay from=desk to=scheduler item=doc:x out=OK".encode(),
        (),
        ("alert", "unknown-handoff"),  # a done report for an unknown handoff: delivered, flagged, after its hold
    ),
    (
        "p-huge-invalid",
        f"RW1 HO scheduler-{HUGE} p=pay from=scheduler to=desk ask=NOPE".encode(),
        (),
        ("dead-letter", "invalid"),
    ),
    (
        "p-impossible-due",
        b"RW1 HO scheduler-1 p=pay from=scheduler to=desk item=doc:x ask=DRAFT due=20270230",
        (),
        ("dead-letter", "invalid"),
    ),
    (
        "p-impossible-exp",
        b"RW1 HO scheduler-1 p=pay from=scheduler to=desk item=doc:x ask=DRAFT exp=20270230T1200Z",
        (),
        ("dead-letter", "invalid"),
    ),
    ("p-bytes", b"RW1 HO \xff\xfe\x00 from=x", (), ("dead-letter", "invalid")),
    (
        "p-forged-attempt",
        b"RW1 HO scheduler-1 p=pay from=scheduler to=desk item=doc:x ask=NOPE",
        (("gk.attempt", b"41"), ("gk.reason", b"none")),
        ("dead-letter", "invalid"),
    ),
    (
        "p-bug",
        b"RW1 HO scheduler-1 p=pay from=scheduler to=desk item=doc:x ask=DRAFT // BUG-TRIGGER",
        (),
        ("dead-letter", "internal-error"),
    ),
    (
        "p-build-bug",
        b"RW1 HO scheduler-1 p=pay from=scheduler to=desk item=doc:x ask=DRAFT // BUILD-TRIGGER",
        (),
        ("dead-letter", "internal-error"),
    ),
]


def decide_with_a_bug(raw: bytes, *args: Any, **kw: Any) -> Any:
    if b"BUG-TRIGGER" in raw:
        raise OverflowError("date value out of range")
    return real_decide(raw, *args, **kw)


def build_with_a_bug(lines: Any, *args: Any, **kw: Any) -> Any:
    """A route's lines built in one call raise when one of them is the trigger: the others are built again one by
    one, the trigger's dead-lettered internal-error."""
    if any(b"BUILD-TRIGGER" in source.value for _, source, *_ in lines):
        raise KeyError("a header the outcome needs")
    return real_build_all(lines, *args, **kw)


def outcomes_by_offset(got: Collected) -> dict[tuple[int, int], list[tuple[str, str | None]]]:
    seen: dict[tuple[int, int], list[tuple[str, str | None]]] = {}
    for r in (*got.output, *got.dead):
        key = (int(r.h("gk.original.partition") or -1), int(r.h("gk.original.offset") or -1))
        seen.setdefault(key, []).append((r.h("gk.verdict") or "dead-letter", r.h("gk.reason")))
    return seen


async def test_poison_lines_never_stop_the_daemon_and_every_offset_gets_one_outcome(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(processor_module, "decide_batch", batch_raising_on(b"BUG-TRIGGER"))
    monkeypatch.setattr(processor_module, "decide", decide_with_a_bug)
    monkeypatch.setattr(deciding_module, "build_all", build_with_a_bug)
    route = await make_route(topic_factory, partitions=3, hold_seconds=1.0)
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, [route]) as p:
        sent = 0
        for i in range(30):  # clean flows before, between and after the poison
            await p.send(f"clean-{i}", *clean_flow(i))
            sent += 2
            if i % 3 == 0:
                conv, value, headers, _ = POISON[(i // 3) % len(POISON)]
                await p.send(conv, value, headers=headers)
                sent += 1
        for conv, value, headers, _ in POISON:
            await p.send(conv, value, headers=headers)
            sent += 1
        got = await p.collect(lambda g: len(g.output) + len(g.dead) >= sent, timeout=60)
        await p.collector.settle(1.0)
        assert not p.task.done(), "the daemon stopped"
        assert p.gatekeeper.readiness()[0], p.gatekeeper.readiness()[1]

        by_offset = outcomes_by_offset(got)
        assert len(by_offset) == sent and all(len(v) == 1 for v in by_offset.values()), by_offset
        for i in range(30):
            assert [r.text for r in got.of("output", f"clean-{i}")] == clean_flow(i)
            assert got.of("dead", f"clean-{i}") == []
        for conv, _, _, (verdict, reason) in POISON:
            records = [*got.of("output", conv), *got.of("dead", conv)]
            assert records, conv
            assert {(r.h("gk.verdict") or "dead-letter", r.h("gk.reason")) for r in records} == {(verdict, reason)}
        forged = got.of("dead", "p-forged-attempt")
        assert forged and {r.h("gk.attempt") for r in forged} == {"1"}  # the producer's own counts for nothing
        bugs = got.of("dead", "p-bug")
        assert bugs and all(r.h("gk.error.class") == "OverflowError" for r in bugs)
        assert "Traceback" not in (bugs[0].h("gk.error.message") or "")
        assert any(a.doc["alert"] == "internal-error" for a in got.alerts)
        m = p.gatekeeper.metrics.registry.get_sample_value
        assert m("gatekeeper_internal_errors_total", {"route": route["input"], "stage": "decide"}) == len(bugs)
        built = got.of("dead", "p-build-bug")  # building its outcome raised: held back, never forwarded
        assert built and all(r.h("gk.error.class") == "KeyError" for r in built)
        assert m("gatekeeper_internal_errors_total", {"route": route["input"], "stage": "outcome"}) == len(built)


async def test_a_flood_of_replies_past_the_hold_bounds_never_stalls_the_other_keys(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str
) -> None:
    route = await make_route(topic_factory, partitions=3, hold_seconds=20.0)
    holds = {"max_per_conversation": 50, "max_per_partition": 300, "max_total": 600}
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, [route], holds=holds) as p:
        flood = [
            (f"flood-{i}".encode(), f"RW1 AN scheduler-{i + 1} re=payer-1 p=pay from=scheduler to=payer val=N".encode())
            for i in range(3000)
        ]
        from tests.integration._pipeline import produce

        await produce(kafka_bootstrap, route["input"], [(k, v, ()) for k, v in flood])
        for i in range(10):
            await p.send(f"calm-{i}", *clean_flow(i))
        await p.collect(lambda g: all(len(g.of("output", f"calm-{i}")) == 2 for i in range(10)), timeout=15)
        # answered while the flood is still held within its 20 s window: the clean flows did not wait for it. A queue
        # forced out by a bound still counts until the next batch decides it (a moment later), so the bound is
        # looked at once the worker has turned
        for _ in range(50):
            if p.gatekeeper.held <= 600:
                break
            await asyncio.sleep(0.1)
        assert 0 < p.gatekeeper.held <= 600
        # the flood beyond the bounds was decided at once, fail closed: refused as at the end of its window
        forced = await p.collect(lambda g: sum(1 for r in g.dead if r.key.startswith(b"flood-")) >= 2400, 15)
        assert {r.h("gk.reason") for r in forced.dead if r.key.startswith(b"flood-")} == {"unknown-handoff"}
        assert p.gatekeeper.held <= 600
        ready, detail = p.gatekeeper.readiness()
        assert ready and detail.get("holds_under_pressure") == [route["input"]], detail
        m = p.gatekeeper.metrics.registry.get_sample_value
        forced_n = sum(
            m("gatekeeper_holds_forced_total", {"route": route["input"], "bound": b}) or 0
            for b in ("conversation", "partition", "instance")
        )
        assert forced_n >= 2400
        assert m("gatekeeper_hold_pressure", {"route": route["input"]}) == 1
        # and the flood pages someone: the default breaker alerts (it pauses only when configured to)
        floods = [a.doc for a in p.collector.got.alerts if a.doc["alert"] == "dead-letter-flood"]
        assert [(d["action"], d["reasons"].keys()) for d in floods] == [("alerted", {"unknown-handoff"})]
        assert "routes_paused" not in detail


async def test_a_dead_letter_flood_trips_the_breaker_alerts_once_and_pauses_the_route(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str
) -> None:
    breaker = {"ratio": 0.5, "window_seconds": 30, "min_lines": 40, "action": "pause", "pause_seconds": 3}
    route = await make_route(topic_factory, partitions=2, dead_letter_breaker=breaker)
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, [route]) as p:
        await p.send("mad", *[f"RW1 HO agent-{i} gibberish" for i in range(1, 101)])
        got = await p.collect(lambda g: any(a.doc.get("alert") == "dead-letter-flood" for a in g.alerts), 30)
        (alert,) = [a for a in got.alerts if a.doc.get("alert") == "dead-letter-flood"]
        doc = alert.doc
        assert doc["action"] == "paused" and doc["route"] == route["input"] and doc["ratio"] >= 0.5
        assert doc["reasons"] == {"invalid": doc["dead_letters"]}
        detail = p.gatekeeper.readiness()[1]
        assert detail.get("routes_paused") == [route["input"]], detail
        tripped_at = time.monotonic()
        await p.send("calm", *clean_flow(1))
        calm = await p.collect(lambda g: len(g.of("output", "calm")) == 2, 30)
        # consumed only once the pause ended (its lines waited on the topic, nothing lost)
        assert time.monotonic() - tripped_at >= 1.5
        assert [r.text for r in calm.of("output", "calm")] == clean_flow(1)
        await p.collector.settle(1.0)
        assert len([a for a in p.collector.got.alerts if a.doc.get("alert") == "dead-letter-flood"]) == 1
        assert len(p.collector.got.dead) == 100  # every flood line dead-lettered once: none lost, none twice
        m = p.gatekeeper.metrics.registry.get_sample_value
        assert m("gatekeeper_dead_letter_breaker_trips_total", {"route": route["input"]}) == 1


async def test_a_dry_run_route_s_breaker_alerts_and_never_pauses(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str
) -> None:
    breaker = {"ratio": 0.5, "window_seconds": 30, "min_lines": 40, "action": "pause", "pause_seconds": 30}
    route = await make_route(topic_factory, mode="dry-run", dead_letter_breaker=breaker)
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, [route]) as p:
        await p.send("mad", *[f"RW1 HO agent-{i} gibberish" for i in range(1, 101)])
        await p.send("calm", *clean_flow(1))

        def flood(g: Any) -> list[dict[str, Any]]:
            return [a.doc for a in g.alerts if a.doc.get("alert") == "dead-letter-flood"]

        # all forwarded at once, none held back; the alert follows the batch's accounting
        got = await p.collect(lambda g: len(g.output) == 102 and bool(flood(g)), 30)
        (alert,) = flood(got)
        assert (alert["action"], alert["dry_run"], alert["pause_seconds"]) == ("alerted", True, None)
        assert "routes_paused" not in p.gatekeeper.readiness()[1]


async def test_a_space_that_is_not_one_is_refused_in_a_tail_and_in_a_conversation_id(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str
) -> None:
    """An agent writes a no-break (or em, or ideographic) space where a reader sees a plain one: the line is
    dead-lettered invalid, the conversation id no-conversation, on the real broker; a plain line goes through."""
    from tests.policy.world import HO, RECORD

    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        await p.store.put_record(RECORD)
        await p.send("c-nbsp", HO + " // pay\u00a0now")
        await p.send("c-em", HO + " // pay\u2003now")
        await p.send("c\u00a0key", HO)
        await p.send("c-plain", HO + " // pay now")
        got = await p.collect(lambda g: len(g.output) + len(g.dead) >= 4)
        reasons = {d.key.decode(): (d.h("gk.reason"), d.h("gk.problems") or "") for d in got.dead}
        assert reasons["c-nbsp"][0] == "invalid" and "U+00A0" in reasons["c-nbsp"][1]
        assert reasons["c-em"][0] == "invalid" and "U+2003" in reasons["c-em"][1]
        assert reasons["c\u00a0key"][0] == "no-conversation" and "conversation-invalid" in reasons["c\u00a0key"][1]
        assert [o.key for o in got.output] == [b"c-plain"]
