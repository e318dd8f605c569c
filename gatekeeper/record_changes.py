"""Changing an approval that a handoff holds: refused, and alerted.

A handoff keeps the record it was checked against (its state holds a copy), so superseding or deleting a record
while a handoff is bound to it would change nothing that handoff does, silently: the approver would believe the
payment changed or withdrawn while the act goes on as first approved. ``gatekeeper records load --supersede`` and
``gatekeeper records delete`` therefore refuse a record whose approval is bound (in flight, or spent: an approval
whose act ran stays bound for good, one approval, one act), say which handoff holds it and what to do instead, and
raise a ``record-change-refused`` alert on the alerts topic of the route that holds it (every configured route's
when the binding names none), as the daemon's own alerts are written: JSON keyed by the route's input topic, with
``gk.author: gatekeeper``.

To withdraw a live approval, the handoff's sender cancels it (``CX why=REVOKED``); once the receiver acknowledges,
the binding is released and the record can be changed. An approval whose act ran is never re-used: approve the new
act under a new item.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from gatekeeper import __version__
from gatekeeper.config import Settings
from gatekeeper.consumers.outcomes import iso
from gatekeeper.inert import json_document
from gatekeeper.policy import RecordKey, bound_handoff

RECORD_CHANGE_ALERT = "record-change-refused"
_HEADERS = [("gk.author", b"gatekeeper"), ("gk.version", __version__.encode())]


def refusal(operation: str, key: RecordKey, binding: str) -> str:
    """What the command says of a record it will not change."""
    return (
        f"refused to {operation} item {key.item} ask {key.ask}: its approval is bound to the handoff "
        f"{bound_handoff(binding)}, which keeps the values it was checked against. To withdraw a live approval its "
        "sender cancels the handoff (CX why=REVOKED) and, once that is acknowledged, the record can be changed; an "
        "approval whose act ran stays bound (one approval, one act): approve a new act under a new item"
    )


def alert_document(operation: str, key: RecordKey, binding: str, *, now: float) -> dict[str, Any]:
    """The ``record-change-refused`` alert."""
    return {
        "alert": RECORD_CHANGE_ALERT,
        "author": "gatekeeper",
        "action": "refused",
        "operation": operation,
        "item": key.item,
        "ask": key.ask,
        "bound_to": bound_handoff(binding),
        "at": iso(now),
        "version": __version__,
    }


def alert_routes(settings: Settings, binding: str) -> list[tuple[str, str]]:
    """(input topic, alerts topic) of the route the binding names, else of every configured route."""
    route = bound_handoff(binding).split("/", 1)[0]
    named = [(r.input, r.alerts) for r in settings.routes if r.input == route]
    return named or sorted({(r.input, r.alerts) for r in settings.routes})


async def raise_alerts(settings: Settings, refused: Iterable[tuple[str, RecordKey, str]]) -> None:
    """Publish one alert per refused change (operation, record, binding). Raises on a Kafka failure (the caller
    says so; the change stays refused either way)."""
    from aiokafka import AIOKafkaProducer

    from gatekeeper.consumers.kafka import client_kwargs

    records = []
    now = time.time()
    for operation, key, binding in refused:
        doc = json_document(alert_document(operation, key, binding, now=now))
        records += [(topic, route.encode(), doc) for route, topic in alert_routes(settings, binding)]
    if not records:
        return
    kw = client_kwargs(settings.kafka)
    kw.update(acks="all", enable_idempotence=True, request_timeout_ms=settings.kafka.request_timeout_ms)
    producer = AIOKafkaProducer(**kw)
    await producer.start()
    try:
        for topic, k, value in records:
            await producer.send_and_wait(topic, value, key=k, headers=_HEADERS)
    finally:
        await producer.stop()


__all__ = ["RECORD_CHANGE_ALERT", "alert_document", "alert_routes", "raise_alerts", "refusal"]
