"""The codec: a line to its JSON twin and back, the canonical form and the ``h=`` digest.

:func:`parse_line` never raises on a line: every finding comes back as a :class:`~rwcore.Problem` with a stable code
(see :data:`rwcore.PARSE_CODES`) and the reference's wording. The parser itself is native (``native/rw1``, through
``rwcore._native``): it follows the reference parser step for step (the order of its findings, the ``p=`` profile
switch, the ``x_`` extension keys, the ``<from>-<n>`` id rule, the closed answer vocabulary, the 300-character tail),
on the grammar each :class:`~rwcore.Profile` compiles once. This module turns what it gives into rwcore's values,
writes lines (encode, checked by that parser) and the canonical JSON the digest is taken over.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import FrozenInstanceError, fields
from json.encoder import encode_basestring as _jstr
from typing import Any, Final

from rwcore import _native
from rwcore._errors import FormError, problem
from rwcore._profiles import (
    Profile,
    get_profile,
    resolve_profile,
    switch_profile,
    switcher,
)
from rwcore._types import Message, Problem, Slots, _thaw

VERSION: Final = "RW1"

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


def native_problems(found: list[tuple[str, str, str, str | None, str | None, str | None]]) -> list[Problem]:
    """Findings as the native code gives them, ``(code, tier, message, slot, expected, got)``, as Problems."""
    if not found:  # most checks pass: no comprehension's frame for nothing
        return []
    return [problem(code, message, tier, slot, expected, got) for code, tier, message, slot, expected, got in found]


def _switch(prof: Profile) -> Callable[[str], Profile]:
    """What a ``p=`` slot on a line parsed under ``prof`` calls: the named profile, searched in ``prof``'s folders."""
    return switcher(prof.dirs)


def must_be_line(line: Any) -> None:
    """A line is a ``str``: anything else is a :class:`FormError` (the reference fails on it with an AttributeError)."""
    if not isinstance(line, str):
        raise FormError(f"a line is a str, not {type(line).__name__}")


def _native_parse(line: str, prof: Profile) -> tuple[tuple[Any, ...], list[Problem], list[Problem], Profile]:
    """The parser (native/rw1) on one line: (its twin as a tuple, errors, warnings, the profile that validated).
    The twin is ``(v, type, id, re, from, to, item, slots, tail)``, its slots read-only, list values as tuples."""
    must_be_line(line)
    twin, errors, warnings, switched = _native.parse(line, prof.grammar, _switch(prof), Slots)
    return (
        twin,
        native_problems(errors) if errors else [],
        native_problems(warnings) if warnings else [],
        prof if switched is None else switched,
    )


def _raw(twin: tuple[Any, ...]) -> dict[str, Any]:
    """The reference-shaped JSON twin of the parser's tuple (list values as lists)."""
    v, mtype, mid, re_, frm, to, item, slots, tail = twin
    return {
        "v": v,
        "type": mtype,
        "id": mid,
        "re": re_,
        "from": frm,
        "to": to,
        "item": item,
        "slots": {k: _thaw(x) for k, x in slots.items()},
        "tail": tail,
    }


def _setters() -> tuple[Any, ...] | None:
    """The slot descriptors of Message's fields, for building one without the generic __init__ (None: fall back)."""
    names = ("v", "type", "id", "from_", "to", "re", "item", "slots", "tail")
    if tuple(f.name for f in fields(Message)) != (*names, "_fields"):
        return None
    return tuple(Message.__dict__[n].__set__ for n in (*names, "_fields"))


_SETTERS = _setters()
_new = object.__new__


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
    sv, st, si, sf, sto, sre, sit, ssl, sta, s_fields = _SETTERS
    sv(m, VERSION)
    st(m, mtype)
    si(m, mid)
    sf(m, frm)
    sto(m, to)
    sre(m, re_)
    sit(m, item)
    ssl(m, slots)
    sta(m, tail)
    s_fields(m, None)
    return m


#: how the native parser makes a valid line's ``Message``: its version and type set, its other fields held natively
#: until one is read (``rwcore._types.Message``), each set by its slot's own setter, as a frozen dataclass's
#: ``__init__`` sets them
MESSAGE_KIT: Final = _native.MessageKit(
    object.__new__,
    Message,
    Message.__dict__["v"].__set__,
    Message.__dict__["type"].__set__,
    Message.__dict__["_fields"].__set__,
    VERSION,
)


def _warnings(found: list[tuple[str, str, str, str | None, str | None, str | None]]) -> tuple[Problem, ...]:
    return tuple(native_problems(found))


#: how ``parse_line`` makes a valid line's ``Parsed`` natively: the message as above, the parse's slots set by
#: their setters, the warnings as Problems, and a ``p=`` slot's profile searched in the folders of the profile the
#: line was parsed under
PARSED_KIT: Final = _native.ParsedKit(
    MESSAGE_KIT,
    object.__new__,
    Parsed,
    _P_MESSAGE,
    _P_ERRORS,
    _P_WARNINGS,
    _P_RAW,
    _P_PROFILE,
    _warnings,
    lambda name, prof: switch_profile(name, prof.dirs),
)


def parse_line(line: str, profile: Profile | str | None = None) -> Parsed:
    """Parse one RW1 line under a profile (a Profile, a name, or None for the core with the ``p=`` switch).

    Never raises on a line; raises :class:`FormError` only for a bad ``profile`` argument or a non-string line.
    A valid line is parsed and its ``Parsed`` made in one native call, its message's fields held natively until one
    is read; a line with errors is parsed again for its twin.
    """
    prof = profile if isinstance(profile, Profile) else resolve_profile(profile)
    parsed = _native.parse_line(line, prof, PARSED_KIT) if isinstance(line, str) else None
    if parsed is not None:
        return parsed
    twin, errors, warnings, used = _native_parse(line, prof)
    if errors:
        return Parsed(None, tuple(errors), tuple(warnings), _raw(twin), used)
    _, mtype, mid, re_, frm, to, item, slots, tail = twin  # a line Python cannot give as UTF-8 (a lone surrogate)
    message = _new_message(mtype, mid, re_, frm, to, item, slots, tail)
    return Parsed(message, (), tuple(warnings), None, used)


# ---------------------------------------------------------------- encode


def encode_checked(msg: Mapping[str, Any], slots: Mapping[str, Any], prof: Profile) -> str:
    """A JSON twin's line, validated: the line, or :class:`FormError` with the parser's errors when it would not
    parse under ``prof`` (warnings pass). Native (native/rw1/src/encode.rs): tokens in the reference's order (the
    envelope, the profile's slot order, then any other keys), a value that is None or "" left out, a list joined
    with ``+``, a boolean ``Y`` or ``N``, any other value formatted; the tail after `` // ``, newlines made spaces."""
    return encode_under(msg, slots, prof.grammar, _switch(prof))


def encode_under(
    msg: Mapping[str, Any], slots: Mapping[str, Any], grammar: Any, switch: Callable[[str], Profile]
) -> str:
    """:func:`encode_checked` under a compiled grammar and its ``p=`` switch (as ``reference_parts`` keeps them)."""
    if type(msg) is dict and type(slots) is dict:  # the twin's envelope read natively
        line, errors = _native.encode_twin(msg, slots, grammar, switch)
    else:
        get = msg.get
        line, errors = _native.encode(
            msg["type"],
            msg["id"],
            (get("re"), get("from"), get("to"), get("item")),
            slots if isinstance(slots, dict) else dict(slots),
            get("tail"),
            grammar,
            switch,
        )
    if errors:
        raise FormError("; ".join(message for _, _, message, _, _, _ in errors))
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
    held = msg._fields
    if held is not None:  # a parsed line's message: written from the parser's twin, its fields not made
        line, errors = _native.encode_held(held, prof.grammar, _switch(prof))
        if errors:
            raise FormError("; ".join(message for _, _, message, _, _, _ in errors))
        return line
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
    """Canonical JSON of a Message's twin (tuples serialise as arrays), native (native/rw1/src/canon.rs)."""
    try:
        return _native.canonical(msg)
    except ValueError as e:
        raise FormError(f"not a JSON twin: {e}") from e


def message_digest(msg: Message) -> str:
    """``h=`` of a message: the first 12 hex characters of SHA-256 over its canonical JSON."""
    try:
        return _native.message_digest(msg)
    except ValueError as e:
        raise FormError(f"not a JSON twin: {e}") from e


def line_digest(line: str, prof: Profile) -> str:
    """``h=`` of a line parsed under ``prof`` (raises :class:`FormError` with the parser's errors when it is not
    valid). Native in one call: the digest of the parser's twin, no ``Message`` made on the way."""
    must_be_line(line)
    digest, errors = _native.h_of_line(line, prof.grammar, _switch(prof))
    if digest is None:
        raise FormError("; ".join(e.message for e in native_problems(errors)))
    return digest


def digest_raw(msg: Mapping[str, Any]) -> str:
    """``h=`` of a JSON twin given as a dict."""
    return _digest_text(canonical(msg))
