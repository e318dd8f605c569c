"""Masking sensitive slot values wherever the gatekeeper writes text of its own: headers, alerts and logs.

A sensitive value (the slots ``acct``, ``prev``, ``addr`` and any a profile lists in ``sensitive``) is shown as
``****`` followed by its last characters, enough for an operator to tell two accounts apart and no more::

    40-12-88/61102938  ->  ****2938        (12 characters or more: the last 4)
    GB29NWBK           ->  ****WBK         (7 to 11: the last 3)
    12345              ->  ****45          (5 or 6: the last 2)
    1234               ->  ****            (4 or fewer: nothing)

What is masked:

- a line: every ``key=value`` token of a sensitive slot, in the head and in the tail, and every other occurrence in
  the line of a value found that way (a value quoted in the tail);
- a problem: ``expected`` and ``got`` when its slot is sensitive, and any sensitive value (of the line, or the
  problem's own expected/got) inside its ``message``;
- free text: the same, against the sensitive values collected from the line and its problems.

The record itself is never masked: the forwarded or dead-lettered value stays whole (replay needs it). Masking is
for the text the gatekeeper adds beside it, and for what the operator's commands print (``gatekeeper check``,
``records get``, ``handoffs show``; ``--unmasked`` shows the values in full where a command offers it).

The masking itself is the native engine's (``engine::masking``, which the outcome records use too); this module is
its Python face.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rwcore import Problem, _native

if TYPE_CHECKING:
    from gatekeeper.config import Settings

#: Masked under every profile; a profile's ``sensitive`` adds to these.
DEFAULT_SENSITIVE = frozenset(_native.DEFAULT_SENSITIVE)
MASK = _native.MASK


def mask_value(value: str) -> str:
    """``40-12-88/61102938`` -> ``****2938``: the mask and the last 2-4 characters (none for short values)."""
    return _native.mask_value(value)


@dataclass(frozen=True, slots=True)
class Masker:
    """Masks text against a set of sensitive slots and the sensitive values seen so far."""

    slots: frozenset[str] = DEFAULT_SENSITIVE
    values: frozenset[str] = frozenset()

    @classmethod
    def for_slots(cls, slots: Collection[str] = ()) -> Masker:
        return cls(slots=DEFAULT_SENSITIVE | frozenset(slots))

    def learn(self, values: Iterable[str | None]) -> Masker:
        """A masker that also masks these values wherever they occur (values shorter than 4 are not learnt:
        masking every ``12`` in a text would hide more than it protects)."""
        new = {part for v in values if v for part in _native.learnable(v)}
        return Masker(self.slots, self.values | frozenset(new)) if new - self.values else self

    def learn_line(self, text: str) -> Masker:
        """Learn the sensitive values of a line's ``key=value`` tokens."""
        return self.learn(_native.sensitive_values(text, self.slots))

    def learn_problems(self, problems: Iterable[Problem]) -> Masker:
        """Learn the expected and got values of the problems about a sensitive slot."""
        return self.learn(_native.problem_values(problems, self.slots))

    def text(self, text: str) -> str:
        """Mask sensitive ``key=value`` tokens, then every known sensitive value (the longest first), in ``text``.
        A token is ``key=value``: a lowercase ASCII letter, then lowercase letters, digits and ``_``, not preceded by
        an ASCII letter, digit or ``_``; its value runs to the next whitespace."""
        return _native.mask_text(text, self.slots, self.values)

    def value(self, slot: str | None, value: str | None) -> str | None:
        if value is None:
            return None
        if slot is not None and slot in self.slots:
            return _mask_list(value)
        return self.text(value)

    def problem(self, p: Problem) -> Problem:
        return Problem(
            code=p.code,
            message=self.text(p.message),
            tier=p.tier,
            slot=p.slot,
            expected=self.value(p.slot, p.expected),
            got=self.value(p.slot, p.got),
        )

    def problems(self, problems: Iterable[Problem]) -> tuple[Problem, ...]:
        return tuple(self.problem(p) for p in problems)


def _mask_list(value: str) -> str:
    return _native.mask_list(value)


def masker_for(line: str | bytes | None, problems: Iterable[Problem] = (), slots: Collection[str] = ()) -> Masker:
    """A masker that knows the sensitive values of ``line`` and ``problems`` under ``slots`` (plus the defaults)."""
    m = Masker.for_slots(slots)
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    if line:
        m = m.learn_line(line)
    return m.learn_problems(problems)


def mask_values(values: Mapping[str, Any], slots: Collection[str] = ()) -> dict[str, Any]:
    """A record's values (or its ``resolved`` values) with the sensitive ones masked: a string as ``mask_value``
    does, a list element by element; every other value is kept as it is."""
    sensitive = DEFAULT_SENSITIVE | frozenset(slots)
    out: dict[str, Any] = {}
    for k, v in values.items():
        if k not in sensitive:
            out[k] = v
        elif isinstance(v, str):
            out[k] = _mask_list(v)
        elif isinstance(v, list | tuple):
            out[k] = [mask_value(str(x)) for x in v]
        else:
            out[k] = mask_value(str(v))
    return out


def sensitive_slots(settings: Settings) -> frozenset[str]:
    """The slots whose values the operator's commands and the console mask: the defaults (acct, prev, addr) and
    every slot a configured route's profile lists as sensitive."""
    from rwcore import FormError, get_profile

    slots = set(DEFAULT_SENSITIVE)
    for route in settings.routes:
        try:
            slots |= get_profile(route.profile, extra_dirs=settings.all_profile_dirs()).sensitive
        except FormError:
            continue
    return frozenset(slots)


def mask_line(line: str | bytes, slots: Collection[str] = ()) -> str:
    """A line as it may appear in a log, a header or an alert."""
    text = line.decode("utf-8", errors="replace") if isinstance(line, bytes) else line
    return _native.mask_line(text, slots)


__all__ = [
    "DEFAULT_SENSITIVE",
    "MASK",
    "Masker",
    "mask_line",
    "mask_value",
    "mask_values",
    "masker_for",
    "sensitive_slots",
]
