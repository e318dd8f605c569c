"""What a batch loads: the native ``prepare_batch`` names the same state entries and records as the lines prepared
one by one (``processor._names``, the guarded path's), on clean, hostile and malformed lines alike. A batch that
named less would decide a line without the entries it reads, as if they did not exist."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gatekeeper.policy.decide import prepare, prepare_batch
from gatekeeper.processor import Line, _names
from tests.policy.world import route
from tests.seed import AN, DN, HO, RB

LINES = [
    HO,
    RB,
    AN,
    DN,
    "RW1 AQ payer-9 re=scheduler-1 p=pay from=payer to=scheduler ctx=scheduler-1+payer-2 q=which",
    "RW1 AN scheduler-9 re=payer-9 p=pay from=scheduler to=payer ctx=scheduler-1 val=Y",
    "RW1 HO scheduler-3 p=pay from=scheduler to=payer item=inv:X amt=1.00 cur=GBP",  # no ask=
    "RW1 HO scheduler-4 p=pay from=scheduler to=payer item=12 ask=PAY amt=1.00 cur=GBP",
    "RW1 HO scheduler-5 from=scheduler to=payer ask=PAY",  # no item=
    "RW1 RB payer-3 re=12 p=pay from=payer to=scheduler",
    "RW1 XX payer-1 re=scheduler-1 from=payer",  # not a type: the raw fields
    "RW1 RB payer-2 re=scheduler-1 from=payer to=scheduler amt=abc",  # does not parse
    "RW1 HO scheduler-6 p=other from=scheduler to=payer item=a ask=PAY",  # a profile that does not exist
    "not RW1 at all",
    "RW1  HO double-space",  # the gate refuses it
    "",
    "RW1 HO sch\u00e9duler-1 from=scheduler",  # non-ASCII head
]


def _both(values: list[bytes], conversations: list[str | None]) -> tuple[dict[str, set[str]], set[object]]:
    pol = route()
    _, wants, keys = prepare_batch(values, conversations, pol)
    lines = [Line(c, v) for v, c in zip(values, conversations, strict=True)]
    want_wants, want_keys = _names(lines, [prepare(v, pol) for v in values])
    assert wants == want_wants
    assert keys == want_keys
    return wants, keys


def test_the_known_lines_name_what_they_name_one_by_one() -> None:
    values = [t.encode() for t in LINES]
    _both(values, ["c1" if i % 3 else None for i in range(len(values))])
    wants, keys = _both(values, [f"c{i % 4}" for i in range(len(values))])
    named = set().union(*wants.values())
    assert {"scheduler-1", "payer-2", "payer-9", "payer-1", "12"} <= named  # an id, a ctx=, a re=, a raw re=
    assert {(k.item, k.ask) for k in keys} >= {("inv:MD-2026-057", "PAY"), ("12", "PAY")}


tokens = st.sampled_from(
    [
        "RW1", "HO", "RB", "AN", "AQ", "DN", "CX", "p=pay", "p=core", "from=payer", "to=scheduler", "re=scheduler-1",
        "re=7", "ctx=a-1+b-2", "ctx=a-1", "item=inv:X", "item=3", "ask=PAY", "ask=", "amt=1.00", "cur=GBP", "//",
        "tail words", "scheduler-1", "payer-2", "x_k=v", "val=Y", "\u00e9", "  ", "\t",
    ]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(tokens, min_size=1, max_size=12).map(" ".join), min_size=1, max_size=8))
def test_any_lines_name_what_they_name_one_by_one(texts: list[str]) -> None:
    values = [t.encode() for t in texts]
    _both(values, [f"c{i % 2}" for i in range(len(values))])
