"""A tiny HTTP/1.1 server on asyncio streams for probes and scraping. No framework, one request per connection.

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
==============  ===========================================================================================

``GET`` and ``HEAD`` only; anything else is 405, an unknown path 404. Requests are bounded (8 KiB of head, 5 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

from gatekeeper.metrics import Metrics

log = logging.getLogger(__name__)

#: A probe's answer: (passing, detail for the JSON body).
Probe = Callable[[], tuple[bool, dict[str, Any]]]
Readiness = Probe


def _alive() -> tuple[bool, dict[str, Any]]:
    return True, {}


_MAX_HEAD = 8192
_TIMEOUT = 5.0
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


class HttpServer:
    """Serves ``/metrics``, ``/healthz`` and ``/readyz``. ``port=0`` picks a free port (see ``port``)."""

    def __init__(self, host: str, port: int, metrics: Metrics, readiness: Probe, liveness: Probe = _alive) -> None:
        self.host = host
        self._port = port
        self.metrics = metrics
        self.readiness = readiness
        self.liveness = liveness
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        if self._server is not None and self._server.sockets:
            return int(self._server.sockets[0].getsockname()[1])
        return self._port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self._port, reuse_address=True)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _TIMEOUT)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
                await self._send(writer, 400, b"bad request\n", "text/plain; charset=utf-8")
                return
            if len(head) > _MAX_HEAD:
                await self._send(writer, 400, b"request too large\n", "text/plain; charset=utf-8")
                return
            parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            if len(parts) != 3:
                await self._send(writer, 400, b"bad request\n", "text/plain; charset=utf-8")
                return
            method, target, _version = parts
            path = target.split("?", 1)[0]
            if method not in ("GET", "HEAD"):
                await self._send(writer, 405, b"method not allowed\n", "text/plain; charset=utf-8", head_only=False)
                return
            status, body, ctype = self._route(path)
            await self._send(writer, status, body, ctype, head_only=method == "HEAD")
        except (ConnectionError, OSError):
            pass
        except Exception:  # a probe must never take the server down
            log.exception("http handler failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _route(self, path: str) -> tuple[int, bytes, str]:
        if path == "/metrics":
            body, ctype = self.metrics.exposition()
            return 200, body, ctype
        if path == "/healthz":
            alive, detail = self.liveness()
            doc = {"status": "alive" if alive else "stalled", **detail}
            return (200 if alive else 503), _json(doc), "application/json"
        if path == "/readyz":
            ready, detail = self.readiness()
            doc = {"status": "ready" if ready else "not-ready", **detail}
            return (200 if ready else 503), _json(doc), "application/json"
        return 404, b"not found\n", "text/plain; charset=utf-8"

    async def _send(
        self, writer: asyncio.StreamWriter, status: int, body: bytes, ctype: str, head_only: bool = False
    ) -> None:
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}\r\n"
            f"Content-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Cache-Control: no-store\r\n"
            "Connection: close\r\n\r\n"
        ).encode("latin-1")
        writer.write(head if head_only else head + body)
        await writer.drain()


def _json(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


__all__ = ["HttpServer", "Probe", "Readiness"]
