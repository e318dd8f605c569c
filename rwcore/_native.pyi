"""Type stubs of ``rwcore._native``, the Rust extension (native/python/src/lib.rs)."""

from collections.abc import Callable
from typing import Any

def digest(data: bytes) -> str:
    """The protocol's integrity digest of UTF-8 bytes: the first 12 hex digits of their SHA-256."""

class Grammar:
    """A profile compiled for the parser."""

    def __init__(
        self,
        declared: str | None,
        types: list[tuple[str, list[str], list[str]]],
        slots: list[tuple[str, str]],
        enums: list[tuple[str, list[str]]],
        agents: list[str] | None,
        tail_max: int,
        int_max_digits: int,
    ) -> None: ...

_Finding = tuple[str, str, str | None, str | None, str | None]

def parse(
    line: str, grammar: Grammar, switch: Callable[[str], Any], slots_type: type
) -> tuple[tuple[Any, ...], list[_Finding], list[_Finding], Any]:
    """Parse a line: (twin, errors, warnings, the profile a ``p=`` switched to or None)."""

def errors(line: str, grammar: Grammar, switch: Callable[[str], Any]) -> list[_Finding]:
    """The errors the parser finds in a line, and nothing else."""

def encode(
    typ: Any,
    id: Any,
    envelope: tuple[Any, Any, Any, Any],
    slots: dict[Any, Any],
    tail: Any,
    grammar: Grammar,
    switch: Callable[[str], Any],
) -> tuple[str, list[_Finding]]:
    """A twin's line, written as the reference writes it, and the errors the parser finds in it."""
