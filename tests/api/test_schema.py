"""Schemathesis against the running server's ``/openapi.json``: generated requests to every operation find no server
error and no answer that breaks the schema (status code, content type, body). Bounded: a few examples an operation,
well under a minute."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gatekeeper.http import HttpServer
from gatekeeper.metrics import Metrics
from tests.api.conftest import settings_with

EXAMPLES = 30


class ThreadServer:
    """The HTTP server on an event loop of its own thread (schemathesis calls it with a blocking client)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.server = HttpServer("127.0.0.1", 0, Metrics(), lambda: (True, {}), settings=settings_with())
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> ThreadServer:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(30)
        return self

    def __exit__(self, *exc: Any) -> None:
        asyncio.run_coroutine_threadsafe(self.server.close(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def api() -> Iterator[ThreadServer]:
    with ThreadServer() as ts:
        yield ts


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_server_error_and_no_answer_outside_the_schema(api: ThreadServer, mode: GenerationMode) -> None:
    schema = schemathesis.openapi.from_url(f"{api.server.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 14
    calls = 0
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def check(case: Any) -> None:
            nonlocal calls
            calls += 1
            case.call_and_validate(checks=CHECKS)

        try:
            check()
        except Unsatisfiable:  # nothing to make invalid (an operation without parameters): nothing to send
            assert mode is GenerationMode.NEGATIVE
    assert calls >= len(operations)
