"""What the worker does when a route's dead-letter breaker trips or closes (``consumers.floods``): counted, logged,
alerted once, the route paused while it floods (``action: pause``) and resumed when it closes; a dry-run route is
alerted, never paused."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gatekeeper.config import BreakerSettings
from gatekeeper.consumers.breaker import DeadLetterBreaker
from gatekeeper.consumers.floods import Floods
from gatekeeper.consumers.pausing import Pauses
from gatekeeper.metrics import Metrics


@dataclass
class _Config:
    dead_letter_breaker: BreakerSettings


@dataclass
class _Targets:
    dry_run: bool


@dataclass
class _Route:
    config: _Config
    targets: _Targets
    breaker: DeadLetterBreaker


@dataclass
class _Alerts:
    queued: list[tuple[Any, dict[str, Any]]] = field(default_factory=list)

    def queue(self, config: Any, alert: dict[str, Any]) -> None:
        self.queued.append((config, alert))


def floods(action: str, dry_run: bool = False) -> tuple[Floods, Pauses, _Alerts, Metrics, list[int]]:
    s = BreakerSettings(ratio=0.5, window_seconds=10.0, min_lines=20, action=action, pause_seconds=30.0)  # type: ignore[arg-type]
    routes = {"agents.pay": _Route(_Config(s), _Targets(dry_run), DeadLetterBreaker(s))}
    pauses, alerts, metrics, applied = Pauses(), _Alerts(), Metrics(), []
    f = Floods(routes, metrics, pauses, alerts, lambda: applied.append(1))  # type: ignore[arg-type]
    return f, pauses, alerts, metrics, applied


def sample(metrics: Metrics, name: str) -> float | None:
    return metrics.registry.get_sample_value(name, {"route": "agents.pay"})


def test_a_flood_pauses_its_route_alerts_once_and_the_route_resumes_when_it_closes() -> None:
    f, pauses, alerts, metrics, applied = floods("pause")
    assert not f.heard({"agents.pay": (10, ["check-ho"] * 2)}, 0.0)  # too few lines to judge
    assert sample(metrics, "gatekeeper_dead_letter_ratio") == 0.2
    assert f.heard({"agents.pay": (20, ["check-ho"] * 20)}, 1.0)  # 22 of 30: tripped
    assert pauses.routes == {"agents.pay"} and applied
    assert [a["alert"] for _, a in alerts.queued] == ["dead-letter-flood"]
    assert alerts.queued[0][1]["action"] == "paused"
    assert sample(metrics, "gatekeeper_dead_letter_breaker_trips_total") == 1.0
    assert sample(metrics, "gatekeeper_dead_letter_breaker_open") == 1.0
    assert not f.heard({"agents.pay": (20, ["check-ho"] * 20)}, 2.0)  # still flooding: no second alert
    assert len(alerts.queued) == 1
    assert not f.evaluate(5.0)  # the window still holds the flood
    assert not f.evaluate(20.0)  # the window slid past it, but the pause (30 s from the trip) holds
    assert f.evaluate(40.0)  # the pause over and the window empty: closed, resumed
    assert pauses.routes == set()
    assert sample(metrics, "gatekeeper_dead_letter_breaker_open") == 0.0


def test_a_dry_run_route_is_alerted_never_paused() -> None:
    f, pauses, alerts, _, applied = floods("pause", dry_run=True)
    assert f.heard({"agents.pay": (30, ["invalid"] * 30)}, 0.0)
    assert pauses.routes == set() and not applied
    assert alerts.queued[0][1]["action"] == "alerted" and alerts.queued[0][1]["dry_run"] is True


def test_an_alert_only_breaker_never_pauses() -> None:
    f, pauses, alerts, _, _ = floods("alert")
    assert f.heard({"agents.pay": (30, ["invalid"] * 30)}, 0.0)
    assert pauses.routes == set() and alerts.queued[0][1]["action"] == "alerted"
