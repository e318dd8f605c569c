"""The worker's own CPU per line, in one process, without a broker or Redis: for before/after of a hot-path change.

    .venv/bin/python bench/hot_path.py                      # 100,000 lines of the e2e traffic, three rounds
    .venv/bin/python bench/hot_path.py --lines 20000 --rounds 5
    .venv/bin/python bench/hot_path.py --profile 25         # and cProfile's top 25 functions (by own time)
    .venv/bin/python bench/hot_path.py --batch 72           # batches as small as live traffic's

The whole ``Gatekeeper`` runs (intake, holds, deciding, building and sending the outcomes, settling, counting,
committing) on the in-memory Kafka of the unit tests (``tests/unit/fake_kafka.py``) and the in-memory store, fed the
same traffic as ``bench/e2e.py``'s throughput section (payment and drafting flows, cancels, a few faulty lines; 6
input partitions, batches of 500 unless ``--batch``). What it leaves out is the I/O: aiokafka's clients, redis-py,
the Redis store's encoding and the event loop's sockets, which ``bench/e2e.py`` measures with the rest. Its figure is
the process's CPU time between the first and the last outcome, per line; the best of the rounds is printed with the
others beside it (a shared machine only ever adds time). Run it on two checkouts (``--code``) to compare them.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import sys
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=100_000, help="lines per round (default 100,000)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each on a fresh worker and store (default 3)")
    ap.add_argument(
        "--batch", type=int, default=500, help="kafka.max_batch (default 500, as in a catch-up; live traffic: fewer)"
    )
    ap.add_argument(
        "--faulty", type=float, default=0.05, help="the share of refused flows (default 0.05, as in e2e.py's traffic)"
    )
    ap.add_argument(
        "--logs",
        action="store_true",
        help="keep the worker's logging (JSON, INFO, as `gatekeeper run`; written to /dev/null): a dead letter's log "
        "line is part of what it costs",
    )
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="profile the last round; print the top N")
    ap.add_argument("--code", type=Path, default=ROOT, help="the checkout whose gatekeeper runs (default this one)")
    args = ap.parse_args()
    sys.path[:0] = [str(args.code), str(ROOT / "bench")]
    os.environ.setdefault("GK_LOG_LEVEL", "ERROR")
    import logging

    if args.logs:
        from gatekeeper.logs import configure_logging

        # written at each newline, as Python writes its stderr (line-buffered): a write a line, as in production
        configure_logging("json", "INFO", open(os.devnull, "w", buffering=1))  # noqa: SIM115 (open until the end)
    else:
        logging.disable(logging.WARNING)  # dead letters are logged at INFO/WARNING: not what is measured here
    from gatekeeper.cli.run import tune_gc

    tune_gc()  # as ``gatekeeper run`` does
    results = []
    for r in range(args.rounds):
        prof = cProfile.Profile() if args.profile and r == args.rounds - 1 else None
        results.append(asyncio.run(one_round(args.lines, prof, args.batch, args.faulty)))
        print(f"round {r + 1}: {results[-1]:.1f} µs of CPU per line", file=sys.stderr)
        if prof is not None:
            pstats.Stats(prof).sort_stats("tottime").print_stats(args.profile)
    others = ", ".join(f"{x:.1f}" for x in sorted(results)[1:])
    print(f"hot path ({args.code}): {min(results):.1f} µs of CPU per line (best of {args.rounds}; others {others})")


async def one_round(n: int, prof: cProfile.Profile | None, batch: int = 500, faulty: float = 0.05) -> float:
    from e2e import traffic

    from gatekeeper.config import Settings
    from gatekeeper.consumers.loop import Gatekeeper
    from gatekeeper.store import MemoryStore
    from tests.unit.fake_kafka import Cluster, FakeKafka

    t = traffic(n, seed=7, faulty=faulty)
    cluster = Cluster()
    cluster.create("in", 6)
    for topic in ("out", "dlq", "alerts"):
        cluster.create(topic)
    for key, value in t.lines:
        cluster.append("in", zlib.crc32(key) % 6, key, value)
    store = MemoryStore()
    for rec in t.records:
        await store.put_record(rec)
    settings = Settings.model_validate(
        {
            "kafka": {"batch_timeout_ms": 10, "max_batch": batch},
            "routes": [{"input": "in", "output": "out", "dead_letter": "dlq", "alerts": "alerts", "profile": "pay"}],
            "sweeper": {"interval_seconds": 0},
        }
    )
    # the unit tests' fakes: the seams' behaviour, not their exact types (no close on MemoryStore, FakeProducer)
    gk = Gatekeeper(settings, store=store, kafka=FakeKafka(cluster), http=False, startup_timeout=5)  # type: ignore[arg-type]
    total = len(t.lines)

    def decided() -> int:
        return len(cluster.logs[("out", 0)]) + len(cluster.logs[("dlq", 0)])

    task = asyncio.create_task(gk.run())
    try:
        while decided() == 0:
            await asyncio.sleep(0.001)
        if prof is not None:
            prof.enable()
        c0, n0 = time.process_time(), decided()
        while decided() < total:
            await asyncio.sleep(0.002)
        c1 = time.process_time()
        if prof is not None:
            prof.disable()
    finally:
        gk.request_stop()
        await asyncio.wait_for(task, 30)
    return 1e6 * (c1 - c0) / max(1, total - n0)


if __name__ == "__main__":
    main()
