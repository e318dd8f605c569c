"""Outcome records: what the gatekeeper produces for one consumed record and its decision. Pure: no Kafka here.

Every consumed record yields exactly one forward-or-dead-letter record (``OUTPUT`` or ``DEAD_LETTER``); an alert
(``ALERT``, JSON on the route's alerts topic) comes in addition, and so does, for a dead-lettered line whose sender
is known, a refusal notice (``NOTICE``: the gatekeeper's ``UN`` to that sender on the route's output topic;
``gatekeeper.notices``). Forwarded and dead-lettered records carry the consumed record's key and value bytes
unchanged, and its own headers (except any ``gk.*`` header, which only the gatekeeper writes: an agent cannot forge a
verdict). All outcomes are keyed by the original key; a notice by the conversation (the same, but for a record
without a key whose conversation is in a header).

Headers (values are UTF-8 bytes; times are ISO-8601 UTC with milliseconds, ``2026-10-01T09:00:00.000Z``):

=========================  ==========  =========================================================================  =====
header                     on          value                                                                      trim
=========================  ==========  =========================================================================  =====
``gk.original.topic``      all         the input topic                                                            never
``gk.original.partition``  all         the input partition, decimal                                               never
``gk.original.offset``     all         the input offset, decimal                                                  never
``gk.original.timestamp``  all         the input record's timestamp, epoch milliseconds, decimal                  2
``gk.version``             all         the gatekeeper's version (``gatekeeper.__version__``)                      never
``gk.conversation``        all         the conversation id (the record key, or the route's conversation header)   2
``gk.repeated``            all         ``true`` when the verdict is the stored first decision (reprocessing)      2
``gk.reason``              dlq         the reason code (``check-ho``, ``invalid``...; see ``policy.Reason``)      never
``gk.problems``            dlq         JSON list of ``Problem.to_dict()`` (code, tier, slot, expected, got,       1
                                       message), sensitive values masked
``gk.check``               dlq         where the problems come from: ``gate``, ``conversation``, ``check_ho``,    2
                                       ``check_rb_full``, ``clearance``, ``check_dn``, ``check_thread``,
                                       ``translation``
``gk.tier``                dlq         the tier of the first problem (``form``, ``record``, ``execution``...)     2
``gk.attempt``             dlq         1 on the first dead-letter; a replayed line's next dead-letter is +1       never
``gk.decided.at``          dlq         when the first decision about the line was made                            never
``gk.notice.id``           dlq         the id of the refusal notice written to the line's sender (none written:   never
                                       no header)
``gk.error.class``         dlq         ``internal-error`` only: the class of the exception deciding it raised     never
``gk.error.message``       dlq         ``internal-error`` only: its message, one line, at most 200 characters,    never
                                       masked (the stack trace is in the gatekeeper's log, never in a header)
``gk.verdict``             output      ``forward``, or ``alert`` (forwarded, flagged, and an alert raised)        never
``gk.checked.at``          output      when the first decision about the line was made                            never
``gk.reason``              output      on ``alert`` only: the reason code (``check-dn``, ``check-thread``)        never
``gk.problems``            output      on ``alert`` only: as on the dead-letter topic                             1
``gk.dry-run``             output      ``true`` on every record of a route in dry-run mode                        never
``gk.sig``                 output      with ``signing`` configured: ``v2 <key id> <verdict> <first|repeat>        never
                                       <clears> <signature>``, the gatekeeper's Ed25519 signature over the route,
                                       the conversation, the value's sha256, the verdict (``forward``, ``alert``;
                                       ``dry-run`` on a dry-run route), whether it is a repeat, and for a
                                       clearance the digests of the readback it clears and of its handoff: see
                                       ``gatekeeper.verdicts``. Never on a dead letter
``gk.would.verdict``       output      dry-run: ``dead-letter`` for a line enforce mode would dead-letter         never
``gk.would.reason``        output      dry-run: the reason it would be dead-lettered                              never
``gk.trimmed``             any         what was trimmed to fit: ``problems``, ``headers``, ``moved``, ``value``   --
``gk.value.omitted``       dlq         the value was too large for the dead-letter topic even alone: its size     --
                                       in bytes (the original is still on the input topic at the coordinates)
=========================  ==========  =========================================================================  =====

``trim`` is the order in which headers are dropped when an outcome is too large for its topic (the broker's
``MessageSizeTooLargeError``): level 1 drops ``gk.problems``, level 2 every optional header (the input's own headers
included), level 3 the value of a dead-letter record or an alert's document (a forwarded record is never sent
without its value: at level 3 it goes to the dead-letter topic instead, with ``gk.reason=outcome-too-large``, and at
level 4 without its value). Nothing is trimmed from the value of a record that fits.

Alerts (``ALERT``) are JSON objects on the route's alerts topic::

    {"alert": "check-dn", "verdict": "alert", "route": "agents.pay", "conversation": "c-17",
     "id": "payer-2", "type": "DN", "re": "scheduler-1", "from": "payer", "to": "scheduler", "item": "inv:MD-2026-057",
     "line": "RW1 DN payer-2 ... acct=****2938 ...", "problems": [{"code": "amt-mismatch", ...}],
     "original": {"topic": "agents.pay", "partition": 0, "offset": 41, "timestamp": 1790845200000},
     "decided_at": "2026-10-01T09:00:00.000Z", "at": "2026-10-01T09:00:00.120Z", "repeated": false,
     "dry_run": false, "version": "0.1.0"}

``alert`` is the reason code; the line and the problems are masked (``gatekeeper.masking``).

A refusal notice (``NOTICE``) is the notice's line (``gatekeeper.notices``), keyed by the conversation, on the
output topic, with no ``gk.original.*`` header (it is not the outcome of the input record at those coordinates, and
``POST /v1/gate`` matches outcomes by them) and these headers, all of them kept whole (a notice is never trimmed: one
that does not fit its topic is dropped, counted and logged):

=========================  =================================================================================
``gk.author``              ``gatekeeper``
``gk.notice.refused``      the id of the refused line (its ``re=``)
``gk.notice.reason``       the dead-letter reason of the refused line
``gk.notice.why``          the notice's ``why=``
``gk.conversation``        the conversation id
``gk.version``             the gatekeeper's version
``gk.repeated``            ``true`` when the refused line's verdict is its stored first decision (reprocessing)
``gk.sig``                 with ``signing`` configured: the gatekeeper's signature with the verdict ``notice``
=========================  =================================================================================
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgspec

from gatekeeper import __version__
from gatekeeper.notices import AUTHOR, Notice
from gatekeeper.policy import Decision
from gatekeeper.policy.model import ALERT, DEAD_LETTER
from gatekeeper.verdicts import DRY_RUN, NOTICE, Signer
from rwcore import _native

HEADER_PREFIX = "gk."
OUTCOME_TOO_LARGE = "outcome-too-large"  # gk.reason of a forwarded line its output topic could not hold


class OutcomeKind(enum.StrEnum):
    OUTPUT = "output"
    DEAD_LETTER = "dead-letter"
    ALERT = "alert"
    NOTICE = "notice"


_KINDS = {k.value: k for k in OutcomeKind}

Headers = tuple[tuple[str, bytes], ...]
#: An outcome's headers: a tuple of pairs, or as the engine wrote them (``_native.Headers``, a sequence of the same
#: pairs, equal to their tuple, made as Python objects only when read: the record batch builder reads its bytes)
RecordHeaders = Headers | _native.Headers


class Source(msgspec.Struct, frozen=True, gc=False):
    """The consumed record an outcome answers for: its coordinates, key, value and headers."""

    topic: str
    partition: int
    offset: int
    value: bytes
    key: bytes | None = None
    timestamp: int | None = None  # epoch milliseconds
    headers: Headers = ()
    #: The attempt a dead-letter of this record is: 1 for a consumed record (nothing the producer set counts), one
    #: more than the dead letter's for a replayed one (``next_attempt``).
    attempt: int = 1


def next_attempt(dead_letter_headers: Headers) -> int:
    """The attempt of a replayed dead letter's next outcome: one more than the ``gk.attempt`` the gatekeeper wrote on
    the dead letter (1 when it has none). Read only from the dead-letter topic, which only the gatekeeper writes;
    never from a consumed input record, whose ``gk.*`` headers a producer could set."""
    for k, v in dead_letter_headers:
        if k == "gk.attempt":
            try:
                return max(1, int(v.decode("ascii")) + 1)
            except (UnicodeDecodeError, ValueError):
                return 1
    return 1


@dataclass(frozen=True, slots=True)
class Targets:
    """Where a route's outcomes go (``config.Route`` has these fields)."""

    output: str
    dead_letter: str
    alerts: str
    name: str = ""
    dry_run: bool = False
    #: Signs every record written to ``output`` (``gk.sig``); None: not signed (``signing`` not configured).
    signer: Signer | None = None


class Outcome(msgspec.Struct, frozen=True, gc=False):
    """One record to produce. ``level`` is how far it was trimmed; ``trimmed()`` gives the next level."""

    kind: OutcomeKind
    topic: str
    key: bytes | None
    value: bytes
    headers: RecordHeaders
    source: Source
    level: int = 0
    #: what the next trim level is made from: the line's arguments to the engine (its outcomes share them) and the
    #: outcome's place among the line's records
    draft: tuple[Any, ...] | None = None
    place: int = 0
    estimate: int = -1  # ``size``, when the engine computed it with the record

    @property
    def size(self) -> int:
        """An upper estimate of the record's size in a batch (what ``max.message.bytes`` limits)."""
        if self.estimate >= 0:
            return self.estimate
        return _native.record_size(self.key, self.value, self.headers)

    def header(self, name: str) -> bytes | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None

    def trimmed(self) -> Outcome | None:
        """The same outcome trimmed one level further, or None when nothing is left to trim."""
        if self.draft is None:
            return None
        route, decision, source, conversation, now, notice, sig, notice_sig = self.draft
        # built again: trimming is rare, and no record keeps in memory what only a trim needs
        record = _native.build_outcomes(
            route, decision, source, conversation, now, notice, sig, notice_sig, self.level + 1
        )[self.place]
        return None if record is None else _outcome(record, self.source, self.draft, self.place)


def _outcome(
    record: tuple[str, str, bytes | None, bytes, RecordHeaders, int, int], source: Source, draft: Any, place: int
) -> Outcome:
    kind, topic, key, value, headers, level, size = record
    return Outcome(_KINDS[kind], topic, key, value, headers, source, level, draft, place, size)


@functools.lru_cache(maxsize=4096)
def iso(epoch: float) -> str:
    """Epoch seconds as ISO-8601 UTC with milliseconds and a ``Z`` (``2026-10-01T09:00:00.000Z``). Memoised: a
    batch's lines share their decision time, so a batch formats it once."""
    return _native.iso_time(epoch)


_VERSION = ("gk.version", __version__.encode())


class Decided(NamedTuple):
    """A decided line to build the outcomes of (``build_all``). A plain tuple of the same four values builds the
    same: the worker makes those (a tuple display is a tenth of a named tuple's call)."""

    decision: Decision
    source: Source
    conversation: str | None
    notice: Notice | None = None


#: What ``build_all`` takes of a line: a ``Decided``, or a plain tuple of the same values.
DecidedLine = tuple[Decision, Source, str | None, Notice | None]


def build(
    decision: Decision,
    source: Source,
    targets: Targets,
    *,
    conversation: str | None,
    sensitive: Collection[str] = (),
    now: float,
    notice: Notice | None = None,
) -> list[Outcome]:
    """The outcomes of one decided line (``build_all`` of one line): one output-or-dead-letter record, plus an
    alert when the decision raises one, plus ``notice`` (``notices.refusal_notice``) for a dead letter of an
    enforcing route (its dead letter then names it in ``gk.notice.id``). ``now`` is when the outcome is built (the
    alert's ``at``); the decision carries when it was made."""
    return build_all([Decided(decision, source, conversation, notice)], targets, sensitive=sensitive, now=now)[0]


def build_all(
    lines: list[DecidedLine], targets: Targets, *, sensitive: Collection[str] = (), now: float
) -> list[list[Outcome]]:
    """The outcomes of a route's decided lines, each line's in a list of its own (see ``build``), in one call to
    the native engine (``engine::outcomes``), which makes the ``Outcome`` values too: no Python runs per line here
    but the signatures, made with the ``Signer``'s key when signing is configured. Raises ``ValueError`` for a held
    line (it has no outcome yet), and whatever a bug raises: the caller then builds the lines one by one."""
    signer = targets.signer
    sigs = None
    if signer is not None:
        sigs = [_signatures(signer, targets, *line) for line in lines]
    made: list[list[Outcome]] = _native.build_outcomes_all(
        _route(targets, frozenset(sensitive)), lines, sigs, now, Outcome, _KINDS
    )
    return made


def _signatures(
    signer: Signer,
    targets: Targets,
    decision: Decision,
    source: Source,
    conversation: str | None,
    notice: Notice | None,
) -> tuple[bytes | None, bytes | None]:
    """``gk.sig`` of a line's output record and of its refusal notice (None: not signed; a dead letter never is)."""
    route = targets.name or source.topic
    dead = decision.verdict is DEAD_LETTER
    if not dead or targets.dry_run:
        verdict = DRY_RUN if targets.dry_run else "alert" if decision.verdict is ALERT else "forward"
        sig = signer.sign(route, conversation, source.value, verdict, repeat=decision.repeated, clears=decision.clears)
        return sig, None
    if notice is not None and conversation is not None:
        return None, signer.sign(route, conversation, notice.line.encode("utf-8"), NOTICE, repeat=decision.repeated)
    return None, None


@functools.lru_cache(maxsize=256)
def _route(targets: Targets, sensitive: frozenset[str]) -> _native.OutcomeRoute:
    """What the engine reads of a route's targets, read once (a route's targets and slots do not change)."""
    return _native.OutcomeRoute(targets, sensitive, __version__, AUTHOR)


def bare_dead_letter(source: Source, targets: Targets, error: str, now: float) -> Outcome:
    """The dead letter of a line whose outcome could not be built (a bug in ``build``): the value and key unchanged,
    only the coordinates and the reason ``internal-error`` with the error's class and message (the error's text is
    the gatekeeper's own, never the line's values: nothing here needs masking). Built without the code that failed."""
    name, _, message = error.partition(": ")
    headers: Headers = (
        ("gk.original.topic", source.topic.encode("utf-8")),
        ("gk.original.partition", b"%d" % source.partition),
        ("gk.original.offset", b"%d" % source.offset),
        ("gk.reason", b"internal-error"),
        _VERSION,
        ("gk.attempt", b"%d" % source.attempt),
        ("gk.decided.at", _iso_or_epoch(now).encode()),
        ("gk.error.class", name.encode("utf-8", "replace")),
        ("gk.error.message", f"building the outcome failed: {message}"[:240].encode("utf-8", "replace")),
    )
    return Outcome(OutcomeKind.DEAD_LETTER, targets.dead_letter, source.key, source.value, headers, source)


def _iso_or_epoch(now: float) -> str:
    try:
        return iso(now)
    except ValueError:  # a clock with no date: the epoch as it is, never a failure here
        return repr(now)


def fit(outcome: Outcome, limit: int) -> Outcome | None:
    """Trim ``outcome`` until its estimated size is within ``limit`` bytes; None if it never fits."""
    current: Outcome | None = outcome
    while current is not None and current.size > limit:
        current = current.trimmed()
    return current


__all__ = [
    "HEADER_PREFIX",
    "OUTCOME_TOO_LARGE",
    "Decided",
    "DecidedLine",
    "Outcome",
    "OutcomeKind",
    "Source",
    "Targets",
    "bare_dead_letter",
    "build",
    "build_all",
    "fit",
    "iso",
    "next_attempt",
]
