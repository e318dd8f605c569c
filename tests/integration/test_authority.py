"""Who may say what, through the real daemon on Kafka and Redis (issue 29): one test per rule family. The pure rules
and their variants are in tests/policy/test_authority.py; here the same lines go through the worker, the Redis
store and the topics, and what reaches the output is what the authority table allows."""

from __future__ import annotations

from typing import Any

import pytest

from gatekeeper.policy import Record
from tests.integration._pipeline import Collected, Got, Pipeline, TopicFactory
from tests.policy.world import AN, DN, HO, RB, RECORD

pytestmark = pytest.mark.integration


def forwarded(got: Collected, conversation: str) -> list[Got]:
    """What the output topic carries of the agents' lines (not the gatekeeper's own: its refusal notices)."""
    return [r for r in got.of("output", conversation) if r.h("gk.author") is None]


def decided(conversation: str, n: int) -> Any:
    return lambda g: len(forwarded(g, conversation)) + len(g.of("dead", conversation)) >= n


def took_over(line: str, agent: str) -> str:
    return line.replace("HO scheduler-1", f"HO {agent}-4").replace("from=scheduler", f"from={agent}")


async def test_a_takeover_by_re_issue_is_refused_and_the_real_thread_goes_on(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        await p.store.put_record(RECORD)
        c = "takeover"
        takeover = took_over(HO, "desk").replace(" p=pay", " re=scheduler-1 p=pay", 1)
        await p.send(c, HO, takeover, RB, AN, DN)
        got = await p.collect(decided(c, 5))
        assert [r.text for r in forwarded(got, c)] == [HO, RB, AN, DN]
        (dead,) = got.of("dead", c)
        assert (dead.text, dead.h("gk.reason")) == (takeover, "check-thread")
        assert "thread-reissue-wrong-agent" in (dead.h("gk.problems") or "")


async def test_a_close_from_the_wrong_agent_closes_nothing_and_a_false_done_report_is_flagged(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        await p.store.put_record(RECORD)
        c = "wrong-close"
        un = "RW1 UN desk-5 re=scheduler-1 p=pay from=desk to=scheduler why=BUSY"
        fake_dn = DN.replace("DN payer-2", "DN desk-6").replace("from=payer", "from=desk")
        await p.send(c, HO, un, RB, AN, fake_dn, DN)
        got = await p.collect(decided(c, 6))
        assert [r.text for r in forwarded(got, c)] == [HO, RB, AN, fake_dn, DN]
        flagged = forwarded(got, c)[3]
        assert flagged.h("gk.verdict") == "alert" and "thread-done-wrong-agent" in (flagged.h("gk.problems") or "")
        assert [r.h("gk.reason") for r in got.of("dead", c)] == ["check-thread"]
        got = await p.collect(lambda g: len(g.of("alerts", c)) >= 1)
        # the real done report closed the handoff: not the flagged one (which would have made this a second close)
        assert "thread-closed-twice" not in (forwarded(got, c)[4].h("gk.problems") or "")
        assert (await p.store.binding(RECORD.key)) is not None  # the act ran: the approval stays spent


async def test_a_question_is_answered_once_by_the_one_asked_within_its_options(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        await p.store.put_record(RECORD)
        c = "question"
        aq = "RW1 AQ payer-8 re=scheduler-1 p=pay from=payer to=scheduler need=ENUM opts=APPROVE+HOLD"
        stranger = "RW1 AN desk-9 re=payer-8 p=pay from=desk to=payer val=APPROVE"
        outside = "RW1 AN scheduler-9 re=payer-8 p=pay from=scheduler to=payer val=DECLINE"
        good = "RW1 AN scheduler-10 re=payer-8 p=pay from=scheduler to=payer val=HOLD"
        second = "RW1 AN scheduler-11 re=payer-8 p=pay from=scheduler to=payer val=APPROVE"
        await p.send(c, HO, aq, stranger, outside, good, second)
        got = await p.collect(decided(c, 6))
        assert [r.text for r in forwarded(got, c)] == [HO, aq, good]
        problems = [r.h("gk.problems") or "" for r in got.of("dead", c)]
        assert [r.text for r in got.of("dead", c)] == [stranger, outside, second]
        for code, seen in zip(
            ("thread-answer-wrong-agent", "answer-out-of-need", "thread-question-answered"), problems, strict=True
        ):
            assert code in seen


async def test_a_relay_carries_the_handoff_unchanged_once(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object
) -> None:
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        await p.store.put_record(Record(RECORD.item, RECORD.ask, {**RECORD.values, "to": "coordinator"}))
        c = "relay"
        ho = HO.replace("to=payer", "to=coordinator")
        rb = RB.replace("RB payer-1", "RB coordinator-1").replace("from=payer", "from=coordinator")
        rb = rb.replace(" h=a7a82de76607", "")
        an = AN.replace("re=payer-1", "re=coordinator-1").replace("to=payer", "to=coordinator")
        relay = HO.replace("HO scheduler-1", "HO coordinator-2").replace("from=scheduler", "from=coordinator")
        relay = relay.replace(" p=pay", " re=scheduler-1 p=pay", 1)
        altered = relay.replace("coordinator-2", "coordinator-3").replace("amt=5400.00", "amt=5400.01")
        second = relay.replace("coordinator-2", "coordinator-4")
        await p.send(c, ho, rb, an, altered, relay, second)
        got = await p.collect(decided(c, 6))
        assert [r.text for r in forwarded(got, c)] == [ho, rb, an, relay]
        assert [(r.text, r.h("gk.reason")) for r in got.of("dead", c)] == [
            (altered, "check-ho"),
            (second, "record-used"),
        ]
