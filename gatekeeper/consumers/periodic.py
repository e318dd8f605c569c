"""A coroutine run every so often beside the worker, in a task of its own, until the worker stops.

    probes = Every("gatekeeper-probe", 5.0, probe, stop_event)
    probes.start()
    ...
    await probes.stop(grace=30.0)   # a run in progress finishes within the grace period, or is cancelled
    probes.cancel()                 # at once (a second stop request)

The worker's background work (the readiness probe, the sweeper) is this shape: sleep, unless the stop event is set;
run; never end on an error (it is logged, and the next run comes at the next interval). Written here because
asyncio has no periodic task, and the two-stage stop (drain, then cancel) is the worker's own rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger("gatekeeper.consumers.loop")


class Every:
    """``run()`` every ``interval`` seconds from ``start()`` until ``stop`` is set (a run is never started once it
    is)."""

    def __init__(self, name: str, interval: float, run: Callable[[], Awaitable[object]], stop: asyncio.Event) -> None:
        self.name = name
        self.interval = interval
        self._run = run
        self._stop = stop
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=self.name)

    async def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=self.interval)
            if self._stop.is_set():
                return
            try:
                await self._run()
            except Exception:  # it must never end: the next run is at the next interval
                log.exception(f"{self.name} failed; run again at the next interval")

    def cancel(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def stop(self, grace: float = 0.0) -> None:
        """Wait up to ``grace`` seconds for a run in progress (the stop event ends the loop between runs), then
        cancel it. Call it after the stop event is set."""
        task, self._task = self._task, None
        if task is None:
            return
        if not task.done() and grace > 0:
            done, _ = await asyncio.wait({task}, timeout=grace)
            if not done:
                log.warning(f"grace period over: cancelling {self.name}")
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


__all__ = ["Every"]
