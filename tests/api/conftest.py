"""A real gatekeeper HTTP server (uvicorn on a free loopback port) for the API tests, and an HTTP client for it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from gatekeeper.config import HttpSettings, Settings
from gatekeeper.http import HttpServer
from gatekeeper.metrics import Metrics


def settings_with(**http: Any) -> Settings:
    base: dict[str, Any] = {"host": "127.0.0.1", "port": 0, "rate_limit": 0}
    base.update(http)
    return Settings(http=HttpSettings(**base))


@pytest.fixture
async def server() -> AsyncIterator[HttpServer]:
    s = HttpServer("127.0.0.1", 0, Metrics(), lambda: (True, {"partitions": 0}), settings=settings_with())
    await s.start()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def client(server: HttpServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as c:
        yield c
