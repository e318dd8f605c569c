"""The probe server over a real socket: ``/healthz`` and ``/readyz`` answer 200 or 503 with the probe's detail."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

from gatekeeper.http import HttpServer
from gatekeeper.metrics import Metrics


def _get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def test_healthz_and_readyz_follow_their_probes() -> None:
    state = {"alive": True, "ready": False}

    def liveness() -> tuple[bool, dict[str, Any]]:
        return (True, {}) if state["alive"] else (False, {"reason": "stuck", "stalled_seconds": 61.0})

    def readiness() -> tuple[bool, dict[str, Any]]:
        return (True, {"partitions": 3}) if state["ready"] else (False, {"reason": "redis unavailable"})

    server = HttpServer("127.0.0.1", 0, Metrics(), readiness, liveness)
    await server.start()
    try:
        assert await asyncio.to_thread(_get, f"{server.url}/healthz") == (200, {"status": "alive"})
        assert await asyncio.to_thread(_get, f"{server.url}/readyz") == (
            503,
            {"status": "not-ready", "reason": "redis unavailable"},
        )
        state.update(alive=False, ready=True)
        assert await asyncio.to_thread(_get, f"{server.url}/healthz") == (
            503,
            {"status": "stalled", "reason": "stuck", "stalled_seconds": 61.0},
        )
        assert await asyncio.to_thread(_get, f"{server.url}/readyz") == (200, {"status": "ready", "partitions": 3})
    finally:
        await server.close()
