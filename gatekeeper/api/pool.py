"""The stateless checks in worker processes: their CPU is never the daemon's.

The HTTP server has a thread of its own (``gatekeeper.http``), but a thread still shares the process's GIL with the
worker: a check of a long thread or an answer of a megabyte is milliseconds of CPU that C code (the JSON encoder,
pydantic's validator) holds without letting go, and a few of them at once delayed lines by hundreds of
milliseconds (``bench/http_flood.py``). So the checks of ``/v1/...`` and of the MCP tools run in a small pool of
processes (the standard library's ``ProcessPoolExecutor``, ``forkserver`` children with ``rwcore`` loaded once): the
server's thread validates the request, hands it over and writes the answer the worker process rendered. The pool
has at most ``http.in_flight.api`` processes and one fewer than the machine's CPUs (at least one), at the lowest CPU
priority (nice 19), started on the first request: checks never take every core, nor the CPU the lines need.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from gatekeeper.api.functions import FUNCTIONS


def render(name: str, request: Any) -> bytes:
    """In a worker process: the answer of function ``name`` as the API sends it (``CompatJSON``'s rendering: ASCII
    JSON as Python's ``json.dumps`` writes it). ``BadInput`` is raised back to the caller."""
    _model, func = FUNCTIONS[name]
    return json.dumps(func(request)).encode("ascii")


def answer(name: str, request: Any) -> dict[str, Any]:
    """In a worker process: the answer of function ``name`` as data (for the MCP tools)."""
    _model, func = FUNCTIONS[name]
    return func(request)


def _yield() -> None:
    """A worker process's start: the lowest CPU priority, so that checks never take the CPU lines need."""
    with contextlib.suppress(OSError):
        os.nice(19)


def _context() -> Any:
    try:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["gatekeeper.api.pool"])
        return ctx
    except ValueError:  # no forkserver on this platform
        return multiprocessing.get_context("spawn")


class FunctionPool:
    """A bounded pool of worker processes for the stateless functions; ``close`` ends them."""

    def __init__(self, processes: int) -> None:
        self.processes = max(1, min(processes, (os.cpu_count() or 2) - 1))  # a core is left to the worker
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.processes, mp_context=_context(), initializer=_yield)
        return self._pool

    async def render(self, name: str, request: Any) -> bytes:
        return await asyncio.get_running_loop().run_in_executor(self._executor(), render, name, request)

    async def answer(self, name: str, request: Any) -> dict[str, Any]:
        return await asyncio.get_running_loop().run_in_executor(self._executor(), answer, name, request)

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


__all__ = ["FunctionPool", "answer", "render"]
