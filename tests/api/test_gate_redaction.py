"""``POST /v1/gate`` is no oracle: on the real server beside the daemon (real Kafka and Redis), a token without the
operator scope learns a problem's code and slot, never the approved record's value nor the conversation holding an
approval; a token with the scope sees both; the dead-letter topic keeps them whole for operators."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from gatekeeper.api.auth import hash_token
from gatekeeper.api.gate import GateAnswer
from gatekeeper.config import ApiToken
from tests.api.test_gate import gate_server, gate_settings
from tests.integration._pipeline import Pipeline, TopicFactory
from tests.policy.world import RECORD
from tests.seed import HO

PLAIN = "tok-scheduler-plain-0123456789"
OPERATOR = "tok-scheduler-operator-0123456789"
WRONG_AMT = HO.replace("amt=5400.00", "amt=5400.01")
HOLDER = "c-holder"


def tokens() -> list[ApiToken]:
    return [
        ApiToken(name="scheduler-svc", sha256=hash_token(PLAIN), agents=["scheduler"]),
        ApiToken(name="ops", sha256=hash_token(OPERATOR), agents=["scheduler"], scopes=["operator"]),
    ]


async def ask(client: httpx.AsyncClient, token: str, route: str, conversation: str, line: str, **kw: Any) -> Any:
    body = {"route": route, "conversation": conversation, "line": line, "detail": True, **kw}
    r = await client.post("/v1/gate", json=body, headers={"authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    GateAnswer.model_validate(r.json())
    return r.json()


def only(doc: Any, code: str) -> dict[str, Any]:
    (p,) = [p for p in doc["detail"]["problems"] if p["code"] == code]
    return dict(p)


async def test_the_dry_run_shows_codes_and_slots_and_the_record_and_the_holder_only_to_an_operator(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str
) -> None:
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        await p.store.put_record(RECORD)
        name = p.route().input
        async with gate_server(gate_settings(p.settings, tokens=tokens())) as (_server, client):
            # the approved amount
            doc = await ask(client, PLAIN, name, "c1", WRONG_AMT, dry_run=True)
            assert (doc["verdict"], doc["reason"]) == ("dead-letter", "check-ho")
            problem = only(doc, "record-mismatch")
            assert (problem["slot"], problem["got"], problem["expected"]) == ("amt", "5400.01", None)
            assert "amt" in doc["problems"][0] and "5400.00" not in orjson.dumps(doc).decode()
            doc = await ask(client, OPERATOR, name, "c1", WRONG_AMT, dry_run=True)
            assert only(doc, "record-mismatch")["expected"] == "5400.00"
            assert "record 5400.00" in doc["problems"][0]
            # the conversation holding the approval
            await p.send(HOLDER, HO)
            await p.collect(lambda g: g.count(HOLDER) == 1)
            doc = await ask(client, PLAIN, name, "c2", HO, dry_run=True)
            assert (doc["verdict"], doc["reason"]) == ("dead-letter", "record-used")
            assert (only(doc, "record-used")["slot"], only(doc, "record-used")["got"]) == ("item", None)
            assert HOLDER not in orjson.dumps(doc).decode()
            doc = await ask(client, OPERATOR, name, "c2", HO, dry_run=True)
            assert only(doc, "record-used")["got"] == f"{name}/{HOLDER}/scheduler-1"
            assert HOLDER in doc["problems"][0]


async def test_the_real_gate_withholds_them_too_and_the_dead_letters_keep_them(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str
) -> None:
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        await p.store.put_record(RECORD)
        name = p.route().input
        async with gate_server(gate_settings(p.settings, tokens=tokens())) as (_server, client):
            doc = await ask(client, PLAIN, name, "c1", WRONG_AMT)
            assert (doc["verdict"], doc["reason"], doc["dry_run"]) == ("dead-letter", "check-ho", False)
            assert only(doc, "record-mismatch")["slot"] == "amt"
            assert "5400.00" not in orjson.dumps(doc).decode()
            other = WRONG_AMT.replace("scheduler-1", "scheduler-7")
            doc = await ask(client, OPERATOR, name, "c3", other)
            assert only(doc, "record-mismatch")["expected"] == "5400.00"
            # the approval bound by a line on Kafka, then asked for through the gate
            await p.send(HOLDER, HO)
            await p.collect(lambda g: g.count(HOLDER) == 1)
            doc = await ask(client, PLAIN, name, "c2", HO)
            assert doc["reason"] == "record-used" and HOLDER not in orjson.dumps(doc).decode()
            doc = await ask(client, OPERATOR, name, "c4", HO)
            assert doc["reason"] == "record-used" and HOLDER in orjson.dumps(doc).decode()
            # the dead-letter topic, read by operators, keeps the full problems
            got = await p.collect(lambda g: len(g.of("dead", "c1")) == 1 and len(g.of("dead", "c2")) == 1)
            (letter,) = got.of("dead", "c1")
            letter_doc = {"detail": {"problems": orjson.loads(letter.h("gk.problems") or "[]")}}
            assert only(letter_doc, "record-mismatch")["expected"] == "5400.00"
            (letter,) = got.of("dead", "c2")
            assert HOLDER in (letter.h("gk.problems") or "")
