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
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from pydantic import BaseModel, ValidationError
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gatekeeper.api import functions as fn
from gatekeeper.api.gate import GateRequest
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


# ------------------------------------------------------------------------------------ the request models on odd JSON

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(alphabet=st.characters(codec=None)),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
_MODELS = [
    fn.CheckHoRequest,
    fn.CheckRbRequest,
    fn.CheckDnRequest,
    fn.CheckThreadRequest,
    fn.MakeRbRequest,
    fn.LineRequest,
    fn.FromJsonRequest,
    GateRequest,
]
_FIELDS = st.sampled_from(sorted({f for m in _MODELS for f in m.model_fields}))


@pytest.mark.parametrize("model", _MODELS, ids=lambda m: m.__name__)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.one_of(_JSON, st.dictionaries(_FIELDS, _JSON, max_size=6)))
def test_a_request_model_takes_any_json_or_refuses_it(model: type[BaseModel], data: Any) -> None:
    """Lone surrogates, NaN, huge numbers, wrong types, unknown fields: a ValidationError (a 422), nothing else; what
    is taken is valid Unicode throughout (it encodes as JSON)."""
    try:
        request = model.model_validate(data)
    except ValidationError:
        return
    assert isinstance(request.model_dump_json(), str)
