"""What a line's outcome records cost the worker: building them (``outcomes.build_all``) and making their Kafka
record batches (``_native.record_batches``), microseconds of CPU per line, in one process.

    .venv/bin/python bench/outcomes.py                      # 20,000 lines of the e2e traffic, best of 5
    .venv/bin/python bench/outcomes.py --code ../before     # another checkout's code, for before and after

The decided lines are captured from a ``hot_path.py`` round (the whole worker on the unit tests' in-memory Kafka and
store, fed ``e2e.py``'s traffic): every call the worker made to ``build_all``, with its arguments. Then each call is
made again, and each call's outcomes put into record batches, as ``OutcomeSender.send`` puts a partition's; the
figure is the best of the rounds (a shared machine only ever adds time). A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--code", type=Path, default=ROOT, help="the checkout whose code runs (default this one)")
    args = ap.parse_args()
    sys.path[:0] = [str(args.code), str(ROOT / "bench")]
    os.environ.setdefault("GK_LOG_LEVEL", "ERROR")
    logging.disable(logging.CRITICAL)
    import hot_path

    import gatekeeper.consumers.deciding as deciding
    from gatekeeper.consumers.outcomes import build_all
    from rwcore import _native

    calls: list[tuple[Any, ...]] = []
    made: list[list[Any]] = []
    original = build_all

    def capture(lines: Any, targets: Any, *, sensitive: Any = (), now: float) -> Any:
        out = original(lines, targets, sensitive=sensitive, now=now)
        calls.append((lines, targets, sensitive, now))
        made.append([o for line in out for o in line])
        return out

    setattr(deciding, "build_all", capture)  # noqa: B010 (deciding's own name for it, replaced for the round)
    asyncio.run(hot_path.one_round(args.lines, None))
    lines = sum(len(c[0]) for c in calls)

    def build() -> None:
        for batch, targets, sensitive, now in calls:
            build_all(batch, targets, sensitive=sensitive, now=now)

    def batches() -> None:
        for outcomes in made:
            for b in _native.record_batches(outcomes, 512 * 1024, 1_790_000_000_000):
                b._set_producer_state(1, 0, 0)
                b._build()

    def best(f: Callable[[], None]) -> float:
        times = []
        for _ in range(args.rounds):
            gc.collect()
            t = time.process_time()
            f()
            times.append(time.process_time() - t)
        return 1e6 * min(times) / lines

    print(f"{args.code}: {lines:,} lines, {sum(map(len, made)):,} outcomes, best of {args.rounds} rounds")
    print(f"  build_all       {best(build):5.2f} µs a line")
    print(f"  record batches  {best(batches):5.2f} µs a line")


if __name__ == "__main__":
    main()
