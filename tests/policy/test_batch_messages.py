"""A batch's messages hold their fields natively until one is read (``rwcore._types.Message``): each is the same
value ``parse_line`` gives, whichever field is read first, and compares, hashes, shows, copies and pickles as one.
A message with a field never read has not made it."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gatekeeper.processor import Line, Processor
from gatekeeper.store import MemoryStore
from rwcore import Message, parse_line
from tests.policy.world import NOW, route
from tests.seed import ACK, AN, CX, DN, HO, RB

LINES = [
    HO,
    RB,
    AN,
    DN,
    "RW1 AQ payer-9 re=scheduler-1 p=pay from=payer to=scheduler ctx=scheduler-1+payer-2 need=YESNO",
    "RW1 HO scheduler-4 p=pay from=scheduler to=payer item=12 ask=PAY amt=1.00 cur=GBP // a tail, with words",
    "RW1 AN scheduler-9 re=payer-9 p=pay from=scheduler to=payer ctx=scheduler-1 val=Y",
    CX,
    ACK,
]
FIELDS = ("v", "type", "id", "from_", "to", "re", "item", "slots", "tail")
HELD = ("id", "from_", "to", "re", "item", "slots", "tail")


async def batch_messages(texts: list[str]) -> list[Message]:
    """The messages of the batch's decisions, as the worker's batch path makes them, none of their fields read."""
    p = Processor(MemoryStore(), route(hold_seconds=0.0))
    decisions = await p.process([Line(f"c{i}", t.encode(), partition=0) for i, t in enumerate(texts)], NOW)
    out = [d.message for d in decisions]
    assert all(m is not None for m in out)
    return out  # type: ignore[return-value]


def unread(m: Message, name: str) -> bool:
    """The field has not been made (its slot is empty): reading the slot itself, not through ``__getattr__``."""
    try:
        Message.__dict__[name].__get__(m)
    except AttributeError:
        return True
    return False


@pytest.mark.parametrize("first", HELD)
async def test_whichever_field_is_read_first_the_message_is_parse_lines(first: str) -> None:
    for m, text in zip(await batch_messages(LINES), LINES, strict=True):
        want = parse_line(text, "pay").message
        assert want is not None
        assert all(unread(m, name) for name in HELD)  # only v and type were made
        assert (m.v, m.type) == (want.v, want.type)
        assert getattr(m, first) == getattr(want, first)
        if first == "id":  # made alone (a dead letter's log line reads only it); the next read makes the rest
            assert not unread(m, "id") and all(unread(m, name) for name in HELD if name != "id")
            assert m.from_ == want.from_
        assert not any(unread(m, name) for name in HELD)  # one read (of a field but the id) made them all
        assert m == want and want == m
        assert [getattr(m, f) for f in FIELDS] == [getattr(want, f) for f in FIELDS]
        assert type(m.slots) is type(want.slots)


async def test_a_held_message_compares_shows_copies_and_pickles_as_any_other() -> None:
    for m, text in zip(await batch_messages(LINES), LINES, strict=True):
        want = parse_line(text, "pay").message
        assert want is not None
        assert m == want  # equality first: it reads the held fields itself
        assert repr((await batch_messages([text]))[0]) == repr(want)
        fresh = (await batch_messages([text]))[0]
        back = pickle.loads(pickle.dumps(fresh))  # pickled before any field was read
        assert back == want and back._fields is None
        assert copy.deepcopy((await batch_messages([text]))[0]) == want
        assert dataclasses.replace((await batch_messages([text]))[0], tail="t") == dataclasses.replace(want, tail="t")
        assert (await batch_messages([text]))[0].to_dict() == want.to_dict()


async def test_a_name_that_is_not_a_field_is_still_an_attribute_error() -> None:
    (m,) = await batch_messages([HO])
    for name in ("nope", "_fields_", "__wrapped__"):
        with pytest.raises(AttributeError, match=name):
            getattr(m, name)
    assert all(unread(m, name) for name in HELD)  # asking for other names made nothing
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.id = "x"  # type: ignore[misc]
    eager = Message("RW1", "AN", "a-1", "a", "b", slots={"val": "Y"})  # made by hand: every field set, none held
    assert eager._fields is None
    with pytest.raises(AttributeError, match="nope"):
        eager.nope  # type: ignore[attr-defined]  # noqa: B018


words = st.sampled_from(
    [
        "p=pay", "from=payer", "to=scheduler", "re=scheduler-1", "ctx=a-1+b-2", "ctx=a-1", "item=inv:X", "ask=PAY",
        "amt=1.00", "cur=GBP", "val=Y", "need=YESNO", "why=REVOKED", "x_k=v", "x_n=12", "// tail words", "//",
        "\u00e9", "acct=12345678",
    ]
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["HO", "RB", "AN", "AQ", "DN", "CX"]), st.lists(words, max_size=8))
async def test_any_parsed_line_of_a_batch_reads_as_parse_line_reads_it(kind: str, rest: list[str]) -> None:
    text = " ".join(["RW1", kind, "payer-7", *rest])
    want = parse_line(text, "pay").message
    p = Processor(MemoryStore(), route(hold_seconds=0.0))
    (d,) = await p.process([Line("c1", text.encode(), partition=0)], NOW)
    if want is None:  # not a message: the batch made none either
        assert d.message is None
        return
    assert d.message is not None
    assert [getattr(d.message, f) for f in FIELDS] == [getattr(want, f) for f in FIELDS]
