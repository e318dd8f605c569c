"""Deciding a batch: per route, the ``Processor`` decides the lines in order (one store load, one save), then the
decisions become the records to produce (a route's lines in one native call, ``outcomes.build_all``). A route's
records are built while Redis writes its decisions (``Prebuilt``, the processor's ``meanwhile``): they are pure, and
kept only when that save is the one that returned (a save that conflicts decides again, and builds again); a dry-run
route, which counts the notices it would send as it builds them, builds once, after its save.

A batch is decided once per route, even when its sending is retried: ``Batch.decided_routes`` remembers which
routes are done, and ``Batch.sends`` is built once (a retried batch gets the same verdicts and the same records).
A held line (a reply whose handoff is not known yet) produces nothing now: it goes back to the hold buffer.
A line whose records cannot be built (a bug in ``outcomes.build_all``: the route's lines are then built again one
by one) goes to the dead-letter topic bare, with ``internal-error``: it is never forwarded.

A dead-lettered line whose sender is known gets a refusal notice (``gatekeeper.notices``) among its records, on a
route with ``refusal_notices`` (the default); on a dry-run route the notice is only counted. The sender is known
from the line and, on a route with ``sender_auth``, from the signature verified as the batch was decided
(``Batch.proofs``). A notice that cannot be built (a bug) is logged and counted, and the line's own records are
produced without it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from gatekeeper.approvals import ApproverRing
from gatekeeper.auth import KeyRing
from gatekeeper.config import Route, Settings
from gatekeeper.consumers.breaker import DeadLetterBreaker
from gatekeeper.consumers.holds import TP, Pending
from gatekeeper.consumers.outcomes import DecidedLine, Outcome, Targets, bare_dead_letter, build_all
from gatekeeper.consumers.sending import Send
from gatekeeper.metrics import Metrics
from gatekeeper.notices import Notice, refusal_notice
from gatekeeper.policy import Decision, Mode, Record, RoutePolicy, SenderProof
from gatekeeper.policy.decide import error_text
from gatekeeper.policy.model import DEAD_LETTER, HOLD
from gatekeeper.processor import QUEUED, Line, Processor
from gatekeeper.store import Store
from gatekeeper.verdicts import signer_for
from rwcore import Problem, get_profile

log = logging.getLogger(__name__)


def route_policy(route: Route, settings: Settings) -> RoutePolicy:
    """What the decision needs to know about a configured route."""
    return RoutePolicy(
        record_check=record_check(settings),
        name=route.input,
        profile=get_profile(route.profile, extra_dirs=settings.all_profile_dirs()),
        mode=Mode(route.mode),
        senders=None if route.senders is None else frozenset(route.senders),
        hold_seconds=route.hold_seconds,
        max_line_bytes=route.max_line_bytes,
        readback_timeout_seconds=route.readback_timeout_seconds,
        sender_auth=route.sender_auth,
        refuse_unverified_comprehension=route.refuse_unverified_comprehension,
        state_ttl_seconds=float(min(settings.redis.retention_seconds, settings.redis.open_retention_seconds)),
    )


def record_check(settings: Settings) -> Callable[[Record], Problem | None] | None:
    """How a record is proven (``gatekeeper.approvals``): None when no approver is configured and signatures are not
    required (every record is honoured)."""
    records = settings.records
    if not (records.require_signed or records.approvers or records.approvers_file is not None):
        return None
    return ApproverRing.from_settings(records).check


@dataclass(slots=True)
class RouteRuntime:
    """A configured route with what the worker keeps for it."""

    config: Route
    policy: RoutePolicy
    processor: Processor
    targets: Targets
    sensitive: frozenset[str]
    breaker: DeadLetterBreaker
    keys: KeyRing | None = None  # the agents' public keys, on a route with sender_auth
    signature_header: str = "rw-sig"

    def sender(self, p: Pending) -> SenderProof | None:
        """Who signed the pending line's record (``gatekeeper.auth``); None on a route without sender_auth. A record
        with no conversation is not verified: it is dead-lettered no-conversation first."""
        if self.keys is None or p.conversation is None:
            return None
        try:
            return self.keys.check(
                p.source.headers, self.signature_header, self.policy.name, p.conversation, p.source.value
            )
        except Exception as exc:  # verifying never raises on what a record carries; were it to, fail closed
            log.error("verifying a record's signature raised: refused sender-auth", exc_info=exc)
            return SenderProof(
                failure="sender-auth-unverified", detail=f"verifying the signature raised {error_text(exc)}"
            )

    @classmethod
    def of(cls, route: Route, settings: Settings, store: Store) -> RouteRuntime:
        policy = route_policy(route, settings)
        return cls(
            config=route,
            policy=policy,
            processor=Processor(store, policy),
            targets=Targets(
                route.output,
                route.dead_letter,
                route.alerts,
                route.input,
                route.mode == "dry-run",
                signer=signer_for(settings.signing),
            ),
            sensitive=frozenset(policy.profile.sensitive),
            breaker=DeadLetterBreaker(route.dead_letter_breaker),
            keys=KeyRing.from_settings(settings.sender_auth) if route.sender_auth else None,
            signature_header=settings.sender_auth.header,
        )


_TOPIC, _PARTITION = attrgetter("source.topic"), attrgetter("source.partition")


@dataclass(slots=True, eq=False)
class Batch:
    """The lines in flight: decided (``decisions``), their records (``sends``), the lines held again (``held``,
    with the id each awaits) and the lines done (``done``)."""

    lines: list[Pending]
    decisions: dict[int, Decision] = field(default_factory=dict)
    #: who signed each decided line, on a route with sender_auth (``RouteRuntime.sender``): a notice's sender
    proofs: dict[int, SenderProof] = field(default_factory=dict)
    decided_routes: set[str] = field(default_factory=set)
    #: the records of decided lines built while their route's save was on its way (``decide``), by line place
    built: dict[int, list[Outcome]] = field(default_factory=dict)
    sends: list[Send] | None = None
    held: list[tuple[Pending, str | None]] = field(default_factory=list)
    done: list[tuple[Pending, Decision]] = field(default_factory=list)
    attempts: int = 0
    generation: int = 0  # exactly-once: the worker's open-generation when its lines were read (see the loop)
    holds_taken: bool = False  # its held lines are in the hold buffer (once: a batch sent again keeps them there)

    def partitions(self) -> set[TP]:
        """The input partitions its lines were read from."""
        return set(zip(map(_TOPIC, self.lines), map(_PARTITION, self.lines), strict=True))

    def only(self, partitions: Collection[TP]) -> Batch:
        """The part of the batch read from these input partitions, as far as it got (its decisions, records and
        holds): in exactly-once mode each partition's transaction ends on its own."""
        keep = [i for i, p in enumerate(self.lines) if p.tp in partitions]
        part = Batch(
            [self.lines[i] for i in keep],
            decided_routes=set(self.decided_routes),
            attempts=self.attempts,
            generation=self.generation,
            holds_taken=self.holds_taken,
        )
        part.decisions = {n: self.decisions[i] for n, i in enumerate(keep) if i in self.decisions}
        part.proofs = {n: self.proofs[i] for n, i in enumerate(keep) if i in self.proofs}
        part.built = {n: self.built[i] for n, i in enumerate(keep) if i in self.built}
        if self.sends is not None:
            part.sends = [s for s in self.sends if (s.outcome.source.topic, s.outcome.source.partition) in partitions]
        part.held = [(p, awaits) for p, awaits in self.held if p.tp in partitions]
        part.done = [(p, d) for p, d in self.done if p.tp in partitions]
        return part


def first_seen(p: Pending, hold_seconds: float, now: float) -> float:
    """When the line was first consumed, for its hold window; a line a hold bound forced out of the buffer is
    decided as its window would have ended (fail closed)."""
    if p.forced is None:
        return p.first_seen
    return min(p.first_seen, now - hold_seconds - 1.0)


@dataclass(slots=True, eq=False)
class Prebuilt:
    """A route's records built while its save is on its way (``Processor.process``'s ``meanwhile``): the decisions
    it was last given, and their records by line place."""

    pending: Sequence[Pending]
    idxs: list[int]
    proofs: list[SenderProof | None]
    rt: RouteRuntime
    now: float
    metrics: Metrics
    decisions: list[Decision] | None = None
    outcomes: dict[int, list[Outcome]] = field(default_factory=dict)

    def __call__(self, decisions: list[Decision]) -> None:
        self.decisions = decisions
        self.outcomes = route_outcomes(self.pending, self.idxs, decisions, self.proofs, self.rt, self.now, self.metrics)


async def decide(b: Batch, routes: Mapping[str, RouteRuntime], now: float, metrics: Metrics) -> None:
    """Decide the routes of the batch not decided yet. Raises ``StoreError`` (the batch is retried later)."""
    by_route: dict[str, list[int]] = {}
    for i, p in enumerate(b.lines):
        by_route.setdefault(p.route, []).append(i)
    for name, idxs in by_route.items():
        if name in b.decided_routes:
            continue
        rt = routes[name]
        hold = rt.config.hold_seconds
        pending = [b.lines[i] for i in idxs]
        proofs: list[SenderProof | None] = [None] * len(idxs) if rt.keys is None else [rt.sender(p) for p in pending]
        lines = [
            # Line's fields in order: conversation, value, first_seen, replay, partition, sender
            Line(
                p.conversation,
                p.source.value,
                p.first_seen if p.forced is None else first_seen(p, hold, now),
                False,
                p.source.partition,
                proof,
            )
            for p, proof in zip(pending, proofs, strict=True)
        ]
        prebuilt = Prebuilt(b.lines, idxs, proofs, rt, now, metrics)
        started = time.perf_counter()
        # the route's records are built while Redis saves its decisions, but on a dry-run route (which counts the
        # notices it would send as it builds them: built once, after the save)
        decisions = await rt.processor.process(lines, now, None if rt.targets.dry_run else prebuilt)
        metrics.check_seconds.labels(route=name).observe(time.perf_counter() - started)
        metrics.batch_size.labels(route=name).observe(len(lines))
        for i, d, proof in zip(idxs, decisions, proofs, strict=True):
            b.decisions[i] = d
            if proof is not None:
                b.proofs[i] = proof
        if prebuilt.decisions is decisions:
            b.built.update(prebuilt.outcomes)
        b.decided_routes.add(name)


def notice_for(p: Pending, d: Decision, rt: RouteRuntime, proof: SenderProof | None, metrics: Metrics) -> Notice | None:
    """The refusal notice of a dead-lettered line to write (``gatekeeper.notices``), or None: none is due, the route
    turned them off, or it is a dry-run route (which only counts it). A notice that cannot be built is logged and
    counted (``internal_errors{stage="outcome"}``): the line's own records go without it."""
    if d.verdict is not DEAD_LETTER or not rt.config.refusal_notices:
        return None
    try:
        notice = refusal_notice(d, p.source.value, rt.policy, proof)
    except Exception as exc:  # a bug in building the notice: the dead letter still goes
        log.error(
            "building a refusal notice raised: the line is dead-lettered without one",
            exc_info=exc,
            extra={"route": p.route, "partition": p.source.partition, "offset": p.source.offset},
        )
        metrics.internal_errors.labels(route=p.route, stage="outcome").inc()
        return None
    if notice is not None and rt.targets.dry_run:
        metrics.refusal_notices.labels(route=p.route, reason=notice.reason).inc()
        return None
    return notice


def build_sends(
    b: Batch,
    routes: Mapping[str, RouteRuntime],
    now: float,
    metrics: Metrics,
    fit: Callable[[Outcome], Outcome | None],
) -> None:
    """The records of the decided batch (``b.sends``), each fitted to its topic, in the order of its lines; held
    lines to ``b.held``."""
    built = outcomes(b, routes, now, metrics)
    sends: list[Send] = []
    for i, p in enumerate(b.lines):
        d = b.decisions[i]
        if d.verdict is HOLD:
            queued = any(pr.code == QUEUED for pr in d.problems)
            awaits = None if queued or d.message is None else d.message.re
            b.held.append((p, awaits))
            if not p.held and not queued:
                metrics.held.labels(route=p.route).inc()
            continue
        for o in built[i]:
            fitted = fit(o)
            if fitted is not None:
                sends.append(Send(fitted, p.route))
        b.done.append((p, d))
    b.sends = sends


def outcomes(b: Batch, routes: Mapping[str, RouteRuntime], now: float, metrics: Metrics) -> dict[int, list[Outcome]]:
    """The outcomes of each decided line of the batch (by its place): those built while its route's save was on its
    way (``Batch.built``), the others now, a route's lines in one call (``route_outcomes``)."""
    by_route: dict[str, list[int]] = {}
    for i, p in enumerate(b.lines):
        if i not in b.built:
            by_route.setdefault(p.route, []).append(i)
    built = dict(b.built)
    for name, idxs in by_route.items():
        decisions = [b.decisions[i] for i in idxs]
        proofs = [b.proofs.get(i) for i in idxs]
        built.update(route_outcomes(b.lines, idxs, decisions, proofs, routes[name], now, metrics))
    return built


def route_outcomes(
    pending: Sequence[Pending],
    idxs: Sequence[int],
    decisions: Sequence[Decision],
    proofs: Sequence[SenderProof | None],
    rt: RouteRuntime,
    now: float,
    metrics: Metrics,
) -> dict[int, list[Outcome]]:
    """The outcomes of a route's decided lines (``idxs``: their places in ``pending``, each with its decision and
    proof; a held line has none), built in one call (``outcomes.build_all``). When that call raises (a bug in
    building the records), the lines are built again one by one: a line whose building raises is dead-lettered
    bare, ``internal-error``, never forwarded."""
    places: list[int] = []
    lines: list[DecidedLine] = []
    for i, d, proof in zip(idxs, decisions, proofs, strict=True):
        verdict = d.verdict
        if verdict is HOLD:
            continue
        p = pending[i]
        places.append(i)
        lines.append(
            (d, p.source, p.conversation, notice_for(p, d, rt, proof, metrics) if verdict is DEAD_LETTER else None)
        )
    if not lines:
        return {}
    try:
        made = build_all(lines, rt.targets, sensitive=rt.sensitive, now=now)
    except Exception:  # a bug in building one line's records: each line again, under its own guard
        made = [_guarded(pending[i], line, rt, now, metrics) for i, line in zip(places, lines, strict=True)]
    return dict(zip(places, made, strict=True))


def _guarded(p: Pending, line: DecidedLine, rt: RouteRuntime, now: float, metrics: Metrics) -> list[Outcome]:
    try:
        return build_all([line], rt.targets, sensitive=rt.sensitive, now=now)[0]
    except Exception as exc:  # a bug in building the records: the line is held back, never waved through
        log.error(
            "building a line's outcome raised: dead-lettered internal-error",
            exc_info=exc,
            extra={"route": p.route, "partition": p.source.partition, "offset": p.source.offset},
        )
        metrics.internal_errors.labels(route=p.route, stage="outcome").inc()
        return [bare_dead_letter(p.source, rt.targets, error_text(exc), now)]


__all__ = [
    "Batch",
    "RouteRuntime",
    "build_sends",
    "decide",
    "first_seen",
    "notice_for",
    "outcomes",
    "route_outcomes",
    "route_policy",
]
