"""One approval, one act, attacked end to end through the real daemon on Kafka and Redis (issue 28).

An agent with write access to the input topics and a copy of every line it has seen tries to get a second act out of
one approval: the signed thread copied byte for byte onto a second route, the same copies after the conversation's
state expired, and a stale clearance re-produced after the act tool restarted with its ids reused. Each is refused,
and the act tool on the other side never runs twice.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from gatekeeper.policy import Record
from gatekeeper.redis_store import Keys
from gatekeeper.twophase import ForgedClearance, TwoPhaseTool
from gatekeeper.verdicts import Verifier
from tests.integration._pipeline import Got, Pipeline, TopicFactory, make_route, produce, settings_for
from tests.integration.test_lifecycle import Running
from tests.integration.test_sender_auth import KEYS, PAYER, SCHEDULER, signed
from tests.integration.test_signed_verdicts import KEY_ID, Bank, _clearance
from tests.integration.test_signed_verdicts import _key as _signing
from tests.lifecycle.memory import Clock
from tests.policy.world import AN, HO, NOW, RECORD
from tests.seed import RECORD_VALUES

pytestmark = pytest.mark.integration


def _copy(records: list[Got]) -> list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]]:
    """What an agent that reads the output topic can re-produce: key, value and the agents' own headers (the
    signature among them), byte for byte; the gatekeeper's gk.* headers are its own and dropped by the daemon."""
    return [(r.key, r.value, [(k, v) for k, v in r.headers.items() if not k.startswith("gk.")]) for r in records]


async def test_a_signed_thread_copied_onto_a_second_route_is_refused_and_pays_once(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object, tmp_path: Path
) -> None:
    """Attack 1: the scheduler's HO, the payer's RB and the scheduler's AN val=Y, with their rw-sig headers, copied
    from rt.pay's output onto rt.pay2 (sender authentication on both, the same keys) after the act. The agents'
    signatures cover the route: refused sender-auth. On a route without sender authentication the copied handoff
    still cannot hold the approval (its binding names rt.pay): record-used, and the replies refused-handoff."""
    signing, public = _signing(tmp_path)
    routes = [
        await make_route(topic_factory, sender_auth=True),
        await make_route(topic_factory, sender_auth=True),
        await make_route(topic_factory),
    ]
    async with Pipeline.create(
        topic_factory, kafka_bootstrap, redis_url, routes, signing=signing, sender_auth=KEYS
    ) as p:
        await p.store.put_record(RECORD)
        pay, pay2, open_route = (p.route(i).input for i in range(3))
        c = "copied"
        bank = Bank()
        tool = TwoPhaseTool("payer", bank, profile="pay", gatekeeper_keys={KEY_ID: public}, route=pay)
        statement = tool.prepare(HO, conversation=c)
        an = AN.replace("re=payer-1", f"re={statement.line.split()[2]}")
        await p.send(c, HO, headers=signed(SCHEDULER, "scheduler-k1", c, HO, pay))
        await p.send(c, statement.line, headers=signed(PAYER, "payer-k1", c, statement.line, pay))
        await p.send(c, an, headers=signed(SCHEDULER, "scheduler-k1", c, an, pay))
        got = await p.collect(lambda g: len(g.of("output", c)) >= 3)
        thread = got.of("output", c)[:3]
        dn = tool.commit(statement.token, True, clearance=_clearance(thread[2]))
        assert len(bank.calls) == 1 and dn.startswith("RW1 DN ")

        # the copies, onto the second signed route and onto a route without sender authentication
        await produce(kafka_bootstrap, pay2, _copy(thread))
        await produce(kafka_bootstrap, open_route, _copy(thread))
        got = await p.collect(lambda g: g.count(c) >= 9)
        await p.collector.settle()
        on = {
            topic: [r for r in got.dead if r.key == c.encode() and r.h("gk.original.topic") == topic]
            for topic in (pay2, open_route)
        }
        assert [r.h("gk.reason") for r in on[pay2]] == ["sender-auth"] * 3
        assert all("sender-auth-bad-signature" in (r.h("gk.problems") or "") for r in on[pay2])
        assert [r.h("gk.reason") for r in on[open_route]] == ["record-used", "refused-handoff", "refused-handoff"]
        assert f"{pay}/{c}/scheduler-1" in (on[open_route][0].h("gk.problems") or "")
        forwarded = [r for r in got.of("output", c) if r.h("gk.original.topic") != pay]
        assert forwarded == []  # nothing of the copies reached a receiver

        # the payer's tool on the second route has nothing to act on; the stolen clearance does not verify there
        tool2 = TwoPhaseTool("payer", bank, profile="pay", gatekeeper_keys={KEY_ID: public}, route=pay2)
        second = tool2.prepare(HO, conversation=c)
        with pytest.raises(ForgedClearance):
            tool2.commit(second.token, True, clearance=_clearance(thread[2]))
        assert len(bank.calls) == 1


async def test_the_same_copies_after_the_state_expired_are_refused_as_a_spent_approval(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: Any
) -> None:
    """Attack 2: with a short retention the conversation's state goes, the binding stays. The thread's lines
    re-produced afterwards on the same route are refused: the handoff record-used (its approval was spent by this
    very handoff), its readback and clearance refused-handoff. Nothing is forwarded a second time."""
    route = await make_route(topic_factory)
    settings = settings_for(
        kafka_bootstrap, redis_url, [route], redis={"retention_seconds": 60, "open_retention_seconds": 60}
    )
    r = Running(kafka_bootstrap, settings, Clock(NOW))
    try:
        await r.store.put_record(RECORD)
        await r.start()
        c = "expired"
        bank = Bank()
        tool = TwoPhaseTool("payer", bank, profile="pay")
        statement = tool.prepare(HO, conversation=c)
        an = AN.replace("re=payer-1", f"re={statement.line.split()[2]}")
        await r.send(c, HO, statement.line, an)
        await r.collector.wait(lambda g: len(g.of("output", c)) >= 3)
        dn = tool.commit(statement.token, True)
        await r.send(c, dn)
        await r.collector.wait(lambda g: len(g.of("output", c)) >= 4)
        assert len(bank.calls) == 1

        # the retention passes: Redis expires the conversation (its hash, queue, document), never the binding
        keys = Keys(settings.redis.key_prefix)
        for key in (keys.state(route["input"], c), keys.queue(route["input"], c), keys.conv(route["input"], c)):
            await redis_client.delete(key)
        assert await r.store.binding(RECORD.key) is not None
        r.clock.now = NOW + 61
        await r.send(c, HO, statement.line, an)
        got = await r.collector.wait(lambda g: len(g.of("dead", c)) >= 3)
        await r.collector.settle()
        dead = got.of("dead", c)
        assert [d.h("gk.reason") for d in dead] == ["record-used", "refused-handoff", "refused-handoff"]
        assert "spent by this very handoff" in (dead[0].h("gk.problems") or "")
        assert len(got.of("output", c)) == 4  # the first run's four lines, nothing more
    finally:
        await r.stop()


async def test_a_stale_clearance_re_produced_after_a_tool_restart_does_not_pay_another_invoice(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object, tmp_path: Path
) -> None:
    """Attack 4: a tool whose ids restart at payer-1 (as the old default did) states invoice B as payer-1, which the
    gatekeeper refuses duplicate-id; the attacker re-produces the old AN re=payer-1 val=Y of invoice A. The
    gatekeeper forwards it again as its stored decision, signed as a repeat of invoice A's statement: the tool
    refuses it, invoice B is not paid. The default ids of a restarted tool do not collide at all."""
    signing, public = _signing(tmp_path)
    route = await make_route(topic_factory)
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, [route], signing=signing) as p:
        invoice_b = Record(
            item="inv:MD-2026-058",
            ask="PAY",
            values={**RECORD_VALUES, "item": "inv:MD-2026-058", "ref": "MD-2026-058", "amt": "7100.00"},
        )
        await p.store.put_record(RECORD)
        await p.store.put_record(invoice_b)
        ho_b = (
            HO.replace("scheduler-1", "scheduler-4")
            .replace("MD-2026-057", "MD-2026-058")
            .replace("amt=5400.00", "amt=7100.00")
        )
        c = "restarted"
        bank = Bank()
        keys = {KEY_ID: public}

        def restarting_ids() -> Any:
            counter = itertools.count(1)
            return lambda: f"payer-{next(counter)}"

        tool = TwoPhaseTool("payer", bank, profile="pay", gatekeeper_keys=keys, next_id=restarting_ids())
        a = tool.prepare(HO, conversation=c)
        await p.send(c, HO, a.line, AN)  # the seed's AN answers payer-1
        got = await p.collect(lambda g: len(g.of("output", c)) >= 3)
        tool.commit(a.token, True, clearance=_clearance(got.of("output", c)[2]))
        assert len(bank.calls) == 1

        restarted = TwoPhaseTool("payer", bank, profile="pay", gatekeeper_keys=keys, next_id=restarting_ids())
        b = restarted.prepare(ho_b, conversation=c)
        assert b.line.split()[2] == "payer-1"
        await p.send(c, ho_b, b.line)
        got = await p.collect(lambda g: len(g.of("dead", c)) >= 1)
        assert got.of("dead", c)[0].h("gk.reason") == "duplicate-id"
        await p.send(c, AN)  # the attacker's copy of invoice A's clearance
        got = await p.collect(lambda g: len(g.of("output", c)) >= 5)
        stale = got.of("output", c)[4]
        assert stale.value == AN.encode() and stale.h("gk.repeated") == "true"
        sig = Verifier(keys).verify_record(stale.headers.items(), stale.value, conversation=c)
        assert sig.repeat
        with pytest.raises(ForgedClearance, match="is a repeat"):
            restarted.commit(b.token, True, clearance=_clearance(stale))
        assert len(bank.calls) == 1

        # the default ids: a restarted tool's readback is a new id, forwarded, and only its own clearance acts
        fresh = TwoPhaseTool("payer", bank, profile="pay", gatekeeper_keys=keys)
        b2 = fresh.prepare(ho_b, conversation=c)
        an_b = AN.replace("scheduler-2", "scheduler-5").replace("re=payer-1", f"re={b2.line.split()[2]}")
        await p.send(c, b2.line, an_b)
        got = await p.collect(lambda g: len(g.of("output", c)) >= 7)
        assert [r.text for r in got.of("output", c)[5:7]] == [b2.line, an_b]
        with pytest.raises(ForgedClearance, match="is not scheduler's answer"):
            fresh.commit(b2.token, True, clearance=_clearance(stale))
        fresh.commit(b2.token, True, clearance=_clearance(got.of("output", c)[6]))
        assert len(bank.calls) == 2 and bank.calls[1]["amt"] == "7100.00"
