"""A valid line's ``Message`` holds its fields natively until one is read (``parse_line``, and the worker's
batches): the typed API reads such a message's parser twin directly instead of reading its fields back. Every
function gives the same result on a held message as on the same message made field by field, whatever the line."""

from __future__ import annotations

import dataclasses
import pickle

from hypothesis import given, settings
from hypothesis import strategies as st

import rwcore as rw
from tests.seed import AN, CX, DN, HO, RB
from tests.seed import RECORD_VALUES as RECORD

PAY = rw.get_profile("pay")
NOW = "20261001T1200Z"
FIELDS = ("v", "type", "id", "from_", "to", "re", "item", "slots", "tail")


def held(line: str) -> rw.Message:
    m = rw.parse_line(line, PAY).message
    assert m is not None and m._fields is not None, "a valid line's message holds its fields"
    return m


def by_hand(m: rw.Message) -> rw.Message:
    """The same message made field by field (nothing held)."""
    made = rw.Message(*(getattr(m, f) for f in FIELDS))
    assert made._fields is None
    return made


def outcomes(ho: rw.Message, rb: rw.Message, dn: rw.Message) -> list[object]:
    """What the typed API says of a handoff, its readback and its done report."""
    tracker = rw.ThreadTracker()
    fed = [tracker.feed(m) for m in (ho, rb, dn)]
    return [
        rw.message_digest(ho),
        rw.message_digest(rb),
        rw.canonical(ho.to_dict()),
        rw.encode_message(ho, PAY),
        rw.ho_check(ho, RECORD, PAY),
        rw.rb_check(ho, rb, PAY, now=NOW),
        rw.dn_check(ho, dn, PAY),
        rw.dn_check(ho, dn, PAY, rb),
        rw.translation_check(ho, PAY),
        fed,
        tracker.report(NOW),
    ]


def test_the_typed_api_says_the_same_of_a_held_message_as_of_one_made_by_hand() -> None:
    ho, rb, dn = held(HO), held(RB), held(DN)
    assert outcomes(ho, rb, dn) == outcomes(by_hand(ho), by_hand(rb), by_hand(dn))
    # and a held message read first, then checked, says the same again
    ho2, rb2, dn2 = held(HO), held(RB), held(DN)
    assert [ho2.slots, rb2.id, dn2.tail] == [ho.slots, rb.id, dn.tail]
    assert outcomes(ho2, rb2, dn2) == outcomes(ho, rb, dn)


def test_a_held_message_is_a_value_like_any_other() -> None:
    for line in (HO, RB, AN, DN, CX):
        m, other = held(line), held(line)
        assert m == by_hand(other) and hash(m.type) == hash(other.type)
        assert repr(held(line)) == repr(by_hand(m))
        assert pickle.loads(pickle.dumps(held(line))) == m
        assert dataclasses.replace(held(line), tail="t").tail == "t"
        assert rw.parse_line(line, PAY) == rw.parse_line(line, PAY)


def test_a_line_that_python_cannot_give_as_utf8_is_parsed_all_the_same() -> None:
    line = HO.replace("inv:MD-2026-057", "inv:MD-\ud800")  # a lone surrogate: no UTF-8 for the native parser to hold
    parsed = rw.parse_line(line, PAY)
    assert parsed.ok and parsed.message is not None
    assert parsed.message._fields is None  # made field by field, from a copy
    assert parsed.message.item == "inv:MD-\ud800"
    assert rw.message_digest(parsed.message) == rw.message_digest(by_hand(parsed.message))


def _variant(base: str, amount: str, extensions: list[tuple[str, str]], tail: str | None) -> str:
    head = base.split(" // ")[0].replace("5400.00", amount)
    ext = "".join(f" x_{k}={v}" for k, v in extensions)
    return head + ext + (f" // {tail}" if tail is not None else "")


values = st.text("abcXYZ019-+.:/\u00e9", min_size=1, max_size=12).filter(lambda v: not v.startswith(("+", "/")))
variants = st.builds(
    _variant,
    st.sampled_from([HO, RB, AN, DN, CX]),
    st.sampled_from(["5400.00", "5400", "1.00", "0.01", "5400.001"]),
    st.lists(st.tuples(st.sampled_from(["k", "n", "big", "l"]), values), max_size=4, unique_by=lambda kv: kv[0]),
    st.one_of(st.none(), st.text(min_size=0, max_size=40).filter(lambda t: "\n" not in t and "\r" not in t)),
)


@settings(max_examples=300, deadline=None)
@given(variants, variants)
def test_any_two_valid_lines_check_alike_held_or_by_hand(line_a: str, line_b: str) -> None:
    a, b = rw.parse_line(line_a, PAY).message, rw.parse_line(line_b, PAY).message
    if a is None or b is None:
        return
    for m in (a, b):
        assert rw.message_digest(m) == rw.message_digest(by_hand(m))
        assert rw.translation_check(m, PAY) == rw.translation_check(by_hand(m), PAY)
        assert rw.encode_message(m, PAY) == rw.encode_message(by_hand(m), PAY)
    assert rw.rb_check(a, b, PAY, now=NOW) == rw.rb_check(by_hand(a), by_hand(b), PAY, now=NOW)
    assert rw.dn_check(a, b, PAY, a) == rw.dn_check(by_hand(a), by_hand(b), PAY, by_hand(a))
    assert rw.ho_check(a, RECORD, PAY) == rw.ho_check(by_hand(a), RECORD, PAY)


@settings(max_examples=500, deadline=None)
@given(st.text(), st.sampled_from([None, "pay", "core"]))
def test_any_text_parses_without_raising_and_a_held_message_reads_as_made_by_hand(
    rest: str, profile: str | None
) -> None:
    for line in (rest, f"{HO} {rest}", f"RW1 HO a-1 from=a to=b {rest}"):
        m = rw.parse_line(line, profile).message
        if m is not None:
            assert m == by_hand(m) and repr(m) == repr(by_hand(m))
            assert rw.message_digest(m) == rw.message_digest(by_hand(m))
