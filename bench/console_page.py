"""How long the console takes to answer a conversation of 1,000 lines, on the real Redis and Kafka.

    set -a; . .local/stack/stack.env; set +a
    .venv/bin/python bench/console_page.py                 # 1,000 lines, 50 requests a page
    .venv/bin/python bench/console_page.py --lines 5000 --requests 20

It decides a conversation of ``--lines`` lines (handoffs, each with its readback, clearance and done report; every
tenth readback refused, so the page has dead letters to show) through the daemon's own ``Processor`` into Redis
under a prefix of its own, dead-letters the refused ones on a topic of its own, then serves the console with
``gatekeeper serve`` (a process of its own, as ``gatekeeper run`` serves it from its HTTP process) and times, from a
client on the same machine:

- ``healthz``: ``GET /healthz`` (the baseline: the same server, no work);
- ``state``: the conversation's state loaded from Redis by the store alone (the page's floor);
- ``conversation``: ``GET /console/conversation`` for it (the state, the route's dead letters, the timeline);
- ``letters``: ``GET /console/dead-letters`` (the route's newest letters, their headers in words).

It prints p50, p99 and max per request kind and the ratio of each p50 to the baseline's. The issue's bound: the
conversation page within 200 ms. A benchmark, not a test: nothing asserts the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import yaml
from aiokafka import AIOKafkaProducer

from gatekeeper.admin import TopicSpec, create_topics
from gatekeeper.config import HttpSettings, KafkaSettings, RedisSettings, Route, Settings
from gatekeeper.policy import Record, RoutePolicy
from gatekeeper.processor import Line, Processor
from gatekeeper.redis_store import RedisStore
from rwcore import get_profile

VALUES = {
    "to": "payer", "sup": "marlow", "amt": "5400.00", "cur": "GBP", "kind": "GROSS", "acct": "40-12-88/61102938",
    "paid": "20261002", "apref": "FD-0929",
}  # fmt: skip


def thread(n: int) -> list[tuple[str, Record | None]]:
    """``n`` lines: handoffs of items of their own (each its approval), readback, clearance, done report."""
    out: list[tuple[str, Record | None]] = []
    i = 0
    while len(out) < n:
        i += 1
        item, ref = f"inv:B-{i}", f"B-{i}"
        v = {**VALUES, "ref": ref}
        slots = " ".join(f"{k}={x}" for k, x in v.items() if k != "to")
        acct = v["acct"] if i % 10 else "40-12-88/61102983"  # every tenth readback names a lookalike account
        rb_slots = slots.replace(v["acct"], acct)
        ho = f"RW1 HO scheduler-{4 * i} p=pay from=scheduler to=payer item={item} ask=PAY rb=exec {slots}"
        rb = f"RW1 RB payer-{4 * i} re=scheduler-{4 * i} from=payer to=scheduler item={item} ask=PAY p=pay {rb_slots}"
        an = f"RW1 AN scheduler-{4 * i + 1} re=payer-{4 * i} p=pay from=scheduler to=payer val=Y"
        dn = f"RW1 DN payer-{4 * i + 1} re=scheduler-{4 * i} p=pay from=payer to=scheduler item={item} out=OK {slots}"
        out += [(ho, Record(item, "PAY", {**v, "item": item, "ask": "PAY"})), (rb, None), (an, None), (dn, None)]
    return out[:n]


def _quantiles(xs: list[float]) -> tuple[float, float, float]:
    xs = sorted(xs)
    return statistics.median(xs), xs[min(len(xs) - 1, int(len(xs) * 0.99))], xs[-1]


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=50)
    args = ap.parse_args()
    bootstrap = os.environ.get("GK_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    redis_url = os.environ.get("GK_REDIS_URL", "redis://127.0.0.1:6379/0")
    tag = uuid.uuid4().hex[:8]
    base = f"bench-console-{tag}"
    route = Route(input=base, output=f"{base}.out", dead_letter=f"{base}.dlq", alerts=f"{base}.alerts", profile="pay")
    settings = Settings(
        kafka=KafkaSettings(bootstrap_servers=bootstrap, group_id=base),
        redis=RedisSettings(url=redis_url, key_prefix=base),
        http=HttpSettings(host="127.0.0.1", port=0, rate_limit=0),
        routes=[route],
    )
    await create_topics(
        settings.kafka, [TopicSpec(t, 1, 1) for t in (base, route.output, route.dead_letter, route.alerts)]
    )
    store = RedisStore(settings.redis)
    await store.ensure_generation()
    proc = Processor(store, RoutePolicy(name=base, profile=get_profile("pay"), hold_seconds=0.0))
    proc.epochs = await store.take_epochs(base, [0])
    conv = "c-long"
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    started = time.perf_counter()
    dead = 0
    now = time.time()
    for n, (text, record) in enumerate(thread(args.lines)):
        if record is not None:
            await store.put_record(record)
        (d,) = await proc.process([Line(conv, text.encode(), partition=0)], now + n * 0.001)
        if d.verdict.value == "dead-letter":
            dead += 1
            headers = [("gk.original.topic", base.encode()), ("gk.original.partition", b"0"),
                       ("gk.original.offset", str(n).encode()), ("gk.conversation", conv.encode()),
                       ("gk.reason", (d.reason or "").encode()), ("gk.attempt", b"1")]  # fmt: skip
            await producer.send(route.dead_letter, text.encode(), key=conv.encode(), headers=headers)
    await producer.flush()
    await producer.stop()
    print(
        f"console_page: {args.lines} lines decided into Redis in {time.perf_counter() - started:.1f} s ({dead} refused)"
    )

    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "gk.yaml"
        config.write_text(yaml.safe_dump(json.loads(settings.model_dump_json())))
        port = _free_port()
        serve = subprocess.Popen(
            [str(Path(sys.executable).parent / "gatekeeper"), "serve", "-c", str(config)],
            env={**os.environ, "GK_HTTP__PORT": str(port)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            timings = await _measure(f"http://127.0.0.1:{port}", store, base, conv, args)
        finally:
            serve.terminate()
            serve.wait(10)
            await store.close()
    base_p50 = _quantiles(timings["healthz"])[0]
    print(f"\n{'request':<14}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}{'p50 / healthz':>16}")
    for kind, xs in timings.items():
        p50, p99, mx = _quantiles(xs)
        print(f"{kind:<14}{p50:>10.1f}{p99:>10.1f}{mx:>10.1f}{p50 / base_p50:>15.1f}x")
    print(f"\n(the conversation page for {args.lines} lines: bound 200 ms)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _measure(url: str, store: RedisStore, base: str, conv: str, args: Any) -> dict[str, list[float]]:
    timings: dict[str, list[float]] = {}
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for _ in range(100):  # until it serves
            try:
                if (await client.get("/healthz")).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.2)
        kinds: dict[str, Any] = {
            "healthz": lambda: client.get("/healthz"),
            "state": lambda: store.load(base, {conv: None}, ()),
            "conversation": lambda: client.get("/console/conversation", params={"route": base, "q": conv}),
            "letters": lambda: client.get("/console/dead-letters", params={"route": base}),
        }
        for kind, call in kinds.items():
            await call()  # warm: connections, the console's consumer
            xs = []
            for _ in range(args.requests):
                t = time.perf_counter()
                res = await call()
                xs.append((time.perf_counter() - t) * 1000)
                if isinstance(res, httpx.Response):
                    assert res.status_code == 200, (kind, res.status_code, res.text[:300])
            timings[kind] = xs
        page = (await client.get("/console/conversation", params={"route": base, "q": conv})).text
        assert page.count('<tr class="v-') == min(args.lines, 2000), "the page shows every line (2,000 at most)"
    return timings


if __name__ == "__main__":
    asyncio.run(main())
