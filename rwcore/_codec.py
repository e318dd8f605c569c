"""The codec: a line to its JSON twin and back, the canonical form and the ``h=`` digest.

:func:`parse_line` never raises on a line: every finding comes back as a :class:`~rwcore.Problem` with a stable code
(see :data:`rwcore.PARSE_CODES`) and the reference's wording. It follows the reference parser step for step (the
order of its findings, the ``p=`` profile switch, the ``x_`` extension keys, the ``<from>-<n>`` id rule, the closed
answer vocabulary, the 300-character tail), with every lookup precompiled in the :class:`~rwcore.Profile`.

Two passes share that contract. A clean line, one with no finding at all (what nearly every line on a topic is), is
taken by the clean path: one compiled regex per message type (``TypeDef.clean``) checks its form and every value it
can, then the checks a regex cannot do (duplicates, required slots, the rules over the whole line, the values
decoded after the match). Any line the clean path declines goes to the full pass, which finds everything, in the
reference's order. The clean path may decline a clean line; it never takes a line the full pass would fault (a
property test holds it to that).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import FrozenInstanceError, fields
from itertools import repeat
from json.encoder import encode_basestring as _jstr
from operator import add, itemgetter
from typing import Any, Final

from rwcore import _native
from rwcore._errors import FormError, problem
from rwcore._profiles import (
    ENVELOPE,
    ID_RE,
    KEY_RE,
    Profile,
    TypeDef,
    get_profile,
    resolve_profile,
    switch_profile,
)
from rwcore._types import Message, Problem, Slots, _freeze

VERSION: Final = "RW1"

_ANS_PASS_RE = re.compile(r"-?\d+(\.\d+)?|\d{8}")
_CANON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class Parsed:
    """One parsed line (immutable).

    ``message`` is the decoded line, or None when there are errors. ``raw`` is the reference-shaped JSON twin (a dict
    with ``v type id re from to item slots tail``, lists as lists), present for invalid lines too, holding whatever
    the parser decoded before it stopped; for a valid line it is built on first use. ``profile`` is the profile
    that validated the line (after a ``p=`` switch).
    """

    __slots__ = ("_raw", "errors", "message", "profile", "warnings")

    message: Message | None
    errors: tuple[Problem, ...]
    warnings: tuple[Problem, ...]
    profile: Profile
    _raw: dict[str, Any] | None

    def __init__(
        self,
        message: Message | None,
        errors: tuple[Problem, ...],
        warnings: tuple[Problem, ...],
        raw: dict[str, Any] | None,
        profile: Profile,
    ) -> None:
        if raw is None and message is None:
            raise FormError("a Parsed needs its message or its raw twin")
        _P_MESSAGE(self, message)
        _P_ERRORS(self, errors)
        _P_WARNINGS(self, warnings)
        _P_RAW(self, raw)
        _P_PROFILE(self, profile)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    @property
    def raw(self) -> dict[str, Any]:
        """The reference-shaped JSON twin."""
        raw: dict[str, Any] | None = self._raw
        if raw is None:
            assert self.message is not None
            raw = self.message.to_dict()
            object.__setattr__(self, "_raw", raw)
        return raw

    @property
    def ok(self) -> bool:
        """True when the line is valid."""
        return not self.errors

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Parsed):
            return NotImplemented
        return (self.message, self.errors, self.warnings, self.profile) == (
            other.message,
            other.errors,
            other.warnings,
            other.profile,
        ) and self.raw == other.raw

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Parsed(message={self.message!r}, errors={self.errors!r}, warnings={self.warnings!r})"


_P_MESSAGE = Parsed.__dict__["message"].__set__
_P_ERRORS = Parsed.__dict__["errors"].__set__
_P_WARNINGS = Parsed.__dict__["warnings"].__set__
_P_RAW = Parsed.__dict__["_raw"].__set__
_P_PROFILE = Parsed.__dict__["profile"].__set__


def _p(errors: list[Problem], code: str, message: str, slot: str | None = None, got: str | None = None) -> None:
    errors.append(problem(code, message, "form", slot, None, got))


def _value_problem(out: list[Problem], code: str, key: str, raw: str, suffix: str, prof: Profile) -> None:
    out.append(problem(code, f"{key}={raw}{suffix}", "form", key, prof.slot_types[key], raw))


def parse_raw(line: str, prof: Profile) -> tuple[dict[str, Any], list[Problem], list[Problem], Profile]:
    """The parser proper: (raw JSON twin, errors, warnings, the profile that validated). Never raises on a line.

    A clean line (no finding at all, the common case) is taken by :func:`_clean`; any other by :func:`_full_pass`.
    """
    if line[-1:] == "\n":
        line = line.rstrip("\n")
    clean = _clean(line, prof)
    if clean is not None:
        return clean, [], [], prof
    return _full_pass(line, prof)


def _full_pass(line: str, prof: Profile) -> tuple[dict[str, Any], list[Problem], list[Problem], Profile]:
    """:func:`parse_raw` for any line (a trailing newline already cut), findings and all.

    Findings come in the reference's order: the tokens' form, the ``p=`` switch, the values in token order, the
    required slots, then the rules over the whole line. Under a named profile (or with no ``p=`` token) one pass
    over the tokens does both the form and the values, keeping the two kinds of finding in separate lists.
    """
    errors: list[Problem] = []
    warnings: list[Problem] = []
    stripped = line.strip()
    if line != stripped:
        _p(warnings, "whitespace", "leading or trailing whitespace")
        line = stripped
    tail: str | None = None
    cut = line.find(" // ")
    if cut >= 0:
        line, tail = line[:cut], line[cut + 4 :]
    elif line.endswith(" //"):
        line, tail = line[:-3], ""
    toks = line.split(" ")
    if "" in toks:
        _p(warnings, "multiple-spaces", "multiple consecutive spaces; separators are single spaces")
        toks = [t for t in toks if t != ""]
    slots: dict[str, Any] = {}
    msg: dict[str, Any] = {
        "v": None,
        "type": None,
        "id": None,
        "re": None,
        "from": None,
        "to": None,
        "item": None,
        "slots": slots,
        "tail": tail,
    }
    if len(toks) < 3:
        _p(errors, "too-short", "a message needs at least: RW1 <TYPE> <id>")
        return msg, errors, warnings, prof
    v, mtype, mid = toks[0], toks[1], toks[2]
    msg["v"], msg["type"], msg["id"] = v, mtype, mid
    if v != VERSION:
        _p(errors, "bad-version", f"version token {v!r} is not {VERSION} (rule 2: reply UN why=VER)", got=v)
        return msg, errors, warnings, prof
    tdef = prof.types.get(mtype)
    if tdef is None:
        types = " ".join(prof.types)
        _p(errors, "unknown-type", f"type {mtype!r} unknown; types are {types} (rule 2: reply UN why=UNK)", got=mtype)
        return msg, errors, warnings, prof
    if not ID_RE.match(mid):
        _p(errors, "bad-id", f"id {mid!r} must match [A-Za-z0-9._-]+", got=mid)
    seen: dict[str, str] = {}
    # findings about the values come after the form findings and the p= switch: collected apart, joined below
    v_errors: list[Problem] = []
    v_warnings: list[Problem] = []
    two_pass = prof.declared is None and " p=" in line
    info = tdef.slot_info
    for tok in toks[3:]:
        k, eq, val = tok.partition("=")
        si = info.get(k)
        if si is None or not eq or not val or k in seen:
            # the slow path, in the reference's order: form, duplicate, empty, then an unknown key
            if not eq:
                text = f"{tok!r}: expected key=value (positional slots are only RW1, TYPE and id)"
                _p(errors, "not-key-value", text, got=tok)
                continue
            if si is None and not KEY_RE.match(k):
                _p(errors, "bad-key", f"key {k!r} must be lowercase [a-z][a-z0-9_]*", got=k)
                continue
            if k in seen:
                _p(errors, "duplicate-key", f"duplicate key {k}", slot=k, got=val)
                continue
            if val == "":
                _p(errors, "empty-value", f"{k}= has an empty value; omit the slot instead", slot=k)
                continue
            seen[k] = val
            if two_pass:
                continue
            if k.startswith("x_"):
                slots[k] = val
            else:
                text = f"unknown key {k!r} ignored (extension keys start with x_)"
                _p(v_warnings, "unknown-key", text, slot=k, got=val)
            continue
        seen[k] = val
        if two_pass:
            continue
        kind, data, envelope, ok = si
        if not ok:
            _p(v_warnings, "slot-not-for-type", f"slot {k} is not defined for type {mtype}", slot=k, got=val)
        if kind == 1:
            if val not in data:
                _value_problem(
                    v_errors,
                    "unknown-code",
                    k,
                    val,
                    f": not a known {prof.slot_types[k][5:]} code (rule 2: reply UN why=UNK, do not guess)",
                    prof,
                )
            decoded: Any = val
        elif kind == 0:
            decoded = val
        elif kind == 3:
            if not data[0](val):
                _value_problem(v_errors, data[1], k, val, data[2], prof)
            decoded = val
        else:  # 2 and 4: the validator
            decoded = data(val, v_errors)
        if envelope:
            msg[k] = decoded
        else:
            slots[k] = decoded
    pv = seen.get("p")
    if pv is not None:
        if prof.declared is not None and pv != prof.declared:
            text = f"message names profile p={pv} but validation used profile {prof.declared}"
            _p(warnings, "profile-mismatch", text, slot="p", got=pv)
        if prof.declared is None:
            try:
                prof = switch_profile(pv, prof.dirs)
            except FormError as e:
                _p(errors, "unknown-profile", str(e), slot="p", got=pv)
            else:
                tdef = prof.types[mtype]
    if two_pass:
        validators = prof.validators
        allowed = tdef.allowed
        for k, val in seen.items():
            check = validators.get(k)
            if check is None:
                if k.startswith("x_"):
                    slots[k] = val
                else:
                    text = f"unknown key {k!r} ignored (extension keys start with x_)"
                    _p(v_warnings, "unknown-key", text, slot=k, got=val)
                continue
            if k not in allowed:
                _p(v_warnings, "slot-not-for-type", f"slot {k} is not defined for type {mtype}", slot=k, got=val)
            decoded = check(val, v_errors)
            if k in ENVELOPE:
                msg[k] = decoded
            else:
                slots[k] = decoded
    if v_errors:
        errors += v_errors
    if v_warnings:
        warnings += v_warnings
    for k in tdef.required:
        if k not in seen:
            _p(errors, "missing-slot", f"{mtype} requires {k}", slot=k)
    _line_rules(seen, msg["from"], msg["to"], errors, warnings, prof, mtype, mid, tail)
    return msg, errors, warnings, prof


_dict_pop = dict.pop
_dict_set = dict.__setitem__
_EQ = repeat("=")
_ONE = repeat(1)
_split = str.split


_CleanSlots = tuple[TypeDef, str, dict[str, Any], str | None, str | None, str | None, str | None, str | None]


def _clean_match(line: str, prof: Profile) -> tuple[TypeDef, str, str, str | None] | None:
    """(type, id, slots text, tail) of a line whose form ``TypeDef.clean`` passes, else None. The slots text is
    every ``key=value`` token after one space each."""
    if line.strip() != line:
        return None
    end = line.find(" ", 4)
    tdef = prof.types.get(line[4:end]) if end > 4 else None
    if tdef is None or tdef.clean is None:
        return None
    m = tdef.clean(line)
    if m is None:
        return None
    mid, body, tail, bare = m.groups()
    return tdef, mid, body, "" if bare else tail


def _clean_slots(line: str, prof: Profile, frozen: bool) -> _CleanSlots | None:
    """A line the parser passes without a single finding, taken apart: (its type, id, slots decoded, tail, re,
    from, to, item); None for any other line (the full pass then finds everything, in the reference's order).

    One regex (``TypeDef.clean``) checks the form and every value it can; duplicates, required slots, the rules
    over the whole line and the values decoded after the match follow. ``frozen``: list values as tuples."""
    got = _clean_match(line, prof)
    if got is None:
        return None
    tdef, mid, body, tail = got
    make = Slots if frozen else dict  # a Message's read-only slots are built as such, not copied
    words = _words(body)
    if words is not None:  # the usual case
        n = len(words) // 2  # tokens
        it = iter(words)
        next(it)
        slots: dict[str, Any] = make(zip(it, it, strict=True))
    else:
        n = body.count(" ")
        slots = make(map(_split, body[1:].split(" "), _EQ, _ONE))
    if len(slots) != n:
        return None  # a duplicate key
    return _clean_rest(tdef, mid, slots, tail, prof, frozen)


def _clean_rest(
    tdef: TypeDef, mid: str, slots: dict[str, Any], tail: str | None, prof: Profile, frozen: bool
) -> _CleanSlots | None:
    """The checks of a clean line after its form: ``slots`` holds each token's raw value by key (taken over and
    decoded in place, through dict's own methods: it may be the Slots of the Message being built). Required slots,
    the rules over the whole line, then the values decoded after the match."""
    keys = slots.keys()
    if not tdef.required_set <= keys:
        return None
    pop = _dict_pop
    re_, frm, to, item = (
        pop(slots, "re", None),
        pop(slots, "from", None),
        pop(slots, "to", None),
        pop(slots, "item", None),
    )
    errors: list[Problem] = []
    if tdef.code in _TYPES_WITH_RULES:
        warnings: list[Problem] = []
        _line_rules(slots, frm, to, errors, warnings, prof, tdef.code, mid, tail)
        if errors or warnings:
            return None
    elif not _plain_rules_pass(mid, frm, to, tail, prof):
        return None
    info = tdef.slot_info
    put = _dict_set
    for k in tdef.decode_keys:
        if k not in slots:
            continue
        kind, data, _, _ = info[k]
        raw = slots[k]
        if kind == 4:  # strings as written, joined with +
            if "+" not in raw:
                put(slots, k, (raw,) if frozen else [raw])
            else:
                put(slots, k, (tuple if frozen else list)(filter(None, raw.split("+"))))
            continue
        decoded = data(raw, errors)
        if errors:
            return None
        put(slots, k, _freeze(decoded) if frozen and type(decoded) is list else decoded)
    return tdef, mid, slots, tail, re_, frm, to, item


def _clean(line: str, prof: Profile) -> dict[str, Any] | None:
    """The JSON twin of a clean line (see :func:`_clean_slots`), or None."""
    got = _clean_slots(line, prof, False)
    if got is None:
        return None
    tdef, mid, slots, tail, re_, frm, to, item = got
    return {
        "v": VERSION,
        "type": tdef.code,
        "id": mid,
        "re": re_,
        "from": frm,
        "to": to,
        "item": item,
        "slots": slots,
        "tail": tail,
    }


def _clean_message(line: str, prof: Profile) -> Message | None:
    """The Message of a clean line (see :func:`_clean_slots`), or None."""
    got = _clean_slots(line, prof, True)
    if got is None:
        return None
    tdef, mid, slots, tail, re_, frm, to, item = got
    assert type(slots) is Slots
    return _new_message(tdef.code, mid, re_, frm, to, item, slots, tail)


#: the types whose rules over the whole line go beyond from/to, the id rule and the tail's length
_TYPES_WITH_RULES: Final = frozenset({"AQ", "AN"})


def _id_fits(mid: str, frm: str) -> bool:
    """The id rule: an id is ``<from>-<n>``."""
    n = len(frm)
    return mid.startswith(frm) and mid[n : n + 1] == "-" and mid[n + 1 :].isdecimal()


def _plain_rules_pass(mid: str, frm: str | None, to: str | None, tail: str | None, prof: Profile) -> bool:
    """The rules over the whole line of a type outside ``_TYPES_WITH_RULES``, for a clean line (no finding, no
    warning): the tail's length, from and to apart, the id rule. (:func:`_line_rules` words each finding.)"""
    if tail is not None and len(tail) > prof.tail_max:
        return False
    return not frm or (frm != to and _id_fits(mid, frm))


def _words(body: str) -> list[str] | None:
    """A clean line's slots text split at every space and "=" at once: "", then each key and its value in turn;
    None when a value holds an "=" (every token has one)."""
    words = body.replace("=", " ").split(" ")
    return words if len(words) == 2 * body.count(" ") + 1 else None


def _line_rules(
    seen: Mapping[str, str],
    frm: str | None,
    to: str | None,
    errors: list[Problem],
    warnings: list[Problem],
    prof: Profile,
    mtype: str,
    mid: str,
    tail: str | None,
) -> None:
    """The rules over the whole line, after the slots (``seen``: the raw values by key): AQ opts, AN tail,
    from/to, the id rule, the closed answer vocabulary, the tail's length."""
    if mtype == "AQ":
        if seen.get("need") == "ENUM" and "opts" not in seen:
            _p(errors, "missing-slot", "AQ with need=ENUM requires opts", slot="opts")
    elif mtype == "AN" and seen.get("val") == "tail" and not tail:
        _p(errors, "tail-required", "AN with val=tail needs a tail", slot="val", got="tail")
    if frm:
        if frm == to:
            _p(warnings, "same-agent", "from and to are the same agent", slot="to", got=frm)
        if not _id_fits(mid, frm):
            text = f"id {mid!r} must be <from>-<n>: {frm}-1, {frm}-2, ... unique in the conversation"
            _p(errors, "id-shape", text, got=mid)
    ans = prof.ans
    if ans is not None:
        if mtype == "AQ" and seen.get("need") == "ENUM":
            for o in seen.get("opts", "").split("+"):
                if o and o not in ans:
                    text = f"opts={o}: not in the profile's answer vocabulary {prof.ans_text} (do not invent options)"
                    _p(errors, "not-in-answer-vocabulary", text, slot="opts", got=o)
        elif mtype == "AN":
            val_ = seen.get("val")
            if val_ not in (None, "tail", "Y", "N") and not _ANS_PASS_RE.fullmatch(str(val_)) and val_ not in ans:
                text = f"val={val_}: not in the profile's answer vocabulary {prof.ans_text}"
                _p(errors, "not-in-answer-vocabulary", text, slot="val", got=val_)
    if tail is not None and len(tail) > prof.tail_max:
        text = (
            f"tail is {len(tail)} characters; limit is {prof.tail_max} "
            "(rule 4: move it to an artifact and reference with art=)"
        )
        _p(errors, "tail-too-long", text, got=str(len(tail)))


def _setters() -> tuple[Any, ...] | None:
    """The slot descriptors of Message's fields, for building one without the generic __init__ (None: fall back)."""
    names = ("v", "type", "id", "from_", "to", "re", "item", "slots", "tail")
    if tuple(f.name for f in fields(Message)) != names:
        return None
    return tuple(Message.__dict__[n].__set__ for n in names)


_SETTERS = _setters()
_new = object.__new__


def message_from_raw(raw: Mapping[str, Any], list_keys: frozenset[str] | None = None) -> Message:
    """A Message from a parsed (valid) raw twin. ``list_keys`` names the slots holding lists (None: look at all);
    in a parsed twin only a list-typed slot holds a list (x_ values and unknown-type values stay strings)."""
    slots = raw["slots"]
    frozen: dict[str, Any] = dict(slots)
    if list_keys is None:
        for k, val in slots.items():
            if type(val) is list:
                frozen[k] = _freeze(val)
    else:
        for k in slots.keys() & list_keys:
            val = frozen[k]
            if type(val) is list:
                frozen[k] = _freeze(val)
    return _message(raw, Slots(frozen))


def _message(raw: Mapping[str, Any], slots: Slots) -> Message:
    """A Message of a twin's fields and its already frozen slots."""
    return _new_message(raw["type"], raw["id"], raw["re"], raw["from"], raw["to"], raw["item"], slots, raw["tail"])


def _new_message(
    mtype: str,
    mid: str,
    re_: str | None,
    frm: str | None,
    to: str | None,
    item: str | None,
    slots: Slots,
    tail: str | None,
) -> Message:
    """``Message(VERSION, ...)`` of values already checked and frozen, without the generic frozen-dataclass
    __init__ (every parsed line makes one)."""
    if _SETTERS is None:  # pragma: no cover - Message changed shape; the generic constructor still works
        return Message(VERSION, mtype, mid, frm, to, re_, item, slots, tail)  # type: ignore[arg-type]
    m = _new(Message)
    sv, st, si, sf, sto, sre, sit, ssl, sta = _SETTERS
    sv(m, VERSION)
    st(m, mtype)
    si(m, mid)
    sf(m, frm)
    sto(m, to)
    sre(m, re_)
    sit(m, item)
    ssl(m, slots)
    sta(m, tail)
    return m


def parse_message(
    line: str, prof: Profile
) -> tuple[Message | None, dict[str, Any], list[Problem], list[Problem], Profile]:
    """A line to (its Message or None, its twin, errors, warnings, the profile that validated). A clean line's
    Message is built straight from the parser: the twin returned is then empty (build it with ``to_dict``)."""
    if line[-1:] == "\n":
        line = line.rstrip("\n")
    message = _clean_message(line, prof)
    if message is not None:
        return message, {}, [], [], prof
    raw, errors, warnings, used = _full_pass(line, prof)
    if errors:
        return None, raw, errors, warnings, used
    return message_from_raw(raw, used.list_keys), raw, errors, warnings, used


def parse_line(line: str, profile: Profile | str | None = None) -> Parsed:
    """Parse one RW1 line under a profile (a Profile, a name, or None for the core with the ``p=`` switch).

    Never raises on a line; raises :class:`FormError` only for a bad ``profile`` argument or a non-string line.
    """
    if not isinstance(line, str):
        raise FormError(f"a line is a str, not {type(line).__name__}")
    prof = profile if isinstance(profile, Profile) else resolve_profile(profile)
    message, raw, errors, warnings, used = parse_message(line, prof)
    if not raw and not errors and not warnings and message is not None:  # a clean line: no findings, no twin yet
        parsed = _new(Parsed)
        _P_MESSAGE(parsed, message)
        _P_ERRORS(parsed, ())
        _P_WARNINGS(parsed, ())
        _P_RAW(parsed, None)
        _P_PROFILE(parsed, used)
        return parsed
    return Parsed(message, tuple(errors) if errors else (), tuple(warnings) if warnings else (), raw or None, used)


# ---------------------------------------------------------------- encode


def _show_encoded(v: Any) -> str:
    """A twin's value as ``encode`` writes it (lists joined with +, booleans Y/N, anything else formatted)."""
    t = type(v)
    if t is tuple or t is list or (t is not bool and isinstance(v, list | tuple)):
        return "+".join(map(str, v))
    if t is bool:
        return "Y" if v else "N"
    return f"{v}"


def _encode_line(msg: Mapping[str, Any], slots: Mapping[str, Any], prof: Profile) -> str:
    """Any JSON twin's line, tokens in the reference's order: the envelope, the profile's slot order, then any other
    keys; a slot whose value is None or "" left out, any other value written as the reference writes it."""
    get = msg.get
    pairs = [(k, f"{v}") for k in ENVELOPE if (v := get(k)) is not None and v != ""]
    pairs += [
        (k, v if type(v) is str else _show_encoded(v))
        for k in _encode_order(slots, prof)
        if (v := slots[k]) is not None and v != ""
    ]
    try:
        toks = " ".join(map("=".join, pairs))
    except TypeError:  # a key that is not a string (a hand-made twin)
        toks = " ".join([f"{k}={v}" for k, v in pairs])
    line = f"{VERSION} {msg['type']} {msg['id']} {toks}" if toks else f"{VERSION} {msg['type']} {msg['id']}"
    tail = get("tail")
    if tail:
        line += " // " + str(tail).replace("\n", " ")
    return line


def _encode_clean(msg: Mapping[str, Any], slots: Mapping[str, Any], prof: Profile) -> str | None:
    """The line of a twin the clean-line checks pass, written and checked in one go through its shape's plan
    (see :func:`_encode_plan`); None for any other twin (:func:`encode_checked` then writes it in general and
    parses it). The checks are the parser's clean path, on the values as written: the form and every value the
    type's regex can check, one token a value, the required slots, the rules over the whole line, the values
    decoded after the match."""
    typ, mid = msg["type"], msg["id"]
    if type(typ) is not str or type(mid) is not str:
        return None
    plan = _encode_plan(prof, typ, slots)
    if not plan:
        return None
    clean, keys, heads, gather, shown, needed, checks = plan
    vals = gather(slots)
    if shown:
        vals = list(vals)
        for i in shown:
            if vals[i] is None:
                return None  # a slot left out
            vals[i] = _show_encoded(vals[i])
    get = msg.get
    envelope = (get("re"), get("from"), get("to"), get("item"))
    for i in needed:
        if envelope[i] is None or envelope[i] == "":
            return None  # a required slot missing: the parser words it
    try:
        toks = [h + v for h, v in zip(_ENVELOPE_HEADS, envelope, strict=True) if v is not None and v != ""]
        toks += map(add, heads, vals)  # a None or "" value, or a list where the shape's first had a string: declined
    except TypeError:
        return None
    tail = get("tail")
    line = " ".join([VERSION, typ, mid, *toks])
    if tail:
        if type(tail) is not str:
            return None
        tail = tail.replace("\n", " ")
        line += " // " + tail
    else:
        tail = None
    m = clean(line)
    if m is None or line.strip() != line or m.group(2).count(" ") != len(toks) or m.group(3, 4) != (tail, None):
        return None  # not clean, or a value holding " // " moved where the parser starts the tail
    _, frm, to, _ = envelope
    if typ in _TYPES_WITH_RULES:
        errors: list[Problem] = []
        warnings: list[Problem] = []
        _line_rules(dict(zip(keys, vals, strict=True)), frm, to, errors, warnings, prof, typ, mid, tail)
        if errors or warnings:
            return None
    elif not _plain_rules_pass(mid, frm, to, tail, prof):
        return None
    if checks:
        errors = []
        for i, check in checks:
            check(vals[i], errors)
        if errors:
            return None
    return line


def encode_checked(msg: Mapping[str, Any], slots: Mapping[str, Any], prof: Profile) -> str:
    """A JSON twin's line (:func:`_encode_line`), validated: the line, or :class:`FormError` with the parser's errors
    when it would not parse under ``prof`` (warnings pass). A twin the clean-line checks pass (the usual one) is
    written and checked without parsing its line again (:func:`_encode_clean`)."""
    line = _encode_clean(msg, slots, prof)
    if line is not None:
        return line
    line = _encode_line(msg, slots, prof)
    _, errors, _, _ = parse_raw(line, prof)
    if errors:
        raise FormError("; ".join(e.message for e in errors))
    return line


def encode_message(msg: Message, profile: Profile | str | None = None) -> str:
    """A Message to its line, validated (raises :class:`FormError` when the line would not parse).

    Without a profile, the message's own ``p=`` names it, as in the reference's ``encode``.
    """
    if profile is None or profile == "":
        pv = msg.slots.get("p")
        prof = switch_profile(str(pv), get_profile(None).dirs) if pv not in (None, "") else get_profile(None)
    else:
        prof = resolve_profile(profile)
    if msg.v != VERSION:
        raise FormError(f"version must be {VERSION}")
    env = {"type": msg.type, "id": msg.id, "re": msg.re, "from": msg.from_, "to": msg.to, "item": msg.item}
    env["tail"] = msg.tail
    return encode_checked(env, msg.slots, prof)


# ---------------------------------------------------------------- canonical form and digest


def canonical(msg: Mapping[str, Any]) -> str:
    """Canonical JSON of a JSON twin: sorted keys, no whitespace, UTF-8 text, lists in written order."""
    try:
        return _CANON.encode(msg)
    except (TypeError, ValueError) as e:
        raise FormError(f"not a JSON twin: {e}") from e


def _digest_text(text: str) -> str:
    # surrogatepass: a lone surrogate (impossible in decoded UTF-8, possible in a Python str) still digests
    return _native.digest(text.encode("utf-8", "surrogatepass"))


class _NotPlain(Exception):
    """A value the direct serialiser does not handle (a float, a dict...): the JSON encoder takes over."""


def _jv(v: Any) -> str:
    """One JSON value as ``json.dumps(..., ensure_ascii=False)`` writes it, for the types a twin holds."""
    t = type(v)
    if t is str:
        return _jstr(v)
    if v is None:
        return "null"
    if t is bool:
        return "true" if v else "false"
    if t is int:
        return int.__repr__(v)
    if t is tuple or t is list:
        return "[" + ",".join(map(_jv, v)) + "]"
    raise _NotPlain


# Messages of one kind carry the same slots in the same order, so the work that depends only on which keys a
# message has, in which order (the key order a line or the canonical form writes), is done once per shape.
_SHAPES_MAX: Final = 4096


def _getter(items: Sequence[Any]) -> Any:
    """A function of a container giving the tuple of its items at these keys or positions."""
    if len(items) >= 2:
        return itemgetter(*items)
    if items:
        at = items[0]
        return lambda c: (c[at],)
    return lambda c: ()


def _encode_order(slots: Mapping[str, Any], prof: Profile) -> tuple[str, ...]:
    """The slots' keys in the order a line writes them: the profile's slot order, then the others as they come."""
    order_set = prof.encode_order_set
    known = sorted(slots.keys() & order_set, key=prof.encode_rank.__getitem__)
    return (*known, *(k for k in slots if k not in order_set))


_ENVELOPE_HEADS: Final = tuple(k + "=" for k in ENVELOPE)
_ENVELOPE_SET: Final = frozenset(ENVELOPE)
_EncodePlan = tuple[
    Callable[[str], re.Match[str] | None], tuple[str, ...], tuple[str, ...], Any, tuple[int, ...], tuple[int, ...], Any
]
_ENCODE_PLANS: dict[tuple[Profile, str, tuple[str, ...]], _EncodePlan | tuple[()]] = {}  # (): no clean encode


def _encode_plan(prof: Profile, typ: str, slots: Mapping[str, Any]) -> _EncodePlan | tuple[()]:
    """How :func:`_encode_clean` writes and checks a twin of this type with these slot keys (in their order): (the
    type's clean-line matcher; the keys in the order the line writes them; each as its token begins; the gatherer
    of their values; the positions of the values that are not strings in the first twin of this shape (a list, a
    boolean: those of the next ones are nearly always at the same places); the positions in ``ENVELOPE`` of the
    required slots the envelope must carry; the (position, validator) of each value checked after the match).
    Empty when no twin of the shape can be clean: an unknown type, a key that is not a string, an envelope key
    among the slots (its line would carry it twice), a required slot missing."""
    shape = (prof, typ, tuple(slots))
    hit = _ENCODE_PLANS.get(shape)
    if hit is None:
        hit = ()
        tdef = prof.types.get(typ)
        needed = tdef.required_set - slots.keys() if tdef is not None else None
        if (
            tdef is not None
            and tdef.clean is not None
            and needed is not None
            and needed <= _ENVELOPE_SET
            and all(type(k) is str for k in slots)
            and _ENVELOPE_SET.isdisjoint(slots)
        ):
            keys = _encode_order(slots, prof)
            info = tdef.slot_info
            hit = (
                tdef.clean,
                keys,
                tuple(k + "=" for k in keys),
                _getter(keys),
                tuple(i for i, k in enumerate(keys) if type(slots[k]) is not str),
                tuple(ENVELOPE.index(k) for k in needed),
                tuple((i, info[k][1]) for i, k in enumerate(keys) if k in tdef.decode_keys and info[k][0] != 4),
            )
        if len(_ENCODE_PLANS) >= _SHAPES_MAX:
            _ENCODE_PLANS.clear()
        _ENCODE_PLANS[shape] = hit
    return hit


# The canonical form of a twin is written from a plan per shape: the text between values (the keys sorted, written
# out, a string's quotes, null where a value is always None) is laid down once; a message's values are gathered in
# one step and set between it.
_CanonPlan = tuple[list[str | None], Any, tuple[int, ...], Any]
_CANON_PLANS: dict[tuple[object, ...], _CanonPlan | tuple[()]] = {}  # a Message's plans by shape; (): not plain
_ENVELOPE_SORTED: Final = ("from", "id", "item", "re", "tail", "to", "type", "v")  # as _canon_fields gathers them
_NONE: Final = type(None)


def _canon_plan(keys: tuple[str, ...], places: tuple[type, ...]) -> _CanonPlan | None:
    """The canonical form's plan for slots with these keys (in their order), given what each value's place holds
    (the slots' values, then the envelope's in ``_ENVELOPE_SORTED`` order): ``str``, a string, written between
    quotes; ``list``, any value, written as JSON (:func:`_jv`); None's type, null, written into the text. The plan
    is (the text, with None at every other value's place, the gatherer of those values from that tuple, their
    positions to write as JSON first, the gatherer of the string values); None when a key is not a string."""
    if any(type(k) is not str for k in keys):
        return None
    n = len(keys)
    at_env = {name: n + i for i, name in enumerate(_ENVELOPE_SORTED)}
    texts = ["{"]  # the text before each value's place, and after the last
    args: list[int] = []
    later: list[int] = []
    strs: list[int] = []

    def fields(names: Iterable[tuple[str, int]]) -> None:
        for j, (name, i) in enumerate(names):
            texts[-1] += ("," if j else "") + _jstr(name) + ":"
            place = places[i]
            if place is _NONE:
                texts[-1] += "null"
                continue
            if place is str:
                strs.append(i)
                texts[-1] += '"'
            else:
                later.append(len(args))
            args.append(i)
            texts.append('"' if place is str else "")

    fields((k, at_env[k]) for k in _ENVELOPE_SORTED[:4])
    texts[-1] += ',"slots":{'
    fields(sorted(zip(keys, range(n), strict=True)))
    texts[-1] += "},"
    fields((k, at_env[k]) for k in _ENVELOPE_SORTED[4:])
    texts[-1] += "}"
    parts: list[str | None] = [None] * (2 * len(texts) - 1)
    parts[::2] = texts
    return parts, _getter(args), tuple(later), _getter(strs)


def _canon_fields(
    v: Any, typ: Any, mid: Any, re_: Any, frm: Any, to: Any, item: Any, slots: Mapping[str, Any], tail: Any
) -> str | None:
    """The canonical JSON of a twin written through its shape's plan (see :func:`_canon_plan`), or None when the
    plan does not write it (the JSON encoder then does).

    A shape is the slot keys in order and whether ``re`` and the tail are None (null in the plan's text). The plan
    takes the places of the strings from the first twin of its shape and writes every other value (a slot's None
    too) as JSON: a later twin with a string where that one had another value is still written right, and one with
    another value where that one had a string is not written here (:func:`_canon_write` declines it)."""
    vals = (*slots.values(), frm, mid, item, re_, tail, to, typ, v)
    shape = (*slots, re_ is None, tail is None)
    plan = _CANON_PLANS.get(shape)
    if plan is None:
        places: list[type] = [str if type(x) is str else list for x in vals]  # list: written as JSON
        n = len(slots)
        places[n + 3 : n + 5] = (_NONE if re_ is None else places[n + 3], _NONE if tail is None else places[n + 4])
        plan = _canon_plan(tuple(slots), tuple(places)) or ()
        if len(_CANON_PLANS) >= _SHAPES_MAX:
            _CANON_PLANS.clear()
        _CANON_PLANS[shape] = plan
    if not plan:
        return None
    return _canon_write(plan, vals)


def _canon_write(plan: _CanonPlan, vals: tuple[Any, ...]) -> str | None:
    """The canonical JSON of the values (laid out as :func:`_canon_plan` says) through their plan, or None when a
    string needs escaping or a value is not one the plan writes."""
    parts, gather, later, gather_strs = plan
    try:
        strs = "".join(gather_strs(vals))
    except TypeError:  # a value that is not a string where the plan has one
        return None
    if len(_jstr(strs)) != len(strs) + 2:  # a string to escape: " \\ or a control character
        return None
    args = gather(vals)
    if later:
        args = list(args)
        try:
            for i in later:
                args[i] = _jv(args[i])
        except _NotPlain:
            return None
    text = parts[:]
    text[1::2] = args
    return "".join(text)  # type: ignore[arg-type]  # every place now holds its value's text


# A clean line's canonical form, written from the line's words without building its slots: a plan per type and
# sequence of keys says where each value goes and which are decoded first.
_LinePlan = tuple[Any, tuple[int, ...], tuple[tuple[int, int, Any], ...], _CanonPlan]
_LINE_PLANS: dict[tuple[TypeDef, tuple[str, ...]], _LinePlan | tuple[()]] = {}  # (): not a clean line's keys
_AT_ENVELOPE: Final = {k: i for i, k in enumerate(ENVELOPE)}


def _line_plan(tdef: TypeDef, keys: tuple[str, ...]) -> _LinePlan | None:
    """How :func:`_clean_canonical` writes a line of this type with these keys (in the line's order): (the gatherer
    of the slots' values from the line's values, the position among those of each envelope value, -1 when
    absent, in ``ENVELOPE`` order, the (position among the slots, kind, validator) of each value decoded first,
    the canonical form's plan); None for keys no clean line has (a duplicate, a required slot missing) and for a
    type whose rules over the line look at its slots."""
    if len(set(keys)) != len(keys) or not tdef.required_set <= set(keys) or tdef.code in _TYPES_WITH_RULES:
        return None
    slot_at = [i for i, k in enumerate(keys) if k not in _AT_ENVELOPE]
    slot_keys = tuple(keys[i] for i in slot_at)
    envelope_at = tuple(keys.index(k) if k in keys else -1 for k in ENVELOPE)
    info = tdef.slot_info
    decoded = tuple((j, info[k][0], info[k][1]) for j, k in enumerate(slot_keys) if k in tdef.decode_keys)
    decoded_at = {j for j, _, _ in decoded}
    # what the canonical plan's places hold: a string as written; a decoded value and the tail, written as JSON
    places = tuple(list if j in decoded_at else str for j in range(len(slot_keys)))
    re_p, from_p, to_p, item_p = (str if i >= 0 else _NONE for i in envelope_at)
    canon = _canon_plan(slot_keys, (*places, from_p, str, item_p, re_p, list, to_p, str, str))
    return (_getter(slot_at), envelope_at, decoded, canon) if canon is not None else None


def _clean_canonical(line: str, prof: Profile) -> str | None:
    """The canonical JSON of a line the parser passes without a finding, written from the line's words; None for
    any other line and for a line this way does not write (the parser's own Message then gives it)."""
    got = _clean_match(line, prof)
    if got is None:
        return None
    tdef, mid, body, tail = got
    words = _words(body)
    if words is None:
        return None
    keys = tuple(words[1::2])
    plan = _LINE_PLANS.get((tdef, keys))
    if plan is None:
        plan = _line_plan(tdef, keys) or ()
        if len(_LINE_PLANS) >= _SHAPES_MAX:
            _LINE_PLANS.clear()
        _LINE_PLANS[(tdef, keys)] = plan
    if not plan:
        return None
    gather_slots, envelope_at, decoded, canon = plan
    vals = words[2::2]
    re_, frm, to, item = [vals[i] if i >= 0 else None for i in envelope_at]
    if not _plain_rules_pass(mid, frm, to, tail, prof):
        return None
    slot_vals = list(gather_slots(vals))
    for j, kind, check in decoded:
        raw = slot_vals[j]
        if kind == 4:  # strings as written, joined with +
            slot_vals[j] = tuple(filter(None, raw.split("+")))
        else:
            errors: list[Problem] = []
            slot_vals[j] = check(raw, errors)
            if errors:
                return None
    return _canon_write(canon, (*slot_vals, frm, mid, item, re_, tail, to, tdef.code, VERSION))


def _jv_spaced(v: Any) -> str:
    """As :func:`_jv`, with json.dumps' default separators inside lists."""
    if type(v) is str:
        return _jstr(v)
    if type(v) is tuple or type(v) is list:
        return "[" + ", ".join([_jv_spaced(x) for x in v]) + "]"
    return _jv(v)


def twin_json(raw: Mapping[str, Any]) -> str:
    """A parsed twin as ``json.dumps(raw, ensure_ascii=False)`` writes it (keys in the twin's order)."""
    try:
        slots = raw["slots"]
        body = ", ".join([_jstr(k) + ": " + _jv_spaced(slots[k]) for k in slots])
        return (
            f'{{"v": {_jv(raw["v"])}, "type": {_jv(raw["type"])}, "id": {_jv(raw["id"])}, "re": {_jv(raw["re"])}, '
            f'"from": {_jv(raw["from"])}, "to": {_jv(raw["to"])}, "item": {_jv(raw["item"])}, "slots": {{{body}}}, '
            f'"tail": {_jv(raw["tail"])}}}'
        )
    except (_NotPlain, TypeError):
        return json.dumps(raw, ensure_ascii=False)


def canonical_message(msg: Message) -> str:
    """Canonical JSON of a Message's twin (tuples serialise as arrays)."""
    text = _canon_fields(msg.v, msg.type, msg.id, msg.re, msg.from_, msg.to, msg.item, msg.slots, msg.tail)
    if text is not None:
        return text
    return canonical(msg.to_dict())


def message_digest(msg: Message) -> str:
    """``h=`` of a message: the first 12 hex characters of SHA-256 over its canonical JSON."""
    return _digest_text(canonical_message(msg))


def line_digest(line: str, prof: Profile) -> str:
    """``h=`` of a line parsed under ``prof`` (raises :class:`FormError` with the parser's errors when it is not
    valid). A clean line's canonical form is written straight from the line's words (:func:`_clean_canonical`)."""
    if line[-1:] == "\n":
        line = line.rstrip("\n")
    text = _clean_canonical(line, prof)
    if text is not None:
        return _digest_text(text)
    message, _, errors, _, _ = parse_message(line, prof)
    if message is None:
        raise FormError("; ".join(e.message for e in errors))
    return message_digest(message)


def digest_raw(msg: Mapping[str, Any]) -> str:
    """``h=`` of a JSON twin given as a dict."""
    return _digest_text(canonical(msg))
