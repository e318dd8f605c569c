"""The outcomes' record batches: aiokafka's ``BatchBuilder`` (what ``OutcomeSender.send`` used) against the native
builder (``Kafka.record_batches``), in one process, microseconds per record.

    .venv/bin/python bench/record_batches.py                 # 500 outcomes a partition, 15 paired rounds
    .venv/bin/python bench/record_batches.py --records 100 --rounds 31

Each round builds the same records both ways, as the producer sends them: the batches filled (aiokafka: a batch,
then ``append`` of each record with a list of its headers; native: one call), then each batch's producer state set
and its bytes made (``_set_producer_state``, ``_build``). The records are shaped as a forwarded payment line's
outcome is (its key, its 170-byte line, the eight ``gk.*`` headers): the native builder is timed twice, on the
headers as a tuple of pairs and as the engine now hands them over (``_native.Headers``, read as their bytes). The
speed-up is the median of the rounds' ratios (a shared machine's speed drifts between rounds, not within one). A
benchmark, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import NamedTuple

from aiokafka.producer.message_accumulator import BatchBuilder

from rwcore import _native

BATCH_BYTES = 512 * 1024  # the largest batch the gatekeeper makes (sending.BATCH_BYTES)


class Outgoing(NamedTuple):
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...] | _native.Headers


def outcomes(n: int) -> list[Outgoing]:
    return [
        Outgoing(
            b"c-%d" % i,
            b"RW1 HO scheduler-1 p=pay from=scheduler to=payer item=inv:B-%d ask=PAY rb=exec sup=marlow amt=152.00 "
            b"cur=GBP kind=GROSS acct=40-12-52/61100052 paid=20261002 ref=B-%d apref=FD-52" % (i, i),
            (
                ("gk.verdict", b"forward"),
                ("gk.checked.at", b"2026-12-06T05:28:02.664Z"),
                ("gk.version", b"0.1.0"),
                ("gk.original.topic", b"agents.pay"),
                ("gk.original.partition", b"3"),
                ("gk.original.offset", b"%d" % (1000 + i)),
                ("gk.original.timestamp", b"1790000000000"),
                ("gk.conversation", b"c-%d" % i),
            ),
        )
        for i in range(n)
    ]


def with_aiokafka(records: list[Outgoing]) -> int:
    batches, batch = [], BatchBuilder(BATCH_BYTES, 0)
    for o in records:
        if batch.append(timestamp=None, key=o.key, value=o.value, headers=list(o.headers)) is None:
            batches.append(batch)
            batch = BatchBuilder(BATCH_BYTES, 0)
            batch.append(timestamp=None, key=o.key, value=o.value, headers=list(o.headers))
    batches.append(batch)
    size = 0
    for b in batches:
        b.close()
        b._set_producer_state(1, 0, 0)
        size += len(b._build())
    return size


def natively(records: list[Outgoing]) -> int:
    size = 0
    for b in _native.record_batches(records, BATCH_BYTES, time.time_ns() // 1_000_000):
        b._set_producer_state(1, 0, 0)
        size += len(b._build())
    return size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=500, help="records a partition's batches hold (default 500)")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    records = outcomes(args.records)
    engine = [o._replace(headers=_native.Headers(o.headers)) for o in records]
    assert with_aiokafka(records) == natively(records) == natively(engine), "batches of different sizes"
    runs = (
        ("aiokafka", with_aiokafka, records),
        ("native", natively, records),
        ("native, engine's headers", natively, engine),
    )
    per: dict[str, list[float]] = {name: [] for name, _, _ in runs}
    for _ in range(args.rounds):
        for name, build, given in runs:
            reps, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < 0.05:
                build(given)
                reps += 1
            per[name].append((time.perf_counter() - t0) / reps / len(given) * 1e6)
    print(f"record batches of {args.records} outcomes, {args.rounds} paired rounds (µs per record, median)")
    for name, values in per.items():
        ratios = [a / n for a, n in zip(per["aiokafka"], values, strict=True)]
        print(f"  {name:26s} {statistics.median(values):6.2f}  {statistics.median(ratios):5.1f}x aiokafka's")


if __name__ == "__main__":
    main()
