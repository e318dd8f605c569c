"""The worker's own alerts: a dead-letter flood (the breaker tripped) and Redis that lost its data.

    alerts = Alerts(publisher, metrics)
    alerts.queue(route_config, flood_alert(name, window, breaker_settings, action="paused", dry_run=False, now=now))
    await alerts.publish()      # between batches; at least once: what fails is tried again the next time

An alert is a JSON object on the route's alerts topic, keyed by the route's input topic, with the headers
``gk.author: gatekeeper`` and ``gk.version``; the documents are built by the pure functions here. (A line's own alerts,
``check-dn`` and the like, are outcomes of its batch: ``gatekeeper.consumers.outcomes``.)
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from aiokafka.errors import KafkaError

from gatekeeper import __version__
from gatekeeper.config import BreakerSettings, Route
from gatekeeper.consumers.breaker import Window
from gatekeeper.consumers.outcomes import iso
from gatekeeper.consumers.sending import describe
from gatekeeper.metrics import Metrics
from gatekeeper.store import DataLost
from gatekeeper.sweeper import OutRecord, Publisher

log = logging.getLogger("gatekeeper.consumers.loop")

FLOOD_ALERT = "dead-letter-flood"  # the alert a tripped dead-letter breaker raises
DATA_LOST_ALERT = "redis-data-lost"  # the alert raised when Redis lost its data (the generation marker)
_HEADERS = (("gk.author", b"gatekeeper"), ("gk.version", __version__.encode()))


def flood_alert(route: str, w: Window, s: BreakerSettings, *, action: str, dry_run: bool, now: float) -> dict[str, Any]:
    """The ``dead-letter-flood`` document: the window that tripped the breaker and what was done (``paused``,
    ``alerted``)."""
    return {
        "alert": FLOOD_ALERT,
        "author": "gatekeeper",
        "action": action,
        "route": route,
        "ratio": round(w.ratio, 4),
        "threshold": s.ratio,
        "window_seconds": s.window_seconds,
        "lines": w.lines,
        "dead_letters": w.dead,
        "reasons": dict(sorted(w.reasons.items(), key=lambda kv: -kv[1])),
        "pause_seconds": s.pause_seconds if action == "paused" else None,
        "dry_run": dry_run,
        "at": iso(now),
        "version": __version__,
    }


def data_lost_alert(route: str, exc: DataLost, *, now: float) -> dict[str, Any]:
    """The ``redis-data-lost`` document: the generation marker expected and the one found."""
    return {
        "alert": DATA_LOST_ALERT,
        "author": "gatekeeper",
        "action": "paused",
        "route": route,
        "error": describe(exc),
        "expected_generation": exc.expected,
        "found_generation": exc.found,
        "at": iso(now),
        "version": __version__,
    }


class Alerts:
    """The alerts waiting to be published, in order."""

    def __init__(self, publisher: Publisher, metrics: Metrics) -> None:
        self._publisher = publisher
        self._metrics = metrics
        self.pending: list[OutRecord] = []

    def queue(self, route: Route, doc: dict[str, Any]) -> None:
        self.pending.append(OutRecord(route.alerts, route.input.encode("utf-8"), orjson.dumps(doc), _HEADERS))

    async def publish(self) -> None:
        """Publish what waits (at least once: a failure is logged, counted and tried again the next time)."""
        if not self.pending:
            return
        try:
            await self._publisher.publish(self.pending)
            self.pending.clear()
        except (KafkaError, TimeoutError) as exc:
            self._metrics.kafka_errors.labels(operation="produce").inc()
            log.warning("an alert could not be published; tried again later", extra={"error": describe(exc)})


__all__ = ["DATA_LOST_ALERT", "FLOOD_ALERT", "Alerts", "data_lost_alert", "flood_alert"]
