"""The worker's own alerts: their documents, and publishing at least once (a failure keeps them queued)."""

from __future__ import annotations

from collections.abc import Sequence

import orjson
from aiokafka.errors import KafkaConnectionError

from gatekeeper.config import BreakerSettings, Route
from gatekeeper.consumers.alerting import Alerts, data_lost_alert, flood_alert
from gatekeeper.consumers.breaker import Window
from gatekeeper.metrics import Metrics
from gatekeeper.store import DataLost
from gatekeeper.sweeper import OutRecord


class _Publisher:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.published: list[OutRecord] = []

    async def publish(self, records: Sequence[OutRecord]) -> list[int]:
        if self.failures:
            self.failures -= 1
            raise KafkaConnectionError("broker gone")
        self.published.extend(records)
        return list(range(len(records)))


def _route() -> Route:
    return Route.model_validate(
        {
            "input": "agents.pay",
            "output": "agents.pay.ok",
            "dead_letter": "agents.pay.dlq",
            "alerts": "agents.alerts",
            "profile": "pay",
        }
    )


def test_a_flood_alert_says_what_tripped_and_what_was_done() -> None:
    w = Window(lines=40, dead=30, reasons={"invalid": 10, "check-ho": 20})
    s = BreakerSettings(ratio=0.5, window_seconds=60, pause_seconds=30, action="pause")
    doc = flood_alert("agents.pay", w, s, action="paused", dry_run=False, now=1790845200.0)
    assert doc["alert"] == "dead-letter-flood" and doc["action"] == "paused" and doc["ratio"] == 0.75
    assert list(doc["reasons"]) == ["check-ho", "invalid"]  # the biggest first
    assert doc["pause_seconds"] == 30 and doc["at"] == "2026-10-01T09:00:00.000Z"
    alerted = flood_alert("agents.pay", w, s, action="alerted", dry_run=True, now=1790845200.0)
    assert alerted["pause_seconds"] is None and alerted["dry_run"] is True


def test_a_data_lost_alert_names_both_markers() -> None:
    doc = data_lost_alert("agents.pay", DataLost("gone", expected="g-1", found=None), now=1790845200.0)
    assert doc["alert"] == "redis-data-lost" and doc["expected_generation"] == "g-1" and doc["found_generation"] is None


async def test_alerts_are_published_in_order_and_kept_until_the_broker_takes_them() -> None:
    publisher, metrics = _Publisher(failures=1), Metrics()
    alerts = Alerts(publisher, metrics)
    route = _route()
    alerts.queue(route, {"alert": "a", "n": 1})
    alerts.queue(route, {"alert": "b", "n": 2})
    await alerts.publish()  # refused: kept
    assert publisher.published == [] and len(alerts.pending) == 2
    assert metrics.registry.get_sample_value("gatekeeper_kafka_errors_total", {"operation": "produce"}) == 1
    await alerts.publish()
    assert [orjson.loads(r.value)["alert"] for r in publisher.published] == ["a", "b"]
    assert {r.topic for r in publisher.published} == {"agents.alerts"} and publisher.published[0].key == b"agents.pay"
    assert dict(publisher.published[0].headers)["gk.author"] == b"gatekeeper"
    assert alerts.pending == []
