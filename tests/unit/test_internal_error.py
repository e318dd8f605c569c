"""No line is fatal: a line whose deciding raises is dead-lettered ``internal-error`` and the batch goes on.

The bugs are injected (``decide`` or ``apply`` made to raise on a marked line, and the native batch, which does both
for every line at once, made to raise on a batch that holds one), so these tests keep proving the guard whatever the
real bugs of the day are; ``tests/policy/test_no_line_fatal.py`` hunts for the real ones.
"""

from __future__ import annotations

import importlib
import json
import logging
from typing import Any

import pytest

import gatekeeper.processor as processor_module
from gatekeeper.consumers.outcomes import Source, Targets, build
from gatekeeper.policy import ConversationState, Decision, Overlay, Reason, Verdict
from gatekeeper.policy import apply as real_apply
from gatekeeper.policy import decide as real_decide
from gatekeeper.policy.decide import decide_batch as real_decide_batch
from gatekeeper.processor import Line, Processor
from gatekeeper.store import MemoryStore
from tests.bugs import batch_raising_on
from tests.policy.world import NOW, RECORD, route
from tests.seed import AN, DN, HO, RB

ST = (
    "RW1 ST scheduler-7 p=pay from=scheduler to=payer item=inv:MD-2026-057 src=email:4 amt=5400.00 cur=GBP kind=NET "
    "acct=40-12-88/61102938"
)
POISON = ST + " // POISON"
TARGETS = Targets("agents.pay.checked", "agents.pay.dlq", "agents.pay.alerts", "agents.pay")


async def processor() -> Processor:
    store = MemoryStore()
    await store.put_record(RECORD)
    return Processor(store, route())


def lines(*texts: str, conversation: str = "c1", partition: int | None = 0) -> list[Line]:
    return [Line(conversation, t.encode(), partition=partition) for t in texts]


def decide_raising_on_poison(raw: bytes, *args: Any, **kw: Any) -> Decision:
    if b"POISON" in raw:
        raise OverflowError("date value out of range, near acct=40-12-88/61102938")
    return real_decide(raw, *args, **kw)


def poisoned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deciding a POISON line raises, natively and in Python."""
    monkeypatch.setattr(processor_module, "decide_batch", batch_raising_on(b"POISON"))
    monkeypatch.setattr(processor_module, "decide", decide_raising_on_poison)


def apply_raising_on_poison(state: ConversationState, decision: Decision, overlay: Overlay) -> set[str]:
    touched = real_apply(state, decision, overlay)  # half the work is done when it raises: the guard must undo it
    if decision.message is not None and decision.message.id == "scheduler-7" and decision.reason is None:
        raise KeyError("scheduler-7")
    return touched


async def test_a_line_whose_decision_raises_is_dead_lettered_and_the_batch_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    poisoned(monkeypatch)
    p = await processor()
    with caplog.at_level(logging.ERROR, logger="gatekeeper.processor"):
        decisions = await p.process(lines(HO, POISON, RB, AN, DN), NOW)
    verdicts = [(d.verdict, d.reason) for d in decisions]
    assert verdicts[1] == (Verdict.DEAD_LETTER, Reason.INTERNAL_ERROR)
    assert [v for i, v in enumerate(verdicts) if i != 1] == [(Verdict.FORWARD, None)] * 4
    bad = decisions[1]
    assert bad.alerts and bad.problems[0].code == "internal-error" and bad.problems[0].got == "OverflowError"
    # the stack trace is logged once, with the line masked
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is not None
    assert "40-12-88/61102938" not in errors[0].__dict__["line"]


async def test_the_guarded_batch_equals_the_unguarded_one_on_every_other_line(monkeypatch: pytest.MonkeyPatch) -> None:
    clean = await (await processor()).process(lines(HO, RB, AN, DN), NOW)
    poisoned(monkeypatch)
    guarded = await (await processor()).process(lines(HO, POISON, RB, AN, DN), NOW)
    del guarded[1]
    assert [(d.verdict, d.reason, d.problems) for d in guarded] == [(d.verdict, d.reason, d.problems) for d in clean]


async def test_an_apply_that_raises_halfway_is_rolled_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processor_module, "decide_batch", batch_raising_on(b"scheduler-7"))
    monkeypatch.setattr(processor_module, "apply", apply_raising_on_poison)
    p = await processor()
    decisions = await p.process(lines(HO, ST, RB), NOW)
    assert [d.reason for d in decisions] == [None, Reason.INTERNAL_ERROR, None]
    loaded = await p.store.load("agents.pay", {"c1": None}, ())
    state = loaded.states["c1"]
    # the tombstone, not the half-applied forward: the thread saw HO and RB only
    assert state.lines["scheduler-7"].reason == "internal-error"
    assert state.lines["scheduler-7"].verdict == "dead-letter"
    assert state.seq == 2


async def test_a_redelivered_internal_error_repeats_without_deciding_again(monkeypatch: pytest.MonkeyPatch) -> None:
    poisoned(monkeypatch)
    p = await processor()
    await p.process(lines(HO, POISON), NOW)
    # the bug is fixed meanwhile: same verdict anyway
    monkeypatch.setattr(processor_module, "decide", real_decide)
    monkeypatch.setattr(processor_module, "decide_batch", real_decide_batch)
    (again,) = await p.process(lines(POISON), NOW + 60)
    assert again.repeated and again.reason is Reason.INTERNAL_ERROR
    # a reply to it is refused: fail closed
    reply = "RW1 AN payer-5 re=scheduler-7 p=pay from=payer to=scheduler val=Y"
    (d,) = await p.process(lines(reply), NOW + 60)
    assert d.reason is Reason.REFUSED_HANDOFF
    # a replay decides it again, now that it no longer raises
    (replayed,) = await p.process([Line("c1", POISON.encode(), replay=True, partition=0)], NOW + 60)
    assert replayed.verdict is Verdict.FORWARD


async def test_a_line_the_gate_itself_raises_on_is_dead_lettered(monkeypatch: pytest.MonkeyPatch) -> None:
    def prepare_raising(raw: bytes, route: Any) -> Any:
        raise RecursionError("the parser looped")

    def prepare_batch_raising(*args: Any) -> Any:
        raise RecursionError("the parser looped")

    monkeypatch.setattr(processor_module, "prepare_batch", prepare_batch_raising)
    monkeypatch.setattr(processor_module, "prepare", prepare_raising)
    monkeypatch.setattr(importlib.import_module("gatekeeper.policy.decide"), "prepare", prepare_raising)
    p = await processor()
    (d,) = await p.process(lines(HO), NOW)
    assert d.reason is Reason.INTERNAL_ERROR and d.message is None and d.effects == ()


def test_the_dead_letter_names_the_error_masked_without_a_stack_trace() -> None:
    from gatekeeper.policy.decide import internal_error

    exc = ValueError("invalid literal: 40-12-88/61102938 " + "x" * 500)
    d = internal_error(POISON.encode(), ConversationState(), route(), NOW, exc)
    src = Source("agents.pay", 3, 17, POISON.encode(), key=b"c1", timestamp=1)
    dl, alert = build(d, src, TARGETS, conversation="c1", sensitive={"acct"}, now=NOW)
    h = {k: v.decode() for k, v in dl.headers}
    assert h["gk.reason"] == "internal-error" and h["gk.error.class"] == "ValueError"
    assert "40-12-88/61102938" not in h["gk.error.message"] and "****2938" in h["gk.error.message"]
    assert len(h["gk.error.message"]) < 320 and "Traceback" not in json.dumps(h)
    assert dl.value == POISON.encode()  # the record itself is unchanged
    doc = json.loads(alert.value)
    assert doc["alert"] == "internal-error" and "40-12-88/61102938" not in alert.value.decode()


def test_an_outcome_that_cannot_be_built_is_a_bare_dead_letter() -> None:
    from gatekeeper.consumers.outcomes import OutcomeKind, bare_dead_letter

    src = Source("agents.pay", 3, 17, POISON.encode(), key=b"c1", timestamp=1)
    o = bare_dead_letter(src, TARGETS, "KeyError: 'gk.x'", NOW)
    h = {k: v.decode() for k, v in o.headers}
    assert (o.kind, o.topic, o.key, o.value) == (OutcomeKind.DEAD_LETTER, "agents.pay.dlq", b"c1", POISON.encode())
    assert (h["gk.reason"], h["gk.error.class"], h["gk.original.offset"]) == ("internal-error", "KeyError", "17")
    assert h["gk.error.message"] == "building the outcome failed: 'gk.x'"


def test_a_clock_with_no_date_still_gets_the_bare_dead_letter() -> None:
    """Building a line's records fails when its decision time has no date; the bare dead letter that answers for
    it must not fail the same way (the time is written as the epoch it is)."""
    from gatekeeper.consumers.outcomes import OutcomeKind, bare_dead_letter
    from gatekeeper.policy import Decision, Verdict

    src = Source("agents.pay", 0, 5, b"RW1 HO h1", key=b"c1")
    targets = Targets("agents.pay.out", "agents.pay.dlq", "agents.pay.alerts", "agents.pay")
    with pytest.raises(ValueError, match="no date"):
        build(Decision(Verdict.FORWARD, None, decided_at=1e20), src, targets, conversation="c1", now=1e20)
    o = bare_dead_letter(src, targets, "ValueError: no date and time for the epoch 1e+20", 1e20)
    assert o.kind is OutcomeKind.DEAD_LETTER
    assert o.header("gk.decided.at") == b"1e+20"


def test_an_exception_whose_message_raises_is_still_reported() -> None:
    from gatekeeper.policy.decide import error_text

    class Broken(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no message")

    assert error_text(Broken()) == "Broken: (its message cannot be shown)"
    assert error_text(ValueError("")) == "ValueError"
    assert error_text(ValueError("a\nb  c")) == "ValueError: a b c"
