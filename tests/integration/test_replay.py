"""``gatekeeper replay`` through the real broker and Redis: what a record that landed late releases, once; what the
rules forbid stays held; a dry run changes nothing."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gatekeeper.policy import Record
from gatekeeper.replay import NOTIFIED, RedisMarkers, Replayer, Selection, Status
from tests.integration._pipeline import Collected, Pipeline, TopicFactory, cli, committed, config_file
from tests.policy.world import AN, DN, HO, RB, RECORD

pytestmark = pytest.mark.integration

LOOKALIKE = "40-12-88/61102983"


def _n(conversation: str, n: int) -> Any:
    return lambda got: got.count(conversation) >= n


async def test_a_handoff_held_for_its_approval_is_forwarded_once_the_record_lands(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object, tmp_path: Path
) -> None:
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        route = p.route()
        await p.send("late", HO)
        got = await p.collect(_n("late", 1))
        (dl,) = got.of("dead", "late")
        assert dl.h("gk.reason") == "no-record" and dl.h("gk.attempt") == "1"

        await p.store.put_record(RECORD)  # the approval lands
        first = await Replayer(p.settings).run(route=route.input)
        assert (first.count(Status.FORWARDED), first.failing, first.read) == (1, 0, 1)
        (line,) = first.lines
        assert (line.conversation, line.id, line.was) == ("late", "scheduler-1", "no-record")
        assert line.output is not None and line.output[0] == route.output
        # its sender was told it was refused (a refusal notice): the report says the replay delivers it after all
        notified = NOTIFIED.format(id=dl.h("gk.notice.id"))
        assert dl.h("gk.notice.id") == got.of("notices", "late")[0].text.split()[2]
        assert line.note is not None and line.note.endswith(notified)

        got = await p.collect(lambda g: len(g.of("output", "late")) >= 1)
        (fwd,) = got.of("output", "late")
        assert fwd.value == HO.encode() and fwd.key == b"late"
        assert fwd.h("gk.verdict") == "forward" and fwd.h("gk.attempt") == "2"
        assert (fwd.h("gk.replayed.from.topic"), fwd.h("gk.replayed.from.partition")) == (route.dead_letter, "0")
        assert fwd.h("gk.replayed.from.offset") == str(dl.offset) and fwd.h("gk.replayed.at")
        assert (fwd.h("gk.original.topic"), fwd.h("gk.original.offset")) == (route.input, "0")

        # the same range again: the stored decision is a forward now, so nothing is forwarded twice (command line)
        config = config_file(tmp_path / "gk.yaml", p.settings)
        again = await cli("replay", "--route", route.input, "--json", "--config", str(config))
        assert again.exit_code == 0, again.output
        doc = json.loads(again.stdout)
        assert (doc["forwarded"], doc["already_forwarded"], doc["still_failing"]) == (0, 1, 0)

        # the conversation goes on through the daemon from the state the replay left: the readback finds its handoff
        await p.send("late", RB, AN, DN)
        got = await p.collect(lambda g: len(g.of("output", "late")) >= 4)
        await p.collector.settle()
        assert [r.text for r in got.of("output", "late")] == [HO, RB, AN, DN]
        assert len(got.of("dead", "late")) == 1 and got.of("alerts", "late") == []

        # a replay that died between saving the state and producing left its marker: the next one re-sends the line
        markers = RedisMarkers(p.settings)
        await markers.begin([markers.key(route.input, "late", HO.encode())])
        await markers.close()
        resent = await Replayer(p.settings).run(route=route.input)
        assert [(ln.status, ln.note) for ln in resent.lines] == [
            (Status.FORWARDED, f"re-sent: an earlier replay did not finish; {notified}")
        ]
        last = await Replayer(p.settings).run(route=route.input)
        assert [ln.status for ln in last.lines] == [Status.ALREADY_FORWARDED]


async def test_a_dry_run_changes_nothing_and_the_forbidden_stays_held(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: Any, tmp_path: Path
) -> None:
    exp_soon = time.strftime("%Y%m%dT%H%MZ", time.gmtime(time.time() + 600))
    item_b, item_c = "inv:MD-2026-058", "inv:MD-2026-059"
    ho_b = HO.replace(RECORD.item, item_b)
    expiring = HO.replace(RECORD.item, item_c).replace("rb=exec", f"rb=exec exp={exp_soon}")
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        route = p.route()
        # no record yet: three handoffs are held for theirs (one expires within the hour; two share one approval)
        await p.send("expiring", expiring)
        await p.send("first", ho_b)
        await p.send("second", ho_b)
        await p.collect(lambda g: len(g.dead) >= 3)
        # a readback with a lookalike account, and the clearance of it
        await p.store.put_record(RECORD)
        await p.send("tool", HO, RB.replace("40-12-88/61102938", LOOKALIKE), AN)
        await p.collect(lambda g: len(g.dead) >= 5)
        for item in (item_b, item_c):  # the approvals land
            await p.store.put_record(Record(item, "PAY", {**RECORD.values, "item": item}))

        keys = sorted([k async for k in redis_client.scan_iter(match=f"{p.settings.redis.key_prefix}:*")])
        before = {k: await redis_client.dump(k) for k in keys}
        config = config_file(tmp_path / "gk.yaml", p.settings)
        dry = await cli("replay", "-r", route.input, "--dry-run", "--json", "--config", str(config))
        assert dry.exit_code == 1, dry.output  # some lines would still fail
        doc = json.loads(dry.stdout)
        assert doc["dry_run"] is True and doc["forwarded"] == 2  # 'expiring' (not yet expired) and 'first'
        after = {k: await redis_client.dump(k) for k in keys}
        assert after == before
        assert sorted([k async for k in redis_client.scan_iter(match=f"{p.settings.redis.key_prefix}:*")]) == keys
        got: Collected = await p.collector.settle(1.0)
        assert [r.text for r in got.output if r.key != b"tool"] == [] and len(got.dead) == 5 and got.alerts == []

        report = await Replayer(p.settings, clock=lambda: time.time() + 3600).run(
            route=route.input, requeue_failed=True
        )
        status = {(ln.conversation, ln.id): (ln.status, ln.reason) for ln in report.lines}
        assert status[("expiring", "scheduler-1")] == (Status.REQUEUED, "expired")
        assert status[("first", "scheduler-1")] == (Status.FORWARDED, None)
        assert status[("second", "scheduler-1")] == (Status.REQUEUED, "record-used")
        assert status[("tool", "payer-1")] == (Status.REQUEUED, "check-rb")
        assert status[("tool", "scheduler-2")] == (Status.REQUEUED, "refused-handoff")
        # the requeued letters and the forward travel on different topics: wait for both
        got = await p.collect(lambda g: len(g.dead) >= 9 and any(r.h("gk.replayed.from.topic") for r in g.output))
        requeued = [r for r in got.dead if r.h("gk.replayed.from.topic") == route.dead_letter]
        assert sorted((r.key, r.h("gk.reason"), r.h("gk.attempt")) for r in requeued) == [
            (b"expiring", "expired", "2"),
            (b"second", "record-used", "2"),
            (b"tool", "check-rb", "2"),
            (b"tool", "refused-handoff", "2"),
        ]
        assert [r.key for r in got.output if r.h("gk.replayed.from.topic")] == [b"first"]

        # only what is selected: the requeued copy (its reason is record-used now; the original's was no-record)
        narrowed = await Replayer(p.settings).run(
            route=route.input, selection=Selection(reasons=frozenset({"record-used"}), conversation="second")
        )
        assert [(ln.conversation, ln.was, ln.status, ln.reason) for ln in narrowed.lines] == [
            ("second", "record-used", Status.STILL_FAILING, "record-used")
        ]
        assert (narrowed.read, narrowed.filtered) == (9, 8)


async def test_a_dead_letter_whose_conversation_state_is_gone_is_said_so_plainly(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: Any, tmp_path: Path
) -> None:
    """Replay decides a dead letter against the conversation as it is now. When the conversation has no state left
    (expired after retention, or deleted), a readback refused as check-rb would come back as unknown-handoff: the
    report says the state is gone instead, and counts it apart from the reasons."""
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        route = p.route()
        item_b = "inv:MD-2026-058"  # one approval, one act: the second conversation pays another invoice
        await p.store.put_record(RECORD)
        await p.store.put_record(Record(item_b, "PAY", {**RECORD.values, "item": item_b}))
        lookalike = RB.replace("40-12-88/61102938", LOOKALIKE)
        await p.send("kept", HO, lookalike)
        await p.send("gone", HO.replace(RECORD.item, item_b), lookalike.replace(RECORD.item, item_b))
        got = await p.collect(lambda g: len(g.dead) >= 2)
        assert sorted((d.key, d.h("gk.reason")) for d in got.dead) == [(b"gone", "check-rb"), (b"kept", "check-rb")]
        keys = p.store.keys
        assert await redis_client.delete(keys.state(route.input, "gone"), keys.queue(route.input, "gone")) >= 1

        config = config_file(tmp_path / "gk.yaml", p.settings)
        dry = await cli("replay", "-r", route.input, "--dry-run", "--json", "-c", str(config))
        assert dry.exit_code == 1, dry.output
        doc = json.loads(dry.stdout)
        by_conv = {ln["conversation"]: ln for ln in doc["lines"]}
        assert (by_conv["kept"]["reason"], by_conv["kept"]["state_gone"]) == ("check-rb", False)
        gone = by_conv["gone"]
        assert (gone["status"], gone["was"], gone["state_gone"]) == ("still-failing", "check-rb", True)
        assert "no state in Redis" in gone["note"]
        assert by_conv["kept"]["problems"][0]["got"] == "****2983" and "61102983" not in dry.stdout
        assert (doc["failing_by_reason"], doc["state_gone"], doc["still_failing"]) == ({"check-rb": 1}, 1, 2)

        table = await cli("replay", "-r", route.input, "--dry-run", "--details", "-c", str(config))
        assert table.exit_code == 1, table.output
        text = " ".join(table.stdout.replace("│", " ").replace("┃", " ").split())
        assert "acct mismatch: HO ****2938 vs RB ****2983" in text and "61102938" not in text  # masked
        assert "still failing (left on the dead-letter topic): check-rb 1" in text
        assert "its conversation has no state in Redis (expired or deleted) 1" in text
        assert "no state in Redis for its conversation (expired after retention, or deleted)" in text
        assert "still failing (left on the dead-letter topic): unknown-handoff" not in text  # never a reason it had


async def test_replay_errors_are_one_line(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    route = {
        "input": "in",
        "output": "out",
        "dead_letter": await topic_factory(1),
        "alerts": "alerts",
        "profile": "pay",
    }
    config = tmp_path / "gk.yaml"
    settings = {"kafka": {"bootstrap_servers": kafka_bootstrap}, "redis": {"url": redis_url}, "routes": [route]}
    config.write_text(yaml.safe_dump(settings))

    def one_line(result: Any) -> bool:
        return len(result.stderr.strip().splitlines()) == 1

    unknown = await cli("replay", "-r", "nope", "-c", str(config))
    assert one_line(unknown) and unknown.exit_code == 2 and "unknown route 'nope'" in unknown.stderr
    missing = await cli("replay", "-r", "in", "--from-topic", "gk-no-such-topic", "--timeout", "1", "-c", str(config))
    assert one_line(missing) and missing.exit_code == 2 and "gk-no-such-topic does not exist" in missing.stderr
    archive = await cli("replay", "--from-topic", "x", "-c", str(config))  # whose letters it holds is not said
    assert one_line(archive) and archive.exit_code == 2 and "x is no configured route's dead-letter" in archive.stderr
    neither = await cli("replay", "-c", str(config))
    assert one_line(neither) and neither.exit_code == 2 and "give --route ROUTE" in neither.stderr
    bad_time = await cli("replay", "-r", "in", "--since", "yesterday", "-c", str(config))
    assert one_line(bad_time) and bad_time.exit_code == 2 and "2h" in bad_time.stderr
    empty = await cli("replay", "-r", "in", "-c", str(config))
    assert empty.exit_code == 0, empty.output
    assert "0 dead letter(s) read" in empty.stdout


async def test_replay_reads_a_transactional_dead_letter_topic(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    """Exactly-once deployments write dead letters in transactions: the commit markers between them are skipped, and
    only committed records are read."""
    kafka = {"transactional": True, "transactional_id_prefix": f"gk-test-replay-{time.time_ns()}"}
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, kafka=kafka) as p:
        await p.send("tx", HO)
        await p.collect(_n("tx", 1))  # read uncommitted: seen before its transaction commits
        deadline = time.monotonic() + 20
        while (await committed(kafka_bootstrap, p.settings.kafka.group_id, p.route().input))[0] != 1:
            assert time.monotonic() < deadline, "the batch's transaction did not commit"
            await asyncio.sleep(0.1)
        await p.store.put_record(RECORD)
        report = await Replayer(p.settings, timeout=5.0).run(route=p.route().input)
        assert [(ln.conversation, ln.status) for ln in report.lines] == [("tx", Status.FORWARDED)]
        got = await p.collect(lambda g: len(g.of("output", "tx")) >= 1)
        assert got.of("output", "tx")[0].h("gk.replayed.from.offset") == "0"


async def test_replay_details_print_what_an_agent_wrote_inert(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    """A dead letter keeps the value an agent wrote, escapes and all (it was refused for them): ``replay --details``
    and ``--json`` show it without one raw ESC, OSC or bidi control reaching the operator's terminal."""
    hostile = HO + " // \x1b]0;owned\x07\x1b[2J\u202eevil"
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        route = p.route()
        await p.send("c-hostile", hostile)
        got = await p.collect(_n("c-hostile", 1))
        (dl,) = got.of("dead", "c-hostile")
        assert dl.h("gk.reason") == "invalid" and "\x1b" in dl.value.decode()  # the letter keeps the raw value
        config = config_file(tmp_path / "gk.yaml", p.settings)
        shown = ""
        for fmt in (["--details"], ["--json"]):
            out = await cli("replay", "-r", route.input, "--dry-run", *fmt, "-c", str(config))
            assert out.exit_code == 1, out.output
            for raw in ("\x1b", "\x07", "\u202e"):
                assert raw not in out.stdout, (fmt, out.stdout[-2000:])
            shown += out.stdout
        assert "c-hostile" in shown and "U+001B" in shown  # the letter and its problem are shown


async def test_letter_picks_dead_letters_by_their_place_and_replays_only_those(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    """Two held handoffs; ``--letter P:O`` names one of the two letters: only that one is decided and forwarded,
    the other is counted as not selected and stays held. A malformed ``--letter`` is a usage error."""
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        route = p.route()
        await p.send("first", HO)
        await p.send("second", HO.replace("scheduler-1", "scheduler-2"))
        got = await p.collect(lambda g: len(g.of("dead", "first")) + len(g.of("dead", "second")) >= 2)
        (picked,) = got.of("dead", "second")
        await p.store.put_record(RECORD)
        config = config_file(tmp_path / "gk.yaml", p.settings)
        letter = f"{picked.partition}:{picked.offset}"
        done = await cli("replay", "-r", route.input, "--letter", letter, "--json", "--config", str(config))
        assert done.exit_code == 0, done.output
        doc = json.loads(done.stdout)
        assert [(ln["conversation"], ln["status"]) for ln in doc["lines"]] == [("second", "forwarded")]
        assert (doc["forwarded"], doc["filtered"]) == (1, 1)
        got = await p.collect(lambda g: len(g.of("output", "second")) >= 1)
        assert got.of("output", "first") == []
        bad = await cli("replay", "-r", route.input, "--letter", "0-17", "--config", str(config))
        assert bad.exit_code == 2 and "--letter: '0-17' is not PARTITION:OFFSET" in bad.output
