"""The worker: consume every route's input, decide in batches, produce the outcomes, then commit.

    gk = Gatekeeper(load_settings("gk.yaml"), install_signals=True)
    await gk.run()              # until SIGTERM/SIGINT, or gk.request_stop(), or the stop event is set

One consumer in the group ``kafka.group_id`` reads every route's input topic (manual commits, ``earliest``). Per
``getmany`` batch, per route, ``Processor.process`` decides the lines in order (one Redis load, one save); the
outcomes go out through an idempotent producer (``acks=all``), keyed by the original key; only when every produce of
the batch is acknowledged are the offsets committed (the next offset to read, per partition). Checkpoint order, as
quix-streams does it: flush the producer, then commit.

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
that route alone for a while.

**Infrastructure trouble is not a bad line.** Redis unavailable (``StoreError``), the broker refusing or timing out a
produce or a commit: the partitions are paused, the same batch is retried with exponential backoff (capped), and
``/readyz`` says why it is not ready. No line is dead-lettered because a dependency failed. A retried batch gets the
same verdicts (the first decisions are stored before any outcome is produced).

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

**Exactly-once** (``kafka.transactional``): a batch's outcomes and its offsets are one Kafka transaction
(``send_offsets_to_transaction``); the consumer reads ``read_committed``.

Errors: ``Unavailable`` (Kafka or Redis not reachable within the startup time), ``FatalError`` (this instance must
stop: fenced by another with the same ``transactional_id``, or a bug). Both derive from ``GatekeeperError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import signal
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import (
    CommitFailedError,
    KafkaError,
    MessageSizeTooLargeError,
    ProducerFenced,
    RecordTooLargeError,
)

from gatekeeper import __version__
from gatekeeper.config import ConfigError, Route, Settings
from gatekeeper.consumers.breaker import Change, DeadLetterBreaker
from gatekeeper.consumers.holds import (
    TP,
    HoldBuffer,
    HoldLimits,
    Pending,
    Watermarks,
    lowest_offsets,
    merge_lowest,
)
from gatekeeper.consumers.kafka import (
    DEFAULT_MAX_MESSAGE_BYTES,
    make_consumer,
    make_producer,
    topic_limits,
)
from gatekeeper.consumers.outcomes import Outcome, Source, Targets, bare_dead_letter, build, iso
from gatekeeper.http import HttpServer
from gatekeeper.masking import mask_line
from gatekeeper.metrics import HANDOFF_PROBLEM_CODES, Metrics
from gatekeeper.policy import Decision, Mode, Reason, RoutePolicy, Verdict
from gatekeeper.policy.decide import error_text
from gatekeeper.processor import QUEUED, Line, Processor
from gatekeeper.store import Fenced, LifecycleStore, Store, StoreError
from gatekeeper.sweeper import KafkaPublisher, OutRecord, Sweeper, SweepReport, SweepRoute
from rwcore import get_profile

log = logging.getLogger(__name__)

BACKOFF_MIN = 0.2  # seconds, the first retry after an infrastructure error
BACKOFF_MAX = 10.0  # the cap of the exponential backoff
PROBE_INTERVAL = 5.0  # how often an idle gatekeeper checks that Kafka and Redis still answer (readiness)
LAG_INTERVAL = 2.0  # how often the consumer lag gauges are refreshed
FLOOD_ALERT = "dead-letter-flood"  # the alert a tripped dead-letter breaker raises


class GatekeeperError(Exception):
    """The root of the worker's errors."""


class Unavailable(GatekeeperError):
    """Kafka or Redis could not be reached within the startup time."""


class FatalError(GatekeeperError):
    """This instance must stop (fenced by another producer with its transactional id, or an unexpected error)."""


class _ProduceTimeout(Exception):
    """Produce acknowledgements did not arrive within the request timeout (the broker is unavailable)."""


def conversation_of(key: bytes | None, headers: Iterable[tuple[str, bytes]], header: str | None) -> str | None:
    """The conversation of a record: its key (UTF-8), else the route's conversation header, else None (the decision
    then dead-letters the line ``no-conversation``)."""
    if key:
        try:
            return key.decode("utf-8")
        except UnicodeDecodeError:
            pass
    if header is not None:
        for name, value in headers:
            if name == header and value:
                try:
                    return value.decode("utf-8")
                except UnicodeDecodeError:
                    return None
    return None


def route_policy(route: Route, settings: Settings) -> RoutePolicy:
    """What the decision needs to know about a configured route."""
    return RoutePolicy(
        name=route.input,
        profile=get_profile(route.profile, extra_dirs=settings.all_profile_dirs()),
        mode=Mode(route.mode),
        senders=None if route.senders is None else frozenset(route.senders),
        hold_seconds=route.hold_seconds,
        max_line_bytes=route.max_line_bytes,
        readback_timeout_seconds=route.readback_timeout_seconds,
    )


@dataclass(slots=True)
class _Route:
    config: Route
    policy: RoutePolicy
    processor: Processor
    targets: Targets
    sensitive: frozenset[str]
    breaker: DeadLetterBreaker


@dataclass(slots=True, eq=False)
class _Send:
    outcome: Outcome
    line: Pending
    route: str
    fut: asyncio.Future[Any] | None = None
    acked: bool = False
    solo: bool = False  # sent alone (after a size refusal shared with others)


@dataclass(slots=True, eq=False)
class _Batch:
    lines: list[Pending]
    decisions: dict[int, Decision] = field(default_factory=dict)
    decided_routes: set[str] = field(default_factory=set)
    sends: list[_Send] | None = None
    held: list[tuple[Pending, str | None]] = field(default_factory=list)
    done: list[tuple[Pending, Decision]] = field(default_factory=list)
    attempts: int = 0


def _tp(tp: TP) -> TopicPartition:
    return TopicPartition(tp[0], tp[1])


def _too_large(exc: BaseException) -> bool:
    return isinstance(exc, MessageSizeTooLargeError | RecordTooLargeError)


def _failure(fut: asyncio.Future[Any] | None) -> BaseException | None:
    """The exception of a completed produce future (None: acknowledged)."""
    assert fut is not None and fut.done()
    if fut.cancelled():
        return asyncio.CancelledError()
    return fut.exception()


def _describe(exc: BaseException) -> str:
    name, text = type(exc).__name__, str(exc)
    if not text:
        return name
    return text if text.startswith(name) else f"{name}: {text}"


class ServiceStore(Store, Protocol):
    """The daemon's store: the Store protocol, plus a readiness probe and a close (``RedisStore`` has both)."""

    async def ping(self) -> bool: ...

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

    ``store`` defaults to ``RedisStore(settings.redis)`` (closed on exit; an injected store is not). ``http=False``
    serves no ``/metrics`` (tests); ``install_signals`` handles SIGTERM/SIGINT (the CLI; not in tests);
    ``on_listening(url)`` is called once the HTTP server listens. ``startup_timeout`` bounds how long Kafka and
    Redis are retried at startup; ``retry_interval`` how often held lines are decided again (default: a tenth of
    the shortest ``hold_seconds``, between 0.05 and 1 s).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        store: ServiceStore | None = None,
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
        self.settings = settings
        self.metrics = metrics if metrics is not None else Metrics()
        if store is None:
            from gatekeeper.redis_store import RedisStore

            store = RedisStore(settings.redis, metrics=self.metrics)
            self._owns_store = True
        else:
            self._owns_store = False
        self._store: ServiceStore = store
        self._stop = stop_event if stop_event is not None else asyncio.Event()
        self._install_signals = install_signals
        self._startup_timeout = startup_timeout
        self._clock = clock
        self._on_listening = on_listening
        self._routes: dict[str, _Route] = {}
        for r in settings.routes:
            policy = route_policy(r, settings)
            self._routes[r.input] = _Route(
                config=r,
                policy=policy,
                processor=Processor(self._store, policy),
                targets=Targets(r.output, r.dead_letter, r.alerts, r.input, r.mode == "dry-run"),
                sensitive=frozenset(policy.profile.sensitive),
                breaker=DeadLetterBreaker(r.dead_letter_breaker),
            )
        self._hold_seconds = {name: rt.config.hold_seconds for name, rt in self._routes.items()}
        if retry_interval is None:
            shortest = min(self._hold_seconds.values())
            retry_interval = min(1.0, max(0.05, shortest / 10))
        hs = settings.holds
        self._holds = HoldBuffer(
            retry_interval, HoldLimits(hs.max_per_conversation, hs.max_per_partition, hs.max_total)
        )
        self._watermarks = Watermarks()
        self._lock = asyncio.Lock()
        self._batch: _Batch | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._limits: dict[str, int] = {}
        self._max_batch_size = 16384
        self._work: asyncio.Task[None] | None = None
        self._failures = 0
        self._paused_for: set[str] = set()  # why every partition is paused (infrastructure backoff)
        self._routes_paused: set[str] = set()  # routes paused alone (a tripped dead-letter breaker)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._last_commit = 0.0  # time.monotonic() of the last commit attempt
        self._unfenced: set[TP] = set()  # assigned partitions whose owner epoch is not taken yet (Redis was down)
        self._fenced: str | None = None  # why the last batch was refused (readiness)
        self._started = False
        self._joined = False
        self._assigned: set[TP] = set()
        self._kafka_error: str | None = None
        self._redis_error: str | None = None
        self._next_probe = 0.0
        self._next_lag = 0.0
        self._signals: list[signal.Signals] = []
        self._turned = time.monotonic()  # when the work loop last turned (liveness)
        self.metrics.stalled.set_function(self._stalled_for)
        self.http = (
            HttpServer(settings.http.host, settings.http.port, self.metrics, self.readiness, self.liveness)
            if http
            else None
        )
        self._sweep_task: asyncio.Task[None] | None = None
        # the records the gatekeeper writes in its own name: the sweeper's cancels and alerts, the breaker's alerts
        self._publisher = KafkaPublisher(self.settings.kafka, self._ensure_producer, on_failure=self._reset_producer)
        self._pending_alerts: list[OutRecord] = []
        self._sweeper = self._make_sweeper()

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
            if self._sweep_task is not None and not self._sweep_task.done():
                self._sweep_task.cancel()
            return
        log.info("stopping: intake stopped, draining", extra={"grace_seconds": self.settings.grace_seconds})
        self._stop.set()

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """(ready, detail) for ``/readyz``."""
        if self._stop.is_set():
            return False, {"reason": "stopping"}
        if not self._started:
            return False, {"reason": "starting: connecting to Kafka and Redis"}
        if self._redis_error is not None:
            return False, {"reason": "redis unavailable", "error": self._redis_error}
        if self._kafka_error is not None:
            return False, {"reason": "kafka unavailable", "error": self._kafka_error}
        if self._fenced is not None:
            return False, {"reason": "fenced: a newer owner holds a partition of the batch", "error": self._fenced}
        if not self._joined:
            return False, {"reason": "consumer group not joined yet"}
        detail: dict[str, Any] = {"partitions": len(self._assigned), "held": len(self._holds)}
        pressure = self._holds.pressure(self._clock())
        if pressure:
            detail["holds_under_pressure"] = pressure
        tripped = sorted(name for name, rt in self._routes.items() if rt.breaker.open)
        if tripped:
            detail["dead_letter_breaker_open"] = tripped
        if self._routes_paused:
            detail["routes_paused"] = sorted(self._routes_paused)
        return True, detail

    def _stalled_for(self) -> float:
        """Seconds since the work loop last turned, while it is running (0 before it starts and after it ends)."""
        if self._work is None or self._work.done():
            return 0.0
        return max(0.0, time.monotonic() - self._turned)

    def _lagging(self) -> list[str]:
        """The assigned partitions whose committed offset is behind the high watermark (records not consumed yet,
        or consumed and not finished: in flight or held), as ``topic/partition``."""
        if self._consumer is None:
            return []
        out = []
        for tp in self._assigned:
            hw = self._consumer.highwater(_tp(tp))
            if hw is None:
                continue
            done = self._watermarks.last_committed(tp)
            if done is None:
                done = self._watermarks.next_offset(tp)
            if hw > (done or 0):
                out.append(f"{tp[0]}/{tp[1]}")
        return sorted(out)

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        """(alive, detail) for ``/healthz``: not alive when the work loop has not turned for ``http.stall_seconds``
        while it holds partitions with lag. A loop that turns while it retries an unavailable Kafka or Redis is
        alive (``/readyz`` reports that): restarting would not bring the service back."""
        limit = self.settings.http.stall_seconds
        stalled = self._stalled_for()
        if limit <= 0 or stalled < limit:
            return True, {}
        lagging = self._lagging()
        if not lagging:
            return True, {}
        return False, {
            "reason": "the work loop has not turned while partitions have lag",
            "stalled_seconds": round(stalled, 1),
            "stall_seconds": limit,
            "lagging": lagging[:20],
        }

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
        try:
            if self.http is not None:
                await self.http.start()
                log.info("serving /metrics, /healthz, /readyz", extra={"url": self.http.url})
                if self._on_listening is not None:
                    self._on_listening(self.http.url)
            if not await self._startup():
                return
            self._work = asyncio.create_task(self._work_loop(), name="gatekeeper-work")
            if self._sweeper is not None:
                self._sweep_task = asyncio.create_task(self._sweep_loop(), name="gatekeeper-sweeper")
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
                stopped.cancel()
                if not self._work.done():
                    self._work.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await self._work
                await self._stop_sweeper()
        finally:
            await asyncio.shield(self._shutdown())

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
                self._redis_error = None
                break
            except (StoreError, TimeoutError) as exc:
                self.metrics.redis_errors.inc()
                self._redis_error = _describe(exc)
                attempt += 1
                if time.monotonic() >= deadline:
                    raise Unavailable(f"redis is unavailable: {_describe(exc)}") from exc
                log.warning("redis unavailable, retrying", extra={"error": _describe(exc), "attempt": attempt})
                await self._sleep(min(self._backoff(attempt), max(0.0, deadline - time.monotonic())))
        outputs = {
            t for rt in self._routes.values() for t in (rt.config.output, rt.config.dead_letter, rt.config.alerts)
        }
        attempt = 0
        while True:
            if self._stop.is_set():
                return False
            try:
                await self._start_kafka(outputs)
                self._kafka_error = None
                break
            except KafkaError as exc:
                self.metrics.kafka_errors.labels(operation="connect").inc()
                self._kafka_error = _describe(exc)
                await self._close_kafka()
                attempt += 1
                if time.monotonic() >= deadline:
                    raise Unavailable(
                        f"kafka at {self.settings.kafka.bootstrap_servers} is unavailable: {_describe(exc)}"
                    ) from exc
                log.warning("kafka unavailable, retrying", extra={"error": _describe(exc), "attempt": attempt})
                await self._sleep(min(self._backoff(attempt), max(0.0, deadline - time.monotonic())))
        self._started = True
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

    async def _start_kafka(self, outputs: set[str]) -> None:
        kafka = self.settings.kafka
        limits = await topic_limits(kafka, outputs)
        self._limits = limits
        missing = sorted(outputs - set(limits))
        if missing:
            log.warning("output topics not described (missing?)", extra={"topics": missing})
        smallest = min([*limits.values(), DEFAULT_MAX_MESSAGE_BYTES])
        self._max_batch_size = max(1024, min(16384, smallest - 128))
        self._producer = make_producer(kafka, max_batch_size=self._max_batch_size)
        await self._producer.start()
        self._consumer = make_consumer(kafka, self._routes, listener=_Rebalance(self))
        await self._consumer.start()

    async def _close_kafka(self) -> None:
        consumer, producer = self._consumer, self._producer
        self._consumer = self._producer = None
        for client in (consumer, producer):
            if client is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(client.stop(), timeout=10.0)

    # ------------------------------------------------------------------------------------------------ the loop

    async def _work_loop(self) -> None:
        try:
            while not self._stop.is_set():
                self._turned = time.monotonic()
                if self._batch is not None:
                    await self._backoff_wait()
                    if self._stop.is_set():
                        break
                    await self._attempt()
                    continue
                await self._housekeeping()
                now = self._clock()
                records = await self._fetch(self._fetch_timeout(now))
                now = self._clock()
                lines = self._holds.plan(self._intake(records, now), now)
                if lines:
                    self._batch = _Batch(lines)
                    await self._attempt()
                elif records or self._holds:
                    self._gauge_held()
        except ProducerFenced as exc:
            raise FatalError(f"another producer with transactional id took over: {exc}") from exc
        except (asyncio.CancelledError, GatekeeperError):
            raise
        except Exception as exc:
            log.exception("the worker failed")
            raise FatalError(f"the worker failed: {_describe(exc)}") from exc

    def _fetch_timeout(self, now: float) -> int:
        timeout = self.settings.kafka.batch_timeout_ms
        due = self._holds.next_due()
        if due is not None:
            timeout = min(timeout, max(0, int((due - now) * 1000)))
        return timeout

    async def _fetch(self, timeout_ms: int) -> dict[TopicPartition, list[Any]]:
        assert self._consumer is not None
        try:
            records: dict[TopicPartition, list[Any]] = await self._consumer.getmany(
                timeout_ms=timeout_ms, max_records=self.settings.kafka.max_batch
            )
            return records
        except KafkaError as exc:
            self.metrics.kafka_errors.labels(operation="fetch").inc()
            self._kafka_failed("fetch", exc)
            await self._sleep(self._backoff(self._failures))
            return {}

    def _intake(self, records: Mapping[TopicPartition, Sequence[Any]], now: float) -> list[Pending]:
        out: list[Pending] = []
        for tp, recs in records.items():
            rt = self._routes[tp.topic]
            for r in recs:
                self._watermarks.consumed((tp.topic, tp.partition), r.offset)
                headers = tuple((str(k), bytes(v) if v is not None else b"") for k, v in (r.headers or ()))
                source = Source(
                    topic=tp.topic,
                    partition=tp.partition,
                    offset=r.offset,
                    value=r.value if r.value is not None else b"",
                    key=r.key,
                    timestamp=r.timestamp,
                    headers=headers,
                )
                conv = conversation_of(r.key, headers, rt.config.conversation_header)
                out.append(Pending.of(source, tp.topic, conv, now))
        return out

    async def _attempt(self) -> None:
        """Decide, produce and commit the current batch. Infrastructure errors leave it current (retried after a
        backoff, partitions paused)."""
        async with self._lock:
            b = self._batch
            if b is None:
                return
            b.attempts += 1
            try:
                await self._take_epochs()
                await self._decide(b)
                if self.settings.kafka.transactional:
                    await self._produce_transaction(b)
                else:
                    await self._produce(b)
            except Fenced as exc:
                self.metrics.fenced.inc()
                self._fenced = _describe(exc)
                self._failed("fenced", exc)
                return
            except (StoreError, ConnectionError, TimeoutError) as exc:
                self.metrics.redis_errors.inc()
                self._redis_error = _describe(exc)
                self._failed("redis", exc)
                return
            except ProducerFenced:
                raise
            except (KafkaError, _ProduceTimeout) as exc:
                self.metrics.kafka_errors.labels(
                    operation="transaction" if self.settings.kafka.transactional else "produce"
                ).inc()
                self._kafka_failed("produce", exc)
                self._failed("kafka", exc)
                return
            self._finish(b)
            self._batch = None
            self._recovered()
            if not self.settings.kafka.transactional:
                await self._commit()

    # ------------------------------------------------------------------------------------------------ decide

    async def _decide(self, b: _Batch) -> None:
        now = self._clock()
        by_route: dict[str, list[int]] = {}
        for i, p in enumerate(b.lines):
            by_route.setdefault(p.route, []).append(i)
        for name, idxs in by_route.items():
            if name in b.decided_routes:
                continue
            rt = self._routes[name]
            lines = [
                Line(
                    b.lines[i].conversation,
                    b.lines[i].source.value,
                    first_seen=self._first_seen(b.lines[i], rt, now),
                    partition=b.lines[i].source.partition,
                )
                for i in idxs
            ]
            started = time.perf_counter()
            decisions = await rt.processor.process(lines, now)
            self.metrics.check_seconds.labels(route=name).observe(time.perf_counter() - started)
            self.metrics.batch_size.labels(route=name).observe(len(lines))
            for i, d in zip(idxs, decisions, strict=True):
                b.decisions[i] = d
            b.decided_routes.add(name)
        self._redis_error = None
        if b.sends is None:
            self._build_sends(b, now)

    @staticmethod
    def _first_seen(p: Pending, rt: _Route, now: float) -> float:
        """When the line was first consumed, for its hold window; a line a hold bound forced out of the buffer is
        decided as its window would have ended (fail closed)."""
        if p.forced is None:
            return p.first_seen
        return min(p.first_seen, now - rt.config.hold_seconds - 1.0)

    def _build_sends(self, b: _Batch, now: float) -> None:
        sends: list[_Send] = []
        for i, p in enumerate(b.lines):
            d = b.decisions[i]
            if d.verdict is Verdict.HOLD:
                queued = any(pr.code == QUEUED for pr in d.problems)
                awaits = None if queued or d.message is None else d.message.re
                b.held.append((p, awaits))
                if not p.held and not queued:
                    self.metrics.held.labels(route=p.route).inc()
                continue
            rt = self._routes[p.route]
            try:
                outs = build(d, p.source, rt.targets, conversation=p.conversation, sensitive=rt.sensitive, now=now)
            except Exception as exc:  # a bug in building the records: the line is held back, never waved through
                log.error(
                    "building a line's outcome raised: dead-lettered internal-error",
                    exc_info=exc,
                    extra={"route": p.route, "partition": p.source.partition, "offset": p.source.offset},
                )
                self.metrics.internal_errors.labels(route=p.route, stage="outcome").inc()
                outs = [bare_dead_letter(p.source, rt.targets, error_text(exc), now)]
            for o in outs:
                fitted = self._fit(o)
                if fitted is not None:
                    sends.append(_Send(fitted, p, p.route))
            b.done.append((p, d))
        b.sends = sends

    def _limit(self, topic: str) -> int:
        return min(self._limits.get(topic, DEFAULT_MAX_MESSAGE_BYTES), DEFAULT_MAX_MESSAGE_BYTES)

    def _fit(self, outcome: Outcome) -> Outcome | None:
        """Trim an outcome until it fits its topic's ``max.message.bytes`` (as far as the limit is known)."""
        current: Outcome | None = outcome
        while current is not None and current.size > self._limit(current.topic):
            current = current.trimmed()
        if current is None:
            self._dropped(outcome)
        elif current.level:
            self._trimmed(current)
        return current

    def _trimmed(self, o: Outcome) -> None:
        route = o.source.topic
        self.metrics.trimmed.labels(route=route, kind=o.kind.value).inc()
        log.warning(
            "outcome trimmed to fit its topic",
            extra={"route": route, "topic": o.topic, "level": o.level, "offset": o.source.offset},
        )

    def _dropped(self, o: Outcome) -> None:
        log.error(
            "an outcome does not fit its topic even trimmed to its coordinates: not produced; the input record "
            "is still at its coordinates",
            extra={
                "route": o.source.topic,
                "topic": o.topic,
                "partition": o.source.partition,
                "offset": o.source.offset,
            },
        )
        self.metrics.trimmed.labels(route=o.source.topic, kind="dropped").inc()

    # ------------------------------------------------------------------------------------------------ produce

    async def _send(self, s: _Send) -> None:
        producer = await self._ensure_producer()
        o = s.outcome
        try:
            s.fut = await producer.send(o.topic, o.value, key=o.key, headers=list(o.headers))
        except (MessageSizeTooLargeError, RecordTooLargeError) as exc:  # refused before it left
            fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            fut.set_exception(exc)
            s.fut = fut

    async def _send_all(self, sends: Sequence[_Send]) -> list[tuple[_Send, BaseException]]:
        """Send what is not acknowledged yet (a send still in flight from a previous attempt is waited for, not
        repeated) and wait for the acknowledgements. Returns the failures; raises ``_ProduceTimeout`` when the
        acknowledgements do not come within the request timeout."""
        timeout = self.settings.kafka.request_timeout_ms / 1000
        todo = [s for s in sends if not s.acked]
        group = [s for s in todo if not s.solo]
        for s in group:
            if s.fut is None or (s.fut.done() and _failure(s.fut) is not None):
                await self._send(s)
        futs = [s.fut for s in group if s.fut is not None]
        if futs:
            _, pending = await asyncio.wait(futs, timeout=timeout)
            if pending:
                raise _ProduceTimeout(f"{len(pending)} of {len(futs)} produce requests not acknowledged in {timeout}s")
        failures: list[tuple[_Send, BaseException]] = []
        for s in group:
            exc = _failure(s.fut)
            if exc is None:
                s.acked = True
            else:
                failures.append((s, exc))
        # Records sent alone, in their order; the first refusal stops the rest, so the order on a partition holds.
        for s in (s for s in todo if s.solo):
            if s.fut is None or _failure(s.fut) is not None:
                await self._send(s)
            assert s.fut is not None
            _, pending = await asyncio.wait([s.fut], timeout=timeout)
            if pending:
                raise _ProduceTimeout(f"a produce request not acknowledged in {timeout}s")
            exc = _failure(s.fut)
            if exc is not None:
                failures.append((s, exc))
                break
            s.acked = True
        return failures

    def _after_size_refusals(self, b: _Batch, refused: Sequence[_Send]) -> None:
        """A refusal shared by several records (one producer batch) may be one record's fault: each is sent alone
        first; a record refused alone is trimmed one level further."""
        alone = len(refused) == 1
        for s in refused:
            s.fut = None
            if s.solo or alone:
                nxt = s.outcome.trimmed()
                if nxt is None:
                    self._dropped(s.outcome)
                    s.acked = True  # nothing more can be done: counted, logged, and never blocking the partition
                    continue
                s.outcome = nxt
                self._trimmed(nxt)
            s.solo = True

    async def _produce(self, b: _Batch) -> None:
        assert b.sends is not None
        while True:
            failures = await self._send_all(b.sends)
            if not failures:
                self._kafka_error = None
                return
            # a failed produce may leave the idempotent producer's sequence numbers out of step: start a new one
            await self._reset_producer()
            refused = [s for s, exc in failures if _too_large(exc)]
            if refused:
                self._after_size_refusals(b, refused)
            others = [exc for _, exc in failures if not _too_large(exc)]
            for s, _ in failures:
                s.fut = None
            if others:
                exc = others[0]
                if isinstance(exc, KafkaError):
                    raise exc
                raise KafkaError(_describe(exc))

    async def _produce_transaction(self, b: _Batch) -> None:
        assert b.sends is not None
        group_id = self.settings.kafka.group_id
        while True:
            producer = await self._ensure_producer()
            open_lowest = merge_lowest(self._holds.lowest(), lowest_offsets(p for p, _ in b.held))
            offsets = self._assigned_only(self._watermarks.committable(open_lowest))
            if not b.sends and not offsets:
                return  # held lines decided again and held again: nothing to write
            for s in b.sends:
                s.acked, s.fut = False, None
            try:
                await producer.begin_transaction()
                failures = await self._send_all(b.sends)
                if failures:
                    raise _TransactionFailed(failures)
                if offsets:
                    await asyncio.wait_for(
                        producer.send_offsets_to_transaction({_tp(tp): off for tp, off in offsets.items()}, group_id),
                        timeout=self.settings.kafka.request_timeout_ms / 1000,
                    )
                await asyncio.wait_for(
                    producer.commit_transaction(), timeout=self.settings.kafka.request_timeout_ms / 1000
                )
            except ProducerFenced:
                raise
            except _TransactionFailed as failed:
                await self._abort_and_reset()
                refused = [s for s, exc in failed.failures if _too_large(exc)]
                if refused:
                    self._after_size_refusals(b, refused)
                others = [exc for _, exc in failed.failures if not _too_large(exc)]
                if others:
                    first = others[0]
                    raise (first if isinstance(first, KafkaError) else KafkaError(_describe(first))) from None
                continue
            except (KafkaError, _ProduceTimeout, TimeoutError) as exc:
                await self._abort_and_reset()
                if isinstance(exc, TimeoutError):
                    raise _ProduceTimeout("the transaction did not complete in time") from exc
                raise
            self._watermarks.committed(offsets)
            self._committed_gauges(offsets)
            self._kafka_error = None
            return

    async def _abort_and_reset(self) -> None:
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._producer.abort_transaction(), timeout=5.0)
        await self._reset_producer()

    async def _reset_producer(self) -> None:
        """Replace the producer (a fresh producer id: sequence numbers in step again; a transactional one fences
        its predecessor). Sends still in flight on the old one are sent again by the next attempt."""
        old = self._producer
        self._producer = None
        if old is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(old.stop(), timeout=5.0)
        await self._ensure_producer()

    async def _ensure_producer(self) -> AIOKafkaProducer:
        """The producer, started (a new one when the last reset could not start one)."""
        if self._producer is not None:
            return self._producer
        producer = make_producer(self.settings.kafka, max_batch_size=self._max_batch_size)
        try:
            await producer.start()
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.stop(), timeout=5.0)
            raise
        self._producer = producer
        return producer

    # ------------------------------------------------------------------------------------------------ finish, commit

    def _finish(self, b: _Batch) -> None:
        now = self._clock()
        self._holds.hold(b.held, now, self._hold_seconds)
        m = self.metrics
        decided: dict[str, list[Any]] = {}  # route -> [lines decided now, reasons of those dead-lettered]
        child = self._child
        for s in b.sends or ():
            if s.acked:
                child(m.outcomes, s.route, s.outcome.kind.value).inc()
        for p, d in b.done:
            rt = self._routes[p.route]
            name = p.route
            typ = d.message.type if d.message is not None else "none"
            dry = rt.targets.dry_run
            dead = d.verdict is Verdict.DEAD_LETTER
            verdict = Verdict.FORWARD.value if dead and dry else d.verdict.value
            child(m.lines, name, typ, verdict).inc()
            child(m.line_seconds, name).observe(max(0.0, now - p.first_seen))
            reason = d.reason.value if d.reason is not None else "none"
            if d.repeated:
                child(m.repeated, name).inc()
            if dead and dry:
                child(m.would_dead_letter, name, reason).inc()
            elif dead:
                child(m.dead_letters, name, reason).inc()
            if d.alerts:
                child(m.alerts, name, reason).inc()
            if not d.repeated:
                for pr in d.problems:
                    if pr.code in HANDOFF_PROBLEM_CODES:
                        m.handoff_problems.labels(route=name, code=pr.code).inc()
                if d.reason is Reason.INTERNAL_ERROR:
                    m.internal_errors.labels(route=name, stage="decide").inc()
                counted = decided.setdefault(name, [0, []])
                counted[0] += 1
                if dead:
                    counted[1].append(reason)
            if p.forced is not None:
                m.holds_forced.labels(route=name, bound=p.forced).inc()
            if dead or d.alerts:
                self._log_decision(p, d, rt, dry)
        for name, (n, dead_reasons) in decided.items():
            self._breaker_changed(name, self._routes[name].breaker.record(now, n, dead_reasons), now)
        self._gauge_held()

    def _child(self, metric: Any, *labels: str) -> Any:
        """A metric's child for these label values, kept: ``labels()`` costs a lock and a lookup per call, and a
        batch counts every line. Label values come from closed sets, so the cache stays small."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def _log_decision(self, p: Pending, d: Decision, rt: _Route, dry: bool) -> None:
        level = logging.WARNING if d.alerts else logging.INFO
        what = "alert" if d.alerts and d.verdict is not Verdict.DEAD_LETTER else "dead-letter"
        if dry and d.verdict is Verdict.DEAD_LETTER:
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

    def _assigned_only(self, offsets: Mapping[TP, int]) -> dict[TP, int]:
        if self._consumer is None:
            return {}
        assigned = {(tp.topic, tp.partition) for tp in self._consumer.assignment()}
        return {tp: off for tp, off in offsets.items() if tp in assigned}

    async def _commit(self, tps: Iterable[TP] | None = None, *, force: bool = False) -> bool:
        """Commit the watermark of every partition (or ``tps``) that moved, at most every
        ``kafka.commit_interval_ms`` unless ``force`` (a revocation, the shutdown). False when the commit failed."""
        if self.settings.kafka.transactional or self._consumer is None:
            return True
        now = time.monotonic()
        if not force and now - self._last_commit < self.settings.kafka.commit_interval_ms / 1000:
            return True
        self._last_commit = now
        in_flight = lowest_offsets(self._batch.lines) if self._batch is not None else {}
        offsets = self._assigned_only(self._watermarks.committable(merge_lowest(self._holds.lowest(), in_flight), tps))
        if not offsets:
            return True
        try:
            await asyncio.wait_for(
                self._consumer.commit({_tp(tp): off for tp, off in offsets.items()}),
                timeout=self.settings.kafka.request_timeout_ms / 1000,
            )
        except CommitFailedError as exc:
            self.metrics.kafka_errors.labels(operation="commit").inc()
            log.warning("commit refused: the group rebalanced", extra={"error": _describe(exc)})
            return False
        except (KafkaError, TimeoutError) as exc:
            self.metrics.kafka_errors.labels(operation="commit").inc()
            self._kafka_failed("commit", exc)
            return False
        self._watermarks.committed(offsets)
        self._committed_gauges(offsets)
        return True

    def _committed_gauges(self, offsets: Mapping[TP, int]) -> None:
        for (topic, partition), off in offsets.items():
            self.metrics.committed.labels(topic=topic, partition=str(partition)).set(off)

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
                await self._commit(tps, force=True)
                b = self._batch  # a batch waiting for its retry: the revoked partitions' lines are not ours now
                if b is not None and any(p.tp in tps for p in b.lines):
                    keep = [p for p in b.lines if p.tp not in tps]
                    self._batch = _Batch(keep) if keep else None
                    if self._batch is None:
                        # nothing left to retry (a fenced batch ends here: the revocation it waited for came), so
                        # nothing may stay paused for it; a service still down is found by the next batch
                        self._failures = 0
                        self._fenced = None
                        self._resume("backoff")
            dropped = self._holds.drop(tps)
            self._watermarks.forget(tps)
            for topic, partition in tps:
                if topic in self._routes:
                    self._routes[topic].processor.epochs.pop(partition, None)
            for topic, partition in tps:
                self.metrics.forget_partition(topic, partition)
            self._assigned -= tps
            self.metrics.assigned.set(len(self._assigned))
            self._gauge_held()
            log.info("partitions revoked", extra={"partitions": len(tps), "held_dropped": len(dropped)})
        finally:
            if locked:
                self._lock.release()

    async def _take_epochs(self) -> None:
        """Take the owner epoch of every assigned partition that has none yet (one round trip per route). Raises
        ``StoreError``: the batch waits, its writes are never made unfenced."""
        pending = self._unfenced & self._assigned
        by_route: dict[str, list[int]] = {}
        for topic, partition in pending:
            if topic in self._routes:
                by_route.setdefault(topic, []).append(partition)
        for name, parts in by_route.items():
            epochs = await self._store.take_epochs(name, parts)
            self._routes[name].processor.epochs.update(epochs)
            self._unfenced -= {(name, p) for p in parts}
            log.info("owner epochs taken", extra={"route": name, "epochs": {str(p): e for p, e in epochs.items()}})
        self._unfenced &= self._assigned

    def _epochs(self) -> dict[tuple[str, int], int]:
        return {(name, p): e for name, rt in self._routes.items() for p, e in rt.processor.epochs.items()}

    async def _on_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        tps = list(assigned)
        self._assigned = {(tp.topic, tp.partition) for tp in tps}
        for name, rt in self._routes.items():  # a partition given back to us gets a new epoch: the old one is stale
            for p in [p for p in rt.processor.epochs if (name, p) in self._assigned]:
                del rt.processor.epochs[p]
        self._unfenced = set(self._assigned)
        try:  # bounded: a slow Redis must not hold the group's rebalance up
            await asyncio.wait_for(self._take_epochs(), timeout=2.0)
        except (StoreError, TimeoutError) as exc:  # taken before the first batch of those partitions instead
            log.warning("owner epochs not taken at assignment; retried", extra={"error": _describe(exc)})
        self._joined = True
        self.metrics.assigned.set(len(self._assigned))
        if tps:
            self._apply_pauses()
        self._update_ready()
        log.info("partitions assigned", extra={"partitions": len(tps)})

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
            extra={"error": _describe(exc), "attempt": self._failures, "lines": lines},
        )

    def _kafka_failed(self, operation: str, exc: BaseException) -> None:
        self._kafka_error = f"{operation}: {_describe(exc)}"
        self._update_ready()

    def _recovered(self) -> None:
        if self._failures:
            log.info("recovered", extra={"after_attempts": self._failures})
        self._failures = 0
        self._fenced = None
        self._redis_error = None
        self._kafka_error = None
        self._resume("backoff")
        self._update_ready()

    def _pause(self, why: str) -> None:
        self._paused_for.add(why)
        self._apply_pauses()

    def _resume(self, why: str) -> None:
        if why not in self._paused_for:
            return
        self._paused_for.discard(why)
        self._apply_pauses()

    def _apply_pauses(self) -> None:
        """Pause every partition while an infrastructure reason holds, else only those of the routes paused alone;
        resume the rest."""
        if self._consumer is None:
            return
        assigned = self._consumer.assignment()
        stop = set(assigned) if self._paused_for else {tp for tp in assigned if tp.topic in self._routes_paused}
        if stop:
            self._consumer.pause(*stop)
        go = [tp for tp in self._consumer.paused() if tp not in stop]
        if go:
            self._consumer.resume(*go)

    # ------------------------------------------------------------------------------------------------ the breaker

    def _breaker_changed(self, name: str, change: Change | None, now: float) -> None:
        rt = self._routes[name]
        w = rt.breaker.window(now)
        self.metrics.dead_letter_ratio.labels(route=name).set(w.ratio)
        if change is None:
            return
        s = rt.config.dead_letter_breaker
        if change is Change.TRIPPED:
            self.metrics.breaker_trips.labels(route=name).inc()
            self.metrics.breaker_open.labels(route=name).set(1)
            # a dry-run route is a shadow: its lines are forwarded anyway, so it is alerted, never paused
            pause = s.action == "pause" and not rt.targets.dry_run
            action = "paused" if pause else "alerted"
            log.error(
                "dead-letter flood: the breaker tripped",
                extra={"route": name, "ratio": round(w.ratio, 3), "lines": w.lines, "action": action},
            )
            if pause:
                self._routes_paused.add(name)
                self._apply_pauses()
            doc = {
                "alert": FLOOD_ALERT,
                "author": "gatekeeper",
                "action": action,
                "route": name,
                "ratio": round(w.ratio, 4),
                "threshold": s.ratio,
                "window_seconds": s.window_seconds,
                "lines": w.lines,
                "dead_letters": w.dead,
                "reasons": dict(sorted(w.reasons.items(), key=lambda kv: -kv[1])),
                "pause_seconds": s.pause_seconds if pause else None,
                "dry_run": rt.targets.dry_run,
                "at": iso(now),
                "version": __version__,
            }
            self._pending_alerts.append(
                OutRecord(
                    rt.config.alerts,
                    name.encode("utf-8"),
                    json.dumps(doc, separators=(",", ":")).encode("utf-8"),
                    (("gk.author", b"gatekeeper"), ("gk.version", __version__.encode())),
                )
            )
        else:
            self.metrics.breaker_open.labels(route=name).set(0)
            log.warning("dead-letter flood over: the breaker closed", extra={"route": name, "ratio": w.ratio})
            if name in self._routes_paused:
                self._routes_paused.discard(name)
                self._apply_pauses()
        self._update_ready()

    async def _publish_alerts(self) -> None:
        """Publish the breaker's alerts (at least once: one that fails is tried again at the next housekeeping)."""
        if not self._pending_alerts:
            return
        try:
            await self._publisher.publish(self._pending_alerts)
            self._pending_alerts.clear()
        except (KafkaError, TimeoutError) as exc:
            self.metrics.kafka_errors.labels(operation="produce").inc()
            log.warning("an alert could not be published; tried again later", extra={"error": _describe(exc)})

    async def _backoff_wait(self) -> None:
        """Wait before retrying the current batch, polling the (paused) consumer so the group keeps this member."""
        assert self._consumer is not None
        deadline = time.monotonic() + self._backoff(self._failures)
        while not self._stop.is_set():
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
                self._consumer.pause(*self._consumer.assignment())
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
        wall = self._clock()
        for name, rt in self._routes.items():
            if rt.breaker.open:
                self._breaker_changed(name, rt.breaker.evaluate(wall), wall)
        await self._publish_alerts()
        now = time.monotonic()
        if now >= self._next_probe:
            self._next_probe = now + PROBE_INTERVAL
            await self._probe()
        if now >= self._next_lag:
            self._next_lag = now + LAG_INTERVAL
            self._gauge_lag()

    async def _probe(self) -> None:
        try:
            await asyncio.wait_for(self.store.ping(), timeout=2.0)
            self._redis_error = None
        except (StoreError, TimeoutError) as exc:
            self.metrics.redis_errors.inc()
            self._redis_error = _describe(exc)
        if self._producer is not None:
            try:
                await asyncio.wait_for(self._producer.client.fetch_all_metadata(), timeout=5.0)
                if self._kafka_error is not None and self._batch is None:
                    self._kafka_error = None
            except (KafkaError, TimeoutError) as exc:
                self.metrics.kafka_errors.labels(operation="metadata").inc()
                self._kafka_error = f"metadata: {_describe(exc)}"
        self._update_ready()

    def _gauge_lag(self) -> None:
        if self._consumer is None:
            return
        for tp in self._consumer.assignment():
            hw = self._consumer.highwater(tp)
            pos = self._watermarks.next_offset((tp.topic, tp.partition))
            if hw is not None and pos is not None:
                self.metrics.lag.labels(topic=tp.topic, partition=str(tp.partition)).set(max(0, hw - pos))

    def _gauge_held(self) -> None:
        pressure = set(self._holds.pressure(self._clock()))
        for name in self._routes:
            self.metrics.held_lines.labels(route=name).set(self._holds.count(name))
            self.metrics.hold_pressure.labels(route=name).set(1 if name in pressure else 0)

    def _update_ready(self) -> None:
        self.metrics.ready.set(1 if self.readiness()[0] else 0)

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
                rt.policy, rt.config.output, rt.config.alerts, dry_run=rt.targets.dry_run, sensitive=rt.sensitive
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

    async def _sweep_loop(self) -> None:
        """Every ``sweeper.interval_seconds``: one sweep of the partitions this instance holds."""
        interval = self.settings.sweeper.interval_seconds
        while not self._stop.is_set():
            await self._sleep(interval)
            if self._stop.is_set():
                return
            await self.sweep_now()

    async def sweep_now(self) -> SweepReport | None:
        """One sweep now, between batches (under the batch lock: a conversation's state has one writer at a time).
        None when there is no sweeper, the instance is not consuming yet, or the sweep failed (logged, counted, and
        tried again at the next interval)."""
        if self._sweeper is None or self._consumer is None or not self._started:
            return None
        async with self._lock:
            owned = [(topic, partition) for topic, partition in self._assigned if topic in self._routes]
            try:
                await self._take_epochs()
                return await self._sweeper.sweep(owned, now=self._clock(), epochs=self._epochs())
            except Fenced as exc:
                self.metrics.fenced.inc()
                log.warning(
                    "sweep refused: a newer owner holds a partition; tried again later", extra={"error": str(exc)}
                )
            except StoreError as exc:
                self.metrics.redis_errors.inc()
                log.warning("sweep failed: redis unavailable; tried again later", extra={"error": _describe(exc)})
            except (KafkaError, TimeoutError) as exc:
                self.metrics.kafka_errors.labels(operation="sweep").inc()
                log.warning("sweep failed: kafka unavailable; tried again later", extra={"error": _describe(exc)})
            except Exception:
                log.exception("the sweep failed; tried again later")
        return None

    async def _stop_sweeper(self) -> None:
        """The sweeper's two-stage stop: the stop event ends its loop between sweeps; a sweep in progress drains up
        to ``grace_seconds``, then is cancelled (safe at any point: the cancel intents of ``gatekeeper.sweeper``)."""
        task, self._sweep_task = self._sweep_task, None
        if task is None:
            return
        if not task.done():
            done, _ = await asyncio.wait({task}, timeout=self.settings.grace_seconds)
            if not done:
                log.warning("grace period over: cancelling the sweep in progress")
                task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task

    # ------------------------------------------------------------------------------------------------ shutdown

    async def _shutdown(self) -> None:
        self._stop.set()
        self._update_ready()
        try:
            if self._consumer is not None and self._started:
                async with self._lock:
                    await self._commit(force=True)
        except Exception as exc:
            log.warning("final commit failed", extra={"error": _describe(exc)})
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


class _TransactionFailed(Exception):
    def __init__(self, failures: list[tuple[_Send, BaseException]]) -> None:
        super().__init__(f"{len(failures)} outcomes refused")
        self.failures = failures


__all__ = [
    "FatalError",
    "Gatekeeper",
    "GatekeeperError",
    "Unavailable",
    "conversation_of",
    "route_policy",
]
