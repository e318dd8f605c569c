"""Prometheus metrics of the gatekeeper, on a registry of their own (``/metrics`` serves only these).

Every name has the ``gatekeeper_`` prefix; counters end in ``_total``, durations in ``_seconds``. Labels come from
closed sets only: route (the configured input topics), message type (the profile's types, or ``none`` for a line
that did not parse), verdict, reason (``policy.Reason``), outcome kind, Kafka operation, topic and partition number
of an assigned partition. Never a conversation, an id, an item or a value.

=============================================  =========  ==========================================================
metric                                         type       labels / meaning
=============================================  =========  ==========================================================
``gatekeeper_lines_total``                     counter    route, type, verdict: lines decided (held lines count once,
                                                          when decided)
``gatekeeper_dead_letters_total``              counter    route, reason: lines dead-lettered
``gatekeeper_alerts_total``                    counter    route, reason: alerts raised
``gatekeeper_dry_run_would_dead_letter_total`` counter    route, reason: dry-run lines enforce mode would dead-letter
``gatekeeper_repeated_total``                  counter    route: lines answered from their stored first decision
``gatekeeper_held_total``                      counter    route: lines held for the first time (reply before handoff)
``gatekeeper_held_lines``                      gauge      route: lines in the hold buffer now (held and queued)
``gatekeeper_refusal_notices_total``           counter    route, reason: refusal notices written to the senders of
                                                          dead-lettered lines (``gatekeeper.notices``; a redelivered
                                                          line's again); on a dry-run route, those it would write
``gatekeeper_outcomes_total``                  counter    route, kind (output, dead-letter, alert, notice): records
                                                          produced
``gatekeeper_outcomes_trimmed_total``          counter    route, kind: outcomes trimmed to fit their topic
``gatekeeper_check_seconds``                   histogram  route: deciding one batch (one Redis load + save)
``gatekeeper_line_seconds``                    histogram  route: one line, from consumed to its outcome acknowledged
``gatekeeper_batch_size``                      histogram  route: lines per decided batch
``gatekeeper_redis_errors_total``              counter    store operations that failed (Redis unavailable)
``gatekeeper_fenced_writes_total``             counter    state writes refused because a newer owner of the partition
                                                          wrote (this instance lost it in a rebalance)
``gatekeeper_redis_round_trips_total``         counter    operation (load, claim, save): the store's round trips to
                                                          Redis on a batch's path (a pipeline is one)
``gatekeeper_kafka_errors_total``              counter    operation (connect, fetch, produce, commit, transaction)
``gatekeeper_consumer_lag``                    gauge      topic, partition: records not yet consumed (high water
                                                          mark minus position)
``gatekeeper_committed_offset``                gauge      topic, partition: the last committed offset
``gatekeeper_assigned_partitions``             gauge      partitions assigned to this instance
``gatekeeper_ready``                           gauge      1 when Kafka and Redis answer and the group is joined
``gatekeeper_redis_data_lost``                 gauge      1 while Redis is not the one this instance started on
                                                          (its generation marker is missing or different)
``gatekeeper_redis_data_losses_total``         counter    times this instance found that Redis lost its data
``gatekeeper_probe_last_success_timestamp_     gauge      service (redis, kafka): when the readiness probe last got
seconds``                                                 an answer (epoch seconds)
``gatekeeper_work_loop_stalled_seconds``       gauge      seconds since the work loop last turned (each batch, poll
                                                          or retry); ``/healthz`` fails past ``http.stall_seconds``
                                                          while partitions have lag
``gatekeeper_info``                            gauge      version: always 1
``gatekeeper_open_handoffs``                   gauge      route: open handoffs on the input partitions this instance
                                                          holds (sum over instances for the route's total)
``gatekeeper_oldest_open_handoff_seconds``     gauge      route: age of the oldest of them (max over instances)
``gatekeeper_handoffs_expired_total``          counter    route, reason (exp, due, readback): handoffs whose time
                                                          ran out while open (cancelled or alerted)
``gatekeeper_cancels_total``                   counter    route, why (EXPIRED, TIMEOUT): CX lines the gatekeeper
                                                          published on a sender's behalf
``gatekeeper_unanswered_questions_total``      counter    route: questions (AQ) still unanswered past their by=, each
                                                          alerted once (``unanswered-question``)
``gatekeeper_handoff_problems_total``          counter    route, code: the thread audit's problems (``thread-closed-
                                                          twice``, ``thread-done-after-cancel``, ``thread-cancel-
                                                          wrong-agent``, ``thread-cancel-no-handoff``,
                                                          ``thread-orphaned``, ``cleared-not-done``), the authority
                                                          table's refusals (``thread-*-wrong-agent``...,
                                                          ``acted-after-expiry``, ``done-without-readback``) and the
                                                          note ``comprehension-unverified``: ``HANDOFF_PROBLEM_CODES``
``gatekeeper_sweep_seconds``                   histogram  one sweep of the partitions this instance holds
``gatekeeper_internal_errors_total``           counter    route, stage (decide, outcome, sweep): a line or a
                                                          handoff whose handling raised (a bug; the line is
                                                          dead-lettered ``internal-error``, the handoff set aside)
``gatekeeper_holds_forced_total``              counter    route, bound (conversation, partition, instance): held
                                                          lines decided before their window ended because a bound
                                                          on held lines was reached (refused or alerted, fail closed)
``gatekeeper_hold_pressure``                   gauge      route: 1 while the route's held lines are at a bound
``gatekeeper_dead_letter_ratio``               gauge      route: the share of the route's lines dead-lettered over
                                                          the breaker's window
``gatekeeper_dead_letter_breaker_open``        gauge      route: 1 while the dead-letter breaker has tripped
``gatekeeper_dead_letter_breaker_trips_total`` counter    route: times the breaker tripped
``gatekeeper_api_requests_total``              counter    endpoint, status: HTTP requests answered (the endpoint is
                                                          the served path, ``/v1/check-rb``, ``/healthz``...; any
                                                          other path is ``other``)
``gatekeeper_api_request_seconds``             histogram  endpoint: from the request's arrival to its answer sent
``gatekeeper_api_gate_total``                  counter    outcome (forward, dead-letter, alert, hold, or the
                                                          refusal's code: unauthorized, forbidden, pending...):
                                                          ``POST /v1/gate`` answers
=============================================  =========  ==========================================================
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import threading
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from gatekeeper import __version__

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: The codes of ``gatekeeper_handoff_problems_total`` (a closed set): what ``check_thread`` calls a problem, and the
#: gatekeeper's ``cleared-not-done``.
HANDOFF_PROBLEM_CODES = frozenset(
    {
        "thread-closed-twice",
        "thread-done-after-cancel",
        "thread-cancel-wrong-agent",
        "thread-cancel-no-handoff",
        "thread-orphaned",
        "cleared-not-done",
        # who may say what (gatekeeper.policy.authority): lines refused or flagged for their sender's role
        "thread-reissue-wrong-agent",
        "thread-reissue-other-item",
        "thread-close-wrong-agent",
        "thread-done-wrong-agent",
        "thread-ack-wrong-agent",
        "thread-answer-wrong-agent",
        "thread-question-wrong-agent",
        "thread-question-answered",
        "acted-after-expiry",
        "done-without-readback",
        # a note, not a problem: a comprehension readback forwarded with nothing on record to check it against
        "comprehension-unverified",
    }
)
BATCH_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


class BatchHistogram(Collector):
    """A histogram by route observed a batch of values at a time (``observe_all``), exposed as prometheus_client's
    ``Histogram`` is (``_bucket``, ``_count``, ``_sum``; no ``_created``). Written here because prometheus_client's
    histogram takes one value a call (a Python call, a bucket search and two locks each) and the worker observes
    every line's latency: the batch's values are placed with ``bisect`` and added under one lock."""

    def __init__(self, name: str, documentation: str, buckets: Iterable[float], registry: CollectorRegistry) -> None:
        self.name, self._doc = name, documentation
        self.labelnames = ("route",)
        self._bounds = (*sorted(buckets), float("inf"))
        self._les = [floatToGoString(b) for b in self._bounds]  # type: ignore[no-untyped-call]  # untyped upstream
        self._series: dict[str, tuple[list[int], list[float]]] = {}  # route -> (count per bucket, [sum])
        self._lock = threading.Lock()  # collect() may run in another thread (a scrape)
        registry.register(self)

    def observe_all(self, route: str, values: Iterable[float]) -> None:
        """Observe each value (seconds) for ``route``; no value makes no series (as a histogram never observed).
        The values are sorted and each bound placed among them (Prometheus's ``le``: a value counts under the first
        bound it does not exceed), rather than each value among the bounds: no Python runs per value."""
        ordered = sorted(values)
        if not ordered:
            return
        place = bisect.bisect_right
        under = [place(ordered, b) for b in self._bounds]  # how many values each bound is at or above
        found = [under[0], *(hi - lo for lo, hi in itertools.pairwise(under))]
        total = sum(ordered)
        bounds = self._bounds
        with self._lock:
            counts, sums = self._series.setdefault(route, ([0] * len(bounds), [0.0]))
            for i, n in enumerate(found):
                if n:
                    counts[i] += n
            sums[0] += total

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self._doc, labels=list(self.labelnames))
        with self._lock:
            series = {route: (list(counts), sums[0]) for route, (counts, sums) in self._series.items()}
        for route, (counts, total) in series.items():  # in the order first observed, as prometheus_client
            cumulative = list(itertools.accumulate(counts))
            family.add_metric([route], list(zip(self._les, cumulative, strict=True)), total)
        yield family


class Metrics:
    """The gatekeeper's metrics, registered on ``registry`` (a new one by default: two gatekeepers in one process,
    as in tests, never share a metric)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.lines = Counter("gatekeeper_lines", "Lines decided.", ["route", "type", "verdict"], registry=r)
        self.dead_letters = Counter("gatekeeper_dead_letters", "Lines dead-lettered.", ["route", "reason"], registry=r)
        self.alerts = Counter("gatekeeper_alerts", "Alerts raised.", ["route", "reason"], registry=r)
        self.would_dead_letter = Counter(
            "gatekeeper_dry_run_would_dead_letter",
            "Dry-run lines that enforce mode would dead-letter.",
            ["route", "reason"],
            registry=r,
        )
        self.refusal_notices = Counter(
            "gatekeeper_refusal_notices",
            "Refusal notices written to the senders of dead-lettered lines (dry-run: that would be written).",
            ["route", "reason"],
            registry=r,
        )
        self.repeated = Counter(
            "gatekeeper_repeated", "Lines answered from their stored first decision.", ["route"], registry=r
        )
        self.held = Counter("gatekeeper_held", "Lines held for the first time.", ["route"], registry=r)
        self.held_lines = Gauge("gatekeeper_held_lines", "Lines in the hold buffer.", ["route"], registry=r)
        self.outcomes = Counter("gatekeeper_outcomes", "Outcome records produced.", ["route", "kind"], registry=r)
        self.trimmed = Counter(
            "gatekeeper_outcomes_trimmed", "Outcomes trimmed to fit their topic.", ["route", "kind"], registry=r
        )
        self.check_seconds = Histogram(
            "gatekeeper_check_seconds", "Deciding one batch.", ["route"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.line_seconds = BatchHistogram(
            "gatekeeper_line_seconds", "One line from consumed to its outcome acknowledged.", LATENCY_BUCKETS, r
        )
        self.batch_size = Histogram(
            "gatekeeper_batch_size", "Lines per decided batch.", ["route"], buckets=BATCH_BUCKETS, registry=r
        )
        self.redis_errors = Counter("gatekeeper_redis_errors", "Store operations that failed.", registry=r)
        self.fenced = Counter(
            "gatekeeper_fenced_writes", "State writes refused: a newer owner of the partition wrote.", registry=r
        )
        self.redis_round_trips = Counter(
            "gatekeeper_redis_round_trips",
            "The store's round trips to Redis on a batch's path.",
            ["operation"],
            registry=r,
        )
        self.kafka_errors = Counter(
            "gatekeeper_kafka_errors", "Kafka operations that failed.", ["operation"], registry=r
        )
        self.lag = Gauge("gatekeeper_consumer_lag", "Records not yet consumed.", ["topic", "partition"], registry=r)
        self.committed = Gauge(
            "gatekeeper_committed_offset", "The last committed offset.", ["topic", "partition"], registry=r
        )
        self.assigned = Gauge("gatekeeper_assigned_partitions", "Partitions assigned.", registry=r)
        self.ready = Gauge("gatekeeper_ready", "1 when ready.", registry=r)
        self.redis_data_lost = Gauge(
            "gatekeeper_redis_data_lost", "1 while Redis is not the Redis this instance started on.", registry=r
        )
        self.redis_data_lost_total = Counter(
            "gatekeeper_redis_data_losses", "Times Redis was found to have lost its data.", registry=r
        )
        self.last_success = Gauge(
            "gatekeeper_probe_last_success_timestamp_seconds",
            "When the readiness probe last got an answer.",
            ["service"],
            registry=r,
        )
        self.stalled = Gauge(
            "gatekeeper_work_loop_stalled_seconds", "Seconds since the work loop last turned.", registry=r
        )
        self.info = Gauge("gatekeeper_info", "The gatekeeper's version.", ["version"], registry=r)
        self.info.labels(version=__version__).set(1)
        self.open_handoffs = Gauge(
            "gatekeeper_open_handoffs", "Open handoffs on the partitions this instance holds.", ["route"], registry=r
        )
        self.oldest_open = Gauge(
            "gatekeeper_oldest_open_handoff_seconds",
            "Age of the oldest open handoff on the partitions this instance holds.",
            ["route"],
            registry=r,
        )
        self.expired = Counter(
            "gatekeeper_handoffs_expired", "Handoffs whose time ran out while open.", ["route", "reason"], registry=r
        )
        self.cancels = Counter(
            "gatekeeper_cancels", "CX lines the gatekeeper published for a sender.", ["route", "why"], registry=r
        )
        self.unanswered_questions = Counter(
            "gatekeeper_unanswered_questions",
            "Questions still unanswered past their by= (alerted once).",
            ["route"],
            registry=r,
        )
        self.handoff_problems = Counter(
            "gatekeeper_handoff_problems", "The thread audit's problems.", ["route", "code"], registry=r
        )
        self.sweep_seconds = Histogram(
            "gatekeeper_sweep_seconds", "One sweep of the partitions held.", buckets=LATENCY_BUCKETS, registry=r
        )

        self.internal_errors = Counter(
            "gatekeeper_internal_errors", "Lines or handoffs whose handling raised.", ["route", "stage"], registry=r
        )
        self.holds_forced = Counter(
            "gatekeeper_holds_forced",
            "Held lines decided early because a bound on held lines was reached.",
            ["route", "bound"],
            registry=r,
        )
        self.hold_pressure = Gauge(
            "gatekeeper_hold_pressure", "1 while the route's held lines are at a bound.", ["route"], registry=r
        )
        self.dead_letter_ratio = Gauge(
            "gatekeeper_dead_letter_ratio",
            "Share of the route's lines dead-lettered over the breaker's window.",
            ["route"],
            registry=r,
        )
        self.breaker_open = Gauge(
            "gatekeeper_dead_letter_breaker_open", "1 while the dead-letter breaker has tripped.", ["route"], registry=r
        )
        self.breaker_trips = Counter(
            "gatekeeper_dead_letter_breaker_trips", "Times the dead-letter breaker tripped.", ["route"], registry=r
        )
        self.api_requests = Counter(
            "gatekeeper_api_requests", "HTTP requests answered.", ["endpoint", "status"], registry=r
        )
        self.api_seconds = Histogram(
            "gatekeeper_api_request_seconds",
            "HTTP requests, from arrival to answer sent.",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.api_gate = Counter("gatekeeper_api_gate", "POST /v1/gate answers.", ["outcome"], registry=r)

    def forget_partition(self, topic: str, partition: int) -> None:
        """A revoked partition's gauges go away (they would freeze at their last value otherwise)."""
        for gauge in (self.lag, self.committed):
            with contextlib.suppress(KeyError):
                gauge.remove(topic, str(partition))

    def exposition(self) -> tuple[bytes, str]:
        """The text exposition of every metric, and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def filter_families(text: bytes, prefix: bytes, *, keep: bool) -> bytes:
    """The text exposition's lines of the families whose names start with ``prefix`` (``keep``), or of all others:
    the daemon's ``/metrics`` joins the worker's families and those its HTTP process counts (``http_process``)."""
    out = []
    for line in text.splitlines(keepends=True):
        name = line.split(b" ", 3)[2] if line.startswith(b"# ") else line
        if name.startswith(prefix) == keep:
            out.append(line)
    return b"".join(out)


__all__ = ["HANDOFF_PROBLEM_CODES", "Metrics", "filter_families"]
