"""The sweeper: closes the handoffs whose time ran out (spec 5.4). It runs in every instance; for any one handoff,
one instance acts.

    sweeper = Sweeper(store, routes, publisher, clock=time.time, metrics=metrics)
    report = await sweeper.sweep(owned={("agents.pay", 0), ("agents.pay", 2)})

A sweep, per route and input partition this instance holds:

1. one round trip reads the partition's deadline index up to now, the number of open handoffs and the oldest one
   (the gauges);
2. one round trip loads those conversations' states, one reads their cancel intents;
3. per handoff, ``policy.lifecycle.overdue`` says what is due: a CX on the sender's behalf (``why=EXPIRED`` at
   ``exp=``/``due=``, with the ``thread-orphaned`` alert; ``why=TIMEOUT`` at the route's readback deadline),
   published exactly once; or an alert only (``thread-orphaned`` for a handoff already cancelled and still not
   acknowledged, ``cleared-not-done`` for one whose act was cleared: the act may be running, so it is not
   cancelled);
4. one round trip saves the states and the index changes (the handled deadlines leave the deadline index).

The CX goes to the route's output topic, keyed by the conversation, on the partition the producer's default
partitioner gives that key (so it lands after the conversation's forwarded lines), with the headers
``gk.author=gatekeeper``, ``gk.cancel.handoff=<HO id>``, ``gk.cancel.why``, ``gk.conversation`` and
``gk.version``, and with ``signing`` configured the gatekeeper's ``gk.sig`` with the verdict ``cancel``
(``gatekeeper.verdicts``: the route's signer). Alerts go to the route's
alerts topic as JSON (see ``alert_document``), with ``gk.author`` and ``gk.alert``.

**Who acts: the owner of the conversation's input partition** (not a Redis lease). The index is bucketed by input
partition and an instance sweeps only the partitions the consumer group gave it. Why:

- A conversation's state has one writer, the instance holding its partition: each batch writes the entries of the
  conversation's hash it changed, fenced by the partition's owner epoch (``gatekeeper.redis_store``, "Fenced
  writes": a write under an older epoch than the hash's is refused, never merged). A sweeper on another instance
  would write under its own epoch: either the owner's next save is refused (and retried until it loses the
  partition) or the sweeper's is. Sweeping only the partitions this instance owns keeps one writer. In the daemon a
  sweep runs under the worker's batch lock, so a batch and a sweep never interleave, and a revocation (which waits
  for that lock) hands a partition over only after the sweep in progress finished.
- Nothing new to elect: the group already keeps one owner per partition, heartbeats it and moves it when an
  instance dies. A lease would be a second election whose winner need not own the partitions. Sweeping scales out
  with the partitions.

*A network partition.* An instance cut off from the brokers cannot publish a cancel (the produce fails; the sweep
is tried again later) and its partitions move to the others once its session times out; one cut off from Redis
reads and claims nothing. The dangerous case is an instance that lost its partitions and does not know it yet (cut
off from the group coordinator but not from the partition leaders) while the new owner sweeps the same handoff:
that is why the cancel is claimed by compare-and-set in Redis first (below), so two instances never both claim one
handoff's cancel.

*A paused process* (a long GC, SIGSTOP, a migrated VM) resumes believing it still holds its partitions. It publishes
only a cancel it claimed itself, and only within ``takeover_seconds / 2`` of the claim (checked on its clock just
before the produce); another instance takes a claim over only after ``takeover_seconds``. The one window left is a
pause longer than that inside the produce call itself (after the check, before the record leaves the process): then
a second, byte-identical CX (same id, key and partition) can appear, which a receiver treats as any at-least-once
redelivery, and the conversation's state still records one cancel. Keep ``takeover_seconds`` well above the longest
pause you expect and above ``kafka.request_timeout_ms``. A Redis lease with a fencing token has the same window:
Kafka cannot check a Redis token, so the token only fences the writes that go to Redis.

**Exactly one cancel per handoff.** The CX is a function of the state (``lifecycle.cancel_line``): every attempt
builds the same bytes. Before publishing, the sweeper records a *cancel intent* next to the conversation's state,
atomically and only if none exists (``claim_cancel``): the line, the output partition and that partition's end offset
before the publish. Then it publishes (``acks=all``), marks the intent done with the offset, applies the cancel to
the state and saves it with the index changes.

- Another sweeper (another instance, a zombie) finds the intent and does not publish. It takes a pending intent over
  only after ``takeover_seconds``, by compare-and-set of the intent's fencing token (one winner).
- Killed after the claim (before or after the publish) and before the bookkeeping: the handoff is still due (its
  state was not saved) and its intent pending. The next sweep, by any instance after ``takeover_seconds`` or by the
  same sweeper at once, takes the intent over and reads the output partition from the recorded offset for that exact
  line: found, it only does the bookkeeping; not found, it publishes.
- Killed after marking the intent done and before saving the state: the next sweep sees it done and only does the
  bookkeeping.

Why not a Kafka transaction: the bookkeeping lives in Redis, outside any Kafka transaction. The sweeper's records go
through the worker's idempotent producer, outside transactions even in exactly-once mode (a ``read_committed``
receiver sees them as they are written); the intent and the search make them safe against a zombie all the same.

**Questions** (``AQ``) with a ``by=`` are in the same deadline index, under the question's id (never in the open
index: they are not handoffs). Past ``by=`` and still unanswered (no AN, no UN from the one asked), the sweep
publishes one ``unanswered-question`` alert (``question_alert_document``, header ``gk.question``), counts
``gatekeeper_unanswered_questions_total`` and records it on the question's entry (``MarkUnanswered``), which takes it
out of the index: as an alert-only expiry, once, by the partition's owner; no CX.

Alerts are at least once: published before the state records them, a crash in between repeats one, never loses
one. A dry-run route publishes no CX: its alert says ``"action": "would-cancel"`` with the line, and the state
records the cancel as enforce mode would (the shadow state stays enforce's).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from aiokafka.errors import KafkaError

from gatekeeper import __version__
from gatekeeper.consumers.outcomes import iso
from gatekeeper.inert import json_document
from gatekeeper.masking import masker_for
from gatekeeper.metrics import HANDOFF_PROBLEM_CODES, Metrics
from gatekeeper.policy import ConversationState, Overlay, RoutePolicy, apply
from gatekeeper.policy.decide import error_text
from gatekeeper.policy.lifecycle import (
    UNANSWERED,
    Action,
    IndexEntry,
    Overdue,
    QuestionDeadline,
    cancel_id,
    expire,
    index_of,
    mark_overdue,
    overdue,
    question_deadline,
    record_cancel,
    unanswered,
)
from gatekeeper.store import CancelIntent, Indexed, LifecycleStore, StoreError
from gatekeeper.verdicts import CANCEL, Signer
from rwcore import Problem, parse_line

if TYPE_CHECKING:
    from gatekeeper.consumers.sending import OutcomeSender

log = logging.getLogger(__name__)

AUTHOR_HEADER = "gk.author"
AUTHOR = "gatekeeper"
CANCEL_HANDOFF_HEADER = "gk.cancel.handoff"
CANCEL_WHY_HEADER = "gk.cancel.why"
ALERT_HEADER = "gk.alert"
QUESTION_HEADER = "gk.question"

Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class OutRecord:
    """A record the sweeper publishes: a CX on the output topic, or an alert."""

    topic: str
    key: bytes
    value: bytes
    headers: Headers = ()
    partition: int | None = None  # None: the producer's partitioner picks it from the key


class Publisher(Protocol):
    """Where the sweeper's records go, and how it finds one it may have published before a crash."""

    async def partition_for(self, topic: str, key: bytes) -> int:
        """The partition the producer's default partitioner gives ``key`` on ``topic``."""
        ...

    async def end_offset(self, topic: str, partition: int) -> int:
        """The offset the next record on that partition will get (the end, as a ``read_committed`` reader sees it
        in transactional mode)."""
        ...

    async def publish(self, records: Sequence[OutRecord]) -> list[int]:
        """Publish ``records`` and wait until every one is acknowledged; their offsets, in order. Raises on failure
        (none, some or all may have been written: the caller's intent covers that)."""
        ...

    async def find(self, topic: str, partition: int, start: int, key: bytes, value: bytes) -> int | None:
        """The offset of a record with this key and value on ``partition`` at or after ``start``, else None."""
        ...


@dataclass(frozen=True, slots=True)
class SweepRoute:
    """What the sweeper needs to know about a route."""

    policy: RoutePolicy
    output: str
    alerts: str
    dry_run: bool = False
    sensitive: frozenset[str] = frozenset()
    #: Signs the CX lines published on ``output`` (``gk.sig``); None: unsigned (signing is off). The daemon passes its
    #: route's signer.
    signer: Signer | None = None

    @property
    def name(self) -> str:
        return self.policy.name


@dataclass(frozen=True, slots=True)
class Handled:
    route: str
    conversation: str
    ho: str
    what: str  # cancelled, recovered, would-cancel, thread-orphaned, cleared-not-done, skipped: <why>, dropped
    line: str | None = None


@dataclass(slots=True)
class SweepReport:
    """What one sweep did (for logs and tests)."""

    handled: list[Handled] = field(default_factory=list)
    published: list[OutRecord] = field(default_factory=list)

    def of(self, what: str) -> list[Handled]:
        return [h for h in self.handled if h.what == what]

    @property
    def cancels(self) -> list[Handled]:
        """The cancels this sweep published."""
        return self.of("cancelled")


#: What a sweep treats as a service failing (the sweep stops, and is tried again): anything else a handoff's handling
#: raises is a bug in the gatekeeper, and that handoff alone is set aside (``Sweeper.quarantined``).
INFRASTRUCTURE_ERRORS: tuple[type[BaseException], ...] = (StoreError, KafkaError, TimeoutError, OSError)


class _Deferred(Exception):
    """A cancel that must wait: its intent is another sweeper's and not old enough, or too old to publish on."""


class Sweeper:
    """Sweeps the deadline indexes of the partitions it is given (see the module docstring).

    ``owner`` names this sweeper in the cancel intents (random by default: a restarted process is another owner).
    ``clock`` is the time source (epoch seconds), injected in tests.
    """

    def __init__(
        self,
        store: LifecycleStore,
        routes: Iterable[SweepRoute],
        publisher: Publisher,
        *,
        clock: Callable[[], float] = time.time,
        metrics: Metrics | None = None,
        owner: str | None = None,
        takeover_seconds: float = 60.0,
        max_per_sweep: int = 500,
        retention_seconds: float = 7 * 86400,
        open_retention_seconds: float = 30 * 86400,
    ) -> None:
        self.store = store
        self.routes = {r.name: r for r in routes}
        self.publisher = publisher
        self.clock = clock
        self.metrics = metrics
        self.owner = owner or f"sweeper-{uuid.uuid4().hex[:12]}"
        self.takeover_seconds = takeover_seconds
        self.max_per_sweep = max_per_sweep
        self.retention_seconds = retention_seconds
        self.open_retention_seconds = open_retention_seconds
        #: Handoffs whose handling raised (a bug): skipped by every later sweep of this process, so one handoff that
        #: cannot be swept never stops the others (its stack trace is logged once, and it is counted and alerted).
        self.quarantined: set[tuple[str, str, str]] = set()
        self._epochs: dict[tuple[str, int], int] = {}

    async def sweep(
        self,
        owned: Iterable[tuple[str, int]],
        now: float | None = None,
        epochs: Mapping[tuple[str, int], int] | None = None,
    ) -> SweepReport:
        """One sweep of the (route, input partition) pairs this instance holds. Raises ``StoreError`` or the
        publisher's error when a service fails: what was finished is saved first, the rest is tried next time.
        ``epochs``: this instance's owner epoch of each (route, partition): the sweep's writes are fenced by them."""
        self._epochs = dict(epochs or {})
        now = self.clock() if now is None else now
        by_route: dict[str, set[int]] = {}
        for route, partition in owned:
            if route in self.routes:
                by_route.setdefault(route, set()).add(partition)
        report = SweepReport()
        started = time.perf_counter()
        for name, partitions in sorted(by_route.items()):
            await self._sweep_route(self.routes[name], partitions, now, report)
        for name in self.routes.keys() - by_route.keys():
            self._gauge(name, 0, None, now)
        if self.metrics is not None:
            self.metrics.sweep_seconds.observe(time.perf_counter() - started)
        return report

    # ------------------------------------------------------------------------------------------------ one route

    async def _sweep_route(self, rt: SweepRoute, partitions: Collection[int], now: float, report: SweepReport) -> None:
        views = await self.store.due_view(
            rt.name,
            partitions,
            now,
            self.max_per_sweep,
            forget_lapsed_before=now - self.retention_seconds,
        )
        oldest = [v.oldest for v in views.values() if v.oldest is not None]
        first = min(o.score for o in oldest) if oldest else None
        self._gauge(rt.name, sum(v.open_count for v in views.values()), first, now)
        due = [e for v in views.values() for e in v.due]
        # an open entry older than the state's retention may outlive its state (a conversation that expired): check it
        ancient = [o for o in oldest if now - o.score > self.open_retention_seconds]
        entries = due + [o for o in ancient if all((o.conversation, o.ho) != (e.conversation, e.ho) for e in due)]
        if not entries:
            return
        wants: dict[str, set[str]] = {}
        for e in entries:  # each conversation's part the sweep needs: the handoffs due (and what they point to)
            wants.setdefault(e.conversation, set()).add(e.ho)
        loaded = await self.store.load(rt.name, wants, ())
        intents = await self.store.intents(rt.name, [(e.conversation, e.ho) for e in due]) if due else {}
        changed: set[str] = set()
        broken: set[str] = set()  # conversations a handoff's handling raised in: not saved by this sweep
        try:
            for e in sorted(due, key=lambda x: (x.score, x.conversation, x.ho)):
                if (rt.name, e.conversation, e.ho) in self.quarantined or e.conversation in broken:
                    report.handled.append(Handled(rt.name, e.conversation, e.ho, "skipped: internal error"))
                    continue
                state = loaded.states[e.conversation]
                if e.ho not in state.lines:
                    log.warning(
                        "a handoff's conversation state is gone (retention): its deadline is dropped",
                        extra={"route": rt.name, "conversation": e.conversation, "handoff": e.ho},
                    )
                    report.handled.append(Handled(rt.name, e.conversation, e.ho, "dropped"))
                    continue
                try:
                    if await self._handle(rt, e, state, now, intents.get((e.conversation, e.ho)), report):
                        changed.add(e.conversation)
                except INFRASTRUCTURE_ERRORS:
                    raise
                except Exception as exc:
                    # its state may be half-changed: the conversation is not saved by this sweep; a cancel already
                    # published for another of its handoffs is found again from its intent by the next sweep
                    broken.add(e.conversation)
                    changed.discard(e.conversation)
                    await self._internal_error(rt, e.conversation, e.ho, exc, report, state)
        finally:
            keep = [e for e in entries if e.conversation not in broken]
            await self._save(rt, keep, loaded.states, changed - broken, report)

    async def _internal_error(
        self,
        rt: SweepRoute,
        conversation: str,
        ho: str,
        exc: Exception,
        report: SweepReport,
        state: ConversationState,
    ) -> None:
        """A handoff whose handling raised: quarantined, logged with its stack trace once, counted, alerted."""
        self.quarantined.add((rt.name, conversation, ho))
        log.error(
            "sweeping a handoff raised: it is skipped from now on",
            exc_info=exc,
            extra={"route": rt.name, "conversation": conversation, "handoff": ho, "error": error_text(exc)},
        )
        report.handled.append(Handled(rt.name, conversation, ho, "internal-error"))
        if self.metrics is not None:
            self.metrics.internal_errors.labels(route=rt.name, stage="sweep").inc()
        doc = {
            "alert": "internal-error",
            "author": AUTHOR,
            "action": "skipped",
            "route": rt.name,
            "conversation": conversation,
            "handoff": ho,
            "error": masker_for(_kept_text(state, ho), (), rt.sensitive).text(error_text(exc)),
            "at": iso(self.clock()),
            "dry_run": rt.dry_run,
            "version": __version__,
        }
        headers: Headers = (
            (AUTHOR_HEADER, AUTHOR.encode()),
            (ALERT_HEADER, b"internal-error"),
            (CANCEL_HANDOFF_HEADER, ho.encode()),
            ("gk.conversation", conversation.encode("utf-8")),
            ("gk.version", __version__.encode()),
        )
        value = json_document(doc)
        await self.publisher.publish([OutRecord(rt.alerts, conversation.encode("utf-8"), value, headers)])

    async def _save(
        self,
        rt: SweepRoute,
        entries: Sequence[Indexed],
        states: dict[str, ConversationState],
        changed: set[str],
        report: SweepReport,
    ) -> None:
        seen: dict[tuple[str, int], set[str]] = {}
        for e in entries:
            seen.setdefault((e.conversation, e.partition), set()).add(e.ho)
        rt_seconds = rt.policy.readback_timeout_seconds
        deadlines: list[IndexEntry] = []
        for (conv, partition), hos in seen.items():
            try:
                found = index_of(states[conv], conv, partition, hos, rt_seconds)
            except Exception as exc:  # a bug: its index entries stay as they were, its handoffs are set aside
                for ho in sorted(hos):
                    await self._internal_error(rt, conv, ho, exc, report, states[conv])
                continue
            known = {x.ho for x in found}
            deadlines.extend(found)
            # a handoff its state does not know (the state expired): out of the open and deadline indexes
            deadlines.extend(IndexEntry(partition, conv, ho, open=False) for ho in hos - known)
        fences = {
            conv: epoch for (conv, partition) in seen if (epoch := self._epochs.get((rt.name, partition))) is not None
        }
        await self.store.save(rt.name, {c: states[c] for c in changed}, deadlines, fences or None, now=self.clock())

    async def _handle(
        self,
        rt: SweepRoute,
        e: Indexed,
        state: ConversationState,
        now: float,
        intent: CancelIntent | None,
        report: SweepReport,
    ) -> bool:
        """Act on everything due for one handoff (at most a readback cancel, then its expiry), or one question (its
        ``unanswered-question`` alert). True: state changed."""
        line = state.lines.get(e.ho)
        if e.ho not in state.handoffs and line is not None and line.type == "AQ":
            return await self._question(rt, e, state, now, report)
        changed = False
        rt_seconds = rt.policy.readback_timeout_seconds
        for _ in range(3):  # a readback cancel, then the expiry; never more (each round consumes a deadline)
            o = overdue(state, e.ho, now, rt_seconds)
            if o is None:
                break
            if o.action is Action.CANCEL:
                try:
                    await self._cancel(rt, e, state, o, now, intent, report)
                except _Deferred as why:
                    report.handled.append(Handled(rt.name, e.conversation, e.ho, f"skipped: {why}"))
                    return changed
                intent = None  # a second round is an expiry after a readback cancel: alert only
            else:
                decision = mark_overdue(state, o, now)
                await self._publish_alert(rt, e.conversation, state, o, decision.problems, now, action="alerted")
                apply(state, decision, Overlay())
                self._count_expired(rt, o)
                report.handled.append(Handled(rt.name, e.conversation, e.ho, o.alert or "alerted"))
            changed = True
        return changed

    async def _question(
        self, rt: SweepRoute, e: Indexed, state: ConversationState, now: float, report: SweepReport
    ) -> bool:
        """A question past its ``by=``: ``unanswered-question`` on the alerts topic, then marked in the state
        (``MarkUnanswered``) so it is raised once; the save takes it out of the deadline index. Answered or alerted
        already (an index entry a failed write left behind): nothing, and the save takes it out."""
        decision = unanswered(state, e.ho, now)
        if decision is None:
            return False
        q = question_deadline(state, e.ho)
        assert q is not None
        doc = question_alert_document(rt, e.conversation, state, q, decision.problems, now)
        headers: Headers = (
            (AUTHOR_HEADER, AUTHOR.encode()),
            (ALERT_HEADER, UNANSWERED.encode()),
            (QUESTION_HEADER, e.ho.encode()),
            ("gk.conversation", e.conversation.encode("utf-8")),
            ("gk.version", __version__.encode()),
        )
        value = json_document(doc)
        await self.publisher.publish([OutRecord(rt.alerts, e.conversation.encode("utf-8"), value, headers)])
        apply(state, decision, Overlay())
        if self.metrics is not None:
            self.metrics.unanswered_questions.labels(route=rt.name).inc()
        report.handled.append(Handled(rt.name, e.conversation, e.ho, UNANSWERED))
        log.info(
            f"question unanswered past by={q.value}",
            extra={"route": rt.name, "conversation": e.conversation, "question": e.ho},
        )
        return True

    # ------------------------------------------------------------------------------------------------ the cancel

    async def _cancel(
        self,
        rt: SweepRoute,
        e: Indexed,
        state: ConversationState,
        o: Overdue,
        now: float,
        intent: CancelIntent | None,
        report: SweepReport,
    ) -> None:
        key = e.conversation.encode("utf-8")
        if rt.dry_run:
            line, decision = expire(state, e.ho, o.why, now, rt.policy)
            await self._publish_alert(rt, e.conversation, state, o, decision.problems, now, "would-cancel", line)
            self._bookkeep(rt, e, state, o, line, now, report, "would-cancel")
            return
        fresh = False
        if intent is None:
            line, decision = expire(state, e.ho, o.why, now, rt.policy)
            partition = await self.publisher.partition_for(rt.output, key)
            start = await self.publisher.end_offset(rt.output, partition)
            mine = CancelIntent(
                cx=line.split(" ", 3)[2],
                line=line,
                why=o.why,
                topic=rt.output,
                partition=partition,
                offset=start,
                owner=self.owner,
                token=1,
                at=self.clock(),
            )
            existing = await self.store.claim_cancel(rt.name, e.conversation, e.ho, mine)
            intent, fresh = (mine, True) if existing is None else (existing, False)
        # the intent's line is the one that may be on the topic already: it is the one recorded, whatever was built
        decision = record_cancel(state, e.ho, intent.line, now, rt.policy)
        what = "cancelled"
        if intent.done:
            published = intent.published if intent.published is not None else -1
            what = "recovered"
        elif fresh:
            published = await self._publish_cancel(rt, e, intent, decision.problems, state, o, now)
        else:
            if intent.owner != self.owner and now - intent.at < self.takeover_seconds:
                raise _Deferred(f"cancel {intent.cx} is being published by {intent.owner}")
            taken = await self.store.take_over_cancel(rt.name, e.conversation, e.ho, intent.token, self.owner, now)
            if taken is None:
                raise _Deferred(f"cancel {intent.cx} was taken over by another sweeper")
            intent = taken
            found = await self.publisher.find(intent.topic, intent.partition, intent.offset, key, intent.line.encode())
            if found is not None:
                published, what = found, "recovered"
                log.info(
                    "a cancel published before a crash was found: not published again",
                    extra={"route": rt.name, "conversation": e.conversation, "handoff": e.ho, "offset": found},
                )
            else:
                published = await self._publish_cancel(rt, e, intent, decision.problems, state, o, now)
        if not intent.done:
            await self.store.finish_cancel(rt.name, e.conversation, e.ho, published)
        if what == "recovered" and decision.problems:
            # the alert of a cancel found published may be lost with the crash: at least once, so it goes again
            await self._publish_alert(rt, e.conversation, state, o, decision.problems, now, "cancelled", intent.line)
        self._bookkeep(rt, e, state, o, intent.line, now, report, what)

    async def _publish_cancel(
        self,
        rt: SweepRoute,
        e: Indexed,
        intent: CancelIntent,
        problems: Sequence[Problem],
        state: ConversationState,
        o: Overdue,
        now: float,
    ) -> int:
        """Publish the intent's CX (and its alert with it). Refuses when the intent is too old for this sweeper to
        still be sure nobody took it over (a pause since the claim)."""
        if self.clock() - intent.at >= self.takeover_seconds / 2:
            raise _Deferred(f"cancel {intent.cx} was claimed too long ago to publish safely; left to a takeover")
        headers: Headers = (
            (AUTHOR_HEADER, AUTHOR.encode()),
            (CANCEL_HANDOFF_HEADER, e.ho.encode()),
            (CANCEL_WHY_HEADER, intent.why.encode()),
            ("gk.conversation", e.conversation.encode("utf-8")),
            ("gk.version", __version__.encode()),
        )
        signer = rt.signer
        if signer is not None:
            headers += (signer.header(rt.name, e.conversation, intent.line.encode(), CANCEL),)
        key = e.conversation.encode("utf-8")
        records = [OutRecord(intent.topic, key, intent.line.encode(), headers, intent.partition)]
        if problems:
            records.append(self._alert_record(rt, e.conversation, state, o, problems, now, "cancelled", intent.line))
        offsets = await self.publisher.publish(records)
        if self.metrics is not None:
            self.metrics.cancels.labels(route=rt.name, why=intent.why).inc()
            if problems:
                self._count_problems(rt, problems)
        return offsets[0]

    def _bookkeep(
        self,
        rt: SweepRoute,
        e: Indexed,
        state: ConversationState,
        o: Overdue,
        line: str,
        now: float,
        report: SweepReport,
        what: str,
    ) -> None:
        apply(state, record_cancel(state, e.ho, line, now, rt.policy), Overlay())
        self._count_expired(rt, o)
        report.handled.append(Handled(rt.name, e.conversation, e.ho, what, line))
        log.info(
            f"handoff {what}: {o.deadline.describe()}",
            extra={"route": rt.name, "conversation": e.conversation, "handoff": e.ho, "why": o.why},
        )

    # ------------------------------------------------------------------------------------------------ alerts

    async def _publish_alert(
        self,
        rt: SweepRoute,
        conversation: str,
        state: ConversationState,
        o: Overdue,
        problems: Sequence[Problem],
        now: float,
        action: str,
        line: str | None = None,
    ) -> None:
        if not problems and action != "would-cancel":
            return
        await self.publisher.publish([self._alert_record(rt, conversation, state, o, problems, now, action, line)])
        self._count_problems(rt, problems)

    def _alert_record(
        self,
        rt: SweepRoute,
        conversation: str,
        state: ConversationState,
        o: Overdue,
        problems: Sequence[Problem],
        now: float,
        action: str,
        line: str | None,
    ) -> OutRecord:
        doc = alert_document(rt, conversation, state, o, problems, now, action, line)
        headers: Headers = (
            (AUTHOR_HEADER, AUTHOR.encode()),
            (ALERT_HEADER, str(doc["alert"]).encode()),
            (CANCEL_HANDOFF_HEADER, o.ho.encode()),
            ("gk.conversation", conversation.encode("utf-8")),
            ("gk.version", __version__.encode()),
        )
        value = json_document(doc)
        return OutRecord(rt.alerts, conversation.encode("utf-8"), value, headers)

    # ------------------------------------------------------------------------------------------------ metrics

    def _gauge(self, route: str, count: int, oldest: float | None, now: float) -> None:
        if self.metrics is None:
            return
        self.metrics.open_handoffs.labels(route=route).set(count)
        self.metrics.oldest_open.labels(route=route).set(0.0 if oldest is None else max(0.0, now - oldest))

    def _count_expired(self, rt: SweepRoute, o: Overdue) -> None:
        if self.metrics is not None:
            self.metrics.expired.labels(route=rt.name, reason=o.deadline.kind.value).inc()

    def _count_problems(self, rt: SweepRoute, problems: Iterable[Problem]) -> None:
        if self.metrics is None:
            return
        for p in problems:
            if p.code in HANDOFF_PROBLEM_CODES:
                self.metrics.handoff_problems.labels(route=rt.name, code=p.code).inc()


def _kept_text(state: ConversationState, line_id: str) -> str | None:
    entry = state.lines.get(line_id)
    return None if entry is None else entry.text


def alert_document(
    rt: SweepRoute,
    conversation: str,
    state: ConversationState,
    o: Overdue,
    problems: Sequence[Problem],
    now: float,
    action: str,
    line: str | None,
) -> dict[str, Any]:
    """The sweeper's alert, JSON on the route's alerts topic::

        {"alert": "thread-orphaned", "author": "gatekeeper", "action": "cancelled", "route": "agents.pay",
         "conversation": "c-17", "handoff": "scheduler-1", "from": "scheduler", "to": "payer",
         "item": "inv:MD-2026-057", "deadline": {"kind": "exp", "value": "20261001T1000Z", "at": "..."},
         "cancel": {"id": "scheduler-900000001", "why": "EXPIRED", "line": "RW1 CX ..."},
         "lines": {"handoff": "RW1 HO scheduler-1 ... acct=****2938 ...", "readback": "...", "cleared_by": null,
                   "closes": [], "cancels": ["scheduler-900000001"]},
         "problems": [{"code": "thread-orphaned", ...}], "at": "...", "dry_run": false, "version": "0.1.0"}

    ``alert`` is ``thread-orphaned`` or ``cleared-not-done`` (``would-cancel`` in dry-run at a readback deadline);
    ``action`` is ``cancelled``, ``alerted`` (no CX: cancelled already, or cleared) or ``would-cancel`` (dry-run).
    Lines and problems are masked (``gatekeeper.masking``)."""
    entry = state.handoffs.get(o.ho)
    view = state.tracker.handoff(o.ho)
    ho_line = state.lines.get(o.ho)
    text = ho_line.text if ho_line is not None and ho_line.text else ""
    masker = masker_for(text, problems, rt.sensitive)
    rb_id = None if entry is None else (entry.cleared_by or entry.passed_rb)
    rb_line = state.lines.get(rb_id) if rb_id else None
    cx = None
    if line is not None:
        cx = {"id": line.split(" ", 3)[2], "why": o.why, "line": masker.text(line)}
    d = o.deadline
    return {
        "alert": problems[0].code if problems else action,
        "author": AUTHOR,
        "action": action,
        "route": rt.name,
        "conversation": conversation,
        "handoff": o.ho,
        "from": None if view is None else view.sender,
        "to": None if view is None else view.receiver,
        "item": None if view is None else view.item,
        "deadline": {"kind": d.kind.value, "value": d.value, "at": iso(d.at) if d.at != float("inf") else None},
        "cancel": cx,
        "lines": {
            "handoff": masker.text(text) if text else None,
            "readback": masker.text(rb_line.text) if rb_line is not None and rb_line.text else None,
            "cleared_by": None if entry is None else entry.cleared_by,
            "closes": [] if view is None else [f"{t} {i}" for t, i in view.closes],
            "cancels": [] if view is None else list(view.cancels),
        },
        "problems": [masker.problem(p).to_dict() for p in problems],
        "at": iso(now),
        "dry_run": rt.dry_run,
        "version": __version__,
    }


def question_alert_document(
    rt: SweepRoute,
    conversation: str,
    state: ConversationState,
    q: QuestionDeadline,
    problems: Sequence[Problem],
    now: float,
) -> dict[str, Any]:
    """The sweeper's alert for a question (``AQ``) still unanswered past its ``by=``, JSON on the route's alerts
    topic::

        {"alert": "unanswered-question", "author": "gatekeeper", "action": "alerted", "route": "agents.pay",
         "conversation": "c-17", "question": "payer-8", "from": "payer", "to": "scheduler", "re": "scheduler-1",
         "item": null, "by": "20261005", "deadline": {"kind": "by", "value": "20261005", "at": "..."},
         "line": "RW1 AQ payer-8 ...", "problems": [{"code": "unanswered-question", ...}], "at": "...",
         "dry_run": false, "version": "0.1.0"}

    The line and the problems are masked (``gatekeeper.masking``)."""
    entry = state.lines.get(q.aq)
    text = entry.text if entry is not None and entry.text else ""
    msg = parse_line(text).message if text else None
    masker = masker_for(text, problems, rt.sensitive)
    return {
        "alert": UNANSWERED,
        "author": AUTHOR,
        "action": "alerted",
        "route": rt.name,
        "conversation": conversation,
        "question": q.aq,
        "from": None if msg is None else msg.from_,
        "to": None if msg is None else msg.to,
        "re": None if msg is None else msg.re,
        "item": None if msg is None else msg.item,
        "by": q.value,
        "deadline": {"kind": "by", "value": q.value, "at": iso(q.at) if q.at != float("inf") else None},
        "line": masker.text(text) if text else None,
        "problems": [masker.problem(p).to_dict() for p in problems],
        "at": iso(now),
        "dry_run": rt.dry_run,
        "version": __version__,
    }


# ------------------------------------------------------------------------------------------------ Kafka


class KafkaPublisher:
    """The daemon's ``Publisher``: the worker's outcome sender for the records (``OutcomeSender.publish``, its
    idempotent producer), and a consumer without a group to read a partition's end and search it."""

    def __init__(self, kafka: Any, sender: OutcomeSender) -> None:
        self.kafka = kafka
        self._sender = sender
        self._consumer: Any = None
        self._timeout = kafka.request_timeout_ms / 1000

    async def _scanner(self) -> Any:
        if self._consumer is None:
            from aiokafka import AIOKafkaConsumer

            from gatekeeper.consumers.kafka import client_kwargs

            kw = client_kwargs(self.kafka)
            kw.update(
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                isolation_level="read_committed" if self.kafka.transactional else "read_uncommitted",
            )
            kw["client_id"] = f"{self.kafka.client_id}-sweeper"
            consumer = AIOKafkaConsumer(**kw)
            await asyncio.wait_for(consumer.start(), self._timeout)
            self._consumer = consumer
        return self._consumer

    async def partition_for(self, topic: str, key: bytes) -> int:
        from gatekeeper.consumers.sending import partition_of  # the worker's package imports this module

        producer = await self._sender.producer()
        parts = await asyncio.wait_for(producer.partitions_for(topic), self._timeout)
        return partition_of(key, tuple(sorted(parts)))

    async def end_offset(self, topic: str, partition: int) -> int:
        from aiokafka import TopicPartition

        consumer = await self._scanner()
        tp = TopicPartition(topic, partition)
        ends = await asyncio.wait_for(consumer.end_offsets([tp]), self._timeout)
        return int(ends[tp])

    async def publish(self, records: Sequence[OutRecord]) -> list[int]:
        return await self._sender.publish(records)

    async def find(self, topic: str, partition: int, start: int, key: bytes, value: bytes) -> int | None:
        from aiokafka import TopicPartition

        consumer = await self._scanner()
        tp = TopicPartition(topic, partition)
        end = int((await asyncio.wait_for(consumer.end_offsets([tp]), self._timeout))[tp])
        if start >= end:
            return None
        consumer.assign([tp])
        consumer.seek(tp, start)
        deadline = time.monotonic() + max(self._timeout, 10.0)
        while True:
            batch = await consumer.getmany(tp, timeout_ms=500, max_records=1000)
            for rec in batch.get(tp, ()):
                if rec.key == key and rec.value == value:
                    return int(rec.offset)
            if await consumer.position(tp) >= end:
                return None
            if time.monotonic() > deadline:
                raise TimeoutError(f"searching {topic}[{partition}] from {start} to {end} did not finish in time")

    async def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(consumer.stop(), 10.0)


__all__ = [
    "ALERT_HEADER",
    "AUTHOR",
    "AUTHOR_HEADER",
    "CANCEL_HANDOFF_HEADER",
    "CANCEL_WHY_HEADER",
    "QUESTION_HEADER",
    "Handled",
    "KafkaPublisher",
    "OutRecord",
    "Publisher",
    "SweepReport",
    "SweepRoute",
    "Sweeper",
    "alert_document",
    "cancel_id",
    "question_alert_document",
]
