"""The decision's vocabulary: verdicts, reasons, the route's policy, what a decision changes."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import msgspec

from gatekeeper.policy.state import HandoffEntry, LineEntry, ReadbackEntry, Record, RecordKey
from rwcore import Message, Problem, Profile, _native


class Verdict(enum.StrEnum):
    FORWARD = "forward"
    DEAD_LETTER = "dead-letter"
    ALERT = "alert"  # forwarded, flagged, and an alert raised
    HOLD = "hold"  # not decided yet: a reply whose handoff may still be on its way; retried within the window


class Reason(enum.StrEnum):
    """Stable reason codes: dead-letter headers and metrics labels use these."""

    INVALID = "invalid"
    NO_CONVERSATION = "no-conversation"
    SENDER_BINDING = "sender-binding"
    SENDER_AUTH = "sender-auth"  # the route requires signed lines: no valid signature of the from= agent's key
    RESERVED_ID = "reserved-id"
    DUPLICATE_ID = "duplicate-id"
    REFUSED_HANDOFF = "refused-handoff"
    EXPIRED = "expired"
    NO_RECORD = "no-record"
    CHECK_HO = "check-ho"
    RECORD_USED = "record-used"
    UNKNOWN_HANDOFF = "unknown-handoff"
    CHECK_RB = "check-rb"
    CLEARANCE = "clearance"
    CHECK_DN = "check-dn"
    CHECK_THREAD = "check-thread"
    TRANSLATION = "translation"
    INTERNAL_ERROR = "internal-error"  # deciding the line raised: a bug, never the line's fault or infrastructure
    AWAITING_HANDOFF = "awaiting-handoff"  # the reason of a HOLD


# The members the worker's per-line loops compare with, as module names: on Python 3.11 a member read through its
# class (``Verdict.HOLD``) goes through the enum metaclass's ``__getattr__`` hook, about 70 ns a read against 5.
FORWARD, DEAD_LETTER, ALERT, HOLD = Verdict.FORWARD, Verdict.DEAD_LETTER, Verdict.ALERT, Verdict.HOLD
INTERNAL_ERROR = Reason.INTERNAL_ERROR


#: Where the problems of a reason come from (the ``check`` dead-letter header).
CHECK_OF_REASON: Mapping[Reason, str] = {
    Reason.INVALID: "gate",
    Reason.NO_CONVERSATION: "gate",
    Reason.SENDER_BINDING: "gate",
    Reason.SENDER_AUTH: "gate",
    Reason.RESERVED_ID: "gate",
    Reason.DUPLICATE_ID: "conversation",
    Reason.REFUSED_HANDOFF: "conversation",
    Reason.EXPIRED: "check_ho",
    Reason.NO_RECORD: "check_ho",
    Reason.CHECK_HO: "check_ho",
    Reason.RECORD_USED: "check_ho",
    Reason.UNKNOWN_HANDOFF: "conversation",
    Reason.CHECK_RB: "check_rb_full",
    Reason.CLEARANCE: "clearance",
    Reason.CHECK_DN: "check_dn",
    Reason.CHECK_THREAD: "check_thread",
    Reason.TRANSLATION: "translation",
    Reason.INTERNAL_ERROR: "gatekeeper",
    Reason.AWAITING_HANDOFF: "conversation",
}

#: The gatekeeper writes its own lines (expiry cancels) with message numbers in this range; agents may not use it.
RESERVED_ID_MIN: int = _native.RESERVED_ID_MIN
RESERVED_ID_MAX: int = _native.RESERVED_ID_MAX


def id_number(msg_id: str) -> int | None:
    """The number of a message id ``<sender>-<n>``, for comparing with the reserved range; None when the part after
    the last ``-`` is not ASCII digits. A number longer than the range's own numbers (leading zeros aside) is
    above every range the gatekeeper keeps: it is returned as ``RESERVED_ID_MAX + 1`` without converting it (``int``
    refuses thousands of digits, and a line may carry that many). Native: ``engine::rules``."""
    number: int | None = _native.id_number(msg_id)
    return number


def is_reserved_id(msg_id: str) -> bool:
    """Whether an id's number is in the range the gatekeeper keeps for its own lines."""
    reserved: bool = _native.is_reserved_id(msg_id)
    return reserved


AFFIRMATIVE = frozenset({"Y", "APPROVE"})
#: A cancel says why, one of these (stricter than the reference parser on purpose: docs/verdicts.md, the choices).
CANCEL_WHY = frozenset({"REVOKED", "SUPERSEDED", "EXPIRED", "TIMEOUT"})
NEGATIVE = frozenset({"N", "DECLINE", "REJECT", "HOLD", "CALLBACK"})


class Mode(enum.StrEnum):
    ENFORCE = "enforce"
    DRY_RUN = "dry-run"


@dataclass(frozen=True, slots=True)
class RoutePolicy:
    """What the decision needs to know about the route a line arrived on."""

    name: str
    profile: Profile
    mode: Mode = Mode.ENFORCE
    senders: frozenset[str] | None = None  # sender binding: which from= may publish here; None means any
    hold_seconds: float = 30.0  # how long a reply whose handoff is unknown is held before it is refused
    max_line_bytes: int = 8192
    readback_timeout_seconds: float | None = None  # no passing readback this long after forwarding: CX why=TIMEOUT
    sender_auth: bool = False  # every line must carry a valid signature of its from= agent's key (SenderProof)
    #: the shortest time a handoff's state is kept after it was written (the store's retentions): a binding older than
    #: this whose handoff the state does not know may be a spent approval's (``policy.decide``)
    state_ttl_seconds: float = 7 * 86400.0
    #: whether a record may be honoured (``gatekeeper.approvals.ApproverRing.check``: its approver's signature): the
    #: problem when not; None: every record is
    record_check: Callable[[Record], Problem | None] | None = None
    #: refuse (check-rb) a comprehension readback (rb=acc, rb=plan) whose record holds no withheld criteria, instead
    #: of forwarding it with the note ``comprehension-unverified``
    refuse_unverified_comprehension: bool = False


class SenderProof(msgspec.Struct, frozen=True, gc=False):
    """What verifying a record's signature found (``gatekeeper.auth.verify``, run where the record's headers are
    known): the ``agent`` whose key ``key_id`` signed the record's conversation and line, or, ``agent`` None, the
    problem code of what failed (``failure``: ``sender-auth-missing``, ``-malformed``, ``-unknown-key``,
    ``-bad-signature``) and a ``detail`` that never carries the signature itself."""

    agent: str | None = None
    key_id: str | None = None
    failure: str | None = None
    detail: str = ""


class RecordView(Protocol):
    """The records and exec bindings a decision may read (loaded for the batch beforehand)."""

    def record(self, key: RecordKey) -> Record | None: ...

    def binding(self, key: RecordKey) -> str | None: ...


# ---------------------------------------------------------------- effects: the only way a decision changes state


class RememberLine(msgspec.Struct, frozen=True, gc=False):
    id: str
    entry: LineEntry


class OpenHandoff(msgspec.Struct, frozen=True, gc=False):
    entry: HandoffEntry


class Supersede(msgspec.Struct, frozen=True, gc=False):
    ho: str
    by: str


class RecordReadback(msgspec.Struct, frozen=True, gc=False):
    entry: ReadbackEntry


class PassReadback(msgspec.Struct, frozen=True, gc=False):
    ho: str
    rb: str


class RefuseReadback(msgspec.Struct, frozen=True, gc=False):
    rb: str


class Clear(msgspec.Struct, frozen=True, gc=False):
    ho: str
    rb: str


class FeedThread(msgspec.Struct, frozen=True, gc=False):
    message: Message


class Bind(msgspec.Struct, frozen=True, gc=False):
    """Claim an exec record for a handoff: ``holder`` names it (``policy.decide.holder_of``)."""

    key: RecordKey
    holder: str
    ho: str


class Release(msgspec.Struct, frozen=True, gc=False):
    """The handoff ended without the act: its record may be used by another handoff."""

    key: RecordKey
    holder: str
    ho: str


class Relay(msgspec.Struct, frozen=True, gc=False):
    """The handoff ``ho`` is forwarded by its receiver's relay ``by`` (spec 5.3): once."""

    ho: str
    by: str


class AnswerQuestion(msgspec.Struct, frozen=True, gc=False):
    """The question ``aq`` is answered (an AN, or a UN from the one asked) by the line ``by``: once."""

    aq: str
    by: str


class GatekeeperCancel(msgspec.Struct, frozen=True, gc=False):
    """The gatekeeper cancelled the handoff on its sender's behalf (``policy.lifecycle``): its CX ``cx`` with
    ``why`` (``EXPIRED`` or ``TIMEOUT``), written at ``at``."""

    ho: str
    cx: str
    why: str
    at: float


class MarkOverdue(msgspec.Struct, frozen=True, gc=False):
    """The handoff's expiry (``exp=``/``due=``) passed while it was open and the gatekeeper acted on it at ``at``:
    ``kind`` is the alert it raised (``thread-orphaned`` or ``cleared-not-done``)."""

    ho: str
    kind: str
    at: float


class MarkUnanswered(msgspec.Struct, frozen=True, gc=False):
    """The question ``aq`` was still unanswered past its ``by=`` and the gatekeeper raised ``unanswered-question`` for
    it at ``at`` (``policy.lifecycle``): once."""

    aq: str
    at: float


Effect = (
    RememberLine | OpenHandoff | Supersede | RecordReadback | PassReadback | RefuseReadback | Clear | FeedThread | Bind
) | (Release | GatekeeperCancel | MarkOverdue | AnswerQuestion | Relay | MarkUnanswered)


class Decision(msgspec.Struct, frozen=True, gc=False):
    """What to do with one line, why, and what it changes."""

    verdict: Verdict
    reason: Reason | None
    problems: tuple[Problem, ...] = ()
    notes: tuple[Problem, ...] = ()
    message: Message | None = None
    decided_at: float = 0.0
    repeated: bool = False  # the stored first decision, returned on reprocessing
    raise_alert: bool = False  # an alert in addition to a dead-letter (a done report for a refused handoff)
    effects: Sequence[Effect] = ()  # a tuple, or the engine's (``decide.EngineEffects``)
    #: an affirmative answer that clears a readback: (the readback's digest, its handoff's digest), the statement it
    #: clears, which the gatekeeper's signature covers (``gatekeeper.verdicts``)
    clears: tuple[str, str] | None = None

    @property
    def check(self) -> str | None:
        return None if self.reason is None else CHECK_OF_REASON[self.reason]

    @property
    def alerts(self) -> bool:
        return self.verdict is ALERT or self.raise_alert

    @property
    def forwarded(self) -> bool:
        return self.verdict is FORWARD or self.verdict is ALERT
