"""The ASGI application on the gatekeeper's one HTTP port: probes, ``/metrics``, the API, its OpenAPI, and MCP.

==========================  ========================================================================================
path                        answer
==========================  ========================================================================================
``GET /healthz``            liveness: 200 ``{"status": "alive"}``, 503 ``{"status": "stalled", ...}``
``GET /readyz``             readiness: 200 ``{"status": "ready", ...}``, 503 ``{"status": "not-ready", "reason": ...}``
``GET /metrics``            the Prometheus exposition of the gatekeeper's registry (prometheus-client's ASGI app)
``POST /v1/<function>``     the stateless functions (``gatekeeper.api.functions``); also at ``/<function>``
``GET /v1/legend``          ``?profile=pay&lean=true``; also at ``/legend``
``POST /v1/gate``           the gatekeeper's verdict for one line of a conversation (``gatekeeper.api.gate``), with a
                            bearer token; also at ``/gate``
``/mcp``                    the MCP tools, streamable HTTP (``gatekeeper.api.mcp``)
``GET /openapi.json``       the OpenAPI document; ``/docs`` renders it
``/console``                the operator's console: HTML pages, no script (``gatekeeper.console``)
==========================  ========================================================================================

The probes need no token and are never rate limited or refused as busy; ``/metrics`` is rate limited like the rest
and needs a token with the ``metrics`` scope when ``http.metrics_auth`` is on; ``GET`` and ``HEAD`` only. Each class
of endpoint (``/metrics``, the stateless checks, ``/v1/gate``, MCP, the console) has its own limit of requests in
progress (``http.in_flight``: one more is 503 ``busy``), and no answer is larger than ``http.max_answer_bytes`` (413
``answer-too-large``). Bad input is always a 4xx with a JSON problem document, never a 500::

    {"ok": false, "status": 400, "code": "malformed-json", "title": "Malformed JSON", "detail": "..."}

Codes: ``malformed-json`` (400), ``unknown-profile`` (400), ``invalid-request`` (422, with ``errors``: where and
what), ``unauthorized`` (401), ``forbidden`` (403), ``unknown-route`` (404), ``not-found`` (404),
``method-not-allowed`` (405), ``request-timeout`` (408: the request did not arrive within
``http.read_timeout_seconds``), ``body-too-large`` (413), ``line-too-large`` (413), ``answer-too-large`` (413),
``rate-limited`` (429, with ``Retry-After``), ``busy`` (503, with ``Retry-After``), ``gate-unavailable`` (503),
``redis-data-lost`` (503: a dry run while Redis lost its data), ``pending`` (504: the line is still in the pipeline).
"""

import gzip
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Annotated, Any

from fastapi import FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from gatekeeper import __version__
from gatekeeper.api import functions as fn
from gatekeeper.api.functions import BadInput
from gatekeeper.metrics import Metrics

log = logging.getLogger(__name__)

Probe = Callable[[], tuple[bool, dict[str, Any]]]
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


DESCRIPTION = """\
The RW1 checks of the rogerwilco protocol as JSON endpoints, and the gatekeeper's own verdict for a line.

Every check answers `{"ok": bool, "problems": [...], "notes": [...]}` with the reference's wording; no problems
means go, anything in problems means stop, notes are worth logging. Add `"detail": true` to a request for the same
findings as data (code, tier, slot, expected, got). Every `/v1/<name>` is also served at `/<name>`, the names of the
reference's hosted API. Bad input is a 4xx with a JSON problem document, never a 500.
"""


class ProblemDocument(BaseModel):
    """A request that could not be answered as asked."""

    ok: bool = Field(False, description="always false")
    status: int = Field(description="the HTTP status")
    code: str = Field(description="a stable, machine-readable code", examples=["unknown-profile"])
    title: str = Field(description="the code, for a human")
    detail: str = Field(description="what is wrong, and where")
    errors: list[dict[str, Any]] | None = Field(None, description="invalid-request: each field's problem")


class Finding(BaseModel):
    code: str
    tier: str | None = None
    slot: str | None = None
    expected: str | None = None
    got: str | None = None
    message: str


class Detail(BaseModel):
    problems: list[Finding]
    notes: list[Finding]


class CheckAnswer(BaseModel):
    """The answer of a check: no problems means go."""

    ok: bool
    problems: list[str] = Field(description="the reference's wording; any means stop")
    notes: list[str] = Field(description="assumptions worth logging")
    detail: Detail | None = Field(None, description='with "detail": true: the findings as data, in the same order')

    model_config = {
        "json_schema_extra": {
            "examples": [
                {
                    "ok": False,
                    "problems": ["record: acct mismatch: record 40-12-88/61102938 vs HO 40-12-88/61102983"],
                    "notes": [],
                }
            ]
        }
    }


class MakeRbAnswer(CheckAnswer):
    rb: str | None = Field(None, description="the readback line")


class ValidateAnswer(CheckAnswer):
    message: dict[str, Any] | None = Field(None, description="the JSON twin of a valid line")


class DigestAnswer(CheckAnswer):
    digest: str | None = Field(None, description="the h= value: 12 hex characters")


class ToJsonAnswer(CheckAnswer):
    message: dict[str, Any] | None = Field(None, description="the JSON twin")


class FromJsonAnswer(CheckAnswer):
    line: str | None = Field(None, description="the line")


class LegendAnswer(CheckAnswer):
    legend: str = Field(description="the legend text")


class ProbeAnswer(BaseModel):
    status: str = Field(description="alive | stalled (healthz); ready | not-ready (readyz)")

    model_config = {"extra": "allow"}


_ANSWERS: dict[str, type[CheckAnswer]] = {
    "make-rb": MakeRbAnswer,
    "validate": ValidateAnswer,
    "digest": DigestAnswer,
    "to-json": ToJsonAnswer,
    "from-json": FromJsonAnswer,
}

_TITLES = {
    400: "Bad request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    413: "Request too large",
    422: "Invalid request",
    429: "Too many requests",
    500: "Internal error",
    503: "Unavailable",
    504: "Pending",
}
_CODES = {404: "not-found", 405: "method-not-allowed", 401: "unauthorized", 403: "forbidden"}


class CompatJSON(JSONResponse):
    """JSON as Python's ``json.dumps`` writes it (``{"ok": false, "problems": [], "notes": []}``), the reference's
    own formatting, ASCII only (escaped), so any text can be written."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content).encode("ascii")


def problem(status: int, code: str, detail: str, **extra: Any) -> CompatJSON:
    doc = fn.problem_document(status, code, detail)
    if not code:
        doc["title"] = _TITLES.get(status, "Error")
    headers = extra.pop("headers", None)
    doc.update(extra)
    return CompatJSON(doc, status_code=status, headers=headers)


def _problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {s: {"model": ProblemDocument, "description": _TITLES.get(s, "Error")} for s in statuses}


# ------------------------------------------------------------------------------------------------ the guard


class _Bucket:
    __slots__ = ("at", "tokens")

    def __init__(self, tokens: float, at: float) -> None:
        self.tokens = tokens
        self.at = at


class RateLimiter:
    """A token bucket per client address: ``rate`` requests a second, ``burst`` at once. Bounded in memory: the
    least recently seen clients are forgotten past ``max_clients``."""

    def __init__(self, rate: float, burst: int, max_clients: int = 10_000) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.max_clients = max_clients
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def take(self, client: str, now: float | None = None) -> float:
        """0 when the request may go, else the seconds until it may."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic() if now is None else now
        b = self._buckets.get(client)
        if b is None:
            b = self._buckets[client] = _Bucket(self.burst, now)
            while len(self._buckets) > self.max_clients:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(client)
            b.tokens = min(self.burst, b.tokens + (now - b.at) * self.rate)
            b.at = now
        if b.tokens >= 1.0:
            b.tokens -= 1.0
            return 0.0
        return (1.0 - b.tokens) / self.rate


#: The probes: no token, never rate limited nor refused as busy.
PROBES = frozenset({"/healthz", "/readyz"})


def endpoint_class(path: str) -> str:
    """The class of a path, each with its own limit of requests in progress (``http.in_flight``): ``probes``,
    ``metrics``, ``gate``, ``mcp`` or ``api`` (everything else)."""
    if path in PROBES:
        return "probes"
    if path == "/metrics":
        return "metrics"
    if path in ("/v1/gate", "/gate"):
        return "gate"
    if path == "/mcp" or path.startswith("/mcp/"):
        return "mcp"
    if path == "/console" or path.startswith("/console/"):
        return "console"
    return "api"


class Guard:
    """The outermost ASGI layer: API metrics, ``HEAD`` as ``GET``, the rate limit (all but the probes), the token
    of ``/metrics`` (``metrics_auth``), the limit of requests in progress per endpoint class, the body size limit and
    the answer size limit, each refusal a problem document."""

    def __init__(
        self,
        app: ASGIApp,
        metrics: Metrics,
        known: frozenset[str],
        max_body: int,
        limiter: RateLimiter,
        *,
        in_flight: Mapping[str, int] | None = None,
        max_answer: int = 2 * 1_048_576,
        metrics_tokens: Any = None,
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.known = known
        self.max_body = max_body
        self.limiter = limiter
        self.in_flight = dict(in_flight or {})
        self.busy: dict[str, int] = dict.fromkeys(self.in_flight, 0)
        self.max_answer = max_answer
        self.metrics_tokens = metrics_tokens  # a TokenBook: /metrics needs a token of it with the metrics scope

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        path = scope.get("path", "")
        endpoint = path if path in self.known else "other"
        status = 500

        async def send_counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self._handle(scope, receive, send_counted, path)
        finally:
            m = self.metrics
            m.api_requests.labels(endpoint=endpoint, status=str(status)).inc()
            m.api_seconds.labels(endpoint=endpoint).observe(time.perf_counter() - started)

    async def _handle(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        if scope.get("method") == "HEAD":
            scope = dict(scope, method="GET")  # the server still sends no body: it knows the request was HEAD
        kind = endpoint_class(path)
        if kind == "probes":
            await self.app(scope, receive, send)
            return
        if kind == "metrics" and self.metrics_tokens is not None and not self._may_scrape(scope):
            doc = problem(
                401,
                "unauthorized",
                "/metrics needs a bearer token with the metrics scope (http.metrics_auth)",
                headers={"WWW-Authenticate": "Bearer"},
            )
            await doc(scope, receive, send)
            return
        client = scope.get("client")
        wait = self.limiter.take(client[0] if client else "-")
        if wait > 0:
            retry = str(max(1, int(wait + 0.999)))
            doc = problem(429, "rate-limited", f"too many requests: retry in {retry}s", headers={"Retry-After": retry})
            await doc(scope, receive, send)
            return
        limit = self.in_flight.get(kind)
        if limit is not None and self.busy[kind] >= limit:
            doc = problem(
                503,
                "busy",
                f"{limit} {kind} requests are in progress (http.in_flight.{kind}): retry in 1s",
                headers={"Retry-After": "1"},
            )
            await doc(scope, receive, send)
            return
        if limit is not None:
            self.busy[kind] += 1
        try:
            if kind == "metrics":
                await self.app(scope, receive, send)
            else:
                await self._bounded(scope, receive, send)
        finally:
            if limit is not None:
                self.busy[kind] -= 1

    def _may_scrape(self, scope: Scope) -> bool:
        authorization = None
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                authorization = value.decode("latin-1")
        principal = self.metrics_tokens.principal(authorization)
        return principal is not None and bool(principal.scopes & {"metrics", "operator"})

    async def _bounded(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The request with its body read within ``max_body`` and its answer sent only within ``max_answer``."""
        send = self._capped(scope, receive, send)
        if scope.get("method") in ("POST", "PUT", "PATCH", "DELETE"):
            declared = _content_length(scope)
            if declared is not None and declared > self.max_body:
                await self._too_large(scope, receive, send)
                return
            body = bytearray()
            more = True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                body += message.get("body", b"")
                more = bool(message.get("more_body"))
                if len(body) > self.max_body:
                    await self._too_large(scope, receive, send)
                    return
            await self.app(scope, _replay(bytes(body), receive), send)
            return
        await self.app(scope, receive, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        doc = problem(413, "body-too-large", f"the request body is larger than {self.max_body} bytes")
        await doc(scope, receive, send)

    def _capped(self, scope: Scope, receive: Receive, send: Send) -> Send:
        """``send``, holding the answer back until it is complete: one larger than ``max_answer`` bytes is replaced
        by a 413 ``answer-too-large`` (the work is done, but a client cannot make the port send megabytes)."""
        cap = self.max_answer
        start: Message | None = None
        parts: list[bytes] = []
        size = 0
        over = False

        async def capped(message: Message) -> None:
            nonlocal start, size, over
            if over:
                return
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body":
                await send(message)
                return
            body = message.get("body", b"")
            size += len(body)
            if size > cap:
                over = True
                parts.clear()
                doc = problem(
                    413,
                    "answer-too-large",
                    f"the answer is larger than {cap} bytes (http.max_answer_bytes): ask about fewer lines",
                )
                await doc(scope, receive, send)
                return
            parts.append(body)
            if message.get("more_body"):
                return
            if start is not None:
                await send(start)
            await send({"type": "http.response.body", "body": b"".join(parts), "more_body": False})

        return capped


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


class _Asgi:
    """An ASGI callable as a Starlette route endpoint (a plain function would be taken for a request handler)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


# ------------------------------------------------------------------------------------------------ the app


def _validation_problem(exc: RequestValidationError) -> CompatJSON:
    errors = []
    malformed = None
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            ctx = err.get("ctx") or {}
            malformed = str(ctx.get("error", "not JSON"))
            continue
        loc = [str(x) for x in err.get("loc", ()) if x != "body"]
        errors.append({"loc": ".".join(loc) or "(body)", "msg": str(err.get("msg", "")), "type": str(err.get("type"))})
    if malformed is not None:
        return problem(400, "malformed-json", f"the request body is not JSON: {malformed}")
    where = "; ".join(f"{e['loc']}: {e['msg']}" for e in errors[:10])
    return problem(422, "invalid-request", where or "the request is not valid", errors=errors)


def create_app(
    metrics: Metrics,
    readiness: Probe,
    liveness: Probe,
    *,
    api: bool = True,
    mcp: bool = True,
    gate: Any = None,
    max_body_bytes: int = 1_048_576,
    rate_limit: float = 0.0,
    rate_burst: int = 100,
    mcp_host: str = "127.0.0.1",
    in_flight: Mapping[str, int] | None = None,
    max_answer_bytes: int = 2 * 1_048_576,
    metrics_tokens: Any = None,
    worker_metrics: Callable[[], bytes] | None = None,
    console: Any = None,
) -> Any:
    """The ASGI app (the ``Guard`` around FastAPI). ``gate`` is a ``gatekeeper.api.gate.Gate`` (started and closed
    by the app's lifespan), or None: ``/v1/gate`` then answers 503."""
    from gatekeeper.api.pool import FunctionPool

    pool = FunctionPool((in_flight or {}).get("api", 4))  # the checks' CPU in worker processes (api.pool)
    mcp_server = None
    if api and mcp:
        from gatekeeper.api.mcp import make_mcp_server

        mcp_server = make_mcp_server(pool)
        mcp_app = mcp_server.streamable_http_app(
            streamable_http_path="/mcp",
            stateless_http=True,
            json_response=True,
            host=mcp_host,
            max_request_body_size=max_body_bytes,
        )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> Any:
        async with AsyncExitStack() as stack:
            stack.callback(pool.close)
            if mcp_server is not None:
                await stack.enter_async_context(mcp_server.session_manager.run())
            if gate is not None:
                await gate.start()
                stack.push_async_callback(gate.close)
            if console is not None:
                await console.start()
                stack.push_async_callback(console.close)
            yield

    app = FastAPI(
        title="rogerwilco gatekeeper",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # /docs is served from local assets (_add_docs): never a CDN, never third-party script
        redoc_url=None,
        openapi_url="/openapi.json" if api else None,
    )

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> Response:
        return _validation_problem(exc)

    @app.exception_handler(BadInput)
    async def _bad(_request: Request, exc: BadInput) -> Response:
        return problem(exc.status, exc.code, str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> Response:
        code = _CODES.get(exc.status_code, "error")
        detail = str(exc.detail)
        if exc.status_code == 400:  # FastAPI's own: a body json could not read (not UTF-8, nested too deep)
            code, detail = "malformed-json", "the request body is not JSON: not UTF-8, or nested too deep"
        return problem(exc.status_code, code, detail, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _bug(_request: Request, exc: Exception) -> Response:
        log.error("an API request raised", exc_info=exc)
        return problem(500, "internal-error", f"the gatekeeper failed to answer: {type(exc).__name__}")

    probe_responses: dict[int | str, dict[str, Any]] = {503: {"model": ProbeAnswer, "description": "failing"}}

    @app.get("/healthz", tags=["operations"], response_model=ProbeAnswer, responses=probe_responses)
    def healthz() -> Response:
        """Liveness: 503 when the work loop has not turned while partitions have lag (restart cures it)."""
        alive, detail = liveness()
        return CompatJSON({"status": "alive" if alive else "stalled", **detail}, status_code=200 if alive else 503)

    @app.get("/readyz", tags=["operations"], response_model=ProbeAnswer, responses=probe_responses)
    def readyz() -> Response:
        """Readiness: 503 with the reason while Kafka or Redis do not answer or the group is not joined."""
        ready, detail = readiness()
        return CompatJSON({"status": "ready" if ready else "not-ready", **detail}, status_code=200 if ready else 503)

    app.router.routes.append(
        Route(
            "/metrics",
            endpoint=_Asgi(_metrics_app(metrics, worker_metrics)),
            methods=["GET"],
            include_in_schema=False,
        )
    )

    if api:
        _add_docs(app)
        _add_functions(app, pool)
        _add_gate(app, gate)
    if mcp_server is not None:
        app.router.routes.extend(mcp_app.routes)
    if console is not None:
        from gatekeeper.console.pages import make_router

        app.include_router(make_router(console))

    known = frozenset(getattr(r, "path", "") for r in app.router.routes) - {""}
    limiter = RateLimiter(rate_limit, rate_burst)
    guard = Guard(
        app,
        metrics,
        known,
        max_body_bytes,
        limiter,
        in_flight=in_flight,
        max_answer=max_answer_bytes,
        metrics_tokens=metrics_tokens,
    )
    return guard, app


#: ``/metrics`` is rendered at most this often per format: a flood of scrapes costs one render per interval, not
#: one per request (each render is Python holding the GIL the worker's thread needs).
METRICS_RENDER_SECONDS = 0.1


class MetricsEndpoint:
    """``GET /metrics``: prometheus-client's exposition (its encoders: text or OpenMetrics by ``Accept``, gzip by
    ``Accept-Encoding``), each format rendered at most once per ``METRICS_RENDER_SECONDS``. Written around the
    library's encoders because its ASGI app renders the registry on every request."""

    def __init__(self, metrics: Metrics, worker_metrics: Callable[[], bytes] | None = None) -> None:
        self.registry = metrics.registry
        self.worker_metrics = worker_metrics
        self._cache: dict[tuple[str, bool], tuple[float, bytes]] = {}

    def _render(self, encoder: Callable[[Any], bytes]) -> bytes:
        if self.worker_metrics is None:
            return encoder(self.registry)
        # the daemon's HTTP process (gatekeeper.http_process): its own API families, then the worker's
        from prometheus_client import generate_latest

        from gatekeeper.metrics import filter_families

        own = filter_families(generate_latest(self.registry), b"gatekeeper_api_", keep=True)
        return own + self.worker_metrics()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
        from prometheus_client.exposition import choose_encoder, gzip_accepted

        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        encoder, content_type = choose_encoder(headers.get("accept", ""))
        if self.worker_metrics is not None:  # joined from text: the text format only
            encoder, content_type = generate_latest, CONTENT_TYPE_LATEST
        zipped = gzip_accepted(headers.get("accept-encoding", ""))
        now = time.monotonic()
        cached = self._cache.get((content_type, zipped))
        if cached is None or now - cached[0] >= METRICS_RENDER_SECONDS:
            body = self._render(encoder)
            if zipped:
                body = gzip.compress(body, compresslevel=1)
            cached = self._cache[(content_type, zipped)] = (now, body)
        out = [(b"content-type", content_type.encode()), (b"content-length", str(len(cached[1])).encode())]
        if zipped:
            out.append((b"content-encoding", b"gzip"))
        await send({"type": "http.response.start", "status": 200, "headers": out})
        await send({"type": "http.response.body", "body": cached[1]})


def _metrics_app(metrics: Metrics, worker_metrics: Callable[[], bytes] | None) -> ASGIApp:
    return MetricsEndpoint(metrics, worker_metrics)


_FUNCTION_DOCS = {
    "check-ho": "Check 1, before sending: the HO against the record it was built from.",
    "check-rb": "Check 2: a readback (or a tool's prepared statement) against the HO: the five tiers (receipt, "
    "integrity, echo, comprehension with `expect_acc`, execution) and expiry (`now`).",
    "check-dn": "Check 3, after the act: the done report against the plan (the HO, and `rb`, the readback that "
    "passed).",
    "check-thread": "Every handoff of a conversation closes (DN, UN, FL or an acknowledged CX) and none is open past "
    "its exp= at `now`.",
    "make-rb": "The correct readback for an HO, as a code-side receiver sends it (`rb`).",
    "validate": "Parse one line: its errors as problems and its warnings as notes (problems with `strict`), and its "
    "JSON twin (`message`).",
    "digest": "The h= digest of a line (`digest`).",
    "to-json": "A line's JSON twin (`message`).",
    "from-json": "The line of a JSON twin (`line`), validated.",
    "translation": "The pay profile's translation rules: an ST about an invoice carries src=, amt, cur and kind; "
    "with kind=GROSS, net + vat = amt.",
}


#: /docs's page may load nothing but the gatekeeper's own assets (Swagger UI's page starts itself with an inline
#: script, and styles itself inline).
DOCS_CSP = (
    "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def _add_docs(app: FastAPI) -> None:
    """``GET /docs``: Swagger UI on the OpenAPI document, its script, style and icon served from ``/docs/assets``
    (the files the ``fastapi-offline`` package ships, Swagger UI 5), with a content security policy that allows
    nothing else: the page works on an air-gapped host, and the port runs no third-party script."""
    from pathlib import Path

    import fastapi_offline
    from fastapi.openapi.docs import get_swagger_ui_html
    from starlette.staticfiles import StaticFiles

    assets = Path(fastapi_offline.__file__).parent / "static"
    app.mount("/docs/assets", StaticFiles(directory=assets), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs() -> Response:
        page = get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="rogerwilco gatekeeper: HTTP API",
            swagger_js_url="/docs/assets/swagger-ui-bundle.js",
            swagger_css_url="/docs/assets/swagger-ui.css",
            swagger_favicon_url="/docs/assets/favicon.png",
        )
        page.headers["Content-Security-Policy"] = DOCS_CSP
        return page


def _add_functions(app: FastAPI, pool: Any) -> None:
    for name, (model, _func) in fn.FUNCTIONS.items():
        endpoint = _function_endpoint(name, model, pool)
        answer = _ANSWERS.get(name, CheckAnswer)
        for path, in_schema in ((f"/v1/{name}", True), (f"/{name}", False)):
            app.add_api_route(
                path,
                endpoint,
                methods=["POST"],
                name=f"{name} ({path})",
                operation_id=name.replace("-", "_"),
                summary=_FUNCTION_DOCS[name].split(":")[0].rstrip("."),
                description=f"{_FUNCTION_DOCS[name]}\n\nAlso served at `/{name}`.",
                tags=["checks"],
                response_model=answer,
                responses=_problem_responses(400, 413, 422, 429),
                include_in_schema=in_schema,
            )

    def legend(
        profile: Annotated[
            str | None, Query(max_length=64, description="pay, clin, deploy, pform...", examples=["pay"])
        ] = None,
        lean: Annotated[bool, Query(description="drop the comprehension-readback keys and unused core asks")] = False,
    ) -> Response:
        return CompatJSON(fn.legend(profile, lean))

    for path, in_schema in (("/v1/legend", True), ("/legend", False)):
        app.add_api_route(
            path,
            legend,
            methods=["GET"],
            name=f"legend ({path})",
            operation_id="legend",
            summary="The legend another model needs in its prompt",
            description="The prompt text for reading and writing lines under a profile.\n\nAlso served at `/legend`.",
            tags=["checks"],
            response_model=LegendAnswer,
            responses=_problem_responses(400, 422, 429),
            include_in_schema=in_schema,
        )


def _function_endpoint(name: str, model: type[fn.Request], pool: Any) -> Any:
    """The endpoint of a function: the request validated here, answered (and rendered as ``CompatJSON`` would) in the
    pool's worker processes (``gatekeeper.api.pool``)."""

    async def endpoint(body: model) -> Response:  # type: ignore[valid-type]
        return Response(await pool.render(name, body), media_type="application/json")

    endpoint.__name__ = name.replace("-", "_")
    return endpoint


def _add_gate(app: FastAPI, gate: Any) -> None:
    from gatekeeper.api.gate import GateAnswer, GateRequest, PendingAnswer

    async def gate_endpoint(
        body: GateRequest,
        authorization: Annotated[
            str | None, Header(description="Bearer <token>: a token that speaks for the line's from=")
        ] = None,
    ) -> Response:
        if gate is None:  # no configuration, so no tokens: nothing can be gated here
            status, doc = (
                401,
                {
                    "ok": False,
                    "status": 401,
                    "code": "unauthorized",
                    "title": "Unauthorized",
                    "detail": "POST /v1/gate needs a bearer token, and none is configured (http.tokens)",
                },
            )
        else:
            status, doc = await gate.handle(body, authorization)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return CompatJSON(doc, status_code=status, headers=headers)

    responses = _problem_responses(400, 401, 403, 404, 413, 422, 429, 503)
    responses[504] = {"model": PendingAnswer, "description": "the line is still in the pipeline (not refused)"}
    for path, in_schema in (("/v1/gate", True), ("/gate", False)):
        app.add_api_route(
            path,
            gate_endpoint,
            methods=["POST"],
            name=f"gate ({path})",
            operation_id="gate",
            summary="The gatekeeper's verdict for one line of a conversation",
            description=(
                "Produces the line to the route's input topic, keyed by the conversation, and answers with the "
                "outcome the daemon produced for it (forward, dead-letter or alert), so a service that does not "
                "speak Kafka is gated exactly as one that does. `dry_run`: decided against the current state, "
                "nothing produced or saved. Needs `Authorization: Bearer <token>`, a token that speaks for the "
                "line's from=. 504: no outcome yet within the timeout; the line is in the pipeline and will be "
                "decided, it was not refused. The problems show their codes, tiers and slots; the record's values "
                "and the holder of a binding only to a token with the operator scope.\n\nAlso served at `/gate`."
            ),
            tags=["gate"],
            response_model=GateAnswer,
            responses=responses,
            include_in_schema=in_schema,
        )


__all__ = [
    "PROBES",
    "CompatJSON",
    "Guard",
    "MetricsEndpoint",
    "ProblemDocument",
    "RateLimiter",
    "create_app",
    "endpoint_class",
    "problem",
]
