"""rwcore's one error type and its closed table of problem codes.

Exception tree::

    ValueError
     └── FormError        anything rwcore refuses: a line that does not encode, an unknown or malformed profile,
                          a digest of an invalid line. Raised ``from`` the underlying cause where there is one.

Parsing never raises on a line: it returns problems. Every problem, warning and note rwcore produces carries a stable
``code`` drawn from :data:`PROBLEM_CODES` below (metrics labels and dead-letter headers use these), a ``tier`` naming
where it was found, and a message worded exactly as the reference implementation words it.
"""

from __future__ import annotations

from dataclasses import fields
from types import MappingProxyType
from typing import Any, Final, NamedTuple

from rwcore._types import Problem


class FormError(ValueError):
    """The one error rwcore raises: a line, message, profile or argument it refuses."""


class CodeInfo(NamedTuple):
    """What a problem code means: the tier it belongs to, its kind and a one-line description.

    ``kind`` is ``error`` or ``warning`` for the parser, ``problem`` or ``note`` for the checks.
    """

    tier: str
    kind: str
    description: str


def _table(rows: dict[str, tuple[str, str, str]]) -> MappingProxyType[str, CodeInfo]:
    return MappingProxyType({code: CodeInfo(*row) for code, row in rows.items()})


#: Every code a parse of one line can produce (tier ``form``).
PARSE_CODES: Final = _table(
    {
        # errors: the line is invalid
        "too-short": ("form", "error", "fewer than three tokens: RW1 <TYPE> <id>"),
        "bad-version": ("form", "error", "the version token is not RW1"),
        "unknown-type": ("form", "error", "the type is not one of HO RB AQ AN ST DN UN FL CX"),
        "bad-id": ("form", "error", "the id is not [A-Za-z0-9._-]+"),
        "not-key-value": ("form", "error", "a token after the id is not key=value"),
        "bad-key": ("form", "error", "a key is not lowercase [a-z][a-z0-9_]*"),
        "duplicate-key": ("form", "error", "a key appears twice (the first is kept)"),
        "empty-value": ("form", "error", "key= with an empty value"),
        "unknown-profile": ("form", "error", "p= names a profile that does not exist or may not be used"),
        "unknown-code": ("form", "error", "an enum slot holds a code its enum does not define (rule 2)"),
        "bad-int": ("form", "error", "an int slot is not an integer"),
        "out-of-range": ("form", "error", "an int slot is outside its range"),
        "bad-date": ("form", "error", "a date slot is not YYYYMMDD"),
        "bad-time": ("form", "error", "a time slot is not YYYYMMDDTHHMMZ"),
        "bad-days": ("form", "error", "a days slot is not a number of days"),
        "bad-money": ("form", "error", "a money slot is not digits with exactly two decimals"),
        "bad-num": ("form", "error", "a num slot is not a number as written"),
        "bad-bool": ("form", "error", "a bool slot is not Y or N"),
        "bad-agent": ("form", "error", "an agent or msgid slot is not [A-Za-z0-9._-]+"),
        "unknown-agent": ("form", "error", "an agent slot names an agent the profile does not list"),
        "bad-slot-type": ("form", "error", "the profile declares a slot type rwcore does not know"),
        "missing-slot": ("form", "error", "a slot the type requires is absent (also opts for AQ need=ENUM)"),
        "tail-required": ("form", "error", "AN val=tail without a tail"),
        "id-shape": ("form", "error", "the id is not <from>-<n>"),
        "not-in-answer-vocabulary": ("form", "error", "AQ opts or AN val outside the profile's ans enum"),
        "tail-too-long": ("form", "error", "the tail is longer than 300 characters (rule 4)"),
        # warnings: the line is valid but worth a look
        "whitespace": ("form", "warning", "leading or trailing whitespace"),
        "multiple-spaces": ("form", "warning", "tokens separated by more than one space"),
        "profile-mismatch": ("form", "warning", "p= names another profile than the one validating the line"),
        "unknown-key": ("form", "warning", "a key no profile defines, not an x_ extension; ignored"),
        "slot-not-for-type": ("form", "warning", "a known slot the type does not define"),
        "same-agent": ("form", "warning", "from and to are the same agent"),
    }
)

#: Every code the three checks (and compare_acc) can produce.
CHECK_CODES: Final = _table(
    {
        # a line handed to a check did not parse, or is not the type the check needs
        "ho-invalid": ("form", "problem", "the HO does not parse; ``got`` holds the parse code"),
        "rb-invalid": ("form", "problem", "the RB does not parse; ``got`` holds the parse code"),
        "dn-invalid": ("form", "problem", "the DN does not parse; ``got`` holds the parse code"),
        "wrong-type": ("form", "problem", "a line is not the type the check takes (HO, RB, DN)"),
        # check 1: the HO against the record
        "record-missing": ("record", "problem", "the record holds a slot the HO does not carry"),
        "record-mismatch": ("record", "problem", "the HO's value differs from the record's"),
        "rb-level": ("record", "problem", "an exec ask whose HO does not ask rb=exec"),
        "record-no-value": ("record", "note", "the HO carries an execution slot the record has no value for"),
        "record-unresolved": ("record", "note", "an execution slot in neither the HO nor the record"),
        # check 2: the readback, five tiers and expiry
        "receipt-re": ("receipt", "problem", "the RB's re= is not the HO's id"),
        "receipt-route": ("receipt", "problem", "the RB does not travel from the HO's receiver to its sender"),
        "expired-ho": ("expiry", "problem", "the HO is past its exp="),
        "expired-rb": ("expiry", "problem", "the RB (a tool's statement) is past its exp="),
        "rb-outlives-ho": ("expiry", "problem", "the RB's exp= is later than the HO's"),
        "integrity-digest": ("integrity", "problem", "h= is not the digest of the HO"),
        "echo-missing": ("echo", "problem", "the RB does not echo a slot of the readback set"),
        "echo-mismatch": ("echo", "problem", "the RB echoes a slot with another decoded value"),
        "acc-missing": ("comprehension", "problem", "rb=acc or rb=plan, and the RB carries no acc="),
        "acc-gap": ("comprehension", "problem", "a criterion (or a keys= dimension) the receiver did not derive"),
        "acc-contradiction": ("comprehension", "problem", "a single-valued criterion with another value"),
        "acc-excluded": ("comprehension", "problem", "the receiver's not= excludes a must: criterion"),
        "plan-do-missing": ("comprehension", "problem", "rb=plan, and the RB carries no do="),
        "acc-unknown-key": ("comprehension", "note", "a constraint key outside the closed set; not compared"),
        "acc-loose": ("comprehension", "note", "a set-valued criterion matched only on a shared distinctive word"),
        "acc-assumption": ("comprehension", "note", "a criterion only the receiver holds; confirm or correct"),
        "acc-not-compared": ("comprehension", "note", "no expected criteria were supplied; acc= recorded only"),
        "exec-missing": ("execution", "problem", "rb=exec, and the RB lacks an execution slot of the ask"),
        "exec-mismatch": ("execution", "problem", "an execution slot differs from the HO's value"),
        "exec-none": ("execution", "note", "rb=exec for an ask the profile names no execution slots for"),
        # check 3: the done report against the plan
        "dn-receipt-re": ("receipt", "problem", "the DN's re= is not the HO's id"),
        "dn-receipt-route": ("receipt", "problem", "the DN does not travel from the HO's receiver to its sender"),
        "dn-item": ("receipt", "problem", "the DN's item is not the HO's"),
        "rb-not-plan": ("executed", "problem", "the readback given as the plan did not pass check_rb_full"),
        "dn-missing": ("executed", "problem", "an out=OK DN lacks an execution slot the act used"),
        "dn-mismatch": ("executed", "problem", "an executed value differs from the plan"),
        "dn-no-exec": ("executed", "note", "the profile names no execution slots for the ask"),
        "dn-partial-missing": ("executed", "note", "an out=PARTIAL DN lacks an execution slot"),
        "dn-resolved": ("executed", "note", "an executed value the receiver resolved; check it against the record"),
        "dn-noop-values": ("executed", "note", "out=NOOP, and the DN carries execution values"),
    }
)

#: The whole closed set: every code any rwcore function puts in a Problem.
PROBLEM_CODES: Final = MappingProxyType({**PARSE_CODES, **CHECK_CODES})


def _problem_setters() -> tuple[Any, ...] | None:
    names = ("code", "message", "tier", "slot", "expected", "got")
    if tuple(f.name for f in fields(Problem)) != names:  # pragma: no cover - Problem changed shape
        return None
    return tuple(Problem.__dict__[n].__set__ for n in names)


_PSET = _problem_setters()
_new = object.__new__


def problem(
    code: str, message: str, tier: str | None, slot: str | None, expected: str | None, got: str | None
) -> Problem:
    """``Problem(code, message, tier, slot, expected, got)``, built without the generic frozen-dataclass __init__
    (the hot paths make many)."""
    if _PSET is None:  # pragma: no cover
        return Problem(code, message, tier, slot, expected, got)
    p = _new(Problem)
    s_code, s_message, s_tier, s_slot, s_expected, s_got = _PSET
    s_code(p, code)
    s_message(p, message)
    s_tier(p, tier)
    s_slot(p, slot)
    s_expected(p, expected)
    s_got(p, got)
    return p


__all__ = ["CHECK_CODES", "PARSE_CODES", "PROBLEM_CODES", "CodeInfo", "FormError"]
