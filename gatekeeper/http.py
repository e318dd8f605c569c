"""The gatekeeper's one HTTP port: a real ASGI server (uvicorn) in the daemon's own event loop.

It serves the probes and ``/metrics`` as before, and the HTTP API, its OpenAPI and the MCP tools
(``gatekeeper.api.app``, where every path is listed):

==============  ===========================================================================================
path            answer
==============  ===========================================================================================
``/metrics``    200, the Prometheus text exposition of the gatekeeper's registry
``/healthz``    200 ``{"status": "alive"}`` while the work loop turns (liveness); 503 ``{"status": "stalled",
                ...}`` when it has not turned for ``http.stall_seconds`` while it holds partitions with lag: a
                call that hangs (heartbeats still answered by the client's own task) is cured by a restart. A
                service that is down is not a stall: the loop turns, retrying, and ``/readyz`` says why
``/readyz``     200 ``{"status": "ready", ...}`` when Kafka and Redis answer and the consumer group is joined
                (partitions assigned, or none to assign yet); 503 ``{"status": "not-ready", "reason": ...}``
                otherwise (readiness: a load balancer or Kubernetes stops sending traffic, nothing restarts)
``/v1/...``     the API (``http.api``): the stateless checks, ``/v1/gate`` (with a token), ``/openapi.json``
``/mcp``        the MCP tools (``http.mcp``), streamable HTTP
==============  ===========================================================================================

The probes and ``/metrics`` take ``GET`` and ``HEAD``, need no token and are never rate limited.

The server runs as a task of the running loop: it installs no signal handlers (the daemon owns SIGTERM and SIGINT),
and uvicorn's own logs are quiet (warnings and errors only; no access log: ``gatekeeper_api_requests_total`` counts
the requests). The socket is bound by ``start()`` itself, so a port in use raises ``OSError`` there and ``port=0``
is resolved at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from gatekeeper.metrics import Metrics

if TYPE_CHECKING:
    from gatekeeper.config import Settings

log = logging.getLogger(__name__)

#: A probe's answer: (passing, detail for the JSON body).
Probe = Callable[[], tuple[bool, dict[str, Any]]]
Readiness = Probe

#: How long ``close()`` lets requests in flight finish (a /v1/gate waiting for its outcome is answered 504 by then
#: or cancelled: its line is on the input topic either way).
SHUTDOWN_SECONDS = 3


def _alive() -> tuple[bool, dict[str, Any]]:
    return True, {}


def _server_class() -> Any:
    import uvicorn

    class _Server(uvicorn.Server):
        """uvicorn's server without its signal handling: the daemon's handlers stay in place."""

        @contextlib.contextmanager
        def capture_signals(self) -> Generator[None, None, None]:
            yield

        def install_signal_handlers(self) -> None:  # older uvicorn releases
            return None

    return _Server


class HttpServer:
    """Serves the probes, ``/metrics``, the API and MCP on one port. ``port=0`` picks a free port (see ``port``).

    ``settings`` (optional) supplies the API's configuration (``http.api``, ``http.mcp``, the limits, the tokens)
    and the routes ``/v1/gate`` can gate; without it the API and MCP are served with the defaults and no gate.
    ``gate`` overrides the gate made from ``settings`` (tests)."""

    def __init__(
        self,
        host: str,
        port: int,
        metrics: Metrics,
        readiness: Probe,
        liveness: Probe = _alive,
        *,
        settings: Settings | None = None,
        gate: Any = None,
    ) -> None:
        self.host = host
        self._port = port
        self.metrics = metrics
        self.readiness = readiness
        self.liveness = liveness
        self.settings = settings
        self.gate = gate
        self.app: Any = None  # the FastAPI app, once started
        self._sock: socket.socket | None = None
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        if self._sock is not None:
            return int(self._sock.getsockname()[1])
        return self._port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def _app(self) -> Any:
        from gatekeeper.api.app import create_app
        from gatekeeper.config import HttpSettings

        http = self.settings.http if self.settings is not None else HttpSettings()
        gate = self.gate
        if gate is None and self.settings is not None and http.api and self.settings.routes:
            from gatekeeper.api.gate import Gate

            gate = self.gate = Gate(self.settings, self.metrics)
        guarded, app = create_app(
            self.metrics,
            self.readiness,
            self.liveness,
            api=http.api,
            mcp=http.mcp,
            gate=gate,
            max_body_bytes=http.max_body_bytes,
            rate_limit=http.rate_limit,
            rate_burst=http.rate_burst,
            mcp_host=self.host,
        )
        self.app = app
        return guarded

    async def start(self) -> None:
        """Bind and serve. Raises ``OSError`` when the address cannot be bound."""
        import uvicorn

        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP, and without it
        # a keep-alive connection's answer (head and body, two writes) waits ~40 ms for the client's delayed ACK
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self._port))
            sock.listen(128)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        config = uvicorn.Config(
            self._app(),
            log_config=None,
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=SHUTDOWN_SECONDS,
            server_header=False,
            proxy_headers=False,
        )
        server = self._server = _server_class()(config)
        self._task = asyncio.create_task(self._serve(server, sock), name="gatekeeper-http")
        while not server.started:
            if self._task.done():
                self._sock = None
                sock.close()
                exc = self._task.exception() if not self._task.cancelled() else None
                raise OSError(f"the HTTP server did not start: {exc!r}")
            await asyncio.sleep(0.01)

    @staticmethod
    async def _serve(server: Any, sock: socket.socket) -> None:
        try:
            await server.serve(sockets=[sock])
        except SystemExit as exc:  # uvicorn exits on a startup failure (the lifespan raised)
            raise RuntimeError(f"uvicorn stopped at startup (exit {exc.code})") from None

    async def close(self) -> None:
        server, task = self._server, self._task
        self._server = self._task = None
        if server is not None and task is not None:
            server.should_exit = True
            try:
                await asyncio.wait_for(asyncio.shield(task), SHUTDOWN_SECONDS + 2.0)
            except (TimeoutError, Exception):
                server.force_exit = True
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self._sock is not None:
            self._sock.close()
            self._sock = None


__all__ = ["HttpServer", "Probe", "Readiness"]
