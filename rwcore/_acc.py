"""Tier 4, the comprehension check: the sender's withheld criteria against the ones the receiver derived (5.2).

Values are compared after normalisation (lowercase, alias table, punctuation stripped, a crude singular), by key.
A single-valued key must match strictly; a set-valued key (``must no scope src``) also accepts a loose match on a
shared distinctive word and notes it. The tables come from the profile (the core's closed set plus what a profile
adds) and are compiled once into an :class:`AccTables`, which also memoises normalised values.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from rwcore._errors import problem
from rwcore._types import Problem

RB_LEVELS: Final = frozenset({"echo", "all", "acc", "plan", "exec"})
STOP: Final = frozenset(
    {"the", "and", "with", "for", "from", "that", "this", "must", "not", "no", "of", "to", "in", "on", "a", "an"}
)
_SPLIT = re.compile(r"[^a-z0-9]+").split
_NORM_CACHE_LIMIT = 8192


def split_constraint(tok: str) -> tuple[str, str]:
    """``'len:120w'`` -> ``('len', '120w')``; a bare token is its own key with an empty value."""
    k, _, v = tok.partition(":")
    return k.strip().lower(), v.strip().lower()


class AccTables:
    """The constraint keys, set-valued keys and alias table, compiled; with a bounded memo of normalised values."""

    __slots__ = ("_norm_cache", "_same_cache", "_split_cache", "alias_map", "known", "known_text", "set_keys")

    def __init__(self, known: Iterable[str], set_keys: Iterable[str], aliases: Mapping[str, Iterable[str]]) -> None:
        self.known: frozenset[str] = frozenset(known)
        self.set_keys: frozenset[str] = frozenset(set_keys)
        amap: dict[str, str] = {}
        for canon, alts in aliases.items():
            amap.setdefault(canon, canon)
            for alt in alts:
                amap.setdefault(alt, canon)
        self.alias_map: Mapping[str, str] = amap
        self.known_text = ", ".join(sorted(self.known))
        self._norm_cache: dict[str, tuple[str, frozenset[str]]] = {}
        self._same_cache: dict[tuple[str, str], int] = {}
        self._split_cache: dict[str, tuple[str, str]] = {}

    def split(self, tok: str) -> tuple[str, str]:
        """:func:`split_constraint`, memoised."""
        hit = self._split_cache.get(tok)
        if hit is None:
            hit = split_constraint(tok)
            if len(self._split_cache) >= _NORM_CACHE_LIMIT:
                self._split_cache.clear()
            self._split_cache[tok] = hit
        return hit

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> AccTables:
        """Tables from a reference-shaped dict (``constraint_keys``, ``constraint_set_keys``, ``value_aliases``)."""
        return cls(
            spec.get("constraint_keys", {}),
            spec.get("constraint_set_keys", ["must", "no", "scope", "src"]),
            spec.get("value_aliases", {}),
        )

    def norm(self, v: str) -> tuple[str, frozenset[str]]:
        """A value normalised: (its words joined, its word set)."""
        hit = self._norm_cache.get(v)
        if hit is not None:
            return hit
        w = v.lower().strip()
        w = self.alias_map.get(w, w)
        words = [x for x in _SPLIT(w) if x]
        words = [x[:-1] if len(x) >= 5 and x.endswith("s") and not x.endswith("ss") else x for x in words]
        out = ("".join(words), frozenset(words))
        if len(self._norm_cache) >= _NORM_CACHE_LIMIT:
            self._norm_cache.clear()
        self._norm_cache[v] = out
        return out

    def same_value(self, a: str, b: str) -> int:
        """0 no match; 1 strict (equal, a 4+ character prefix, or one word set inside the other); 2 loose (a
        shared distinctive word of 5+ characters). Memoised."""
        if a == b:
            return 1
        hit = self._same_cache.get((a, b))
        if hit is None:
            hit = self._same(a, b)
            if len(self._same_cache) >= _NORM_CACHE_LIMIT:
                self._same_cache.clear()
            self._same_cache[(a, b)] = hit
        return hit

    def _same(self, a: str, b: str) -> int:
        ja, wa = self.norm(a)
        jb, wb = self.norm(b)
        if ja == jb:
            return 1
        if len(ja) >= 4 and len(jb) >= 4 and (ja.startswith(jb) or jb.startswith(ja)):
            return 1
        if wa and wb and (wa <= wb or wb <= wa):
            return 1
        for w in wa & wb:
            if len(w) >= 5 and w not in STOP:
                return 2
        return 0


def _c(
    out: list[Problem],
    code: str,
    message: str,
    slot: str | None = None,
    expected: str | None = None,
    got: str | None = None,
) -> None:
    out.append(problem(code, message, "comprehension", slot, expected, got))


def compare(
    expected: Iterable[str],
    derived: Iterable[str],
    keys: Sequence[Any] | None,
    derived_not: Iterable[str] | None,
    t: AccTables,
) -> tuple[list[Problem], list[Problem]]:
    """compare_acc, as data: (problems, notes)."""
    problems: list[Problem] = []
    notes: list[Problem] = []
    exp: dict[str, list[str]] = {}
    der: dict[str, list[str]] = {}
    split = t.split
    for tok in expected:
        k, v = split(tok)
        exp.setdefault(k, []).append(v)
    for tok in derived:
        k, v = split(tok)
        der.setdefault(k, []).append(v)
    for v in derived_not or ():
        der.setdefault("no", []).append(v)
    known = t.known
    if not (exp.keys() <= known and der.keys() <= known):
        for k in [*exp, *der]:
            if k not in known:
                msg = f"key {k} is not in the closed constraint set; not compared (use one of {t.known_text})"
                _c(notes, "acc-unknown-key", msg, slot=k)
    same = t.same_value
    set_keys = t.set_keys
    for k, vs in exp.items():
        if k not in known:
            continue
        dvs = der.get(k)
        if dvs is None:
            joined = "/".join(vs)
            _c(problems, "acc-gap", f"tier4 comprehension: gap, receiver did not derive {k}:{joined}", k, joined)
            continue
        if k in set_keys:
            for v in vs:
                best = (same(v, dvs[0]), dvs[0]) if len(dvs) == 1 else max((same(v, d), d) for d in dvs)
                if best[0] == 0:
                    _c(problems, "acc-gap", f"tier4 comprehension: gap, receiver did not derive {k}:{v}", k, v)
                elif best[0] == 2:
                    _c(
                        notes,
                        "acc-loose",
                        f"loose match: sender {k}:{v} taken as receiver {k}:{best[1]}",
                        k,
                        v,
                        best[1],
                    )
            for d in dvs:
                if not (same(vs[0], d) if len(vs) == 1 else any(same(v, d) for v in vs)):
                    _c(notes, "acc-assumption", f"assumption: receiver added {k}:{d}; confirm or correct", k, None, d)
        elif not (same(vs[0], dvs[0]) == 1 if len(dvs) == 1 else any(same(vs[0], d) == 1 for d in dvs)):
            want, got = "/".join(vs), "/".join(dvs)
            msg = f"tier4 comprehension: contradiction on {k}: sender {want} vs receiver {got}"
            _c(problems, "acc-contradiction", msg, k, want, got)
    for k in keys or ():
        k = k.lower()
        if k in known and k not in der and k not in exp:
            msg = f"tier4 comprehension: gap, sender asked for {k} in keys= and receiver did not report it"
            _c(problems, "acc-gap", msg, k)
    for k, vs in der.items():
        if k in known and k not in exp and k not in set_keys:
            joined = "/".join(vs)
            _c(notes, "acc-assumption", f"assumption: receiver added {k}:{joined}; confirm or correct", k, None, joined)
    return problems, notes
