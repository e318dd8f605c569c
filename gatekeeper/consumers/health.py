"""Health: what ``/readyz`` and ``/healthz`` answer, and the lag gauges.

**Ready** (``/readyz``) means Kafka and Redis answer, no write of this instance was fenced, the consumer group
is joined, and Redis still holds the data this instance started on (its generation marker; "redis lost its data"
otherwise, until an operator acts). The probe (``probe``) runs in a task of its own every second, each service
bounded (a Redis PING 2 s, a Kafka metadata request 3 s), so a stuck batch does not hide a paused Redis or a
stopped broker.
Not ready takes the instance out of a load balancer's rotation; nothing restarts.

**Alive** (``/healthz``) means the work loop turns: it fails when the loop has not turned for
``http.stall_seconds`` while assigned partitions have records not finished (lag). A client's heartbeats run in a
task of their own, so a loop stuck on a call that never returns still looks like a member to the group; only a
restart cures that. A loop that turns while it retries an unavailable Kafka or Redis is alive: a restart would not
bring the service back, and ``/readyz`` already says why. It also fails when the worker's event loop itself has not
run for ``http.stall_seconds`` (blocked or starved): the HTTP port is served by a process of its own
(``gatekeeper.http_process``), from what the worker's loop last published.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from gatekeeper.consumers.client import Consumer, Kafka, Producer
from gatekeeper.consumers.holds import TP, Watermarks
from gatekeeper.consumers.sending import describe
from gatekeeper.metrics import Metrics
from gatekeeper.store import DataLost, StoreError

PROBE_INTERVAL = 1.0  # how often the probe task checks that Kafka and Redis still answer (readiness)
PUBLISH_INTERVAL = 0.2  # how often the worker's loop publishes what the probes answer (``http_process``)
REDIS_PROBE_TIMEOUT = 2.0  # a PING (and the generation marker) not answered within this: not ready
KAFKA_PROBE_TIMEOUT = 3.0  # a metadata request not answered within this: not ready


@dataclass(slots=True)
class Health:
    """The worker's view of its services, set as it goes."""

    started: bool = False  # Kafka and Redis answered at startup
    joined: bool = False  # the group assigned partitions (or none to assign)
    data_lost: str | None = None  # Redis lost its data (the generation marker): never cleared by itself
    redis_error: str | None = None
    kafka_error: str | None = None
    fenced: str | None = None  # why the last batch was refused
    running: bool = False  # the work loop runs
    turned: float = field(default_factory=time.monotonic)  # when the work loop last turned

    def turn(self) -> None:
        self.turned = time.monotonic()

    def not_ready(self) -> dict[str, Any] | None:
        """Why the instance is not ready, or None."""
        if not self.started:
            return {"reason": "starting: connecting to Kafka and Redis"}
        if self.data_lost is not None:
            return {"reason": "redis lost its data", "error": self.data_lost}
        if self.redis_error is not None:
            return {"reason": "redis unavailable", "error": self.redis_error}
        if self.kafka_error is not None:
            return {"reason": "kafka unavailable", "error": self.kafka_error}
        if self.fenced is not None:
            return {"reason": "fenced: a newer owner holds a partition of the batch", "error": self.fenced}
        if not self.joined:
            return {"reason": "consumer group not joined yet"}
        return None

    def stalled_for(self) -> float:
        """Seconds since the work loop last turned, while it runs (0 otherwise)."""
        return max(0.0, time.monotonic() - self.turned) if self.running else 0.0

    def liveness(self, stall_seconds: float, lagging: Callable[[], list[str]]) -> tuple[bool, dict[str, Any]]:
        stalled = self.stalled_for()
        if stall_seconds <= 0 or stalled < stall_seconds:
            return True, {}
        behind = lagging()
        if not behind:
            return True, {}
        return False, {
            "reason": "the work loop has not turned while partitions have lag",
            "stalled_seconds": round(stalled, 1),
            "stall_seconds": stall_seconds,
            "lagging": behind[:20],
        }


async def probe(
    health: Health,
    ping: Callable[[], Awaitable[bool]],
    kafka: Kafka,
    producer: Producer | None,
    metrics: Metrics,
    *,
    keep_redis_error: bool,
    keep_kafka_error: bool,
) -> DataLost | None:
    """Probe Redis (``ping``: a PING that also reads the generation marker) and Kafka (a metadata request on the
    running ``producer``), each bounded, and set ``health``'s errors; an error the worker's batch met stands while
    that batch is retried (``keep_*_error``: an answered probe does not clear it). Returns the ``DataLost`` the ping
    raised, for the worker to act on."""
    lost = None
    try:
        await asyncio.wait_for(ping(), timeout=REDIS_PROBE_TIMEOUT)
        if not keep_redis_error:
            health.redis_error = None
        metrics.last_success.labels(service="redis").set(time.time())
    except DataLost as exc:
        lost = exc
    except (StoreError, TimeoutError) as exc:
        metrics.redis_errors.inc()
        if isinstance(exc, TimeoutError):
            exc = StoreError(f"redis did not answer a PING within {REDIS_PROBE_TIMEOUT:g}s")
        health.redis_error = describe(exc)
    if producer is not None:
        try:
            await asyncio.wait_for(kafka.probe(producer), timeout=KAFKA_PROBE_TIMEOUT)
            metrics.last_success.labels(service="kafka").set(time.time())
            if health.kafka_error is not None and not keep_kafka_error:
                health.kafka_error = None
        except (KafkaError, TimeoutError) as exc:
            metrics.kafka_errors.labels(operation="metadata").inc()
            if isinstance(exc, TimeoutError):
                health.kafka_error = f"metadata: no answer within {KAFKA_PROBE_TIMEOUT:g}s"
            else:
                health.kafka_error = f"metadata: {describe(exc)}"
    return lost


def lagging(consumer: Consumer | None, assigned: Iterable[TP], watermarks: Watermarks) -> list[str]:
    """The assigned partitions whose committed offset is behind the high watermark (records not consumed yet, or
    consumed and not finished: in flight or held), as ``topic/partition``."""
    if consumer is None:
        return []
    out = []
    for tp in assigned:
        hw = consumer.highwater(TopicPartition(*tp))
        if hw is None:
            continue
        done = watermarks.last_committed(tp)
        if done is None:
            done = watermarks.next_offset(tp)
        if hw > (done or 0):
            out.append(f"{tp[0]}/{tp[1]}")
    return sorted(out)


def gauge_lag(consumer: Consumer | None, watermarks: Watermarks, metrics: Metrics) -> None:
    """``gatekeeper_consumer_lag``: per assigned partition, the high watermark minus the read position."""
    if consumer is None:
        return
    for tp in consumer.assignment():
        hw = consumer.highwater(tp)
        pos = watermarks.next_offset((tp.topic, tp.partition))
        if hw is not None and pos is not None:
            metrics.lag.labels(topic=tp.topic, partition=str(tp.partition)).set(max(0, hw - pos))


__all__ = ["KAFKA_PROBE_TIMEOUT", "PROBE_INTERVAL", "REDIS_PROBE_TIMEOUT", "Health", "gauge_lag", "lagging", "probe"]
