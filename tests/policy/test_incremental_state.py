"""The incremental state gives what the whole state gave.

The Processor on the in-memory store loads only the entries a batch's lines name and writes only what changed
(``policy.state``); the reference here is the pure decision run line by line over whole states held in memory
(``tests.policy.world.World``, what the gatekeeper did when a conversation was one document). On generated
conversations, several at once, cut into batches anywhere:

- every line gets the same verdict, reason and problems;
- the stored entries end up exactly the whole state's entries (the header's open count included, kept by deltas);
- the exec bindings and the lifecycle indexes are the same;
- redelivering any suffix (a crash after a save, before the produce or the commit) gives the same verdicts again,
  as repeats, and changes nothing.
"""

from __future__ import annotations

import asyncio
import itertools
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gatekeeper.policy import Record
from gatekeeper.policy.lifecycle import index_entries
from gatekeeper.processor import Line, Processor
from gatekeeper.store import MemoryStore
from tests.policy.test_reprocessing import POOL
from tests.policy.world import NOW, RECORD, World, pay_world, route

EXP = "20261001T1000Z"
EXTRA = [
    "RW1 HO scheduler-11 p=pay from=scheduler to=desk item=doc:a ask=DRAFT exp=" + EXP,
    "RW1 HO scheduler-12 re=scheduler-11 p=pay from=scheduler to=desk item=doc:a ask=DRAFT",  # a re-send
    "RW1 DN desk-11 re=scheduler-12 p=pay from=desk to=scheduler item=doc:a out=OK",
    "RW1 UN desk-12 re=scheduler-11 p=pay from=desk to=scheduler why=BUSY",
    "RW1 CX scheduler-13 re=scheduler-11 p=pay from=scheduler to=desk item=doc:a why=REVOKED",
    "RW1 AN desk-13 re=scheduler-13 p=pay from=desk to=scheduler val=Y",
    "RW1 RB payer-1 re=scheduler-1 from=payer to=scheduler",  # a readback that fails
    "RW1 HO scheduler-14 re=payer-1 p=pay from=scheduler to=payer item=inv:MD-2026-057 ask=PAY rb=exec sup=marlow "
    "amt=5400.00 cur=GBP kind=GROSS acct=40-12-88/61102938 paid=20261002 ref=MD-2026-057 apref=FD-0929",  # re-issue
    "RW1 HO scheduler-15 p=pay from=scheduler to=payer ask=UNDO item=inv:MD-2026-057 ctx=payer-2",
    "RW1 ST scheduler-16 p=pay from=scheduler to=payer item=doc:z",
]
LINES = POOL + EXTRA


@st.composite
def conversations(draw: st.DrawFn) -> list[tuple[str, str]]:
    """Up to three conversations, each mostly in the protocol's order (the pool is written in it, so flows happen:
    a handoff, its readback, the clearance, the done report...), sometimes out of it, interleaved at random."""
    flows = []
    for conv in draw(st.sampled_from([["c1"], ["c1", "c2"], ["c1", "c2", "c3"]])):
        picked = draw(st.lists(st.integers(0, len(LINES) - 1), min_size=1, max_size=10))
        ordered = sorted(picked) if draw(st.integers(0, 3)) else picked
        flows.append([(conv, LINES[i]) for i in ordered])
    out: list[tuple[str, str]] = []
    while any(flows):
        live = [f for f in flows if f]
        out.append(draw(st.sampled_from(live)).pop(0) if len(live) > 1 else live[0].pop(0))
    return out


conversations_ = conversations()


def whole(lines: list[tuple[str, str]]) -> tuple[World, list[tuple[str, str | None, tuple[str, ...]]]]:
    w = pay_world(hold_seconds=0.0)
    out = []
    for conv, text in lines:
        d = w.send(text, conv)
        out.append((d.verdict.value, d.reason, tuple(p.code for p in d.problems)))
    return w, out


async def incremental(
    store: MemoryStore, lines: list[tuple[str, str]], cuts: list[int]
) -> list[tuple[str, str | None, tuple[str, ...]]]:
    p = Processor(store, route(hold_seconds=0.0))
    out = []
    bounds = sorted({0, len(lines), *(c for c in cuts if 0 < c < len(lines))})
    for a, b in itertools.pairwise(bounds):
        batch = [Line(conv, text.encode(), partition=0) for conv, text in lines[a:b]]
        for d in await p.process(batch, NOW):
            out.append((d.verdict.value, d.reason, tuple(pr.code for pr in d.problems)))
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=conversations_, cuts=st.one_of(st.just(list(range(25))), st.lists(st.integers(0, 24))), data=st.data())
def test_the_incremental_state_decides_and_stores_what_the_whole_state_did(
    lines: list[tuple[str, str]], cuts: list[int], data: st.DataObject
) -> None:
    w, want = whole(lines)
    store = MemoryStore()
    asyncio.run(store.put_record(RECORD))
    got = asyncio.run(incremental(store, lines, cuts))
    assert got == want
    for conv in {c for c, _ in lines}:
        stored = store.fields("agents.pay", conv)
        expected = w.states[conv].all_fields() if w.states[conv].lines else {}
        assert {k: v for k, v in stored.items() if k != "h"} == {k: v for k, v in expected.items() if k != "h"}
        if stored:
            head = json.loads(stored["h"])
            reference = w.states[conv]
            assert head["seq"] == reference.seq
            assert head["open"] == sum(1 for h in reference.handoffs if reference.is_open(h)), conv  # by deltas
    assert {k: v for k, v in store._bindings.items() if v is not None} == w.bindings
    # the lifecycle indexes: what the whole states say is open, and when it is due
    opened = {(c, ho) for c, st_ in w.states.items() for ho in index_entries(st_, c, 0)}
    assert {(m.conversation, m.ho) for _, m in asyncio.run(store.index("agents.pay", "open"))} == opened
    # a crash after a save: the suffix comes again
    start = data.draw(st.integers(0, len(lines)), label="redelivered from")
    before = {c: store.fields("agents.pay", c) for c in {c for c, _ in lines}}
    again = asyncio.run(incremental(store, lines[start:], cuts))
    assert again == want[start:]
    assert {c: store.fields("agents.pay", c) for c in before} == before


def test_the_compact_entries_read_back_and_the_earlier_form_still_reads() -> None:
    """An open handoff's entries are written compact (the record without the item and ask its entry already has, no
    null reason, times to the millisecond), and entries written before that read the same."""
    from gatekeeper.policy.state import HandoffEntry, LineEntry

    record = Record(item="inv:1", ask="PAY", values={"to": "payer", "amt": "10.00"}, resolved={"acct": "1"})
    ho = HandoffEntry(id="s-1", item="inv:1", ask="PAY", exec_ask=True, record=record, bound=True)
    written = ho.to_dict()
    assert "item" not in written["rec"] and "ask" not in written["rec"]
    assert HandoffEntry.from_dict("s-1", written) == ho
    earlier = {**written, "rec": record.to_dict()}  # the record whole, as written before
    assert HandoffEntry.from_dict("s-1", earlier) == ho
    other = HandoffEntry(id="s-2", item="inv:1", ask="PAY", exec_ask=True, record=Record("inv:9", "PAY", {}))
    assert HandoffEntry.from_dict("s-2", other.to_dict()) == other  # a record of another key keeps its own

    line = LineEntry(digest="ab", type="HO", verdict="forward", reason=None, at=1796148190.0666115, text="RW1 HO")
    d = line.to_dict()
    assert "r" not in d and d["at"] == 1796148190.067
    assert LineEntry.from_dict(d) == LineEntry("ab", "HO", "forward", None, 1796148190.067, text="RW1 HO")
    assert LineEntry.from_dict({**d, "r": None, "at": 1796148190.0666115}).at == 1796148190.0666115
    refused = LineEntry(digest="cd", type="RB", verdict="dead-letter", reason="check-rb", at=1.5)
    assert LineEntry.from_dict(refused.to_dict()) == refused


def test_a_handoff_entry_keeps_the_binding_value_it_holds_and_reads_an_earlier_release_s() -> None:
    from gatekeeper.policy.state import HandoffEntry

    holder = "agents.pay/c/1/scheduler-1#0123456789abcdef@1790845200"
    entry = HandoffEntry(id="scheduler-1", item="inv:1", ask="PAY", exec_ask=True, bound=True, holder=holder)
    stored = entry.to_dict()
    assert stored["bound"] == holder
    again = HandoffEntry.from_dict("scheduler-1", stored)
    assert (again.bound, again.holder) == (True, holder)
    earlier = HandoffEntry.from_dict("scheduler-1", {**stored, "bound": True})  # written before holders were kept
    assert (earlier.bound, earlier.holder) == (True, None)
    released = HandoffEntry.from_dict("scheduler-1", {k: v for k, v in stored.items() if k != "bound"})
    assert (released.bound, released.holder) == (False, None)
