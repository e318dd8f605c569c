"""Translation rules: when the lines are the record, a line about a source document must carry its facts.

The ``pay`` profile's ``translation`` note (spec section 7) asks a channel to enforce, in code, that the agent at the
edge translates each source document into one complete line:

- every ``ST`` about a source document carries ``src=`` (where the facts came from: ``email:<n>``,
  ``bank:<YYYYMMDD>``, ``po:<id>``);
- an invoice line carries ``amt``, ``cur`` and ``kind``;
- with ``kind=GROSS``, when ``net``, ``vat`` and ``amt`` are all given, ``net + vat = amt`` (exact decimal arithmetic).

Decisions, written down:

- **Which lines.** Under ``pay`` the source documents lines are about are invoices, the profile's item namespace
  ``inv`` (``item=inv:<id>``); ``sup:`` (the supplier master) and ``run:`` (the payment run) are derived, not source
  documents. So the rules apply to ``ST`` lines whose item starts with ``inv:``; every other line passes.
- **Which profiles.** The rules are keyed by profile *name*, and only ``pay`` has a rule set. A profile file's
  ``translation`` note is prose for the model, not a machine-readable rule, so declaring one does not switch these
  rules on: ``clin`` declares one, but its rules (the quoted words are found on the cited line of the document) need
  the source document, which a line check does not have. Every profile other than ``pay`` yields no problems.
- **No profile given.** ``profile=None`` means the profile the message names with ``p=`` (as the reference parser
  validates a line under its own ``p=``); the gatekeeper always passes the route's profile instead.
- A value that is not a plain decimal number (the parser refuses those as ``money`` anyway) makes the sum uncheckable,
  which is reported under ``translation-net-vat`` rather than raising.
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from rwcore._errors import CodeInfo
from rwcore._types import Message, Problem, SlotValue

if TYPE_CHECKING:
    from rwcore._profiles import Profile

__all__ = ["TRANSLATION_CODES", "TRANSLATION_PROFILES", "translation_check"]

_TIER = "translation"

#: Every code the translation rules put in a Problem (tier ``translation``), for ``rwcore.PROBLEM_CODES``.
TRANSLATION_CODES: Mapping[str, CodeInfo] = MappingProxyType(
    {
        "translation-missing-src": CodeInfo(_TIER, "problem", "an ST about a source document without src="),
        "translation-missing-slot": CodeInfo(_TIER, "problem", "an invoice line without amt, cur or kind"),
        "translation-net-vat": CodeInfo(_TIER, "problem", "kind=GROSS and net + vat is not amt (or not a number)"),
    }
)
_INVOICE_SLOTS = ("amt", "cur", "kind")


def _present(v: SlotValue | None) -> bool:
    return v is not None and v != "" and v != ()


# plain decimal notation only (no exponent, ASCII digits): the sum's precision is then bounded by the line's length
_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")


def _decimal(v: SlotValue) -> decimal.Decimal | None:
    if not isinstance(v, str) or not _NUMBER.fullmatch(v):
        return None
    return decimal.Decimal(v)


def _pay(msg: Message) -> tuple[Problem, ...]:
    if msg.type != "ST" or not (msg.item or "").startswith("inv:"):
        return ()
    slots = msg.slots
    where = f"ST {msg.id} about {msg.item}"
    problems: list[Problem] = []
    if not _present(slots.get("src")):
        problems.append(
            Problem(
                code="translation-missing-src",
                message=(
                    f"translation: {where} carries no src=; every ST about a source document names where its facts "
                    "came from (email:<n>, bank:<YYYYMMDD>, po:<id>)"
                ),
                tier=_TIER,
                slot="src",
                expected="src=<source>",
            )
        )
    for k in _INVOICE_SLOTS:
        if not _present(slots.get(k)):
            problems.append(
                Problem(
                    code="translation-missing-slot",
                    message=f"translation: {where} carries no {k}=; an invoice line carries amt, cur and kind",
                    tier=_TIER,
                    slot=k,
                    expected=f"{k}=<value>",
                )
            )
    net, vat, amt = slots.get("net"), slots.get("vat"), slots.get("amt")
    if slots.get("kind") == "GROSS" and net is not None and vat is not None and amt is not None:
        values = {"net": _decimal(net), "vat": _decimal(vat), "amt": _decimal(amt)}
        bad = [k for k, d in values.items() if d is None]
        if bad:
            shown = ", ".join(f"{k}={slots.get(k)}" for k in bad)
            problems.append(
                Problem(
                    code="translation-net-vat",
                    message=f"translation: {where}: net + vat cannot be checked against amt: {shown} is not a number",
                    tier=_TIER,
                    slot=bad[0],
                    expected="a decimal number",
                    got=str(slots.get(bad[0])),
                )
            )
        else:
            d_net, d_vat, d_amt = values["net"], values["vat"], values["amt"]
            assert d_net is not None and d_vat is not None and d_amt is not None
            # exact: enough digits for both operands' whole span, so the sum never rounds
            top = max(d_net.adjusted(), d_vat.adjusted(), 0)
            bottom = min(int(d_net.as_tuple().exponent), int(d_vat.as_tuple().exponent), 0)
            digits = top - bottom + 3
            with decimal.localcontext(decimal.Context(prec=digits, traps=[decimal.Inexact])):
                total = d_net + d_vat
            if total != d_amt:
                problems.append(
                    Problem(
                        code="translation-net-vat",
                        message=(
                            f"translation: {where}: net {net} + vat {vat} = {total}, not amt {amt}; "
                            "with kind=GROSS net + vat must equal amt"
                        ),
                        tier=_TIER,
                        slot="amt",
                        expected=str(total),
                        got=str(amt),
                    )
                )
    return tuple(problems)


_RULES: dict[str, Callable[[Message], tuple[Problem, ...]]] = {"pay": _pay}

#: The profiles rwcore has translation rules for.
TRANSLATION_PROFILES = frozenset(_RULES)


def _profile_name(msg: Message, profile: Profile | str | None) -> str | None:
    if profile is None:
        p = msg.slots.get("p")
        return p if isinstance(p, str) else None
    if isinstance(profile, str):
        return profile
    name = getattr(profile, "name", None)
    return name if isinstance(name, str) else None


def translation_check(msg: Message, profile: Profile | str | None = None) -> tuple[Problem, ...]:
    """The translation rules for ``msg`` under ``profile`` (a Profile, its name, or None for the message's ``p=``).

    Returns the problems, empty when the line passes or no rules apply. See the module docstring for which lines
    and profiles the rules cover. Problem codes: ``translation-missing-src``, ``translation-missing-slot`` (``slot``
    names the missing one), ``translation-net-vat`` (``expected`` is net + vat, ``got`` the amount); tier
    ``translation``.
    """
    name = _profile_name(msg, profile)
    rules = _RULES.get(name) if name is not None else None
    return rules(msg) if rules is not None else ()
