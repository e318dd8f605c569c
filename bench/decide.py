"""The decision's own CPU per line: ``Processor.process`` (prepare, decide, apply, the state's fields, the lifecycle
index) over the e2e traffic, on the in-memory store, in one process. No Kafka, no outcome records, no counting: the
part of the hot path that the native engine (issue 33) takes over step by step, measured alone so that a step's
effect is not lost in the rest of the worker's noise.

    .venv/bin/python bench/decide.py                        # 100,000 lines, three rounds
    .venv/bin/python bench/decide.py --code ../before       # the same, on another checkout (its own extension)
    .venv/bin/python bench/decide.py --redis "$GK_REDIS_URL"  # on the Redis store: its encoding and round trips too

With ``--redis`` the store is the daemon's (``RedisStore``, a key prefix of its own, deleted after), so the figure
adds what the worker spends building, packing and reading the batch's two script calls (the process's CPU only:
Redis's own time is not in it).

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
    ap.add_argument("--redis", default=None, help="a Redis URL: decide on the Redis store instead of in memory")
    args = ap.parse_args()
    code = Path(args.code).resolve() if args.code else Path(__file__).resolve().parent.parent
    sys.path[:0] = [str(code), str(Path(__file__).resolve().parent)]
    os.chdir(code)
    figures = [asyncio.run(one_round(args.lines, args.batch, args.redis)) for _ in range(args.rounds)]
    best, *others = sorted(figures)
    rest = ", ".join(f"{f:.1f}" for f in others)
    store = f", on {args.redis}" if args.redis else ""
    print(f"decide ({args.code or code}{store}): {best:.1f} µs of CPU per line (best of {args.rounds}; others {rest})")


async def one_round(n: int, batch: int, redis_url: str | None) -> float:
    from e2e import traffic

    from gatekeeper.config import RedisSettings, Settings
    from gatekeeper.consumers.deciding import route_policy
    from gatekeeper.processor import Line, Processor
    from gatekeeper.redis_store import RedisStore
    from gatekeeper.store import MemoryStore

    t = traffic(n, seed=7)
    prefix = f"bench-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    store = MemoryStore() if redis_url is None else RedisStore(RedisSettings(url=redis_url, key_prefix=prefix))
    try:
        await store.ensure_generation()
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
    finally:
        if isinstance(store, RedisStore):
            await store.close()
            await delete_prefix(store.settings.url, prefix)


async def delete_prefix(url: str, prefix: str) -> None:
    """The round's keys (its own prefix), deleted."""
    from redis.asyncio import Redis

    r = Redis.from_url(url)
    try:
        keys = [k async for k in r.scan_iter(match=f"{prefix}:*", count=10_000)]
        for at in range(0, len(keys), 10_000):
            await r.unlink(*keys[at : at + 10_000])
    finally:
        await r.aclose()


if __name__ == "__main__":
    main()
