"""The worker's background work (``consumers.periodic.Every``): runs until the stop event, never ends on an error,
and stops in two stages (a run in progress drains within the grace period, or is cancelled)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gatekeeper.consumers.periodic import Every


async def test_it_runs_again_after_a_run_that_raised(caplog: pytest.LogCaptureFixture) -> None:
    stop = asyncio.Event()
    runs: list[int] = []

    async def run() -> None:
        runs.append(len(runs))
        if len(runs) == 1:
            raise RuntimeError("boom")
        if len(runs) == 3:
            stop.set()

    every = Every("the test", 0.001, run, stop)
    every.start()
    with caplog.at_level(logging.ERROR):
        await asyncio.wait_for(stop.wait(), timeout=10)
        await every.stop()
    assert runs == [0, 1, 2]
    assert "the test failed" in caplog.text and "boom" in caplog.text


async def test_no_run_starts_once_stopping() -> None:
    stop = asyncio.Event()
    stop.set()
    runs: list[int] = []

    async def run() -> None:
        runs.append(1)

    every = Every("the test", 0.0, run, stop)
    every.start()
    await every.stop(grace=1.0)
    assert runs == []


async def test_a_run_in_progress_drains_within_the_grace_period() -> None:
    stop = asyncio.Event()
    started, finished = asyncio.Event(), asyncio.Event()

    async def run() -> None:
        started.set()
        await asyncio.sleep(0.05)
        finished.set()

    every = Every("the test", 0.0, run, stop)
    every.start()
    await asyncio.wait_for(started.wait(), timeout=10)
    stop.set()
    await every.stop(grace=30.0)
    assert finished.is_set()


async def test_a_run_past_the_grace_period_is_cancelled(caplog: pytest.LogCaptureFixture) -> None:
    stop = asyncio.Event()
    started = asyncio.Event()
    cancelled: list[bool] = []

    async def run() -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    every = Every("the test", 0.0, run, stop)
    every.start()
    await asyncio.wait_for(started.wait(), timeout=10)
    stop.set()
    with caplog.at_level(logging.WARNING):
        await every.stop(grace=0.05)
    assert cancelled == [True]
    assert "grace period over: cancelling the test" in caplog.text
