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

import msgspec
import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gatekeeper.policy import ConversationState, Record
from gatekeeper.policy.lifecycle import index_entries
from gatekeeper.policy.state import HandoffEntry, LineEntry
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


def _stored(name: str, entry: dict[str, object]) -> tuple[ConversationState, dict[str, object]]:
    """A state holding one stored entry, and that entry as the state writes it back."""
    state = ConversationState.from_fields({name: json.dumps(entry, separators=(",", ":"))})
    written = state.field(name)
    assert written is not None
    return state, json.loads(written)


def test_the_compact_entries_read_back_and_the_earlier_form_still_reads() -> None:
    """An open handoff's entries are written compact (the record without the item and ask its entry already has, no
    null reason, times to the millisecond), and entries written before that read the same."""
    record = Record(item="inv:1", ask="PAY", values={"to": "payer", "amt": "10.00"}, resolved={"acct": "1"})
    ho = HandoffEntry(id="s-1", item="inv:1", ask="PAY", exec_ask=True, record=record, bound=True)
    compact = {"item": "inv:1", "ask": "PAY", "exec": True, "rec": {"values": record.values, "resolved": {"acct": "1"}}}
    state, written = _stored("o:s-1", {**compact, "bound": True})
    assert written == {**compact, "bound": True} and state.handoffs["s-1"] == ho
    earlier = {**compact, "bound": True, "rec": {**record.to_dict(), "sig": "v1 k s"}}  # the record whole, as before
    state, written = _stored("o:s-1", earlier)
    assert written == {**compact, "bound": True}  # written back compact: no signature, no item and ask twice
    assert state.handoffs["s-1"] == msgspec.structs.replace(
        ho, record=msgspec.structs.replace(record, signature="v1 k s")
    )
    other = {"item": "inv:1", "ask": "PAY", "exec": True, "rec": {"item": "inv:9", "ask": "PAY", "values": {}}}
    state, written = _stored("o:s-2", other)
    assert written == other and state.handoffs["s-2"].record == Record("inv:9", "PAY", {})  # another key: its own

    state, written = _stored("l:ab", {"d": "ab", "t": "HO", "v": "forward", "r": None, "at": 1796148190.0666115})
    assert written == {"d": "ab", "t": "HO", "v": "forward", "at": 1796148190.067}  # no null reason, milliseconds
    assert state.lines["ab"] == LineEntry("ab", "HO", "forward", None, 1796148190.0666115)  # read as written
    problem = {"code": "x", "tier": "record", "slot": None, "expected": None, "got": None, "message": "m"}
    refused = {"d": "cd", "t": "RB", "v": "dead-letter", "at": 1.5, "r": "check-rb", "p": [problem], "x": "RW1 RB"}
    state, written = _stored("l:cd", refused)
    assert written == refused and state.lines["cd"].problems[0].code == "x"


def test_a_handoff_entry_keeps_the_binding_value_it_holds_and_reads_an_earlier_release_s() -> None:
    holder = "agents.pay/c/1/scheduler-1#0123456789abcdef@1790845200"
    entry = {"item": "inv:1", "ask": "PAY", "exec": True, "bound": holder}
    state, written = _stored("o:scheduler-1", entry)
    assert written == entry and (state.handoffs["scheduler-1"].bound, state.handoffs["scheduler-1"].holder) == (
        True,
        holder,
    )
    state, written = _stored("o:scheduler-1", {**entry, "bound": True})  # written before holders were kept
    assert written["bound"] is True and (state.handoffs["scheduler-1"].bound, state.handoffs["scheduler-1"].holder) == (
        True,
        None,
    )
    state, written = _stored("o:scheduler-1", {k: v for k, v in entry.items() if k != "bound"})
    assert "bound" not in written and not state.handoffs["scheduler-1"].bound


def test_an_entry_that_does_not_read_is_refused_when_the_state_is_read() -> None:
    """A stored entry the state cannot read (not JSON, a field missing, another version) is an error when the
    conversation is loaded (the store reports the state unreadable), never an entry taken as absent."""
    for fields in (
        {"o:scheduler-1": "{not json"},
        {"l:scheduler-1": '{"t":"HO","v":"forward","at":1.0}'},
        {"t:scheduler-1": "[1]"},
        {"h": '{"v":3,"seq":0,"open":0}'},
    ):
        with pytest.raises(ValueError):
            ConversationState.from_fields(fields)


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    values=st.dictionaries(st.text(max_size=6), _JSON_VALUES, max_size=4),
    at=st.floats(allow_nan=False, allow_infinity=False),
    text=st.text(max_size=20),
)
@example(values={}, at=2.0**49 + 0.25, text="")  # two shortest forms equally near: the even digit, as orjson writes
def test_the_native_entries_are_written_as_orjson_wrote_them(values: dict[str, object], at: float, text: str) -> None:
    """The state's entries are written natively in the bytes the Python codec wrote with orjson (times, any value
    a record holds, any text): an entry stored by an earlier release without pointers reads and writes back
    unchanged (one with pointers now opens with them: ``test_an_entry_opens_with_the_ids_it_points_at``)."""
    entry = {"item": text, "ask": "PAY", "exec": True, "rec": {"values": values}, "gkcx": ["cx-1", "EXPIRED", at]}
    raw = orjson.dumps(entry).decode()
    assert ConversationState.from_fields({"o:x": raw}).field("o:x") == raw
    line = {"d": "ab", "t": "HO", "v": "forward", "at": round(at, 3), "x": text}
    raw = orjson.dumps(line).decode()
    assert ConversationState.from_fields({"l:x": raw}).field("l:x") == raw


@given(
    re=st.one_of(st.none(), st.text(max_size=8)),
    cleared=st.one_of(st.none(), st.text(max_size=8)),
    passed=st.one_of(st.none(), st.text(max_size=8)),
)
def test_an_entry_opens_with_the_ids_it_points_at(re: str | None, cleared: str | None, passed: str | None) -> None:
    """What the Redis load reads off an entry's opening (``redis_store._LOAD_FN``'s ``pointers``): a line opens with
    its ``re``, a handoff with its ``cleared_by`` then its ``passed_rb`` (those it has), the rest in their order."""
    line = {"d": "ab", "t": "RB", "v": "forward", "at": 1.5} | ({} if re is None else {"re": re})
    written = ConversationState.from_fields({"l:x": orjson.dumps(line).decode()}).field("l:x")
    assert written is not None and orjson.loads(written) == line
    assert list(orjson.loads(written))[:2] == (["re", "d"] if re is not None else ["d", "t"])
    handoff: dict[str, object] = {"item": "inv:1", "ask": "PAY", "exec": True}
    pointed = {k: v for k, v in (("cleared_by", cleared), ("passed_rb", passed)) if v}
    written = ConversationState.from_fields({"o:x": orjson.dumps(handoff | pointed).decode()}).field("o:x")
    assert written is not None and orjson.loads(written) == handoff | pointed
    assert list(orjson.loads(written))[: len(pointed) + 1] == [*pointed, "item"]


class _Saving(MemoryStore):
    """The in-memory store, keeping every state a batch saved (before the save: what the Redis store encodes)."""

    def __init__(self) -> None:
        super().__init__()
        self.saved: list[ConversationState] = []

    async def save(self, route, states, *args, **kw):  # type: ignore[no-untyped-def]
        self.saved += states.values()
        return await super().save(route, states, *args, **kw)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=conversations_, epoch=st.one_of(st.none(), st.integers(0, 2**40)), now=st.floats(0, 2e9))
def test_a_save_s_arguments_are_what_the_state_s_changes_say_in_either_form(
    lines: list[tuple[str, str]], epoch: int | None, now: float
) -> None:
    """``save_args``, the Redis save's arguments of a conversation the engine writes: the JSON (a single Redis's
    batch) is byte for byte what orjson writes for the list (a cluster's call) with its integers as the digits
    redis-py sends of them, and the list is what the state's own readers say (its epoch, TTL, legacy flag, scores,
    collection and changed fields, in the script's order)."""
    store = _Saving()
    asyncio.run(store.put_record(RECORD))
    decided = asyncio.run(incremental(store, lines, list(range(0, 25, 3))))
    if not store.saved:  # only a batch of lines refused before any was remembered (an unknown type) changes nothing
        assert all(verdict == "dead-letter" for verdict, _, _ in decided)
        return
    scores = (repr(now), repr(now - 86400.0))
    for state in store.saved:
        queued = state.collection()
        fields = [x for kv in state.changed_fields().items() for x in kv]
        ttl = 700 if state.has_open_handoffs() else 300
        want = ["" if epoch is None else epoch, ttl, "1" if state.legacy else "0", *scores, 10 + 2 * len(queued)]
        want += [len(queued), *queued, *fields]
        listed = state.save_args(epoch, 700, 300, *scores, 10, json=False)
        assert listed == want
        sent = [str(a) if isinstance(a, int) else a for a in want]
        assert state.save_args(epoch, 700, 300, *scores, 10, json=True) == orjson.dumps(sent)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=conversations_, data=st.data())
def test_a_state_read_from_a_redis_reply_is_the_state_read_from_its_fields(
    lines: list[tuple[str, str]], data: st.DataObject
) -> None:
    """``from_reply`` (the Redis reply's names and values as they come, ``bytes``, in any order) reads the state
    ``from_fields`` reads from the same fields decoded into a dict; the entries it reads write back the same."""
    w, _ = whole(lines)
    for conv, state in w.states.items():
        fields = state.all_fields()
        names = data.draw(st.permutations(sorted(fields)), label=f"the order of {conv}'s fields")
        reply: list[bytes | str] = [x.encode() for name in names for x in (name, fields[name])]
        from_reply, from_fields = ConversationState.from_reply(reply), ConversationState.from_fields(fields)
        assert from_reply.all_fields() == from_fields.all_fields() == fields
        assert (from_reply.seq, from_reply.lines, from_reply.handoffs) == (
            from_fields.seq,
            from_fields.lines,
            from_fields.handoffs,
        )
        assert ConversationState.from_reply([x.decode() for x in reply]).all_fields() == fields  # str as well


def test_a_reply_that_does_not_pair_or_is_not_utf8_is_refused() -> None:
    for reply in ([b"h"], [b"h", b'{"v":2,"seq":0,"open":0}', b"l:x"], [b"l:x", b'{"d":"\xff"}'], [b"\xfe", b"{}"]):
        with pytest.raises(ValueError):
            ConversationState.from_reply(reply)
