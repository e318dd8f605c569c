"""What the conversation state costs Redis, by batch size: Redis's own CPU per line, without Kafka.

    .venv/bin/python bench/redis_cost.py                        # batches of 7, 65 and 500; 15,000 lines each
    .venv/bin/python bench/redis_cost.py --sizes 1,10,100 --lines 5000

The e2e traffic (``bench/e2e.py``'s generator: payment and drafting flows, cancels, a few faulty lines) is decided
by the worker's ``Processor`` on the Redis store (``GK_REDIS_URL``, a key prefix of its own, deleted afterwards), in
batches of each size, lines in their order; Redis's CPU (``INFO cpu``, user and system) is read before and after.
Live traffic makes small batches in which each line is its conversation's only one, so each line pays its
conversation's load and save; a catch-up's batches of 500 hold two or three lines of a conversation. Beside it, this
process's CPU per line (the worker's side of the same calls, the decisions included). A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from pathlib import Path

from redis.asyncio import Redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e import traffic

from gatekeeper.config import RedisSettings
from gatekeeper.policy import RoutePolicy
from gatekeeper.processor import Line, Processor
from gatekeeper.redis_store import RedisStore
from rwcore import get_profile

REDIS_URL = os.environ.get("GK_REDIS_URL", "redis://127.0.0.1:6379/0")


async def redis_cpu(redis: Redis) -> float:
    info = await redis.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def one(redis: Redis, size: int, n: int) -> tuple[float, float, float]:
    """Redis's CPU per line and per batch (µs), and this process's per line, for batches of ``size``."""
    t = traffic(n, seed=7)
    prefix = f"gkrc{uuid.uuid4().hex[:8]}"
    store = RedisStore(
        RedisSettings(url=REDIS_URL, key_prefix=prefix, retention_seconds=3600, open_retention_seconds=86400)
    )
    try:
        for rec in t.records:
            await store.put_record(rec)
        processor = Processor(store, RoutePolicy(name="bench", profile=get_profile("pay"), hold_seconds=0.0))
        processor.epochs.update(await store.take_epochs("bench", [0]))
        lines = [Line(key.decode(), value, partition=0) for key, value in t.lines]
        now = time.time()
        r0, c0, batches = await redis_cpu(redis), time.process_time(), 0
        for start in range(0, len(lines), size):
            await processor.process(lines[start : start + size], now)
            batches += 1
        spent, own = await redis_cpu(redis) - r0, time.process_time() - c0
        return 1e6 * spent / len(lines), 1e6 * spent / batches, 1e6 * own / len(lines)
    finally:
        cursor = 0
        while True:
            cursor, keys = await redis.scan(cursor, match=f"{prefix}:*", count=5000)
            if keys:
                await redis.unlink(*keys)
            if cursor == 0:
                break
        await store.close()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="7,65,500", help="batch sizes, comma-separated (default 7,65,500)")
    ap.add_argument("--lines", type=int, default=15_000, help="lines a size (default 15,000)")
    args = ap.parse_args()
    redis = Redis.from_url(REDIS_URL)
    try:
        print(f"the conversation state on Redis ({REDIS_URL}), {args.lines:,} lines a batch size")
        print(f"  {'batch':>6}  {'Redis µs / line':>15}  {'Redis µs / batch':>16}  {'worker µs / line':>16}")
        for size in (int(s) for s in args.sizes.split(",")):
            per_line, per_batch, own = await one(redis, size, args.lines)
            print(f"  {size:>6}  {per_line:>15.1f}  {per_batch:>16.0f}  {own:>16.1f}")
    finally:
        await redis.aclose()


if __name__ == "__main__":
    asyncio.run(main())
