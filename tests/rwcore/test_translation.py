"""The pay profile's translation rules: an invoice line carries its facts, and net + vat = amt when GROSS."""

from __future__ import annotations

import decimal

import pytest
import rogerwilco as rw
from hypothesis import given
from hypothesis import strategies as st

from rwcore._profiles import get_profile
from rwcore._translation import TRANSLATION_CODES, TRANSLATION_PROFILES, translation_check
from rwcore._types import Message

GOOD = (
    "RW1 ST extractor-1 p=pay from=extractor to=reconciler item=inv:MD-2026-057 sup=marlow "
    "amt=5400.00 cur=GBP kind=GROSS net=4500.00 vat=900.00 src=email:7"
)


def _msg(line: str, profile: str | None = "pay") -> Message:
    d, errors, _ = rw.parse(line, profile)
    assert not errors, errors
    return Message.from_dict(d)


def _codes(line: str, profile: str | None = "pay") -> list[tuple[str, str | None]]:
    return [(p.code, p.slot) for p in translation_check(_msg(line, profile), profile)]


def test_a_complete_invoice_line_passes() -> None:
    assert translation_check(_msg(GOOD), "pay") == ()
    assert translation_check(_msg(GOOD), get_profile("pay")) == ()
    assert frozenset({"pay"}) == TRANSLATION_PROFILES


def test_missing_src() -> None:
    (p,) = translation_check(_msg(GOOD.replace(" src=email:7", "")), "pay")
    assert (p.code, p.tier, p.slot) == ("translation-missing-src", "translation", "src")
    assert p.message.startswith("translation: ST extractor-1 about inv:MD-2026-057 carries no src=")


@pytest.mark.parametrize("slot", ["amt", "cur", "kind"])
def test_missing_invoice_slot(slot: str) -> None:
    value = {"amt": "5400.00", "cur": "GBP", "kind": "GROSS"}[slot]
    line = GOOD.replace(f" {slot}={value}", "")
    assert ("translation-missing-slot", slot) in _codes(line)


def test_net_plus_vat_must_equal_amt_when_gross() -> None:
    (p,) = translation_check(_msg(GOOD.replace("vat=900.00", "vat=899.99")), "pay")
    assert (p.code, p.slot, p.expected, p.got) == ("translation-net-vat", "amt", "5399.99", "5400.00")
    assert "net 4500.00 + vat 899.99 = 5399.99, not amt 5400.00" in p.message


def test_net_vat_not_checked_when_net_or_not_all_given() -> None:
    assert _codes(GOOD.replace("kind=GROSS", "kind=NET").replace("vat=900.00", "vat=1.00")) == []
    assert _codes(GOOD.replace(" vat=900.00", "")) == []
    assert _codes(GOOD.replace(" net=4500.00", "")) == []


def test_only_invoice_status_lines() -> None:
    bare = "RW1 ST extractor-1 p=pay from=extractor to=reconciler item=sup:marlow"
    assert _codes(bare) == []
    assert _codes("RW1 ST extractor-1 p=pay from=extractor to=reconciler item=run:2026-09") == []
    ho = "RW1 HO scheduler-1 p=pay from=scheduler to=payer item=inv:MD-1 ask=PAY"
    assert _codes(ho) == []
    everything_missing = "RW1 ST extractor-1 p=pay from=extractor to=reconciler item=inv:MD-1"
    assert _codes(everything_missing) == [
        ("translation-missing-src", "src"),
        ("translation-missing-slot", "amt"),
        ("translation-missing-slot", "cur"),
        ("translation-missing-slot", "kind"),
    ]


def test_other_profiles_have_no_rules() -> None:
    line = "RW1 ST extractor-1 from=extractor to=reconciler item=inv:MD-1"
    msg = _msg(line, None)
    assert translation_check(msg, None) == ()
    assert translation_check(msg, "core") == ()
    assert translation_check(msg, get_profile(None)) == ()
    assert translation_check(msg, "clin") == ()  # clin declares a translation note; its rules need the document
    # with no profile given, the message's own p= decides
    assert next(p.code for p in translation_check(_msg(line.replace(" from=", " p=pay from="), None))) == (
        "translation-missing-src"
    )


def test_values_that_are_not_numbers_do_not_raise() -> None:
    msg = Message(
        v="RW1",
        type="ST",
        id="x-1",
        from_="x",
        to="y",
        item="inv:1",
        slots={"src": ("email:1",), "amt": "1E+999999999", "cur": "GBP", "kind": "GROSS", "net": "NaN", "vat": "1"},
    )
    (p,) = translation_check(msg, "pay")
    assert p.code == "translation-net-vat" and p.slot == "net" and "not a number" in p.message


@given(
    net=st.decimals(min_value=-(10**30), max_value=10**30, places=2, allow_nan=False, allow_infinity=False),
    vat=st.decimals(min_value=-(10**30), max_value=10**30, places=2, allow_nan=False, allow_infinity=False),
    delta=st.sampled_from([decimal.Decimal("0.00"), decimal.Decimal("0.01"), decimal.Decimal("-1.00")]),
)
def test_sum_is_exact_for_any_money(net: decimal.Decimal, vat: decimal.Decimal, delta: decimal.Decimal) -> None:
    with decimal.localcontext(decimal.Context(prec=100)):
        amt = net + vat + delta
    msg = Message(
        v="RW1",
        type="ST",
        id="x-1",
        from_="x",
        to="y",
        item="inv:1",
        slots={
            "src": ("email:1",),
            "amt": f"{amt:.2f}",
            "cur": "GBP",
            "kind": "GROSS",
            "net": f"{net:.2f}",
            "vat": f"{vat:.2f}",
        },
    )
    problems = translation_check(msg, "pay")
    assert bool(problems) == (delta != 0)
    assert all(p.code in TRANSLATION_CODES and p.tier == "translation" for p in problems)
