"""The decision path's outcomes on generated conversations, recorded: what a native engine must reproduce byte for
byte before the Python implementation it replaces is deleted (issue 33, item 5).

    .venv/bin/python -m tests.golden.record            # record the outcomes again (tests/golden/*.xz)
    .venv/bin/python -m tests.golden.record --check    # compare with them (what tests/golden/test_golden.py does)
    .venv/bin/python -m tests.golden.record --inputs   # make the inputs again too (bench/e2e.py's generator)

About 100,000 lines: ``bench/e2e.py``'s traffic (payments, drafting, cancels, faulty lines; many conversations
interleaved) with about one line in twelve made hostile by a seeded mutation (a byte flipped, a line cut short, a
line copied into another conversation or sent twice, ``from=`` changed, a byte that is not UTF-8, a tail over the
limit, a forged ``gk.*`` header, no key). They go through the worker's own path without Kafka and Redis:
``consumers.deciding.decide`` and ``build_sends`` on a ``MemoryStore``, in batches of 500 across six partitions,
on a fixed clock, held lines fed again with the next batch and, at the end, forced out. Recorded per conversation:

- every outcome of its lines, in order: kind, topic, key, value, headers (the worker's records, as produced);
- its state as the store keeps it (every field, serialised), its lifecycle index entries, and its bindings.

``conversations.tsv.xz`` holds one SHA-256 per conversation over all of that (a difference names the conversation);
``sample.jsonl.xz`` holds the whole record of the first 300 conversations, to read what differs.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import lzma
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DIGESTS = HERE / "conversations.tsv.xz"
SAMPLE = HERE / "sample.jsonl.xz"
SAMPLED = 300
START = 1_790_000_000.0  # the fixed clock's start (2026-09-21), epoch seconds
PARTITIONS = 6
BATCH = 500
ROUTE = "golden.pay"
VERSION = "<the gatekeeper's version>"  # gk.version: a release changes it, and nothing else
INPUTS = HERE / "inputs.jsonl.xz"


def _mutate(rnd: random.Random, conv: bytes, line: bytes, other: bytes) -> list[tuple[bytes | None, bytes, tuple]]:
    """The records a hostile agent makes of one line: (key, value, headers)."""
    kind = rnd.randrange(9)
    if kind == 0 and line:
        i = rnd.randrange(len(line))
        return [(conv, line[:i] + bytes([rnd.randrange(32, 127)]) + line[i + 1 :], ())]
    if kind == 1:
        return [(conv, line[: rnd.randrange(len(line) + 1)], ())]
    if kind == 2:
        return [(other, line, ())]  # a copy of the line in another conversation
    if kind == 3:
        return [(conv, line, ()), (conv, line, ())]  # sent twice
    if kind == 4:
        return [(conv, line.replace(b"from=", b"from=mallory", 1), ())]
    if kind == 5:
        return [(conv, line + b" \xff\xfe", ())]
    if kind == 6:
        return [(conv, line + b" // " + b"x" * rnd.randrange(250, 400), ())]
    if kind == 7:
        return [(conv, line, (("gk.verdict", b"forward"), ("gk.reason", b"forged"), ("x-agent", b"a")))]
    return [(None, line, ())]


def records() -> tuple[list[Any], list[tuple[bytes | None, bytes, tuple]]]:
    """(the approvals, the input records in order), as recorded in ``inputs.jsonl.xz``: the corpus does not depend
    on the generator staying as it is (``generate`` made them)."""
    from gatekeeper.policy import Record

    approvals: list[Any] = []
    inputs: list[tuple[bytes | None, bytes, tuple]] = []
    with lzma.open(INPUTS, "rt", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            if "record" in doc:
                approvals.append(Record.from_dict(doc["record"]))
            else:
                key = None if doc["key"] is None else bytes.fromhex(doc["key"])
                headers = tuple((k, bytes.fromhex(v)) for k, v in doc["headers"])
                inputs.append((key, bytes.fromhex(doc["value"]), headers))
    return approvals, inputs


def generate() -> None:
    """Write ``inputs.jsonl.xz`` from ``bench/e2e.py``'s traffic and the seeded mutations."""
    sys.path.insert(0, str(ROOT / "bench"))
    import e2e

    traffic = e2e.traffic(92_000, seed=33, tag="g")
    rnd = random.Random(33)
    out: list[tuple[bytes | None, bytes, tuple]] = []
    keys = [k for k, _ in traffic.lines] or [b"c"]
    for key, value in traffic.lines:
        if rnd.random() < 1 / 12:
            out += _mutate(rnd, key, value, keys[rnd.randrange(len(keys))])
        else:
            out.append((key, value, ()))
    with lzma.open(INPUTS, "wt", encoding="utf-8", preset=9) as f:
        for rec in traffic.records:
            f.write(json.dumps({"record": rec.to_dict()}, sort_keys=True) + "\n")
        for k, v, hs in out:
            doc = {"key": None if k is None else k.hex(), "value": v.hex(), "headers": [[a, b.hex()] for a, b in hs]}
            f.write(json.dumps(doc) + "\n")


async def run() -> dict[str, dict[str, Any]]:
    """Every conversation's record (see the module docstring), by conversation id."""
    from gatekeeper.config import KafkaSettings, RedisSettings, Route, Settings
    from gatekeeper.consumers.deciding import Batch, RouteRuntime, build_sends, decide
    from gatekeeper.consumers.holds import Pending
    from gatekeeper.consumers.outcomes import Source
    from gatekeeper.metrics import Metrics
    from gatekeeper.store import MemoryStore

    approvals, inputs = records()
    route = Route(
        input=ROUTE, output=f"{ROUTE}.out", dead_letter=f"{ROUTE}.dlq", alerts=f"{ROUTE}.alerts", profile="pay"
    )
    settings = Settings(kafka=KafkaSettings(), redis=RedisSettings(), routes=[route])
    store = MemoryStore()
    for rec in approvals:
        await store.put_record(rec)
    rt = RouteRuntime.of(route, settings, store)
    rt.processor.epochs = await store.take_epochs(ROUTE, range(PARTITIONS))
    runtimes = {ROUTE: rt}
    metrics = Metrics()
    outcomes: dict[str, list[Any]] = {}
    offsets = [0] * PARTITIONS
    pending: list[Pending] = []
    now = START

    def take(n: int) -> Iterator[Pending]:
        for key, value, headers in inputs[n : n + BATCH]:
            p = int(hashlib.sha256(key or b"").hexdigest(), 16) % PARTITIONS
            source = Source(ROUTE, p, offsets[p], value, key, int(now * 1000), tuple(headers))
            offsets[p] += 1
            conv = key.decode("utf-8", "replace") if key is not None else None
            yield Pending(source, ROUTE, conv, now)

    async def batch(lines: list[Pending], at: float) -> list[Pending]:
        b = Batch(lines)
        await decide(b, runtimes, at, metrics)
        build_sends(b, runtimes, at, metrics, lambda o: o)
        for s in b.sends or ():
            o = s.outcome
            conv = o.source.key.decode("utf-8", "replace") if o.source.key is not None else ""
            headers = [[k, VERSION if k == "gk.version" else _text(v)] for k, v in o.headers]
            outcomes.setdefault(conv, []).append([o.kind.value, o.topic, _text(o.key), _text(o.value), headers])
        return [p for p, _ in b.held]

    for n in range(0, len(inputs), BATCH):
        now += 0.25
        pending = await batch([*pending, *take(n)], now)
    for _ in range(3):  # the held lines' windows end: each is decided
        now += 60.0
        if pending:
            pending = await batch([Pending(p.source, p.route, p.conversation, p.first_seen, held=True)
                                   for p in pending], now)  # fmt: skip
    assert not pending, f"{len(pending)} lines still held"
    return _conversations(store, outcomes)


def _text(v: bytes | None) -> str | None:
    return None if v is None else v.decode("utf-8", "backslashreplace")


def _conversations(store: Any, outcomes: dict[str, list[Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {c: {"outcomes": o} for c, o in outcomes.items()}
    for (_, conv), fields in store._states.items():
        out.setdefault(conv, {"outcomes": []})["state"] = dict(sorted(fields.items()))
    for (_, part, kind), members in store._index.items():
        for (conv, ho), score in members.items():
            out.setdefault(conv, {"outcomes": []}).setdefault("index", []).append([kind, part, ho, score])
    for key, holder in store._bindings.items():
        if holder is not None:
            conv = holder.split("/")[1] if holder.count("/") >= 2 else ""
            out.setdefault(conv, {"outcomes": []}).setdefault("bindings", []).append([key.item, key.ask, holder])
    for doc in out.values():
        doc.get("index", []).sort()
        doc.get("bindings", []).sort()
    return out


def digest(doc: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:32]


def write(convs: dict[str, dict[str, Any]]) -> None:
    names = sorted(convs)
    with lzma.open(DIGESTS, "wt", encoding="utf-8", preset=9) as f:
        for c in names:
            f.write(f"{json.dumps(c, ensure_ascii=False)}\t{digest(convs[c])}\n")
    with lzma.open(SAMPLE, "wt", encoding="utf-8", preset=9) as f:
        for c in names[:SAMPLED]:
            f.write(json.dumps({"conversation": c, **convs[c]}, sort_keys=True, ensure_ascii=False) + "\n")


def recorded() -> dict[str, str]:
    with lzma.open(DIGESTS, "rt", encoding="utf-8") as f:
        return {json.loads(c): d for c, d in (line.rstrip("\n").split("\t") for line in f)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the recorded files; write nothing")
    ap.add_argument("--inputs", action="store_true", help="make the inputs again first (from bench/e2e.py)")
    args = ap.parse_args()
    if args.inputs:
        generate()
    import logging

    logging.disable(logging.WARNING)
    convs = asyncio.run(run())
    lines = sum(len(d["outcomes"]) for d in convs.values())
    if args.check:
        want = recorded()
        got = {c: digest(d) for c, d in convs.items()}
        differ = sorted(c for c in want.keys() | got.keys() if want.get(c) != got.get(c))
        print(f"{len(got)} conversations, {lines} outcome records; {len(differ)} differ: {differ[:10]}")
        return 1 if differ else 0
    write(convs)
    print(f"wrote {DIGESTS.name} ({len(convs)} conversations, {lines} outcome records) and {SAMPLE.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
