"""Sender authentication end to end, on the real broker and Redis (issue 16): an agent that signs with its own key
cannot speak for another. The payer's key signing a clearance ``from=scheduler`` (the attack: clearing its own
payment) and a done report in another agent's name are dead-lettered ``sender-auth``; each agent signing its own
lines passes; a route without ``sender_auth`` behaves as before; replay verifies the signature again from the dead
letter's headers."""

from __future__ import annotations

from typing import Any

import pytest

from gatekeeper.auth import generate, public_key_text, sign
from gatekeeper.replay import Replayer, Status
from tests.integration._pipeline import Pipeline, TopicFactory, make_route
from tests.policy.world import AN, DN, HO, RB, RECORD

pytestmark = pytest.mark.integration

SCHEDULER = generate()
PAYER = generate()
KEYS = {
    "keys": [
        {"id": "scheduler-k1", "agent": "scheduler", "public_key": public_key_text(SCHEDULER.public_key())},
        {"id": "payer-k1", "agent": "payer", "public_key": public_key_text(PAYER.public_key())},
    ]
}
#: the done report in the scheduler's name (the payer's key signs it)
DN_AS_SCHEDULER = DN.replace("DN payer-2", "DN scheduler-9").replace(
    "from=payer to=scheduler", "from=scheduler to=payer"
)


def signed(key: Any, key_id: str, conversation: str, line: str, route: str) -> list[tuple[str, bytes]]:
    return [("rw-sig", sign(key, key_id, conversation, line, route=route).encode()), ("traceparent", b"00-1-01")]


def n(conversation: str, count: int) -> Any:
    return lambda got: got.count(conversation) >= count


async def test_the_payer_cannot_clear_its_own_payment(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    routes = [await make_route(topic_factory, sender_auth=True)]
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, routes, sender_auth=KEYS) as p:
        await p.store.put_record(RECORD)
        c, r = "attack", p.route().input
        await p.send(c, HO, headers=signed(SCHEDULER, "scheduler-k1", c, HO, r))
        await p.send(c, RB, headers=signed(PAYER, "payer-k1", c, RB, r))
        await p.send(c, AN, headers=signed(PAYER, "payer-k1", c, AN, r))  # the forged clearance
        await p.send(c, DN_AS_SCHEDULER, headers=signed(PAYER, "payer-k1", c, DN_AS_SCHEDULER, r))
        await p.send(c, AN, headers=[("traceparent", b"00-1-01")])  # unsigned
        await p.send(c, AN, headers=signed(SCHEDULER, "scheduler-k1", "another", AN, r))  # moved from elsewhere
        await p.send(c, AN, headers=signed(SCHEDULER, "scheduler-k1", c, AN, r))  # the real clearance
        await p.send(c, DN, headers=signed(PAYER, "payer-k1", c, DN, r))  # the real done report
        got = await p.collect(n(c, 8))
        await p.collector.settle()
        assert [r.text for r in got.of("output", c)] == [HO, RB, AN, DN]
        dead = got.of("dead", c)
        assert [r.text for r in dead] == [AN, DN_AS_SCHEDULER, AN, AN]
        assert {r.h("gk.reason") for r in dead} == {"sender-auth"} and {r.h("gk.check") for r in dead} == {"gate"}
        codes = [r.h("gk.problems") or "" for r in dead]
        assert "sender-auth-wrong-agent" in codes[0] and "agent payer" in codes[0]
        assert "sender-auth-wrong-agent" in codes[1]
        assert "sender-auth-missing" in codes[2] and "sender-auth-bad-signature" in codes[3]
        for r in dead:  # the dead letter keeps the record's own headers (replay verifies again from them)...
            assert r.h("traceparent") == "00-1-01"
            sig = r.h("rw-sig")
            if sig is not None:  # ...and never echoes the signature in what it says
                assert sig.split(" ")[2] not in (r.h("gk.problems") or "")
        assert got.of("alerts", c) == []


async def test_a_route_without_sender_auth_behaves_as_before(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    routes = [await make_route(topic_factory), await make_route(topic_factory, sender_auth=True)]
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, routes, sender_auth=KEYS) as p:
        await p.store.put_record(RECORD)
        u = "unsigned"
        await p.send(u, HO, RB, AN, DN)
        got = await p.collect(n(u, 4))
        assert [r.text for r in got.of("output", u)] == [HO, RB, AN, DN]


async def test_replay_verifies_the_signature_again(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    routes = [await make_route(topic_factory, sender_auth=True)]
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, routes, sender_auth=KEYS) as p:
        route = p.route()
        c, r = "late", route.input
        await p.send(c, HO, headers=signed(SCHEDULER, "scheduler-k1", c, HO, r))  # no record yet: no-record
        forged = "RW1 HO scheduler-5" + HO.removeprefix("RW1 HO scheduler-1")
        await p.send(c, forged, headers=signed(PAYER, "payer-k1", c, forged, r))  # sender-auth
        got = await p.collect(n(c, 2))
        assert [r.h("gk.reason") for r in got.of("dead", c)] == ["no-record", "sender-auth"]
        assert got.of("dead", c)[0].h("rw-sig") is not None

        await p.store.put_record(RECORD)
        report = await Replayer(p.settings).run(route=route.input)
        by_id = {ln.id: ln for ln in report.lines}
        assert by_id["scheduler-1"].status is Status.FORWARDED
        (again,) = [ln for ln in report.lines if ln.was == "sender-auth"]
        assert again.status is Status.STILL_FAILING and again.reason == "sender-auth"
        assert again.problems[0].code == "sender-auth-wrong-agent"
        got = await p.collect(lambda g: len(g.of("output", c)) >= 1)
        (fwd,) = got.of("output", c)
        assert fwd.value == HO.encode() and fwd.h("rw-sig") is not None
