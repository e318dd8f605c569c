"""The two-phase act tool: prepare states exactly what will run, commit runs only that, cancel abandons it."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import rwcore as rw
from gatekeeper.policy import line_digest
from gatekeeper.twophase import (
    AlreadyExecuted,
    Clearance,
    CommitRefused,
    ForgedClearance,
    Refused,
    Statement,
    TwoPhaseTool,
)
from gatekeeper.verdicts import Signer, Verifier
from tests.policy.world import AN, HO, NOW, epoch

ACCT = "40-12-88/61102938"
LOOKALIKE = "40-12-88/61102983"
CX = "RW1 CX scheduler-3 re=scheduler-1 p=pay from=scheduler to=payer item=inv:MD-2026-057 why=REVOKED"
CHECK_AT = "20261001T0901Z"  # rwcore's checks take the time the sender checks at


class Bank:
    def __init__(self, executed: Mapping[str, str] | None = None, fail: bool = False) -> None:
        self.calls: list[dict[str, str]] = []
        self.executed = executed
        self.fail = fail

    def __call__(self, values: Mapping[str, str]) -> Mapping[str, str] | None:
        self.calls.append(dict(values))
        if self.fail:
            raise TimeoutError("the bank did not answer; acct 40-12-88/61102938")
        return self.executed


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def tool(bank: Bank, clock: Clock | None = None, **kw: object) -> TwoPhaseTool:
    return TwoPhaseTool("payer", bank, profile="pay", clock=clock or Clock(NOW), **kw)  # type: ignore[arg-type]


def test_prepare_states_the_values_with_the_digest_and_an_expiry_and_runs_nothing() -> None:
    bank = Bank()
    st = tool(bank).prepare(HO)
    assert bank.calls == []
    msg = rw.parse_line(st.line, "pay").message
    assert msg is not None and msg.type == "RB" and msg.re == "scheduler-1" and msg.to == "scheduler"
    assert msg.slots["h"] == rw.digest(HO, "pay") and msg.slots["exp"] == st.exp == "20261001T0905Z"
    assert dict(st.values) == {
        "sup": "marlow",
        "amt": "5400.00",
        "cur": "GBP",
        "kind": "GROSS",
        "acct": ACCT,
        "paid": "20261002",
        "ref": "MD-2026-057",
        "apref": "FD-0929",
    }
    assert rw.check_rb_full(HO, st.line, "pay", now=CHECK_AT) == ([], [])


def test_commit_executes_the_frozen_values_once_and_reports_what_ran() -> None:
    bank = Bank()
    t = tool(bank, Clock(time.time()))  # check_dn checks the statement's exp= against the real time
    st = t.prepare(HO)
    dn = t.commit(st.token, confirmed=True)
    assert bank.calls == [dict(st.values)]
    assert rw.check_dn(HO, dn, "pay", rb_line=st.line) == ([], [])
    with pytest.raises(CommitRefused, match="spent"):
        t.commit(st.token, confirmed=True)
    assert len(bank.calls) == 1 and t.pending() == []


def test_the_done_report_is_built_from_what_the_executor_executed() -> None:
    t = tool(Bank(executed={"amt": "5100.00"}), Clock(time.time()))
    st = t.prepare(HO)
    dn = t.commit(st.token, confirmed=True)
    assert "amt=5100.00" in dn
    problems, _ = rw.check_dn(HO, dn, "pay", rb_line=st.line)
    assert problems == ["executed: amt mismatch: plan 5400.00 vs DN 5100.00"]


def test_a_resolved_lookalike_is_stated_so_the_check_can_stop_it() -> None:
    st = tool(Bank(), resolve=lambda ho: {"acct": LOOKALIKE}).prepare(HO)
    assert f"acct={LOOKALIKE}" in st.line
    problems, _ = rw.check_rb_full(HO, st.line, "pay", now=CHECK_AT)
    assert problems == [f"tier5 execution: acct mismatch: HO {ACCT} vs RB {LOOKALIKE}"]


def test_a_resolver_given_to_prepare_fills_what_the_handoff_does_not_carry() -> None:
    without_acct = HO.replace(f" acct={ACCT}", "")
    t = tool(Bank())
    with pytest.raises(Refused, match="cannot state acct"):
        t.prepare(without_acct)
    st = t.prepare(without_acct, resolve=lambda ho: {"acct": ACCT})
    assert st.values["acct"] == ACCT and f"acct={ACCT}" in st.line


def test_commit_refuses_without_confirmation_an_unknown_token_and_after_expiry() -> None:
    bank = Bank()
    clock = Clock(NOW)
    t = tool(bank, clock)
    st = t.prepare(HO)
    with pytest.raises(CommitRefused, match="no confirmation"):
        t.commit(st.token, confirmed=False)
    with pytest.raises(CommitRefused, match="unknown"):
        t.commit("not-a-token", confirmed=True)
    clock.now = epoch(st.exp)  # the minute the statement ends
    with pytest.raises(CommitRefused, match="expired"):
        t.commit(st.token, confirmed=True)
    assert bank.calls == []
    with pytest.raises(CommitRefused, match="unknown"):  # an expired token is dropped
        t.commit(st.token, confirmed=True)


def test_a_statement_never_outlives_its_handoff() -> None:
    st = tool(Bank()).prepare(HO.replace("rb=exec", "rb=exec exp=20261001T0902Z"))
    assert st.exp == "20261001T0902Z"


def test_cancel_abandons_what_was_prepared_and_acknowledges() -> None:
    bank = Bank()
    t = tool(bank)
    st = t.prepare(HO, conversation="c1")
    other = t.prepare(HO, conversation="c2")  # the same handoff id in another conversation is not touched
    ack = t.cancel(CX, conversation="c1")
    an = rw.parse_line(ack, "pay").message
    assert an is not None and (an.type, an.re, an.to, an.slots["val"]) == ("AN", "scheduler-3", "scheduler", "Y")
    assert an.tail == "statement abandoned; nothing executed"
    with pytest.raises(CommitRefused):
        t.commit(st.token, confirmed=True)
    assert [s.token for s in t.pending()] == [other.token]
    assert bank.calls == []
    # the flow closes: every handoff ended (the seed's --cancel example)
    assert rw.check_thread([HO, st.line, CX, ack], "pay", CHECK_AT)[0] == []


def test_a_cancel_after_the_act_answers_with_the_done_report() -> None:
    t = tool(Bank())
    st = t.prepare(HO)
    dn = t.commit(st.token, confirmed=True)
    with pytest.raises(AlreadyExecuted) as info:
        t.cancel(CX)
    assert info.value.done_report == dn


def test_an_executor_that_raises_spends_the_token_and_reports_a_failure_without_values() -> None:
    bank = Bank(fail=True)
    t = tool(bank)
    st = t.prepare(HO)
    fl = t.commit(st.token, confirmed=True)
    msg = rw.parse_line(fl, "pay").message
    assert msg is not None and (msg.type, msg.re, msg.slots["why"]) == ("FL", "scheduler-1", "ERR")
    assert "TimeoutError" in (msg.tail or "") and ACCT not in fl
    with pytest.raises(CommitRefused):
        t.commit(st.token, confirmed=True)
    assert len(bank.calls) == 1


def test_lines_the_tool_does_not_take_are_refused() -> None:
    t = tool(Bank())
    with pytest.raises(Refused, match="addressed to payer"):
        TwoPhaseTool("desk", Bank(), profile="pay").prepare(HO)
    with pytest.raises(Refused, match="expected a HO"):
        t.prepare(CX)
    with pytest.raises(Refused, match="expected a CX"):
        t.cancel(HO)
    with pytest.raises(Refused):
        t.prepare("RW1 HO nonsense")
    with pytest.raises(ValueError, match="ttl_seconds"):
        TwoPhaseTool("payer", Bank(), ttl_seconds=5)


def test_ids_come_from_the_agents_counter() -> None:
    ids = iter(["payer-7", "payer-8"])
    t = tool(Bank(), next_id=lambda: next(ids))
    st = t.prepare(HO)
    assert st.line.startswith("RW1 RB payer-7 ") and t.commit(st.token, True).startswith("RW1 DN payer-8 ")


# ---------------------------------------------------------------- signed clearances (gatekeeper.verdicts)

ROUTE = "agents.pay"
CONV = "c-17"
GK = Signer("gk-1", Ed25519PrivateKey.generate())
_KEEP = object()


def answer(st: Statement, line: str = AN) -> str:
    """The sender's answer ``line`` (the seed's AN to payer-1) addressed to this statement's readback."""
    return line.replace("re=payer-1", f"re={st.line.split()[2]}")


def record(
    line: str,
    st: Statement | None = None,
    *,
    conversation: str = CONV,
    signer: Signer | None = GK,
    verdict: str = "forward",
    repeat: bool = False,
    clears: object = _KEEP,
) -> Clearance:
    """The record a line arrives in from the output topic: as the gatekeeper forwards it (signed, naming the
    statement ``st`` it clears: its readback's and its handoff's digests), or not."""
    headers: list[tuple[str, bytes]] = [("gk.verdict", b"forward"), ("gk.original.topic", ROUTE.encode())]
    if clears is _KEEP:
        clears = None if st is None else (line_digest(st.line.encode()), line_digest(HO.encode()))
    if signer is not None:
        headers.append(
            signer.header(ROUTE, conversation, line.encode(), verdict, repeat=repeat, clears=clears)  # type: ignore[arg-type]
        )
    return Clearance(line.encode(), tuple(headers))


def keyed(bank: Bank, **kw: object) -> TwoPhaseTool:
    return tool(bank, Clock(time.time()), gatekeeper_keys={"gk-1": GK.public_key}, **kw)


def test_a_genuine_signed_clearance_acts() -> None:
    bank = Bank()
    t = keyed(bank, route=ROUTE)
    st = t.prepare(HO, conversation=CONV)
    dn = t.commit(st.token, True, clearance=record(answer(st), st))
    assert bank.calls == [dict(st.values)] and dn.startswith("RW1 DN ")


class _Rec:  # what aiokafka's ConsumerRecord has
    def __init__(self, c: Clearance) -> None:
        self.value, self.headers, self.key = c.value, list(c.headers), CONV.encode()


def test_clearance_of_a_consumed_record() -> None:
    bank = Bank()
    t = keyed(bank)
    st = t.prepare(HO, conversation=CONV)
    t.commit(st.token, True, clearance=Clearance.of(_Rec(record(answer(st), st))))
    assert len(bank.calls) == 1


@pytest.mark.parametrize(
    ("forged", "why"),
    [
        (lambda st: record(answer(st), st, signer=None), "no gk.sig"),  # produced straight to the output topic
        (  # another key
            lambda st: record(answer(st), st, signer=Signer("gk-1", Ed25519PrivateKey.generate())),
            "does not verify",
        ),
        (lambda st: record(answer(st), st, signer=Signer("gk-9", Ed25519PrivateKey.generate())), "not one of"),
        (lambda st: record(answer(st), st, conversation="c-18"), "does not verify"),  # another conversation
        (  # the signature of another line, on this one
            lambda st: Clearance(answer(st).encode(), record(answer(st).replace("proceed", "go"), st).headers),
            "does not verify",
        ),
        (lambda st: record(answer(st), st, verdict="dry-run"), "dry-run"),  # a dry-run route forwards everything
        (  # a dead letter: the gatekeeper refused it (and never signs one)
            lambda st: Clearance(
                answer(st).encode(), (("gk.reason", b"clearance"), ("gk.original.topic", ROUTE.encode()))
            ),
            "no gk.sig",
        ),
        (lambda st: record(answer(st).replace("val=Y", "val=N"), st), "not Y"),
        (lambda st: record(AN.replace("re=payer-1", "re=payer-7"), st), "is not scheduler's answer to payer-"),
        (
            lambda st: record(answer(st).replace("scheduler-2", "desk-2").replace("from=scheduler", "from=desk"), st),
            "from=desk",
        ),
        (lambda st: record(answer(st).replace("to=payer", "to=desk"), st), "to=desk"),
        (lambda st: record(HO, st), "not an AN"),
        # issue 28: a stale clearance re-signed as a repeat, and one that cleared another statement under these ids
        (lambda st: record(answer(st), st, repeat=True), "is a repeat"),
        (lambda st: record(answer(st), st, clears=None), "cleared another statement"),
        (
            lambda st: record(
                answer(st), st, clears=(line_digest(b"RW1 RB payer-1 another"), line_digest(HO.encode()))
            ),
            "cleared another statement",
        ),
    ],
)
def test_a_forged_clearance_is_refused_and_nothing_runs(forged: Any, why: str) -> None:
    bank = Bank()
    t = keyed(bank)
    st = t.prepare(HO, conversation=CONV)
    with pytest.raises(ForgedClearance, match=why) as info:
        t.commit(st.token, True, clearance=forged(st))
    assert isinstance(info.value, CommitRefused) and bank.calls == []
    # the token stays pending: the genuine clearance still acts, once
    t.commit(st.token, True, clearance=record(answer(st), st))
    assert len(bank.calls) == 1


def test_a_clearance_of_an_earlier_statement_does_not_clear_a_later_one_under_the_same_ids() -> None:
    """Issue 28's attack 4: a tool restarted with its ids reused states invoice B as payer-1; the attacker
    re-produces the clearance the gatekeeper signed for invoice A's payer-1. It names A's statement: refused."""
    ids = iter(["payer-1", "payer-2", "payer-1"])  # a counter that restarted (payer-2: invoice A's done report)
    bank = Bank()
    t = keyed(bank, next_id=lambda: next(ids))
    invoice_a = t.prepare(HO, conversation=CONV)
    stale = record(answer(invoice_a), invoice_a)  # what the gatekeeper forwarded for invoice A
    t.commit(invoice_a.token, True, clearance=stale)
    ho_b = HO.replace("amt=5400.00", "amt=7100.00")
    invoice_b = t.prepare(ho_b, conversation=CONV)
    assert invoice_b.line.split()[2] == invoice_a.line.split()[2] == "payer-1"
    with pytest.raises(ForgedClearance, match="cleared another statement"):
        t.commit(invoice_b.token, True, clearance=stale)
    assert len(bank.calls) == 1


def test_the_default_ids_never_repeat_across_restarts() -> None:
    clock = Clock(NOW)
    first = TwoPhaseTool("payer", Bank(), profile="pay", clock=clock)
    ids = [first.prepare(HO).line.split()[2] for _ in range(3)]
    assert len(set(ids)) == 3 and ids == sorted(ids, key=lambda i: int(i.split("-")[1]))
    assert all(i.startswith("payer-") and i[6:].isdigit() for i in ids)
    clock.now += 1.0  # a restart is later than the run before it
    later = TwoPhaseTool("payer", Bank(), profile="pay", clock=clock).prepare(HO).line.split()[2]
    assert int(later[6:]) > max(int(i[6:]) for i in ids)


def test_a_keyed_tool_needs_a_clearance_a_confirmation_and_a_conversation() -> None:
    bank = Bank()
    t = keyed(bank)
    with pytest.raises(Refused, match="needs the conversation"):
        t.prepare(HO)
    st = t.prepare(HO, conversation=CONV)
    with pytest.raises(ForgedClearance, match="no clearance"):
        t.commit(st.token, True)
    with pytest.raises(CommitRefused, match="no confirmation"):
        t.commit(st.token, False, clearance=record(answer(st), st))
    assert bank.calls == [] and [s.token for s in t.pending()] == [st.token]


def test_a_tool_bound_to_a_route_refuses_a_clearance_signed_for_another() -> None:
    bank = Bank()
    t = keyed(bank, route="agents.other")
    st = t.prepare(HO, conversation=CONV)
    with pytest.raises(ForgedClearance, match="does not verify"):
        t.commit(st.token, True, clearance=record(answer(st), st))
    assert bank.calls == []


def test_rotation_and_a_verifier_object() -> None:
    new = Signer("gk-2", Ed25519PrivateKey.generate())
    bank = Bank()
    v = Verifier({"gk-1": GK.public_key, "gk-2": new.public_key})
    t = tool(bank, Clock(time.time()), gatekeeper_keys=v)
    for s in (GK, new):
        st = t.prepare(HO, conversation=CONV)
        t.commit(st.token, True, clearance=record(answer(st), st, signer=s))
    assert len(bank.calls) == 2


def test_without_keys_a_clearance_is_optional_and_checked_as_a_line_only() -> None:
    bank = Bank()
    t = tool(bank, Clock(time.time()))
    st = t.prepare(HO)  # no conversation needed
    with pytest.raises(ForgedClearance, match="not Y"):
        t.commit(st.token, True, clearance=record(answer(st).replace("val=Y", "val=N"), signer=None))
    t.commit(st.token, True, clearance=record(answer(st), signer=None))  # unsigned: no key to check it with
    st2 = t.prepare(HO)
    t.commit(st2.token, True)  # as before
    assert len(bank.calls) == 2
