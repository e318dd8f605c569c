"""A batch in flight (``consumers.deciding.Batch``)."""

from __future__ import annotations

from gatekeeper.consumers.deciding import Batch
from gatekeeper.policy import Decision, Reason, Verdict
from tests.unit.test_holds import line


def test_a_batch_split_by_partition_keeps_each_lines_decision_and_records_at_its_new_place() -> None:
    """``Batch.only`` (exactly-once: each partition's transaction ends on its own) renumbers the lines it keeps, and
    their decisions, signers and the records built while their route saved go with them."""
    lines = [line(0, partition=0), line(0, "c2", partition=1), line(1, partition=0)]
    b = Batch(lines)
    for i in range(3):
        b.decisions[i] = Decision(
            Verdict.FORWARD if i != 1 else Verdict.DEAD_LETTER, None if i != 1 else Reason.INVALID
        )
        b.built[i] = [f"record of line {i}"]  # type: ignore[list-item]
    part = b.only({("r", 0)})
    assert part.lines == [lines[0], lines[2]]
    assert part.decisions == {0: b.decisions[0], 1: b.decisions[2]}
    assert part.built == {0: ["record of line 0"], 1: ["record of line 2"]}
