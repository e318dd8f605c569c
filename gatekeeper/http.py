"""The gatekeeper's one HTTP port: a real ASGI server (uvicorn) on a thread of its own, with its own event loop.

It serves the probes and ``/metrics`` as before, and the HTTP API, its OpenAPI and the MCP tools
(``gatekeeper.api.app``, where every path is listed):

==============  ===========================================================================================
path            answer
==============  ===========================================================================================
``/metrics``    200, the Prometheus text exposition of the gatekeeper's registry
``/healthz``    200 ``{"status": "alive"}`` while the work loop turns (liveness); 503 ``{"status": "stalled",
                ...}`` when it has not turned for ``http.stall_seconds`` while it holds partitions with lag (a
                call that hangs: a restart cures it), or when the worker's event loop has not run for that long.
                A service that is down is not a stall: the loop turns, retrying, and ``/readyz`` says why
``/readyz``     200 ``{"status": "ready", ...}`` when Kafka and Redis answer and the consumer group is joined
                (partitions assigned, or none to assign yet); 503 ``{"status": "not-ready", "reason": ...}``
                otherwise (readiness: a load balancer or Kubernetes stops sending traffic, nothing restarts)
``/v1/...``     the API (``http.api``): the stateless checks, ``/v1/gate`` (with a token), ``/openapi.json``
``/mcp``        the MCP tools (``http.mcp``), streamable HTTP
==============  ===========================================================================================

**Where it runs.** The server runs on a thread of its own with its own event loop, so that nothing a client does
queues in front of the caller's loop. ``gatekeeper serve`` uses it as it is; ``gatekeeper run`` runs it in a process
of its own (``gatekeeper.http_process``), so that its CPU cannot take the worker's GIL either. Within it, the requests
in progress are bounded per endpoint class (``http.in_flight``), each client address is rate limited, answers are
capped, connections are bounded (``gatekeeper.http_connections``), and the checks and MCP tools run in worker
processes (``gatekeeper.api.pool``). The GIL's switch interval is lowered (``SWITCH_INTERVAL``) so that the
server's event loop gets the GIL back quickly from the threads of the server's process.

The server installs no signal handlers (the daemon owns SIGTERM and SIGINT), and uvicorn's own logs are quiet
(warnings and errors only; no access log: ``gatekeeper_api_requests_total`` counts the requests). The socket is
bound by ``start()`` itself, so a port in use raises ``OSError`` there and ``port=0`` is resolved at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
import sys
import threading
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from gatekeeper.http_connections import ConnectionLimits, protocol_class
from gatekeeper.metrics import Metrics

if TYPE_CHECKING:
    from gatekeeper.config import HttpSettings, Settings

log = logging.getLogger(__name__)

#: A probe's answer: (passing, detail for the JSON body).
Probe = Callable[[], tuple[bool, dict[str, Any]]]
Readiness = Probe

#: How long ``close()`` lets requests in flight finish (a /v1/gate waiting for its outcome is answered 504 by then
#: or cancelled: its line is on the input topic either way).
SHUTDOWN_SECONDS = 3

#: The GIL's switch interval while a server runs (Python's default is 5 ms): a thread that waits for the GIL asks
#: for it after this long, so the server's loop (and the caller's) is not held 5 ms behind another thread's CPU.
SWITCH_INTERVAL = 0.0005


def _alive() -> tuple[bool, dict[str, Any]]:
    return True, {}


def _server_class() -> Any:
    import uvicorn

    class _Server(uvicorn.Server):
        """uvicorn's server without its signal handling: the daemon's handlers stay in place (and a thread other
        than the main one may not install any)."""

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
        sock: socket.socket | None = None,
        worker_metrics: Callable[[], bytes] | None = None,
    ) -> None:
        self.host = host
        self._port = port
        self.metrics = metrics
        self.readiness = readiness
        self.liveness = liveness
        self.settings = settings
        self.gate = gate
        self.app: Any = None  # the FastAPI app, once started
        self._sock: socket.socket | None = sock  # bound already (the daemon's HTTP process gets it so)
        self.worker_metrics = worker_metrics
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def port(self) -> int:
        if self._sock is not None:
            return int(self._sock.getsockname()[1])
        return self._port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def _http_settings(self) -> HttpSettings:
        from gatekeeper.config import HttpSettings

        return self.settings.http if self.settings is not None else HttpSettings()

    def _app(self) -> Any:
        from gatekeeper.api.app import create_app
        from gatekeeper.api.auth import TokenBook

        http = self._http_settings()
        gate = self.gate
        if gate is None and self.settings is not None and http.api and self.settings.routes:
            from gatekeeper.api.gate import Gate

            gate = self.gate = Gate(self.settings, self.metrics)
        console = None
        if self.settings is not None and http.console and self.settings.routes:
            from gatekeeper.console.service import Console

            console = Console(self.settings, worker_metrics=self.worker_metrics, readiness=self.readiness)
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
            in_flight=http.in_flight.model_dump(),
            max_answer_bytes=http.max_answer_bytes,
            metrics_tokens=TokenBook.from_settings(http) if http.metrics_auth else None,
            worker_metrics=self.worker_metrics,
            console=console,
        )
        self.app = app
        return guarded

    async def start(self) -> None:
        """Bind and serve on the server's thread. Raises ``OSError`` when the address cannot be bound or the server
        does not start."""
        import uvicorn

        sock = self._sock if self._sock is not None else bind(self.host, self._port)
        self._sock = sock
        http = self._http_settings()
        raise_open_files_limit()
        config = uvicorn.Config(
            self._app(),
            http=protocol_class(
                ConnectionLimits(
                    idle_seconds=http.idle_timeout_seconds,
                    read_seconds=http.read_timeout_seconds,
                    max_connections=http.max_connections,
                    max_requests=http.max_requests_per_connection,
                )
            ),
            log_config=None,
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=SHUTDOWN_SECONDS,
            server_header=False,
            proxy_headers=False,
        )
        server = self._server = _server_class()(config)
        self._error = None
        self._thread = threading.Thread(target=self._serve, args=(server, sock), name="gatekeeper-http", daemon=True)
        if sys.getswitchinterval() > SWITCH_INTERVAL:
            sys.setswitchinterval(SWITCH_INTERVAL)
        self._thread.start()
        while not server.started:
            if not self._thread.is_alive():
                self._sock = None
                sock.close()
                raise OSError(f"the HTTP server did not start: {self._error!r}")
            await asyncio.sleep(0.01)

    def _serve(self, server: Any, sock: socket.socket) -> None:
        """The server's thread: its own event loop, until ``close``."""
        try:
            asyncio.run(server.serve(sockets=[sock]))
        except SystemExit as exc:  # uvicorn exits on a startup failure (the lifespan raised)
            self._error = RuntimeError(f"uvicorn stopped at startup (exit {exc.code})")
        except BaseException as exc:
            self._error = exc
            log.exception("the HTTP server stopped")

    async def close(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None and thread is not None:
            server.should_exit = True
            await asyncio.to_thread(thread.join, SHUTDOWN_SECONDS + 2.0)
            if thread.is_alive():
                server.force_exit = True
                await asyncio.to_thread(thread.join, 2.0)
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (non-blocking). Raises ``OSError`` when it cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP, and without it
    # a keep-alive connection's answer (head and body, two writes) waits ~40 ms for the client's delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def freeze_startup_objects() -> None:
    """Move every object alive now (the modules, the app, its models and routes, the profiles) out of the garbage
    collector's view (``gc.freeze``): a full collection no longer walks them, so a page that allocates much (the
    console's conversation of 1,000 lines) does not pay for the whole heap. Measured with bench/console_page.py: the
    page's p99 from 255 ms to 117 ms. Called once, by the processes that serve (``gatekeeper serve``, the HTTP
    process of ``gatekeeper run``; its worker, through ``cli.run.tune_gc``), never by the library: a test process
    would keep its garbage."""
    import gc

    gc.collect()
    gc.freeze()


def raise_open_files_limit() -> None:
    """Raise the soft limit of open files to the hard limit (at most 65,536): the HTTP port's connections are
    bounded (``http.max_connections``), and the worker's Kafka and Redis sockets must never be the ones refused."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = 65_536 if hard == resource.RLIM_INFINITY else min(hard, 65_536)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


__all__ = ["HttpServer", "Probe", "Readiness", "bind", "freeze_startup_objects", "raise_open_files_limit"]
