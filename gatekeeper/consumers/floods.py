"""What the worker does about a dead-letter flood: each route's breaker (``consumers.breaker``, pure) hears of every
batch, and when it trips or closes the worker counts it, logs it, raises the ``dead-letter-flood`` alert and, with
``action: pause``, stops consuming the route's partitions until it closes (a dry-run route is a shadow: alerted,
never paused). The gauge of each route's dead-lettered share follows every batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from gatekeeper.consumers.alerting import Alerts, flood_alert
from gatekeeper.consumers.breaker import Change
from gatekeeper.consumers.deciding import RouteRuntime
from gatekeeper.consumers.pausing import Pauses
from gatekeeper.metrics import Metrics

log = logging.getLogger("gatekeeper.consumers.loop")  # the worker's logger: operators filter on it


class Floods:
    """The routes' breakers and the worker's reactions to them. ``apply_pauses`` pauses and resumes the consumer's
    partitions as ``pauses`` now says."""

    def __init__(
        self,
        routes: Mapping[str, RouteRuntime],
        metrics: Metrics,
        pauses: Pauses,
        alerts: Alerts,
        apply_pauses: Callable[[], None],
    ) -> None:
        self._routes = routes
        self._metrics = metrics
        self._pauses = pauses
        self._alerts = alerts
        self._apply_pauses = apply_pauses

    def heard(self, decided: Mapping[str, tuple[int, list[str]]], now: float) -> bool:
        """A finished batch: per route, the lines decided now and the reasons of those dead-lettered
        (``accounting.account``). True when a breaker tripped or closed (readiness may have changed)."""
        changed = False
        for name, (n, dead_reasons) in decided.items():
            changed |= self._react(name, self._routes[name].breaker.record(now, n, dead_reasons), now)
        return changed

    def evaluate(self, now: float) -> bool:
        """Between batches: an open breaker whose window has drained closes (its route resumes). True when one
        closed."""
        changed = False
        for name, rt in self._routes.items():
            if rt.breaker.open:
                changed |= self._react(name, rt.breaker.evaluate(now), now)
        return changed

    def _react(self, name: str, change: Change | None, now: float) -> bool:
        rt = self._routes[name]
        m = self._metrics
        w = rt.breaker.window(now)
        m.dead_letter_ratio.labels(route=name).set(w.ratio)
        if change is None:
            return False
        s = rt.config.dead_letter_breaker
        if change is Change.TRIPPED:
            m.breaker_trips.labels(route=name).inc()
            m.breaker_open.labels(route=name).set(1)
            pause = s.action == "pause" and not rt.targets.dry_run
            action = "paused" if pause else "alerted"
            log.error(
                "dead-letter flood: the breaker tripped",
                extra={"route": name, "ratio": round(w.ratio, 3), "lines": w.lines, "action": action},
            )
            if pause:
                self._pauses.routes.add(name)
                self._apply_pauses()
            self._alerts.queue(rt.config, flood_alert(name, w, s, action=action, dry_run=rt.targets.dry_run, now=now))
        else:
            m.breaker_open.labels(route=name).set(0)
            log.warning("dead-letter flood over: the breaker closed", extra={"route": name, "ratio": w.ratio})
            if name in self._pauses.routes:
                self._pauses.routes.discard(name)
                self._apply_pauses()
        return True


__all__ = ["Floods"]
