"""The sweeper on the in-memory store and publisher: what it publishes, what it records, exactly one cancel across
sweepers, crashes and pauses, and its metrics. The same paths run on real Kafka and Redis in
``tests/integration/test_lifecycle.py``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gatekeeper.policy import Verdict
from gatekeeper.policy.lifecycle import ORPHANED, UNANSWERED
from gatekeeper.store import CancelIntent
from gatekeeper.sweeper import AUTHOR_HEADER, CANCEL_HANDOFF_HEADER, CANCEL_WHY_HEADER, QUESTION_HEADER
from tests.lifecycle.memory import Clock, Crash, Lifecycle
from tests.policy.test_lifecycle import ANSWER, AQ, EXP, HO_EXP, RB_EXP, T_BY, T_EXP, UNABLE
from tests.policy.world import ACK, AN, CX, DN, HO, NOW, RECORD, route

CONV = "c-17"


async def world(**route_kw: Any) -> Lifecycle:
    lc = Lifecycle(route(hold_seconds=0.0, **route_kw), Clock(NOW))
    await lc.store.put_record(RECORD)
    return lc


def value(lc: Lifecycle, name: str, **labels: str) -> float:
    v = lc.metrics.registry.get_sample_value(name, labels)
    return 0.0 if v is None else v


async def test_a_handoff_past_its_exp_is_cancelled_once_on_the_output_topic() -> None:
    lc = await world()
    await lc.send(CONV, HO_EXP)
    assert (await lc.sweep()).handled == []
    lc.clock.now = T_EXP
    report = await lc.sweep()
    (done,) = report.cancels
    (cx,) = lc.cancels()
    assert cx.text == done.line and cx.key == CONV.encode()
    assert cx.text.startswith("RW1 CX scheduler-900000001 re=scheduler-1 from=scheduler to=payer")
    assert "why=EXPIRED" in cx.text
    assert cx.headers[AUTHOR_HEADER] == b"gatekeeper" and cx.headers[CANCEL_HANDOFF_HEADER] == b"scheduler-1"
    assert cx.headers[CANCEL_WHY_HEADER] == b"EXPIRED" and cx.headers["gk.conversation"] == CONV.encode()
    # on the partition the producer would give the conversation's key
    (part,) = [p for p, recs in lc.publisher.topics["out"].items() if recs]
    assert part == await lc.publisher.partition_for("out", CONV.encode())
    (alert,) = lc.alerts_()
    doc = alert.doc
    assert (doc["alert"], doc["action"], doc["conversation"], doc["handoff"]) == (
        ORPHANED,
        "cancelled",
        CONV,
        "scheduler-1",
    )
    assert doc["cancel"]["id"] == "scheduler-900000001" and doc["deadline"]["value"] == EXP
    assert "****2938" in doc["lines"]["handoff"] and "61102938" not in alert.text
    assert alert.headers["gk.alert"] == ORPHANED.encode()
    # recorded: a second sweep does nothing
    assert (await lc.sweep()).handled == [] and len(lc.cancels()) == 1
    entry = lc.state(CONV).handoffs["scheduler-1"]
    assert entry.gk_cancel == "scheduler-900000001" and entry.overdue == ORPHANED
    assert value(lc, "gatekeeper_cancels_total", route="agents.pay", why="EXPIRED") == 1
    assert value(lc, "gatekeeper_handoffs_expired_total", route="agents.pay", reason="exp") == 1
    assert value(lc, "gatekeeper_handoff_problems_total", route="agents.pay", code=ORPHANED) == 1


async def test_the_receivers_acknowledgement_closes_it_and_empties_the_indexes() -> None:
    lc = await world()
    await lc.send(CONV, HO_EXP)
    lc.clock.now = T_EXP
    await lc.sweep()
    assert value(lc, "gatekeeper_open_handoffs", route="agents.pay") == 1
    cx_id = lc.cancels()[0].text.split()[2]
    (d,) = await lc.send(CONV, ACK.replace("re=scheduler-3", f"re={cx_id}"))
    assert d.verdict is Verdict.FORWARD
    assert await lc.store.binding(RECORD.key) is None
    assert await lc.store.index("agents.pay", "open") == [] and await lc.store.index("agents.pay", "due") == []
    (lapsed,) = await lc.store.index("agents.pay", "lapsed")
    assert lapsed[1].ho == "scheduler-1" and lapsed[1].score == T_EXP
    await lc.sweep()
    assert value(lc, "gatekeeper_open_handoffs", route="agents.pay") == 0


async def test_a_done_report_after_the_cancel_is_an_alert_at_the_line() -> None:
    lc = await world()
    await lc.send(CONV, HO_EXP, RB_EXP)
    lc.clock.now = T_EXP
    await lc.sweep()
    (d,) = await lc.send(CONV, DN)
    assert d.verdict is Verdict.ALERT and "thread-done-after-cancel" in [p.code for p in d.problems]


async def test_open_handoffs_and_the_oldest_ones_age_are_gauged() -> None:
    lc = await world()
    await lc.send(CONV, HO_EXP)
    lc.clock.now = NOW + 120
    await lc.sweep()
    assert value(lc, "gatekeeper_open_handoffs", route="agents.pay") == 1
    assert value(lc, "gatekeeper_oldest_open_handoff_seconds", route="agents.pay") == 120


async def test_no_readback_in_time_is_cancelled_with_timeout_and_no_alert() -> None:
    lc = await world(readback_timeout_seconds=300.0)
    await lc.send(CONV, HO_EXP)
    lc.clock.now = NOW + 300
    (done,) = (await lc.sweep()).cancels
    assert "why=TIMEOUT" in done.line and lc.alerts_() == []
    assert lc.cancels()[0].headers[CANCEL_WHY_HEADER] == b"TIMEOUT"
    assert value(lc, "gatekeeper_handoffs_expired_total", route="agents.pay", reason="readback") == 1
    # its exp passes with the cancel unacknowledged: an orphan alert, and no second cancel
    lc.clock.now = T_EXP
    report = await lc.sweep()
    assert [h.what for h in report.handled] == [ORPHANED]
    assert len(lc.cancels()) == 1 and lc.alerts_()[0].doc["action"] == "alerted"


async def test_a_readback_in_time_prevents_the_timeout() -> None:
    lc = await world(readback_timeout_seconds=300.0)
    await lc.send(CONV, HO_EXP)
    lc.clock.now = NOW + 200
    await lc.send(CONV, RB_EXP)
    lc.clock.now = NOW + 400
    assert (await lc.sweep()).handled == [] and lc.cancels() == []


async def test_a_cleared_handoff_at_its_deadline_is_alerted_not_cancelled() -> None:
    lc = await world()
    await lc.send(CONV, HO_EXP, RB_EXP, AN)
    lc.clock.now = T_EXP
    report = await lc.sweep()
    assert [h.what for h in report.handled] == ["cleared-not-done"] and lc.cancels() == []
    (alert,) = lc.alerts_()
    assert alert.doc["alert"] == "cleared-not-done" and alert.doc["lines"]["cleared_by"] == "payer-1"
    assert (await lc.sweep()).handled == []


async def test_a_handoff_the_sender_cancelled_is_alerted_at_exp_and_not_cancelled_again() -> None:
    lc = await world()
    await lc.send(CONV, HO_EXP, CX)
    lc.clock.now = T_EXP
    report = await lc.sweep()
    assert [h.what for h in report.handled] == [ORPHANED] and lc.cancels() == []


async def test_a_closed_handoff_leaves_the_deadline_index_before_its_deadline() -> None:
    lc = await world()
    await lc.send(CONV, HO_EXP)
    await lc.send(CONV, "RW1 UN payer-1 re=scheduler-1 p=pay from=payer to=scheduler why=BUSY")
    assert await lc.store.index("agents.pay", "due") == []
    lc.clock.now = T_EXP
    assert (await lc.sweep()).handled == []


async def test_a_deadline_whose_state_expired_is_dropped() -> None:
    lc = await world()
    await lc.send(CONV, HO_EXP)
    lc.store._states.clear()  # the conversation expired from retention
    lc.clock.now = T_EXP
    report = await lc.sweep()
    assert [h.what for h in report.handled] == ["dropped"] and lc.cancels() == []
    assert await lc.store.index("agents.pay", "due") == [] and await lc.store.index("agents.pay", "open") == []


async def test_only_the_partitions_held_are_swept() -> None:
    lc = await world()
    await lc.send(CONV, HO_EXP)
    lc.clock.now = T_EXP
    assert (await lc.sweeper.sweep([("agents.pay", 1)], now=lc.clock.now)).handled == []
    assert (await lc.sweeper.sweep([("other.route", 0)], now=lc.clock.now)).handled == []
    assert len((await lc.sweep()).cancels) == 1


async def test_a_dry_run_route_publishes_no_cancel_and_says_what_it_would_do() -> None:
    lc = Lifecycle(route(hold_seconds=0.0), Clock(NOW), dry_run=True)
    await lc.store.put_record(RECORD)
    await lc.send(CONV, HO_EXP)
    lc.clock.now = T_EXP
    report = await lc.sweep()
    assert [h.what for h in report.handled] == ["would-cancel"]
    assert lc.publisher.records("out") == []
    (alert,) = lc.alerts_()
    assert alert.doc["action"] == "would-cancel" and alert.doc["dry_run"] is True
    assert "why=EXPIRED" in alert.doc["cancel"]["line"]
    assert lc.state(CONV).handoffs["scheduler-1"].gk_cancel == "scheduler-900000001"


# ---------------------------------------------------------------- exactly one cancel


async def test_two_sweepers_on_one_partition_publish_one_cancel() -> None:
    """Two instances that both believe they hold the partition (a rebalance in flight, a zombie)."""
    lc = await world()
    for n in range(5):
        ho = f"RW1 HO scheduler-1 p=pay from=scheduler to=payer item=inv:X-{n} ask=REVIEW exp={EXP}"
        (d,) = await lc.send(f"{CONV}-{n}", ho)
        assert d.verdict is Verdict.FORWARD
    lc.clock.now = T_EXP
    other = lc.new_sweeper()
    a, b = await asyncio.gather(lc.sweep(), lc.sweep(other))
    assert len(lc.cancels()) == 5
    assert len({r.key for r in lc.cancels()}) == 5
    assert len(a.cancels) + len(b.cancels) == 5  # how they share the work varies; one cancel per handoff does not
    await asyncio.gather(lc.sweep(), lc.sweep(other))
    assert len(lc.cancels()) == 5


async def test_a_sweeper_killed_after_publishing_before_bookkeeping_publishes_no_second_cancel() -> None:
    lc = await world()
    await lc.send(CONV, HO_EXP)
    lc.clock.now = T_EXP
    lc.publisher.crash_after = 1
    with pytest.raises(Crash):
        await lc.sweep()
    assert len(lc.cancels()) == 1
    entry = lc.state(CONV).handoffs["scheduler-1"]
    assert entry.gk_cancel is None  # the bookkeeping did not happen
    restarted = lc.new_sweeper()  # a new process: another owner
    # before the takeover time, the intent belongs to the dead sweeper
    report = await lc.sweep(restarted)
    assert report.handled[0].what.startswith("skipped") and len(lc.cancels()) == 1
    lc.clock.now = T_EXP + 61
    report = await lc.sweep(restarted)
    assert [h.what for h in report.handled] == ["recovered"]
    assert len(lc.cancels()) == 1 and lc.publisher.finds == 1
    assert lc.state(CONV).handoffs["scheduler-1"].gk_cancel == "scheduler-900000001"
    assert (await lc.sweep(restarted)).handled == [] and len(lc.cancels()) == 1


async def test_a_sweeper_killed_before_publishing_publishes_once_after_the_takeover() -> None:
    lc = await world()
    await lc.send(CONV, HO_EXP)
    lc.clock.now = T_EXP
    lc.publisher.crash_before = 1
    with pytest.raises(Crash):
        await lc.sweep()
    assert lc.cancels() == []
    restarted = lc.new_sweeper()
    lc.clock.now = T_EXP + 61
    report = await lc.sweep(restarted)
    assert [h.what for h in report.handled] == ["cancelled"] and len(lc.cancels()) == 1


async def test_the_same_sweeper_recovers_its_own_failed_publish_at_once() -> None:
    lc = await world()
    await lc.send(CONV, HO_EXP)
    lc.clock.now = T_EXP
    lc.publisher.crash_after = 1  # e.g. the acknowledgement timed out, but the record was written
    with pytest.raises(Crash):
        await lc.sweep()
    report = await lc.sweep()
    assert [h.what for h in report.handled] == ["recovered"] and len(lc.cancels()) == 1


async def test_a_paused_sweeper_does_not_publish_a_claim_grown_old() -> None:
    """Paused between its claim and its publish for longer than half the takeover time: it must leave the cancel
    to a takeover (which searches the topic first) rather than publish late."""
    lc = await world()
    await lc.send(CONV, HO_EXP)
    lc.clock.now = T_EXP
    claim = lc.store.claim_cancel

    async def pause_after_claim(*args: Any) -> CancelIntent | None:
        got = await claim(*args)
        lc.clock.now += 45  # the process was stopped here
        return got

    lc.store.claim_cancel = pause_after_claim  # type: ignore[method-assign]
    report = await lc.sweep()
    assert report.handled[0].what.startswith("skipped") and lc.cancels() == []
    lc.store.claim_cancel = claim  # type: ignore[method-assign]
    lc.clock.now = T_EXP + 61
    other = lc.new_sweeper()
    assert [h.what for h in (await lc.sweep(other)).handled] == ["cancelled"]
    assert len(lc.cancels()) == 1


async def test_a_takeover_is_won_by_one_sweeper() -> None:
    lc = await world()
    await lc.send(CONV, HO_EXP)
    lc.clock.now = T_EXP
    lc.publisher.crash_before = 1
    with pytest.raises(Crash):
        await lc.sweep()
    lc.clock.now = T_EXP + 61
    a, b = lc.new_sweeper(), lc.new_sweeper()
    ra, rb = await asyncio.gather(lc.sweep(a), lc.sweep(b))
    assert len(lc.cancels()) == 1
    whats = sorted(h.what for h in [*ra.handled, *rb.handled])
    assert whats[0] == "cancelled" and (len(whats) == 1 or whats[1].startswith("skipped"))


async def test_a_handoff_that_cannot_be_swept_never_stops_the_sweep(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug while sweeping one handoff sets that handoff aside (logged once, counted, alerted); the others of the
    sweep are cancelled as usual, and the next sweeps skip it without raising again."""
    import gatekeeper.sweeper as sweeper_module

    lc = await world()
    draft = f"RW1 HO scheduler-1 p=pay from=scheduler to=desk item=doc:brief-1 ask=DRAFT exp={EXP}"
    await lc.send("c-bad", draft.replace("doc:brief-1", "doc:poison"))
    await lc.send("c-good", draft)
    real = sweeper_module.overdue

    def overdue_raising(state: Any, ho: str, *args: Any) -> Any:
        if state.handoffs[ho].item == "doc:poison":
            raise OverflowError("date value out of range")
        return real(state, ho, *args)

    monkeypatch.setattr(sweeper_module, "overdue", overdue_raising)
    lc.clock.now = T_EXP
    report = await lc.sweep()
    assert sorted((h.conversation, h.what) for h in report.handled) == [
        ("c-bad", "internal-error"),
        ("c-good", "cancelled"),
    ]
    assert len(lc.cancels()) == 1 and lc.cancels()[0].key == b"c-good"
    (alert,) = [a for a in lc.alerts_() if a.doc["alert"] == "internal-error"]
    assert alert.doc["conversation"] == "c-bad" and "OverflowError" in alert.doc["error"]
    assert value(lc, "gatekeeper_internal_errors_total", route="agents.pay", stage="sweep") == 1
    again = await lc.sweep()
    assert [(h.conversation, h.what) for h in again.handled] == [("c-bad", "skipped: internal error")]
    assert value(lc, "gatekeeper_internal_errors_total", route="agents.pay", stage="sweep") == 1
    errors = [r for r in caplog.records if r.levelname == "ERROR" and r.name == "gatekeeper.sweeper"]
    assert len(errors) == 1 and errors[0].exc_info is not None


async def test_the_gatekeeper_s_cancel_is_signed_cancel_which_is_no_clearance() -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from gatekeeper.sweeper import Sweeper, SweepRoute
    from gatekeeper.verdicts import SignatureError, Signer, Verifier

    signer = Signer("gk-1", Ed25519PrivateKey.generate())
    verifier = Verifier({"gk-1": signer.public_key})
    lc = await world()
    route = SweepRoute(lc.policy, lc.output, lc.alerts, signer=signer)
    lc.sweeper = Sweeper(lc.store, [route], lc.publisher, clock=lc.clock)
    await lc.send(CONV, HO_EXP)
    lc.clock.now = T_EXP
    await lc.sweep()
    (cx,) = lc.cancels()
    assert cx.headers["gk.sig"].startswith(b"v2 gk-1 cancel first - ")
    sig = verifier.verify(
        cx.headers["gk.sig"], route=lc.policy.name, conversation=CONV, value=cx.value, accept={"cancel"}
    )
    assert sig.verdict == "cancel"
    with pytest.raises(SignatureError, match="cancel"):
        verifier.verify(cx.headers["gk.sig"], route=lc.policy.name, conversation=CONV, value=cx.value)


async def test_without_a_signer_the_cancel_is_not_signed() -> None:
    lc = await world()
    await lc.send(CONV, HO_EXP)
    lc.clock.now = T_EXP
    await lc.sweep()
    (cx,) = lc.cancels()
    assert "gk.sig" not in cx.headers


# ---------------------------------------------------------------- questions unanswered past by=


async def test_a_question_unanswered_past_by_is_alerted_once_across_sweeps_and_restarts() -> None:
    lc = await world()
    await lc.send(CONV, HO, AQ)
    (due,) = await lc.store.index("agents.pay", "due")
    assert (due[1].ho, due[1].score) == ("payer-8", T_BY)
    assert [m.ho for _, m in await lc.store.index("agents.pay", "open")] == ["scheduler-1"]  # not a handoff
    lc.clock.now = T_BY - 60
    assert (await lc.sweep()).handled == [] and lc.alerts_() == []
    lc.clock.now = T_BY + 60
    report = await lc.sweep()
    assert [(h.what, h.ho) for h in report.handled] == [(UNANSWERED, "payer-8")]
    (alert,) = lc.alerts_()
    doc = alert.doc
    assert (doc["alert"], doc["action"], doc["conversation"], doc["question"]) == (
        UNANSWERED,
        "alerted",
        CONV,
        "payer-8",
    )
    assert (doc["from"], doc["to"], doc["re"], doc["by"]) == ("payer", "scheduler", "scheduler-1", "20261005")
    assert doc["line"] == AQ and doc["deadline"]["kind"] == "by" and doc["problems"][0]["code"] == UNANSWERED
    assert alert.headers["gk.alert"] == UNANSWERED.encode() and alert.headers[QUESTION_HEADER] == b"payer-8"
    assert alert.key == CONV.encode() and lc.cancels() == []
    assert value(lc, "gatekeeper_unanswered_questions_total", route="agents.pay") == 1
    assert value(lc, "gatekeeper_open_handoffs", route="agents.pay") == 1  # the question is not counted
    # recorded in the state and out of the deadline index: raised once, by this sweeper or a restarted one
    assert lc.state(CONV).lines["payer-8"].unanswered_at == T_BY + 60
    assert await lc.store.index("agents.pay", "due") == []
    lc.clock.now = T_BY + 86400
    assert (await lc.sweep()).handled == [] and (await lc.sweep(lc.new_sweeper())).handled == []
    assert len(lc.alerts_()) == 1 and value(lc, "gatekeeper_unanswered_questions_total", route="agents.pay") == 1


async def test_an_answered_question_is_never_alerted() -> None:
    for answer in (ANSWER, UNABLE):
        lc = await world()
        await lc.send(CONV, HO, AQ)
        (d,) = await lc.send(CONV, answer)
        assert d.verdict is Verdict.FORWARD
        assert await lc.store.index("agents.pay", "due") == []
        lc.clock.now = T_BY + 86400
        assert (await lc.sweep()).handled == [] and lc.alerts_() == []
        assert value(lc, "gatekeeper_unanswered_questions_total", route="agents.pay") == 0


async def test_a_question_answered_after_a_lost_index_write_is_not_alerted() -> None:
    # the index still holds the question (as if the answer's index write was lost): the sweep finds it answered,
    # raises nothing and takes it out of the index
    lc = await world()
    await lc.send(CONV, HO, AQ)
    stale = await lc.store.index("agents.pay", "due")
    await lc.send(CONV, ANSWER)
    lc.store._index[("agents.pay", 0, "due")].update({(m.conversation, m.ho): m.score for _, m in stale})
    lc.clock.now = T_BY + 60
    assert (await lc.sweep()).handled == [] and lc.alerts_() == []
    assert await lc.store.index("agents.pay", "due") == []


async def test_a_question_without_by_is_never_in_the_deadline_index() -> None:
    lc = await world()
    await lc.send(CONV, HO, AQ.replace(" by=20261005", ""))
    assert await lc.store.index("agents.pay", "due") == []
    lc.clock.now = T_BY + 365 * 86400
    assert (await lc.sweep()).handled == [] and lc.alerts_() == []
