"""The attacker's probe of "no producer can stop or stall the gatekeeper", against ``gatekeeper run`` on a real broker.

Two phases, each on topics of its own with a fresh ``gatekeeper run`` subprocess at its default settings (one
route, ``senders`` unset, 6 input partitions):

1. **poison**: clean flows (a handoff and its done report) on many keys, with the attacker's two short poison lines
   among them (a handoff with ``exp=99991231T2500Z``; a handoff whose id has 4,400 digits). Prints how many input
   lines got an outcome and whether the daemon is still running.
2. **flood**: ``--flood`` replies (``AN val=N``) to handoffs nobody sent, one per key, then clean flows on other
   keys. Prints how long the clean lines waited for their outcome (produce to outcome on the output topic).

    .venv/bin/python bench/probe_poison.py                       # the local stack (deploy/local/stack.sh env)
    .venv/bin/python bench/probe_poison.py --flood 12000 --code /tmp/old-checkout   # an older tree's daemon

``--code DIR`` runs the daemon from another checkout (``PYTHONPATH=DIR``), to measure before and after in one run.
A probe, not a test: it prints figures and exits 0; nothing asserts them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

HUGE = "7" * 4400


def clean(i: int) -> list[bytes]:
    return [
        f"RW1 HO scheduler-1 p=pay from=scheduler to=desk item=doc:c{i} ask=DRAFT".encode(),
        f"RW1 DN desk-1 re=scheduler-1 p=pay from=desk to=scheduler item=doc:c{i} out=OK".encode(),
    ]


POISON = [
    b"RW1 HO scheduler-1 p=pay from=scheduler to=desk item=doc:x ask=DRAFT exp=99991231T2500Z",
    f"RW1 HO scheduler-{HUGE} p=pay from=scheduler to=desk item=doc:x ask=DRAFT".encode(),
]


class Phase:
    def __init__(self, bootstrap: str, redis_url: str, code: str | None, partitions: int) -> None:
        run = uuid.uuid4().hex[:8]
        self.bootstrap, self.redis_url, self.code, self.partitions = bootstrap, redis_url, code, partitions
        self.topics = {k: f"probe-{run}.{k}" for k in ("in", "out", "dlq", "alerts")}
        self.group, self.prefix = f"probe-{run}", f"probe{run}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.dir = Path(tempfile.mkdtemp(prefix="gk-probe-"))

    async def __aenter__(self) -> Phase:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            await admin.create_topics(
                [NewTopic(t, self.partitions if k == "in" else 1, 1) for k, t in self.topics.items()]
            )
        finally:
            await admin.close()
        config = {
            "kafka": {"bootstrap_servers": self.bootstrap, "group_id": self.group},
            "redis": {"url": self.redis_url, "key_prefix": self.prefix},
            "http": {"host": "127.0.0.1", "port": 0},
            "routes": [
                {
                    "input": self.topics["in"],
                    "output": self.topics["out"],
                    "dead_letter": self.topics["dlq"],
                    "alerts": self.topics["alerts"],
                    "profile": "pay",
                }
            ],
            "log_format": "json",
        }
        path = self.dir / "gk.yaml"
        path.write_text(yaml.safe_dump(config))
        env = {k: v for k, v in os.environ.items() if not k.startswith("GK_")}
        if self.code:
            env["PYTHONPATH"] = self.code
        with (self.dir / "gatekeeper.log").open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from gatekeeper.cli import main; main()", "run", "-c", str(path)],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
                cwd=self.dir,  # not the checkout: python -c puts the working directory first on sys.path
            )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(20)
            if self.proc.poll() is None:
                self.proc.kill()
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        with contextlib.suppress(Exception):
            await admin.delete_topics(list(self.topics.values()))
        await admin.close()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def last_error(self) -> str:
        text = (self.dir / "gatekeeper.log").read_text(errors="replace").strip().splitlines()
        errors = [ln for ln in text if "error" in ln.lower()]
        return (errors or text or [""])[-1][:200]

    async def produce(self, records: list[tuple[bytes, bytes]]) -> dict[tuple[bytes, bytes], float]:
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=5)
        await producer.start()
        sent: dict[tuple[bytes, bytes], float] = {}
        try:
            futures = []
            for key, value in records:
                sent[(key, value)] = time.monotonic()
                futures.append(await producer.send(self.topics["in"], value, key=key))
            await asyncio.gather(*futures)
        finally:
            await producer.stop()
        return sent

    async def collect(
        self, want: int, timeout: float, watch: set[bytes] | None = None
    ) -> dict[tuple[bytes, bytes], float]:
        """Outcomes (output and dead-letter topics) until ``want`` of them (or of the keys in ``watch``) arrived."""
        consumer = AIOKafkaConsumer(
            self.topics["out"], self.topics["dlq"], bootstrap_servers=self.bootstrap, auto_offset_reset="earliest"
        )
        await consumer.start()
        seen: dict[tuple[bytes, bytes], float] = {}
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=200)
                now = time.monotonic()
                for recs in batch.values():
                    for r in recs:
                        if watch is None or r.key in watch:
                            seen.setdefault((r.key, r.value), now)
                if len(seen) >= want:
                    break
        finally:
            await consumer.stop()
        return seen


async def poison(args: argparse.Namespace) -> None:
    async with Phase(args.bootstrap, args.redis_url, args.code, args.partitions) as ph:
        records: list[tuple[bytes, bytes]] = []
        for i in range(300):
            records.extend((f"clean-{i}".encode(), v) for v in clean(i))
            if i in (100, 200):
                records.append((f"poison-{i}".encode(), POISON[i // 100 - 1]))
        await ph.produce(records)
        got = await ph.collect(len(records), timeout=args.timeout)
        print(f"poison: {len(got)} of {len(records)} input lines answered; daemon running: {ph.alive}")
        if not ph.alive:
            print(f"  its last words: {ph.last_error()}")


async def flood(args: argparse.Namespace) -> None:
    async with Phase(args.bootstrap, args.redis_url, args.code, args.partitions) as ph:
        await asyncio.sleep(3.0)  # let it join the group
        flood_lines = [
            (f"flood-{i}".encode(), f"RW1 AN scheduler-{i + 1} re=payer-1 p=pay from=scheduler to=payer val=N".encode())
            for i in range(args.flood)
        ]
        await ph.produce(flood_lines)
        calm = [(f"calm-{i}".encode(), v) for i in range(20) for v in clean(i)]
        sent = await ph.produce(calm)
        got = await ph.collect(len(calm), timeout=args.timeout, watch={k for k, _ in calm})
        waits = [got[r] - sent[r] for r in calm if r in got]
        print(f"flood: {args.flood} replies to unknown handoffs, then {len(calm)} clean lines on other keys")
        if waits:
            print(
                f"  clean lines answered: {len(waits)} of {len(calm)}; wait median {statistics.median(waits):.2f} s,"
                f" max {max(waits):.2f} s; daemon running: {ph.alive}"
            )
        else:
            print(f"  no clean line answered within {args.timeout:.0f} s; daemon running: {ph.alive}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", default=os.environ.get("GK_KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    ap.add_argument("--redis-url", default=os.environ.get("GK_REDIS_URL", "redis://127.0.0.1:6379/0"))
    ap.add_argument("--flood", type=int, default=12_000, help="replies in the flood (default 12,000)")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--timeout", type=float, default=60.0, help="how long to wait for outcomes, per phase")
    ap.add_argument("--code", help="run the daemon from this checkout instead (PYTHONPATH)")
    ap.add_argument("--only", choices=["poison", "flood"])
    args = ap.parse_args()
    if args.only in (None, "poison"):
        asyncio.run(poison(args))
    if args.only in (None, "flood"):
        asyncio.run(flood(args))


if __name__ == "__main__":
    main()
