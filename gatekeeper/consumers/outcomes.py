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
from datetime import UTC, datetime
from typing import Any

import msgspec

from gatekeeper import __version__
from gatekeeper.inert import json_document
from gatekeeper.masking import Masker, masker_for
from gatekeeper.notices import AUTHOR, Notice
from gatekeeper.policy import Decision, Reason, Verdict
from gatekeeper.verdicts import DRY_RUN, NOTICE, Signer

HEADER_PREFIX = "gk."
OUTCOME_TOO_LARGE = "outcome-too-large"  # gk.reason of a forwarded line its output topic could not hold
#: Bytes a record adds to its key, value and headers in a record batch (an upper estimate, batch header included).
RECORD_OVERHEAD = 96


class OutcomeKind(enum.StrEnum):
    OUTPUT = "output"
    DEAD_LETTER = "dead-letter"
    ALERT = "alert"
    NOTICE = "notice"


Headers = tuple[tuple[str, bytes], ...]


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

    def passthrough(self) -> Headers:
        """The record's own headers, without any ``gk.*`` header."""
        return tuple((k, v) for k, v in self.headers if not k.lower().startswith(HEADER_PREFIX))


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


class _Draft(msgspec.Struct, frozen=True, gc=False):
    """Everything an outcome may carry, by trim level."""

    kind: OutcomeKind
    topic: str
    dead_letter: str
    key: bytes | None
    value: bytes
    required: Headers
    problems: Headers  # dropped at level 1
    optional: Headers  # dropped at level 2
    alert: dict[str, Any] | None = None
    dlq_required: Headers = ()  # the required headers of a forwarded record moved to the dead-letter topic


class Outcome(msgspec.Struct, frozen=True, gc=False):
    """One record to produce. ``level`` is how far it was trimmed; ``trimmed()`` gives the next level."""

    kind: OutcomeKind
    topic: str
    key: bytes | None
    value: bytes
    headers: Headers
    source: Source
    level: int = 0
    draft: _Draft | None = None  # what the next trim level is made from

    @property
    def size(self) -> int:
        """An upper estimate of the record's size in a batch (what ``max.message.bytes`` limits)."""
        hs = self.headers
        return (
            RECORD_OVERHEAD
            + len(self.key or b"")
            + len(self.value)
            + 10 * len(hs)
            + sum([len(k) if k.isascii() else len(k.encode()) for k, _ in hs])
            + sum([len(v) for _, v in hs])
        )

    def header(self, name: str) -> bytes | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None

    def trimmed(self) -> Outcome | None:
        """The same outcome trimmed one level further, or None when nothing is left to trim."""
        if self.draft is None:
            return None
        return _render(self.draft, self.source, self.level + 1)


@functools.lru_cache(maxsize=4096)
def iso(epoch: float) -> str:
    """Epoch seconds as ISO-8601 UTC with milliseconds and a ``Z``. Memoised: a batch's lines share their
    decision time, so a batch formats it once."""
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _h(name: str, value: object) -> tuple[str, bytes]:
    return name, str(value).encode("utf-8")


#: ``_h`` for a header whose values repeat (a verdict, a reason, a batch's decision time, an attempt): each is
#: encoded once. Not for values of a line's own (its conversation, its timestamp), which would only churn the cache.
_hc = functools.lru_cache(maxsize=1024)(_h)


_VERSION = ("gk.version", __version__.encode())


@functools.lru_cache(maxsize=1024)
def _topic_header(topic: str) -> tuple[str, bytes]:
    return "gk.original.topic", topic.encode("utf-8")


def _origin(source: Source) -> Headers:
    return (
        _topic_header(source.topic),
        ("gk.original.partition", b"%d" % source.partition),
        ("gk.original.offset", b"%d" % source.offset),
    )


def _masked_problems(decision: Decision, masker: Masker) -> list[dict[str, Any]]:
    if not decision.problems:
        return []
    return [p.to_dict() for p in masker.problems(decision.problems)]


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
    """The outcomes of one decided line: one output-or-dead-letter record, plus an alert when the decision
    raises one, plus ``notice`` (``notices.refusal_notice``) for a dead letter of an enforcing route (its dead letter
    then names it in ``gk.notice.id``). ``now`` is when the outcome is built (the alert's ``at``); the decision
    carries when it was made."""
    if decision.verdict is Verdict.HOLD:
        raise ValueError("a held line has no outcome yet")
    # a clean forwarded line carries no text of the gatekeeper's that could need masking: skip the work
    masker = (
        masker_for(source.value, decision.problems, sensitive) if decision.problems or decision.alerts else Masker()
    )
    problems = _masked_problems(decision, masker)
    problems_h: Headers = (("gk.problems", json_document(problems)),) if problems else ()
    common_optional: Headers = (
        _h("gk.original.timestamp", source.timestamp if source.timestamp is not None else -1),
        *((_h("gk.conversation", conversation),) if conversation is not None else ()),
        *((_hc("gk.repeated", "true"),) if decision.repeated else ()),
        *((_h("gk.notes", ",".join(sorted({n.code for n in decision.notes}))),) if decision.notes else ()),
    )
    reason = decision.reason.value if decision.reason is not None else None
    dead = decision.verdict is Verdict.DEAD_LETTER
    dlq_required: Headers = (
        *_origin(source),
        _VERSION,
        _hc("gk.attempt", source.attempt),
        _hc("gk.decided.at", iso(decision.decided_at)),
    )
    out: list[Outcome] = []
    if not dead or targets.dry_run or conversation is None:
        notice = None  # a notice answers a dead letter only: a dry-run route only counts it (``consumers.deciding``)
    if dead and not targets.dry_run:
        tier = next((p.tier for p in decision.problems if p.tier), None)
        error_h: Headers = ()
        if decision.reason is Reason.INTERNAL_ERROR and decision.problems:
            first = masker.problem(decision.problems[0])
            error_h = (
                _h("gk.error.class", first.got or "Exception"),
                _h("gk.error.message", first.message),
            )
        draft = _Draft(
            kind=OutcomeKind.DEAD_LETTER,
            topic=targets.dead_letter,
            dead_letter=targets.dead_letter,
            key=source.key,
            value=source.value,
            required=(
                *dlq_required[:3],
                _hc("gk.reason", reason or ""),
                *dlq_required[3:],
                *error_h,
                *((_h("gk.notice.id", notice.id),) if notice is not None else ()),
            ),
            problems=problems_h or (_h("gk.problems", "[]"),),
            optional=(
                *((_hc("gk.check", decision.check),) if decision.check else ()),
                *((_hc("gk.tier", tier),) if tier else ()),
                *common_optional,
                *source.passthrough(),
            ),
        )
    else:
        verdict = Verdict.ALERT.value if decision.verdict is Verdict.ALERT else Verdict.FORWARD.value
        required: list[tuple[str, bytes]] = [
            _hc("gk.verdict", verdict),
            _hc("gk.checked.at", iso(decision.decided_at)),
            _VERSION,
            *_origin(source),
        ]
        flagged = decision.verdict is Verdict.ALERT or dead
        if decision.verdict is Verdict.ALERT and reason is not None:
            required.append(_hc("gk.reason", reason))
        if targets.dry_run:
            required.append(_hc("gk.dry-run", "true"))
            if dead:
                required.append(_h("gk.would.verdict", Verdict.DEAD_LETTER.value))
                required.append(_h("gk.would.reason", reason or ""))
        if targets.signer is not None:  # a required header: trimming keeps it (a moved record loses it)
            signed = DRY_RUN if targets.dry_run else verdict
            route = targets.name or source.topic
            required.append(
                targets.signer.header(
                    route, conversation, source.value, signed, repeat=decision.repeated, clears=decision.clears
                )
            )
        draft = _Draft(
            kind=OutcomeKind.OUTPUT,
            topic=targets.output,
            dead_letter=targets.dead_letter,
            key=source.key,
            value=source.value,
            required=tuple(required),
            problems=problems_h if flagged else (),
            optional=(*common_optional, *source.passthrough()),
            dlq_required=(*dlq_required[:3], _hc("gk.reason", OUTCOME_TOO_LARGE), *dlq_required[3:]),
        )
    out.append(_render(draft, source, 0))  # type: ignore[arg-type]  # level 0 always renders
    if decision.alerts:
        out.append(_alert(decision, source, targets, conversation, masker, problems, now))
    if notice is not None:
        assert conversation is not None  # checked above
        out.append(_notice(notice, decision, source, targets, conversation))
    return out


def _notice(notice: Notice, decision: Decision, source: Source, targets: Targets, conversation: str) -> Outcome:
    """The refusal notice's record (see the module docstring): the notice's line on the output topic, keyed by the
    conversation, answering for the refused record (``source``: its partition's transaction, its batch)."""
    value = notice.line.encode("utf-8")
    headers: list[tuple[str, bytes]] = [
        _hc("gk.author", AUTHOR),
        _h("gk.notice.refused", notice.re),
        _hc("gk.notice.reason", notice.reason),
        _hc("gk.notice.why", notice.why),
        _h("gk.conversation", conversation),
        _VERSION,
    ]
    if decision.repeated:
        headers.append(_hc("gk.repeated", "true"))
    if targets.signer is not None:
        route = targets.name or source.topic
        headers.append(targets.signer.header(route, conversation, value, NOTICE, repeat=decision.repeated))
    draft = _Draft(
        kind=OutcomeKind.NOTICE,
        topic=targets.output,
        dead_letter=targets.dead_letter,
        key=conversation.encode("utf-8"),
        value=value,
        required=tuple(headers),
        problems=(),
        optional=(),
    )
    return _render(draft, source, 0)  # type: ignore[return-value]  # level 0 always renders


def bare_dead_letter(source: Source, targets: Targets, error: str, now: float) -> Outcome:
    """The dead letter of a line whose outcome could not be built (a bug in ``build``): the value and key unchanged,
    only the coordinates and the reason ``internal-error`` with the error's class and message (the error's text is
    the gatekeeper's own, never the line's values: nothing here needs masking). Built without the code that failed."""
    name, _, message = error.partition(": ")
    headers: Headers = (
        *_origin(source),
        ("gk.reason", b"internal-error"),
        _VERSION,
        ("gk.attempt", b"%d" % source.attempt),
        _h("gk.decided.at", iso(now)),
        _h("gk.error.class", name),
        _h("gk.error.message", f"building the outcome failed: {message}"[:240]),
    )
    return Outcome(OutcomeKind.DEAD_LETTER, targets.dead_letter, source.key, source.value, headers, source)


def _alert(
    decision: Decision,
    source: Source,
    targets: Targets,
    conversation: str | None,
    masker: Masker,
    problems: list[dict[str, Any]],
    now: float,
) -> Outcome:
    msg = decision.message
    doc: dict[str, Any] = {
        "alert": decision.reason.value if decision.reason is not None else decision.verdict.value,
        "verdict": decision.verdict.value,
        "route": targets.name,
        "conversation": conversation,
        "id": msg.id if msg is not None else None,
        "type": msg.type if msg is not None else None,
        "re": msg.re if msg is not None else None,  # for DN, UN, FL and CX: the handoff the alert is about
        "from": msg.from_ if msg is not None else None,
        "to": msg.to if msg is not None else None,
        "item": msg.item if msg is not None else None,
        "line": masker.text(source.value.decode("utf-8", errors="replace")),
        "problems": problems,
        "original": {
            "topic": source.topic,
            "partition": source.partition,
            "offset": source.offset,
            "timestamp": source.timestamp,
        },
        "decided_at": iso(decision.decided_at),
        "at": iso(now),
        "repeated": decision.repeated,
        "dry_run": targets.dry_run,
        "version": __version__,
    }
    draft = _Draft(
        kind=OutcomeKind.ALERT,
        topic=targets.alerts,
        dead_letter=targets.dead_letter,
        key=source.key,
        value=b"",
        required=(*_origin(source), _VERSION),
        problems=(),
        optional=(),
        alert=doc,
    )
    return _render(draft, source, 0)  # type: ignore[return-value]


def _json(doc: dict[str, Any]) -> bytes:
    return json_document(doc)  # an alert quotes the line: its text made inert (gatekeeper.inert)


_TRIMMED = ("problems", "headers", "value")


def _render(d: _Draft, source: Source, level: int) -> Outcome | None:
    """The draft at a trim level (see the module docstring), or None past the last level."""
    trimmed: Headers = (_h("gk.trimmed", ",".join(_TRIMMED[:level])),) if level else ()
    if d.kind is OutcomeKind.ALERT:
        assert d.alert is not None
        doc = dict(d.alert)
        if level >= 1:
            doc["problems_omitted"] = len(doc.pop("problems", []))
        if level >= 2:
            doc.pop("line", None)
        if level >= 3:
            keep = ("alert", "verdict", "route", "id", "type", "original", "decided_at", "at")
            doc = {k: doc[k] for k in keep if k in doc} | {"trimmed": True}
        if level >= 4:
            return None
        return Outcome(d.kind, d.topic, d.key, _json(doc), d.required + trimmed, source, level, d)
    if d.kind is OutcomeKind.NOTICE:  # never trimmed: every header says whose and what it is
        return Outcome(d.kind, d.topic, d.key, d.value, d.required, source, level, d) if level == 0 else None
    if d.kind is OutcomeKind.DEAD_LETTER:
        if level >= 4:
            return None
        headers = d.required + (d.problems if level < 1 else ()) + (d.optional if level < 2 else ())
        value = d.value
        if level >= 3:
            headers += (_h("gk.value.omitted", len(d.value)),)
            value = b""
        return Outcome(d.kind, d.topic, d.key, value, headers + trimmed, source, level, d)
    # OUTPUT
    if level <= 2:
        headers = d.required + (d.problems if level < 1 else ()) + (d.optional if level < 2 else ())
        return Outcome(d.kind, d.topic, d.key, d.value, headers + trimmed, source, level, d)
    if level == 3:
        headers = (*d.dlq_required, _h("gk.trimmed", "problems,headers,moved"))
        return Outcome(OutcomeKind.DEAD_LETTER, d.dead_letter, d.key, d.value, headers, source, level, d)
    if level == 4:
        headers = (
            *d.dlq_required,
            _h("gk.value.omitted", len(d.value)),
            _h("gk.trimmed", "problems,headers,moved,value"),
        )
        return Outcome(OutcomeKind.DEAD_LETTER, d.dead_letter, d.key, b"", headers, source, level, d)
    return None


def fit(outcome: Outcome, limit: int) -> Outcome | None:
    """Trim ``outcome`` until its estimated size is within ``limit`` bytes; None if it never fits."""
    current: Outcome | None = outcome
    while current is not None and current.size > limit:
        current = current.trimmed()
    return current


__all__ = [
    "HEADER_PREFIX",
    "OUTCOME_TOO_LARGE",
    "Outcome",
    "OutcomeKind",
    "Source",
    "Targets",
    "bare_dead_letter",
    "build",
    "fit",
    "iso",
    "next_attempt",
]
