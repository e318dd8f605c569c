"""``POST /v1/gate`` on a route with sender_auth: the request carries the agent's signature, which becomes the
record's header and is verified by the daemon like any other; without it, 422 and nothing is produced."""

from __future__ import annotations

import pytest

from gatekeeper.auth import generate, public_key_text, sign
from tests.api.test_gate import gate, gate_server, gate_settings
from tests.integration._pipeline import Pipeline, TopicFactory, make_route
from tests.policy.world import RECORD
from tests.seed import AN, HO, RB

pytestmark = pytest.mark.integration

SCHEDULER, PAYER = generate(), generate()
KEYS = {
    "keys": [
        {"id": "s-1", "agent": "scheduler", "public_key": public_key_text(SCHEDULER.public_key())},
        {"id": "p-1", "agent": "payer", "public_key": public_key_text(PAYER.public_key())},
    ]
}


async def test_the_gate_passes_the_signature_and_refuses_a_request_without_one(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str
) -> None:
    routes = [await make_route(topic_factory, sender_auth=True)]
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, routes, sender_auth=KEYS) as p:
        await p.store.put_record(RECORD)
        name = p.route().input
        async with gate_server(gate_settings(p.settings)) as (_server, client):
            r = await gate(client, "scheduler", name, "c1", HO)
            assert r.status_code == 422 and r.json()["code"] == "signature-required", r.text

            dry = await gate(
                client,
                "scheduler",
                name,
                "c1",
                HO,
                dry_run=True,
                signature=sign(SCHEDULER, "s-1", "c1", HO, route=name),
            )
            assert dry.status_code == 200 and dry.json()["verdict"] == "forward", dry.text
            forged = await gate(
                client, "scheduler", name, "c1", HO, dry_run=True, signature=sign(PAYER, "p-1", "c1", HO, route=name)
            )
            assert forged.json()["reason"] == "sender-auth"

            ok = await gate(client, "scheduler", name, "c1", HO, signature=sign(SCHEDULER, "s-1", "c1", HO, route=name))
            assert ok.status_code == 200 and ok.json()["verdict"] == "forward", ok.text
            ok = await gate(client, "payer", name, "c1", RB, signature=sign(PAYER, "p-1", "c1", RB, route=name))
            assert ok.json()["verdict"] == "forward", ok.text
            # even with the scheduler's token, the payer's key cannot sign the scheduler's clearance
            bad = await gate(client, "scheduler", name, "c1", AN, signature=sign(PAYER, "p-1", "c1", AN, route=name))
            assert (bad.status_code, bad.json()["verdict"], bad.json()["reason"]) == (200, "dead-letter", "sender-auth")
            good = await gate(
                client, "scheduler", name, "c1", AN, signature=sign(SCHEDULER, "s-1", "c1", AN, route=name)
            )
            assert good.json()["verdict"] == "forward", good.text
        got = await p.collector.settle()
        assert len(got.of("output", "c1")) == 3 and len(got.of("dead", "c1")) == 1  # the 422 produced nothing
