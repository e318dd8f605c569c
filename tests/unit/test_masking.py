"""Masking sensitive slot values in what the gatekeeper writes beside a record: headers, alerts, logs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gatekeeper.masking import Masker, mask_line, mask_value, mask_values, masker_for
from rwcore import Problem

ACCT = "40-12-88/61102938"
LOOKALIKE = "40-12-88/61102983"
HO = (
    "RW1 HO scheduler-1 p=pay from=scheduler to=payer item=inv:MD-2026-057 ask=PAY rb=exec sup=marlow amt=5400.00 "
    f"cur=GBP kind=GROSS acct={ACCT} paid=20261002 ref=MD-2026-057 apref=FD-0929"
)


@pytest.mark.parametrize(
    ("value", "masked"),
    [
        (ACCT, "****2938"),
        ("GB29NWBK601613", "****1613"),
        ("GB29NWBK", "****WBK"),
        ("12345", "****45"),
        ("1234", "****"),
        ("", "****"),
    ],
)
def test_mask_value_keeps_only_the_last_characters(value: str, masked: str) -> None:
    assert mask_value(value) == masked


def test_a_line_has_its_sensitive_slots_masked_and_nothing_else() -> None:
    out = mask_line(HO)
    assert ACCT not in out
    assert "acct=****2938" in out
    assert "amt=5400.00" in out and "ref=MD-2026-057" in out and "sup=marlow" in out


def test_a_sensitive_value_quoted_in_the_tail_is_masked_too() -> None:
    out = mask_line(f"{HO} // pay to {ACCT} as agreed; addr=ap@marlow.example")
    assert ACCT not in out
    assert "ap@marlow.example" not in out
    assert out.count("****2938") == 2


def test_list_values_mask_each_element() -> None:
    assert mask_line("RW1 HO a-1 from=a to=b prev=111122223333+444455556666") == (
        "RW1 HO a-1 from=a to=b prev=****3333+****6666"
    )


def test_profile_sensitive_slots_add_to_the_defaults() -> None:
    line = "RW1 HO a-1 from=a to=b iban=GB29NWBK60161331926819 acct=99998888777"
    assert "GB29NWBK60161331926819" in mask_line(line)
    out = mask_line(line, {"iban"})
    assert "GB29NWBK60161331926819" not in out and "99998888777" not in out


def test_problems_are_masked_in_message_expected_and_got() -> None:
    p = Problem(
        code="acct-mismatch",
        message=f"record: acct mismatch: record {ACCT} vs HO {LOOKALIKE}",
        tier="record",
        slot="acct",
        expected=ACCT,
        got=LOOKALIKE,
    )
    m = masker_for(HO, [p])
    (q,) = m.problems([p])
    assert q.expected == "****2938" and q.got == "****2983"
    assert ACCT not in q.message and LOOKALIKE not in q.message
    assert q.message == "record: acct mismatch: record ****2938 vs HO ****2983"
    assert (q.code, q.tier, q.slot) == (p.code, p.tier, p.slot)


def test_a_problem_of_another_slot_quoting_a_known_account_is_masked() -> None:
    p = Problem(code="x", message=f"unexpected {ACCT} in ref", tier="form", slot="ref", expected=None, got=ACCT)
    (q,) = masker_for(HO, [p]).problems([p])
    assert ACCT not in q.message and q.got == "****2938"


def test_short_values_are_not_learnt_so_ordinary_text_survives() -> None:
    m = Masker().learn(["12", None, ""])
    assert m.text("amt=12.00 12") == "amt=12.00 12"


def test_bytes_that_are_not_utf8_do_not_break_masking() -> None:
    out = mask_line(HO.encode() + b" // caf\xe9")
    assert ACCT not in out


def test_mask_values_masks_a_records_sensitive_values_only() -> None:
    values = {"ask": "PAY", "acct": ACCT, "amt": "5400.00", "iban": "GB29NWBK601613", "prev": [ACCT, LOOKALIKE]}
    masked = mask_values(values, {"iban"})
    assert masked == {"ask": "PAY", "acct": "****2938", "amt": "5400.00", "iban": "****1613",
                      "prev": ["****2938", "****2983"]}  # fmt: skip
    assert values["acct"] == ACCT  # the record itself is left as it is
    assert mask_values({"acct": "a+b12345"}) == {"acct": "****+****45"}  # a +-joined list, part by part


_TOKENS = st.sampled_from(
    [
        "acct=",
        "prev=",
        "addr=",
        "iban=",
        "amt=",
        "ref=",
        "x_1=",
        "Acct=",
        "40-12-88/61102938",
        "ap@marlow.example",
        "1111+2222",
        "+",
        " ",
        "  ",
        "//",
        "=",
        "caf\u00e9",
        "\u202e",
        "\n",
        "61102938",
        "abc",
        "a=b",
    ]
)


@settings(max_examples=1000, deadline=None)
@given(
    st.lists(_TOKENS | st.text(max_size=6), max_size=24).map("".join), st.sets(st.sampled_from(["iban", "ref", "x_1"]))
)
def test_mask_line_is_the_masker_that_knows_the_line(line: str, slots: set[str]) -> None:
    """``mask_line`` (one native call) masks as the masker for the slots that learnt the line's own values."""
    assert mask_line(line, slots) == masker_for(line, (), slots).text(line)
