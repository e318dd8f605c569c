"""Fenced writes: an instance that lost its partition in a rebalance, and has not noticed yet, cannot overwrite the
new owner's state. The same scenario runs on real Redis in ``tests/integration/test_redis_store.py``.

The zombie (epoch 1) decides a readback, then pauses before its save (a GC pause); the new owner (epoch 2) decides
the same readback and the negative answer after it, and saves. The zombie's late save would overwrite the readback's
entry with its own, unrefused, copy: the refusal would vanish, and a later clearance would pass. Fenced, it is
refused, and the clearance is refused as it must be.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gatekeeper.policy import Reason, Verdict
from gatekeeper.processor import Line, Processor
from gatekeeper.store import Fenced, MemoryStore, Store
from tests.policy.world import NOW, RECORD, route
from tests.seed import AN, HO, RB

REFUSE = (
    AN.replace("val=Y", "val=N")
    .replace("scheduler-2", "scheduler-4")
    .replace(" // readback matches the approved run; proceed", "")
)


class PausedSave:
    """The store, with saves that wait for ``resume`` (the zombie's pause) once ``pause`` is set."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.pause = False
        self.paused = asyncio.Event()
        self.resume = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def save(self, *args: Any, **kw: Any) -> Any:
        if self.pause:
            self.paused.set()
            await self.resume.wait()
        return await self.inner.save(*args, **kw)


async def zombie_scenario(store: Store) -> tuple[type[BaseException] | None, list[Any]]:
    await store.put_record(RECORD)
    paused = PausedSave(store)
    zombie = Processor(paused, route())  # type: ignore[arg-type]
    zombie.epochs.update(await store.take_epochs("agents.pay", [0]))
    owner = Processor(store, route())
    (d,) = await zombie.process([Line("c1", HO.encode(), partition=0)], NOW)
    assert d.verdict is Verdict.FORWARD
    paused.pause = True
    late = asyncio.create_task(zombie.process([Line("c1", RB.encode(), partition=0)], NOW + 1))
    await paused.paused.wait()  # the zombie decided the readback and is stuck before its save
    owner.epochs.update(await store.take_epochs("agents.pay", [0]))  # the rebalance gave the partition away
    decided = await owner.process(
        [Line("c1", RB.encode(), partition=0), Line("c1", REFUSE.encode(), partition=0)], NOW + 2
    )
    assert [x.verdict for x in decided] == [Verdict.FORWARD, Verdict.FORWARD]
    paused.resume.set()
    raised: type[BaseException] | None = None
    try:
        await late
    except Fenced:
        raised = Fenced
    (clearance,) = await owner.process([Line("c1", AN.encode(), partition=0)], NOW + 3)
    return raised, [clearance]


async def test_a_zombie_s_late_write_is_refused_and_the_new_owner_s_refusal_stands() -> None:
    store = MemoryStore()
    raised, (clearance,) = await zombie_scenario(store)
    assert raised is Fenced
    assert (clearance.verdict, clearance.reason) == (Verdict.DEAD_LETTER, Reason.CLEARANCE)
    assert [p.code for p in clearance.problems] == ["clearance-refused"]
    state = store.state("agents.pay", "c1")
    assert state is not None and state.readbacks["payer-1"].refused


async def test_without_a_fence_the_refusal_would_vanish() -> None:
    """The scenario the fence exists for, shown by turning it off: the zombie's write lands over the new owner's."""

    class Unfenced(MemoryStore):
        async def save(
            self, route: str, states: Any, deadlines: Any = (), fences: Any = None, now: Any = None, claims: Any = ()
        ) -> Any:
            return await super().save(route, states, deadlines, None, now=now, claims=claims)

    store = Unfenced()
    raised, (clearance,) = await zombie_scenario(store)
    assert raised is None
    assert clearance.verdict is Verdict.FORWARD  # cleared: the refusal is gone


async def test_epochs_grow_with_every_assignment_and_an_owner_s_own_writes_pass() -> None:
    store = MemoryStore()
    assert await store.take_epochs("r", [0, 1]) == {0: 1, 1: 1}
    assert await store.take_epochs("r", [1]) == {1: 2}
    p = Processor(store, route(name="r"))
    p.epochs.update({0: 1, 1: 2})
    for i in range(3):
        st = f"RW1 ST scheduler-{10 + i} p=pay from=scheduler to=payer item=doc:x{i}"
        await p.process([Line("c1", st.encode(), partition=1)], NOW)
    assert store.fields("r", "c1")["e"] == "2"
    p.epochs[1] = 1  # an older epoch than the last write's
    with pytest.raises(Fenced) as info:
        await p.process([Line("c1", b"RW1 ST scheduler-20 p=pay from=scheduler to=payer item=doc:y", partition=1)], NOW)
    assert info.value.conversations == ("c1",)


async def test_the_in_memory_index_is_fenced_by_the_partition_s_epoch_as_in_redis() -> None:
    from gatekeeper.policy.lifecycle import IndexEntry

    store = MemoryStore()
    old = (await store.take_epochs("r", [3]))[3]
    new = (await store.take_epochs("r", [3]))[3]
    await store.save("r", {}, [IndexEntry(3, "c9", "h-1", open=True, opened_at=NOW)], {"c9": new})
    with pytest.raises(Fenced):
        await store.save("r", {}, [IndexEntry(3, "c9", "h-1", open=False)], {"c9": old})
    assert [m.ho for _, m in await store.index("r", "open")] == ["h-1"]
