"""A conversation's timeline, from the state the daemon's own processor leaves: the thread's tree (a handoff, the
lines that answer it, the answers to those), verdicts, reasons and problems, every sensitive value masked unless
the reader may unmask, the text of a refused line taken from its dead letter."""

from __future__ import annotations

from gatekeeper.config import Route
from gatekeeper.console.letters import letter_of
from gatekeeper.console.timeline import build
from gatekeeper.processor import Line, Processor
from gatekeeper.store import MemoryStore
from tests.policy.world import NOW, RECORD, route
from tests.seed import ACK, CX, HO, RB

LOOKALIKE = "40-12-88/61102983"
ROUTE = Route(input="agents.pay", output="o", dead_letter="d", alerts="a", profile="pay")


async def _state(*lines: str) -> object:
    store = MemoryStore()
    await store.put_record(RECORD)
    proc = Processor(store, route())
    proc.epochs = await store.take_epochs("agents.pay", [0])
    for i, text in enumerate(lines):
        await proc.process([Line("c-1", text.encode(), partition=0)], NOW + i)
    return (await store.load("agents.pay", {"c-1": None}, ())).states["c-1"]


async def test_the_thread_is_a_tree_with_the_refused_readback_under_its_handoff() -> None:
    bad = RB.replace("40-12-88/61102938", LOOKALIKE)
    state = await _state(HO, bad, CX, ACK)
    letter = letter_of(
        0,
        7,
        int(NOW * 1000),
        bad.encode(),
        [("gk.conversation", b"c-1"), ("gk.reason", b"check-rb"), ("gk.notice.id", b"scheduler-900000001")],
        {"acct"},
    )
    t = build(ROUTE, "c-1", state, [letter], NOW + 10, sensitive={"acct"})
    assert [(r.type, r.id, r.depth, r.verdict) for r in t.rows] == [
        ("HO", "scheduler-1", 0, "forward"),
        ("RB", "payer-1", 1, "dead-letter"),
        ("CX", "scheduler-3", 1, "forward"),
        ("AN", "payer-3", 2, "forward"),
    ]
    rb = t.rows[1]
    assert rb.reason == "check-rb" and rb.letter == "0:7"
    assert rb.note == "refusal notice scheduler-900000001 sent to its sender"
    (p,) = [p for p in rb.problems if p["slot"] == "acct"]
    assert (p["tier"], p["expected"], p["got"]) == ("execution", "****2938", "****2983")
    shown = " ".join(str(x) for r in t.rows for x in (r.text, r.problems))
    assert "61102938" not in shown and "61102983" not in shown and "****2983" in (rb.text or "")
    (h,) = t.handoffs
    assert h["handoff"] == "scheduler-1" and h["status"] == "closed: cancel acknowledged"


async def test_an_unmasking_reader_sees_the_values_whole() -> None:
    state = await _state(HO, RB.replace("40-12-88/61102938", LOOKALIKE))
    t = build(ROUTE, "c-1", state, [], NOW + 10, sensitive={"acct"}, unmask=True)
    (p,) = [p for p in t.rows[1].problems if p["slot"] == "acct"]
    assert (p["expected"], p["got"]) == ("40-12-88/61102938", LOOKALIKE)
    assert "40-12-88/61102938" in (t.rows[0].text or "")
