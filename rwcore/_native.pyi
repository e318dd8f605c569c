"""Type stubs of ``rwcore._native``, the Rust extension (native/python/src/lib.rs)."""

from collections.abc import Callable, Iterable, Sequence
from typing import Any, overload

from rwcore._codec import Parsed
from rwcore._profiles import Profile

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

def parse_compat(
    line: str, grammar: Grammar, switch: Callable[[str], Any]
) -> tuple[dict[str, Any], list[str], list[str]]:
    """The reference's ``parse``: (its twin as a dict, the errors' messages, the warnings' messages)."""

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

def encode_twin(
    msg: dict[Any, Any], slots: dict[Any, Any], grammar: Grammar, switch: Callable[[str], Any]
) -> tuple[str, list[_Finding]]:
    """``encode`` of a JSON twin (a dict, its slots a dict): its envelope read off it, a key it lacks as None (``type``
    and ``id``: KeyError)."""

def canonical(msg: Any) -> str:
    """A message's canonical JSON."""

def message_digest(msg: Any) -> str:
    """A message's digest (``h=``)."""

def h_of_line(line: str, grammar: Grammar, switch: Callable[[str], Any]) -> tuple[str | None, list[_Finding]]:
    """A line's digest (``h=``) and ``[]``, or ``None`` and its errors: no message made."""

def ho_check(ho: Any, record: Any, grammar: Grammar) -> _Findings:
    """Check 1: (problems, notes)."""

def rb_check(ho: Any, rb: Any, grammar: Grammar, expect_acc: list[str] | None, now: str) -> _Findings:
    """Check 2: (problems, notes)."""

def dn_receipt(ho: Any, dn: Any) -> tuple[list[_Finding], bool]:
    """Check 3's type and receipt part: (problems, whether the check goes on)."""

def dn_check(ho: Any, dn: Any, grammar: Grammar, plan_rb: Any | None) -> _Findings:
    """Check 3: (problems, notes)."""

def ho_check_line(
    ho_line: str, grammar: Grammar, switch: Callable[[str], Any], record: Any, *, texts: bool = False
) -> tuple[list[Any], list[Any]]:  # with texts: list[str] each
    """Check 1 of a line, parsed here: (problems, notes); an invalid line's errors are ``ho-invalid`` problems.
    With ``texts``, each finding is its message only (the reference's shape)."""

def rb_check_lines(
    ho_line: str,
    rb_line: str,
    grammar: Grammar,
    switch: Callable[[str], Any],
    expect_acc: list[str] | None,
    now: str,
    *,
    texts: bool = False,
) -> tuple[list[Any], list[Any]]:  # with texts: list[str] each
    """Check 2 of two lines, parsed here: (problems, notes); with ``texts``, the findings' messages only."""

def dn_check_lines(
    ho_line: str,
    dn_line: str,
    grammar: Grammar,
    switch: Callable[[str], Any],
    rb_line: Any = None,
    now: str | None = None,
    *,
    texts: bool = False,
) -> tuple[list[Any], list[Any]]:  # with texts: list[str] each
    """Check 3 of two lines (or three: the readback that made the plan, checked at ``now``): (problems, notes);
    with ``texts``, the findings' messages only."""

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
    def feed_line(self, line: str, line_no: int | None, grammar: Grammar, switch: Callable[[str], Any]) -> bool: ...
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

class DecideRoute:
    """What the decision reads of a route's policy, read once per route."""

    def __init__(self, route: Any) -> None: ...

class Fields:
    """A parsed line's fields held for the ``Message`` a batch made of it, until one is read."""

    def values(self, slots_type: Any) -> tuple[Any, ...]: ...
    @property
    def id(self) -> str | None: ...

def encode_held(fields: Fields, grammar: Grammar, switch: Callable[[str], Any]) -> tuple[str, list[Any]]: ...

class MessageKit:
    """How a parsed line's ``Message`` is made (``rwcore._codec.MESSAGE_KIT``)."""

    def __init__(self, new: Any, message: type, set_v: Any, set_type: Any, set_fields: Any, version: str) -> None: ...

class ParsedKit:
    """How ``parse_line`` makes a valid line's ``Parsed`` (``rwcore._codec.PARSED_KIT``)."""

    def __init__(
        self,
        message_kit: MessageKit,
        new: Any,
        parsed: type,
        set_message: Any,
        set_errors: Any,
        set_warnings: Any,
        set_raw: Any,
        set_profile: Any,
        problems: Callable[[list[Any]], tuple[Any, ...]],
        switch: Callable[[str, Any], Any],
    ) -> None: ...

def parse_line(line: str, profile: Profile, kit: ParsedKit) -> Parsed | None: ...

class PreparedBatch:
    """A route's lines screened and parsed once (``prepare_batch``), for ``decide_batch``."""

    def __len__(self) -> int: ...

def prepare_batch(
    route: DecideRoute,
    values: list[bytes],
    conversations: list[str | None],
    switch: Callable[[str], Any],
    message_kit: MessageKit,
    record_key: Any,
) -> tuple[PreparedBatch, dict[str, set[str]], set[Any]]: ...
def decide_batch(
    batch: PreparedBatch,
    route: DecideRoute,
    lines: list[tuple[bytes, str | None, float | None, bool, int | None, Any]],
    states: dict[str, Any],
    overlay: Any,
    now: float,
    kit: tuple[Any, ...],
) -> tuple[list[Any], set[str], dict[str, set[str]]]: ...
def decide_line(
    raw: bytes,
    conversation: str | None,
    message: Any,
    invalid: str,
    raw_fields: tuple[Any, Any, Any, Any] | None,
    state: State,
    records: Any,
    route: Any,
    record_key: Any,
    now: float,
    first_seen: float | None,
    replay: bool,
    sender: Any,
    line_text: str | None,
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

class State:
    """A conversation's loaded state (native/engine/src/state.rs), behind gatekeeper.policy.state."""

    def __init__(self) -> None: ...
    @staticmethod
    def from_fields(fields: Any) -> State: ...
    @staticmethod
    def from_reply(reply: list[Any]) -> State: ...
    def copy(self) -> State: ...
    @property
    def seq(self) -> int: ...
    base_open: int
    legacy: bool
    @property
    def open_at_load(self) -> frozenset[str]: ...
    def set_open_at_load(self, ids: list[str]) -> None: ...
    @property
    def dirty(self) -> set[str]: ...
    def mark_all(self) -> None: ...
    def is_open(self, ho: str) -> bool: ...
    def open_delta(self) -> int: ...
    def open_count(self) -> int: ...
    def field(self, name: str) -> str | None: ...
    def changed_fields(self) -> dict[str, str]: ...
    def all_fields(self) -> dict[str, str]: ...
    def collection(self) -> list[str]: ...
    def save_args(
        self,
        epoch: int | None,
        ttl_open: int,
        ttl: int,
        now: str,
        oldest: str,
        collect_per_save: int,
        json: bool,
    ) -> Any: ...
    def ids(self, kind: str) -> list[str]: ...
    def has(self, kind: str, id: str) -> bool: ...
    def count(self, kind: str) -> int: ...
    def line(self, id: str) -> tuple[Any, ...] | None: ...
    def handoff(self, id: str) -> tuple[Any, ...] | None: ...
    def readback(self, id: str) -> tuple[Any, ...] | None: ...
    def tracker(self) -> Tracker: ...
    def remember_line(self, id: str, entry: Any) -> None: ...
    def open_handoff(self, entry: Any) -> None: ...
    def record_readback(self, entry: Any) -> None: ...
    def supersede(self, ho: str, by: str) -> None: ...
    def pass_readback(self, ho: str, rb: str) -> None: ...
    def refuse_readback(self, rb: str) -> None: ...
    def clear(self, ho: str, rb: str) -> None: ...
    def feed(self, msg: Any) -> None: ...
    def unbind(self, ho: str) -> None: ...
    def relay(self, ho: str, by: str) -> None: ...
    def answer_question(self, aq: str, by: str) -> None: ...
    def mark_unanswered(self, aq: str, at: float) -> None: ...
    def gatekeeper_cancel(self, ho: str, cx: str, why: str, at: float) -> None: ...
    def mark_overdue(self, ho: str, kind: str, at: float) -> None: ...
    def index_entry(
        self, ho: str, readback_timeout: float | None = None
    ) -> tuple[bool, float | None, float | None, float | None] | None: ...
    def deadlines(
        self, ho: str, readback_timeout: float | None = None, pending_only: bool = True
    ) -> list[tuple[str, float, str]] | None: ...
    def question_deadline(self, aq: str) -> tuple[float, str] | None: ...
    def live_handoffs(self) -> list[str]: ...
    def apply_engine(self, effects: Effects, problems: Any) -> tuple[list[tuple[str, str, str, str]], list[str]]: ...

class Effects:
    """A decision's effects as the engine made them (applied by State.apply_engine)."""

    def __len__(self) -> int: ...
    def tuples(self) -> list[tuple[Any, ...]]: ...

def exp_deadline(exp: str) -> float | None: ...
def due_deadline(due: str) -> float | None: ...
def by_deadline(by: str) -> float | None: ...

# the outcome records (engine::outcomes) and masking (engine::masking, engine::inert)
class Headers(Sequence[tuple[str, bytes]]):
    """A record's headers as the engine wrote them: a sequence of ``(name, value)`` pairs made only when read; equal
    to and hashed as the tuple of its pairs, added to a tuple as that tuple is."""

    def __init__(self, pairs: Iterable[tuple[str, bytes]]) -> None: ...
    @property
    def nbytes(self) -> int:
        """The bytes its names and values take (UTF-8), all together."""
    def __len__(self) -> int: ...
    @overload
    def __getitem__(self, at: int) -> tuple[str, bytes]: ...
    @overload
    def __getitem__(self, at: slice) -> tuple[tuple[str, bytes], ...]: ...
    def __add__(self, other: tuple[tuple[str, bytes], ...]) -> tuple[tuple[str, bytes], ...]: ...
    def __radd__(self, other: tuple[tuple[str, bytes], ...]) -> tuple[tuple[str, bytes], ...]: ...
    def __hash__(self) -> int: ...

_Record = tuple[str, str, bytes | None, bytes, Headers, int, int]

class OutcomeRoute:
    """What building a route's outcomes reads of the route, read once."""

    def __init__(self, targets: Any, sensitive: Iterable[str], version: str, author: str) -> None: ...

def build_outcomes(
    route: OutcomeRoute,
    decision: Any,
    source: Any,
    conversation: str | None,
    now: float,
    notice: Any,
    sig: bytes | None,
    notice_sig: bytes | None,
    level: int = 0,
) -> list[_Record | None]: ...
def build_outcomes_all(
    route: OutcomeRoute,
    lines: list[tuple[Any, Any, str | None, Any]],
    sigs: list[tuple[bytes | None, bytes | None]] | None,
    now: float,
    outcome: Any,
    kinds: dict[str, Any],
) -> list[list[Any]]:
    """Each line's ``outcome`` values at level 0, a line being ``(decision, source, conversation, notice)``, its
    ``(sig, notice_sig)`` in ``sigs`` (None: nothing signed)."""

def record_size(key: bytes | None, value: bytes, headers: Iterable[tuple[str, bytes]]) -> int: ...
def iso_time(epoch: float) -> str: ...
def mask_value(value: str) -> str: ...
def mask_list(value: str) -> str: ...
def mask_text(text: str, slots: Iterable[str], values: Iterable[str]) -> str: ...
def mask_line(line: str, slots: Iterable[str]) -> str: ...
def sensitive_values(text: str, slots: Iterable[str]) -> list[str]: ...
def learnable(value: str) -> list[str]: ...
def problem_values(problems: Iterable[Any], slots: Iterable[str]) -> list[str]: ...
def key_partition(key: bytes, count: int) -> int: ...
def take_in(
    records: Iterable[Any],
    topic: str,
    partition: int,
    header: str | None,
    now: float,
    source: Callable[..., Any],
    pending: Callable[..., Any],
    out: list[Any],
) -> int: ...
def conversation_of(key: bytes | None, headers: Iterable[tuple[str, bytes]], header: str | None) -> str | None: ...
def count_done(
    done: list[tuple[Any, Any]], now: float, forward: Any
) -> tuple[dict[str, list[float]], dict[tuple[str, str], int], list[int]]: ...

class RecordBatch:
    """A Kafka record batch (v2, uncompressed) for aiokafka's ``send_batch``: a closed ``BatchBuilder``."""

    def append(
        self, *, timestamp: int | None = None, key: Any = None, value: Any = None, headers: Any = None
    ) -> None: ...
    def close(self) -> None: ...
    def closed(self) -> bool: ...
    def record_count(self) -> int: ...
    def size(self) -> int: ...
    def _set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None: ...
    def _build(self) -> bytes: ...

def record_batches(records: Iterable[Any], max_size: int, timestamp: int) -> list[RecordBatch]: ...
def json_inert(doc: str) -> str: ...

DEFAULT_SENSITIVE: list[str]
MASK: str

# refusal notices (native/python/src/notices.rs)
NOTICE_ID_MIN: int
NOTICE_SPAN: int
REFUSED_BY: str

def refusal_notice(
    route: DecideRoute,
    message: Any,
    raw: bytes,
    problems: Iterable[Any],
    reason: str,
    rule: tuple[str, str, bool],
    sensitive: Iterable[str],
    proven: str | None,
    switch: Any,
) -> tuple[str, str, str, str, str] | None: ...
