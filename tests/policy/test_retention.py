"""A conversation that talks for longer than the retention still bounds its memory: what no decision to come can
read goes (``policy.state.collect``), a handoff still open keeps everything its next lines need. The same sequence
runs on real Redis in ``tests/integration/test_redis_store.py`` and must leave the same fields."""

from __future__ import annotations

from gatekeeper.policy import Reason, Verdict
from gatekeeper.processor import Line, Processor
from gatekeeper.store import MemoryStore, Store
from tests.policy.world import NOW, RECORD, route
from tests.seed import AN, DN, HO, RB

RETENTION = 60.0
STEP = 10.0  # seconds between two flows


def review(i: int) -> list[str]:
    item = f"doc:r{i}"
    return [
        f"RW1 HO scheduler-{100 + i} p=pay from=scheduler to=desk item={item} ask=REVIEW sup=marlow",
        f"RW1 RB desk-{3 * i + 1} re=scheduler-{100 + i} from=desk to=scheduler item={item} ask=REVIEW p=pay "
        "sup=marlow",
        f"RW1 DN desk-{3 * i + 2} re=scheduler-{100 + i} p=pay from=desk to=scheduler item={item} out=OK",
        f"RW1 ST desk-{3 * i + 3} p=pay from=desk to=scheduler item={item} // reviewed",
    ]


async def a_long_conversation(store: Store, flows: int) -> tuple[Processor, float]:
    """The seed's payment opened, read back and cleared at the start and left open; then ``flows`` review flows,
    one every ``STEP`` seconds, long past the retention."""
    await store.put_record(RECORD)
    p = Processor(store, route(hold_seconds=0.0))
    for text in (HO, RB, AN):
        (d,) = await p.process([Line("long", text.encode(), partition=0)], NOW)
        assert d.verdict is Verdict.FORWARD, d.problems
    now = NOW
    for i in range(flows):
        now += STEP
        for d in await p.process([Line("long", t.encode(), partition=0) for t in review(i)], now):
            assert d.verdict is Verdict.FORWARD, d.problems
    return p, now


async def test_a_long_conversation_keeps_only_the_retention_s_worth_and_its_open_handoff() -> None:
    store = MemoryStore(retention_seconds=RETENTION)
    p, now = await a_long_conversation(store, 300)
    fields = store.fields("agents.pay", "long")
    # the open payment keeps its handoff, its readback (the plan) and its clearance's target
    for name in ("l:scheduler-1", "o:scheduler-1", "t:scheduler-1", "l:payer-1", "r:payer-1"):
        assert name in fields, name
    # 300 flows of 4 lines would be about 3,000 fields; only the last retention's worth (and the queue's lag) stay
    reviews = [n for n in fields if n.startswith(("l:desk-", "l:scheduler-1"))]
    assert len(fields) < 200, len(fields)
    assert len(reviews) <= 2 * 4 * (2 * RETENTION / STEP) + 10
    # the open payment is still decided right: its done report against the plan of long ago
    (done,) = await p.process([Line("long", DN.encode(), partition=0)], now + STEP)
    assert (done.verdict, done.reason) == (Verdict.FORWARD, None), done.problems
    # a reply to a handoff collected long ago is unknown: fail closed
    late = "RW1 RB desk-9999 re=scheduler-100 from=desk to=scheduler item=doc:r0 ask=REVIEW p=pay sup=marlow"
    (d,) = await p.process([Line("long", late.encode(), partition=0)], now + STEP)
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.UNKNOWN_HANDOFF)


async def test_nothing_goes_within_the_retention() -> None:
    store = MemoryStore(retention_seconds=10 * 86400.0)
    await a_long_conversation(store, 40)
    fields = store.fields("agents.pay", "long")
    assert sum(1 for n in fields if n.startswith("l:")) == 3 + 40 * 4
