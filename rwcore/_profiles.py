"""Profiles: the core vocabulary plus one domain's codes, slots, agents and execution map, compiled once.

A profile file is the reference's JSON format (section 7), so a user's existing profile files load unchanged. rwcore
reads each file once, merges it with the core exactly as the reference does (a profile may add, never redefine), and
compiles the result into a frozen :class:`Profile`: per-type required/optional/allowed sets, enums as read-only
mappings, one precompiled validator per slot, the exec map, the agents, the answer vocabulary, the constraint keys
and aliases, and the slots to mask in logs. Nothing is re-read or re-merged per call.

Where profiles are found, first match wins: the ``extra_dirs`` given to :func:`get_profile`, then the folders in the
``RWCORE_PROFILE_PATH`` environment variable (``os.pathsep``-separated), then rwcore's own ``profiles/`` folder.
The core itself always comes from rwcore's folder. Results (and unknown names) are cached by (name, folders);
``RWCORE_PROFILE_PATH`` is read at the first lookup, and again after :func:`clear_profile_cache`.

Beyond the reference's format a profile may carry, all optional and additive:
``sensitive`` (slot names to mask in logs, added to ``acct prev addr``), ``constraint_keys`` (new acc= keys with their
meaning), ``constraint_set_keys`` (which of them are set-valued) and ``value_aliases`` (new alias groups).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from rwcore._acc import AccTables
from rwcore._errors import FormError, problem
from rwcore._types import Problem

#: Environment variable naming extra profile folders, ``os.pathsep``-separated.
PROFILE_PATH_ENV: Final = "RWCORE_PROFILE_PATH"
#: rwcore's own profile folder (core, pay, clin, deploy, pform).
BUILTIN_DIR: Final = Path(__file__).resolve().parent / "profiles"
#: Slots masked in logs under every profile; a profile's ``sensitive`` list adds to these.
DEFAULT_SENSITIVE: Final = frozenset({"acct", "prev", "addr"})
#: The four envelope slots that live outside ``slots`` in the JSON twin.
ENVELOPE: Final = ("re", "from", "to", "item")

_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
# The grammar's character classes. ``$`` (not ``\Z``) and ``\d`` (any Unicode decimal digit) are deliberate: they are
# the reference's semantics, and a line must get the same verdict from both.
# Each class's text is written once: the validators below and the clean-line matcher (TypeDef.clean) share it.
_ID = r"[A-Za-z0-9._-]"
_DATE = r"\d{8}"
_TIME = r"\d{8}T\d{4}Z"
_MONEY = r"-?\d+\.\d{2}"
_NUM = r"-?\d+(?:\.\d+)?(?:/\d+(?:\.\d+)?)?"
ID_RE: Final = re.compile(rf"^{_ID}+$")
KEY_RE: Final = re.compile(r"^[a-z][a-z0-9_]*$")
DATE_RE: Final = re.compile(rf"^{_DATE}$")
TIME_RE: Final = re.compile(rf"^{_TIME}$")
_INT_RE = re.compile(r"-?\d+")
_DAYS_RE = re.compile(r"\d+d?")
_MONEY_RE = re.compile(_MONEY)
_NUM_RE = re.compile(_NUM)
_RANGE_RE = re.compile(r"(\d+)-(\d+)")

#: A compiled slot validator: decodes one raw value, appending any problem to the list it is given.
Validator = Callable[[str, list[Problem]], Any]
#: How the parser decodes one slot on one type (see TypeDef.slot_info).
SlotPlan = tuple[int, Any, bool, bool]

#: The slot types checked by one pattern and kept as written: (match, problem code, message after ``key=value``).
_PATTERN_TYPES: Final = {
    "date": (DATE_RE.match, "bad-date", ": dates are YYYYMMDD"),
    "time": (TIME_RE.match, "bad-time", ": times are YYYYMMDDTHHMMZ in UTC, e.g. 20261002T1405Z"),
    "money": (
        _MONEY_RE.fullmatch,
        "bad-money",
        ": money is digits with exactly two decimals, no separators, e.g. 5400.00",
    ),
    "num": (_NUM_RE.fullmatch, "bad-num", ": num is a number as written (7.2, 148/88), no units, no separators"),
}


def _plan(key: str, typ: str, validator: Validator, enums: Mapping[str, Mapping[str, str]]) -> tuple[int, Any]:
    if typ in ("ref", "token"):
        return 0, None
    if typ in ("list:ref", "list:token"):
        return 4, validator  # strings as written, joined with +: no check beyond the split
    if typ.startswith("enum:"):
        return 1, enums.get(typ[5:], {})
    pattern = _PATTERN_TYPES.get(typ)
    if pattern is not None:
        return 3, pattern
    return 2, validator


# ---------------------------------------------------------------- the clean-line matcher

_VALUE_END = "(?![^ ])"  # a value ends at a space or at the end of the slots


def _trie(branches: Mapping[str, str]) -> str:
    """Regex text matching any of the literal prefixes, each followed by its own text, written as a trie: at each
    character the engine tries the few branches that start with it, not every prefix in turn."""
    groups: dict[str, dict[str, str]] = {}
    for literal, then in branches.items():
        groups.setdefault(literal[:1], {})[literal[1:]] = then
    alts = []
    for first, rest in groups.items():
        if not first:
            alts.append(rest[""])
        elif len(rest) == 1:
            ((tail, then),) = rest.items()
            alts.append(re.escape(first + tail) + then)
        else:
            alts.append(re.escape(first) + _trie(rest))
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


def _alternation(words: Iterable[str]) -> str | None:
    """Regex text matching exactly one of the words, the whole value."""
    ws = {w: "" for w in sorted(words) if w and " " not in w}
    return _trie(ws) + _VALUE_END if ws else None


def _clean_value(
    typ: str, enums: Mapping[str, Mapping[str, str]], agents: frozenset[str] | None
) -> tuple[str, bool] | None:
    """The regex text of values of a slot type that are valid as they stand, and whether the value is decoded
    after the match (lists, integers, days, booleans: their validator then has the last word). Every value the
    text matches must be one the slot's validator passes: the matcher may refuse a valid value (the full pass then
    takes it), never accept an invalid one. None: no such text (the slot always takes the full pass)."""
    if typ in ("ref", "token"):
        return r"[^ ]++", False
    if typ.startswith("list:"):
        return r"[^ ]++", True
    if typ.startswith("enum:"):
        alt = _alternation(enums.get(typ[5:], {}))
        return (alt, False) if alt is not None else None
    pattern = {"date": _DATE, "time": _TIME, "money": _MONEY, "num": _NUM}.get(typ)
    if pattern is not None:
        return f"(?:{pattern}){_VALUE_END}", False
    if typ.startswith("int:"):
        return rf"-?\d++{_VALUE_END}", True
    if typ == "days":
        return rf"\d++d?{_VALUE_END}", True
    if typ == "bool":
        return f"[YN]{_VALUE_END}", True
    if typ == "msgid" or (typ == "agent" and not agents):
        return f"{_ID}++{_VALUE_END}", False
    if typ == "agent":
        alt = _alternation(a for a in agents or () if ID_RE.match(a) and a[-1:] != "\n")
        return (alt, False) if alt is not None else None
    return None


def _clean_matcher(
    code: str,
    keys: Sequence[str],
    values: Mapping[str, tuple[str, bool] | None],
    declared: str | None,
    x_known: Sequence[str],
) -> Callable[[str], re.Match[str] | None]:
    """The ``fullmatch`` of a clean line of one type (see TypeDef.clean). Under a profile ``p=`` must name it; under
    the core a ``p=`` line always takes the full pass (it switches profile). ``x_`` keys the profile does not
    define are taken as written."""
    branches = {}
    for k in keys:
        if k == "p":
            if declared is not None:
                branches["p="] = re.escape(declared) + _VALUE_END
            continue
        value = values[k]
        assert value is not None
        branches[k + "="] = value[0]
    not_known = f"(?!(?:{'|'.join(map(re.escape, x_known))})=)" if x_known else ""
    x_slot = rf"{not_known}x_[a-z0-9_]*+=[^ ]++"
    slot = f"(?:{_trie(branches)}|{x_slot})" if branches else f"(?:{x_slot})"
    return re.compile(rf"RW1 {re.escape(code)} ({_ID}++)((?: {slot})*+)(?: // (.*)|( //))?", re.S).fullmatch


@dataclass(frozen=True, slots=True, eq=False)
class TypeDef:
    """One message type under a profile: its required and optional slots, and every slot it takes without a warning."""

    code: str
    name: str
    required: tuple[str, ...]
    optional: tuple[str, ...]
    allowed: frozenset[str]
    #: per slot, how the parser decodes it on this type: (kind, data, is an envelope slot, allowed on this type);
    #: kind 0 takes the value as written, 1 checks it against an enum (data: the codes), 2 calls a validator
    #: (data), 3 matches a pattern (data: match function, problem code, message suffix), 4 splits a list of
    #: strings as written (data: its validator, which the full pass calls)
    slot_info: Mapping[str, SlotPlan] = field(default_factory=dict)
    #: the slots every line of this type must carry, as a set
    required_set: frozenset[str] = frozenset()
    #: the clean-line matcher: ``fullmatch`` of one regex that accepts only a line the parser would pass without a
    #: finding of its own (a subset: anything it refuses takes the full pass), its groups the id, the slots (each
    #: after one space), the tail, and `` //`` for an empty tail; duplicates, required slots and the rules over the
    #: whole line are checked after it. (None only in a TypeDef made by hand: every line takes the full pass.)
    clean: Callable[[str], re.Match[str] | None] | None = None
    #: the keys the matcher takes as written but whose value is decoded (and checked) after it: lists, integers,
    #: days and booleans (a tuple: the parser scans it, a handful of keys, rather than intersect sets)
    decode_keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, eq=False)
class Profile:
    """The core merged with one profile, compiled. Immutable; obtain it with :func:`get_profile`.

    ``name`` is ``"core"`` for the bare core, else the profile's declared name (what ``p=`` carries).
    """

    name: str
    declared: str | None
    types: Mapping[str, TypeDef]
    slot_types: Mapping[str, str]
    validators: Mapping[str, Validator]
    enums: Mapping[str, Mapping[str, str]]
    agents: frozenset[str] | None
    ans: Mapping[str, str] | None
    exec_map: Mapping[str, tuple[str, ...]]
    slot_desc: Mapping[str, str]
    item_examples: tuple[str, ...] | None
    item_kinds: Mapping[str, str] | None
    asks_used: tuple[str, ...] | None
    tail_max: int
    constraint_keys: Mapping[str, str]
    constraint_set_keys: frozenset[str]
    value_aliases: Mapping[str, tuple[str, ...]]
    sensitive: frozenset[str]
    dirs: tuple[str, ...]
    core_asks: tuple[str, ...]
    encode_order: tuple[str, ...]
    encode_order_set: frozenset[str]
    encode_rank: Mapping[str, int]
    ans_text: str
    acc_tables: AccTables
    #: the slots whose decoded value is a list
    list_keys: frozenset[str]

    @property
    def is_core(self) -> bool:
        """True for the bare core (no profile)."""
        return self.declared is None

    def exec_slots(self, ask: object) -> tuple[str, ...]:
        """The execution slots the profile names for an ask (empty when it names none)."""
        return self.exec_map.get(str(ask or ""), ())

    def slot_type(self, key: str) -> str | None:
        """The declared type of a slot (``date``, ``enum:ask``, ``list:token``...), or None when unknown."""
        return self.slot_types.get(key)

    def is_sensitive(self, key: str) -> bool:
        """Whether a slot's value is masked in logs."""
        return key in self.sensitive

    def __repr__(self) -> str:
        return f"Profile({self.name!r})"


# ---------------------------------------------------------------- slot validators


def _err(errors: list[Problem], code: str, message: str, key: str, expected: str, got: str) -> None:
    errors.append(problem(code, message, "form", key, expected, got))


def _compile_validator(
    key: str, typ: str, enums: Mapping[str, Mapping[str, str]], agents: frozenset[str] | None, pname: str | None
) -> Validator:
    """One closure per slot: the decode-and-check the reference does per value, with everything looked up once."""
    if typ.startswith("list:"):
        inner = _compile_validator(key, typ[5:], enums, agents, pname)

        def v_list(raw: str, errors: list[Problem]) -> Any:
            return [inner(x, errors) for x in raw.split("+") if x != ""]

        return v_list
    if typ.startswith("enum:"):
        ename = typ[5:]
        allowed = enums.get(ename, {})
        tail = f": not a known {ename} code (rule 2: reply UN why=UNK, do not guess)"

        def v_enum(raw: str, errors: list[Problem]) -> Any:
            if raw not in allowed:
                _err(errors, "unknown-code", f"{key}={raw}{tail}", key, typ, raw)
            return raw

        return v_enum
    if typ.startswith("int:"):
        m = _RANGE_RE.fullmatch(typ[4:])
        if m is None:
            raise FormError(f"slot {key}: int type {typ!r} is not int:<lo>-<hi> with non-negative bounds")
        lo_s, hi_s = m.group(1), m.group(2)
        lo, hi = int(lo_s), int(hi_s)
        int_match = _INT_RE.fullmatch

        def v_int(raw: str, errors: list[Problem]) -> Any:
            if not int_match(raw):
                _err(errors, "bad-int", f"{key}={raw}: expected an integer", key, typ, raw)
                return raw
            try:
                v = int(raw)
            except ValueError:  # more digits than int() converts: certainly out of range
                _err(errors, "out-of-range", f"{key}={raw}: out of range {lo_s}-{hi_s}", key, typ, raw)
                return raw
            if not (lo <= v <= hi):
                _err(errors, "out-of-range", f"{key}={raw}: out of range {lo_s}-{hi_s}", key, typ, raw)
            return v

        return v_int
    pattern = _PATTERN_TYPES.get(typ)
    if pattern is not None:
        match, code, suffix = pattern

        def v_pattern(raw: str, errors: list[Problem]) -> Any:
            if not match(raw):
                _err(errors, code, f"{key}={raw}{suffix}", key, typ, raw)
            return raw

        return v_pattern
    if typ == "days":
        days_match = _DAYS_RE.fullmatch

        def v_days(raw: str, errors: list[Problem]) -> Any:
            if not days_match(raw):
                _err(errors, "bad-days", f"{key}={raw}: expected a number of days, e.g. 14 or 14d", key, typ, raw)
                return raw
            try:
                return int(raw.rstrip("d"))
            except ValueError:  # more digits than int() converts
                _err(errors, "bad-days", f"{key}={raw}: expected a number of days, e.g. 14 or 14d", key, typ, raw)
                return raw

        return v_days
    if typ == "bool":

        def v_bool(raw: str, errors: list[Problem]) -> Any:
            if raw == "Y":
                return True
            if raw == "N":
                return False
            _err(errors, "bad-bool", f"{key}={raw}: booleans are Y or N", key, typ, raw)
            return raw

        return v_bool
    if typ in ("msgid", "agent"):
        id_match = ID_RE.match
        check_agents = agents if typ == "agent" and agents else None

        def v_id(raw: str, errors: list[Problem]) -> Any:
            if not id_match(raw):
                _err(errors, "bad-agent", f"{key}={raw}: must match [A-Za-z0-9._-]+", key, typ, raw)
            if check_agents is not None and raw not in check_agents:
                msg = f"{key}={raw}: not an agent named in profile {pname}"
                _err(errors, "unknown-agent", msg, key, typ, raw)
            return raw

        return v_id
    if typ in ("ref", "token"):

        def v_str(raw: str, errors: list[Problem]) -> Any:
            return raw

        return v_str

    def v_unknown(raw: str, errors: list[Problem]) -> Any:
        _err(errors, "bad-slot-type", f"{key}: unknown slot type {typ} in spec", key, typ, raw)
        return raw

    return v_unknown


# ---------------------------------------------------------------- reading and merging


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise FormError(f"cannot read profile file {path}: {e}") from e


_core_data_cache: dict[str, Any] = {}


def core_data() -> Mapping[str, Any]:
    """The core vocabulary as read from rwcore's ``core.json`` (read once)."""
    data = _core_data_cache.get("core")
    if data is None:
        data = _read_json(BUILTIN_DIR / "core.json")
        if not isinstance(data, dict):
            raise FormError("core.json is not a JSON object")
        _core_data_cache["core"] = data
    return data


def _as_str_list(v: Any, what: str) -> list[str]:
    if not isinstance(v, list | tuple) or not all(isinstance(x, str) for x in v):
        raise FormError(f"{what} must be a list of strings")
    return list(v)


def _as_str_map(v: Any, what: str) -> dict[str, str]:
    if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()):
        raise FormError(f"{what} must be an object of strings")
    return dict(v)


def _merge(name: str, data: Mapping[str, Any] | None, dirs: tuple[str, ...]) -> Profile:
    """The core merged with one profile's data, as the reference merges it, then compiled."""
    core = core_data()
    types: dict[str, dict[str, Any]] = {
        k: {"required": list(v["required"]), "optional": list(v["optional"]), "name": v["name"]}
        for k, v in core["types"].items()
    }
    slots: dict[str, str] = dict(core["slots"])
    enums: dict[str, dict[str, str]] = {k: dict(v) for k, v in core["enums"].items()}
    core_asks = tuple(core["enums"]["ask"])
    ckeys: dict[str, str] = dict(core.get("constraint_keys", {}))
    cset: set[str] = set(core.get("constraint_set_keys", ["must", "no", "scope", "src"]))
    aliases: dict[str, list[str]] = {k: list(v) for k, v in core.get("value_aliases", {}).items()}
    slot_desc: dict[str, str] = {}
    agents: frozenset[str] | None = None
    item_examples: tuple[str, ...] | None = None
    item_kinds: dict[str, str] | None = None
    asks_used: tuple[str, ...] | None = None
    exec_map: dict[str, tuple[str, ...]] = {}
    sensitive = set(DEFAULT_SENSITIVE)
    declared: str | None = None
    if data is not None:
        declared_raw = data.get("profile", name)
        if not isinstance(declared_raw, str) or not declared_raw:
            raise FormError(f"profile {name}: 'profile' must be a non-empty string")
        declared = declared_raw
        for ename, vals in _as_dict(data.get("enums", {}), f"profile {name} enums").items():
            vals = _as_str_map(vals, f"profile {name} enum {ename}")
            if ename in enums:
                # a profile only adds to a core enum; for ask and why the reference lets a clash through silently,
                # rwcore refuses it too (documented in docs/rwcore-differences.md)
                clash = set(vals) & (set(core["enums"][ename]) if ename in ("ask", "why") else set(enums[ename]))
                if clash:
                    raise FormError(f"profile {name} redefines core codes {sorted(clash)} in enum {ename}")
            enums.setdefault(ename, {}).update(vals)
        for code, meaning in _as_str_map(data.get("asks", {}), f"profile {name} asks").items():
            if code in enums["ask"]:
                raise FormError(f"profile {name} redefines core ask {code}")
            enums["ask"][code] = meaning
        raw_slots = data.get("slots", [])
        if not isinstance(raw_slots, list):
            raise FormError(f"profile {name}: slots must be a list")
        for s in raw_slots:
            if not isinstance(s, dict) or not isinstance(s.get("key"), str) or not isinstance(s.get("type"), str):
                raise FormError(f"profile {name}: every slot needs a string key and type")
            key = s["key"]
            if key in slots:
                raise FormError(f"profile {name} redefines core slot {key}")
            slots[key] = s["type"]
            if s.get("desc"):
                slot_desc[key] = str(s["desc"])
            for t in _as_str_list(s.get("on", []), f"profile {name} slot {key} on"):
                if t not in types:
                    raise FormError(f"profile {name} slot {key} names unknown type {t}")
                types[t]["required" if s.get("required") else "optional"].append(key)
        if data.get("agents"):
            reserved = core.get("reserved_agents", ["human"])
            agents = frozenset(_as_str_list(data["agents"], f"profile {name} agents")) | frozenset(reserved)
        if data.get("item_examples"):
            item_examples = tuple(_as_str_list(data["item_examples"], f"profile {name} item_examples"))
        if data.get("item_kinds"):
            item_kinds = _as_str_map(data["item_kinds"], f"profile {name} item_kinds")
        if data.get("asks_used"):
            asks_used = tuple(_as_str_list(data["asks_used"], f"profile {name} asks_used"))
        if data.get("exec"):
            for ask, lst in _as_dict(data["exec"], f"profile {name} exec").items():
                exec_map[ask] = tuple(_as_str_list(lst, f"profile {name} exec {ask}"))
        sensitive |= set(_as_str_list(data.get("sensitive", []), f"profile {name} sensitive"))
        for k, meaning in _as_str_map(data.get("constraint_keys", {}), f"profile {name} constraint_keys").items():
            if k in ckeys:
                raise FormError(f"profile {name} redefines core constraint key {k}")
            ckeys[k] = meaning
        cset |= set(_as_str_list(data.get("constraint_set_keys", []), f"profile {name} constraint_set_keys"))
        for canon, alts in _as_dict(data.get("value_aliases", {}), f"profile {name} value_aliases").items():
            if canon in aliases:
                raise FormError(f"profile {name} redefines core alias {canon}")
            aliases[canon] = _as_str_list(alts, f"profile {name} value_aliases {canon}")
    return _compile(
        declared=declared,
        types=types,
        slots=slots,
        enums=enums,
        core_asks=core_asks,
        ckeys=ckeys,
        cset=cset,
        aliases=aliases,
        slot_desc=slot_desc,
        agents=agents,
        item_examples=item_examples,
        item_kinds=item_kinds,
        asks_used=asks_used,
        exec_map=exec_map,
        sensitive=sensitive,
        dirs=dirs,
        tail_max=int(core.get("tail_max_chars", 300)),
    )


def _compile(
    *,
    declared: str | None,
    types: Mapping[str, Mapping[str, Any]],
    slots: Mapping[str, str],
    enums: Mapping[str, Mapping[str, str]],
    core_asks: tuple[str, ...],
    ckeys: Mapping[str, str],
    cset: Iterable[str],
    aliases: Mapping[str, Iterable[str]],
    slot_desc: Mapping[str, str],
    agents: frozenset[str] | None,
    item_examples: tuple[str, ...] | None,
    item_kinds: Mapping[str, str] | None,
    asks_used: tuple[str, ...] | None,
    exec_map: Mapping[str, tuple[str, ...]],
    sensitive: Iterable[str],
    dirs: tuple[str, ...],
    tail_max: int,
) -> Profile:
    """A merged vocabulary compiled into a Profile: validators, per-type slot plans, read-only mappings."""
    slots = dict(slots)
    ro_enums = MappingProxyType({k: MappingProxyType(dict(v)) for k, v in enums.items()})
    ho = types["HO"]
    validators = {k: _compile_validator(k, typ, ro_enums, agents, declared) for k, typ in slots.items()}
    plans = {k: _plan(k, typ, validators[k], ro_enums) for k, typ in slots.items()}
    values = {k: _clean_value(typ, ro_enums, agents) for k, typ in slots.items()}
    decoded = {k for k, value in values.items() if value is not None and value[1]}
    typedefs: dict[str, TypeDef] = {}
    for code, tdata in types.items():
        allowed = set(tdata["required"]) | set(tdata["optional"]) | {"p"}
        if code == "RB":
            allowed |= set(ho["required"]) | set(ho["optional"])
        info = MappingProxyType({k: (kind, data, k in ENVELOPE, k in allowed) for k, (kind, data) in plans.items()})
        clean_keys = [k for k in slots if k in allowed and values[k] is not None and KEY_RE.match(k)]
        typedefs[code] = TypeDef(
            code,
            tdata["name"],
            tuple(tdata["required"]),
            tuple(tdata["optional"]),
            frozenset(allowed),
            info,
            required_set=frozenset(tdata["required"]),
            clean=_clean_matcher(code, clean_keys, values, declared, [k for k in slots if k.startswith("x_")]),
            decode_keys=tuple(k for k in clean_keys if k in decoded),
        )
    encode_order = tuple(s for s in slots if s not in ENVELOPE)
    ans = ro_enums.get("ans")
    return Profile(
        name=declared or "core",
        declared=declared,
        types=MappingProxyType(typedefs),
        slot_types=MappingProxyType(slots),
        validators=MappingProxyType(validators),
        enums=ro_enums,
        agents=agents,
        ans=ans if ans else None,
        exec_map=MappingProxyType(dict(exec_map)),
        slot_desc=MappingProxyType(dict(slot_desc)),
        item_examples=item_examples,
        item_kinds=MappingProxyType(dict(item_kinds)) if item_kinds is not None else None,
        asks_used=asks_used,
        tail_max=tail_max,
        constraint_keys=MappingProxyType(dict(ckeys)),
        constraint_set_keys=frozenset(cset),
        value_aliases=MappingProxyType({k: tuple(v) for k, v in aliases.items()}),
        sensitive=frozenset(sensitive),
        dirs=dirs,
        core_asks=core_asks,
        encode_order=encode_order,
        encode_order_set=frozenset(encode_order),
        encode_rank=MappingProxyType({k: i for i, k in enumerate(encode_order)}),
        ans_text="/".join(ans) if ans else "",
        acc_tables=AccTables(ckeys, cset, aliases),
        list_keys=frozenset(k for k, typ in slots.items() if typ.startswith("list:")),
    )


def _as_dict(v: Any, what: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise FormError(f"{what} must be an object")
    return v


# ---------------------------------------------------------------- lookup and cache


def _env_dirs() -> tuple[str, ...]:
    """The folders RWCORE_PROFILE_PATH names, read once (``clear_profile_cache`` reads it again)."""
    if not _ENV:
        raw = os.environ.get(PROFILE_PATH_ENV, "")
        _ENV.append(tuple(d for d in raw.split(os.pathsep) if d))
    return _ENV[0]


def _search(name: str, dirs: Iterable[str]) -> Path | None:
    for d in dirs:
        path = Path(d) / f"{name}.json"
        if path.is_file():
            return path
    path = BUILTIN_DIR / f"{name}.json"
    return path if path.is_file() else None


_CACHE: dict[tuple[str, tuple[str, ...]], Profile | FormError] = {}
_CACHE_LIMIT = 4096
# Fast paths, keyed by name alone, for lookups with no extra folders (RWCORE_PROFILE_PATH as first read).
_NAMED: dict[str | None, Profile] = {}
_REFERENCE: dict[str | None, Profile] = {}
_ENV: list[tuple[str, ...]] = []


def _cached(name: str, dirs: tuple[str, ...]) -> Profile:
    """Load (once) the profile ``name`` from ``dirs``; ``name`` is already known to be well formed."""
    key = (name, dirs)
    hit = _CACHE.get(key)
    if hit is None:
        try:
            if name == "core":
                hit = _merge("core", None, dirs)
            else:
                path = _search(name, dirs)
                if path is None:
                    raise FormError(f"unknown profile {name!r} (no {name}.json in profiles/)")
                data = _read_json(path)
                if not isinstance(data, dict):
                    raise FormError(f"profile {name}: {path} is not a JSON object")
                hit = _merge(name, data, dirs)
        except FormError as e:
            hit = e
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        _CACHE[key] = hit
    if isinstance(hit, FormError):
        raise FormError(str(hit)) from hit
    return hit


def _bad_name(name: str) -> FormError:
    return FormError(f"unknown profile {name!r} (profile names are lowercase letters, digits, - and _)")


def get_profile(name: str | None, extra_dirs: Sequence[str | Path] = ()) -> Profile:
    """The compiled profile ``name`` (``None``, ``""`` or ``"core"``: the bare core).

    Looks in ``extra_dirs``, then ``RWCORE_PROFILE_PATH``, then rwcore's own folder. Raises :class:`FormError` for
    an unknown or malformed profile, with the reference's wording.
    """
    if not extra_dirs:
        hit = _NAMED.get(name)
        if hit is not None:
            return hit
    elif isinstance(extra_dirs, str | Path):
        extra_dirs = (extra_dirs,)  # one folder given bare
    dirs = tuple(str(d) for d in extra_dirs) + _env_dirs() if extra_dirs else _env_dirs()
    if not name:
        prof = _cached("core", dirs)
    elif not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise _bad_name(str(name))
    else:
        prof = _cached(name, dirs)
    if not extra_dirs:
        _NAMED[name] = prof
    return prof


def switch_profile(name: str, dirs: tuple[str, ...]) -> Profile:
    """The profile a ``p=`` slot (or a reference-style profile argument) names, searched in ``dirs`` (the full list,
    e.g. the validating profile's own ``dirs``). As the reference's ``load_profile``, ``core`` is not a name a
    message or caller may use."""
    if not _NAME_RE.fullmatch(name) or name == "core":
        raise _bad_name(name)
    return _cached(name, dirs)


def reference_profile(name: str | None) -> Profile:
    """The profile the reference's ``load_profile(name)`` would load (strict about ``core``)."""
    hit = _REFERENCE.get(name)
    if hit is not None:
        return hit
    prof = get_profile(None) if not name else switch_profile(name, _env_dirs())
    _REFERENCE[name] = prof
    return prof


def resolve_profile(profile: Profile | str | None) -> Profile:
    """A Profile as given, or the one a name names (typed API: ``"core"`` and None are the bare core)."""
    if isinstance(profile, Profile):
        return profile
    return get_profile(profile)


def profile_from_spec(spec: Mapping[str, Any]) -> Profile:
    """Compile a reference-shaped spec dict (what ``load_profile`` returns, perhaps changed by the caller).

    Not cached: the dict may change between calls. Constraint keys and aliases come from the core."""
    try:
        core = core_data()
        types = {
            k: {"required": list(v["required"]), "optional": list(v["optional"]), "name": str(v["name"])}
            for k, v in spec["types"].items()
        }
        agents = spec.get("agents")
        declared = spec.get("profile")
        return _compile(
            declared=str(declared) if declared else None,
            types=types,
            slots={str(k): str(v) for k, v in spec["slots"].items()},
            enums={str(k): dict(v) for k, v in spec["enums"].items()},
            core_asks=tuple(core["enums"]["ask"]),
            ckeys=core.get("constraint_keys", {}),
            cset=core.get("constraint_set_keys", ["must", "no", "scope", "src"]),
            aliases=core.get("value_aliases", {}),
            slot_desc=dict(spec.get("slot_desc") or {}),
            agents=frozenset(agents) if agents else None,
            item_examples=tuple(spec["item_examples"]) if spec.get("item_examples") else None,
            item_kinds=dict(spec["item_kinds"]) if spec.get("item_kinds") else None,
            asks_used=tuple(spec["asks_used"]) if spec.get("asks_used") else None,
            exec_map={str(k): tuple(v) for k, v in (spec.get("exec") or {}).items()},
            sensitive=DEFAULT_SENSITIVE,
            dirs=_env_dirs(),
            tail_max=int(spec.get("tail_max", 300)),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise FormError(f"not a profile spec: {e!r}") from e


def profile_dict(prof: Profile) -> dict[str, Any]:
    """The reference's ``load_profile`` dict shape for a compiled profile (a fresh, mutable copy)."""
    spec: dict[str, Any] = {
        "types": {
            k: {"required": list(t.required), "optional": list(t.optional), "name": t.name}
            for k, t in prof.types.items()
        },
        "slots": dict(prof.slot_types),
        "enums": {k: dict(v) for k, v in prof.enums.items()},
        "tail_max": prof.tail_max,
        "agents": set(prof.agents) if prof.agents else None,
        "profile": prof.declared,
    }
    if prof.slot_desc:
        spec["slot_desc"] = dict(prof.slot_desc)
    if prof.item_examples:
        spec["item_examples"] = list(prof.item_examples)
    if prof.item_kinds:
        spec["item_kinds"] = dict(prof.item_kinds)
    if prof.asks_used:
        spec["asks_used"] = list(prof.asks_used)
    if prof.exec_map:
        spec["exec"] = {k: list(v) for k, v in prof.exec_map.items()}
    return spec


def clear_profile_cache() -> None:
    """Forget every compiled profile and re-read ``RWCORE_PROFILE_PATH`` at the next lookup (for tests, or a process
    whose profile folders changed). Profiles already handed out stay valid."""
    _CACHE.clear()
    _NAMED.clear()
    _REFERENCE.clear()
    _ENV.clear()
