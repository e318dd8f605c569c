"""The decision path's outcomes, held to what was recorded (``tests/golden/record.py``): about 100,000 lines of
generated conversations, hostile lines included, through the worker's own deciding and record building. Every
outcome record (value and headers), every state field, index entry and binding must be what it was, byte for byte:
the bar a native engine must clear before the Python one is deleted (issue 33). A change of behaviour on purpose
is recorded again (``python -m tests.golden.record``) in the same commit, and the commit says why."""

from __future__ import annotations

import json
import logging
import lzma
from typing import Any

import pytest

import gatekeeper.processor as processor_module
from tests.golden.record import SAMPLE, digest, recorded, run


async def test_every_conversation_ends_as_recorded() -> None:
    await _ends_as_recorded()


async def test_the_guarded_path_ends_as_recorded_too(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The path a batch takes when a line of it raises (``Processor``: decided again line by line, each line under
    its guard) is the same engine one line at a time: every batch made to take it ends as recorded too, so the
    fallback that keeps a bug to its own line never drifts from the native batch."""

    def decide_batch(*args: Any, **kw: Any) -> Any:
        raise RuntimeError("the native batch failed")

    monkeypatch.setattr(processor_module, "decide_batch", decide_batch)
    with caplog.at_level(logging.ERROR, logger="gatekeeper.processor"):
        await _ends_as_recorded()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # no line got an internal error


async def _ends_as_recorded() -> None:
    convs = await run()
    want = recorded()
    got = {c: digest(d) for c, d in convs.items()}
    assert len(want) > 20_000 and sum(len(d["outcomes"]) for d in convs.values()) > 100_000
    differ = sorted(c for c in want.keys() | got.keys() if want.get(c) != got.get(c))
    if differ:
        with lzma.open(SAMPLE, "rt", encoding="utf-8") as f:
            sample = {doc.pop("conversation"): doc for doc in map(json.loads, f)}
        shown = next((c for c in differ if c in sample), None)
        detail = ""
        if shown is not None:
            detail = (
                f"\nrecorded {shown}: {json.dumps(sample[shown])[:3000]}\nnow: {json.dumps(convs.get(shown))[:3000]}"
            )
        raise AssertionError(
            f"{len(differ)} of {len(want)} conversations differ from the record: {differ[:10]}{detail}"
        )
