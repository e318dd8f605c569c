"""The three program-run checks, over decoded messages: the HO against the record (check 1), the readback against
the HO in five tiers plus expiry (check 2), and the done report against the plan (check 3); plus the readback a
code-side receiver sends.

Every function returns a :class:`~rwcore.CheckResult` whose problems and notes carry a stable code from
:data:`rwcore.CHECK_CODES`, the tier, the slot, what was expected (the HO's, record's or plan's value) and what was
got, and the reference's exact wording. The reference-compatible functions in ``rwcore._compat`` are these same
functions applied to parsed lines.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any, Final

from rwcore._acc import RB_LEVELS, compare, split_constraint
from rwcore._codec import VERSION, encode_checked, message_digest, parse_message
from rwcore._errors import FormError, problem
from rwcore._profiles import TIME_RE, Profile, get_profile, reference_profile, resolve_profile
from rwcore._types import CheckResult, Message, Problem

DEFAULT_RB: Final = ("item", "ask", "due")
#: What an RB adds for itself; never part of the plan.
RB_OWN: Final = frozenset({"h", "eta", "acc", "do", "not", "asm", "p", "exp"})
_NOT_PLAN: Final = frozenset({"rb", "acc", "keys", "p"})
_NOT_ALL: Final = frozenset({"rb", "p", "acc", "exp"})


def now_utc() -> str:
    """The current time as an ``exp=`` value, ``YYYYMMDDTHHMMZ``."""
    return _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%MZ")


def expired(exp: object, now: str) -> bool:
    """True when an ``exp=`` time has passed (both are ``YYYYMMDDTHHMMZ``, so they compare as strings)."""
    if type(exp) is not str or type(now) is not str:
        exp, now = (str(exp) if exp else ""), str(now)
    return exp != "" and now >= exp and TIME_RE.match(exp) is not None


def show(v: Any) -> str:
    """A decoded value as written on the line (lists joined with +, booleans Y/N)."""
    if isinstance(v, list | tuple):
        return "+".join(str(x) for x in v)
    if isinstance(v, bool):
        return "Y" if v else "N"
    return str(v)


def _seq(v: Any) -> Sequence[Any]:
    if v is None:
        return ()
    if isinstance(v, list | tuple):
        return v
    return (v,)


def _pb(
    out: list[Problem],
    code: str,
    tier: str,
    message: str,
    slot: str | None = None,
    expected: Any = None,
    got: Any = None,
) -> None:
    out.append(
        problem(
            code, message, tier, slot, None if expected is None else show(expected), None if got is None else show(got)
        )
    )


# ---------------------------------------------------------------- check 1: the HO against the record


def ho_check(ho: Message, record: Mapping[str, Any], profile: Profile) -> CheckResult:
    """Check 1, before sending: every value the record holds is on the HO unchanged, and an exec ask asks
    ``rb=exec``. ``record`` maps slot names (and ``to``, ``item``, ``ask``) to values as written on the line."""
    problems: list[Problem] = []
    notes: list[Problem] = []
    profile = profile if isinstance(profile, Profile) else resolve_profile(profile)
    if ho.type != "HO":
        _pb(problems, "wrong-type", "form", f"first line is {ho.type}, expected HO", None, "HO", ho.type)
        return CheckResult(tuple(problems))
    flat: dict[str, Any] = {"from": ho.from_, "to": ho.to, "item": ho.item, **ho.slots}
    for k, v in record.items():
        want = v if type(v) is str else show(v)
        if k not in flat:
            _pb(problems, "record-missing", "record", f"record: HO does not carry {k} (record has {k}={want})", k, want)
        else:
            got = flat[k]
            if type(got) is not str:
                got = show(got)
            if got != want:
                _pb(
                    problems,
                    "record-mismatch",
                    "record",
                    f"record: {k} mismatch: record {want} vs HO {got}",
                    k,
                    want,
                    got,
                )
    ask = ho.slots.get("ask")
    exec_slots = profile.exec_slots(ask)
    if exec_slots:
        levels = {str(x).lower() for x in _seq(ho.slots.get("rb"))}
        if "exec" not in levels:
            msg = f"ask {ask} is an irreversible act under profile {profile.declared}: the HO must ask rb=exec"
            _pb(problems, "rb-level", "record", msg, "rb", "exec", ho.slots.get("rb"))
        for k in exec_slots:
            if k in flat and k not in record:
                msg = f"{k}={show(flat[k])} has no value in the record to check against"
                _pb(notes, "record-no-value", "record", msg, k, None, flat[k])
            elif k not in flat and k not in record:
                msg = f"{k} is in neither the HO nor the record; the receiver resolves it and the readback carries it"
                _pb(notes, "record-unresolved", "record", msg, k)
    return CheckResult(tuple(problems), tuple(notes))


# ---------------------------------------------------------------- check 2: the readback, five tiers


def rb_problems(
    ho: Message, rb: Message, profile: Profile, expect_acc: Sequence[str] | None, now: str | None
) -> tuple[list[Problem], list[Problem]]:
    """check_rb_full over decoded messages: (problems, notes)."""
    problems: list[Problem] = []
    notes: list[Problem] = []
    if ho.type != "HO":
        _pb(problems, "wrong-type", "form", f"first line is {ho.type}, expected HO", None, "HO", ho.type)
    if rb.type != "RB":
        _pb(problems, "wrong-type", "form", f"second line is {rb.type}, expected RB", None, "RB", rb.type)
    if problems:
        return problems, notes
    hs, rs = ho.slots, rb.slots
    # tier 1, receipt
    if rb.re != ho.id:
        msg = f"tier1 receipt: RB re={rb.re} does not point at HO id {ho.id}"
        _pb(problems, "receipt-re", "receipt", msg, "re", ho.id, rb.re)
    if rb.from_ != ho.to or rb.to != ho.from_:
        msg = f"tier1 receipt: RB must come from {ho.to} to {ho.from_}; got from={rb.from_} to={rb.to}"
        _pb(
            problems,
            "receipt-route",
            "receipt",
            msg,
            "from",
            f"from={ho.to} to={ho.from_}",
            f"from={rb.from_} to={rb.to}",
        )
    # expiry
    h_exp, r_exp = hs.get("exp"), rs.get("exp")
    clock = now or now_utc()
    if h_exp is not None or r_exp is not None:
        _expiry(problems, h_exp, r_exp, clock)
    # tier 2, integrity
    if "h" in rs:
        want = message_digest(ho)
        if rs["h"] != want:
            msg = f"tier2 integrity: h={rs['h']} but digest of the HO is {want}"
            _pb(problems, "integrity-digest", "integrity", msg, "h", want, rs["h"])
    # tier 3, echo
    levels, keys = _rb_levels(hs.get("rb"))
    if "all" in levels:  # every slot, in the HO's order
        ho_flat: dict[str, Any] = {"item": ho.item, **hs}
        rb_flat: dict[str, Any] = {"item": rb.item, **rs}
        keys = tuple(k for k in ho_flat if k not in _NOT_ALL)
    else:  # the slots named, in their own order (a copy of a dict is cheaper than a merge into a new one)
        ho_flat, rb_flat = dict.copy(hs), dict.copy(rs)  # type: ignore[arg-type]  # a message's slots: a dict
        ho_flat["item"], rb_flat["item"] = ho.item, rb.item
    for k in keys:
        if k not in ho_flat:
            continue
        hv = ho_flat[k]
        if k not in rb_flat:
            msg = f"tier3 echo: RB does not echo {k} (HO has {k}={show(hv)})"
            _pb(problems, "echo-missing", "echo", msg, k, hv)
        elif rb_flat[k] != hv:
            msg = f"tier3 echo: {k} mismatch: HO {show(hv)} vs RB {show(rb_flat[k])}"
            _pb(problems, "echo-mismatch", "echo", msg, k, hv, rb_flat[k])
    # tier 4, comprehension
    if "acc" in levels or "plan" in levels:
        tables = profile.acc_tables
        derived = rs.get("acc")
        if not derived:
            level = "plan" if "plan" in levels else "acc"
            msg = f"tier4 comprehension: HO asked for rb={level} but RB carries no acc="
            _pb(problems, "acc-missing", "comprehension", msg, "acc")
        else:
            expected = expect_acc if expect_acc is not None else hs.get("acc")
            if expected is None:
                msg = (
                    "tier4: no expected criteria supplied (withheld set missing and HO sent none); "
                    "acc= recorded but not compared"
                )
                _pb(notes, "acc-not-compared", "comprehension", msg, "acc", None, derived)
            else:
                p4, n4 = compare(_seq(expected), _seq(derived), _seq(hs.get("keys")), _seq(rs.get("not")), tables)
                problems += p4
                notes += n4
        if "plan" in levels and not rs.get("do"):
            _pb(
                problems,
                "plan-do-missing",
                "comprehension",
                "tier4 comprehension: rb=plan requires do= on the RB",
                "do",
            )
        not_list = _seq(rs.get("not"))
        if not_list:
            exp_must = [v for k, v in map(split_constraint, _seq(expect_acc or hs.get("acc") or ())) if k == "must"]
            same = tables.same_value
            for t in not_list:
                if any(same(t, v) == 1 for v in exp_must):
                    msg = f"tier4 comprehension: receiver excludes {t} which the sender requires"
                    _pb(problems, "acc-excluded", "comprehension", msg, "not", None, t)
    # tier 5, execution
    if "exec" in levels:
        ask = str(hs.get("ask") or "")
        exec_slots = profile.exec_slots(ask)
        if not exec_slots:
            msg = (
                f"tier5 execution: the profile names no execution slots for ask {ask or '?'}; "
                "nothing checked beyond the echo"
            )
            _pb(notes, "exec-none", "execution", msg, "ask", None, ask or None)
        elif not _same_exec(exec_slots, ho_flat, rb_flat):
            for k in exec_slots:
                if k not in rb_flat:
                    msg = f"tier5 execution: RB does not carry {k}, which the act needs"
                    _pb(problems, "exec-missing", "execution", msg, k, ho_flat.get(k))
                elif k in ho_flat and rb_flat[k] != ho_flat[k]:
                    msg = f"tier5 execution: {k} mismatch: HO {show(ho_flat[k])} vs RB {show(rb_flat[k])}"
                    _pb(problems, "exec-mismatch", "execution", msg, k, ho_flat[k], rb_flat[k])
    return problems, notes


def _expiry(problems: list[Problem], h_exp: Any, r_exp: Any, clock: str) -> None:
    """Expiry: a handoff or a prepared statement past its ``exp=`` cannot be confirmed, and a statement may not
    outlive its handoff."""
    if type(clock) is type(h_exp) is type(r_exp) is str and clock < r_exp <= h_exp:
        return  # the usual case, told at once: both ahead of the clock, the statement's within the HO's
    if expired(h_exp, clock):
        msg = f"expired: the HO expired at {h_exp} (now {clock}); send a new HO from the record"
        _pb(problems, "expired-ho", "expiry", msg, "exp", clock, h_exp)
    if expired(r_exp, clock):
        msg = f"expired: the statement expired at {r_exp} (now {clock}); prepare again"
        _pb(problems, "expired-rb", "expiry", msg, "exp", clock, r_exp)
    if h_exp and r_exp and str(r_exp) > str(h_exp):
        msg = f"expired: the statement's exp={r_exp} outlives the HO's exp={h_exp}"
        _pb(problems, "rb-outlives-ho", "expiry", msg, "exp", h_exp, r_exp)


_RB_LEVELS: dict[tuple[str, ...], tuple[frozenset[str], tuple[str, ...]]] = {}
_STR_ONLY: Final = frozenset((str,))


def _rb_levels(rb: Any) -> tuple[frozenset[str], tuple[str, ...]]:
    """An HO's ``rb=`` read: (its levels, the slots the echo compares unless the level is ``all``: item, ask, due
    and any slot it names). Kept per value, for a parsed value (a tuple of strings): a conversation repeats a few."""
    cacheable = type(rb) is tuple and _STR_ONLY.issuperset(map(type, rb))
    hit = _RB_LEVELS.get(rb) if cacheable else None
    if hit is None:
        rbset = [str(x).lower() for x in _seq(rb)]
        levels = frozenset(x for x in rbset if x in RB_LEVELS)
        hit = levels, (*DEFAULT_RB, *(x for x in rbset if x not in RB_LEVELS and x not in DEFAULT_RB))
        if cacheable:
            if len(_RB_LEVELS) >= 1024:
                _RB_LEVELS.clear()
            _RB_LEVELS[rb] = hit
    return hit


_EXEC_VIEWS: dict[tuple[str, ...], tuple[frozenset[str], Callable[[Mapping[str, Any]], Any]]] = {}


def _same_exec(exec_slots: tuple[str, ...], ho_flat: Mapping[str, Any], rb_flat: Mapping[str, Any]) -> bool:
    """True when both carry every execution slot with the same values (the common case, checked at once; any
    other case takes the slot-by-slot loop that words the problems)."""
    view = _EXEC_VIEWS.get(exec_slots)
    if view is None:
        if len(_EXEC_VIEWS) >= 1024:
            _EXEC_VIEWS.clear()
        view = _EXEC_VIEWS[exec_slots] = frozenset(exec_slots), itemgetter(*exec_slots)
    keys, values = view
    return bool(ho_flat.keys() >= keys and rb_flat.keys() >= keys and values(ho_flat) == values(rb_flat))


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
    tables = resolve_profile(profile).acc_tables
    problems, notes = compare(expected, derived, keys, derived_not, tables)
    return CheckResult(tuple(problems), tuple(notes))


# ---------------------------------------------------------------- check 3: the done report


def dn_receipt(ho: Message, dn: Message) -> tuple[list[Problem], bool]:
    """The type and receipt part of check 3: (problems, whether the types let the check go on)."""
    problems: list[Problem] = []
    if ho.type != "HO":
        _pb(problems, "wrong-type", "form", f"first line is {ho.type}, expected HO", None, "HO", ho.type)
    if dn.type != "DN":
        _pb(problems, "wrong-type", "form", f"second line is {dn.type}, expected DN", None, "DN", dn.type)
    if problems:
        return problems, False
    if dn.re != ho.id:
        _pb(
            problems,
            "dn-receipt-re",
            "receipt",
            f"receipt: DN re={dn.re} does not point at HO id {ho.id}",
            "re",
            ho.id,
            dn.re,
        )
    if dn.from_ != ho.to or dn.to != ho.from_:
        msg = f"receipt: DN must come from {ho.to} to {ho.from_}; got from={dn.from_} to={dn.to}"
        _pb(
            problems,
            "dn-receipt-route",
            "receipt",
            msg,
            "from",
            f"from={ho.to} to={ho.from_}",
            f"from={dn.from_} to={dn.to}",
        )
    if dn.item != ho.item:
        _pb(
            problems,
            "dn-item",
            "receipt",
            f"receipt: DN item {dn.item} is not the HO's {ho.item}",
            "item",
            ho.item,
            dn.item,
        )
    return problems, True


def plan_of(ho: Message, plan_rb: Message | None) -> dict[str, Any]:
    """The plan: the HO's slots (less ``rb acc keys p``), joined by a passing readback's (less its own)."""
    plan = {k: v for k, v in ho.slots.items() if k not in _NOT_PLAN}
    if plan_rb is not None:
        plan.update({k: v for k, v in plan_rb.slots.items() if k not in RB_OWN})
    return plan


def dn_executed(
    ho: Message, dn: Message, profile: Profile, plan: Mapping[str, Any], problems: list[Problem], notes: list[Problem]
) -> None:
    """The executed part of check 3: each execution slot as done against the plan."""
    ask = ho.slots.get("ask")
    exec_slots = profile.exec_slots(ask)
    done = dn.slots
    out = done.get("out")
    keys: Iterable[str]
    if not exec_slots:
        msg = f"the profile names no execution slots for ask {ask or '?'}; only the slots the DN carries are compared"
        _pb(notes, "dn-no-exec", "executed", msg, "ask", None, ask)
        keys = [k for k in done if k in plan]
    else:
        keys = exec_slots
    for k in keys:
        if k not in done:
            if out == "OK":
                _pb(
                    problems,
                    "dn-missing",
                    "executed",
                    f"executed: DN does not carry {k}, which the act used",
                    k,
                    plan.get(k),
                )
            elif out == "PARTIAL":
                _pb(notes, "dn-partial-missing", "executed", f"executed: DN does not carry {k}", k, plan.get(k))
        elif k in plan:
            if plan[k] != done[k]:
                msg = f"executed: {k} mismatch: plan {show(plan[k])} vs DN {show(done[k])}"
                _pb(problems, "dn-mismatch", "executed", msg, k, plan[k], done[k])
        else:
            msg = (
                f"executed: {k}={show(done[k])} was resolved by the receiver and is not in the plan; "
                "check it against the record"
            )
            _pb(notes, "dn-resolved", "executed", msg, k, None, done[k])
    if out == "NOOP" and any(k in done for k in exec_slots):
        _pb(notes, "dn-noop-values", "executed", "out=NOOP but the DN carries execution values", "out", None, out)


def dn_check(ho: Message, dn: Message, profile: Profile, plan_rb: Message | None = None) -> CheckResult:
    """Check 3, after the act: the DN answers the HO and carries every execution slot with the value the plan
    held. ``plan_rb`` is a readback the caller vouches passed (it is not re-checked here, and no clock is read);
    its slots, less the RB's own (``h eta acc do not asm p exp``), join the plan."""
    profile = profile if isinstance(profile, Profile) else resolve_profile(profile)
    problems, go_on = dn_receipt(ho, dn)
    notes: list[Problem] = []
    if go_on:
        dn_executed(ho, dn, profile, plan_of(ho, plan_rb), problems, notes)
    return CheckResult(tuple(problems), tuple(notes))


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
    rb, _, errors, _, _ = parse_message(encode_checked(twin, twin["slots"], enc), enc)
    if rb is None:  # pragma: no cover - encode_checked has already refused a line with errors
        raise FormError("; ".join(e.message for e in errors))
    return rb
