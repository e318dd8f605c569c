"""The reference-compatible API: ``rogerwilco``'s public functions with its signatures, return shapes and wording.

Code written for the reference runs by changing the import (``import rwcore as rw``). The ``*_lines`` variants
return the same findings as a typed :class:`~rwcore.CheckResult`, with problem codes. Every function here is the
typed implementation applied to lines: lines are parsed once with the compiled profile and checked by the same
native checks (the three checks in one native call each, no ``Message`` made), and problems and notes are rendered
as the reference's strings. Profile names follow the
reference's ``load_profile`` (``None`` or ``""`` is the core; ``"core"`` itself is refused).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from rwcore import _native
from rwcore._checks import acc_compare, check_result, encoding_profile, now_utc, readback_twin
from rwcore._codec import (
    VERSION,
    _switch,
    digest_raw,
    encode_under,
    line_digest,
    must_be_line,
    parse_line,
    twin_json,
)
from rwcore._codec import canonical as _canonical
from rwcore._errors import FormError
from rwcore._legend import legend
from rwcore._profiles import (
    BUILTIN_DIR,
    Profile,
    core_data,
    profile_dict,
    profile_from_spec,
    reference_parts,
    reference_profile,
)
from rwcore._types import CheckResult

#: The reference's name for its profile folder; here, rwcore's own.
PROFILES: Final[Path] = BUILTIN_DIR

__all__ = [
    "PROFILES",
    "VERSION",
    "FormError",
    "canonical",
    "check_dn",
    "check_dn_lines",
    "check_ho",
    "check_ho_lines",
    "check_rb",
    "check_rb_full",
    "check_rb_lines",
    "compare_acc",
    "digest",
    "encode",
    "from_json",
    "legend",
    "load_core",
    "load_profile",
    "make_rb",
    "now_utc",
    "parse",
    "to_json",
    "validate",
]


def load_core() -> dict[str, Any]:
    """The core vocabulary, as ``core.json`` holds it (a fresh copy)."""
    return json.loads(json.dumps(core_data()))  # type: ignore[no-any-return]


def load_profile(name: str | None) -> dict[str, Any]:
    """The core merged with the named profile, in the reference's dict shape (a fresh copy; compiled once)."""
    return profile_dict(reference_profile(name))


def parse(line: str, profile: str | None = None, spec: Any = None) -> tuple[dict[str, Any], list[str], list[str]]:
    """Parse one line: ``(message, errors, warnings)``, the message as the JSON twin (a dict).

    ``spec`` replaces ``profile``: a compiled :class:`~rwcore.Profile`, or the reference's spec dict (as
    ``load_profile`` returns it; compiled on every call, so pass a Profile where speed matters)."""
    if spec is None:
        grammar, switch = reference_parts(profile)
    else:
        prof = spec if isinstance(spec, Profile) else profile_from_spec(spec)
        grammar, switch = prof.grammar, _switch(prof)
    if type(line) is not str:
        must_be_line(line)
    return _native.parse_compat(line, grammar, switch)


def validate(line: str, profile: str | None = None, strict: bool = False) -> list[str]:
    """The errors of a line (and, with ``strict``, its warnings)."""
    _, errors, warnings = parse(line, profile)
    return errors + warnings if strict else errors


def encode(msg: dict[str, Any], profile: str | None = None) -> str:
    """JSON twin (dict) to line, validated (raises :class:`FormError`)."""
    if type(msg) is not dict and not isinstance(msg, Mapping):  # a dict is a Mapping: no ABC check for it
        raise FormError("a JSON twin is an object")
    slots = msg.get("slots", {})
    if type(slots) is not dict and not isinstance(slots, Mapping):
        raise FormError("slots must be an object")
    if type(profile) is str and profile:  # a name: the profile's parts in one lookup
        grammar, switch = reference_parts(profile)
    else:
        prof = encoding_profile(profile, slots, strict=True)
        grammar, switch = prof.grammar, _switch(prof)
    if msg.get("v", VERSION) != VERSION:
        raise FormError(f"version must be {VERSION}")
    if "type" not in msg or "id" not in msg:
        raise FormError("a JSON twin needs type and id")
    return encode_under(msg, slots, grammar, switch)


def to_json(line: str, profile: str | None = None) -> str:
    """A line to its JSON twin as a JSON string (raises :class:`FormError` on an invalid line)."""
    raw, errors, _ = parse(line, profile)
    if errors:
        raise FormError("; ".join(errors))
    return twin_json(raw)


def from_json(s: str, profile: str | None = None) -> str:
    """A JSON twin (as a string) to its line, validated."""
    try:
        msg = json.loads(s)
    except ValueError as e:
        raise FormError(f"not JSON: {e}") from e
    return encode(msg, profile)


def canonical(msg: dict[str, Any]) -> str:
    """Canonical JSON: sorted keys, no whitespace, UTF-8. Lists keep their order. Basis for ``h=``."""
    return _canonical(msg)


def digest(line_or_msg: str | dict[str, Any], profile: str | None = None) -> str:
    """Tier-2 integrity digest: the first 12 hex characters of SHA-256 over the canonical JSON form."""
    if isinstance(line_or_msg, str):
        return line_digest(line_or_msg, reference_profile(profile))
    return digest_raw(line_or_msg)


def compare_acc(
    expected: list[str],
    derived: list[str],
    keys: list[str] | None = None,
    spec: dict[str, Any] | None = None,
    derived_not: list[str] | None = None,
) -> tuple[list[str], list[str]]:
    """Tier 4: the sender's criteria against the receiver's; ``(problems, notes)``. ``spec`` (a dict with
    ``constraint_keys``, ``constraint_set_keys``, ``value_aliases``) replaces the core's tables."""
    grammar = _criteria_grammar(spec) if spec else reference_profile(None).grammar
    return acc_compare(expected, derived, keys, derived_not, grammar).compat()


def _criteria_grammar(spec: Mapping[str, Any]) -> _native.Grammar:
    """A grammar holding only tier 4's tables, from a reference-shaped dict (``constraint_keys``,
    ``constraint_set_keys``, ``value_aliases``)."""
    aliases = spec.get("value_aliases", {})
    return _native.Grammar(
        None,
        [],
        [],
        [],
        None,
        0,
        0,
        [],
        [str(k) for k in spec.get("constraint_keys", {})],
        [str(k) for k in spec.get("constraint_set_keys", ["must", "no", "scope", "src"])],
        [(str(canon), [str(a) for a in alts]) for canon, alts in aliases.items()],
    )


# The checks of lines, each in one native call (native/python/src/lines.rs): each line parsed with the reference's
# profile (a ``p=`` slot switching the parse) and checked against that profile, no ``Message`` made; an invalid line's
# errors are the problems (``ho-invalid``, ``rb-invalid``, ``dn-invalid``: "HO: <the parser's message>", the parse
# code as ``got``). They return the native findings, or with ``texts`` the reference's shape (each finding's message
# only, made natively); a slot value the check cannot read is a FormError. Each spells its call out rather than
# going through one generic wrapper: forwarding the arguments was a tenth of what a compatible check cost.


def _ho_lines(ho_line: str, record: Mapping[str, Any], profile: str | None, texts: bool) -> tuple[list[Any], list[Any]]:
    must_be_line(ho_line)
    grammar, switch = reference_parts(profile)
    try:
        return _native.ho_check_line(ho_line, grammar, switch, record, texts=texts)
    except ValueError as e:
        raise FormError(str(e)) from e


def _rb_lines(
    ho_line: str, rb_line: str, profile: str | None, expect_acc: list[str] | None, now: str | None, texts: bool
) -> tuple[list[Any], list[Any]]:
    must_be_line(ho_line)
    must_be_line(rb_line)
    grammar, switch = reference_parts(profile)
    expect = None if expect_acc is None else [str(x) for x in expect_acc]
    try:
        return _native.rb_check_lines(ho_line, rb_line, grammar, switch, expect, now or now_utc(), texts=texts)
    except ValueError as e:
        raise FormError(str(e)) from e


def _dn_lines(
    ho_line: str, dn_line: str, profile: str | None, rb_line: str | None, texts: bool
) -> tuple[list[Any], list[Any]]:
    must_be_line(ho_line)
    must_be_line(dn_line)
    grammar, switch = reference_parts(profile)
    now = now_utc() if rb_line else None  # the readback that made the plan is checked now (if the receipt lets it)
    try:
        return _native.dn_check_lines(ho_line, dn_line, grammar, switch, rb_line, now, texts=texts)
    except ValueError as e:
        raise FormError(str(e)) from e


def check_rb_lines(
    ho_line: str, rb_line: str, profile: str | None = None, expect_acc: list[str] | None = None, now: str | None = None
) -> CheckResult:
    """:func:`check_rb_full` as a typed result (problems with codes)."""
    return check_result(_rb_lines(ho_line, rb_line, profile, expect_acc, now, False))


def check_rb_full(
    ho_line: str, rb_line: str, profile: str | None = None, expect_acc: list[str] | None = None, now: str | None = None
) -> tuple[list[str], list[str]]:
    """Rule 1, five tiers plus expiry: ``(problems, notes)``; no problems means the readback passes."""
    return _rb_lines(ho_line, rb_line, profile, expect_acc, now, True)


def check_rb(ho_line: str, rb_line: str, profile: str | None = None, expect_acc: list[str] | None = None) -> list[str]:
    """Rule 1: the problems of :func:`check_rb_full` only."""
    return check_rb_full(ho_line, rb_line, profile, expect_acc)[0]


def check_ho_lines(ho_line: str, record: Mapping[str, Any], profile: str | None = None) -> CheckResult:
    """:func:`check_ho` as a typed result (problems with codes)."""
    return check_result(_ho_lines(ho_line, record, profile, False))


def check_ho(ho_line: str, record: dict[str, Any], profile: str | None = None) -> tuple[list[str], list[str]]:
    """Check 1, before sending: the HO against the record it was built from; ``(problems, notes)``."""
    return _ho_lines(ho_line, record, profile, True)


def check_dn_lines(ho_line: str, dn_line: str, profile: str | None = None, rb_line: str | None = None) -> CheckResult:
    """:func:`check_dn` as a typed result (problems with codes)."""
    return check_result(_dn_lines(ho_line, dn_line, profile, rb_line, False))


def check_dn(
    ho_line: str, dn_line: str, profile: str | None = None, rb_line: str | None = None
) -> tuple[list[str], list[str]]:
    """Check 3, after the act: the DN against the plan (the HO, plus ``rb_line`` when it passes
    :func:`check_rb_full` now); ``(problems, notes)``."""
    return _dn_lines(ho_line, dn_line, profile, rb_line, True)


def make_rb(
    ho_line: str,
    rb_id: str,
    profile: str | None = None,
    with_hash: bool = True,
    eta: str | None = None,
    acc: list[str] | None = None,
    do: str | None = None,
) -> str:
    """A correct readback line for an HO, as a code-side receiver sends it (raises :class:`FormError`)."""
    prof = reference_profile(profile)
    parsed = parse_line(ho_line, prof)
    ho = parsed.message
    if ho is None:
        raise FormError("; ".join(e.message for e in parsed.errors))
    twin = readback_twin(ho, rb_id, prof, with_hash, eta, acc, do)
    return encode(twin, profile)
