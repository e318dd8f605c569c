"""``Processor.process``'s ``meanwhile``: work done with a batch's decisions while their save is on its way.

The worker builds a batch's records in the time Redis takes to write its decisions. What that may rely on: it runs
before the save has returned, its last call is with the decisions ``process`` returns (a save that conflicts is
decided again, and the work is done again with the new decisions), and a save that fails leaves nothing behind
that the caller would take as done.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gatekeeper.policy import BindingChange, Decision, Verdict
from gatekeeper.processor import Line, Processor
from gatekeeper.store import MemoryStore, StoreError
from tests.policy.world import NOW, RECORD, route
from tests.seed import HO, RB


class _Store(MemoryStore):
    """The in-memory store whose saves wait for ``go``; the first save can find the approval bound by another
    handoff first (``steal``), or fail (``fail``)."""

    def __init__(self, *, steal: bool = False, fail: bool = False) -> None:
        super().__init__()
        self.go = asyncio.Event()
        self.go.set()
        self.steal, self.fail = steal, fail
        self.saves = 0

    async def save(self, route: str, states: Any, *args: Any, **kw: Any) -> list[BindingChange]:
        await self.go.wait()
        self.saves += 1
        if self.fail:
            self.fail = False
            raise StoreError("redis is down (injected)")
        if self.steal:
            self.steal = False
            await self.claim([BindingChange(RECORD.key, None, "agents.pay/other/scheduler-1#0000000000000000@0")])
        return await super().save(route, states, *args, **kw)


async def _processor(store: _Store) -> Processor:
    await store.put_record(RECORD)
    return Processor(store, route())


LINES = [Line("c1", HO.encode(), partition=0), Line("c1", RB.encode(), partition=0)]


async def test_the_work_meanwhile_runs_while_the_save_is_on_its_way_with_the_decisions_returned() -> None:
    store = _Store()
    store.go.clear()
    p = await _processor(store)
    given: list[tuple[list[Decision], int]] = []
    task = asyncio.create_task(p.process(LINES, NOW, lambda ds: given.append((ds, store.saves))))
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(given) == 1 and given[0][1] == 0 and not task.done()  # called, and the save has not returned
    store.go.set()
    decisions = await task
    assert given[0][0] is decisions and [d.verdict for d in decisions] == [Verdict.FORWARD, Verdict.FORWARD]


async def test_a_save_that_conflicts_does_the_work_again_with_the_decisions_made_again() -> None:
    store = _Store(steal=True)  # another handoff binds the approval between this batch's load and its save
    p = await _processor(store)
    given: list[list[Decision]] = []
    decisions = await p.process(LINES[:1], NOW, given.append)
    assert len(given) == 2 and given[-1] is decisions
    assert given[0][0].verdict is Verdict.FORWARD  # decided before the approval was bound elsewhere
    assert decisions[0].verdict is Verdict.DEAD_LETTER  # decided again: it holds no approval now


async def test_a_save_that_fails_raises_after_the_work_meanwhile() -> None:
    store = _Store(fail=True)
    p = await _processor(store)
    given: list[list[Decision]] = []
    with pytest.raises(StoreError):
        await p.process(LINES, NOW, given.append)
    assert len(given) == 1  # done, but the caller never gets decisions to pair it with
    decisions = await p.process(LINES, NOW, given.append)  # the batch again: decided and saved this time
    assert given[-1] is decisions and [d.verdict for d in decisions] == [Verdict.FORWARD, Verdict.FORWARD]


async def test_a_bug_in_the_work_meanwhile_cancels_the_save_and_is_raised() -> None:
    store = _Store()
    store.go.clear()
    p = await _processor(store)

    def broken(ds: list[Decision]) -> None:
        raise RuntimeError("a bug in building the records")

    with pytest.raises(RuntimeError, match="a bug"):
        await p.process(LINES, NOW, broken)
    store.go.set()
    await asyncio.sleep(0.01)
    assert store.saves == 0  # the save waiting for its turn was cancelled, never written
