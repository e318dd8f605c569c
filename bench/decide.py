"""The decision's own CPU per line: ``Processor.process`` (prepare, decide, apply, the state's fields, the lifecycle
index) over the e2e traffic, on the in-memory store, in one process. No Kafka, no outcome records, no counting: the
part of the hot path that the native engine (issue 33) takes over step by step, measured alone so that a step's
effect is not lost in the rest of the worker's noise.

    .venv/bin/python bench/decide.py                        # 100,000 lines, three rounds
    .venv/bin/python bench/decide.py --code ../before       # the same, on another checkout (its own extension)

Run it twice, once with ``--code`` on the earlier commit (a worktree with its extension built, see bench/README.md),
and compare the best rounds: the machine's noise is about 10%.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=500, help="lines per Processor.process call (the worker's default)")
    ap.add_argument("--code", default=None, help="the checkout to measure (default: this one)")
    args = ap.parse_args()
    code = Path(args.code).resolve() if args.code else Path(__file__).resolve().parent.parent
    sys.path[:0] = [str(code), str(Path(__file__).resolve().parent)]
    os.chdir(code)
    figures = [asyncio.run(one_round(args.lines, args.batch)) for _ in range(args.rounds)]
    best, *others = sorted(figures)
    rest = ", ".join(f"{f:.1f}" for f in others)
    print(f"decide ({args.code or code}): {best:.1f} µs of CPU per line (best of {args.rounds}; others {rest})")


async def one_round(n: int, batch: int) -> float:
    from e2e import traffic

    from gatekeeper.config import Settings
    from gatekeeper.consumers.deciding import route_policy
    from gatekeeper.processor import Line, Processor
    from gatekeeper.store import MemoryStore

    t = traffic(n, seed=7)
    store = MemoryStore()
    for rec in t.records:
        await store.put_record(rec)
    settings = Settings.model_validate(
        {"routes": [{"input": "in", "output": "out", "dead_letter": "dlq", "alerts": "alerts", "profile": "pay"}]}
    )
    processor = Processor(store, route_policy(settings.routes[0], settings))
    lines = [Line(key.decode(), value, partition=i % 6) for i, (key, value) in enumerate(t.lines)]
    now = 1_790_000_000.0
    c0 = time.process_time()
    for at in range(0, len(lines), batch):
        await processor.process(lines[at : at + batch], now)
        now += 0.05
    return 1e6 * (time.process_time() - c0) / len(lines)


if __name__ == "__main__":
    main()
