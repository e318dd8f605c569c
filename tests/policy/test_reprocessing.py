"""Same line, same verdict: redelivering any suffix of a conversation (a crash, a rebalance) changes nothing."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.policy.world import ACK, AN, CX, DN, HO, RB, World, pay_world

POOL = [
    HO,
    HO.replace("61102938", "61102983"),  # check-ho
    HO.replace("scheduler-1", "scheduler-5", 1),  # a second handoff of the same approval
    RB,
    RB.replace("61102938", "61102983"),  # a lookalike account
    RB.replace("payer-1", "payer-6", 1),
    AN,
    "RW1 AN scheduler-2 re=payer-1 p=pay from=scheduler to=payer val=HOLD",
    DN,
    DN.replace("amt=5400.00", "amt=5100.00").replace("payer-2", "payer-7", 1),
    "RW1 DN payer-8 re=scheduler-1 p=pay from=payer to=scheduler item=inv:MD-2026-057 out=NOOP",
    CX,
    ACK,
    "RW1 UN payer-9 re=scheduler-1 p=pay from=payer to=scheduler why=BUSY",
    "RW1 CX desk-1 re=scheduler-1 p=pay from=desk to=payer item=inv:MD-2026-057 why=REVOKED",
    HO.replace("amt=5400.00", "amt=54"),  # invalid, leaves a tombstone
    "RW1 XX nobody-1 from=a to=b",  # invalid, no tombstone
]

conversations = st.lists(
    st.tuples(st.sampled_from(["c1", "c2"]), st.sampled_from(POOL)),
    min_size=1,
    max_size=14,
)


def run(lines: list[tuple[str, str]], world: World) -> list[tuple[str, str | None]]:
    return [(d.verdict.value, d.reason) for d in (world.send(line, conv) for conv, line in lines)]


def snapshot(world: World) -> str:
    states = {k: v.all_fields() for k, v in sorted(world.states.items())}
    bindings = {str(k): v for k, v in world.bindings.items()}
    return json.dumps([states, bindings], sort_keys=True)


@settings(max_examples=150, deadline=None)
@given(lines=conversations, data=st.data())
def test_redelivering_a_suffix_gives_the_same_verdicts_and_state(
    lines: list[tuple[str, str]], data: st.DataObject
) -> None:
    once = pay_world(hold_seconds=0.0)
    verdicts = run(lines, once)
    crashed_at = data.draw(st.integers(0, len(lines)), label="crashed after")
    resumed_from = data.draw(st.integers(0, crashed_at), label="committed offset")
    twice = pay_world(hold_seconds=0.0)
    run(lines[:crashed_at], twice)
    again = run(lines[resumed_from:], twice)
    assert again == verdicts[resumed_from:]
    assert snapshot(twice) == snapshot(once)


@settings(max_examples=60, deadline=None)
@given(lines=conversations)
def test_state_survives_serialisation_between_any_two_lines(lines: list[tuple[str, str]]) -> None:
    """The daemon keeps state in Redis between batches: a round trip through JSON between lines changes nothing."""
    from gatekeeper.policy import ConversationState

    direct = pay_world(hold_seconds=0.0)
    verdicts = run(lines, direct)
    stored = pay_world(hold_seconds=0.0)
    out = []
    for conv, line in lines:
        out.extend(run([(conv, line)], stored))
        stored.states = {
            k: ConversationState.from_fields(json.loads(json.dumps(v.all_fields()))) for k, v in stored.states.items()
        }
    assert out == verdicts
    assert snapshot(stored) == snapshot(direct)
