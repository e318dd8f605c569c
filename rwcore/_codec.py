"""The codec: a line to its JSON twin and back, the canonical form and the ``h=`` digest.

:func:`parse_line` never raises on a line: every finding comes back as a :class:`~rwcore.Problem` with a stable code
(see :data:`rwcore.PARSE_CODES`) and the reference's wording. It follows the reference parser step for step (the
order of its findings, the ``p=`` profile switch, the ``x_`` extension keys, the ``<from>-<n>`` id rule, the closed
answer vocabulary, the 300-character tail), with every lookup precompiled in the :class:`~rwcore.Profile`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from rwcore._errors import FormError
from rwcore._profiles import (
    ENVELOPE,
    ID_RE,
    KEY_RE,
    Profile,
    get_profile,
    resolve_profile,
    switch_profile,
)
from rwcore._types import Message, Problem, SlotValue, _freeze

VERSION: Final = "RW1"

_ANS_PASS_RE = re.compile(r"-?\d+(\.\d+)?|\d{8}")
_CANON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Parsed:
    """One parsed line.

    ``message`` is the decoded line, or None when there are errors. ``raw`` is the reference-shaped JSON twin (a dict
    with ``v type id re from to item slots tail``, lists as lists), present for invalid lines too, holding whatever
    the parser decoded before it stopped. ``profile`` is the profile that validated the line (after a ``p=`` switch).
    """

    message: Message | None
    errors: tuple[Problem, ...]
    warnings: tuple[Problem, ...]
    raw: dict[str, Any]
    profile: Profile

    @property
    def ok(self) -> bool:
        """True when the line is valid."""
        return not self.errors


def _p(errors: list[Problem], code: str, message: str, slot: str | None = None, got: str | None = None) -> None:
    errors.append(Problem(code, message, "form", slot, None, got))


def parse_raw(line: str, prof: Profile) -> tuple[dict[str, Any], list[Problem], list[Problem], Profile]:
    """The parser proper: (raw JSON twin, errors, warnings, the profile that validated). Never raises on a line."""
    errors: list[Problem] = []
    warnings: list[Problem] = []
    line = line.rstrip("\n")
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
    valid_keys = prof.valid_keys
    for tok in toks[3:]:
        k, eq, val = tok.partition("=")
        if not eq:
            _p(
                errors,
                "not-key-value",
                f"{tok!r}: expected key=value (positional slots are only RW1, TYPE and id)",
                got=tok,
            )
            continue
        if k not in valid_keys and not KEY_RE.match(k):
            _p(errors, "bad-key", f"key {k!r} must be lowercase [a-z][a-z0-9_]*", got=k)
            continue
        if k in seen:
            _p(errors, "duplicate-key", f"duplicate key {k}", slot=k, got=val)
            continue
        if val == "":
            _p(errors, "empty-value", f"{k}= has an empty value; omit the slot instead", slot=k)
            continue
        seen[k] = val
    pv = seen.get("p")
    if pv is not None:
        if prof.declared is not None and pv != prof.declared:
            msg_ = f"message names profile p={pv} but validation used profile {prof.declared}"
            _p(warnings, "profile-mismatch", msg_, slot="p", got=pv)
        if prof.declared is None:
            try:
                prof = switch_profile(pv, prof.dirs)
            except FormError as e:
                _p(errors, "unknown-profile", str(e), slot="p", got=pv)
            else:
                tdef = prof.types[mtype]
    validators = prof.validators
    allowed = tdef.allowed
    for k, val in seen.items():
        check = validators.get(k)
        if check is None:
            if k.startswith("x_"):
                slots[k] = val
            else:
                _p(
                    warnings,
                    "unknown-key",
                    f"unknown key {k!r} ignored (extension keys start with x_)",
                    slot=k,
                    got=val,
                )
            continue
        if k not in allowed:
            _p(warnings, "slot-not-for-type", f"slot {k} is not defined for type {mtype}", slot=k, got=val)
        decoded = check(val, errors)
        if k in ENVELOPE:
            msg[k] = decoded
        else:
            slots[k] = decoded
    for k in tdef.required:
        if k not in seen:
            _p(errors, "missing-slot", f"{mtype} requires {k}", slot=k)
    if mtype == "AQ" and seen.get("need") == "ENUM" and "opts" not in seen:
        _p(errors, "missing-slot", "AQ with need=ENUM requires opts", slot="opts")
    elif mtype == "AN" and seen.get("val") == "tail" and not tail:
        _p(errors, "tail-required", "AN with val=tail needs a tail", slot="val", got="tail")
    frm = msg["from"]
    if frm and msg["to"] and frm == msg["to"]:
        _p(warnings, "same-agent", "from and to are the same agent", slot="to", got=frm)
    if frm:
        n = mid[len(frm) + 1 :] if mid.startswith(frm) and mid[len(frm) : len(frm) + 1] == "-" else ""
        if not (n and n.isdecimal()):
            expl = f"id {mid!r} must be <from>-<n>: {frm}-1, {frm}-2, ... unique in the conversation"
            _p(errors, "id-shape", expl, got=mid)
    ans = prof.ans
    if ans is not None:
        if mtype == "AQ" and seen.get("need") == "ENUM":
            for o in seen.get("opts", "").split("+"):
                if o and o not in ans:
                    expl = f"opts={o}: not in the profile's answer vocabulary {prof.ans_text} (do not invent options)"
                    _p(errors, "not-in-answer-vocabulary", expl, slot="opts", got=o)
        elif mtype == "AN":
            val_ = seen.get("val")
            if val_ not in (None, "tail", "Y", "N") and not _ANS_PASS_RE.fullmatch(str(val_)) and val_ not in ans:
                expl = f"val={val_}: not in the profile's answer vocabulary {prof.ans_text}"
                _p(errors, "not-in-answer-vocabulary", expl, slot="val", got=val_)
    if tail is not None and len(tail) > prof.tail_max:
        expl = (
            f"tail is {len(tail)} characters; limit is {prof.tail_max} "
            "(rule 4: move it to an artifact and reference with art=)"
        )
        _p(errors, "tail-too-long", expl, got=str(len(tail)))
    return msg, errors, warnings, prof


def message_from_raw(raw: Mapping[str, Any]) -> Message:
    """A Message from a parsed (valid) raw twin, without the generic conversion pass."""
    frozen: dict[str, SlotValue] = {}
    for k, val in raw["slots"].items():
        frozen[k] = _freeze(val) if type(val) is list else val
    return Message(
        v=raw["v"],
        type=raw["type"],
        id=raw["id"],
        from_=raw["from"],
        to=raw["to"],
        re=raw["re"],
        item=raw["item"],
        slots=MappingProxyType(frozen),
        tail=raw["tail"],
    )


def parse_line(line: str, profile: Profile | str | None = None) -> Parsed:
    """Parse one RW1 line under a profile (a Profile, a name, or None for the core with the ``p=`` switch).

    Never raises on a line; raises :class:`FormError` only for a bad ``profile`` argument or a non-string line.
    """
    if not isinstance(line, str):
        raise FormError(f"a line is a str, not {type(line).__name__}")
    prof = profile if isinstance(profile, Profile) else resolve_profile(profile)
    raw, errors, warnings, used = parse_raw(line, prof)
    message = None if errors else message_from_raw(raw)
    return Parsed(message, tuple(errors), tuple(warnings), raw, used)


# ---------------------------------------------------------------- encode


def _show_encoded(v: Any) -> str:
    if isinstance(v, bool):
        return "Y" if v else "N"
    if isinstance(v, list | tuple):
        return "+".join(str(x) for x in v)
    return f"{v}"


def encode_fields(msg: Mapping[str, Any], slots: Mapping[str, Any], prof: Profile) -> str:
    """Tokens of a JSON twin in the reference's order: envelope, the profile's slot order, then any other keys."""
    toks = [VERSION, str(msg["type"]), str(msg["id"])]
    for k in ENVELOPE:
        val = msg.get(k)
        if val is not None and val != "":
            toks.append(f"{k}={val}")
    order_set = prof.encode_order_set
    keys = [k for k in prof.encode_order if k in slots]
    keys += [k for k in slots if k not in order_set]
    for k in keys:
        val = slots[k]
        if val is None or val == "":
            continue
        toks.append(f"{k}={_show_encoded(val)}")
    line = " ".join(toks)
    tail = msg.get("tail")
    if tail:
        line += " // " + str(tail).replace("\n", " ")
    return line


def validate_encoded(line: str, prof: Profile) -> dict[str, Any]:
    """Parse an encoded line under the profile it was encoded with; its raw twin, or FormError on any error."""
    raw, errors, _, _ = parse_raw(line, prof)
    if errors:
        raise FormError("; ".join(e.message for e in errors))
    return raw


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
    line = encode_fields(env, msg.slots, prof)
    validate_encoded(line, prof)
    return line


# ---------------------------------------------------------------- canonical form and digest


def canonical(msg: Mapping[str, Any]) -> str:
    """Canonical JSON of a JSON twin: sorted keys, no whitespace, UTF-8 text, lists in written order."""
    try:
        return _CANON.encode(msg)
    except (TypeError, ValueError) as e:
        raise FormError(f"not a JSON twin: {e}") from e


def _digest_text(text: str) -> str:
    # surrogatepass: a lone surrogate (impossible in decoded UTF-8, possible in a Python str) still digests
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def canonical_message(msg: Message) -> str:
    """Canonical JSON of a Message's twin (tuples serialise as arrays)."""
    return _CANON.encode(
        {
            "v": msg.v,
            "type": msg.type,
            "id": msg.id,
            "re": msg.re,
            "from": msg.from_,
            "to": msg.to,
            "item": msg.item,
            "slots": dict(msg.slots),
            "tail": msg.tail,
        }
    )


def message_digest(msg: Message) -> str:
    """``h=`` of a message: the first 12 hex characters of SHA-256 over its canonical JSON."""
    return _digest_text(canonical_message(msg))


def digest_raw(msg: Mapping[str, Any]) -> str:
    """``h=`` of a JSON twin given as a dict."""
    return _digest_text(canonical(msg))
