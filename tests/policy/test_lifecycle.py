"""The handoff lifecycle, pure (``gatekeeper.policy.lifecycle``): deadlines, what is due, the gatekeeper's CX and
what it changes, and the deliberate differences from ``check_thread``, each pinned here."""

from __future__ import annotations

import calendar
import time

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gatekeeper.policy import Overlay, Reason, Verdict, apply, bound_handoff, decide, rw_time
from gatekeeper.policy.apply import touched
from gatekeeper.policy.lifecycle import (
    CLEARED_NOT_DONE,
    EXPIRED,
    ORPHANED,
    TIMEOUT,
    UNANSWERED,
    Action,
    DeadlineKind,
    LifecycleError,
    all_deadlines,
    by_deadline,
    cancel_line,
    deadlines_of,
    due_deadline,
    exp_deadline,
    expire,
    index_entries,
    index_of,
    mark_overdue,
    orphans,
    overdue,
    question_deadline,
    unanswered,
)
from gatekeeper.policy.state import ConversationState
from rwcore import check_thread, encode_message, get_profile, make_readback, parse_line
from tests.policy.world import ACK, AN, CX, DN, HO, NOW, RB, RECORD, World, core_world, epoch, pay_world, route

EXP = "20261001T1000Z"
HO_EXP = HO + f" exp={EXP}"
T_EXP = epoch(EXP)


def readback_of(ho: str, rb_id: str = "payer-1") -> str:
    """The code-composed readback of an HO on the pay profile (it passes every tier)."""
    prof = get_profile("pay")
    msg = parse_line(ho, prof).message
    assert msg is not None
    return encode_message(make_readback(msg, rb_id, prof), prof)


RB_EXP = readback_of(HO_EXP)


def sweep(w: World, conversation: str = "c1") -> list[str]:
    """What a sweeper does at ``w.now``, in pure form: act on every overdue handoff. Returns the CX lines written."""
    state = w.state(conversation)
    lines = []
    for ho in list(state.handoffs):
        while (o := overdue(state, ho, w.now, w.policy.readback_timeout_seconds)) is not None:
            if o.action is Action.CANCEL:
                line, decision = expire(state, ho, o.why, w.now, w.policy)
                lines.append(line)
            else:
                decision = mark_overdue(state, o, w.now)
            apply(state, decision, Overlay())
    return lines


# ---------------------------------------------------------------- time, as check_thread reads it

_minutes = st.integers(min_value=0, max_value=60 * 24 * 500).map(lambda m: NOW + 60 * m)


@settings(max_examples=300, deadline=None)
@given(
    y=st.integers(2026, 2027),
    mo=st.integers(0, 14),
    d=st.integers(0, 33),
    h=st.integers(0, 25),
    mi=st.integers(0, 61),
    now=_minutes,
)
def test_exp_deadline_is_when_check_thread_starts_calling_it_orphaned(
    y: int, mo: int, d: int, h: int, mi: int, now: float
) -> None:
    exp = f"{y:04d}{mo:02d}{d:02d}T{h:02d}{mi:02d}Z"
    at = exp_deadline(exp)
    assert at is not None
    assert (rw_time(now) >= exp) == (now >= at)


@settings(max_examples=300, deadline=None)
@given(y=st.integers(2026, 2027), mo=st.integers(0, 14), d=st.integers(0, 33), now=_minutes)
def test_due_deadline_is_the_first_day_check_thread_calls_past_it(y: int, mo: int, d: int, now: float) -> None:
    due = f"{y:04d}{mo:02d}{d:02d}"
    at = due_deadline(due)
    assert at is not None
    assert (rw_time(now)[:8] > due) == (now >= at)


def test_a_real_exp_is_that_minute_and_a_real_due_is_the_next_midnight() -> None:
    assert exp_deadline(EXP) == T_EXP
    assert due_deadline("20261002") == epoch("20261003T0000Z")
    assert exp_deadline("soon") is None and due_deadline("tomorrow") is None


# ---------------------------------------------------------------- deadlines


def test_a_forwarded_handoff_has_its_exp_and_due_deadlines() -> None:
    w = pay_world()
    w.send(HO_EXP + " due=20261001")
    got = [(d.kind, d.at) for d in deadlines_of(w.state())]
    assert got == [(DeadlineKind.EXP, T_EXP), (DeadlineKind.DUE, epoch("20261002T0000Z"))]


def test_the_readback_deadline_is_off_by_default_and_ends_with_a_passing_readback() -> None:
    assert deadlines_of(pay_world().state()) == []
    w = pay_world(readback_timeout_seconds=300.0)
    w.send(HO)
    (d,) = deadlines_of(w.state(), 300.0)
    assert (d.kind, d.at, d.why) == (DeadlineKind.READBACK, NOW + 300, TIMEOUT)
    assert deadlines_of(w.state()) == []  # the route's timeout is the caller's to give
    w.send(RB)
    assert deadlines_of(w.state(), 300.0) == []


def test_a_closed_handoff_has_no_deadline() -> None:
    w = pay_world()
    w.send(HO_EXP)
    w.send("RW1 UN payer-1 re=scheduler-1 p=pay from=payer to=scheduler why=BUSY")
    assert deadlines_of(w.state()) == [] and index_entries(w.state(), "c1", 0) == {}
    assert [d.kind for d in all_deadlines(w.state(), "scheduler-1")] == [DeadlineKind.EXP]


def test_nothing_is_due_before_the_deadline() -> None:
    w = pay_world()
    w.send(HO_EXP)
    assert overdue(w.state(), "scheduler-1", T_EXP - 1) is None
    o = overdue(w.state(), "scheduler-1", T_EXP)
    assert o is not None and (o.action, o.why, o.alert) == (Action.CANCEL, EXPIRED, ORPHANED)


# ---------------------------------------------------------------- the gatekeeper's CX


def test_the_cancel_is_a_valid_line_from_the_sender_to_the_receiver_in_the_reserved_range() -> None:
    w = pay_world()
    w.send(HO_EXP)
    line = cancel_line(w.state(), "scheduler-1", EXPIRED, w.policy)
    msg = parse_line(line, get_profile("pay")).message
    assert msg is not None
    assert (msg.type, msg.from_, msg.to, msg.re, msg.item) == ("CX", "scheduler", "payer", "scheduler-1", RECORD.item)
    assert msg.slots["why"] == EXPIRED and msg.slots["p"] == "pay"
    assert msg.id == "scheduler-900000001" and f"exp={EXP}" in (msg.tail or "")
    # an agent may not write that id: the pipeline refuses it
    refused = pay_world()
    refused.send(HO_EXP)
    d = refused.send(line)
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.RESERVED_ID)


def test_the_cancel_is_the_same_line_every_time_and_depends_on_no_clock() -> None:
    w = pay_world()
    w.send(HO_EXP)
    first, _ = expire(w.state(), "scheduler-1", EXPIRED, T_EXP, w.policy)
    again, _ = expire(w.state(), "scheduler-1", EXPIRED, T_EXP + 3600, w.policy)
    assert first == again
    assert w.state().handoffs["scheduler-1"].gk_cancel is None  # building it changed nothing


def test_each_handoff_gets_its_own_cancel_id() -> None:
    w = core_world()
    for n in (1, 2, 3):
        w.send(f"RW1 HO research-{n} from=research to=writer item=gh:x#{n} ask=DRAFT exp={EXP}")
    state = w.state()
    ids = [cancel_line(state, f"research-{n}", EXPIRED, w.policy).split()[2] for n in (1, 2, 3)]
    assert ids == ["research-900000001", "research-900000002", "research-900000003"]


def test_on_a_core_route_the_cancel_carries_no_profile() -> None:
    w = core_world()
    w.send("RW1 HO research-1 from=research to=writer item=gh:x#1 ask=DRAFT exp=20261001T1000Z")
    line = cancel_line(w.state(), "research-1", EXPIRED, w.policy)
    assert " p=" not in line and line.startswith("RW1 CX research-900000001 re=research-1 from=research to=writer")


def test_expiring_a_closed_handoff_is_refused() -> None:
    w = pay_world()
    w.send(HO_EXP)
    w.send("RW1 UN payer-1 re=scheduler-1 p=pay from=payer to=scheduler why=BUSY")
    try:
        cancel_line(w.state(), "scheduler-1", EXPIRED, w.policy)
    except LifecycleError:
        pass
    else:
        raise AssertionError("a closed handoff was cancelled")


def test_the_cancel_is_recorded_in_the_thread_like_a_forwarded_one() -> None:
    w = pay_world()
    w.send(HO_EXP)
    w.now = T_EXP
    (line,) = sweep(w)
    state = w.state()
    cx_id = line.split()[2]
    view = state.tracker.handoff("scheduler-1")
    assert view is not None and view.cancels == (cx_id,) and not view.closed
    assert state.lines[cx_id].type == "CX" and state.lines[cx_id].text == line
    entry = state.handoffs["scheduler-1"]
    assert (entry.gk_cancel, entry.gk_cancel_why, entry.overdue) == (cx_id, EXPIRED, ORPHANED)
    assert deadlines_of(state) == [] and sweep(w) == []  # acted on once
    assert orphans(state) == ["scheduler-1"]
    # check_thread over the same lines agrees: orphaned, the cancel not acknowledged yet
    thread = [HO_EXP, line]
    problems, _ = check_thread(thread, "pay", rw_time(w.now))
    assert [p.split(":")[0] for p in problems] == ["scheduler-1"] and "orphaned" in problems[0]


def test_the_receivers_acknowledgement_closes_it_and_frees_the_approval() -> None:
    w = pay_world()
    w.send(HO_EXP)
    assert bound_handoff(w.bindings[RECORD.key]) == "agents.pay/c1/scheduler-1"
    w.now = T_EXP
    (line,) = sweep(w)
    ack = ACK.replace("re=scheduler-3", f"re={line.split()[2]}")
    d = w.send(ack)
    assert d.verdict is Verdict.FORWARD
    assert RECORD.key not in w.bindings
    view = w.state().tracker.handoff("scheduler-1")
    assert view is not None and view.closed and orphans(w.state()) == []
    # the approval can be used again, by another handoff
    assert w.send(HO, "c2").verdict is Verdict.FORWARD


def test_a_done_report_after_the_gatekeepers_cancel_is_alerted() -> None:
    w = pay_world()
    w.send(HO_EXP)
    assert w.send(RB_EXP).verdict is Verdict.FORWARD
    w.now = T_EXP
    sweep(w)
    d = w.send(DN)
    assert d.verdict is Verdict.ALERT
    assert "thread-done-after-cancel" in [p.code for p in d.problems]
    nothing_ran = w.send(DN.replace("payer-2", "payer-4", 1).replace("out=OK", "out=NOOP"))
    assert "thread-done-after-cancel" not in [p.code for p in nothing_ran.problems]


def test_a_late_readback_or_clearance_after_the_cancel_is_refused() -> None:
    w = pay_world()
    w.send(HO_EXP)
    w.now = T_EXP
    sweep(w)
    rb = w.send(RB_EXP)
    assert rb.reason is Reason.CHECK_RB and "handoff-closed" in [p.code for p in rb.problems]


def test_a_readback_deadline_cancels_with_timeout_and_raises_no_orphan() -> None:
    w = pay_world(readback_timeout_seconds=300.0)
    w.send(HO_EXP)
    w.now = NOW + 299
    assert sweep(w) == []
    w.now = NOW + 300
    (line,) = sweep(w)
    assert "why=TIMEOUT" in line and "no passing readback within 300s" in line
    entry = w.state().handoffs["scheduler-1"]
    assert entry.gk_cancel_why == TIMEOUT and entry.overdue is None and orphans(w.state()) == []
    # at exp, still not acknowledged: orphaned, alerted, and no second cancel
    w.now = T_EXP
    assert sweep(w) == []
    assert w.state().handoffs["scheduler-1"].overdue == ORPHANED


def test_both_deadlines_passed_at_once_give_one_cancel_for_the_earliest() -> None:
    w = pay_world(readback_timeout_seconds=300.0)
    w.send(HO_EXP)
    w.now = T_EXP + 3600
    (line,) = sweep(w)
    assert "why=TIMEOUT" in line
    assert w.state().handoffs["scheduler-1"].overdue == ORPHANED


def test_a_handoff_the_sender_cancelled_is_alerted_at_exp_not_cancelled_again() -> None:
    w = pay_world()
    w.send(HO_EXP)
    w.send(CX)
    w.now = T_EXP
    assert sweep(w) == []
    entry = w.state().handoffs["scheduler-1"]
    assert entry.overdue == ORPHANED and entry.gk_cancel is None


# ---------------------------------------------------------------- the deliberate differences from check_thread


def test_difference_a_cleared_handoff_is_alerted_cleared_not_done_never_cancelled() -> None:
    w = pay_world()
    w.send(HO_EXP)
    w.send(RB_EXP)
    assert w.send(AN).verdict is Verdict.FORWARD
    w.now = T_EXP
    o = overdue(w.state(), "scheduler-1", w.now)
    assert o is not None and (o.action, o.alert) == (Action.CLEARED_NOT_DONE, CLEARED_NOT_DONE)
    decision = mark_overdue(w.state(), o, w.now)
    assert [p.code for p in decision.problems] == [CLEARED_NOT_DONE]
    assert sweep(w) == []
    assert w.state().handoffs["scheduler-1"].overdue == CLEARED_NOT_DONE
    # where check_thread calls the same handoff orphaned
    problems, _ = check_thread([HO_EXP, RB_EXP, AN], "pay", rw_time(w.now))
    assert len(problems) == 1 and "orphaned" in problems[0]


def test_difference_a_superseded_handoff_is_closed_never_orphaned() -> None:
    w = pay_world()
    bad_rb = RB.replace("amt=5400.00", "amt=5100.00")
    w.send(HO_EXP)
    w.send(bad_rb)
    reissue = HO_EXP.replace("scheduler-1", "scheduler-4", 1).replace(" p=pay", " re=payer-1 p=pay", 1)
    w.send(reissue)
    assert w.state().handoffs["scheduler-1"].superseded_by == "scheduler-4"
    w.now = T_EXP
    lines = sweep(w)
    assert [ln.split()[3] for ln in lines] == ["re=scheduler-4"]  # the re-issue is cancelled; the original is not
    assert "scheduler-1" not in orphans(w.state())
    problems, _ = check_thread([HO_EXP, bad_rb, reissue], "pay", rw_time(w.now))
    assert any(p.startswith("scheduler-1: orphaned") for p in problems)


def test_difference_a_duplicate_id_is_refused_so_it_never_opens_a_handoff() -> None:
    w = pay_world()
    w.send(HO_EXP)
    dup = HO_EXP.replace("exp=20261001T1000Z", "exp=20261001T1100Z")
    assert w.send(dup).reason is Reason.DUPLICATE_ID
    assert [d.at for d in deadlines_of(w.state())] == [T_EXP]


def test_difference_a_cancel_from_the_wrong_agent_is_refused_and_alerted_and_cancels_nothing() -> None:
    w = pay_world()
    w.send(HO_EXP)
    wrong = "RW1 CX desk-1 re=scheduler-1 p=pay from=desk to=payer item=inv:MD-2026-057 why=REVOKED"
    d = w.send(wrong)
    assert (d.verdict, d.reason, d.alerts) == (Verdict.DEAD_LETTER, Reason.CHECK_THREAD, True)
    assert [p.code for p in d.problems] == ["thread-cancel-wrong-agent"]
    view = w.state().tracker.handoff("scheduler-1")
    assert view is not None and not view.cancelled
    w.now = T_EXP
    assert len(sweep(w)) == 1  # still open at exp: the gatekeeper cancels it


# ---------------------------------------------------------------- index entries


def test_index_entries_follow_the_open_handoffs() -> None:
    w = pay_world(readback_timeout_seconds=60.0)
    w.send(HO_EXP)
    (e,) = index_entries(w.state(), "c1", 2, 60.0).values()
    assert (e.partition, e.conversation, e.ho, e.open, e.opened_at, e.due_at) == (
        2,
        "c1",
        "scheduler-1",
        True,
        NOW,
        NOW + 60,
    )
    w.now = NOW + 60
    sweep(w)
    (e,) = index_entries(w.state(), "c1", 2, 60.0).values()
    assert e.due_at == T_EXP and e.lapsed_at == NOW + 60


def test_decide_sees_the_gatekeepers_cancel_as_a_cancel() -> None:
    w = pay_world()
    w.send(HO_EXP)
    w.now = T_EXP
    assert len(sweep(w)) == 1
    # an agent's own CX after the gatekeeper's is still forwarded (the sender may cancel too)
    d = decide(CX.encode(), "c1", w.state(), Overlay(records=w.records), w.policy, w.now)
    assert d.verdict is Verdict.FORWARD


def test_epoch_helper_is_utc() -> None:
    assert epoch(EXP) == calendar.timegm(time.strptime(EXP, "%Y%m%dT%H%MZ"))
    assert route().readback_timeout_seconds is None


def test_the_index_is_written_for_the_handoffs_a_line_touches() -> None:
    """What applying a line's effects touches: the engine's effects applied natively say the same as the policy's
    values of them read in Python (``touched``)."""
    w = pay_world()
    opened = w.send(HO_EXP)
    assert touched(w.state(), opened.effects) == w.touched == {"scheduler-1"}
    rb = w.send(RB_EXP)
    assert touched(w.state(), rb.effects) == w.touched == {"scheduler-1"}
    w.now = T_EXP
    (line,) = sweep(w)
    ack = w.send(ACK.replace("re=scheduler-3", f"re={line.split()[2]}"))
    assert touched(w.state(), ack.effects) == w.touched == {"scheduler-1"}  # through the cancel it answers
    (closed,) = index_of(w.state(), "c1", 4, {"scheduler-1", "nobody-9"})
    assert (closed.open, closed.lapsed_at, closed.partition) == (False, T_EXP, 4)
    st = w.send(
        "RW1 ST extractor-1 p=pay from=extractor to=reconciler item=inv:7731 src=email:7 amt=1.00 cur=GBP kind=NET"
    )
    assert touched(w.state(), st.effects) == set()


# ---------------------------------------------------------------- questions: an AQ always gets an AN (or a UN)

AQ = "RW1 AQ payer-8 re=scheduler-1 p=pay from=payer to=scheduler need=ENUM opts=APPROVE+HOLD by=20261005"
ANSWER = "RW1 AN scheduler-9 re=payer-8 p=pay from=scheduler to=payer val=APPROVE"
UNABLE = "RW1 UN scheduler-9 re=payer-8 p=pay from=scheduler to=payer why=NOCAP"
T_BY = epoch("20261006T0000Z")  # a date: overdue from the start of the next day, UTC


def asked(aq: str = AQ) -> World:
    w = pay_world()
    w.send(HO)
    assert w.send(aq).verdict is Verdict.FORWARD
    return w


def test_by_is_a_date_as_due_or_a_time_as_exp() -> None:
    assert by_deadline("20261005") == due_deadline("20261005") == T_BY
    assert by_deadline("20261005T1000Z") == exp_deadline("20261005T1000Z") == epoch("20261005T1000Z")
    assert by_deadline("soon") is None and by_deadline(None) is None


def test_a_question_with_by_has_a_deadline_in_the_index() -> None:
    w = asked()
    state = w.state()
    q = question_deadline(state, "payer-8")
    assert q is not None and (q.aq, q.at, q.value) == ("payer-8", T_BY, "20261005")
    (e,) = index_of(state, "c1", 4, ["payer-8"])
    assert (e.ho, e.open, e.due_at, e.partition) == ("payer-8", False, T_BY, 4)  # never in the open index
    assert index_entries(state, "c1", 4)["payer-8"].due_at == T_BY
    assert "payer-9" in touched(state, w.send(AQ.replace("payer-8", "payer-9")).effects)


def test_an_answer_removes_the_deadline_and_no_alert_is_raised() -> None:
    for answer in (ANSWER, UNABLE):
        w = asked()
        d = w.send(answer)
        assert d.verdict is Verdict.FORWARD
        assert "payer-8" in touched(w.state(), d.effects)
        assert question_deadline(w.state(), "payer-8") is None
        (e,) = index_of(w.state(), "c1", 0, ["payer-8"])
        assert e.due_at is None
        assert unanswered(w.state(), "payer-8", T_BY + 86400) is None


def test_a_question_unanswered_past_by_is_alerted_once() -> None:
    w = asked()
    state = w.state()
    assert unanswered(state, "payer-8", T_BY - 1) is None  # not yet: all of the 5th is in time
    d = unanswered(state, "payer-8", T_BY)
    assert d is not None and d.verdict is Verdict.ALERT and d.reason is Reason.CHECK_THREAD
    (p,) = d.problems
    assert (p.code, p.slot, p.expected) == (UNANSWERED, "by", "answered by 20261005")
    assert "payer-8" in p.message and "from payer to scheduler" in p.message
    apply(state, d, Overlay())
    assert state.lines["payer-8"].unanswered_at == T_BY and "l:payer-8" in state.dirty
    assert "payer-8" in touched(state, d.effects)
    assert unanswered(state, "payer-8", T_BY + 86400) is None  # once
    (e,) = index_of(state, "c1", 0, ["payer-8"])
    assert e.due_at is None
    # the mark is kept by the store: a state loaded again does not raise it a second time
    again = ConversationState.from_fields(state.all_fields())
    assert again.lines["payer-8"].unanswered_at == T_BY and unanswered(again, "payer-8", T_BY + 86400) is None
    # a late answer is still an answer
    assert w.send(ANSWER).verdict is Verdict.FORWARD


def test_a_question_without_by_is_never_alerted() -> None:
    w = asked(AQ.replace(" by=20261005", ""))
    assert question_deadline(w.state(), "payer-8") is None
    assert unanswered(w.state(), "payer-8", T_BY + 365 * 86400) is None
    (e,) = index_of(w.state(), "c1", 0, ["payer-8"])
    assert e.due_at is None


def test_a_refused_question_has_no_deadline() -> None:
    w = pay_world()
    w.send(HO)
    stranger = AQ.replace("AQ payer-8", "AQ desk-8").replace("from=payer", "from=desk")
    assert w.send(stranger).verdict is Verdict.DEAD_LETTER
    assert question_deadline(w.state(), "desk-8") is None


def test_a_question_kept_by_an_earlier_release_has_no_deadline() -> None:
    # an earlier release kept an AQ's entry without its text (and so without its by=): nothing to alert on
    w = asked()
    state = w.state()
    fields = state.all_fields()
    entry = orjson.loads(fields["l:payer-8"])
    del entry["x"]
    fields["l:payer-8"] = orjson.dumps(entry).decode()
    old = ConversationState.from_fields(fields)
    assert question_deadline(old, "payer-8") is None and unanswered(old, "payer-8", T_BY + 86400) is None
    assert index_of(old, "c1", 0, ["payer-8"])[0].due_at is None
