"""Accounting for a finished batch: every line decided is counted once (verdict, reason, latency, alerts, the
thread audit's problems, internal errors, forced holds), every acknowledged record by kind (and every refusal notice
by its line's reason), and every dead letter or alert is logged with its line masked. What the dead-letter breaker
needs is returned to the worker. The counters are added to once per batch (``Tally``), and so are the lines'
latencies (``metrics.BatchHistogram``).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import compress, groupby
from operator import attrgetter
from typing import Any

from gatekeeper.consumers.deciding import Batch, RouteRuntime
from gatekeeper.consumers.holds import Pending
from gatekeeper.consumers.outcomes import OutcomeKind
from gatekeeper.masking import mask_line
from gatekeeper.metrics import HANDOFF_PROBLEM_CODES, Metrics
from gatekeeper.policy import Decision
from gatekeeper.policy.model import ALERT, DEAD_LETTER, FORWARD, INTERNAL_ERROR
from rwcore import _native

log = logging.getLogger("gatekeeper.consumers.loop")  # the worker's logger: operators filter on it


class Children:
    """Metric children kept by label values: ``labels()`` costs a lock and a lookup per call, and a batch counts
    every line. Label values come from closed sets, so the cache stays small."""

    def __init__(self) -> None:
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def __call__(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found


class Tally:
    """A batch's counts, kept in a plain dict by (counter, label values) and added to each counter child once, by
    ``flush`` (the open issue's "per-batch counts"): a child's ``inc()`` takes a lock, and counting line by line took
    it several times a line for the few distinct children a batch touches. Only children counted at least once are
    touched, so no zero series appears that line-by-line counting would not have made."""

    def __init__(self) -> None:
        self._counts: dict[tuple[Any, tuple[str, ...]], int] = {}

    def add(self, metric: Any, *labels: str) -> None:
        key = (metric, labels)
        self._counts[key] = self._counts.get(key, 0) + 1

    def add_n(self, metric: Any, n: int, *labels: str) -> None:
        key = (metric, labels)
        self._counts[key] = self._counts.get(key, 0) + n

    def flush(self, child: Children) -> None:
        """Add every count to its child, once, and start again from nothing."""
        for (metric, labels), n in self._counts.items():
            child(metric, *labels).inc(n)
        self._counts.clear()


@dataclass(slots=True)
class _RouteCount:
    """What a batch counts of one route's lines, read and kept once a batch: its runtime, whether it is a dry run,
    and what the breaker is told (the lines decided now, the reasons of those dead-lettered)."""

    rt: RouteRuntime
    dry: bool
    told: int = 0
    reasons: list[str] = field(default_factory=list)


_ROUTE, _KIND, _ACKED = attrgetter("route"), attrgetter("outcome.kind"), attrgetter("acked")


def account(
    b: Batch, routes: Mapping[str, RouteRuntime], metrics: Metrics, child: Children, now: float
) -> dict[str, tuple[int, list[str]]]:
    """Count and log the batch. Returns, per route, the lines decided now (not repeats) and the reasons of those
    dead-lettered (the breaker's window). The counters are tallied first and added to once per batch."""
    m = metrics
    count = Tally()
    per_route: dict[str, _RouteCount] = {}
    # the two counts every line and record adds to, kept by label values here and tallied once (a call each cost
    # more than the rest of its line's counting)
    lines: Counter[tuple[str, str, str]] = Counter()
    acked: Counter[tuple[str, OutcomeKind]] = Counter()
    seconds: dict[str, list[float]] = {}

    def route_count(name: str) -> _RouteCount:
        r = per_route.get(name)
        if r is None:
            rt = routes[name]
            r = per_route[name] = _RouteCount(rt, rt.targets.dry_run)
        return r

    try:
        sent = list(compress(b.sends or (), map(_ACKED, b.sends or ())))
        for route, run in groupby(sent, _ROUTE):  # a run of one route's records: their kinds counted in C
            for kind, n in Counter(map(_KIND, run)).items():
                acked[route, kind] += n
        if any(kind is OutcomeKind.NOTICE for _, kind in acked):  # a dry-run route's are counted as they are built
            for s in sent:
                if s.outcome.kind is OutcomeKind.NOTICE:
                    reason = (s.outcome.header("gk.notice.reason") or b"none").decode("ascii", "replace")
                    count.add(m.refusal_notices, s.route, reason)
        done = b.done
        seconds, plain, others = _native.count_done(done, now, FORWARD)  # most lines, counted natively
        for (name, typ), n in plain.items():
            route_count(name).told += n
            lines[name, typ, FORWARD] += n
        for i in others:  # the lines with something more to count, one by one
            p, d = done[i]
            name = p.route
            r = route_count(name)
            msg = d.message
            verdict = d.verdict
            dead = verdict is DEAD_LETTER
            # the members themselves as label values: a StrEnum is its value (``.value`` is a Python-level call)
            lines[name, msg.type if msg is not None else "none", FORWARD if dead and r.dry else verdict] += 1
            reason = d.reason if d.reason is not None else "none"
            alerts = d.raise_alert or verdict is ALERT  # ``Decision.alerts``, without its call a line
            if d.repeated:
                count.add(m.repeated, name)
            if dead and r.dry:
                count.add(m.would_dead_letter, name, reason)
            elif dead:
                count.add(m.dead_letters, name, reason)
            if alerts:
                count.add(m.alerts, name, reason)
            if not d.repeated:
                for pr in (*d.problems, *d.notes):
                    if pr.code in HANDOFF_PROBLEM_CODES:
                        count.add(m.handoff_problems, name, pr.code)  # labels: route, code
                if d.reason is INTERNAL_ERROR:
                    count.add(m.internal_errors, name, "decide")  # labels: route, stage
                r.told += 1
                if dead:
                    r.reasons.append(str(reason))  # a plain str: the breaker keeps and reports them
            if p.forced is not None:
                count.add(m.holds_forced, name, p.forced)  # labels: route, bound
            if dead or alerts:
                log_decision(p, d, r.rt, r.dry)
    finally:  # what was counted before a line that raised is added all the same, as when each line added its own
        for (route, kind), n in acked.items():
            count.add_n(m.outcomes, n, route, kind)
        for labels, n in lines.items():
            count.add_n(m.lines, n, *labels)
        count.flush(child)
        for name, observed in seconds.items():  # none below zero: a clock set back meanwhile
            m.line_seconds.observe_all(name, observed)
    return {name: (r.told, r.reasons) for name, r in per_route.items() if r.told}


def log_decision(p: Pending, d: Decision, rt: RouteRuntime, dry: bool) -> None:
    level = logging.WARNING if d.alerts else logging.INFO
    what = "alert" if d.alerts and d.verdict is not DEAD_LETTER else "dead-letter"
    if dry and d.verdict is DEAD_LETTER:
        what = "would dead-letter (dry-run)"
    log.log(
        level,
        f"line {what}",
        extra={
            "route": p.route,
            "reason": d.reason.value if d.reason is not None else None,
            "conversation": p.conversation,
            "id": d.message.id if d.message is not None else None,
            "partition": p.source.partition,
            "offset": p.source.offset,
            "repeated": d.repeated,
            "line": mask_line(p.source.value[:512], rt.sensitive),
            "problems": [pr.code for pr in d.problems],
        },
    )


__all__ = ["Children", "Tally", "account", "log_decision"]
