"""Dead letters that do not multiply, and only the route's own, through the real broker and Redis:

- ``replay --requeue-failed`` run again and again keeps one live letter per line (a requeue replaces the letter), its
  attempt rising, until it is parked; a copy past ``--until`` still supersedes the letter it replaced;
- a planted letter naming a partition the route's input topic does not have (or malformed ``gk.original.*``
  values) is refused, not indexed where no instance sweeps it;
- a letter on route A's dead-letter topic naming route B is refused, with ``--from-topic`` as with ``--route``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gatekeeper.cli import app
from gatekeeper.replay import PARKED, SUPERSEDED, Replayer, Selection, Status
from tests.integration._pipeline import Collected, Got, Pipeline, TopicFactory, make_route, produce
from tests.policy.world import HO, RECORD

pytestmark = pytest.mark.integration


def _config(p: Pipeline, tmp_path: Path) -> str:
    path = tmp_path / "gk.yaml"
    path.write_text(yaml.safe_dump(json.loads(p.settings.model_dump_json())))
    return str(path)


async def _cli(*args: str) -> Any:
    return await asyncio.to_thread(CliRunner().invoke, app, list(args))


def _dead(got: Collected, conversation: str) -> list[Got]:
    return got.of("dead", conversation)


def _planted(route: str, partition: str, offset: str = "0", **extra: str) -> list[tuple[str, bytes]]:
    """A dead letter as something other than the gatekeeper could write it, naming ``route``."""
    headers = {
        "gk.original.topic": route,
        "gk.original.partition": partition,
        "gk.original.offset": offset,
        "gk.original.timestamp": "1790845200000",
        "gk.reason": "no-record",
        "gk.attempt": "1",
        **extra,
    }
    return [(k, v.encode()) for k, v in headers.items()]


async def test_requeue_replaces_the_letter_and_parks_it_at_its_last_attempt(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: Any, tmp_path: Path
) -> None:
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        route = p.route()
        await p.send("loop", HO)  # no approval: dead-lettered no-record, attempt 1
        await p.collect(lambda g: len(_dead(g, "loop")) == 1)
        config = _config(p, tmp_path)
        for run in range(1, 5):
            res = await _cli("replay", "-r", route.input, "--requeue-failed", "--json", "-c", config)
            assert res.exit_code == 1, res.output  # still failing
            await p.collect(lambda g: len(_dead(g, "loop")) > run)  # noqa: B023
            letters = _dead(await p.collector.settle(0.5), "loop")
            assert [d.h("gk.attempt") for d in letters] == [str(a) for a in range(1, run + 2)]  # one more, not double
            doc = json.loads(res.stdout)
            live = [ln for ln in doc["lines"] if ln["note"] != SUPERSEDED]
            assert len(live) == 1 and len(doc["lines"]) == run  # one live letter, the others superseded
            newest, replaced = letters[-1], letters[-2]
            assert newest.h("gk.replayed.from.offset") == str(replaced.offset)  # the copy says what it replaces
            assert (newest.h("gk.original.topic"), newest.h("gk.original.offset")) == (route.input, "0")
            if run < 4:
                assert (live[0]["status"], newest.h("gk.parked")) == ("requeued", None)
            else:  # attempt 5 (--max-attempts' default): requeued once more, parked
                assert (live[0]["status"], doc["parked"]) == ("parked", 1)
                assert newest.h("gk.parked") == "max-attempts" and newest.h("gk.parked.at")

        # parked: skipped, never requeued again, nothing produced; replayed only when asked for, and left if failing
        res = await _cli("replay", "-r", route.input, "--requeue-failed", "--json", "-c", config)
        assert res.exit_code == 0, res.output
        doc = json.loads(res.stdout)
        assert [ln["note"] for ln in doc["lines"]] == [SUPERSEDED] * 4 + [PARKED]
        asked = await Replayer(p.settings).run(route=route.input, requeue_failed=True, include_parked=True)
        [left] = [ln for ln in asked.lines if ln.note != SUPERSEDED]
        assert left.status is Status.STILL_FAILING and (left.note or "").endswith("parked: never requeued again")
        assert len(_dead(await p.collector.settle(1.0), "loop")) == 5

        await p.store.put_record(RECORD)  # the approval lands: the parked letter is forwarded when asked for
        skipped = await Replayer(p.settings).run(route=route.input)
        assert skipped.passed == 0 and skipped.lines[-1].note == PARKED
        forwarded = await Replayer(p.settings).run(route=route.input, include_parked=True)
        assert [ln.status for ln in forwarded.lines] == [Status.SKIPPED] * 4 + [Status.FORWARDED]
        got = await p.collect(lambda g: len(g.of("output", "loop")) == 1)
        assert got.of("output", "loop")[0].h("gk.attempt") == "6"


async def test_a_copy_past_until_still_supersedes_the_letter_it_replaced(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: Any
) -> None:
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        route = p.route()
        await p.send("u", HO)
        await p.collect(lambda g: len(_dead(g, "u")) == 1)
        await asyncio.sleep(1.2)
        first = await Replayer(p.settings).run(route=route.input, requeue_failed=True)
        assert [ln.status for ln in first.lines] == [Status.REQUEUED]
        got = await p.collect(lambda g: len(_dead(g, "u")) == 2)
        letter, copy = _dead(got, "u")
        records = await _timestamps(p, route.dead_letter)
        middle = (records[letter.offset] + records[copy.offset]) / 2000  # after the letter, before its copy
        until = await Replayer(p.settings).run(
            route=route.input, requeue_failed=True, selection=Selection(until=middle)
        )
        assert until.read == 1 and [(ln.status, ln.note) for ln in until.lines] == [(Status.SKIPPED, SUPERSEDED)]
        assert len(_dead(await p.collector.settle(1.0), "u")) == 2  # nothing requeued twice


async def _timestamps(p: Pipeline, topic: str) -> dict[int, int]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=p.bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        batch = await consumer.getmany(tp, timeout_ms=5000)
        return {r.offset: r.timestamp for r in batch.get(tp, [])}
    finally:
        await consumer.stop()


async def test_a_planted_partition_or_malformed_original_is_refused(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: Any
) -> None:
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        route = p.route()
        await p.store.put_record(RECORD)  # a planted handoff would pass: its approval is loaded and unused
        await p.send("real", "not an RW1 line")  # the input partition has an offset 0; its dead letter too
        await p.collect(lambda g: g.count("real") == 1)
        planted = [
            (b"c99", HO.encode(), _planted(route.input, "99")),  # no such partition: no instance would sweep it
            (b"c-off", HO.encode(), _planted(route.input, "0", offset="0x0")),
            (b"c-end", HO.encode(), _planted(route.input, "0", offset="7")),  # past the input partition's end
            (b"c-ts", HO.encode(), _planted(route.input, "0", **{"gk.original.timestamp": "soon"})),
        ]
        await produce(kafka_bootstrap, route.dead_letter, planted)
        report = await Replayer(p.settings).run(route=route.input)
        notes = {ln.offset: (ln.status, ln.note) for ln in report.lines}
        assert notes[0][0] is Status.STILL_FAILING  # the real one: invalid still
        assert [notes[i] for i in range(1, 5)] == [
            (Status.SKIPPED, f"gk.original.partition '99' is not a partition of {route.input} (refused)"),
            (Status.SKIPPED, f"gk.original.offset '0x0' is not an offset of {route.input} (refused)"),
            (Status.SKIPPED, f"gk.original.offset '7' is not an offset of {route.input} (refused)"),
            (Status.SKIPPED, "gk.original.timestamp 'soon' is not a timestamp (refused)"),
        ]
        got = await p.collector.settle(1.0)
        assert got.output == [] and len(got.dead) == 5  # nothing forwarded, nothing requeued
        prefix = p.settings.redis.key_prefix
        assert [k async for k in redis_client.scan_iter(match=f"{prefix}:open:*#99*")] == []


async def test_a_letter_on_one_routes_dead_letter_topic_naming_another_route_is_refused(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: Any, tmp_path: Path
) -> None:
    routes = [await make_route(topic_factory), await make_route(topic_factory)]
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, routes=routes) as p:
        a, b = p.route(0), p.route(1)
        await p.store.put_record(RECORD)  # the planted handoff would pass on route B
        await produce(kafka_bootstrap, a.dead_letter, [(b"planted", HO.encode(), _planted(b.input, "0"))])
        config = _config(p, tmp_path)
        note = f"it names route {b.input}, whose dead letters do not go to {a.dead_letter} (refused)"
        for args in (("--from-topic", a.dead_letter), ("--route", a.input)):
            res = await _cli("replay", *args, "--json", "-c", config)
            assert res.exit_code == 0, res.output
            doc = json.loads(res.stdout)
            assert [(ln["status"], ln["note"]) for ln in doc["lines"]] == [("skipped", note)]
        got = await p.collector.settle(1.0)
        assert got.output == [] and [r.key for r in got.dead] == [b"planted"]  # it never reached route B
