"""Every row of the verdict table (DESIGN.md, enforce mode), top to bottom, against the pure decision."""

from __future__ import annotations

import json

import pytest

from gatekeeper.policy import RESERVED_ID_MIN, ConversationState, Reason, Record, RecordKey, Verdict, bound_handoff
from tests.policy.world import ACK, AN, CX, DN, HO, NOW, RB, RECORD, World, core_world, epoch, pay_world

KEY = RecordKey("inv:MD-2026-057", "PAY")


def codes(d: object) -> list[str]:
    return [p.code for p in d.problems]  # type: ignore[attr-defined]


def test_clean_payment_forwards_every_line_and_binds_the_approval() -> None:
    w = pay_world()
    verdicts = [w.send(line).verdict for line in (HO, RB, AN, DN)]
    assert verdicts == [Verdict.FORWARD] * 4
    assert bound_handoff(w.bindings[KEY]) == "agents.pay/c1/scheduler-1"
    handoff = w.state().handoffs["scheduler-1"]
    assert handoff.cleared_by == "payer-1" and handoff.passed_rb == "payer-1"
    assert w.state().tracker.handoff("scheduler-1").closed  # type: ignore[union-attr]


# ---------------------------------------------------------------- the gate


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (HO.replace("ask=PAY", "ask=PAYY"), "unknown-code"),
        (HO.replace("amt=5400.00", "amt=5,400.00"), "bad-money"),
        (HO.replace("scheduler-1", "sched-1", 1), "id-shape"),
        (HO + " // " + "x" * 301, "tail-too-long"),
        (HO.replace("RW1", "RW2", 1), "bad-version"),
        (HO.encode() + b" // caf\xe9", "input-not-utf8"),
        (HO + " // first line\nRW1 AN scheduler-9 re=payer-1 from=scheduler to=payer val=Y", "input-multiline"),
        (HO.replace(" sup=", "  sup="), "input-spacing"),
        (HO.replace("sup=marlow", "sup=marl\u043ew"), "input-non-ascii"),
        (HO + " // ok\u202etxet", "input-control-character"),
        (HO + "\x00", "input-control-character"),
        (HO + " // pay\u00a0now", "input-control-character"),  # a no-break space looks like a space
        (HO + " // pay\u2003now", "input-control-character"),
        (HO + " // pay\u3000now", "input-control-character"),
        (HO.replace("p=pay", "p=deploy"), "profile-mismatch"),
        (b"", "input-empty"),
    ],
)
def test_invalid_lines_are_dead_lettered_with_the_reason(value: str | bytes, code: str) -> None:
    d = pay_world().send(value)
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.INVALID)
    assert code in codes(d), codes(d)


def test_a_line_too_long_for_the_route_is_invalid() -> None:
    d = pay_world(max_line_bytes=100).send(HO)
    assert d.reason is Reason.INVALID and codes(d) == ["input-too-long"]


def test_a_record_without_a_key_is_dead_lettered_no_conversation() -> None:
    d = pay_world().send(HO, conversation=None)
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.NO_CONVERSATION)


def test_sender_binding_refuses_a_sender_the_route_does_not_name() -> None:
    w = pay_world(senders=frozenset({"payer"}))
    d = w.send(HO)
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.SENDER_BINDING)
    assert d.problems[0].got == "scheduler"


def test_the_gatekeepers_reserved_ids_are_refused() -> None:
    d = pay_world().send(HO.replace("scheduler-1", f"scheduler-{RESERVED_ID_MIN}", 1))
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.RESERVED_ID)


def test_an_id_reused_for_a_different_line_is_refused_and_changes_nothing() -> None:
    w = pay_world()
    w.send(HO)
    before = w.state().all_fields()
    d = w.send(HO.replace("rb=exec", "rb=exec pri=1"))
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.DUPLICATE_ID)
    assert d.effects == () and w.state().all_fields() == before


def test_the_same_line_again_gets_its_first_verdict_and_time_without_a_second_change() -> None:
    w = pay_world()
    first = w.send(HO)
    w.now += 3600
    before = w.state().all_fields()
    again = w.send(HO)
    assert again.repeated and again.verdict is first.verdict and again.decided_at == NOW
    assert again.effects == () and w.state().all_fields() == before


# ---------------------------------------------------------------- replies to dead-lettered lines


def test_replies_to_a_dead_lettered_handoff_are_refused() -> None:
    w = pay_world()
    assert w.send(HO.replace("61102938", "61102983")).reason is Reason.CHECK_HO
    d = w.send(RB.replace("h=a7a82de76607 ", ""))
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.REFUSED_HANDOFF)
    assert not d.alerts


def test_a_done_report_for_a_refused_handoff_is_refused_and_alerted() -> None:
    w = pay_world()
    w.send(HO.replace("61102938", "61102983"))
    d = w.send(DN)
    assert (d.verdict, d.reason, d.alerts) == (Verdict.DEAD_LETTER, Reason.REFUSED_HANDOFF, True)


def test_replies_to_an_invalid_line_with_a_well_formed_id_are_refused() -> None:
    w = pay_world()
    assert w.send(HO.replace("amt=5400.00", "amt=54")).reason is Reason.INVALID
    assert w.send(RB).reason is Reason.REFUSED_HANDOFF


# ---------------------------------------------------------------- HO


def test_a_handoff_past_its_own_exp_is_expired() -> None:
    d = pay_world().send(HO + " exp=20261001T0800Z")
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.EXPIRED)


def test_an_exec_ask_without_a_record_has_no_record() -> None:
    d = World().send(HO)
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.NO_RECORD)


def test_a_non_exec_ask_without_a_record_is_forwarded() -> None:
    d = core_world().send("RW1 HO research-1 from=research to=writer item=gh:crox/site#42 ask=DRAFT due=20261002")
    assert d.verdict is Verdict.FORWARD


@pytest.mark.parametrize(
    ("line", "slot"),
    [
        (HO.replace("61102938", "61102983"), "acct"),
        (HO.replace(" rb=exec", ""), "rb"),
        (HO.replace(" apref=FD-0929", ""), "apref"),
    ],
)
def test_a_handoff_that_differs_from_its_record_fails_check_ho(line: str, slot: str) -> None:
    d = pay_world().send(line)
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.CHECK_HO)
    assert any(slot in p.message for p in d.problems), d.problems


def test_the_record_values_resolved_and_expect_acc_are_not_part_of_check_ho() -> None:
    w = World().add(Record(RECORD.item, RECORD.ask, RECORD.values, {"prev": "11-22-33/44556677"}, ("len:120w",)))
    assert w.send(HO).verdict is Verdict.FORWARD


def test_one_approval_one_act_across_conversations() -> None:
    w = pay_world()
    assert w.send(HO, "c1").verdict is Verdict.FORWARD
    d = w.send(HO, "c2")
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.RECORD_USED)
    assert d.problems[0].got == "agents.pay/c1/scheduler-1"


@pytest.mark.parametrize(
    "ending",
    [
        ["RW1 UN payer-1 re=scheduler-1 p=pay from=payer to=scheduler why=BUSY"],
        ["RW1 FL payer-1 re=scheduler-1 p=pay from=payer to=scheduler item=inv:MD-2026-057 why=ERR"],
        [CX, ACK],
        ["RW1 DN payer-1 re=scheduler-1 p=pay from=payer to=scheduler item=inv:MD-2026-057 out=NOOP"],
    ],
)
def test_the_approval_is_free_again_when_the_handoff_ends_without_the_act(ending: list[str]) -> None:
    w = pay_world()
    w.send(HO, "c1")
    for line in ending:
        assert w.send(line, "c1").forwarded
    assert KEY not in w.bindings
    assert w.send(HO, "c2").verdict is Verdict.FORWARD
    assert bound_handoff(w.bindings[KEY]) == "agents.pay/c2/scheduler-1"


def test_an_unacknowledged_cancel_keeps_the_approval_bound() -> None:
    w = pay_world()
    w.send(HO, "c1")
    w.send(CX, "c1")
    assert w.send(HO, "c2").reason is Reason.RECORD_USED


def test_after_the_act_the_approval_stays_used() -> None:
    w = pay_world()
    for line in (HO, RB, AN, DN):
        w.send(line, "c1")
    assert w.send(HO, "c2").reason is Reason.RECORD_USED


def test_undo_needs_a_done_report_in_its_ctx() -> None:
    w = pay_world()
    for line in (HO, RB, AN, DN):
        w.send(line)
    undo = "RW1 HO scheduler-4 p=pay from=scheduler to=payer item=inv:MD-2026-057 ask=UNDO ctx={ctx}"
    bad = w.send(undo.format(ctx="payer-1"))
    assert (bad.verdict, bad.reason) == (Verdict.DEAD_LETTER, Reason.CHECK_HO)
    assert codes(bad) == ["undo-no-done"]
    assert w.send(undo.format(ctx="payer-2").replace("scheduler-4", "scheduler-5")).verdict is Verdict.FORWARD


def test_a_reissue_after_a_failed_readback_supersedes_the_original() -> None:
    w = pay_world()
    w.send(HO)
    bad_rb = w.send(RB.replace("61102938", "61102983"))
    assert bad_rb.reason is Reason.CHECK_RB
    reissue = HO.replace("scheduler-1", "scheduler-4", 1).replace(" p=pay", " re=payer-1 p=pay", 1)
    d = w.send(reissue)
    assert d.verdict is Verdict.FORWARD, d.problems
    assert w.state().handoffs["scheduler-1"].superseded_by == "scheduler-4"
    assert bound_handoff(w.bindings[KEY]) == "agents.pay/c1/scheduler-4"
    rb2 = RB.replace("payer-1", "payer-4", 1).replace("re=scheduler-1", "re=scheduler-4").replace(" h=a7a82de76607", "")
    assert w.send(rb2).verdict is Verdict.FORWARD
    late = w.send("RW1 AN scheduler-9 re=payer-1 p=pay from=scheduler to=payer val=Y")
    assert late.reason is Reason.REFUSED_HANDOFF


def test_a_reissue_that_fails_its_own_check_supersedes_nothing() -> None:
    w = pay_world()
    w.send(HO)
    w.send(RB.replace("61102938", "61102983"))
    bad = HO.replace("scheduler-1", "scheduler-4", 1).replace(" p=pay", " re=payer-1 p=pay", 1).replace("GBP", "EUR")
    assert w.send(bad).reason is Reason.CHECK_HO
    assert w.state().handoffs["scheduler-1"].superseded_by is None


# ---------------------------------------------------------------- RB


def test_a_readback_of_an_unknown_handoff_is_held_then_refused() -> None:
    w = pay_world()
    held = w.send(RB, first_seen=NOW - 10)
    assert (held.verdict, held.reason, held.effects) == (Verdict.HOLD, Reason.AWAITING_HANDOFF, ())
    d = w.send(RB, first_seen=NOW - 31)
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.UNKNOWN_HANDOFF)


def test_a_lookalike_account_in_the_tools_statement_fails_the_readback() -> None:
    w = pay_world()
    w.send(HO)
    d = w.send(RB.replace("61102938", "61102983"))
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.CHECK_RB)
    p = next(p for p in d.problems if p.slot == "acct")
    assert p.tier == "execution" and p.got == "40-12-88/61102983"


def test_the_senders_clearance_of_a_failed_readback_is_refused() -> None:
    w = pay_world()
    w.send(HO)
    w.send(RB.replace("61102938", "61102983"))
    d = w.send(AN)
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.REFUSED_HANDOFF)


CHGBANK_HO = (
    "RW1 HO desk-1 p=pay from=desk to=payer item=sup:northfield ask=CHGBANK rb=exec sup=northfield "
    "acct=20-00-00/12345678 eff=20261005 apref=FD-0931"
)
CHGBANK_RECORD = Record(
    "sup:northfield",
    "CHGBANK",
    {
        "to": "payer",
        "ask": "CHGBANK",
        "sup": "northfield",
        "acct": "20-00-00/12345678",
        "eff": "20261005",
        "apref": "FD-0931",
    },
    resolved={"prev": "30-11-11/87654321"},
)
CHGBANK_RB = (
    "RW1 RB payer-1 re=desk-1 p=pay from=payer to=desk item=sup:northfield ask=CHGBANK sup=northfield "
    "acct=20-00-00/12345678 eff=20261005 apref=FD-0931 prev={prev}"
)


def test_a_value_the_receiver_resolved_must_match_the_records_resolved_value() -> None:
    w = World().add(CHGBANK_RECORD)
    assert w.send(CHGBANK_HO).verdict is Verdict.FORWARD
    bad = w.send(CHGBANK_RB.format(prev="30-11-11/87654312"))
    assert (bad.verdict, bad.reason) == (Verdict.DEAD_LETTER, Reason.CHECK_RB)
    assert codes(bad) == ["resolved-mismatch"]


def test_a_matching_resolved_value_passes() -> None:
    w = World().add(CHGBANK_RECORD)
    w.send(CHGBANK_HO)
    assert w.send(CHGBANK_RB.format(prev="30-11-11/87654321")).verdict is Verdict.FORWARD


def test_a_resolved_value_the_record_cannot_vouch_for_is_refused() -> None:
    record = Record(CHGBANK_RECORD.item, CHGBANK_RECORD.ask, CHGBANK_RECORD.values)
    w = World().add(record)
    w.send(CHGBANK_HO)
    d = w.send(CHGBANK_RB.format(prev="30-11-11/87654321"))
    assert d.reason is Reason.CHECK_RB and codes(d) == ["resolved-unverified"]


DRAFT_HO = (
    "RW1 HO research-1 from=research to=writer item=gh:crox/site#42 ask=DRAFT due=20261002 rb=acc "
    "keys=len+tone+must+no // hero copy"
)
DRAFT_RECORD = Record(
    "gh:crox/site#42",
    "DRAFT",
    {"to": "writer", "ask": "DRAFT", "due": "20261002"},
    expect_acc=("len:120w", "tone:plain", "no:em-dash", "must:monday-problem"),
)
DRAFT_RB = (
    "RW1 RB writer-1 re=research-1 from=writer to=research item=gh:crox/site#42 ask=DRAFT due=20261002 "
    "acc=len:{len}+tone:plain+must:monday-problem+no:em-dash do=copy"
)


def test_a_comprehension_readback_that_contradicts_the_withheld_length_fails() -> None:
    w = core_world().add(DRAFT_RECORD)
    assert w.send(DRAFT_HO).verdict is Verdict.FORWARD
    d = w.send(DRAFT_RB.format(len="150w"))
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.CHECK_RB)
    assert any(p.tier == "comprehension" for p in d.problems)


def test_a_comprehension_readback_that_matches_passes() -> None:
    w = core_world().add(DRAFT_RECORD)
    w.send(DRAFT_HO)
    assert w.send(DRAFT_RB.format(len="120w")).verdict is Verdict.FORWARD


def test_a_readback_of_a_closed_handoff_fails() -> None:
    w = pay_world()
    w.send(HO)
    w.send("RW1 UN payer-1 re=scheduler-1 p=pay from=payer to=scheduler why=BUSY")
    d = w.send(RB.replace("payer-1", "payer-2", 1))
    assert d.reason is Reason.CHECK_RB and "handoff-closed" in codes(d)


# ---------------------------------------------------------------- AN: the clearance gate


def test_a_clearance_of_an_unknown_readback_is_held_then_refused() -> None:
    w = pay_world()
    assert w.send(AN, first_seen=NOW).verdict is Verdict.HOLD
    d = w.send(AN, first_seen=NOW - 60)
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.CLEARANCE)


def test_a_negative_answer_is_forwarded_and_the_readback_can_no_longer_be_cleared() -> None:
    w = pay_world()
    w.send(HO)
    w.send(RB)
    assert w.send("RW1 AN scheduler-2 re=payer-1 p=pay from=scheduler to=payer val=HOLD").verdict is Verdict.FORWARD
    d = w.send(AN.replace("scheduler-2", "scheduler-3", 1))
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.CLEARANCE)
    assert "clearance-refused" in codes(d)


def test_a_clearance_after_the_handoff_expired_is_refused() -> None:
    w = pay_world()
    w.send(HO + " exp=20261001T1000Z")
    w.send(RB.replace(" h=a7a82de76607", ""))
    w.now = epoch("20261001T1001Z")
    d = w.send(AN)
    assert d.reason is Reason.CLEARANCE and "clearance-expired" in codes(d)


def test_a_clearance_after_the_statement_expired_is_refused() -> None:
    w = pay_world()
    w.send(HO)
    w.send(RB.replace(" h=a7a82de76607", "") + " exp=20261001T0930Z")
    w.now = epoch("20261001T0931Z")
    d = w.send(AN)
    assert d.reason is Reason.CLEARANCE and "clearance-expired" in codes(d)


def test_a_clearance_after_a_cancel_is_refused() -> None:
    w = pay_world()
    for line in (HO, RB, CX):
        w.send(line)
    d = w.send(AN)
    assert d.reason is Reason.CLEARANCE and "clearance-closed" in codes(d)


def test_a_clearance_from_anyone_but_the_handoffs_sender_is_refused() -> None:
    w = pay_world()
    w.send(HO)
    w.send(RB)
    d = w.send("RW1 AN desk-1 re=payer-1 p=pay from=desk to=payer val=APPROVE")
    assert d.reason is Reason.CLEARANCE and codes(d) == ["clearance-route"]


def test_an_answer_to_a_question_is_forwarded() -> None:
    w = pay_world()
    w.send("RW1 AQ payer-1 p=pay from=payer to=scheduler item=inv:MD-2026-057 need=ENUM opts=APPROVE+HOLD")
    assert w.send("RW1 AN scheduler-1 re=payer-1 p=pay from=scheduler to=payer val=APPROVE").verdict is Verdict.FORWARD


# ---------------------------------------------------------------- DN, UN, FL


def test_a_done_report_with_a_different_amount_is_forwarded_flagged_and_alerted() -> None:
    w = pay_world()
    for line in (HO, RB, AN):
        w.send(line)
    d = w.send(DN.replace("amt=5400.00", "amt=5100.00"))
    assert (d.verdict, d.reason, d.alerts) == (Verdict.ALERT, Reason.CHECK_DN, True)
    assert any(p.slot == "amt" and p.got == "5100.00" for p in d.problems)


def test_a_done_report_after_a_cancel_is_alerted() -> None:
    w = pay_world()
    for line in (HO, RB, AN, CX, ACK):
        assert w.send(line).forwarded
    d = w.send(DN)
    assert (d.verdict, d.reason) == (Verdict.ALERT, Reason.CHECK_DN)
    assert "thread-done-after-cancel" in codes(d)


def test_an_exec_act_reported_done_without_a_clearance_is_alerted() -> None:
    w = pay_world()
    w.send(HO)
    w.send(RB)
    d = w.send(DN)
    assert d.verdict is Verdict.ALERT and codes(d) == ["done-not-cleared"]


def test_a_done_report_for_an_unknown_handoff_is_held_then_alerted() -> None:
    w = pay_world()
    assert w.send(DN, first_seen=NOW).verdict is Verdict.HOLD
    d = w.send(DN, first_seen=NOW - 31)
    assert (d.verdict, d.reason) == (Verdict.ALERT, Reason.UNKNOWN_HANDOFF)


def test_a_second_close_is_forwarded_flagged_and_alerted() -> None:
    w = pay_world()
    w.send(HO)
    assert w.send("RW1 UN payer-1 re=scheduler-1 p=pay from=payer to=scheduler why=BUSY").verdict is Verdict.FORWARD
    d = w.send("RW1 FL payer-2 re=scheduler-1 p=pay from=payer to=scheduler item=inv:MD-2026-057 why=ERR")
    assert (d.verdict, d.reason) == (Verdict.ALERT, Reason.CHECK_THREAD)
    assert codes(d) == ["thread-closed-twice"]


# ---------------------------------------------------------------- CX


def test_a_cancel_from_the_wrong_agent_is_refused() -> None:
    w = pay_world()
    w.send(HO)
    d = w.send("RW1 CX desk-1 re=scheduler-1 p=pay from=desk to=payer item=inv:MD-2026-057 why=REVOKED")
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.CHECK_THREAD)


def test_a_cancel_that_names_no_handoff_is_refused() -> None:
    w = pay_world()
    w.send(HO)
    w.send(RB)
    named_rb = w.send(CX.replace("re=scheduler-1", "re=payer-1"))
    assert (named_rb.verdict, named_rb.reason) == (Verdict.DEAD_LETTER, Reason.CHECK_THREAD)
    unknown = CX.replace("re=scheduler-1", "re=scheduler-77").replace("scheduler-3", "scheduler-4", 1)
    assert w.send(unknown, first_seen=NOW).verdict is Verdict.HOLD
    assert w.send(unknown, first_seen=NOW - 60).reason is Reason.CHECK_THREAD


# ---------------------------------------------------------------- ST: translation


def test_an_invoice_line_without_its_source_is_refused() -> None:
    d = pay_world().send(
        "RW1 ST extractor-1 p=pay from=extractor to=reconciler item=inv:7731 sup=marlow amt=120.00 cur=GBP kind=NET"
    )
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.TRANSLATION)


def test_net_plus_vat_must_equal_a_gross_amount() -> None:
    st = (
        "RW1 ST extractor-1 p=pay from=extractor to=reconciler item=inv:7731 src=email:7 sup=marlow amt={amt} "
        "cur=GBP kind=GROSS net=100.00 vat=20.00"
    )
    assert pay_world().send(st.format(amt="120.00")).verdict is Verdict.FORWARD
    d = pay_world().send(st.format(amt="121.00"))
    assert d.reason is Reason.TRANSLATION


# ---------------------------------------------------------------- one approval, one act: a handoff's identity
# (issue 28: a binding names the route, the conversation, the id and the line's digest, and outlives the state)


def test_a_copy_of_a_bound_handoff_on_another_route_is_record_used() -> None:
    """The same conversation, id and bytes on a second route: another identity, so it never "already holds" it."""
    first, second = pay_world(), pay_world(name="agents.pay2")
    assert first.send(HO, "c1").verdict is Verdict.FORWARD
    second.bindings = first.bindings  # the approvals and their bindings are shared by every route
    d = second.send(HO, "c1")
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.RECORD_USED)
    assert d.problems[0].got == "agents.pay/c1/scheduler-1"
    assert bound_handoff(first.bindings[KEY]) == "agents.pay/c1/scheduler-1"


def test_a_copy_after_the_state_expired_is_a_spent_approval() -> None:
    """The whole thread ran; the conversation's state expired after its retention; the binding stays. The same HO
    re-produced byte for byte is refused, and so everything that replies to it."""
    w = pay_world(state_ttl_seconds=3600.0)
    for line in (HO, RB, AN, DN):
        assert w.send(line).forwarded
    w.states.clear()  # the retention passed: the conversation is forgotten
    w.now += 3600.0
    d = w.send(HO)
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.RECORD_USED)
    assert "spent by this very handoff" in d.problems[0].message
    for line in (RB, AN):
        assert w.send(line).reason is Reason.REFUSED_HANDOFF


def test_a_redelivery_whose_binding_landed_before_its_state_is_forwarded_once_bound() -> None:
    """A crash between the binding's write and the state's (a Redis Cluster writes them apart): the redelivered
    line is the same identity, bound moments ago, and is decided as it would have been, its binding kept as is."""
    w = pay_world()
    assert w.send(HO).verdict is Verdict.FORWARD
    held = w.bindings[KEY]
    w.states.clear()  # the state write never happened
    w.now += 5.0
    d = w.send(HO)
    assert d.verdict is Verdict.FORWARD, d.problems
    assert w.bindings[KEY] == held and w.state().handoffs["scheduler-1"].holder == held
    for line in ("RW1 UN payer-1 re=scheduler-1 p=pay from=payer to=scheduler why=BUSY",):
        assert w.send(line).forwarded
    assert KEY not in w.bindings  # released from the very value it holds


def test_another_line_under_the_same_id_after_the_state_expired_is_record_used() -> None:
    """Not a copy: another handoff (other bytes) under the forgotten id is just another handoff."""
    w = pay_world(state_ttl_seconds=3600.0)
    w.send(HO)
    w.states.clear()
    d = w.send(HO + " // again")
    assert d.reason is Reason.RECORD_USED and "bound to another handoff" in d.problems[0].message


def test_a_binding_written_by_an_earlier_release_is_released_as_written() -> None:
    """A handoff bound as ``<conversation>/<HO id>`` before bindings named their route is still released by UN."""
    w = pay_world()
    w.send(HO)
    fields = w.state().all_fields()
    entry = json.loads(fields["o:scheduler-1"])
    fields["o:scheduler-1"] = json.dumps({**entry, "bound": True})  # as an earlier release stored it
    w.states["c1"] = ConversationState.from_fields(fields)
    w.bindings[KEY] = "c1/scheduler-1"
    assert w.send("RW1 UN payer-1 re=scheduler-1 p=pay from=payer to=scheduler why=BUSY").forwarded
    assert KEY not in w.bindings


def test_a_second_statement_of_a_cleared_handoff_is_not_cleared() -> None:
    """A restarted act tool states the same handoff again (another readback); the sender, or a copy of its answer,
    clears it: one approval, one act, so only the first statement cleared stands. The same readback answered again
    is still allowed (a clearance whose first record was lost)."""
    w = pay_world()
    for line in (HO, RB, AN):
        assert w.send(line).verdict is Verdict.FORWARD
    again = w.send(AN.replace("scheduler-2", "scheduler-7"))
    assert again.verdict is Verdict.FORWARD and again.clears is not None
    rb2 = RB.replace("payer-1", "payer-9", 1)
    assert w.send(rb2).verdict is Verdict.FORWARD
    second = w.send(AN.replace("scheduler-2", "scheduler-8").replace("re=payer-1", "re=payer-9"))
    assert (second.verdict, second.reason) == (Verdict.DEAD_LETTER, Reason.CLEARANCE)
    assert codes(second) == ["clearance-second-statement"]


@pytest.mark.parametrize("key", ["c-1\x1b]0;pwned\x07", "c-1\nFAKE log line", "c\u202e1", "c\u20281", "c-\x00"])
def test_a_conversation_id_follows_the_input_rules_of_a_line(key: str) -> None:
    """A record key carrying a control, format or separator character is no conversation id (issue 30: a key would
    forge a log line or reorder a terminal where it is shown); nothing of the line is remembered."""
    w = pay_world()
    d = w.send(HO, key)
    assert (d.verdict, d.reason, codes(d)) == (Verdict.DEAD_LETTER, Reason.NO_CONVERSATION, ["conversation-invalid"])
    assert w.state(key).lines == {}
    assert w.send(HO, "c-1 with spaces and é").verdict is Verdict.FORWARD  # printable text is kept
    nbsp = w.send(HO, "c-1 with\u00a0NBSP")  # a space that is not one, as in a line
    assert (nbsp.reason, codes(nbsp)) == (Reason.NO_CONVERSATION, ["conversation-invalid"])


# ---------------------------------------------------------------- a state the decision cannot read


def test_an_unreadable_state_entry_raises_and_is_never_taken_for_an_absent_one() -> None:
    """A kept line the decision cannot read is a bug, never "not in the conversation": the decision raises (the
    processor makes the line an internal-error dead letter), rather than deciding the reply as if its handoff were
    unknown (held, then refused as unknown-handoff). (An entry that is not an entry at all cannot be held: the state
    refuses it when it is read, ``test_incremental_state``.)"""
    w = pay_world()
    w.send(HO)
    fields = w.state().all_fields()
    entry = json.loads(fields["l:scheduler-1"])
    fields["l:scheduler-1"] = json.dumps({**entry, "x": "RW1 not a line"})
    w.states["c1"] = ConversationState.from_fields(fields)
    with pytest.raises((KeyError, AssertionError)):
        w.send(RB)
