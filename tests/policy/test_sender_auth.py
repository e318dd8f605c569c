"""Sender authentication in the decision: on a route with sender_auth, a line needs the proof (``SenderProof``) that
its from= agent's key signed it; it is dead-lettered sender-auth otherwise, and nothing of it is remembered."""

from __future__ import annotations

from gatekeeper.policy import (
    CHECK_OF_REASON,
    ConversationState,
    Decision,
    Overlay,
    Reason,
    SenderProof,
    Verdict,
    apply,
    decide,
)
from tests.policy.world import AN, HO, RB, World, pay_world

SCHEDULER = SenderProof(agent="scheduler", key_id="scheduler-1")
PAYER = SenderProof(agent="payer", key_id="payer-1")


def send(w: World, line: str, sender: SenderProof | None, conversation: str = "c1") -> Decision:
    state = w.states.setdefault(conversation, ConversationState())
    overlay = Overlay(records=w.records, loaded_bindings=dict(w.bindings))
    d = decide(line.encode(), conversation, state, overlay, w.policy, w.now, sender=sender)
    apply(state, d, overlay)
    for change in overlay.changes():
        if change.after is not None:
            w.bindings[change.key] = change.after
    return d


def test_the_reason_is_a_gate_check() -> None:
    assert Reason.SENDER_AUTH.value == "sender-auth" and CHECK_OF_REASON[Reason.SENDER_AUTH] == "gate"


def test_each_agent_signing_its_own_lines_is_forwarded() -> None:
    w = pay_world(sender_auth=True)
    assert send(w, HO, SCHEDULER).verdict is Verdict.FORWARD
    assert send(w, RB, PAYER).verdict is Verdict.FORWARD
    assert send(w, AN, SCHEDULER).verdict is Verdict.FORWARD


def test_a_clearance_signed_by_the_payer_as_the_scheduler_is_refused() -> None:
    w = pay_world(sender_auth=True)
    send(w, HO, SCHEDULER)
    send(w, RB, PAYER)
    d = send(w, AN, PAYER)
    assert d.verdict is Verdict.DEAD_LETTER and d.reason is Reason.SENDER_AUTH and d.check == "gate"
    (p,) = d.problems
    assert p.code == "sender-auth-wrong-agent" and "from=scheduler" in p.message and "agent payer" in p.message
    assert "scheduler-2" not in w.state().lines  # not remembered: the real scheduler-2 still passes
    assert send(w, AN, SCHEDULER).verdict is Verdict.FORWARD


def test_a_failed_verification_names_what_failed() -> None:
    w = pay_world(sender_auth=True)
    proof = SenderProof(failure="sender-auth-unknown-key", detail="key id x-1 is not a configured sender key")
    d = send(w, HO, proof)
    assert d.reason is Reason.SENDER_AUTH
    assert d.problems[0].code == "sender-auth-unknown-key" and "x-1" in d.problems[0].message
    assert "scheduler-1" not in w.state().lines


def test_no_proof_at_all_fails_closed() -> None:
    d = send(pay_world(sender_auth=True), HO, None)
    assert d.reason is Reason.SENDER_AUTH and d.problems[0].code == "sender-auth-unverified"


def test_an_unparseable_line_is_still_invalid_and_leaves_no_tombstone_unsigned() -> None:
    w = pay_world(sender_auth=True)
    broken = "RW1 HO scheduler-1 p=pay from=scheduler to=payer"
    d = send(w, broken, None)
    assert d.reason is Reason.INVALID
    assert "scheduler-1" not in w.state().lines  # an unsigned line cannot squat the id
    assert send(w, broken, SCHEDULER).reason is Reason.INVALID
    assert "scheduler-1" in w.state().lines  # signed by its sender: the tombstone refuses replies, as before


def test_sender_binding_comes_first() -> None:
    w = pay_world(sender_auth=True, senders=frozenset({"payer"}))
    assert send(w, HO, SCHEDULER).reason is Reason.SENDER_BINDING


def test_a_repeated_line_gets_the_same_verdict() -> None:
    w = pay_world(sender_auth=True)
    first = send(w, HO, SCHEDULER)
    again = send(w, HO, SCHEDULER)
    assert again.verdict is first.verdict and again.repeated
    refused = send(w, RB, SCHEDULER)
    assert refused.reason is Reason.SENDER_AUTH
    assert send(w, RB, SCHEDULER).reason is Reason.SENDER_AUTH


def test_a_route_without_sender_auth_ignores_the_proof() -> None:
    w = pay_world()
    assert send(w, HO, None).verdict is Verdict.FORWARD
    assert send(w, RB, SCHEDULER).verdict is Verdict.FORWARD  # signed by someone else: not this route's concern


def test_an_internal_error_leaves_a_tombstone_only_for_a_signed_line() -> None:
    from gatekeeper.policy.decide import internal_error

    w = pay_world(sender_auth=True)
    unsigned = internal_error(HO.encode(), w.state(), w.policy, w.now, RuntimeError("bug"))
    assert unsigned.reason is Reason.INTERNAL_ERROR and unsigned.effects == ()
    forged = internal_error(HO.encode(), w.state(), w.policy, w.now, RuntimeError("bug"), sender=PAYER)
    assert forged.effects == ()
    signed = internal_error(HO.encode(), w.state(), w.policy, w.now, RuntimeError("bug"), sender=SCHEDULER)
    assert len(signed.effects) == 1
