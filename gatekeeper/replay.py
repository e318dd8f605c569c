"""``gatekeeper replay``: re-drive a dead-letter topic once what held its lines has changed.

An operator loads the approval that was missing (``gatekeeper records load``), then replays: every dead letter in the
chosen range is decided again, with ``replay=True``, against the records and the conversation's state as they are now
and at the current time, through the same ``Processor`` and store as the daemon (so the conversation's state changes
exactly as if the daemon had decided the line now). Then:

- a line that passes now is forwarded to its route's output topic, with the headers a forwarded line carries plus
  ``gk.replayed.from.topic``, ``gk.replayed.from.partition``, ``gk.replayed.from.offset`` (the dead letter it came
  from), ``gk.replayed.at`` and ``gk.attempt`` (one more than the dead letter's), and with ``signing`` configured
  the gatekeeper's ``gk.sig`` (``gatekeeper.verdicts``), as a line the daemon forwards; a done report that passes
  with an alert is forwarded flagged and its alert is raised;
- a line that still fails is left where it is, or, with ``requeue_failed``, dead-lettered again (attempt raised, the
  same ``gk.replayed.from.*`` headers; its alert, if it had one, is not raised twice): the copy replaces the letter
  (below), and at attempt ``max_attempts`` it is parked;
- a line an earlier replay already forwarded (its stored decision is no longer a dead letter) is skipped: replaying
  the same range twice forwards nothing twice.

**Refusal notices** (``gatekeeper.notices``) are the daemon's alone: a replay writes none, neither for a line it
forwards nor for one that still fails. A line that still fails was refused once already and its sender was told
then (its letter names the notice, ``gk.notice.id``, and a requeued copy keeps it); a second notice would tell it
twice about one line, under another id when the reason changed. A line whose first refusal had no notice (the
route's ``refusal_notices`` off, a letter of an earlier release) gets none from a replay either: a replay is the
operator's act, and the operator tells. A line the replay forwards although its sender was told it was refused is
delivered after all: its handoff, closed for its sender by the notice, reaches its receiver. The report notes it
(``notified``), so that an operator replays such a line only when its sender has not re-issued it.

What the rules forbid stays held, because the decision is the daemon's: a handoff past its ``exp=`` (``expired``), a
clearance of a readback that failed (``refused-handoff`` / ``clearance``), a handoff whose approval is now bound to
another (``record-used``). Replay never holds a line: a reply whose handoff is still unknown stays dead-lettered.

The dead-letter topic is read by a plain consumer with manual assignment (no consumer group, nothing committed; the
daemon's group is never touched), from the offsets found by time (``since``) up to the end offsets seen when the
replay started (``until`` bounds it further), so records a requeue appends are never read again in the same run.

**A requeue replaces a letter; it does not add one.** A line's letters (its ``Identity``: the input record named by
``gk.original.topic``, ``gk.original.partition`` and ``gk.original.offset``) are the daemon's dead letter and each
copy a requeue made; only the newest (``Copy``: the highest ``gk.attempt``, then the latest) is live. Before
replaying, a first pass reads the topic from ``since`` to its end, past ``until`` (a copy is always newer than the
letter it replaces, but may be past the selected range), and, for a copy of a route's dead-letter topic
(``--from-topic`` with ``--route``), the route's dead-letter topic too (where its requeues go), and keeps the newest
copy of each line. A selected letter that is not the newest is skipped as superseded, so running
``--requeue-failed`` again and again keeps one live letter per line, its attempt rising (an earlier release's
doubled copies collapse the same way, and so do a redelivery's duplicate dead letters). Attempts are bounded, as
Spring's retry topics and Kafka Connect bound theirs: a line still failing when its copy would be attempt
``max_attempts`` (``--max-attempts``, 5) is requeued once more as parked (``gk.parked: max-attempts``,
``gk.parked.at``) and never again. A parked letter is skipped with a note unless ``include_parked``; replayed, it is
forwarded if it passes now, and left where it is if it still fails.

**Only the route's own letters.** Every letter's ``gk.original.*`` headers are checked against the route's real
topics before it is decided (``check_original``): the route it names must be one whose dead letters go to the
topic read (``owners``: a letter planted on route A's dead-letter topic naming route B is refused; ``--from-topic``
names a route's dead-letter topic, or with ``--route`` a copy of that route's), its partition one of the route's
input topic (a handoff indexed in a partition no instance sweeps would stay open past its ``exp=``, with no cancel
and no alert), its offset below that partition's end, and the offset, timestamp and ``gk.attempt`` the decimal
integers the gatekeeper writes. A letter that fails is skipped with the reason, and supersedes nothing.

**Redis that lost its data stops a replay**, its dry run too, before anything is read: ``generation.require``, the
daemon's rule (the marker missing while the group has committed offsets and no owner epoch is left). The marker is
then pinned: a loss while the replay runs stops it at its next load or save (``DataLost``).

**Nothing is lost.** Before a chunk of lines is decided, a marker per line is written to Redis
(``<prefix>:replaying:{<route>/<conversation>}:<line digest>``); it is deleted once the chunk's outcomes are
acknowledged. If a replay dies in between (the state says forwarded, the record was never produced), the next replay
finds the marker and forwards the line again (at-least-once, like the daemon).

**A dry run changes nothing anywhere**: states, records and bindings are read from Redis once and changed only in
memory (``DryRunStore``), no marker is written and nothing is produced. The report says what would happen.

Dead letters that cannot be replayed are counted as skipped with the reason: not a gatekeeper dead letter (no
``gk.original.topic``), an input topic no configured route reads, a letter refused by the checks above, superseded
or parked, ``outcome-too-large`` (the output topic could not hold the forwarded record), or a value that was omitted
to fit the dead-letter topic.

**A conversation whose state is gone** (expired after ``redis.retention_seconds``, or deleted) is said so plainly:
its dead letters are decided as the first lines of a new conversation (a readback's handoff is unknown now, whatever
refused it then), so the report counts them apart ("its conversation has no state in Redis") instead of under a
reason that was never theirs, and each such line carries ``state_gone``.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import re
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

import msgspec

from gatekeeper.admin import DEFAULT_TIMEOUT, KafkaUnavailable, TopicError, plain_consumer, topic_partitions
from gatekeeper.auth import KeyRing, check_record
from gatekeeper.config import ConfigError, Route, Settings
from gatekeeper.consumers.outcomes import (
    OUTCOME_TOO_LARGE,
    Outcome,
    OutcomeKind,
    Source,
    Targets,
    build,
    iso,
    next_attempt,
)
from gatekeeper.consumers.sending import OutcomeSender, ProduceTimeout, Send
from gatekeeper.errors import UsageError
from gatekeeper.policy import (
    BindingChange,
    ConversationState,
    Decision,
    Record,
    RecordKey,
    SenderProof,
    Verdict,
    line_digest,
)
from gatekeeper.policy.lifecycle import IndexEntry
from gatekeeper.policy.state import wanted_fields
from gatekeeper.processor import Line, Processor
from gatekeeper.store import DataLost, Loaded, Store, StoreError, Wants, blocking, claim_in_memory, pick
from gatekeeper.verdicts import signer_for
from rwcore import Problem

CHUNK = 100  # dead letters decided per batch (one Redis load and one save each)
MAX_ATTEMPTS = 5  # --max-attempts: a line still failing at its fifth attempt is parked
PARKED_HEADER = "gk.parked"  # on a letter requeued for the last time: why (PARKED_REASON)
PARKED_AT_HEADER = "gk.parked.at"
PARKED_REASON = "max-attempts"
SUPERSEDED = "superseded: a newer copy of its line (a later requeue) is the one replayed"
PARKED = "parked at its last attempt (gk.parked): replayed only with --include-parked"
STATE_GONE = "its conversation has no state in Redis (expired after retention, or deleted): decided as a new one"
NOTICE_ID_HEADER = "gk.notice.id"  # on a letter whose sender was told (the daemon's refusal notice's id)
NOTIFIED = "notified: its sender was told it was refused (refusal notice {id}); delivered after all"
REPLAYED_HEADERS = ("gk.replayed.from.topic", "gk.replayed.from.partition", "gk.replayed.from.offset", "gk.replayed.at")


class ReplayError(UsageError):
    """The replay cannot start: no such route or topic, bad options. Nothing was changed."""


# ---------------------------------------------------------------- time options


_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def masked(report: ReplayReport, slots: frozenset[str]) -> ReplayReport:
    """The report with the sensitive values of its problems masked, as in the dead letters' gk.problems header."""
    from gatekeeper.masking import Masker

    out = dataclasses.replace(report, lines=[])
    for ln in report.lines:
        m = Masker.for_slots(slots).learn_problems(ln.problems)
        out.lines.append(dataclasses.replace(ln, problems=m.problems(ln.problems)))
    return out


def parse_letters(texts: Iterable[str]) -> frozenset[tuple[int, int]]:
    """Dead letters named as ``PARTITION:OFFSET`` (``--letter 0:17``). Raises ValueError, saying which and why."""
    out = set()
    for text in texts:
        p, sep, o = text.partition(":")
        if not sep or not p.isdecimal() or not o.isdecimal() or not p.isascii() or not o.isascii():
            raise ValueError(f"{text!r} is not PARTITION:OFFSET (two decimal numbers, e.g. 0:17)")
        out.add((int(p), int(o)))
    return frozenset(out)


def parse_when(text: str, now: float) -> float:
    """A time option as epoch seconds: relative to ``now`` (``90s``, ``15m``, ``2h``, ``3d``, ``1w``: that long
    ago), ISO-8601 (``2026-10-01T09:00:00Z``, ``2026-10-01T09:00``, ``2026-10-01``; UTC unless an offset is given)
    or RW1's ``20261001T0900Z``. Raises ``ValueError`` with an example."""
    value = text.strip()
    m = _RELATIVE.match(value.lower())
    if m:
        return now - float(m.group(1)) * _UNITS[m.group(2)]
    if re.fullmatch(r"\d{8}T\d{4}Z", value):
        return datetime.strptime(value, "%Y%m%dT%H%MZ").replace(tzinfo=UTC).timestamp()
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r}: expected a time like 2h, 30m, 2d (that long ago), 2026-10-01T09:00:00Z or 20261001T0900Z"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


# ---------------------------------------------------------------- the report


class Status(enum.StrEnum):
    FORWARDED = "forwarded"  # passes now: forwarded to its output topic
    ALERTED = "alerted"  # passes now with an alert (a done report): forwarded flagged, alert raised
    STILL_FAILING = "still-failing"  # left on the dead-letter topic
    REQUEUED = "requeued"  # still failing, dead-lettered again with the attempt raised
    PARKED = "parked"  # still failing at its last attempt: dead-lettered once more with gk.parked, never requeued
    ALREADY_FORWARDED = "already-forwarded"  # an earlier replay forwarded it
    SKIPPED = "skipped"  # cannot be replayed (see ``note``)

    @property
    def passed(self) -> bool:
        return self in (Status.FORWARDED, Status.ALERTED)


@dataclass(frozen=True, slots=True)
class ReplayedLine:
    """One dead letter and what the replay did with it."""

    topic: str  # the dead-letter record's coordinates
    partition: int
    offset: int
    status: Status
    route: str | None = None
    conversation: str | None = None
    id: str | None = None
    type: str | None = None
    was: str | None = None  # the reason it was dead-lettered
    reason: str | None = None  # the reason it still fails (or the alert's reason)
    problems: tuple[Problem, ...] = ()
    note: str | None = None
    output: tuple[str, int, int] | None = None  # where it was produced (topic, partition, offset)
    state_gone: bool = False  # its conversation had no state in Redis at all (expired after retention, or deleted)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        d["problems"] = [p.to_dict() for p in self.problems]
        d["output"] = (
            None
            if self.output is None
            else {"topic": self.output[0], "partition": self.output[1], "offset": self.output[2]}
        )
        return d


@dataclass(slots=True)
class ReplayReport:
    topic: str
    dry_run: bool
    requeue_failed: bool
    max_attempts: int = MAX_ATTEMPTS
    include_parked: bool = False
    lines: list[ReplayedLine] = field(default_factory=list)
    read: int = 0  # dead letters read in the range
    filtered: int = 0  # read but not selected (--reason, --conversation, --letter, another route)
    limited: bool = False  # --limit stopped the replay early

    def count(self, status: Status) -> int:
        return sum(1 for ln in self.lines if ln.status is status)

    @property
    def passed(self) -> int:
        return sum(1 for ln in self.lines if ln.status.passed)

    @property
    def failing(self) -> int:
        return self.count(Status.STILL_FAILING) + self.count(Status.REQUEUED) + self.count(Status.PARKED)

    @property
    def superseded(self) -> int:
        """Letters skipped because a newer copy of their line is the one replayed."""
        return sum(1 for ln in self.lines if ln.status is Status.SKIPPED and ln.note == SUPERSEDED)

    def failing_by_reason(
        self, statuses: Collection[Status] = (Status.STILL_FAILING, Status.REQUEUED)
    ) -> dict[str, int]:
        """The lines that still fail (those left or requeued; ``statuses`` to choose), by reason; those whose
        conversation has no state are counted apart (``state_gone``): their reason is the verdict on a conversation
        that starts with them, not the original's."""
        out: dict[str, int] = {}
        for ln in self.lines:
            if ln.status in statuses and not ln.state_gone:
                key = ln.reason or "?"
                out[key] = out.get(key, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))

    @property
    def state_gone(self) -> int:
        """Lines that still fail and whose conversation had no state in Redis (expired after retention, deleted)."""
        failing = (Status.STILL_FAILING, Status.REQUEUED, Status.PARKED)
        return sum(1 for ln in self.lines if ln.state_gone and ln.status in failing)

    def skipped_by_note(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for ln in self.lines:
            if ln.status is Status.SKIPPED:
                out[ln.note or "?"] = out.get(ln.note or "?", 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "dry_run": self.dry_run,
            "requeue_failed": self.requeue_failed,
            "read": self.read,
            "filtered": self.filtered,
            "limited": self.limited,
            "passed": self.passed,
            "forwarded": self.count(Status.FORWARDED),
            "alerted": self.count(Status.ALERTED),
            "still_failing": self.count(Status.STILL_FAILING),
            "requeued": self.count(Status.REQUEUED),
            "parked": self.count(Status.PARKED),
            "max_attempts": self.max_attempts,
            "already_forwarded": self.count(Status.ALREADY_FORWARDED),
            "skipped": self.count(Status.SKIPPED),
            "superseded": self.superseded,
            "failing_by_reason": self.failing_by_reason(),
            "state_gone": self.state_gone,
            "lines": [ln.to_dict() for ln in self.lines],
        }


# ---------------------------------------------------------------- the dry run's store


class DryRunStore:
    """A ``Store`` that reads through to another once per conversation and record, and keeps every change in
    memory: a dry run decides exactly as a real replay would and writes nothing anywhere."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self._states: dict[tuple[str, str], dict[str, str]] = {}  # whole conversations, as fields
        self._records: dict[RecordKey, Record | None] = {}
        self._bindings: dict[RecordKey, str | None] = {}

    async def load(self, route: str, wants: Wants, keys: Collection[RecordKey]) -> Loaded:
        convs = [c for c in wants if (route, c) not in self._states]
        rkeys = [k for k in keys if k not in self._records]
        if convs or rkeys:
            got = await self.inner.load(route, dict.fromkeys(convs), rkeys)  # each conversation whole, once
            for c in convs:
                self._states[(route, c)] = got.states.get(c, ConversationState()).all_fields()
            for k in rkeys:
                self._records[k] = got.records.get(k)
                self._bindings[k] = got.bindings.get(k)
        out = Loaded()
        for c, ids in wants.items():
            stored = self._states[(route, c)]
            fields = dict(stored) if ids is None else wanted_fields(ids, functools.partial(pick, stored))
            out.states[c] = ConversationState.from_fields(fields)
        for k in keys:
            rec, bound = self._records.get(k), self._bindings.get(k)
            if rec is not None:
                out.records[k] = rec
            if bound is not None:
                out.bindings[k] = bound
        return out

    async def claim(self, changes: Sequence[BindingChange]) -> list[BindingChange]:
        return claim_in_memory(self._bindings, changes)

    async def take_epochs(self, route: str, partitions: Collection[int]) -> dict[int, int]:
        return dict.fromkeys(partitions, 0)  # a dry run owns nothing and writes nothing: no fence to take

    async def save(
        self,
        route: str,
        states: Mapping[str, ConversationState],
        deadlines: Sequence[IndexEntry] = (),
        fences: Mapping[str, int] | None = None,
        now: float | None = None,
        claims: Sequence[BindingChange] = (),
    ) -> list[BindingChange]:
        conflicts = claim_in_memory(self._bindings, claims)
        if blocking(conflicts):
            return conflicts
        for conv, state in states.items():  # kept whole: a dry run collects nothing
            self._states.setdefault((route, conv), {}).update(state.changed_fields())
        return conflicts

    async def put_record(self, record: Record, *, supersede: bool = False) -> None:
        raise StoreError("a dry run does not load records")

    async def get_records(self, item: str, ask: str | None = None) -> list[Record]:
        return await self.inner.get_records(item, ask)

    async def delete_records(self, item: str, ask: str | None = None) -> int:
        raise StoreError("a dry run does not delete records")

    async def binding(self, key: RecordKey) -> str | None:
        if key in self._bindings:
            return self._bindings[key]
        return await self.inner.binding(key)

    async def ping(self) -> bool:
        return await self.inner.ping()


# ---------------------------------------------------------------- the in-flight markers


class Markers:
    """The lines a replay decided but whose outcome is not acknowledged yet (see the module docstring)."""

    async def begin(self, keys: Sequence[str]) -> set[str]:
        """Mark ``keys``; returns those that were already marked (an earlier replay did not finish them)."""
        raise NotImplementedError

    async def end(self, keys: Sequence[str]) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        return None

    def key(self, route: str, conversation: str, value: bytes) -> str:
        return f"{route}/{conversation}/{line_digest(value)}"


class MemoryMarkers(Markers):
    def __init__(self) -> None:
        self.marked: set[str] = set()

    async def begin(self, keys: Sequence[str]) -> set[str]:
        before = {k for k in keys if k in self.marked}
        self.marked.update(keys)
        return before

    async def end(self, keys: Sequence[str]) -> None:
        self.marked.difference_update(keys)


class RedisMarkers(Markers):
    """Markers in Redis, in the conversation's hash-tag slot, expiring with the open-conversation retention."""

    def __init__(self, settings: Settings) -> None:
        from gatekeeper.redis_store import Keys, client_from_settings

        self._keys = Keys(settings.redis.key_prefix)
        self._prefix = settings.redis.key_prefix
        self._ttl = settings.redis.open_retention_seconds
        self._redis: Any = client_from_settings(settings.redis)

    def key(self, route: str, conversation: str, value: bytes) -> str:
        conv = self._keys.conv(route, conversation)
        tag = conv[len(f"{self._prefix}:conv:") :]
        return f"{self._prefix}:replaying:{tag}:{line_digest(value)}"

    async def begin(self, keys: Sequence[str]) -> set[str]:
        if not keys:
            return set()
        pipe = self._redis.pipeline(transaction=False)
        for k in keys:
            pipe.set(k, b"1", ex=self._ttl, get=True)
        try:
            results = await pipe.execute()
        except Exception as exc:
            raise StoreError(f"redis: marking the replayed lines failed: {type(exc).__name__}: {exc}") from exc
        return {k for k, old in zip(keys, results, strict=True) if old is not None}

    async def end(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        try:
            await self._redis.delete(*keys)
        except Exception as exc:
            raise StoreError(f"redis: clearing the replay markers failed: {type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        try:
            await self._redis.aclose()
        except Exception:  # closing a broken connection is not worth an error
            return


# ---------------------------------------------------------------- the replay


@dataclass(frozen=True, slots=True)
class Selection:
    """Which dead letters to replay."""

    since: float | None = None  # dead-lettered at or after (epoch seconds; the dead-letter record's timestamp)
    until: float | None = None  # dead-lettered at or before
    reasons: frozenset[str] | None = None  # only these gk.reason codes
    conversation: str | None = None
    limit: int | None = None  # at most this many dead letters replayed
    letters: frozenset[tuple[int, int]] | None = None  # only these dead letters: (partition, offset) on the topic read


#: A line's identity across its dead letters: the input record they all came from (gk.original.topic, partition,
#: offset). The daemon's dead letter and every requeued copy of it share it.
Identity = tuple[str, int, int]


@dataclass(slots=True)
class _Item:
    dlq: tuple[str, int, int]
    record: Any
    headers: dict[str, bytes]
    route: Route | None
    conversation: str | None
    was: str | None
    identity: Identity = ("", -1, -1)
    attempt: int = 1  # its gk.attempt (0 when it has none)
    parked: bool = False  # it carries gk.parked: requeued for the last time, never again


@dataclass(frozen=True, slots=True, order=True)
class Copy:
    """Where one dead letter of a line is, ordered so that the newest copy is the greatest: the highest attempt,
    then the latest (a duplicate of one attempt: a redelivery, or two copies an earlier release requeued)."""

    attempt: int
    timestamp: int
    topic: str
    partition: int
    offset: int

    @property
    def coordinates(self) -> tuple[str, int, int]:
        return (self.topic, self.partition, self.offset)


@dataclass(frozen=True, slots=True)
class _Refused:
    """A dead letter that cannot be replayed, and why (a note of the report)."""

    note: str
    route: str | None = None
    was: str | None = None


def _header(headers: Mapping[str, bytes], name: str) -> str | None:
    v = headers.get(name)
    if v is None:
        return None
    try:
        return v.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


_NUMBER = {
    "partition": re.compile(r"[0-9]{1,10}"),
    "offset": re.compile(r"[0-9]{1,19}"),
    "timestamp": re.compile(r"-1|[0-9]{1,19}"),  # -1: the input record had none
    "attempt": re.compile(r"[1-9][0-9]{0,9}"),
}


def well_formed(kind: str, raw: bytes | None) -> int | None:
    """A ``gk.original.partition`` / ``.offset`` / ``.timestamp`` or ``gk.attempt`` header's value as the gatekeeper
    writes it (ASCII decimal digits, no sign, space or underscore; -1 only for a timestamp; an attempt from 1), as
    an int; None for anything else (``int()`` alone would take `` 7``, ``0_7``, ``+7`` or other scripts' digits)."""
    if raw is None:
        return None
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        return None
    return int(text) if _NUMBER[kind].fullmatch(text) else None


def check_original(
    headers: Mapping[str, bytes], route: str, partitions: Mapping[int, int]
) -> tuple[int, int, int] | str:
    """A dead letter's ``gk.original.*`` and ``gk.attempt`` headers against its route's input topic as it is now
    (``partitions``: partition -> end offset): (partition, offset, attempt), or why the letter is refused. A real
    dead letter names a partition of the input topic and an offset below its end, in well-formed integers; one that
    does not was written by something else (a handoff indexed in a partition no instance sweeps would stay open past
    its deadline, with no cancel and no alert)."""
    raw = headers.get("gk.original.partition")
    partition = well_formed("partition", raw)
    if partition is None or partition not in partitions:
        shown = "missing" if raw is None else repr(raw.decode("utf-8", "replace"))[:40]
        return f"gk.original.partition {shown} is not a partition of {route} (refused)"
    raw = headers.get("gk.original.offset")
    offset = well_formed("offset", raw)
    if offset is None or offset >= partitions[partition]:
        shown = "missing" if raw is None else repr(raw.decode("utf-8", "replace"))[:40]
        return f"gk.original.offset {shown} is not an offset of {route} (refused)"
    raw = headers.get("gk.original.timestamp")  # optional: trimmed from a dead letter that had to fit
    if raw is not None and well_formed("timestamp", raw) is None:
        return f"gk.original.timestamp {repr(raw.decode('utf-8', 'replace'))[:40]} is not a timestamp (refused)"
    raw = headers.get("gk.attempt")
    if raw is None:
        return partition, offset, 0
    attempt = well_formed("attempt", raw)
    if attempt is None:
        return f"gk.attempt {repr(raw.decode('utf-8', 'replace'))[:40]} is not an attempt (refused)"
    return partition, offset, attempt


class Replayer:
    """Replays dead letters. ``store`` defaults to a ``RedisStore`` of the settings (closed at the end);
    ``markers`` to ``RedisMarkers`` (``MemoryMarkers`` with an injected store)."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store | None = None,
        markers: Markers | None = None,
        clock: Callable[[], float] = time.time,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.settings = settings
        self._store = store
        self._markers = markers
        self._clock = clock
        self._timeout = timeout
        self._had_state: dict[tuple[str, str], bool] = {}  # (route, conversation): had any state when first met
        self._keys: KeyRing | None = None  # the agents' public keys, read at the first sender_auth route's line

    def source_topic(self, route: str | None, from_topic: str | None) -> tuple[str, Route | None]:
        """The dead-letter topic to read, and the route it is limited to (``--route``). ``--from-topic`` alone names
        a route's dead-letter topic; with ``--route`` too, a copy of that route's (an archive): a topic that is no
        route's dead-letter topic is refused without ``--route`` (whose letters it holds is what lets a letter
        naming another route be refused), and so is ``--route`` with another route's dead-letter topic."""
        if route is None and from_topic is None:
            raise ReplayError(
                "give --route ROUTE (its dead-letter topic), --from-topic TOPIC (a route's dead-letter topic), or "
                "both (TOPIC a copy of ROUTE's dead-letter topic)"
            )
        r = None if route is None else self.settings.route(route)  # ConfigError: unknown route, with the known ones
        if from_topic is None:
            assert r is not None
            return r.dead_letter, r
        owners = [o.input for o in self.settings.routes if o.dead_letter == from_topic]
        if r is None and not owners:
            raise ReplayError(
                f"{from_topic} is no configured route's dead-letter topic: for a copy of one (an archive), name the "
                "route whose dead letters it holds with --route ROUTE"
            )
        if r is not None and owners and r.input not in owners:
            raise ReplayError(f"{from_topic} is the dead-letter topic of {', '.join(owners)}, not of {r.input}")
        return from_topic, r

    def owners(self, topic: str, only: Route | None) -> tuple[Route, ...]:
        """The routes whose dead letters ``topic`` holds: the routes whose dead-letter topic it is, or, for a copy
        (``--from-topic`` with ``--route``), the route named. A letter naming any other route is refused."""
        found = tuple(r for r in self.settings.routes if r.dead_letter == topic)
        if found:
            return found
        return () if only is None else (only,)

    async def run(
        self,
        *,
        route: str | None = None,
        from_topic: str | None = None,
        selection: Selection = Selection(),
        dry_run: bool = False,
        requeue_failed: bool = False,
        max_attempts: int = MAX_ATTEMPTS,
        include_parked: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> ReplayReport:
        """Replay the selected dead letters. ``progress(done, total)`` is called as records are read (``total`` is
        the number of records in the offset ranges: the index's and the replay's). Raises ``ReplayError`` /
        ``ConfigError`` before anything is changed, ``DataLost`` when Redis lost its data (``generation.require``:
        before anything is changed, or as soon as the marker goes), ``KafkaUnavailable`` / ``StoreError`` when a
        service fails (what was acknowledged stays done; run it again to finish)."""
        if not self.settings.routes:
            raise ConfigError("routes: no route configured; there is nothing to replay into")
        if max_attempts < 1:
            raise ReplayError(f"--max-attempts {max_attempts}: at least 1")
        topic, only = self.source_topic(route, from_topic)
        owners = self.owners(topic, only)
        signer_for(self.settings.signing)  # a signing key that cannot be read: refused before anything is changed
        report = ReplayReport(
            topic=topic,
            dry_run=dry_run,
            requeue_failed=requeue_failed,
            max_attempts=max_attempts,
            include_parked=include_parked,
        )
        from gatekeeper.consumers.deciding import route_policy
        from gatekeeper.generation import refusal, require
        from gatekeeper.redis_store import RedisStore

        owned_store = self._store is None
        real_store: Any = self._store if self._store is not None else RedisStore(self.settings.redis)
        markers = self._markers
        owned_markers = False
        if markers is None and not dry_run:
            markers = MemoryMarkers() if self._store is not None else RedisMarkers(self.settings)
            owned_markers = self._store is None
        store: Store = DryRunStore(real_store) if dry_run else cast(Store, real_store)
        processors = {r.input: Processor(store, route_policy(r, self.settings)) for r in self.settings.routes}
        self._had_state = {}
        sender = self._sender()
        started = False
        try:
            async with plain_consumer(self.settings.kafka, self._timeout) as consumer:
                await real_store.ping()
                if isinstance(real_store, RedisStore):
                    # after a loss: refused before anything is read, decided or written; the marker pinned, so a
                    # loss while this runs stops it at its next load or save
                    await require(self.settings, real_store, pin=True, timeout=self._timeout)
                inputs = await self._inputs(consumer, owners)
                ranges, whole = await self._ranges(consumer, topic, selection)
                scans = {topic: whole}
                for t in sorted({o.dead_letter for o in owners} - {topic}):  # a copy's letters are requeued there
                    scans[t] = (await self._ranges(consumer, t, Selection(since=selection.since)))[1]
                total = sum(end - start for start, end in ranges.values())
                total += sum(end - start for r in scans.values() for start, end in r.values())
                if progress is not None:
                    progress(0, total)
                done = 0
                index: dict[Identity, Copy] = {}
                for t, r in scans.items():
                    async for chunk in self._read(consumer, t, r):
                        for rec in chunk:
                            self._index(index, t, rec, owners, inputs)
                        done += len(chunk)
                        if progress is not None:
                            progress(done, total)
                if not dry_run and total:
                    await self._start(sender)
                    started = True
                async for chunk in self._read(consumer, topic, ranges):
                    items: list[_Item] = []
                    for rec in chunk:
                        done += 1
                        report.read += 1
                        if report.limited:
                            continue
                        item = self._item(topic, rec, only, owners, inputs, report)
                        if item is None:
                            continue
                        if not self._selected(item, selection):
                            report.filtered += 1
                            continue
                        if self._passed_over(item, index, include_parked, report):
                            continue
                        if selection.limit is not None and self._counted(report, items) >= selection.limit:
                            report.limited = True
                            continue
                        items.append(item)
                    await self._replay_items(
                        items,
                        processors,
                        store,
                        sender if started else None,
                        markers,
                        report,
                        dry_run,
                        requeue_failed,
                        max_attempts,
                    )
                    if progress is not None:
                        progress(done, total)
                    if report.limited:
                        break
        except DataLost as exc:  # the marker went while this ran: said as the check says it
            raise refusal(exc, "replaying; what was acknowledged before stays done") from None
        finally:
            await sender.close()  # the outcomes were awaited already
            if markers is not None and owned_markers:
                await markers.close()
            if owned_store:
                await real_store.close()
        return report

    @staticmethod
    def _counted(report: ReplayReport, pending: Sequence[_Item]) -> int:
        return sum(1 for ln in report.lines if ln.status is not Status.SKIPPED) + len(pending)

    @staticmethod
    def _passed_over(item: _Item, index: Mapping[Identity, Copy], include_parked: bool, report: ReplayReport) -> bool:
        """Whether a selected letter is skipped: a newer copy of its line is on the topics (only the newest is
        replayed, so a requeue replaces a letter rather than adds one), or it is parked (``include_parked`` not
        set)."""
        live = index.get(item.identity)
        note = None
        if live is not None and live.coordinates != item.dlq:
            note = SUPERSEDED
        elif item.parked and not include_parked:
            note = PARKED
        if note is None:
            return False
        assert item.route is not None
        line = ReplayedLine(
            *item.dlq, status=Status.SKIPPED, route=item.route.input, conversation=item.conversation, was=item.was
        )
        report.lines.append(dataclasses.replace(line, note=note))
        return True

    # ------------------------------------------------------------ reading

    async def _ranges(
        self, consumer: Any, topic: str, sel: Selection
    ) -> tuple[dict[Any, tuple[int, int]], dict[Any, tuple[int, int]]]:
        """Per partition, the first offset to read and the end (exclusive), fixed when the replay starts: the
        replay's range (``since`` to ``until``), and the whole range from ``since`` to the end (the index's: a
        newer copy of a selected letter may be past ``until``, never before the letter it replaces)."""
        from aiokafka import TopicPartition

        from gatekeeper.admin import _bounded

        kafka = self.settings.kafka
        try:
            parts = await topic_partitions(consumer, kafka, topic, self._timeout)
        except TopicError as exc:
            raise ReplayError(str(exc)) from None
        tps = [TopicPartition(topic, p) for p in parts]
        first = await _bounded(consumer.beginning_offsets(tps), self._timeout, kafka, "reading offsets")
        end = await _bounded(consumer.end_offsets(tps), self._timeout, kafka, "reading offsets")
        ranges = {tp: (int(first[tp]), int(end[tp])) for tp in tps}
        if sel.since is not None:
            found = await _bounded(
                consumer.offsets_for_times({tp: int(sel.since * 1000) for tp in tps}),
                self._timeout,
                kafka,
                "finding offsets by time",
            )
            ranges = {tp: ((found[tp].offset if found.get(tp) is not None else e), e) for tp, (s, e) in ranges.items()}
        whole = {tp: (s, max(s, e)) for tp, (s, e) in ranges.items()}
        if sel.until is not None:
            found = await _bounded(
                consumer.offsets_for_times({tp: int(sel.until * 1000) + 1 for tp in tps}),
                self._timeout,
                kafka,
                "finding offsets by time",
            )
            ranges = {
                tp: (s, min(e, found[tp].offset) if found.get(tp) is not None else e) for tp, (s, e) in ranges.items()
            }
        return {tp: (s, max(s, e)) for tp, (s, e) in ranges.items()}, whole

    async def _inputs(self, consumer: Any, owners: Sequence[Route]) -> dict[str, dict[int, int]]:
        """Per route whose letters may be replayed: its input topic's partitions and their end offsets now (a
        topic that does not exist has none), what a real dead letter's ``gk.original.*`` can name."""
        from aiokafka import TopicPartition

        from gatekeeper.admin import _bounded

        kafka = self.settings.kafka
        out: dict[str, dict[int, int]] = {}
        for r in owners:
            try:
                parts = await topic_partitions(consumer, kafka, r.input, self._timeout)
            except TopicError:
                out[r.input] = {}
                continue
            tps = [TopicPartition(r.input, p) for p in parts]
            end = await _bounded(consumer.end_offsets(tps), self._timeout, kafka, "reading offsets")
            out[r.input] = {tp.partition: int(end[tp]) for tp in tps}
        return out

    async def _read(self, consumer: Any, topic: str, ranges: Mapping[Any, tuple[int, int]]) -> Any:
        """The records of the ranges, partition by partition, in chunks of up to ``CHUNK``."""
        from gatekeeper.admin import _bounded

        kafka = self.settings.kafka
        for tp, (start, end) in sorted(ranges.items(), key=lambda kv: kv[0].partition):
            if start >= end:
                continue
            consumer.assign([tp])
            consumer.seek(tp, start)
            while True:
                position = await consumer.position(tp)
                if position >= end:
                    break
                batch = await _bounded(
                    consumer.getmany(tp, timeout_ms=int(self._timeout * 1000), max_records=CHUNK),
                    self._timeout + 5,
                    kafka,
                    "reading the dead-letter topic",
                )
                records = [r for r in batch.get(tp, []) if r.offset < end]
                if records:
                    yield records
                elif await consumer.position(tp) == position:  # nothing, not even a transaction marker, in time
                    raise KafkaUnavailable(
                        f"kafka at {kafka.bootstrap_servers}: no records from {topic}[{tp.partition}] at offset "
                        f"{position} within {self._timeout:g}s (the range ends at {end})"
                    )

    def _letter(
        self, topic: str, rec: Any, only: Route | None, owners: Sequence[Route], inputs: Mapping[str, Mapping[int, int]]
    ) -> _Item | _Refused | None:
        """One dead-letter record read: an item, why it is refused, or None when it is another route's on a shared
        topic (not selected). Refused: no ``gk.original.topic``; a topic no configured route reads; a route whose
        dead letters do not go to this topic (``owners``: a letter planted on route A's dead-letter topic naming
        route B); ``gk.original.*`` or ``gk.attempt`` that no real dead letter of the route carries
        (``check_original``)."""
        headers = {str(k): bytes(v) if v is not None else b"" for k, v in (rec.headers or ())}
        coords = (topic, rec.partition, rec.offset)
        was = _header(headers, "gk.reason")
        original = _header(headers, "gk.original.topic")
        if original is None:
            return _Refused("not a gatekeeper dead letter (no gk.original.topic)", None, was)
        try:
            route = self.settings.route(original)
        except ConfigError:
            return _Refused(f"no configured route reads {original}", None, was)
        if all(o.input != route.input for o in owners):
            return _Refused(
                f"it names route {route.input}, whose dead letters do not go to {topic} (refused)", None, was
            )
        if only is not None and route.input != only.input:
            return None  # another route's dead letter on a shared topic
        checked = check_original(headers, route.input, inputs.get(route.input, {}))
        if isinstance(checked, str):
            return _Refused(checked, route.input, was)
        partition, offset, attempt = checked
        from gatekeeper.consumers.intake import conversation_of

        conversation = conversation_of(rec.key, headers.items(), route.conversation_header)
        if conversation is None:
            conversation = _header(headers, "gk.conversation")
        parked = PARKED_HEADER in headers
        return _Item(coords, rec, headers, route, conversation, was, (route.input, partition, offset), attempt, parked)

    def _item(
        self,
        topic: str,
        rec: Any,
        only: Route | None,
        owners: Sequence[Route],
        inputs: Mapping[str, Mapping[int, int]],
        report: ReplayReport,
    ) -> _Item | None:
        """A dead letter to replay, or None: skipped (the report says why) or not selected (counted)."""
        got = self._letter(topic, rec, only, owners, inputs)
        if got is None:
            report.filtered += 1
            return None
        if isinstance(got, _Refused):
            line = ReplayedLine(topic, rec.partition, rec.offset, status=Status.SKIPPED, route=got.route, was=got.was)
            report.lines.append(dataclasses.replace(line, note=got.note))
            return None
        assert got.route is not None
        note = None
        if got.was == OUTCOME_TOO_LARGE:
            note = "outcome-too-large: its output topic cannot hold the forwarded record"
        elif "gk.value.omitted" in got.headers:
            note = "its value was omitted to fit the dead-letter topic; re-send it from the input"
        if note is not None:
            line = ReplayedLine(*got.dlq, status=Status.SKIPPED, route=got.route.input, was=got.was)
            report.lines.append(dataclasses.replace(line, note=note))
            return None
        return got

    def _index(
        self,
        index: dict[Identity, Copy],
        topic: str,
        rec: Any,
        owners: Sequence[Route],
        inputs: Mapping[str, Mapping[int, int]],
    ) -> None:
        """Note one dead-letter record in the index of the newest copy of each line (letters that cannot be
        replayed are left out: a refused letter supersedes nothing)."""
        got = self._letter(topic, rec, None, owners, inputs)
        if not isinstance(got, _Item):
            return
        ts = rec.timestamp if isinstance(rec.timestamp, int) else -1
        copy = Copy(got.attempt, ts, topic, rec.partition, rec.offset)
        known = index.get(got.identity)
        if known is None or copy > known:
            index[got.identity] = copy

    @staticmethod
    def _selected(item: _Item, sel: Selection) -> bool:
        if sel.letters is not None and item.dlq[1:] not in sel.letters:
            return False
        if sel.reasons is not None and (item.was or "") not in sel.reasons:
            return False
        if sel.since is not None and item.record.timestamp is not None and item.record.timestamp < sel.since * 1000:
            return False
        if sel.until is not None and item.record.timestamp is not None and item.record.timestamp > sel.until * 1000:
            return False
        return sel.conversation is None or item.conversation == sel.conversation

    # ------------------------------------------------------------ deciding and producing

    async def _replay_items(
        self,
        items: Sequence[_Item],
        processors: Mapping[str, Processor],
        store: Store,
        sender: OutcomeSender | None,
        markers: Markers | None,
        report: ReplayReport,
        dry_run: bool,
        requeue_failed: bool,
        max_attempts: int = MAX_ATTEMPTS,
    ) -> None:
        """Decide the items (grouped by route, in order) and produce their outcomes (``sender`` None: a dry run, or
        nothing to replay)."""
        groups: list[list[_Item]] = []
        for it in items:
            if groups and groups[-1][0].route is it.route:
                groups[-1].append(it)
            else:
                groups.append([it])
        for group in groups:
            route = group[0].route
            assert route is not None
            keyed = [(it, it.conversation) for it in group if it.conversation is not None]
            marks = [markers.key(route.input, c, it.record.value or b"") for it, c in keyed] if markers else []
            unfinished: set[str] = set()
            if markers is not None:
                unfinished = await markers.begin(marks)
            mark_of = {id(it): m for (it, _), m in zip(keyed, marks, strict=False)}
            gone = await self._states_gone(store, route.input, [c for _, c in keyed])
            now = self._clock()
            lines = [
                Line(
                    it.conversation,
                    it.record.value or b"",
                    first_seen=0.0,
                    replay=True,
                    partition=it.identity[1],
                    sender=self._proof(it),
                )
                for it in group
            ]
            decisions = await processors[route.input].process(lines, now)
            sends: list[tuple[int, Send]] = []
            results: list[ReplayedLine] = []
            for it, d in zip(group, decisions, strict=True):
                resend = mark_of.get(id(it)) in unfinished
                line, outcomes = self._outcome(it, d, now, dry_run, requeue_failed, resend, max_attempts)
                if it.conversation in gone:
                    note = STATE_GONE if line.note is None else f"{STATE_GONE}; {line.note}"
                    line = dataclasses.replace(line, state_gone=True, note=note)
                results.append(line)
                for o in outcomes:
                    # room for the replay's headers, which a trimmed outcome gets again
                    fitted = (sender or self._fitter).fit(o, headroom=512)
                    if fitted is not None:
                        if fitted.level:  # rendered again from its draft: the replay's headers are added again
                            extra = _extra(fitted.kind, it, now, parked=_is_parked(o))
                            fitted = msgspec.structs.replace(fitted, headers=fitted.headers + extra)
                        sends.append((len(results) - 1, Send(fitted, route.input)))
            if sender is not None and sends:
                await self._produce(sender, [s for _, s in sends])
                for i, s in sends:
                    if s.outcome.kind is not OutcomeKind.ALERT and s.meta is not None:
                        results[i] = dataclasses.replace(
                            results[i], output=(s.outcome.topic, s.meta.partition, s.meta.offset)
                        )
            if markers is not None:
                await markers.end(marks)
            report.lines.extend(results)

    async def _states_gone(self, store: Store, route: str, conversations: Sequence[str]) -> set[str]:
        """The conversations that had no state at all in Redis when this replay first met them (expired after
        retention, or deleted): their lines are decided as the first lines of a new conversation, so a reply's reason
        (``unknown-handoff``) says nothing about why it was dead-lettered. One header-only load of the conversations not
        met before (one round trip)."""
        new = sorted({c for c in conversations if (route, c) not in self._had_state})
        if new:
            loaded = await store.load(route, {c: () for c in new}, ())
            for c in new:
                state = loaded.states.get(c)
                self._had_state[(route, c)] = state is not None and (state.seq > 0 or bool(state.lines))
        return {c for c in conversations if not self._had_state[(route, c)]}

    def _outcome(
        self,
        it: _Item,
        d: Decision,
        now: float,
        dry_run: bool,
        requeue: bool,
        resend: bool,
        max_attempts: int = MAX_ATTEMPTS,
    ) -> tuple[ReplayedLine, list[Outcome]]:
        assert it.route is not None
        msg = d.message
        base = ReplayedLine(
            *it.dlq,
            status=Status.STILL_FAILING,
            route=it.route.input,
            conversation=it.conversation,
            id=msg.id if msg is not None else None,
            type=msg.type if msg is not None else None,
            was=it.was,
        )
        if d.repeated and d.forwarded and not resend:
            return dataclasses.replace(base, status=Status.ALREADY_FORWARDED, note="an earlier replay forwarded it"), []
        if d.verdict is Verdict.HOLD:
            return dataclasses.replace(base, reason="unknown-handoff", problems=d.problems), []
        source = self._source(it)
        targets = Targets(
            it.route.output,
            it.route.dead_letter,
            it.route.alerts,
            it.route.input,
            it.route.mode == "dry-run",
            signer=signer_for(self.settings.signing),  # read once (cached): a forwarded line is signed as the daemon's
        )
        from gatekeeper.consumers.deciding import route_policy

        sensitive = frozenset(route_policy(it.route, self.settings).profile.sensitive)
        if d.verdict is Verdict.DEAD_LETTER:
            reason = d.reason.value if d.reason is not None else None
            line = dataclasses.replace(base, reason=reason, problems=d.problems)
            if not requeue:
                return line, []
            if it.parked:  # requeued for the last time already: it stays where it is
                return dataclasses.replace(line, note="parked: never requeued again"), []
            built = build(
                msgspec.structs.replace(d, raise_alert=False),
                source,
                targets,
                conversation=it.conversation,
                sensitive=sensitive,
                now=now,
            )
            park = source.attempt >= max_attempts  # the copy's attempt: the line failed that many times
            outcomes = [] if dry_run else [_with_replayed(o, it, now, parked=park) for o in built]
            if park:
                why = f"parked at attempt {source.attempt} (--max-attempts {max_attempts}): never requeued again"
                return dataclasses.replace(line, status=Status.PARKED, note=why), outcomes
            return dataclasses.replace(line, status=Status.REQUEUED), outcomes
        status = Status.ALERTED if d.alerts else Status.FORWARDED
        reason = d.reason.value if d.reason is not None and d.alerts else None
        note = "re-sent: an earlier replay did not finish" if d.repeated else None
        notified = _header(it.headers, NOTICE_ID_HEADER)
        if notified is not None:
            said = NOTIFIED.format(id=notified)
            note = said if note is None else f"{note}; {said}"
        line = dataclasses.replace(base, status=status, reason=reason, problems=d.problems, note=note)
        if dry_run:
            return line, []
        built = build(d, source, targets, conversation=it.conversation, sensitive=sensitive, now=now)
        return line, [_with_replayed(o, it, now) for o in built]

    def _proof(self, it: _Item) -> SenderProof | None:
        """On a route with sender_auth, the record's signature verified again from the dead letter's headers (it
        keeps the original record's own headers, the signature among them; a dead letter trimmed of its optional
        headers lost it, and is refused again)."""
        if it.route is None or not it.route.sender_auth or it.conversation is None:
            return None
        if self._keys is None:
            self._keys = KeyRing.from_settings(self.settings.sender_auth)
        headers = [(str(k), bytes(v) if v is not None else b"") for k, v in (it.record.headers or ())]
        header = self.settings.sender_auth.header
        return check_record(self._keys, headers, header, it.route.input, it.conversation, it.record.value or b"")

    @staticmethod
    def _source(it: _Item) -> Source:
        h = it.headers
        rec = it.record
        ts = _int(_header(h, "gk.original.timestamp"), -1)
        return Source(
            topic=_header(h, "gk.original.topic") or "",
            partition=_int(_header(h, "gk.original.partition"), -1),
            offset=_int(_header(h, "gk.original.offset"), -1),
            value=rec.value or b"",
            key=rec.key,
            timestamp=None if ts < 0 else ts,
            headers=tuple(h.items()),
            attempt=next_attempt(tuple(h.items())),
        )

    def _sender(self) -> OutcomeSender:
        """The daemon's outcome sender (trimming, retries), idempotent and never transactional: the transactional
        ids are the daemon's input partitions' (taking one would fence the daemon), and records outside a
        transaction are visible to read_committed consumers."""
        from gatekeeper.consumers.client import AioKafka
        from gatekeeper.metrics import Metrics

        return OutcomeSender(AioKafka(self.settings.kafka), self.settings.kafka, Metrics())

    @functools.cached_property
    def _fitter(self) -> OutcomeSender:
        """A sender never started: a dry run fits outcomes as a replay would (topics' limits unknown)."""
        return self._sender()

    async def _start(self, sender: OutcomeSender) -> None:
        from gatekeeper.admin import _bounded

        topics = {t for r in self.settings.routes for t in (r.output, r.dead_letter, r.alerts)}
        await _bounded(sender.start(topics), self._timeout, self.settings.kafka, "starting the producer")

    async def _produce(self, sender: OutcomeSender, sends: Sequence[Send]) -> None:
        from gatekeeper.admin import _bounded

        try:
            await _bounded(sender.produce(sends), self._timeout * 3, self.settings.kafka, "producing")
        except ProduceTimeout as exc:
            raise KafkaUnavailable(f"kafka at {self.settings.kafka.bootstrap_servers}: {exc}") from None


def _replayed(it: _Item, now: float) -> tuple[tuple[str, bytes], ...]:
    topic, partition, offset = it.dlq
    return (
        ("gk.replayed.from.topic", topic.encode()),
        ("gk.replayed.from.partition", str(partition).encode()),
        ("gk.replayed.from.offset", str(offset).encode()),
        ("gk.replayed.at", iso(now).encode()),
    )


def _extra(kind: OutcomeKind, it: _Item, now: float, *, parked: bool = False) -> tuple[tuple[str, bytes], ...]:
    """The replay's headers on an outcome: where it was replayed from; on a forwarded record (a dead letter has it
    already) ``gk.attempt``, one more than the dead letter's; on a requeued letter at its last attempt
    ``gk.parked`` (why: ``max-attempts``) and ``gk.parked.at``; on a requeued letter whose sender was told,
    ``gk.notice.id`` as the letter had it."""
    extra = _replayed(it, now)
    if kind is OutcomeKind.OUTPUT:
        extra = (*extra, ("gk.attempt", str(next_attempt(tuple(it.headers.items()))).encode()))
    elif kind is OutcomeKind.DEAD_LETTER:
        notice = it.headers.get(NOTICE_ID_HEADER)
        if notice is not None:
            extra = (*extra, (NOTICE_ID_HEADER, notice))
        if parked:
            extra = (*extra, (PARKED_HEADER, PARKED_REASON.encode()), (PARKED_AT_HEADER, iso(now).encode()))
    return extra


def _with_replayed(o: Outcome, it: _Item, now: float, *, parked: bool = False) -> Outcome:
    return msgspec.structs.replace(o, headers=o.headers + _extra(o.kind, it, now, parked=parked))


def _is_parked(o: Outcome) -> bool:
    return any(k == PARKED_HEADER for k, _ in o.headers)


def summary_rows(report: ReplayReport) -> list[tuple[str, int]]:
    """The summary table's rows: passed, then still failing by reason, then the rest."""
    verb = "would be " if report.dry_run else ""
    rows: list[tuple[str, int]] = [
        (f"passed: {verb}forwarded", report.count(Status.FORWARDED)),
        (f"passed: {verb}forwarded with an alert", report.count(Status.ALERTED)),
    ]
    left = "requeued" if report.requeue_failed else "left on the dead-letter topic"
    for reason, n in report.failing_by_reason().items():
        rows.append((f"still failing ({left}): {reason}", n))
    for reason, n in report.failing_by_reason((Status.PARKED,)).items():
        rows.append((f"still failing at attempt {report.max_attempts}, parked (never requeued again): {reason}", n))
    if report.state_gone:
        rows.append(
            (f"still failing ({left}): its conversation has no state in Redis (expired or deleted)", report.state_gone)
        )
    if report.count(Status.ALREADY_FORWARDED):
        rows.append(("already forwarded by an earlier replay", report.count(Status.ALREADY_FORWARDED)))
    for note, n in report.skipped_by_note().items():
        rows.append((f"skipped: {note}", n))
    if report.filtered:
        rows.append(("not selected (--reason, --conversation, --letter, another route)", report.filtered))
    return rows


def replayed_headers(headers: Iterable[tuple[str, bytes]]) -> dict[str, str]:
    """The ``gk.replayed.*`` headers of a record, decoded (for display and tests)."""
    return {k: v.decode("utf-8", "replace") for k, v in headers if k.startswith("gk.replayed.")}


__all__ = [
    "MAX_ATTEMPTS",
    "NOTICE_ID_HEADER",
    "NOTIFIED",
    "PARKED",
    "PARKED_AT_HEADER",
    "PARKED_HEADER",
    "PARKED_REASON",
    "REPLAYED_HEADERS",
    "SUPERSEDED",
    "Copy",
    "DryRunStore",
    "Identity",
    "Markers",
    "MemoryMarkers",
    "RedisMarkers",
    "ReplayError",
    "ReplayReport",
    "ReplayedLine",
    "Replayer",
    "Selection",
    "Status",
    "check_original",
    "masked",
    "parse_letters",
    "parse_when",
    "replayed_headers",
    "summary_rows",
    "well_formed",
]
