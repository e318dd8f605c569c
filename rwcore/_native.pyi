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
        exec: list[tuple[str, list[str]]],
        constraint_keys: list[str],
        constraint_set_keys: list[str],
        value_aliases: list[tuple[str, list[str]]],
    ) -> None: ...

#: (code, tier, message, slot, expected, got)
_Finding = tuple[str, str, str, str | None, str | None, str | None]
_Findings = tuple[list[_Finding], list[_Finding]]

def parse(
    line: str, grammar: Grammar, switch: Callable[[str], Any], slots_type: type
) -> tuple[tuple[Any, ...], list[_Finding], list[_Finding], Any]:
    """Parse a line: (twin, errors, warnings, the profile a ``p=`` switched to or None)."""

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

def canonical(msg: Any) -> str:
    """A message's canonical JSON."""

def message_digest(msg: Any) -> str:
    """A message's digest (``h=``)."""

def ho_check(ho: Any, record: Any, grammar: Grammar) -> _Findings:
    """Check 1: (problems, notes)."""

def rb_check(ho: Any, rb: Any, grammar: Grammar, expect_acc: list[str] | None, now: str) -> _Findings:
    """Check 2: (problems, notes)."""

def dn_receipt(ho: Any, dn: Any) -> tuple[list[_Finding], bool]:
    """Check 3's type and receipt part: (problems, whether the check goes on)."""

def dn_check(ho: Any, dn: Any, grammar: Grammar, plan_rb: Any | None) -> _Findings:
    """Check 3: (problems, notes)."""

def acc_compare(
    expected: list[str], derived: list[str], keys: list[str], derived_not: list[str], grammar: Grammar
) -> _Findings:
    """Tier 4 alone: (problems, notes)."""

#: The profiles that have translation rules.
TRANSLATION_PROFILES: list[str]

def translation_check(msg: Any, profile: str) -> list[_Finding]:
    """The translation rules for a message under the profile named: its problems."""

_View = tuple[Any, ...]

class Tracker:
    """The closing rule over one conversation."""

    def __init__(self) -> None: ...
    def feed(self, msg: Any, line_no: int | None = None) -> list[_Finding]: ...
    def probe(self, msg: Any, line_no: int | None = None) -> list[_Finding]: ...
    def feed_invalid(self, line_no: int | None, messages: list[str]) -> list[_Finding]: ...
    def skip(self, line_no: int | None = None) -> None: ...
    @property
    def last_line(self) -> int: ...
    def __len__(self) -> int: ...
    def report(self, now: str) -> _Findings: ...
    def handoff(self, id: str) -> _View | None: ...
    def flags(self, id: str) -> tuple[bool, bool] | None: ...
    def views(self, open_only: bool) -> list[_View]: ...
    def handoff_state(self, id: str) -> list[Any] | None: ...
    def to_state(self) -> dict[str, Any]: ...
    @staticmethod
    def partial(records: Any, last_line: Any) -> Tracker: ...
    @staticmethod
    def from_state(state: Any) -> Tracker: ...

# The gatekeeper's decision engine (native/engine), as far as it is ported: the gate's input rules, the reserved ids,
# the shapes of an answer.

RESERVED_ID_MIN: int
RESERVED_ID_MAX: int

def screen(raw: bytes, max_bytes: int) -> tuple[str | None, list[_Finding]]: ...
def conversation_problem(conversation: str) -> list[_Finding]: ...
def is_reserved_id(id: str) -> bool: ...
def id_number(id: str) -> int | None: ...
def answer_problems(
    an_id: str, aq_id: str, need: str, val: str, allowed: list[str], tail: str | None
) -> list[_Finding]: ...
def impossible_date(value: str) -> bool: ...
def authority_table() -> list[tuple[str, str, list[tuple[str, str, str]], tuple[str, str, str, bool]]]: ...
def decide_line(
    raw: bytes,
    conversation: str | None,
    message: Any,
    invalid: str,
    raw_fields: tuple[Any, Any, Any, Any] | None,
    state: Any,
    records: Any,
    route: Any,
    record_key: Any,
    now: float,
    first_seen: float | None,
    replay: bool,
    sender: Any,
) -> tuple[Any, ...]: ...
def line_digest(raw: bytes) -> str: ...
def rw_time(epoch: float) -> str: ...
def holder_of(route: str, conversation: str, ho_id: str, digest: str, at: float) -> str: ...
def holder_identity(holder: str) -> str: ...
def bound_handoff(holder: str) -> str: ...
def bound_at(holder: str) -> float | None: ...
def legend(
    types: list[tuple[str, str, list[str], list[str]]],
    slot_desc: list[tuple[str, str]],
    slot_types: list[tuple[str, str]],
    enums: list[tuple[str, list[tuple[str, str]]]],
    core_asks: list[str],
    asks_used: list[str],
    constraint_keys: list[tuple[str, str]],
    exec_map: list[tuple[str, list[str]]],
    declared: str | None,
    agents: list[str],
    ans: bool,
    item_kinds: list[tuple[str, str]],
    item_examples: list[str],
    lean: bool,
) -> str: ...
