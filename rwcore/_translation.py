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

The rules run natively (native/rw1/src/translation.rs, with exact decimal sums written as ``str(Decimal)`` writes
them); this module names the profile and keeps the codes.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from rwcore import _native
from rwcore._codec import native_problems
from rwcore._errors import CodeInfo, FormError
from rwcore._types import Message, Problem

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
#: The profiles rwcore has translation rules for.
TRANSLATION_PROFILES = frozenset(_native.TRANSLATION_PROFILES)


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
    if name not in TRANSLATION_PROFILES:
        return ()
    try:
        found = _native.translation_check(msg, name)
    except ValueError as e:
        raise FormError(str(e)) from e
    return tuple(native_problems(found))
