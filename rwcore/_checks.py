"""The three program-run checks, over decoded messages: the HO against the record (check 1), the readback against
the HO in five tiers plus expiry (check 2), and the done report against the plan (check 3); plus the readback a
code-side receiver sends.

The checks themselves are native (native/rw1/src/checks.rs and acc.rs), over the profile's grammar. Every function
returns a :class:`~rwcore.CheckResult` whose problems and notes carry a stable code from :data:`rwcore.CHECK_CODES`,
the tier, the slot, what was expected (the HO's, record's or plan's value) and what was got, and the reference's
exact wording. A slot value is text, an integer, a boolean or a tuple of them (None and a float are read too); any
other is a :class:`~rwcore.FormError`. The reference-compatible functions in ``rwcore._compat`` are these same
checks applied to parsed lines.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from typing import Any, Final

from rwcore import _native
from rwcore._codec import VERSION, encode_checked, message_digest, native_problems, parse_line
from rwcore._errors import FormError
from rwcore._profiles import Profile, get_profile, reference_profile, resolve_profile
from rwcore._types import CheckResult, Message, Problem

DEFAULT_RB: Final = ("item", "ask", "due")
#: The readback levels an HO's ``rb=`` may name.
RB_LEVELS: Final = frozenset({"echo", "all", "acc", "plan", "exec"})


def now_utc() -> str:
    """The current time as an ``exp=`` value, ``YYYYMMDDTHHMMZ``."""
    return _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%MZ")


def _seq(v: Any) -> Sequence[Any]:
    if v is None:
        return ()
    if isinstance(v, list | tuple):
        return v
    return (v,)


def check_result(found: tuple[list[Any], list[Any]]) -> CheckResult:
    """A native check's findings, ``(problems, notes)`` as tuples, as a :class:`~rwcore.CheckResult`."""
    problems, notes = found
    return CheckResult(tuple(native_problems(problems)), tuple(native_problems(notes)))


def checked(call: Any, *args: Any) -> tuple[list[Any], list[Any]]:
    """A native check's findings; a slot value it cannot read is a FormError."""
    try:
        return call(*args)  # type: ignore[no-any-return]
    except ValueError as e:
        raise FormError(str(e)) from e


# ---------------------------------------------------------------- check 1: the HO against the record


def ho_check(ho: Message, record: Mapping[str, Any], profile: Profile) -> CheckResult:
    """Check 1, before sending: every value the record holds is on the HO unchanged, and an exec ask asks
    ``rb=exec``. ``record`` maps slot names (and ``to``, ``item``, ``ask``) to values as written on the line."""
    profile = profile if isinstance(profile, Profile) else resolve_profile(profile)
    return check_result(checked(_native.ho_check, ho, record, profile.grammar))


# ---------------------------------------------------------------- check 2: the readback, five tiers


def rb_problems(
    ho: Message, rb: Message, profile: Profile, expect_acc: Sequence[str] | None, now: str | None
) -> tuple[list[Problem], list[Problem]]:
    """check_rb_full over decoded messages: (problems, notes)."""
    expect = None if expect_acc is None else [str(x) for x in expect_acc]
    problems, notes = checked(_native.rb_check, ho, rb, profile.grammar, expect, now or now_utc())
    return native_problems(problems), native_problems(notes)


def rb_check(
    ho: Message, rb: Message, profile: Profile, expect_acc: Sequence[str] | None = None, now: str | None = None
) -> CheckResult:
    """Check 2, rule 1: the readback (or a tool's statement) against the HO, five tiers plus expiry.

    ``expect_acc`` is the sender's withheld criteria (tier 4); ``now`` the clock as ``YYYYMMDDTHHMMZ`` (default: now).
    Tier 5 uses ``profile``'s exec map. No problems means the readback passes and ownership transfers.
    """
    profile = profile if isinstance(profile, Profile) else resolve_profile(profile)
    problems, notes = rb_problems(ho, rb, profile, expect_acc, now)
    return CheckResult(tuple(problems), tuple(notes))


def acc_check(
    expected: Sequence[str],
    derived: Sequence[str],
    keys: Sequence[str] | None = None,
    derived_not: Sequence[str] | None = None,
    profile: Profile | str | None = None,
) -> CheckResult:
    """Tier 4 on its own: the sender's criteria against the receiver's (``compare_acc``), under a profile's
    constraint keys and aliases (default: the core's)."""
    return acc_compare(expected, derived, keys, derived_not, resolve_profile(profile).grammar)


def acc_compare(
    expected: Sequence[Any],
    derived: Sequence[Any],
    keys: Sequence[Any] | None,
    derived_not: Sequence[Any] | None,
    grammar: _native.Grammar,
) -> CheckResult:
    """Tier 4 under a grammar's constraint keys and aliases (each criterion as ``str`` writes it)."""
    e, d, k, n = ([str(x) for x in v or ()] for v in (expected, derived, keys, derived_not))
    return check_result(_native.acc_compare(e, d, k, n, grammar))


# ---------------------------------------------------------------- check 3: the done report


def dn_receipt(ho: Message, dn: Message) -> tuple[list[Problem], bool]:
    """The type and receipt part of check 3: (problems, whether the types let the check go on)."""
    try:
        problems, go_on = _native.dn_receipt(ho, dn)
    except ValueError as e:
        raise FormError(str(e)) from e
    return native_problems(problems), go_on


def dn_check(ho: Message, dn: Message, profile: Profile, plan_rb: Message | None = None) -> CheckResult:
    """Check 3, after the act: the DN answers the HO and carries every execution slot with the value the plan
    held. ``plan_rb`` is a readback the caller vouches passed (it is not re-checked here, and no clock is read);
    its slots, less the RB's own (``h eta acc do not asm p exp``), join the plan."""
    profile = profile if isinstance(profile, Profile) else resolve_profile(profile)
    return check_result(checked(_native.dn_check, ho, dn, profile.grammar, plan_rb))


# ---------------------------------------------------------------- the readback a code-side receiver sends


def readback_twin(
    ho: Message,
    rb_id: str,
    exec_profile: Profile,
    with_hash: bool,
    eta: str | None,
    acc: Sequence[str] | None,
    do: str | None,
) -> dict[str, Any]:
    """The JSON twin of the readback ``make_rb`` builds (before encoding)."""
    rbset = [str(x).lower() for x in _seq(ho.slots.get("rb"))]
    ho_flat: dict[str, Any] = {"item": ho.item, **ho.slots}
    named = [k for k in rbset if k not in DEFAULT_RB and k not in RB_LEVELS]
    if "all" in rbset:
        keys = [k for k in ho_flat if k not in ("rb", "acc")]
    elif "exec" in rbset:
        exec_slots = exec_profile.exec_slots(ho.slots.get("ask"))
        keys = [*DEFAULT_RB, *(k for k in exec_slots if k in ho_flat and k not in DEFAULT_RB), *named]
    else:
        keys = [*DEFAULT_RB, *named]
    slots: dict[str, Any] = {k: ho_flat[k] for k in keys if k in ho_flat and k != "item"}
    if acc:
        slots["acc"] = list(acc)
    if do:
        slots["do"] = do
    if "p" in ho.slots:
        slots["p"] = ho.slots["p"]
    if with_hash:
        slots["h"] = message_digest(ho)
    if eta:
        slots["eta"] = eta
    return {
        "v": VERSION,
        "type": "RB",
        "id": rb_id,
        "re": ho.id,
        "from": ho.to,
        "to": ho.from_,
        "item": ho.item,
        "slots": slots,
        "tail": None,
    }


def encoding_profile(profile: Profile | str | None, slots: Mapping[str, Any], strict: bool) -> Profile:
    """The profile ``encode`` validates with: the one given, else the one the twin's ``p=`` names, else the core."""
    if isinstance(profile, Profile):
        return profile
    name = profile or slots.get("p")
    if not name:
        return get_profile(None)
    if not isinstance(name, str):
        raise FormError(f"unknown profile {name!r} (profile names are lowercase letters, digits, - and _)")
    if strict or profile is None or profile == "":
        return reference_profile(name)
    return get_profile(name)


def make_readback(
    ho: Message,
    rb_id: str,
    profile: Profile | str | None,
    with_hash: bool = True,
    eta: str | None = None,
    acc: Sequence[str] | None = None,
    do: str | None = None,
) -> Message:
    """The correct readback for an HO, as a code-side receiver sends it: the echo set (every slot under
    ``rb=all``; the execution slots the HO carries under ``rb=exec``), ``p=``, ``h=`` and the receiver's own
    ``acc``/``do``/``eta``. Slots the receiver resolves itself are not in the HO; add them before sending.
    Raises :class:`FormError` when the readback would not be a valid line (e.g. an ``rb_id`` not ``<to>-<n>``)."""
    prof = resolve_profile(profile) if not (profile is None or profile == "") else get_profile(None)
    twin = readback_twin(ho, rb_id, prof, with_hash, eta, acc, do)
    enc = encoding_profile(profile, twin["slots"], strict=False)
    parsed = parse_line(encode_checked(twin, twin["slots"], enc), enc)
    rb = parsed.message
    if rb is None:  # pragma: no cover - encode_checked has already refused a line with errors
        raise FormError("; ".join(e.message for e in parsed.errors))
    return rb
