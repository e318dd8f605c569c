"""The worker: consume every route's input, decide in batches, produce the outcomes, then commit.

    gk = Gatekeeper(load_settings("gk.yaml"), install_signals=True)
    await gk.run()              # until SIGTERM/SIGINT, or gk.request_stop(), or the stop event is set

One consumer in the group ``kafka.group_id`` reads every route's input topic (manual commits, ``earliest``). Per
``getmany`` batch, per route, ``Processor.process`` decides the lines in order (one Redis load, one save); the
outcomes go out through an idempotent producer (``acks=all``), keyed by the original key; only when every produce of
the batch is acknowledged are the offsets committed (the next offset to read, per partition). Checkpoint order, as
quix-streams does it: flush the producer, then commit.

**Two batches overlap** (at-least-once): a batch's records are handed to the producer and the worker goes on to
decide the next batch (records already read) while their acknowledgements come. The last batch settles while the
next is decided (``_settle``, a task beside the deciding: failures sent again, then it is counted and committed, in
the time the deciding waits for Redis), and the next batch's records are sent only once it has, so a batch's records
never overtake the batch's before, and the commit never passes a line whose outcome is not
acknowledged (the unacknowledged batch's lines count as in flight). With nothing read ahead it settles at once. A
revocation and the stop settle it before committing; a revocation drops what of it could not be acknowledged (the
new owner reads those lines again). Exactly-once, a batch's transactions end before the next batch is decided.

**Nothing is lost.** A partition's committed offset never passes a record whose outcome is not acknowledged: not one
in flight, not one held (``holds.py``: a reply whose handoff is not known yet is held, the partition moves on, the
commit watermark stays at the held offset). Offsets are committed at most every ``kafka.commit_interval_ms`` (100 ms;
0: after every batch), when partitions are revoked (the in-flight batch finishes first), and before the consumer
stops.

**No line is fatal.** A line whose deciding raises is dead-lettered ``internal-error`` and alerted by the
``Processor`` (see ``gatekeeper.processor``), and counted here (``gatekeeper_internal_errors_total``); the partition
moves on. Only infrastructure errors pause it.

**A flood never stalls the rest.** Held replies are bounded per conversation, per input partition and per instance
(``settings.holds``, see ``holds.py``): past a bound the oldest holds are decided at once, as their window would have
ended; intake is never paused for holds. A route whose dead-letter share passes its breaker's ratio
(``routes[].dead_letter_breaker``, ``breaker.py``) raises a ``dead-letter-flood`` alert and, if configured, pauses
that route alone for a while (``floods.py``).

**Infrastructure trouble is not a bad line.** Redis unavailable (``StoreError``), the broker refusing or timing out a
produce or a commit: the partitions are paused, the same batch is retried with exponential backoff (capped), and
``/readyz`` says why it is not ready. No line is dead-lettered because a dependency failed. A retried batch gets the
same verdicts (the first decisions are stored before any outcome is produced).

**Redis that lost its data is not Redis down.** The store remembers the generation marker (``<prefix>:generation``)
it started on and reads it first in the pipeline of every load, claim, save and probe: missing or different,
``DataLost``. The batch is refused like a store error but the instance stays not ready ("redis lost its data"),
paused, deciding and forwarding nothing, with one ERROR, one ``redis-data-lost`` alert per route and
``gatekeeper_redis_data_lost``, until an operator runs ``gatekeeper redis accept-loss`` and restarts it. A start on
a Redis without a marker writes one, unless the consumer group has committed offsets while Redis keeps no owner
epoch of the input partitions: a loss while no gatekeeper ran (caught the same way). No owner epoch is taken before
that check, nor after a loss (the epochs are what tells a loss from a first start). The rule is
``generation.worked_before``: the commands that write state or produce outcomes (``records load``, ``replay``, the
gate's dry run) apply it too, and refuse while the marker is missing after a loss.

**An outcome too large for its topic** is the line's fault: what the gatekeeper added is trimmed (see
``outcomes.py``), before sending when the topic's ``max.message.bytes`` is known, and after a refusal otherwise.
The partition never blocks on it.

**Stopping** (SIGTERM, SIGINT, ``request_stop()``) has two stages: intake stops and the in-flight batch drains for up
to ``grace_seconds``; then it is cancelled. Either way the acknowledged offsets are committed before the consumer
stops, and the producer, the store and the HTTP server are closed. A second signal skips the grace period. Held lines
are not waited for: their offsets are not committed, so the next run consumes them again.

**The sweeper** (``gatekeeper.sweeper``, the handoff lifecycle) runs beside the worker as a background task: every
``sweeper.interval_seconds`` it sweeps the deadline indexes of the input partitions this instance holds, under the
batch lock (a batch and a sweep never interleave; a revocation waits for the sweep). It stops the same two-stage way:
no new sweep once stopping, the one in progress drains up to ``grace_seconds``, then is cancelled.

**Fenced writes.** On assignment the worker takes a new owner epoch for each partition (``Store.take_epochs``), and
every state write of its batches and sweeps carries it: a newer owner's writes cannot be overwritten by this instance
once it has lost a partition and not noticed yet. A refused write (``Fenced``) drops the batch like a store error
(paused, retried with backoff, never produced or committed) until the revocation arrives and takes the partition's
lines out of it; ``gatekeeper_fenced_writes_total`` counts them.

**Exactly-once** (``kafka.transactional``): each input partition has a transactional producer of its own, with an
id every instance derives alike (``<prefix>-<topic>-<partition>``), started when the partition is assigned; that
start fences the partition's previous owner, and only then is the partition read again from its committed offset.
A batch is one transaction per input partition: its outcomes and its offset (``send_offsets_to_transaction``);
the consumer reads ``read_committed``. A partition whose producer was fenced (this instance was paused past the
session timeout and its partition given away) has its work dropped, stays paused, and the group is rejoined; a
partition whose transaction failed otherwise is aborted and retried with the backoff, alone. See ``sending``.

Errors: ``Unavailable`` (Kafka or Redis not reachable within the startup time), ``FatalError`` (this instance must
stop: a bug); see ``gatekeeper.errors``.

The worker's parts, each in a module of its own:

=========================  ==========================================================================================
``client``                 the Kafka seam: the typed interface to the consumer and the producer (aiokafka, or a fake)
``intake``                 consumed records become pending lines, each with its conversation
``holds``                  replies held for a handoff not known yet; the watermarks
``deciding``               a batch decided per route (``Processor``), and the records each decision produces
``sending``                the one outcome sender (also the sweeper's and replay's): trimming, retries, transactions
``delivery``               the sink of a mode: at-least-once (acknowledged while the next batch is decided) or
                           exactly-once (a transaction per input partition, its offset included)
``checkpoint``             the watermarks and the offsets committed, never past an open line
``assignment``             the partitions held, their owner epochs and (exactly-once) open-generations
``accounting``             a finished batch counted and logged
``health``                 readiness, liveness, the lag gauges
``breaker``                the dead-letter flood breaker (pure: a window per route)
``floods``                 what the worker does when a breaker trips or closes: count, log, alert, pause the route
``alerting``               the worker's own alerts (a dead-letter flood, Redis's lost data), published at least once
``pausing``                which partitions are read, and why the others wait
``periodic``               the background work beside the loop (the readiness probe, the sweeper), stopped in two stages
``loop`` (this module)     the ``Gatekeeper``: startup, the work loop, rebalances, backoff, the sweeper, shutdown
=========================  ==========================================================================================
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import signal
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Protocol

from aiokafka import TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import KafkaError

from gatekeeper.approvals import check_key_settings
from gatekeeper.config import Settings
from gatekeeper.consumers.accounting import Children, account
from gatekeeper.consumers.alerting import Alerts, data_lost_alert
from gatekeeper.consumers.assignment import Assignment
from gatekeeper.consumers.checkpoint import Checkpoint
from gatekeeper.consumers.client import AioKafka, Consumer, Kafka
from gatekeeper.consumers.deciding import Batch, RouteRuntime, build_sends, decide, route_policy
from gatekeeper.consumers.delivery import sink_for
from gatekeeper.consumers.floods import Floods
from gatekeeper.consumers.health import (
    KAFKA_PROBE_TIMEOUT,
    PROBE_INTERVAL,
    PUBLISH_INTERVAL,
    Health,
    gauge_lag,
    lagging,
    probe,
)
from gatekeeper.consumers.holds import TP, HoldBuffer, HoldLimits
from gatekeeper.consumers.intake import conversation_of, take_in
from gatekeeper.consumers.pausing import Pauses
from gatekeeper.consumers.periodic import Every
from gatekeeper.consumers.sending import OutcomeSender, ProduceTimeout, describe
from gatekeeper.errors import ConfigError, FatalError, GatekeeperError, Unavailable
from gatekeeper.generation import lost_message, worked_before
from gatekeeper.http_process import HttpProcess
from gatekeeper.logs import held_lines
from gatekeeper.metrics import Metrics
from gatekeeper.store import DataLost, Fenced, LifecycleStore, Store, StoreError
from gatekeeper.sweeper import KafkaPublisher, Sweeper, SweepReport, SweepRoute

log = logging.getLogger(__name__)

BACKOFF_MIN = 0.2  # seconds, the first retry after an infrastructure error
BACKOFF_MAX = 10.0  # the cap of the exponential backoff
LAG_INTERVAL = 2.0  # how often the consumer lag gauges are refreshed


class ServiceStore(Store, Protocol):
    """The daemon's store: the Store protocol, plus a readiness probe and a close (``RedisStore`` has both)."""

    async def ping(self) -> bool: ...

    async def ensure_generation(self, *, create: bool = True) -> str | None: ...

    async def epochs_exist(self, route: str, partitions: Collection[int]) -> bool: ...

    async def close(self) -> None: ...


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka is untyped
    def __init__(self, gk: Gatekeeper) -> None:
        self.gk = gk

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self.gk._on_revoked(revoked)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self.gk._on_assigned(assigned)


class Gatekeeper:
    """The daemon. ``run()`` until stopped; ``request_stop()`` (or the signals, or ``stop_event``) stops it.

    ``store`` defaults to ``RedisStore(settings.redis)`` (closed on exit; an injected store is not); ``kafka``
    to the real clients (``AioKafka``; tests inject a fake). ``http=False`` serves no ``/metrics`` (tests);
    ``install_signals`` handles SIGTERM/SIGINT (the CLI; not in tests); ``on_listening(url)`` is called once the
    HTTP server listens. ``startup_timeout`` bounds how long Kafka and Redis are retried at startup;
    ``retry_interval`` how often held lines are decided again (default: a tenth of the shortest ``hold_seconds``,
    between 0.05 and 1 s).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        store: ServiceStore | None = None,
        kafka: Kafka | None = None,
        metrics: Metrics | None = None,
        stop_event: asyncio.Event | None = None,
        install_signals: bool = False,
        http: bool = True,
        startup_timeout: float = 60.0,
        retry_interval: float | None = None,
        clock: Callable[[], float] = time.time,
        on_listening: Callable[[str], None] | None = None,
    ) -> None:
        if not settings.routes:
            raise ConfigError("routes: no route configured; the gatekeeper has nothing to consume")
        check_key_settings(settings)
        self.settings = settings
        self.metrics = metrics if metrics is not None else Metrics()
        if store is None:
            from gatekeeper.redis_store import RedisStore

            store = RedisStore(settings.redis, metrics=self.metrics)
            self._owns_store = True
        else:
            self._owns_store = False
        self._store: ServiceStore = store
        self._kafka: Kafka = kafka if kafka is not None else AioKafka(settings.kafka)
        self._stop = stop_event if stop_event is not None else asyncio.Event()
        self._install_signals = install_signals
        self._startup_timeout = startup_timeout
        self._clock = clock
        self._on_listening = on_listening
        self._routes: dict[str, RouteRuntime] = {r.input: RouteRuntime.of(r, settings, store) for r in settings.routes}
        self._hold_seconds = {name: rt.config.hold_seconds for name, rt in self._routes.items()}
        self._conversation_headers = {name: rt.config.conversation_header for name, rt in self._routes.items()}
        if retry_interval is None:
            shortest = min(self._hold_seconds.values())
            retry_interval = min(1.0, max(0.05, shortest / 10))
        hs = settings.holds
        self._holds = HoldBuffer(
            retry_interval, HoldLimits(hs.max_per_conversation, hs.max_per_partition, hs.max_total)
        )
        self._health = Health()
        self._sender = OutcomeSender(self._kafka, settings.kafka, self.metrics)
        self._checkpoint = Checkpoint(settings.kafka, self.metrics, self._holds, self._kafka_failed)
        self._watermarks = self._checkpoint.watermarks
        self._sink = sink_for(settings.kafka, self._sender, self._checkpoint)  # at-least-once, or exactly-once
        self._lock = asyncio.Lock()
        self._batch: Batch | None = None  # decided, not delivered yet (a retry waits here)
        self._consumer: Consumer | None = None
        self._work: asyncio.Task[None] | None = None
        self._failures = 0
        self._pauses = Pauses()  # why partitions wait: a backoff, a tripped breaker, no transactional producer yet
        self._child = Children()
        self._assigned = Assignment(self._routes)
        self._next_lag = 0.0
        self._signals: list[signal.Signals] = []
        self.metrics.stalled.set_function(self._health.stalled_for)
        self._publish_task: asyncio.Task[None] | None = None
        self._http_died: str | None = None
        self.http = HttpProcess(settings, self.metrics) if http else None
        # the records the gatekeeper writes in its own name: the sweeper's cancels and alerts, the breaker's alerts
        self._publisher = KafkaPublisher(self.settings.kafka, self._sender)
        self._alerts = Alerts(self._publisher, self.metrics)  # the breaker's, a data loss's: between batches
        self._floods = Floods(self._routes, self.metrics, self._pauses, self._alerts, self._apply_pauses)
        self._sweeper = self._make_sweeper()
        # the background work, each in a task of its own: the readiness probe of Redis and Kafka (so that readiness
        # follows them even while a batch is stuck on one), and the sweeper (every sweeper.interval_seconds)
        self._probes = Every("the readiness probe", PROBE_INTERVAL, self._probe, self._stop)
        self._sweeps = Every("the sweeper", settings.sweeper.interval_seconds, self.sweep_now, self._stop)

    # ------------------------------------------------------------------------------------------------ public

    @property
    def store(self) -> ServiceStore:
        return self._store

    @property
    def held(self) -> int:
        return len(self._holds)

    def request_stop(self) -> None:
        """Stage 1: stop intake and drain (up to ``grace_seconds``). Called again: stage 2, cancel now."""
        if self._stop.is_set():
            if self._work is not None and not self._work.done():
                log.warning("second stop request: cancelling the in-flight batch")
                self._work.cancel()
            self._sweeps.cancel()
            return
        log.info("stopping: intake stopped, draining", extra={"grace_seconds": self.settings.grace_seconds})
        self._stop.set()
        self._update_ready()

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """(ready, detail) for ``/readyz``."""
        if self._stop.is_set():
            return False, {"reason": "stopping"}
        why = self._health.not_ready()
        if why is not None:
            return False, why
        detail: dict[str, Any] = {"partitions": len(self._assigned), "held": len(self._holds)}
        pressure = self._holds.pressure(self._clock())
        if pressure:
            detail["holds_under_pressure"] = pressure
        tripped = sorted(name for name, rt in self._routes.items() if rt.breaker.open)
        if tripped:
            detail["dead_letter_breaker_open"] = tripped
        if self._pauses.routes:
            detail["routes_paused"] = sorted(self._pauses.routes)
        waiting = self._pauses.without_producer
        if waiting:  # exactly-once: paused until their producer starts (or, fenced, until the next assignment)
            detail["partitions_without_producer"] = sorted(f"{t}-{p}" for t, p in waiting)
        return True, detail

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        """(alive, detail) for ``/healthz`` (see ``gatekeeper.consumers.health``)."""
        return self._health.liveness(
            self.settings.http.stall_seconds,
            lambda: lagging(self._consumer, self._assigned.partitions, self._watermarks),
        )

    async def run(self) -> None:
        """Run until stopped. Raises ``Unavailable`` when Kafka or Redis cannot be reached within the startup time,
        ``FatalError`` when this instance must stop."""
        loop = asyncio.get_running_loop()
        if self._install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(sig, self.request_stop)
                    self._signals.append(sig)
                except (NotImplementedError, RuntimeError):  # not the main thread, or no signals here
                    pass
        self._update_ready()
        self._publish_task = asyncio.create_task(self._publish_loop(), name="gatekeeper-publish")
        try:
            if self.http is not None:
                await self.http.start(self.readiness(), self.liveness())
                log.info("serving /metrics, /healthz, /readyz", extra={"url": self.http.url})
                if self._on_listening is not None:
                    self._on_listening(self.http.url)
            if not await self._startup():
                return
            self._health.turn()
            self._health.running = True
            self._work = asyncio.create_task(self._work_loop(), name="gatekeeper-work")
            if self._sweeper is not None:
                self._sweeps.start()
            self._probes.start()
            stopped = asyncio.create_task(self._stop.wait())
            try:
                await asyncio.wait({self._work, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if not self._work.done():
                    done, _ = await asyncio.wait({self._work}, timeout=self.settings.grace_seconds)
                    if not done:
                        log.warning("grace period over: cancelling the in-flight batch")
                        self._work.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._work
            finally:
                self._health.running = False
                stopped.cancel()
                if not self._work.done():
                    self._work.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await self._work
                await self._probes.stop()
                # the sweeper's two-stage stop: the stop event ends its loop between sweeps; a sweep in progress
                # drains up to grace_seconds, then is cancelled (safe at any point: gatekeeper.sweeper's cancel intents)
                await self._sweeps.stop(grace=self.settings.grace_seconds)
        finally:
            self._update_ready()
            self._publish_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._publish_task
            await asyncio.shield(self._shutdown())
        if self._http_died is not None:
            raise FatalError(self._http_died)

    # ------------------------------------------------------------------------------------------------ startup

    async def _startup(self) -> bool:
        """Connect to Redis and Kafka, retrying with backoff until the startup time runs out. False: stopped."""
        deadline = time.monotonic() + self._startup_timeout
        attempt = 0
        while True:
            if self._stop.is_set():
                return False
            try:
                await asyncio.wait_for(self.store.ping(), timeout=5.0)
                marker = await asyncio.wait_for(self.store.ensure_generation(create=False), timeout=5.0)
                self._health.redis_error = None
                break
            except (StoreError, TimeoutError) as exc:
                self.metrics.redis_errors.inc()
                self._health.redis_error = describe(exc)
                attempt += 1
                if time.monotonic() >= deadline:
                    raise Unavailable(f"redis is unavailable: {describe(exc)}") from exc
                log.warning("redis unavailable, retrying", extra={"error": describe(exc), "attempt": attempt})
                await self._sleep(min(self._backoff(attempt), max(0.0, deadline - time.monotonic())))
        outputs = {
            t for rt in self._routes.values() for t in (rt.config.output, rt.config.dead_letter, rt.config.alerts)
        }
        attempt = 0
        while True:
            if self._stop.is_set():
                return False
            try:
                await self._sender.start(outputs)
                self._consumer = self._kafka.consumer(self._routes, _Rebalance(self))
                await self._consumer.start()
                worked_before = marker is None and await asyncio.wait_for(self._worked_before(), timeout=30.0)
                self._health.kafka_error = None
                break
            except (KafkaError, TimeoutError, StoreError) as exc:  # StoreError: the epochs of _worked_before
                self.metrics.kafka_errors.labels(operation="connect").inc()
                self._health.kafka_error = describe(exc)
                await self._close_kafka()
                attempt += 1
                if time.monotonic() >= deadline:
                    raise Unavailable(
                        f"kafka at {self.settings.kafka.bootstrap_servers} is unavailable: {describe(exc)}"
                    ) from exc
                log.warning("kafka unavailable, retrying", extra={"error": describe(exc), "attempt": attempt})
                await self._sleep(min(self._backoff(attempt), max(0.0, deadline - time.monotonic())))
        if marker is None:
            if worked_before:  # this group ran before, and this Redis has neither its marker nor its epochs
                self._data_lost(DataLost(lost_message(self.settings.redis.key_prefix, self.settings.kafka.group_id)))
            else:
                while True:  # the first start against this Redis
                    try:
                        await asyncio.wait_for(self.store.ensure_generation(), timeout=5.0)
                        break
                    except (StoreError, TimeoutError) as exc:
                        if self._stop.is_set() or time.monotonic() >= deadline:
                            raise Unavailable(f"redis is unavailable: {describe(exc)}") from exc
                        await self._sleep(1.0)
        self._assigned.settled = True
        self._health.started = True
        self._update_ready()
        log.info(
            "gatekeeper started",
            extra={
                "routes": sorted(self._routes),
                "group": self.settings.kafka.group_id,
                "transactional": self.settings.kafka.transactional,
            },
        )
        return True

    async def _worked_before(self) -> bool:
        """At a start on a Redis without a generation marker: ``generation.worked_before`` (the rule the operator's
        commands apply too) over the routes' input partitions, with this consumer's committed offsets. True: the
        group ran against a Redis that had its data, and this one lost it. A client without ``committed`` (the
        tests' fake Kafka) counts as a first start."""
        committed = getattr(self._consumer, "committed", None)
        producer = self._sender.started
        if committed is None or producer is None:
            return False
        partitions = {topic: sorted(await producer.partitions_for(topic)) for topic in sorted(self._routes)}

        async def has_offset(topic: str, partition: int) -> bool:
            return await committed(TopicPartition(topic, partition)) is not None

        return await worked_before(partitions, self._store.epochs_exist, has_offset)

    async def _close_kafka(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(consumer.stop(), timeout=10.0)
        await self._sender.close()

    # ------------------------------------------------------------------------------------------------ the loop

    async def _work_loop(self) -> None:
        try:
            while not self._stop.is_set():
                await self._run_once()
        except (asyncio.CancelledError, FatalError):
            raise
        except Exception as exc:  # a service error the loop should have handled is a bug here too
            log.exception("the worker failed")
            raise FatalError(f"the worker failed: {describe(exc)}") from exc

    async def _run_once(self) -> None:
        """One turn: a batch waiting for its retry is tried again after the backoff; else the housekeeping, a
        fetch (the batch before settles meanwhile), the held lines due, and the new batch decided and delivered."""
        self._health.turn()
        if self._batch is not None:
            await self._backoff_wait()
            if not self._stop.is_set():
                await self._alerts.publish()  # e.g. redis-data-lost: raised while the batch waits
                await self._attempt()
            return
        await self._housekeeping()
        now = self._clock()
        # records already read go first, the batch before settles while they are decided; none: it settles now
        # (its accounting and commit never wait for a fetch's timeout)
        records = await self._fetch(0) if self._sink.waiting else {}
        if not records:
            await self._settle_between()
            records = await self._fetch(self._fetch_timeout(now))
        records = self._assigned.only_held(records)
        now = self._clock()
        lines = self._holds.plan(take_in(records, self._conversation_headers, self._watermarks, now), now)
        if lines:
            self._batch = Batch(lines, generation=self._assigned.generation)
            await self._attempt()
        elif records or self._holds:
            self._gauge_held()

    def _fetch_timeout(self, now: float) -> int:
        timeout = self.settings.kafka.batch_timeout_ms
        due = self._holds.next_due()
        if due is not None:
            timeout = min(timeout, max(0, int((due - now) * 1000)))
        return timeout

    async def _fetch(self, timeout_ms: int) -> dict[TopicPartition, list[Any]]:
        assert self._consumer is not None
        try:
            return await self._consumer.getmany(timeout_ms=timeout_ms, max_records=self.settings.kafka.max_batch)
        except KafkaError as exc:
            self.metrics.kafka_errors.labels(operation="fetch").inc()
            self._kafka_failed("fetch", exc)
            await self._sleep(self._backoff(self._failures))
            return {}

    async def _attempt(self) -> None:
        """Decide, produce and commit the current batch. Infrastructure errors leave it current (retried after a
        backoff, partitions paused); in exactly-once mode only the partitions whose transaction failed stay."""
        async with self._lock:
            b = self._batch
            if b is None:
                return
            # Only the lines of partitions held now: a partition revoked while this batch held the lock too long is
            # not ours (its lines would be saved unfenced, its epoch gone); exactly-once, a line read before its
            # partition was opened again may come from a stale offset. Their owner reads them again.
            partitions = b.partitions()
            stale = self._assigned.stale(partitions, b.generation)
            if stale:
                b = b.only(partitions - stale)
                self._batch = b if b.lines else None
                if self._batch is None:
                    return
            b.attempts += 1
            try:
                await self._decide_settling(b)
                d = await self._sink.deliver(b, self._consumer_assignment)
                self._health.kafka_error = None
            except DataLost as exc:
                self._data_lost(exc)
                return
            except Fenced as exc:
                self.metrics.fenced.inc()
                self._health.fenced = describe(exc)
                self._failed("fenced", exc)
                return
            except (StoreError, ConnectionError, TimeoutError) as exc:
                self.metrics.redis_errors.inc()
                self._health.redis_error = describe(exc)
                self._failed("redis", exc)
                return
            except (KafkaError, ProduceTimeout) as exc:
                self.metrics.kafka_errors.labels(operation="produce").inc()
                self._kafka_failed("produce", exc)
                self._failed("kafka", exc)
                return
            # its held lines are held now (later lines queue behind them); at-least-once its accounting and commit
            # wait for its acknowledgements (``_settle``) while the next batch is decided
            if d.broken:
                self._broken(d.broken)
            self._hold(d.sent)
            self._batch = d.rest
            if d.finished is not None:
                self._account(d.finished)
            if d.error is not None:  # exactly-once: the partitions whose transaction was aborted are retried
                self.metrics.kafka_errors.labels(operation="transaction").inc()
                self._kafka_failed("transaction", d.error)
                self._failed("kafka", d.error)
                return
            if d.finished is not None:
                self._recovered()

    async def _decide_settling(self, b: Batch) -> None:
        """Decide the batch and build its records while the batch before settles (at-least-once: its
        acknowledgements, counting and commit run in the time this one waits for Redis); the batch before is
        settled when this returns, so this batch's records, sent next, never overtake its. Raises what deciding
        raises (``StoreError``, ``DataLost``...), else what settling raises (``KafkaError``, ``ProduceTimeout``)."""
        settling = asyncio.ensure_future(self._settle()) if self._sink.waiting else None
        try:
            await self._take_epochs()
            now = self._clock()
            await decide(b, self._routes, now, self.metrics)
            self._health.redis_error = None
            if b.sends is None:
                build_sends(b, self._routes, now, self.metrics, self._sender.fit)
        except BaseException as exc:
            if settling is not None:
                await self._settled_anyway(settling, cancel=not isinstance(exc, Exception))
            raise
        if settling is not None:
            await settling

    async def _settled_anyway(self, settling: asyncio.Future[None], *, cancel: bool) -> None:
        """The settling of the batch before, once deciding this one failed: waited for (cancelled first when the
        worker itself is), never left running. Its own failure to produce is counted; a bug in it is raised."""
        if cancel:
            settling.cancel()
        await asyncio.wait([settling])
        failure = None if settling.cancelled() else settling.exception()
        if isinstance(failure, (KafkaError, ProduceTimeout)):
            self.metrics.kafka_errors.labels(operation="produce").inc()
            self._kafka_failed("produce", failure)
        elif failure is not None:
            raise failure

    async def _settle(self) -> None:
        """At-least-once: wait for the acknowledgements of the batch sent last (``AtLeastOnce.settle``), then count
        it and commit. Raises ``KafkaError`` or ``ProduceTimeout``: it stays unacknowledged, and the batch after it
        waits too (its records never overtake these). Exactly-once: nothing waits."""
        b = await self._sink.settle()
        if b is None:
            return
        if self._batch is None:  # a batch still waiting (decided, not sent: it may have failed) recovers itself
            self._recovered()
        self._account(b)
        await self._commit()

    async def _settle_between(self) -> None:
        """``_settle`` between batches, under the batch lock; a failure is a produce failure like any other (the
        batch waits for the next attempt, after the backoff)."""
        if not self._sink.waiting:
            return
        async with self._lock:
            try:
                await self._settle()
                self._health.kafka_error = None
            except (KafkaError, ProduceTimeout) as exc:
                self.metrics.kafka_errors.labels(operation="produce").inc()
                self._kafka_failed("produce", exc)
                self._failed("kafka", exc)
                # the next turn of the loop retries it: as the current batch, with nothing new behind it
                self._batch = self._sink.take()

    def _consumer_assignment(self) -> set[TP]:
        if self._consumer is None:
            return set()
        return {(tp.topic, tp.partition) for tp in self._consumer.assignment()}

    def _hold(self, b: Batch) -> None:
        """The batch's held lines into the hold buffer, once."""
        if b.holds_taken:
            return
        b.holds_taken = True
        # a partition revoked meanwhile (the revocation did not wait for this batch) keeps no held line here
        self._holds.hold([(p, a) for p, a in b.held if p.tp in self._assigned], self._clock(), self._hold_seconds)
        self._gauge_held()

    def _account(self, b: Batch) -> None:
        """Count and log the finished batch; the dead-letter breaker hears of it."""
        now = self._clock()
        with held_lines():  # its dead letters' and alerts' log lines written together
            decided = account(b, self._routes, self.metrics, self._child, now)
        if self._floods.heard(decided, now):
            self._update_ready()

    async def _commit(self, tps: Iterable[TP] | None = None, *, force: bool = False) -> bool:
        """Commit the watermarks that moved (``Sink.commit``); the lines in flight and the held lines are open."""
        in_flight = self._batch.lines if self._batch is not None else []
        return await self._sink.commit(self._consumer, in_flight, tps, force=force)

    # ------------------------------------------------------------------------------------------------ rebalance

    async def _on_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        tps = {(tp.topic, tp.partition) for tp in revoked}
        if not tps:
            return
        locked = False
        try:
            await asyncio.wait_for(self._lock.acquire(), timeout=max(1.0, self.settings.grace_seconds))
            locked = True
        except TimeoutError:
            log.warning("partitions revoked while a batch is stuck: not committing them", extra={"n": len(tps)})
        try:
            if locked:
                try:
                    await self._settle()  # what was sent is committed with the partitions it came from
                except (KafkaError, ProduceTimeout) as exc:
                    self._kafka_failed("produce", exc)
                await self._commit(tps, force=True)
                waiting = self._batch is not None or self._sink.waiting
                self._sink.drop(tps)  # not acknowledged: the new owner reads those lines again
                b = self._batch  # a batch waiting for its retry: the revoked partitions' lines are not ours now
                if b is not None and any(p.tp in tps for p in b.lines):
                    keep = [p for p in b.lines if p.tp not in tps]
                    self._batch = Batch(keep) if keep else None
                if waiting and self._batch is None and not self._sink.waiting:
                    # nothing left to retry (a fenced batch ends here: the revocation it waited for came), so
                    # nothing may stay paused for it; a service still down is found by the next batch
                    self._failures = 0
                    self._health.fenced = None
                    self._resume("backoff")
            dropped = self._holds.drop(tps)
            self._watermarks.forget(tps)
            self._assigned.revoke(tps)
            await self._sink.release(tps)
            self._pauses.unopened -= tps
            self._pauses.broken -= tps
            for topic, partition in tps:
                self.metrics.forget_partition(topic, partition)
            self.metrics.assigned.set(len(self._assigned))
            self._gauge_held()
            log.info("partitions revoked", extra={"partitions": len(tps), "held_dropped": len(dropped)})
        finally:
            if locked:
                self._lock.release()

    async def _take_epochs(self) -> None:
        """The owner epochs of the partitions held that have none yet (``Assignment.take_epochs``). Raises
        ``DataLost`` when Redis lost its data (no epoch is written to it: they mark history), ``StoreError``."""
        if self._health.data_lost is not None:
            raise DataLost(self._health.data_lost)
        await self._assigned.take_epochs(self._store)

    async def _on_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        tps = list(assigned)
        held = self._assigned.assign((tp.topic, tp.partition) for tp in tps)
        # an assignment reads every partition from its committed offset: nothing read before it counts (a batch
        # that outlived a revocation may have left a watermark or a held line behind)
        self._watermarks.forget(held)
        self._holds.drop(held)
        try:  # bounded: a slow Redis must not hold the group's rebalance up
            if self._assigned.settled and self._health.data_lost is None:  # else taken before the first batch
                await asyncio.wait_for(self._take_epochs(), timeout=2.0)
        except (StoreError, TimeoutError) as exc:  # taken before the first batch of those partitions instead
            log.warning("owner epochs not taken at assignment; retried", extra={"error": describe(exc)})
        if self._sink.opens_partitions:
            self._pauses.broken -= held
            self._pauses.unopened = held - self._sender.opened
            self._apply_pauses()  # none read before its producer fenced the old owner and its offset was read again
            try:  # no batch meanwhile: a batch's lines read before the open are dropped by it (generation)
                await asyncio.wait_for(self._lock.acquire(), timeout=max(1.0, self.settings.grace_seconds))
            except TimeoutError:
                log.warning("partitions assigned while a batch is stuck: their producers are started later")
            else:
                try:
                    await self._open_partitions(timeout=self.settings.kafka.request_timeout_ms / 1000)
                finally:
                    self._lock.release()
        self._health.joined = True
        self.metrics.assigned.set(len(self._assigned))
        if tps:
            self._apply_pauses()
        self._update_ready()
        log.info("partitions assigned", extra={"partitions": len(tps)})

    async def _open_partitions(self, *, timeout: float) -> None:
        """Exactly-once: start the transactional producer of each assigned partition that has none (this fences
        the partition's previous owner: its open transaction is aborted, its producer refused from then on), then
        read the partition again from its committed offset, which the fenced owner can no longer move; then it is
        resumed. What does not get there within ``timeout`` stays paused and is tried again between batches. The
        caller holds the batch lock."""
        todo = sorted(self._pauses.unopened & self._assigned.partitions)
        if not todo or self._consumer is None:
            return
        try:
            opened = await asyncio.wait_for(self._sink.open(todo), timeout=timeout)
            ready = sorted(opened & set(todo))
            if ready:
                await asyncio.wait_for(
                    self._consumer.seek_to_committed(*(TopicPartition(t, p) for t, p in ready)), timeout=timeout
                )
                self._watermarks.forget(ready)
                self._pauses.unopened -= set(ready)
                self._assigned.reopened(ready)
                log.info("transactional producers started", extra={"partitions": len(ready)})
        except (KafkaError, TimeoutError) as exc:
            self.metrics.kafka_errors.labels(operation="transaction").inc()
            log.warning("transactional producers not started; tried again", extra={"error": describe(exc)})
        self._apply_pauses()

    def _broken(self, broken: Mapping[TP, str]) -> None:
        """Exactly-once: these partitions' producers are gone (fenced: another instance was assigned them while
        this one was not looking, or stuck). Their work is dropped (their offsets are not committed, so their
        owner reads them again), they stay paused, and the group is rejoined: the next assignment says whose they
        are, and starts their producers again if they are this instance's."""
        tps = set(broken)
        log.warning(
            "transactional producers fenced or broken: their partitions' work is dropped and the group rejoined",
            extra={"partitions": {f"{t}-{p}": why for (t, p), why in sorted(broken.items())}},
        )
        self.metrics.kafka_errors.labels(operation="fenced").inc(len(tps))
        self._holds.drop(tps)
        self._watermarks.forget(tps)
        self._pauses.broken |= tps
        self._apply_pauses()
        if self._consumer is not None:
            self._consumer.rejoin()

    # ------------------------------------------------------------------------------------------------ trouble

    def _backoff(self, failures: int) -> float:
        base = min(BACKOFF_MAX, BACKOFF_MIN * float(2 ** min(max(0, failures - 1), 16)))
        return base * random.uniform(0.8, 1.0)

    def _failed(self, what: str, exc: BaseException) -> None:
        self._failures += 1
        self._pause("backoff")
        self._update_ready()
        lines = len(self._batch.lines) if self._batch is not None else 0
        log.warning(
            f"{what} unavailable: the batch is retried",
            extra={"error": describe(exc), "attempt": self._failures, "lines": lines},
        )

    def _data_lost(self, exc: DataLost) -> None:
        """Redis is not the Redis this instance started on: decide nothing, forward nothing, until an operator
        restores the data, runs ``gatekeeper redis accept-loss`` and restarts the gatekeepers. Logged and alerted
        once; the batch is retried (and refused) with the capped backoff, partitions paused."""
        self._failures += 1
        self._pause("redis-data-lost")
        first = self._health.data_lost is None
        self._health.data_lost = describe(exc)
        self.metrics.redis_data_lost.set(1)
        self._update_ready()
        if not first:
            return
        self.metrics.redis_data_lost_total.inc()
        log.error(
            "redis lost its data: nothing is decided or forwarded until an operator restores it and runs "
            "`gatekeeper redis accept-loss` (docs/troubleshooting.md), then restarts the gatekeepers: %s",
            describe(exc),
            extra={"expected": exc.expected, "found": exc.found},
        )
        now = self._clock()
        for name, rt in self._routes.items():
            self._alerts.queue(rt.config, data_lost_alert(name, exc, now=now))

    def _kafka_failed(self, operation: str, exc: BaseException) -> None:
        self._health.kafka_error = f"{operation}: {describe(exc)}"
        self._update_ready()

    def _recovered(self) -> None:
        """A batch got through. The probes' answers are published now only when that ends a failure; otherwise the
        publish loop's next turn (``PUBLISH_INTERVAL``) carries any change: publishing writes a file, and doing it
        for every batch was about 5% of the worker's CPU at 1,000 lines/s (batches of a few lines)."""
        failing = self._failures > 0 or self._health.fenced is not None
        if self._failures:
            log.info("recovered", extra={"after_attempts": self._failures})
        self._failures = 0
        self._health.fenced = self._health.redis_error = self._health.kafka_error = None
        self._resume("backoff")
        if failing:
            self._update_ready()

    def _pause(self, why: str) -> None:
        self._pauses.pause(why)
        self._apply_pauses()

    def _resume(self, why: str) -> None:
        if self._pauses.resume(why):
            self._apply_pauses()

    def _apply_pauses(self) -> None:
        self._pauses.apply(self._consumer)

    async def _backoff_wait(self) -> None:
        """Wait before retrying the current batch, polling the (paused) consumer so the group keeps this member."""
        assert self._consumer is not None
        deadline = time.monotonic() + self._backoff(self._failures)
        while not self._stop.is_set() and self._batch is not None:  # a revocation may take the batch away
            left = deadline - time.monotonic()
            if left <= 0:
                return
            started = time.monotonic()
            try:
                records = await self._consumer.getmany(timeout_ms=int(min(left, 1.0) * 1000))
            except KafkaError as exc:
                self.metrics.kafka_errors.labels(operation="fetch").inc()
                self._kafka_failed("fetch", exc)
                records = {}
            for tp, recs in records.items():  # a partition assigned before it could be paused: read it again
                if recs:
                    self._consumer.seek(tp, recs[0].offset)
            if records:
                # paused again by the reasons that hold now, not blindly: a revocation may have taken the batch
                # away meanwhile (and its backoff with it), and nothing else would resume these partitions
                self._apply_pauses()
            if time.monotonic() - started < 0.05:
                await self._sleep(min(left, 0.2))

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), timeout=max(0.0, seconds))

    # ------------------------------------------------------------------------------------------------ housekeeping

    async def _housekeeping(self) -> None:
        """Between batches: retry a failed commit, let a tripped breaker's pause end (and publish its alert), probe
        the services now and then, refresh the lag gauges."""
        await self._commit()
        if self._pauses.unopened:
            async with self._lock:
                await self._open_partitions(timeout=KAFKA_PROBE_TIMEOUT)
        if self._floods.evaluate(self._clock()):
            self._update_ready()
        await self._alerts.publish()
        now = time.monotonic()
        if now >= self._next_lag:
            self._next_lag = now + LAG_INTERVAL
            gauge_lag(self._consumer, self._watermarks, self.metrics)

    async def _probe(self) -> None:
        """Probe Redis and Kafka, each bounded (``health.probe``), every ``PROBE_INTERVAL``."""
        lost = await probe(
            self._health,
            self.store.ping,
            self._kafka,
            self._sender.started,
            self.metrics,
            keep_redis_error=self._failures > 0,  # a batch failing on Redis keeps saying so until it gets through
            keep_kafka_error=self._batch is not None,
        )
        if lost is not None:
            self._data_lost(lost)
        self._update_ready()

    def _gauge_held(self) -> None:
        pressure = set(self._holds.pressure(self._clock()))
        for name in self._routes:
            self.metrics.held_lines.labels(route=name).set(self._holds.count(name))
            self.metrics.hold_pressure.labels(route=name).set(1 if name in pressure else 0)

    def _update_ready(self) -> None:
        """The readiness gauge, and what the probes answer published for the HTTP process."""
        ready = self.readiness()
        self.metrics.ready.set(1 if ready[0] else 0)
        if self.http is not None:
            self.http.publish(ready, self.liveness())

    async def _publish_loop(self) -> None:
        """Every ``PUBLISH_INTERVAL``: publish the probes' answers and, less often, the metrics for the HTTP process
        (``gatekeeper.http_process``); a loop that stops running stops publishing, which /healthz sees. An HTTP
        process that exited stops the daemon: its probes would be gone."""
        while True:
            try:
                self._update_ready()
                if self.http is not None:
                    self.http.publish_metrics()
            except Exception:  # the probes must keep answering
                log.exception("publishing the probes' answers failed")
            if self.http is not None and self._http_died is None and not self.http.alive():
                self._http_died = f"the HTTP server's process exited (code {self.http.exitcode})"
                log.error(f"{self._http_died}: stopping")
                self.request_stop()
            await asyncio.sleep(PUBLISH_INTERVAL)

    # ------------------------------------------------------------------------------------------------ the sweeper

    @property
    def sweeper(self) -> Sweeper | None:
        """The handoff lifecycle's sweeper (None: ``sweeper.interval_seconds`` is 0, or the store has no indexes)."""
        return self._sweeper

    def _make_sweeper(self) -> Sweeper | None:
        sw = self.settings.sweeper
        if sw.interval_seconds <= 0:
            return None
        if not hasattr(self._store, "due_view"):
            log.warning("the store keeps no lifecycle indexes: no sweeper (handoffs are not cancelled at expiry)")
            return None
        routes = [
            SweepRoute(
                rt.policy,
                rt.config.output,
                rt.config.alerts,
                dry_run=rt.targets.dry_run,
                sensitive=rt.sensitive,
                signer=rt.targets.signer,
            )
            for rt in self._routes.values()
        ]
        store: LifecycleStore = self._store  # type: ignore[assignment]  # checked above
        return Sweeper(
            store,
            routes,
            self._publisher,
            clock=self._clock,
            metrics=self.metrics,
            takeover_seconds=sw.takeover_seconds,
            max_per_sweep=sw.max_per_sweep,
            retention_seconds=self.settings.redis.retention_seconds,
            open_retention_seconds=self.settings.redis.open_retention_seconds,
        )

    async def sweep_now(self) -> SweepReport | None:
        """One sweep now, between batches (under the batch lock: a conversation's state has one writer at a time).
        None when there is no sweeper, the instance is not consuming yet, or the sweep failed (logged, counted, and
        tried again at the next interval)."""
        if self._sweeper is None or self._consumer is None or not self._health.started:
            return None
        if self._health.data_lost is not None:  # an empty Redis has no deadlines: nothing to sweep, nothing to trust
            return None
        async with self._lock:
            owned = [(topic, partition) for topic, partition in self._assigned.partitions if topic in self._routes]
            try:
                await self._take_epochs()
                return await self._sweeper.sweep(owned, now=self._clock(), epochs=self._assigned.epochs())
            except Fenced as exc:
                self.metrics.fenced.inc()
                log.warning(
                    "sweep refused: a newer owner holds a partition; tried again later", extra={"error": str(exc)}
                )
            except StoreError as exc:
                self.metrics.redis_errors.inc()
                log.warning("sweep failed: redis unavailable; tried again later", extra={"error": describe(exc)})
            except (KafkaError, TimeoutError) as exc:
                self.metrics.kafka_errors.labels(operation="sweep").inc()
                log.warning("sweep failed: kafka unavailable; tried again later", extra={"error": describe(exc)})
            except Exception:
                log.exception("the sweep failed; tried again later")
        return None

    # ------------------------------------------------------------------------------------------------ shutdown

    async def _shutdown(self) -> None:
        self._stop.set()
        self._update_ready()
        try:
            if self._consumer is not None and self._health.started:
                async with self._lock:
                    # what was sent and is acknowledged within the grace period is committed
                    with contextlib.suppress(KafkaError, ProduceTimeout, TimeoutError):
                        await asyncio.wait_for(self._settle(), timeout=self.settings.grace_seconds)
                    await self._commit(force=True)
        except Exception as exc:
            log.warning("final commit failed", extra={"error": describe(exc)})
        await self._publisher.close()
        await self._close_kafka()
        if self._owns_store and self._store is not None:
            with contextlib.suppress(Exception):
                await self._store.close()
        if self.http is not None:
            await self.http.close()
        loop = asyncio.get_running_loop()
        for sig in self._signals:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
        self._signals.clear()
        log.info("gatekeeper stopped", extra={"held_not_committed": len(self._holds)})


__all__ = [
    "FatalError",
    "Gatekeeper",
    "GatekeeperError",
    "Unavailable",
    "conversation_of",
    "route_policy",
]
