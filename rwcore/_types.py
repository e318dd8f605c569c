"""The typed values rwcore speaks in: a message, a problem, a check's result.

These are the contract between rwcore and everything built on it (the gatekeeper's policy, its CLI, replay).
They are frozen and slotted; the compatible API renders them to the reference's dicts and strings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

#: A decoded slot value: integers for int/days slots, booleans for bool slots, tuples for lists, strings otherwise.
SlotValue = str | int | bool | tuple[Any, ...]


class Slots(dict[str, SlotValue]):
    """A message's slots: a dict that refuses every change, so that a Message stays a value.

    Reading it is reading a dict: ``{**slots}``, ``dict(slots)``, iteration and lookups take the dict's own fast
    paths (a read-only proxy over a dict makes every one of them a call through the mapping protocol, and the
    checks read slots a great deal). ``dict(slots)`` or ``slots.copy()`` is a mutable copy.
    """

    __slots__ = ()

    def _read_only(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("a message's slots are read-only")

    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only

    def __reduce__(self) -> tuple[type[Slots], tuple[dict[str, SlotValue]]]:
        return Slots, (dict(self),)

    def __repr__(self) -> str:
        return f"Slots({dict.__repr__(self)})"


_EMPTY: Mapping[str, SlotValue] = Slots()


def _freeze(v: Any) -> SlotValue:
    if isinstance(v, list | tuple):
        return tuple(_freeze(x) for x in v)
    return v  # type: ignore[no-any-return]


def _thaw(v: SlotValue) -> Any:
    if isinstance(v, tuple):
        return [_thaw(x) for x in v]
    return v


@dataclass(frozen=True, slots=True)
class Message:
    """One RW1 line, decoded: the JSON twin of section 6 as a frozen value.

    ``from_`` is the ``from`` field (a Python keyword). ``slots`` is read-only; list slots are tuples.

    A message parsed from a line (``parse_line``, the worker's batches) is made with its ``v`` and ``type`` only,
    its other fields held natively in the parser's twin (``_fields``) and made on the first read of one
    (``__getattr__``): the same values, equal, hashed, shown and pickled as any other message's. Most of the
    worker's messages are never read past their type, and the typed API (the checks, the digest, ``encode_message``)
    reads the twin itself rather than the fields: making them and reading them back cost more than the parse.
    """

    v: str
    type: str
    id: str
    from_: str
    to: str
    re: str | None = None
    item: str | None = None
    slots: Mapping[str, SlotValue] = field(default_factory=lambda: _EMPTY)
    tail: str | None = None
    #: the parser's twin the fields are made from (``rwcore._native.Fields``), kept once they are (the typed API
    #: reads it); None for a message made field by field
    _fields: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if type(self.slots) is not Slots:
            object.__setattr__(self, "slots", Slots({k: _freeze(v) for k, v in self.slots.items()}))

    if not TYPE_CHECKING:  # to a type checker every field is set, as it is to a reader

        def __getattr__(self, name: str) -> Any:
            """Reached only when a field is not set: a parsed message's held fields, made now (all of them)."""
            return _held_field(self, name)

    def __getstate__(self) -> list[Any]:
        return [getattr(self, name) for name in _FIELD_NAMES]

    def __setstate__(self, state: list[Any]) -> None:
        for name, value in zip(_FIELD_NAMES, state, strict=True):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_fields", None)

    def to_dict(self) -> dict[str, Any]:
        """The JSON twin (section 6) as a plain dict, key order as the reference emits it."""
        return {
            "v": self.v,
            "type": self.type,
            "id": self.id,
            "re": self.re,
            "from": self.from_,
            "to": self.to,
            "item": self.item,
            "slots": {k: _thaw(v) for k, v in self.slots.items()},
            "tail": self.tail,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Message:
        """Build from a JSON twin. Does not validate: use ``rwcore.parse_line`` or ``rwcore.encode`` for that."""
        return cls(
            v=d.get("v") or "RW1",
            type=d["type"],
            id=d["id"],
            from_=d["from"],
            to=d["to"],
            re=d.get("re"),
            item=d.get("item"),
            slots=dict(d.get("slots") or {}),
            tail=d.get("tail"),
        )


_FIELD_NAMES = ("v", "type", "id", "from_", "to", "re", "item", "slots", "tail")
#: the fields a parsed message holds natively until one is read, in the order ``Fields.values`` gives them
_HELD = ("id", "from_", "to", "re", "item", "slots", "tail")
_HELD_SETTERS = tuple(Message.__dict__[name].__set__ for name in _HELD)
_HELD_FIELDS = Message.__dict__["_fields"].__get__
_ID_SETTER = Message.__dict__["id"].__set__


def _held_field(m: Message, name: str) -> Any:
    held = _HELD_FIELDS(m) if name in _HELD else None
    if held is None:
        raise AttributeError(f"{type(m).__name__!r} object has no attribute {name!r}")
    if name == "id":  # read alone more than any other (a dead letter's log line): made alone
        value = held.id
        _ID_SETTER(m, value)
        return value
    for set_field, value in zip(_HELD_SETTERS, held.values(Slots), strict=True):
        set_field(m, value)
    return getattr(m, name)


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding of a check or the parser, as data.

    ``code`` is stable and machine-readable (metrics labels, dead-letter headers); ``message`` is the human text,
    worded as the reference words it. ``tier`` names where it was found (``form``, ``receipt``, ``integrity``,
    ``echo``, ``comprehension``, ``execution``, ``expiry``, ``record``, ``executed``, ``thread``, ``translation``).
    """

    code: str
    message: str
    tier: str | None = None
    slot: str | None = None
    expected: str | None = None
    got: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        return {
            "code": self.code,
            "tier": self.tier,
            "slot": self.slot,
            "expected": self.expected,
            "got": self.got,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class CheckResult:
    """What a check returns: problems (any means stop) and notes (worth logging)."""

    problems: tuple[Problem, ...] = ()
    notes: tuple[Problem, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def compat(self) -> tuple[list[str], list[str]]:
        """The reference's return shape: (problems, notes) as lists of strings."""
        return [p.message for p in self.problems], [n.message for n in self.notes]
