"""Sending outcomes: the one produce path of the daemon, the sweeper and ``gatekeeper replay``.

    sender = OutcomeSender(kafka, settings.kafka, metrics)      # kafka: the seam (gatekeeper.consumers.client)
    await sender.start(output_topics)                          # reads the topics' max.message.bytes, starts
    fitted = sender.fit(outcome)                               # trimmed to fit its topic (None: it never fits)
    sends = [Send(fitted, route)]
    await sender.produce(sends)                                # every one acknowledged, or raises
    await sender.produce_transaction(sends, offsets, group_id) # exactly-once: outcomes and offsets in one transaction
    await sender.publish(records)                              # the sweeper's cancels and the alerts, in order
    await sender.close()

**Acknowledged or raised.** ``produce`` returns when every send is acknowledged (``Send.acked``, ``Send.meta``). A
send still in flight from an earlier attempt is waited for, not repeated. Acknowledgements that do not come within
``kafka.request_timeout_ms`` raise ``ProduceTimeout`` (the sends stay in flight: the retry waits for them rather
than sending them twice); a broker error raises ``KafkaError`` after the producer is replaced (an idempotent
producer's sequence numbers may be out of step after a failure). The caller retries the same sends later: what was
acknowledged is not sent again.

**Too large is the line's fault, never the partition's.** An outcome is trimmed before it is sent when its topic's
``max.message.bytes`` is known (``fit``), and after a refusal otherwise: a refusal shared by several records (one
producer batch) may be one record's fault, so each is sent alone, in order; a record refused alone is trimmed one
level further (``Outcome.trimmed``); one that does not fit even trimmed to its coordinates is dropped, logged and
counted (``gatekeeper_outcomes_trimmed_total{kind="dropped"}``) and never blocks its partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError, MessageSizeTooLargeError, ProducerFenced, RecordTooLargeError

from gatekeeper.config import KafkaSettings
from gatekeeper.consumers.client import Kafka, Producer
from gatekeeper.consumers.holds import TP
from gatekeeper.consumers.kafka import DEFAULT_MAX_MESSAGE_BYTES
from gatekeeper.consumers.outcomes import Outcome, fit
from gatekeeper.metrics import Metrics

log = logging.getLogger(__name__)


class ProduceTimeout(Exception):
    """Produce acknowledgements did not arrive within the request timeout (the broker is unavailable)."""


@dataclass(slots=True, eq=False)
class Send:
    """One outcome on its way: acknowledged (``acked``, ``meta``: the broker's record metadata) or not yet."""

    outcome: Outcome
    route: str
    fut: asyncio.Future[Any] | None = None
    acked: bool = False
    solo: bool = False  # sent alone (after a size refusal shared with others)
    meta: Any = None


class Publishable(Protocol):
    """A record the gatekeeper publishes in its own name (``gatekeeper.sweeper.OutRecord``)."""

    @property
    def topic(self) -> str: ...

    @property
    def key(self) -> bytes: ...

    @property
    def value(self) -> bytes: ...

    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...

    @property
    def partition(self) -> int | None: ...


def too_large(exc: BaseException) -> bool:
    return isinstance(exc, MessageSizeTooLargeError | RecordTooLargeError)


def _failure(fut: asyncio.Future[Any] | None) -> BaseException | None:
    """The exception of a completed produce future (None: acknowledged)."""
    assert fut is not None and fut.done()
    if fut.cancelled():
        return asyncio.CancelledError()
    return fut.exception()


def describe(exc: BaseException) -> str:
    name, text = type(exc).__name__, str(exc)
    if not text:
        return name
    return text if text.startswith(name) else f"{name}: {text}"


class _TransactionFailed(Exception):
    def __init__(self, failures: list[tuple[Send, BaseException]]) -> None:
        super().__init__(f"{len(failures)} outcomes refused")
        self.failures = failures


class OutcomeSender:
    """The producer, its topics' limits and the trimming. ``transactional=False`` makes an idempotent producer even
    when ``kafka.transactional`` is set (replay: the daemon's transactional id is its own)."""

    def __init__(
        self,
        kafka: Kafka,
        settings: KafkaSettings,
        metrics: Metrics,
        *,
        transactional: bool | None = None,
    ) -> None:
        self.kafka = kafka
        self.settings = settings
        self.metrics = metrics
        self.transactional = settings.transactional if transactional is None else transactional
        self.limits: dict[str, int] = {}
        self.max_batch_size = 16384
        self.timeout = settings.request_timeout_ms / 1000
        self._producer: Producer | None = None

    # ------------------------------------------------------------------------------------------------ lifecycle

    async def start(self, topics: Iterable[str]) -> None:
        """Read the topics' ``max.message.bytes`` (best effort) and start the producer, its batches no larger than
        the smallest limit."""
        wanted = set(topics)
        self.limits = await self.kafka.topic_limits(wanted)
        missing = sorted(wanted - set(self.limits))
        if missing:
            log.warning("output topics not described (missing?)", extra={"topics": missing})
        smallest = min([*self.limits.values(), DEFAULT_MAX_MESSAGE_BYTES])
        self.max_batch_size = max(1024, min(16384, smallest - 128))
        await self.producer()

    async def producer(self) -> Producer:
        """The producer, started (a new one when the last reset could not start one)."""
        if self._producer is not None:
            return self._producer
        producer = self.kafka.producer(max_batch_size=self.max_batch_size, transactional=self.transactional)
        try:
            await asyncio.wait_for(producer.start(), self.timeout)
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.stop(), timeout=5.0)
            raise
        self._producer = producer
        return producer

    @property
    def started(self) -> Producer | None:
        """The producer if one is running (no new one is made)."""
        return self._producer

    async def reset(self) -> None:
        """Replace the producer (a fresh producer id: sequence numbers in step again; a transactional one fences its
        predecessor). Sends in flight on the old one are sent again by the next attempt."""
        await self.close()
        await self.producer()

    async def close(self) -> None:
        old, self._producer = self._producer, None
        if old is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(old.stop(), timeout=10.0)

    # ------------------------------------------------------------------------------------------------ trimming

    def limit(self, topic: str) -> int:
        return min(self.limits.get(topic, DEFAULT_MAX_MESSAGE_BYTES), DEFAULT_MAX_MESSAGE_BYTES)

    def fit(self, outcome: Outcome, *, headroom: int = 0) -> Outcome | None:
        """Trim an outcome until it fits its topic's ``max.message.bytes`` (as far as the limit is known), less
        ``headroom`` bytes the caller adds after; None, logged and counted, when it does not fit even trimmed to its
        coordinates."""
        current = fit(outcome, self.limit(outcome.topic) - headroom)
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

    def _after_size_refusals(self, refused: Sequence[Send]) -> None:
        """A refusal shared by several records may be one record's fault: each is sent alone first; a record
        refused alone is trimmed one level further."""
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

    # ------------------------------------------------------------------------------------------------ sending

    async def _send(self, s: Send) -> None:
        producer = await self.producer()
        o = s.outcome
        try:
            s.fut = await producer.send(o.topic, o.value, key=o.key, headers=list(o.headers))
        except (MessageSizeTooLargeError, RecordTooLargeError) as exc:  # refused before it left
            fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            fut.set_exception(exc)
            s.fut = fut

    def _ack(self, s: Send) -> None:
        s.acked = True
        assert s.fut is not None
        s.meta = s.fut.result()

    async def _send_all(self, sends: Sequence[Send]) -> list[tuple[Send, BaseException]]:
        """Send what is not acknowledged yet and wait for the acknowledgements. Returns the failures; raises
        ``ProduceTimeout`` when the acknowledgements do not come within the request timeout."""
        todo = [s for s in sends if not s.acked]
        group = [s for s in todo if not s.solo]
        for s in group:
            if s.fut is None or (s.fut.done() and _failure(s.fut) is not None):
                await self._send(s)
        futs = [s.fut for s in group if s.fut is not None]
        if futs:
            _, pending = await asyncio.wait(futs, timeout=self.timeout)
            if pending:
                raise ProduceTimeout(
                    f"{len(pending)} of {len(futs)} produce requests not acknowledged in {self.timeout}s"
                )
        failures: list[tuple[Send, BaseException]] = []
        for s in group:
            exc = _failure(s.fut)
            if exc is None:
                self._ack(s)
            else:
                failures.append((s, exc))
        # Records sent alone, in their order; the first refusal stops the rest, so the order on a partition holds.
        for s in (s for s in todo if s.solo):
            if s.fut is None or _failure(s.fut) is not None:
                await self._send(s)
            assert s.fut is not None
            _, pending = await asyncio.wait([s.fut], timeout=self.timeout)
            if pending:
                raise ProduceTimeout(f"a produce request not acknowledged in {self.timeout}s")
            exc = _failure(s.fut)
            if exc is not None:
                failures.append((s, exc))
                break
            self._ack(s)
        return failures

    async def produce(self, sends: Sequence[Send]) -> None:
        """Send until every one is acknowledged (size refusals trimmed and sent again at once); raises
        ``KafkaError`` or ``ProduceTimeout`` for the caller to retry later."""
        while True:
            failures = await self._send_all(sends)  # a timeout raises: what is in flight is waited for next time
            if not failures:
                return
            # a failed produce may leave the idempotent producer's sequence numbers out of step: start a new one
            await self.reset()
            refused = [s for s, exc in failures if too_large(exc)]
            if refused:
                self._after_size_refusals(refused)
            others = [exc for _, exc in failures if not too_large(exc)]
            for s, _ in failures:
                s.fut = None
            if others:
                exc = others[0]
                if isinstance(exc, KafkaError):
                    raise exc
                raise KafkaError(describe(exc))

    async def produce_transaction(
        self, sends: Sequence[Send], offsets: Callable[[], Mapping[TP, int]], group_id: str
    ) -> dict[TP, int] | None:
        """Exactly-once: ``sends`` and the consumer offsets ``offsets()`` gives in one transaction. Returns the
        offsets committed with it (None: nothing to write). Size refusals abort, trim and try again."""
        while True:
            producer = await self.producer()
            committing = dict(offsets())
            if not sends and not committing:
                return None
            for s in sends:
                s.acked, s.fut = False, None
            try:
                await producer.begin_transaction()
                failures = await self._send_all(sends)
                if failures:
                    raise _TransactionFailed(failures)
                if committing:
                    await asyncio.wait_for(
                        producer.send_offsets_to_transaction(
                            {TopicPartition(t, p): off for (t, p), off in committing.items()}, group_id
                        ),
                        timeout=self.timeout,
                    )
                await asyncio.wait_for(producer.commit_transaction(), timeout=self.timeout)
            except ProducerFenced:
                raise
            except _TransactionFailed as failed:
                await self._abort_and_reset()
                refused = [s for s, exc in failed.failures if too_large(exc)]
                if refused:
                    self._after_size_refusals(refused)
                others = [exc for _, exc in failed.failures if not too_large(exc)]
                if others:
                    first = others[0]
                    raise (first if isinstance(first, KafkaError) else KafkaError(describe(first))) from None
                continue
            except (KafkaError, ProduceTimeout, TimeoutError) as exc:
                await self._abort_and_reset()
                if isinstance(exc, TimeoutError):
                    raise ProduceTimeout("the transaction did not complete in time") from exc
                raise
            return committing

    async def _abort_and_reset(self) -> None:
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._producer.abort_transaction(), timeout=5.0)
        await self.reset()

    async def publish(self, records: Sequence[Publishable]) -> list[int]:
        """Publish the gatekeeper's own records (in a transaction of their own when transactional) and wait until
        every one is acknowledged; their offsets, in order. Raises on failure, after replacing the producer (none,
        some or all may have been written: the sweeper's intents cover that)."""
        producer = await self.producer()
        try:
            if self.transactional:
                await producer.begin_transaction()
            futures = [
                await producer.send(r.topic, r.value, key=r.key, headers=list(r.headers), partition=r.partition)
                for r in records
            ]
            metas = [await asyncio.wait_for(f, self.timeout) for f in futures]
            if self.transactional:
                await asyncio.wait_for(producer.commit_transaction(), self.timeout)
        except BaseException:
            if self.transactional:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(producer.abort_transaction(), 5.0)
            with contextlib.suppress(Exception):
                await self.reset()
            raise
        return [int(m.offset) for m in metas]


__all__ = ["OutcomeSender", "ProduceTimeout", "Publishable", "Send", "describe", "too_large"]
