"""``POST /v1/gate`` against real Kafka and Redis, through a real HTTP client.

The gate's server runs beside a gatekeeper daemon (``tests.integration._pipeline``), as ``gatekeeper serve`` would
beside ``gatekeeper run``: it produces each line to the route's input topic and answers with the outcome the daemon
produced for it, found on the output and dead-letter topics by its coordinates.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from gatekeeper.api.auth import hash_token
from gatekeeper.api.gate import GateAnswer, PendingAnswer
from gatekeeper.config import ApiToken, HttpSettings, Settings
from gatekeeper.http import HttpServer
from gatekeeper.metrics import Metrics
from gatekeeper.processor import Line, Processor
from gatekeeper.store import MemoryStore
from tests.integration._pipeline import Collected, Pipeline, TopicFactory, make_route, settings_for
from tests.policy.world import RECORD, route
from tests.seed import AN, DN, HO, RB

TOKENS = {"scheduler": "tok-scheduler-0123456789", "payer": "tok-payer-0123456789"}
BAD_RB = RB.replace("amt=5400.00", "amt=5400.01")


def gate_settings(settings: Settings, **http: Any) -> Settings:
    tokens = [ApiToken(name=f"{a}-svc", sha256=hash_token(t), agents=[a]) for a, t in TOKENS.items()]
    base: dict[str, Any] = {"host": "127.0.0.1", "port": 0, "rate_limit": 0, "tokens": tokens}
    base.update(http)
    return settings.model_copy(update={"http": HttpSettings(**base)})


@asynccontextmanager
async def gate_server(settings: Settings) -> AsyncIterator[tuple[HttpServer, httpx.AsyncClient]]:
    server = HttpServer("127.0.0.1", 0, Metrics(), lambda: (True, {}), settings=settings)
    await server.start()
    try:
        deadline = time.monotonic() + 30
        while not server.gate.ready:  # connected: the outcome topics' ends are known before any line is gated
            assert time.monotonic() < deadline, server.gate.status
            await asyncio.sleep(0.05)
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            yield server, client
    finally:
        await server.close()


async def gate(
    client: httpx.AsyncClient, agent: str, route_name: str, conversation: str, line: str, **kw: Any
) -> httpx.Response:
    body = {"route": route_name, "conversation": conversation, "line": line, **kw}
    return await client.post("/v1/gate", json=body, headers={"authorization": f"Bearer {TOKENS[agent]}"})


def verdict_of(got: Collected, conversation: str, offset: int) -> tuple[str, str | None]:
    for kind, records in (("forward", got.output), ("dead-letter", got.dead)):
        for r in records:
            if r.key == conversation.encode() and r.h("gk.original.offset") == str(offset):
                verdict = r.h("gk.verdict") or kind
                return verdict, r.h("gk.reason")
    raise AssertionError(f"no outcome for offset {offset}")


async def offline(lines: list[str]) -> list[tuple[str, str | None]]:
    """The verdicts ``gatekeeper check`` gives the conversation: the daemon's Processor on an in-memory store."""
    store = MemoryStore()
    await store.put_record(RECORD)
    processor = Processor(store, route(name="check", hold_seconds=0.0))
    out = []
    for text in lines:
        (d,) = await processor.process([Line("c", text.encode())], time.time())
        out.append((d.verdict.value, None if d.reason is None else d.reason.value))
    return out


async def test_gate_and_kafka_give_the_same_verdicts_on_one_conversation_interleaved(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str
) -> None:
    # one conversation, its lines alternating between the HTTP path and the Kafka path
    flow = [("http", "scheduler", HO), ("kafka", None, BAD_RB), ("http", "payer", RB), ("kafka", None, AN)]
    flow.append(("http", "payer", DN))
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        await p.store.put_record(RECORD)
        name = p.route().input
        async with gate_server(gate_settings(p.settings)) as (_server, client):
            got: list[tuple[str, str | None]] = []
            answers = []
            for n, (path, agent, line) in enumerate(flow, 1):
                if path == "http":
                    assert agent is not None
                    r = await gate(client, agent, name, "c1", line, detail=True)
                    assert r.status_code == 200, r.text
                    doc = r.json()
                    GateAnswer.model_validate(doc)  # the answer is the one the OpenAPI document declares
                    answers.append(doc)
                    got.append((doc["verdict"], doc["reason"]))
                    collected = await p.collect(lambda g, n=n: g.count("c1") >= n)
                    # the answer is the outcome on the topics at the line's own coordinates
                    assert verdict_of(collected, "c1", doc["original"]["offset"]) == got[-1]
                else:
                    await p.send("c1", line)
                    collected = await p.collect(lambda g, n=n: g.count("c1") >= n)
                    records = sorted(
                        [*collected.of("output", "c1"), *collected.of("dead", "c1")], key=lambda r: r.offset
                    )
                    last = records[-1]
                    got.append((last.h("gk.verdict") or "dead-letter", last.h("gk.reason")))
            expected = await offline([line for _, _, line in flow])
            assert got == expected
            assert {v for v, _ in got} >= {"forward", "dead-letter"}
            # the HTTP answers carry what the dead letters carry: the problems, with their codes
            assert answers[0]["ok"] is True and answers[0]["original"]["topic"] == name
            # a line sent again is answered from its first decision
            again = (await gate(client, "payer", name, "c1", DN)).json()
            assert (again["verdict"], again["repeated"]) == (got[-1][0], True)


async def test_a_token_speaks_only_for_its_agents_and_refusals_produce_nothing(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str
) -> None:
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        name = p.route().input
        limited = ApiToken(name="other-route", sha256=hash_token("tok-limited"), agents=["*"], routes=["elsewhere"])
        settings = gate_settings(p.settings)
        settings = settings.model_copy(
            update={"http": settings.http.model_copy(update={"tokens": [*settings.http.tokens, limited]})}
        )
        async with gate_server(settings) as (_server, client):
            r = await gate(client, "payer", name, "c1", HO)  # HO is from=scheduler
            assert r.status_code == 403 and r.json()["code"] == "forbidden"
            assert "payer-svc speaks for payer, not for from=scheduler" in r.json()["detail"]
            r = await client.post("/v1/gate", json={"route": name, "conversation": "c1", "line": HO})
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
            r = await client.post(
                "/v1/gate",
                json={"route": name, "conversation": "c1", "line": HO},
                headers={"authorization": "Bearer not-a-token"},
            )
            assert r.status_code == 401
            r = await client.post(
                "/v1/gate",
                json={"route": name, "conversation": "c1", "line": HO},
                headers={"authorization": "Bearer tok-limited"},
            )
            assert r.status_code == 403 and "may not gate route" in r.json()["detail"]
            r = await gate(client, "scheduler", "no.such.route", "c1", HO)
            assert r.status_code == 404 and r.json()["code"] == "unknown-route"
            big = HO + " // " + "x" * (p.route().max_line_bytes)
            r = await gate(client, "scheduler", name, "c1", big)
            assert r.status_code == 413 and r.json()["code"] == "line-too-large"
            r = await gate(client, "scheduler", name, "c1", HO, timeout=-1)
            assert r.status_code == 422
            # nothing was produced by any of them
            got = await p.collector.settle(1.0)
            assert got.count("c1") == 0
            # and the token that does speak for the sender gates it
            r = await gate(client, "scheduler", name, "c1", HO)
            assert r.status_code == 200 and r.json()["verdict"] == "dead-letter"  # no approved record
            assert r.json()["reason"] == "no-record"


async def test_dry_run_decides_against_the_state_and_changes_nothing(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str
) -> None:
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        await p.store.put_record(RECORD)
        name = p.route().input
        async with gate_server(gate_settings(p.settings)) as (_server, client):
            r = await gate(client, "payer", name, "c1", RB, dry_run=True)
            assert GateAnswer.model_validate(r.json()).verdict == "hold"  # its handoff is not known yet
            for _ in range(2):  # twice: the first dry run bound nothing
                doc = (await gate(client, "scheduler", name, "c1", HO, dry_run=True)).json()
                assert (doc["verdict"], doc["dry_run"], doc["original"]) == ("forward", True, None)
            await p.send("c1", HO)
            await p.collect(lambda g: g.count("c1") == 1)
            doc = (await gate(client, "payer", name, "c1", BAD_RB, dry_run=True, detail=True)).json()
            assert doc["verdict"] == "dead-letter" and doc["problems"] and doc["detail"]["problems"][0]["code"]
            doc = (await gate(client, "payer", name, "c1", RB, dry_run=True)).json()
            assert doc["verdict"] == "forward"
            got = await p.collector.settle(1.0)
            assert got.count("c1") == 1  # the dry runs produced nothing
            # and saved nothing: the real readback is decided as if they never happened
            r = await gate(client, "payer", name, "c1", RB)
            assert (r.json()["verdict"], r.json()["repeated"]) == ("forward", False)


async def test_a_daemon_that_is_down_answers_504_and_the_line_is_decided_when_it_is_back(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str
) -> None:
    rt = await make_route(topic_factory)
    settings = gate_settings(settings_for(kafka_bootstrap, redis_url, [rt]), gate_timeout_seconds=1.5)
    async with gate_server(settings) as (server, client):
        started = time.monotonic()
        r = await gate(client, "scheduler", rt["input"], "c1", HO, timeout=5)  # capped at 1.5 s
        assert time.monotonic() - started < 4
        assert r.status_code == 504
        doc = r.json()
        PendingAnswer.model_validate(doc)
        assert doc["code"] == "pending" and "was not refused" in doc["detail"]
        offset = doc["original"]["offset"]
        async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, routes=[rt]) as p:
            got = await p.collect(lambda g: g.count("c1") == 1)  # decided once the daemon is back
            assert verdict_of(got, "c1", offset) == ("dead-letter", "no-record")
            r = await gate(client, "scheduler", rt["input"], "c1", HO)
            assert r.status_code == 200 and r.json()["repeated"] is True
        metrics = server.metrics.registry
        assert metrics.get_sample_value("gatekeeper_api_gate_total", {"outcome": "pending"}) == 1.0
        assert metrics.get_sample_value("gatekeeper_api_gate_total", {"outcome": "dead-letter"}) == 1.0
