"""Who may say what (issue 29): the authority table, its rules at the decision, and the property that a line from an
agent outside its target's roles never changes the target's thread."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gatekeeper.policy import Decision, Reason, Record, Verdict
from gatekeeper.policy.authority import TABLE, markdown_rows
from tests.policy.world import ACK, AN, CX, DN, HO, RB, RECORD, World, core_world, pay_world, route

VERDICTS = Path(__file__).resolve().parents[2] / "docs" / "verdicts.md"
UN = "RW1 UN payer-5 re=scheduler-1 p=pay from=payer to=scheduler why=BUSY"
FL = "RW1 FL payer-5 re=scheduler-1 p=pay from=payer to=scheduler item=inv:MD-2026-057 why=ERR"


def codes(d: Decision) -> list[str]:
    return [p.code for p in d.problems]


def test_the_docs_show_the_table_as_it_is() -> None:
    """docs/verdicts.md holds the table as the code has it (the site's build regenerates it from the code too)."""
    text = VERDICTS.read_text()
    start, end = text.index("<!-- authority:start -->"), text.index("<!-- authority:end -->")
    block = [ln for ln in text[start:end].splitlines() if ln.startswith("| ") and not ln.startswith("| line")]
    assert block == markdown_rows()
    assert len({(r.line, r.target) for r in TABLE}) == len(TABLE)  # one row per line type and target


# ---------------------------------------------------------------- takeover by re-issue


def test_a_third_agent_cannot_take_a_handoff_over_by_re_issuing_it() -> None:
    w = pay_world()
    assert w.send(HO).verdict is Verdict.FORWARD
    takeover = (
        HO.replace("HO scheduler-1", "HO desk-4")
        .replace("from=scheduler", "from=desk")
        .replace(" p=pay", " re=scheduler-1 p=pay", 1)
    )
    d = w.send(takeover)
    assert (d.verdict, d.reason, codes(d)) == (Verdict.DEAD_LETTER, Reason.CHECK_THREAD, ["thread-reissue-wrong-agent"])
    assert d.problems[0].expected is not None and "scheduler->*" in d.problems[0].expected
    unrelated = "RW1 HO desk-5 re=scheduler-1 p=pay from=desk to=payer item=inv:MD-2026-057 ask=REVIEW"
    assert w.send(unrelated).reason is Reason.CHECK_THREAD
    entry = w.state().handoffs["scheduler-1"]
    assert entry.superseded_by is None and entry.bound  # the original is untouched, and still holds its approval
    for line in (RB, AN, DN):  # and the real thread goes on
        assert w.send(line).verdict is Verdict.FORWARD, line


def test_a_re_issue_by_the_sender_keeps_its_item_and_ask() -> None:
    w = pay_world()
    w.send(HO)
    w.send(RB.replace("61102938", "61102983"))  # a readback that fails
    other = "RW1 HO scheduler-4 re=payer-1 p=pay from=scheduler to=payer item=inv:OTHER ask=REVIEW"
    d = w.send(other)
    assert (d.reason, codes(d)) == (Reason.CHECK_THREAD, ["thread-reissue-other-item"])
    assert w.state().handoffs["scheduler-1"].superseded_by is None


def test_a_relay_by_the_receiver_supersedes_nothing() -> None:
    """Relays are decided as handoffs of their own (against the record: another receiver is check-ho there)."""
    w = pay_world()
    w.send(HO)
    relay = HO.replace("HO scheduler-1", "HO payer-7").replace("from=scheduler to=payer", "from=payer to=desk")
    d = w.send(relay.replace(" p=pay", " re=scheduler-1 p=pay", 1))
    assert d.reason is Reason.CHECK_HO  # to=desk differs from the record's to=payer
    assert w.state().handoffs["scheduler-1"].superseded_by is None


# ---------------------------------------------------------------- closes and answers from the wrong agent


@pytest.mark.parametrize(
    "line",
    [
        UN.replace("UN payer-5", "UN desk-5").replace("from=payer", "from=desk"),  # a third agent
        FL.replace("FL payer-5", "FL scheduler-5").replace("from=payer to=scheduler", "from=scheduler to=payer"),
        UN.replace("to=scheduler", "to=desk"),  # the receiver, to someone else
    ],
)
def test_a_close_from_anyone_but_the_receiver_to_the_sender_is_refused_and_closes_nothing(line: str) -> None:
    w = pay_world()
    w.send(HO)
    d = w.send(line)
    assert (d.verdict, d.reason, codes(d)) == (Verdict.DEAD_LETTER, Reason.CHECK_THREAD, ["thread-close-wrong-agent"])
    assert w.state().tracker.flags("scheduler-1") == (False, False)
    assert w.bindings  # the approval is still bound to the open handoff
    assert w.send(UN.replace("payer-5", "payer-6")).verdict is Verdict.FORWARD and not w.bindings


def test_a_done_report_from_anyone_else_is_delivered_flagged_and_closes_nothing() -> None:
    w = pay_world()
    for line in (HO, RB, AN):
        w.send(line)
    fake = DN.replace("DN payer-2", "DN desk-2").replace("from=payer", "from=desk")
    d = w.send(fake)
    assert (d.verdict, d.reason, codes(d)) == (Verdict.ALERT, Reason.CHECK_DN, ["thread-done-wrong-agent"])
    assert d.forwarded  # an act cannot be hidden
    assert w.state().tracker.flags("scheduler-1") == (False, False)
    assert w.send(DN).verdict is Verdict.FORWARD  # the real done report closes it, once


def test_an_answer_to_a_readback_comes_from_the_handoff_s_sender_only_whatever_its_value() -> None:
    w = pay_world()
    w.send(HO)
    w.send(RB)
    decline = "RW1 AN desk-3 re=payer-1 p=pay from=desk to=payer val=DECLINE"
    d = w.send(decline)
    assert (d.reason, codes(d)) == (Reason.CLEARANCE, ["clearance-route"])
    assert not w.state().readbacks["payer-1"].refused  # it blocks nothing
    assert w.send(AN).verdict is Verdict.FORWARD


def test_a_cancel_is_acknowledged_by_the_receiver_only() -> None:
    w = pay_world()
    w.send(HO)
    w.send(CX)
    bogus = ACK.replace("AN payer-3", "AN desk-3").replace("from=payer", "from=desk")
    assert codes(w.send(bogus)) == ["thread-ack-wrong-agent"]
    assert w.bindings  # still bound: nobody but the receiver frees it
    assert w.send(ACK).verdict is Verdict.FORWARD and not w.bindings


# ---------------------------------------------------------------- questions

AQ = "RW1 AQ payer-8 re=scheduler-1 p=pay from=payer to=scheduler need=ENUM opts=APPROVE+HOLD by=20261005"


def asked(w: World, aq: str = AQ) -> World:
    w.send(HO)
    assert w.send(aq).verdict is Verdict.FORWARD
    return w


def test_a_question_about_a_handoff_comes_from_one_of_its_parties_or_goes_to_a_human() -> None:
    w = pay_world()
    w.send(HO)
    stranger = AQ.replace("AQ payer-8", "AQ desk-8").replace("from=payer", "from=desk")
    assert codes(w.send(stranger)) == ["thread-question-wrong-agent"]
    to_human = stranger.replace("AQ desk-8", "AQ desk-9").replace("to=scheduler", "to=human")
    assert w.send(to_human).verdict is Verdict.FORWARD


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        ("RW1 AN desk-9 re=payer-8 p=pay from=desk to=payer val=APPROVE", "thread-answer-wrong-agent"),
        ("RW1 AN scheduler-9 re=payer-8 p=pay from=scheduler to=desk val=APPROVE", "thread-answer-wrong-agent"),
        ("RW1 AN scheduler-9 re=payer-8 p=pay from=scheduler to=payer val=DECLINE", "answer-out-of-need"),
    ],
)
def test_an_answer_comes_from_the_one_asked_to_the_asker_within_the_options(answer: str, code: str) -> None:
    w = asked(pay_world())
    d = w.send(answer)
    assert (d.verdict, d.reason, codes(d)) == (Verdict.DEAD_LETTER, Reason.CHECK_THREAD, [code])


@pytest.mark.parametrize(
    ("need", "good", "bad"),
    [
        ("need=YESNO", "val=Y", "val=MAYBE"),
        ("need=NUM", "val=12.50", "val=twelve"),
        ("need=DATE", "val=20261002", "val=20261302"),
        ("need=TEXT", "val=tail // plain, please", "val=plain"),
    ],
)
def test_an_answer_has_the_shape_its_question_needs(need: str, good: str, bad: str) -> None:
    aq = "RW1 AQ bob-1 from=bob to=ann item=gh:x#1 " + need
    w = core_world()
    assert w.send(aq).verdict is Verdict.FORWARD
    no = w.send(f"RW1 AN ann-1 re=bob-1 from=ann to=bob {bad}")
    assert codes(no) == ["answer-out-of-need"], no.problems
    assert w.send(f"RW1 AN ann-2 re=bob-1 from=ann to=bob {good}").verdict is Verdict.FORWARD


def test_a_question_is_answered_once_and_a_refusal_answers_it() -> None:
    w = asked(pay_world())
    answer = "RW1 AN scheduler-9 re=payer-8 p=pay from=scheduler to=payer val=HOLD"
    assert w.send(answer).verdict is Verdict.FORWARD
    again = w.send(answer.replace("scheduler-9", "scheduler-10").replace("HOLD", "APPROVE"))
    assert codes(again) == ["thread-question-answered"]
    w2 = asked(pay_world())
    assert w2.send("RW1 UN scheduler-9 re=payer-8 p=pay from=scheduler to=payer why=BUSY").verdict is Verdict.FORWARD
    assert codes(w2.send(answer.replace("scheduler-9", "scheduler-11"))) == ["thread-question-answered"]


# ---------------------------------------------------------------- separation of duties, cancels, acts past exp=


def test_an_irreversible_act_is_never_handed_to_oneself() -> None:
    w = pay_world()
    own = HO.replace("HO scheduler-1", "HO payer-1").replace("from=scheduler to=payer", "from=payer to=payer")
    d = w.send(own)
    assert (d.reason, codes(d)) == (Reason.CHECK_HO, ["ho-self"])


@pytest.mark.parametrize("why", ["", " why=NOCAP"])
def test_a_cancel_says_why_from_the_four_reasons(why: str) -> None:
    w = pay_world()
    w.send(HO)
    d = w.send(CX.replace(" why=REVOKED", why))
    assert (d.verdict, d.reason, codes(d)) == (Verdict.DEAD_LETTER, Reason.INVALID, ["cancel-why"])
    assert w.state().tracker.flags("scheduler-1") == (False, False)


def test_a_done_report_after_the_handoff_s_exp_is_flagged() -> None:
    w = pay_world()
    ho = HO.replace("rb=exec", "rb=exec exp=20261001T0930Z")
    for line in (ho, RB.replace("h=a7a82de76607 ", ""), AN):
        assert w.send(line).forwarded, line
    w.now += 3600
    d = w.send(DN)
    assert d.verdict is Verdict.ALERT and "acted-after-expiry" in codes(d)


def test_a_done_report_whose_readback_never_passed_is_flagged() -> None:
    w = pay_world()
    w.send(HO)
    d = w.send(DN)
    assert d.verdict is Verdict.ALERT and {"done-without-readback", "done-not-cleared"} <= set(codes(d))


# ---------------------------------------------------------------- the property

AGENTS = ("scheduler", "payer", "desk")
LINES = st.tuples(
    st.sampled_from(["RB", "AN", "ANN", "DN", "UN", "FL", "CX", "ACK", "AQ", "HO"]),
    st.sampled_from(AGENTS),
    st.sampled_from(AGENTS),
    st.integers(0, 6),
)


def _line(kind: str, sender: str, to: str, target: str, n: int) -> str:
    p = f"RW1 {{}} {sender}-{n} re={target} p=pay from={sender} to={to}"
    return {
        "RB": RB.replace("RB payer-1", f"RB {sender}-{n}")
        .replace("from=payer to=scheduler", f"from={sender} to={to}")
        .replace("re=scheduler-1", f"re={target}"),
        "AN": p.format("AN") + " val=Y",
        "ANN": p.format("AN") + " val=N",
        "DN": p.format("DN") + " item=inv:MD-2026-057 out=OK",
        "UN": p.format("UN") + " why=BUSY",
        "FL": p.format("FL") + " item=inv:MD-2026-057 why=ERR",
        "CX": p.format("CX") + " item=inv:MD-2026-057 why=REVOKED",
        "ACK": p.format("AN") + " val=Y",
        "AQ": p.format("AQ") + " need=YESNO",
        "HO": HO.replace("HO scheduler-1", f"HO {sender}-{n}")
        .replace("from=scheduler", f"from={sender}")
        .replace(" p=pay", f" re={target} p=pay", 1),
    }[kind]


def _thread(w: World) -> object:
    s = w.state()
    return (
        copy.deepcopy(s.handoffs),
        copy.deepcopy(s.readbacks),
        {k: s.tracker.handoff_state(k) for k in s.handoffs},
        dict(w.bindings),
    )


REFUSAL_CODES = {r.refusal.code for r in TABLE}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=st.lists(LINES, max_size=20))
def test_a_line_from_outside_its_target_s_roles_never_changes_the_thread(
    script: list[tuple[str, str, str, int]],
) -> None:
    w = pay_world()
    for line in (HO, RB, CX):  # a handoff, its readback and a cancel to aim at
        w.send(line)
    targets = ["scheduler-1", "payer-1", "scheduler-3"]
    for i, (kind, sender, to, t) in enumerate(script):
        if sender == to:
            continue
        target = targets[t % len(targets)]
        before = _thread(w)
        d = w.send(_line(kind, sender, to, target, 100 + i))
        if set(codes(d)) & REFUSAL_CODES:
            assert _thread(w) == before, (kind, sender, to, target, d.problems)
        if d.forwarded and d.message is not None:
            targets.append(d.message.id)


# ---------------------------------------------------------------- relays (spec 5.3)

RELAYED_RECORD = Record(RECORD.item, RECORD.ask, {**RECORD.values, "to": "coordinator"})
HO_C = HO.replace("to=payer", "to=coordinator")
RB_C = (
    RB.replace("from=payer to=scheduler", "from=coordinator to=scheduler")
    .replace("RB payer-1", "RB coordinator-1")
    .replace(" h=a7a82de76607", "")
)
AN_C = AN.replace("re=payer-1", "re=coordinator-1").replace("to=payer", "to=coordinator")
RELAY = (
    HO.replace("HO scheduler-1", "HO coordinator-2")
    .replace("from=scheduler to=payer", "from=coordinator to=payer")
    .replace(" p=pay", " re=scheduler-1 p=pay", 1)
)


def relay_world() -> World:
    w = World().add(RELAYED_RECORD)
    for line in (HO_C, RB_C, AN_C):
        assert w.send(line).verdict is Verdict.FORWARD, line
    return w


def test_a_receiver_relays_the_handoff_it_received_unchanged_once_checked_and_cleared() -> None:
    w = relay_world()
    d = w.send(RELAY)
    assert d.verdict is Verdict.FORWARD, d.problems
    relay = w.state().handoffs["coordinator-2"]
    assert relay.relay_of == "scheduler-1" and not relay.bound
    assert w.state().handoffs["scheduler-1"].relayed_by == "coordinator-2"
    rb = RB.replace("RB payer-1", "RB payer-3").replace("re=scheduler-1", "re=coordinator-2")
    rb = rb.replace("to=scheduler", "to=coordinator").replace(" h=a7a82de76607", "")
    assert w.send(rb).verdict is Verdict.FORWARD
    an = "RW1 AN coordinator-4 re=payer-3 p=pay from=coordinator to=payer val=Y"
    assert w.send(an).verdict is Verdict.FORWARD
    dn = DN.replace("DN payer-2", "DN payer-5").replace("re=scheduler-1", "re=coordinator-2")
    assert w.send(dn.replace("to=scheduler", "to=coordinator")).verdict is Verdict.FORWARD
    assert w.state().tracker.flags("scheduler-1") == (False, False)  # the original stays open until closed


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (lambda s: s.replace("amt=5400.00", "amt=5400.01"), "record-mismatch"),
        (lambda s: s.replace("40-12-88/61102938", "40-12-88/61102983"), "record-mismatch"),
    ],
)
def test_a_relay_that_alters_a_value_is_refused(change: object, code: str) -> None:
    w = relay_world()
    d = w.send(change(RELAY))  # type: ignore[operator]
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.CHECK_HO)
    assert code in codes(d)


def test_a_relay_before_the_readback_passed_or_was_cleared_and_a_second_relay_are_refused() -> None:
    w = World().add(RELAYED_RECORD)
    w.send(HO_C)
    assert codes(w.send(RELAY)) == ["relay-before-readback"]
    w.send(RB_C)
    assert codes(w.send(RELAY.replace("coordinator-2", "coordinator-5"))) == ["relay-not-cleared"]
    w.send(AN_C)
    assert w.send(RELAY.replace("coordinator-2", "coordinator-6")).verdict is Verdict.FORWARD
    again = w.send(RELAY.replace("coordinator-2", "coordinator-7"))
    assert (again.reason, codes(again)) == (Reason.RECORD_USED, ["record-used"])


# ---------------------------------------------------------------- a comprehension readback nobody can verify

DRAFT = Record("doc:1", "DRAFT", {"to": "desk", "item": "doc:1", "ask": "DRAFT"})
HO_ACC = "RW1 HO scheduler-1 from=scheduler to=desk item=doc:1 ask=DRAFT rb=acc p=pay"
RB_ACC = "RW1 RB desk-1 re=scheduler-1 from=desk to=scheduler item=doc:1 ask=DRAFT acc=len:120w p=pay"


def test_a_comprehension_readback_without_withheld_criteria_is_forwarded_with_a_note_or_refused() -> None:
    w = World().add(DRAFT)
    w.send(HO_ACC)
    d = w.send(RB_ACC)
    assert d.verdict is Verdict.FORWARD and "comprehension-unverified" in [n.code for n in d.notes]
    strict = World(policy=route(refuse_unverified_comprehension=True)).add(DRAFT)
    strict.send(HO_ACC)
    refused = strict.send(RB_ACC)
    assert (refused.reason, codes(refused)) == (Reason.CHECK_RB, ["comprehension-unverified"])
    with_criteria = World().add(Record("doc:1", "DRAFT", DRAFT.values, expect_acc=("len:120w",)))
    with_criteria.send(HO_ACC)
    checked = with_criteria.send(RB_ACC)
    assert checked.verdict is Verdict.FORWARD and "comprehension-unverified" not in [n.code for n in checked.notes]


def test_a_relay_of_an_irreversible_act_to_oneself_is_refused() -> None:
    w = relay_world()
    own = RELAY.replace("to=payer", "to=coordinator")
    assert codes(w.send(own)) == ["ho-self"]
