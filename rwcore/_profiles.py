"""Profiles: the core vocabulary plus one domain's codes, slots, agents and execution map, compiled once.

A profile file is the reference's JSON format (section 7), so a user's existing profile files load unchanged. rwcore
reads each file once, merges it with the core exactly as the reference does (a profile may add, never redefine), and
compiles the result into a frozen :class:`Profile`: per-type required/optional/allowed sets, enums as read-only
mappings, the grammar the parser runs on (native/rw1: one check per slot), the exec map, the agents, the answer
vocabulary, the constraint keys and aliases, and the slots to mask in logs. Nothing is re-read or re-merged per call.

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
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from rwcore import _native
from rwcore._errors import FormError

#: Environment variable naming extra profile folders, ``os.pathsep``-separated.
PROFILE_PATH_ENV: Final = "RWCORE_PROFILE_PATH"
#: rwcore's own profile folder (core, pay, clin, deploy, pform).
BUILTIN_DIR: Final = Path(__file__).resolve().parent / "profiles"
#: Slots masked in logs under every profile; a profile's ``sensitive`` list adds to these.
DEFAULT_SENSITIVE: Final = frozenset({"acct", "prev", "addr"})
#: The four envelope slots that live outside ``slots`` in the JSON twin.
ENVELOPE: Final = ("re", "from", "to", "item")

_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")


@dataclass(frozen=True, slots=True, eq=False)
class TypeDef:
    """One message type under a profile: its required and optional slots, and every slot it takes without a warning."""

    code: str
    name: str
    required: tuple[str, ...]
    optional: tuple[str, ...]
    allowed: frozenset[str]


@dataclass(frozen=True, slots=True, eq=False)
class Profile:
    """The core merged with one profile, compiled. Immutable; obtain it with :func:`get_profile`.

    ``name`` is ``"core"`` for the bare core, else the profile's declared name (what ``p=`` carries).
    """

    name: str
    declared: str | None
    types: Mapping[str, TypeDef]
    slot_types: Mapping[str, str]
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
    #: the profile compiled (native/rw1): for the parser (the slots' checks, the types, the answer vocabulary) and
    #: the checks (the exec map, tier 4's constraint keys and aliases)
    grammar: _native.Grammar

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
    """A merged vocabulary compiled into a Profile: its types, its grammar (native), read-only mappings."""
    slots = dict(slots)
    cset = tuple(cset)
    aliases = {canon: tuple(alts) for canon, alts in aliases.items()}
    ro_enums = MappingProxyType({k: MappingProxyType(dict(v)) for k, v in enums.items()})
    ho = types["HO"]
    typedefs: dict[str, TypeDef] = {}
    for code, tdata in types.items():
        allowed = set(tdata["required"]) | set(tdata["optional"]) | {"p"}
        if code == "RB":
            allowed |= set(ho["required"]) | set(ho["optional"])
        typedefs[code] = TypeDef(
            code,
            tdata["name"],
            tuple(tdata["required"]),
            tuple(tdata["optional"]),
            frozenset(allowed),
        )
    try:
        grammar = _native.Grammar(
            declared,
            [(t.code, list(t.required), sorted(t.allowed)) for t in typedefs.values()],
            list(slots.items()),
            [(name, list(codes)) for name, codes in ro_enums.items()],
            sorted(agents) if agents else None,
            tail_max,
            sys.get_int_max_str_digits(),
            [(ask, list(slots_)) for ask, slots_ in exec_map.items()],
            list(ckeys),
            list(cset),
            [(canon, list(alts)) for canon, alts in aliases.items()],
        )
    except ValueError as e:
        raise FormError(str(e)) from e
    ans = ro_enums.get("ans")
    return Profile(
        name=declared or "core",
        declared=declared,
        types=MappingProxyType(typedefs),
        slot_types=MappingProxyType(slots),
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
        grammar=grammar,
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
# The compatible API's per-name lookup in one step: (grammar, p= switch) of ``reference_profile(name)``.
_REFERENCE_PARTS: dict[str | None, tuple[Any, Callable[[str], Profile]]] = {}
_SWITCHES: dict[tuple[str, ...], Callable[[str], Profile]] = {}
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


def switcher(dirs: tuple[str, ...]) -> Callable[[str], Profile]:
    """What a ``p=`` slot on a line parsed under a profile found in ``dirs`` calls: the named profile, searched
    in the same folders (one function per list of folders)."""
    hit = _SWITCHES.get(dirs)
    if hit is None:
        hit = _SWITCHES[dirs] = lambda name: switch_profile(name, dirs)
    return hit


def reference_parts(name: str | None) -> tuple[Any, Callable[[str], Profile]]:
    """``reference_profile(name)``'s grammar and ``p=`` switch, what the compatible ``parse`` and ``encode`` hand
    the native code: kept per name, so that a call with a profile name finds both in one dict lookup."""
    hit = _REFERENCE_PARTS.get(name)
    if hit is None:
        prof = reference_profile(name)
        hit = _REFERENCE_PARTS[name] = (prof.grammar, switcher(prof.dirs))
    return hit


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
    _REFERENCE_PARTS.clear()
    _ENV.clear()
