"""The daemon's HTTP port in a process of its own: nothing a client does can take the worker's CPU or its GIL.

A thread of the daemon's own (``gatekeeper.http``) keeps HTTP out of the worker's event loop, but not out of its
process: every request is Python on the same GIL, so a flood of requests (answered or refused alike) still delays
lines, by tens to hundreds of milliseconds on two cores (``bench/http_flood.py``). So ``gatekeeper run`` serves its
port from a child process (``HttpProcess``), which runs the same server (``HttpServer``: the API, MCP, ``/v1/gate``
with its own Kafka and Redis clients, the limits and the connection bounds) and knows the worker only through two
files the worker writes in a private folder (mode 0700, under ``$TMPDIR``: the chart's ``/tmp`` volume):

- ``probes.json``, every ``PUBLISH_INTERVAL`` (0.2 s): what ``/readyz`` and ``/healthz`` answer. The child answers
  from it and fails ``/healthz`` when it is older than ``http.stall_seconds`` (the worker's loop has stopped);
- ``metrics.prom``, on the first tick ``METRICS_INTERVAL`` (0.25 s) after the last (so about every 0.4 s): the
  worker's registry in the text format, without the ``gatekeeper_api_*`` families, which the child counts itself;
  ``/metrics`` serves both.

The child runs at a lower CPU priority (``HTTP_NICE``): on a machine short of CPU, a flood of requests slows the
answers, not the lines. Files rather than a pipe: the worker never waits for the child (a full pipe would block the
worker's loop), and a child that dies or hangs costs the worker nothing. The listening socket is bound by the
daemon (a port in use fails at once, ``port=0`` is resolved there) and handed to the child. The child stops when
told (SIGTERM) or when the daemon is gone; a child that dies on its own stops the daemon (``FatalError``: its probes
would be gone).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import generate_latest

from gatekeeper.metrics import Metrics, filter_families

if TYPE_CHECKING:
    from gatekeeper.config import Settings

log = logging.getLogger(__name__)

METRICS_INTERVAL = 0.25  # how often the worker writes its registry for the child's /metrics (its staleness)
START_TIMEOUT = 60.0  # the child's imports and its server's start
HTTP_NICE = 10  # the child's CPU priority below the worker's (raising one's niceness needs no privilege)
CHILD_FAMILIES = b"gatekeeper_api_"  # the metric families the child counts (requests, their time, the gate)


def worker_metrics_text(metrics: Metrics) -> bytes:
    """The worker's registry in the text format, without the families the child counts itself."""
    return filter_families(generate_latest(metrics.registry), CHILD_FAMILIES, keep=False)


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class HttpProcess:
    """The HTTP port served by a child process (see the module). ``publish`` and ``publish_metrics`` are the
    worker's side, called from its loop; they never block on the child."""

    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.settings = settings
        self.host = settings.http.host
        self.metrics = metrics
        self._sock: socket.socket | None = None
        self._proc: Any = None
        self._dir: Path | None = None
        self._next_metrics = 0.0

    @property
    def port(self) -> int:
        if self._sock is not None:
            return int(self._sock.getsockname()[1])
        return self.settings.http.port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    @property
    def exitcode(self) -> int | None:
        return None if self._proc is None else self._proc.exitcode

    async def start(self, ready: tuple[bool, dict[str, Any]], live: tuple[bool, dict[str, Any]]) -> None:
        """Bind, start the child and wait until it serves. Raises ``OSError`` when the address cannot be bound or
        the child does not start."""
        from gatekeeper.http import bind, raise_open_files_limit

        raise_open_files_limit()
        sock = bind(self.host, self.settings.http.port)
        self._sock = sock
        self._dir = Path(tempfile.mkdtemp(prefix="gatekeeper-http-"))  # 0700
        self.publish(ready, live)
        self.publish_metrics(force=True)
        ctx = multiprocessing.get_context("spawn")
        started = ctx.Event()
        self._proc = ctx.Process(
            target=_child,
            args=(self.settings, sock, str(self._dir), os.getpid(), started),
            name="gatekeeper-http",
            daemon=False,  # it has children of its own (the checks' pool); close() and its watch of the daemon end it
        )
        proc = self._proc
        proc.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not started.is_set():
            if not proc.is_alive():
                await self.close()
                raise OSError(f"the HTTP server's process exited at start (code {proc.exitcode})")
            if time.monotonic() > deadline:
                await self.close()
                raise OSError(f"the HTTP server's process did not start within {START_TIMEOUT:g}s")
            await asyncio.sleep(0.02)

    def publish(self, ready: tuple[bool, dict[str, Any]], live: tuple[bool, dict[str, Any]]) -> None:
        if self._dir is not None:
            doc = {"ready": [ready[0], ready[1]], "live": [live[0], live[1]]}
            _write(self._dir / "probes.json", json.dumps(doc, default=str).encode())

    def publish_metrics(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._dir is not None and (force or now >= self._next_metrics):
            self._next_metrics = now + METRICS_INTERVAL
            _write(self._dir / "metrics.prom", worker_metrics_text(self.metrics))

    async def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
            await asyncio.to_thread(proc.join, 10.0)
            if proc.is_alive():
                proc.kill()
                await asyncio.to_thread(proc.join, 5.0)
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


# ------------------------------------------------------------------------------------------------ the child


class _Board:
    """The child's view of the worker: the files it writes."""

    def __init__(self, folder: str, stall_seconds: float) -> None:
        self.folder = Path(folder)
        self.stall_seconds = stall_seconds

    def _probes(self) -> tuple[dict[str, Any], float]:
        path = self.folder / "probes.json"
        try:
            return json.loads(path.read_bytes()), time.time() - path.stat().st_mtime
        except (OSError, ValueError):
            return {"ready": [False, {"reason": "starting"}], "live": [True, {}]}, 0.0

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        doc, _age = self._probes()
        ok, detail = doc["ready"]
        return bool(ok), dict(detail)

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        doc, age = self._probes()
        if self.stall_seconds > 0 and age >= self.stall_seconds:
            return False, {
                "reason": "the worker's event loop has not run",
                "stalled_seconds": round(age, 1),
                "stall_seconds": self.stall_seconds,
            }
        ok, detail = doc["live"]
        return bool(ok), dict(detail)

    def metrics(self) -> bytes:
        try:
            return (self.folder / "metrics.prom").read_bytes()
        except OSError:
            return b""


def _child(settings: Settings, sock: socket.socket, folder: str, parent: int, started: Any) -> None:
    """The child's main: serve until SIGTERM or until the daemon is gone."""
    from gatekeeper.http import HttpServer, freeze_startup_objects
    from gatekeeper.logs import configure_logging

    configure_logging(settings.log_format, settings.log_level)
    with contextlib.suppress(OSError):
        os.nice(HTTP_NICE)  # when the machine is short of CPU, the worker's lines go first
    board = _Board(folder, settings.http.stall_seconds)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the daemon's to handle

    async def main() -> None:
        server = HttpServer(
            settings.http.host,
            settings.http.port,
            Metrics(),
            board.readiness,
            board.liveness,
            settings=settings,
            sock=sock,
            worker_metrics=board.metrics,
        )
        await server.start()
        freeze_startup_objects()
        started.set()
        try:
            while not stop.is_set() and os.getppid() == parent:
                await asyncio.sleep(0.5)
        finally:
            orphaned = os.getppid() != parent
            await server.close()
            if orphaned:  # the daemon was killed: nobody else removes its folder
                shutil.rmtree(folder, ignore_errors=True)

    asyncio.run(main())


__all__ = ["HttpProcess", "worker_metrics_text"]
