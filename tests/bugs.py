"""Bugs injected into the decision path, for the tests that prove no line is fatal."""

from __future__ import annotations

from typing import Any

from gatekeeper.policy.decide import decide_batch as real_decide_batch


def batch_raising_on(marker: bytes) -> Any:
    """The native batch (``decide_batch``) with a bug on any line holding ``marker``: it raises for the whole batch,
    which the processor then decides line by line, each under its guard (where the Python ``decide`` or ``apply``
    patched to raise on that line gives it its ``internal-error``)."""

    def decide_batch(prepared: Any, rows: Any, *args: Any, **kw: Any) -> Any:
        if any(marker in row[0] for row in rows):
            raise OverflowError("date value out of range")
        return real_decide_batch(prepared, rows, *args, **kw)

    return decide_batch
