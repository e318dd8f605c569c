"""Approved records files: what ``gatekeeper records load`` and ``gatekeeper check --records`` read.

Two formats, told apart by content:

1. One JSON object mapping each item to its record, or to a list of records (one per ask)::

       {"inv:MD-2026-057": {"ask": "PAY", "to": "payer", "sup": "marlow", "amt": "5400.00", ...},
        "sup:marlow": [{"ask": "CHGBANK", ...}, {"ask": "SEND", ...}]}

2. JSON lines: one record object per line, each with its ``item`` (blank lines are skipped)::

       {"item": "inv:MD-2026-057", "ask": "PAY", "to": "payer", "sup": "marlow", "amt": "5400.00", ...}

A record object holds the values the handoff must carry, as written on the line: ``ask`` (required), ``to`` and the
profile's slots; ``item`` is optional in the mapping form (it defaults to the key, and must equal it when given).
Three keys are not values:

- ``resolved``: an object of values the receiver resolves itself (the account on file, ``prev``); the readback and
  the done report must match them, the HO is not compared with them.
- ``expect_acc``: the sender's withheld criteria for a comprehension readback, a list of ``key:value`` strings or
  one ``+``-joined string (``"len:120w+tone:plain"``).
- ``signature``: the approving system's signature of the record (``gatekeeper.approvals``: ``v1 <key id> <sig>``,
  as ``gatekeeper records sign`` writes it); required where ``records.require_signed`` is on.

Values are strings as written on the line (``"5400.00"``, never the number 5400.0, which would lose the decimals).
Integers are accepted and kept as written; ``true``/``false`` become ``Y``/``N``; a list (``keep``, ``flag``) is kept
as a JSON list of strings, which the record check compares ``+``-joined.

Every problem is reported with its position (``line 3``, ``entry 2 (inv:MD-2026-057)``) and key, all at once, in one
``RecordsError``. With a profile, slot names and values are checked too: unknown slots, slots an HO does not carry,
and values that do not fit the slot's type (money, date, enum, int range, bool).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from gatekeeper.errors import UsageError
from gatekeeper.policy import Record, RecordKey
from rwcore import Profile

_KEY_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_MONEY_RE = re.compile(r"^-?\d+\.\d{2}$")
_DATE_RE = re.compile(r"^\d{8}$")
_TIME_RE = re.compile(r"^\d{8}T\d{4}Z$")
_INT_RANGE_RE = re.compile(r"^int:(\d+)-(\d+)$")
_ENVELOPE = frozenset({"to", "from", "item"})
_NOT_VALUES = frozenset({"resolved", "expect_acc", "signature"})


class RecordsError(UsageError):
    """A records file cannot be used. ``errors`` lists every problem, each with its position and key."""

    def __init__(self, source: str, errors: list[str]) -> None:
        self.source = source
        self.errors = tuple(errors)
        head = f"records file {source}: {len(errors)} problem{'s' if len(errors) != 1 else ''}"
        super().__init__(head + "".join(f"\n  {e}" for e in errors))


def load_records_file(path: str | Path, profile: Profile | None = None) -> list[Record]:
    """Read and parse a records file. Raises ``RecordsError`` (missing or unreadable file included)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecordsError(str(p), ["the file does not exist"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordsError(str(p), [f"the file cannot be read: {exc}"]) from None
    return parse_records(text, source=str(p), profile=profile)


def _too_many_digits() -> str:
    return f"not usable JSON: a number with more than {sys.get_int_max_str_digits():,} digits"


def parse_records(text: str, *, source: str = "<records>", profile: Profile | None = None) -> list[Record]:
    """Parse a records file's text (either format) into records, in file order."""
    errors: list[str] = []
    records: list[Record] = []
    stripped = text.strip()
    if not stripped:
        raise RecordsError(source, ["the file is empty: expected a JSON object of records or JSON lines"])
    whole: Any = None
    try:
        whole = json.loads(stripped)
        single = True
    except json.JSONDecodeError as exc:
        single = False
        if not _first_line_is_object(stripped):  # neither one JSON document nor JSON lines
            raise RecordsError(source, [f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"]) from None
    except ValueError:  # a number with more digits than Python converts (4,300)
        raise RecordsError(source, [_too_many_digits()]) from None
    if single:
        try:
            json.loads(stripped, object_pairs_hook=_no_duplicates)
        except _DuplicateKey as exc:
            raise RecordsError(source, [f"key {exc.key!r} appears twice in one object"]) from None
    if single and isinstance(whole, dict) and not _looks_like_record(whole):
        for where, default_item, obj in _mapping_entries(whole, errors):
            _collect(obj, where, default_item, profile, records, errors)
    elif single and isinstance(whole, list):
        for i, obj in enumerate(whole, 1):
            _collect(obj, f"entry {i}", None, profile, records, errors)
    elif single and isinstance(whole, dict):
        _collect(whole, "line 1", None, profile, records, errors)
    elif single:
        errors.append(f"the top level is {_kind(whole)}: expected a JSON object of records or JSON lines")
    else:
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            where = f"line {lineno}"
            try:
                obj = json.loads(line, object_pairs_hook=_no_duplicates)
            except _DuplicateKey as exc:
                errors.append(f"{where}: key {exc.key!r} appears twice")
                continue
            except json.JSONDecodeError as exc:
                errors.append(f"{where}: not JSON: {exc.msg} at column {exc.colno}")
                continue
            except ValueError:  # a number with more digits than Python converts (4,300)
                errors.append(f"{where}: {_too_many_digits()}")
                continue
            _collect(obj, where, None, profile, records, errors)
    seen: dict[RecordKey, int] = {}
    for i, r in enumerate(records):
        if r.key in seen:
            errors.append(f"item {r.item} ask {r.ask}: more than one record for this (item, ask)")
        seen.setdefault(r.key, i)
    if errors:
        raise RecordsError(source, errors)
    return records


# ---------------------------------------------------------------- one record


def record_from_object(
    obj: Any, where: str, *, default_item: str | None = None, profile: Profile | None = None
) -> tuple[Record | None, list[str]]:
    """One record object -> (the record, []) or (None, problems). ``where`` prefixes every problem."""
    if not isinstance(obj, dict):
        return None, [f"{where}: expected a record object, got {_kind(obj)}"]
    errors: list[str] = []

    def err(key: str, msg: str) -> None:
        errors.append(f"{where}: {key}: {msg}")

    item = obj.get("item", default_item)
    if "item" in obj and default_item is not None and obj["item"] != default_item:
        err("item", f"{obj['item']!r} differs from the key it is filed under ({default_item!r})")
    if item is None:
        err("item", "missing (every JSON line names its item)")
    elif not isinstance(item, str) or not item or " " in item:
        err("item", f"must be a non-empty string without spaces, got {item!r}")
    ask = obj.get("ask")
    bad_before = len(errors)
    if ask is None:
        err("ask", "missing: a record is for one ask (PAY, CHGBANK, DRAFT...)")
    elif not isinstance(ask, str) or not ask or not ask.isascii() or " " in ask:
        err("ask", f"must be a non-empty ASCII string without spaces, got {ask!r}")
    ask_reported = len(errors) > bad_before
    values: dict[str, Any] = {"item": item} if isinstance(item, str) else {}
    for key, raw in obj.items():
        if key in _NOT_VALUES or key == "item" or (key == "ask" and ask_reported):
            continue
        if not isinstance(key, str) or not _KEY_RE.match(key):
            err(str(key), "not a slot name (lowercase letters, digits and _, starting with a letter)")
            continue
        value = _value(raw)
        if isinstance(value, _Bad):
            err(key, value.why)
            continue
        values[key] = value
    resolved = _resolved(obj.get("resolved"), err)
    expect_acc = _expect_acc(obj.get("expect_acc"), "expect_acc" in obj, err)
    signature = obj.get("signature")
    if signature is not None and not (isinstance(signature, str) and signature.isascii() and signature):
        err("signature", "must be the approver's signature as text ('v1 <key id> <signature>')")
    if profile is not None:
        _check_profile(values, resolved, profile, err)
    if errors or not isinstance(item, str) or not isinstance(ask, str):
        return None, errors
    return (
        Record(
            item=item,
            ask=ask,
            values=values,
            resolved=resolved,
            expect_acc=expect_acc,
            signature=signature if isinstance(signature, str) else None,
        ),
        [],
    )


class _Bad:
    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


def _scalar(raw: Any) -> str | _Bad:
    if isinstance(raw, bool):
        return "Y" if raw else "N"
    if isinstance(raw, int):
        return str(raw)
    if isinstance(raw, float):
        return _Bad(f'write numbers as strings exactly as on the line (e.g. "{raw:.2f}"), not the JSON number {raw}')
    if isinstance(raw, str):
        if not raw:
            return _Bad("empty value")
        if any(ch.isspace() for ch in raw):
            return _Bad(f"{raw!r}: values have no spaces on an RW1 line")
        return raw
    return _Bad(f"expected a string, got {_kind(raw)}")


def _value(raw: Any) -> str | list[str] | _Bad:
    if isinstance(raw, list):
        if not raw:
            return _Bad("empty list")
        out: list[str] = []
        for i, x in enumerate(raw):
            v = _scalar(x)
            if isinstance(v, _Bad):
                return _Bad(f"element {i}: {v.why}")
            if "+" in v:
                return _Bad(f"element {i}: {v!r} contains '+', the list separator")
            out.append(v)
        return out
    return _scalar(raw)


def _resolved(raw: Any, err: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        err("resolved", f"expected an object of slot values, got {_kind(raw)}")
        return {}
    out: dict[str, str] = {}
    for key, v in raw.items():
        if not _KEY_RE.match(key):
            err(f"resolved.{key}", "not a slot name")
            continue
        value = _value(v)
        if isinstance(value, _Bad):
            err(f"resolved.{key}", value.why)
            continue
        out[key] = "+".join(value) if isinstance(value, list) else value
    return out


def _expect_acc(raw: Any, given: bool, err: Any) -> tuple[str, ...] | None:
    if not given:
        return None
    if isinstance(raw, str):
        parts = raw.split("+")
    elif isinstance(raw, list) and all(isinstance(x, str) for x in raw):
        parts = list(raw)
    else:
        err("expect_acc", f"expected a list of key:value strings or one +-joined string, got {_kind(raw)}")
        return None
    bad = [p for p in parts if ":" not in p or not p.partition(":")[0] or not p.partition(":")[2] or " " in p]
    if not parts or bad:
        err("expect_acc", f"each criterion is key:value without spaces (e.g. len:120w); bad: {bad or parts!r}")
        return None
    return tuple(parts)


# ---------------------------------------------------------------- against a profile


def _check_profile(values: Mapping[str, Any], resolved: Mapping[str, str], profile: Profile, err: Any) -> None:
    ho = profile.types.get("HO")
    for key, value in values.items():
        if key in _ENVELOPE and key != "to":
            continue
        typ = profile.slot_type(key)
        if typ is None:
            err(key, f"unknown slot under profile {profile.name}")
            continue
        if ho is not None and key not in ho.allowed:
            err(key, f"an HO does not carry {key} under profile {profile.name}")
            continue
        why = _type_problem(typ, value, profile)
        if why:
            err(key, why)
    for key, value in resolved.items():
        typ = profile.slot_type(key)
        if typ is None:
            err(f"resolved.{key}", f"unknown slot under profile {profile.name}")
            continue
        why = _type_problem(typ, value.split("+") if typ.startswith("list:") else value, profile)
        if why:
            err(f"resolved.{key}", why)


def _type_problem(typ: str, value: Any, profile: Profile) -> str | None:
    """Why ``value`` does not fit slot type ``typ`` (simple checks: money, date, time, enum, int range, bool)."""
    if typ.startswith("list:"):
        items = value if isinstance(value, list) else [value]
        for x in items:
            why = _type_problem(typ[5:], x, profile)
            if why:
                return why
        return None
    if isinstance(value, list):
        return f"one value expected for a {typ} slot, got a list"
    if typ == "money" and not _MONEY_RE.match(value):
        return f"{value}: money is digits with exactly two decimals, no separators (e.g. 5400.00)"
    if typ == "date" and not _DATE_RE.match(value):
        return f"{value}: dates are YYYYMMDD"
    if typ == "time" and not _TIME_RE.match(value):
        return f"{value}: times are YYYYMMDDTHHMMZ"
    if typ == "bool" and value not in ("Y", "N"):
        return f"{value}: booleans are Y or N"
    if typ.startswith("enum:"):
        enum = profile.enums.get(typ[5:])
        if enum is not None and value not in enum:
            return f"{value}: not one of {typ[5:]} ({' '.join(sorted(enum))})"
    m = _INT_RANGE_RE.match(typ)
    if m:
        lo, hi = int(m.group(1)), int(m.group(2))
        # ASCII digits only (isdigit() takes "²", which int() refuses), and never int() of thousands of digits
        digits = value.removeprefix("-")
        if not (digits.isascii() and digits.isdigit()) or len(digits) > 18 or not lo <= int(value) <= hi:
            return f"{value[:40]}: an integer from {lo} to {hi}"
    if typ == "agent" and profile.agents and value not in profile.agents:
        return f"{value}: not an agent named in profile {profile.name}"
    return None


# ---------------------------------------------------------------- helpers


def _collect(
    obj: Any,
    where: str,
    default_item: str | None,
    profile: Profile | None,
    records: list[Record],
    errors: list[str],
) -> None:
    rec, errs = record_from_object(obj, where, default_item=default_item, profile=profile)
    errors.extend(errs)
    if rec is not None:
        records.append(rec)


def _mapping_entries(whole: dict[str, Any], errors: list[str]) -> Iterator[tuple[str, str, Any]]:
    for n, (item, entry) in enumerate(whole.items(), 1):
        where = f"entry {n} ({item})"
        if isinstance(entry, list):
            if not entry:
                errors.append(f"{where}: an empty list of records")
            for i, obj in enumerate(entry, 1):
                yield f"{where} record {i}", item, obj
        else:
            yield where, item, entry


def _first_line_is_object(text: str) -> bool:
    first = text.split("\n", 1)[0]
    if "\n" not in text:
        return False
    try:
        return isinstance(json.loads(first), dict)
    except ValueError:  # not JSON, or a number with more digits than Python converts
        return False


def _looks_like_record(obj: dict[str, Any]) -> bool:
    """A single JSON object is one record (a one-line JSON lines file) when it carries a string ``ask``; otherwise
    it maps items to records."""
    return isinstance(obj.get("ask"), str)


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    return _KINDS.get(type(v), type(v).__name__)


_KINDS = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
