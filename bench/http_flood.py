"""The HTTP edge cannot slow the worker: ``gatekeeper run`` fed lines at a fixed rate while clients flood its port.

    set -a; . .local/stack/stack.env; set +a
    .venv/bin/python bench/http_flood.py                  # 150 lines/s, 20 s a phase (about 4 minutes)
    .venv/bin/python bench/http_flood.py --rate 300 --seconds 30
    .venv/bin/python bench/http_flood.py --smoke          # a few seconds a phase: it runs, no figures
    .venv/bin/python bench/http_flood.py --only console   # one flood between the two undisturbed phases

Each phase starts a ``gatekeeper run`` of its own (default settings, one ``pay`` route, its own topics and Redis
prefix; ``http.rate_limit: 0``, so that the flood reaches the server: the worst case, an attacker with many
addresses), feeds it the same kind of traffic as ``bench/e2e.py`` at ``--rate`` lines/s with ``e2e.paced`` (latency =
outcome timestamp - input timestamp), and runs one flood from a separate process at the lowest CPU priority (nice
19: an attacker's clients run on machines of their own; on this one they must not take the CPU the daemon, its
broker and its Redis need), on raw sockets with each request's bytes made once:

- ``undisturbed`` (first and last: the baseline, in the same run);
- ``metrics``: 8 clients fetching ``/metrics`` in a loop;
- ``checks``: 16 clients posting ``/v1/check-thread`` with 2,000 lines (each answer about 1 MB);
- ``mcp``: 8 clients calling the ``validate`` MCP tool;
- ``console``: 8 clients loading the console's dead-letter page (a Kafka read of the route's newest letters and a
  page rendered, each time);
- ``idle``: 1,000 connections opened and left silent (opened again as the server closes them).

It prints the line latency (p50, p99, max) per phase, the p99's difference to the undisturbed runs' (the issue's bound:
within 10 ms), the lines decided, the flood's answers by status, and whether ``/healthz`` answered 200 throughout
(polled every 0.5 s by the driver). A benchmark, not a test: nothing asserts the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import e2e
from e2e import Env, Process, paced, say, table, traffic

FLOODS: dict[str, int] = {"metrics": 8, "checks": 16, "mcp": 8, "console": 8, "idle": 1000}
HO = "RW1 HO s-{i} from=s to=p ask=PAY item=inv-{i} amt=10.00 cur=EUR exp=2026-01-01T00:00Z h=zzzzzz"


# ------------------------------------------------------------------------------------------------ the flood process


def _flood(url: str, kind: str, clients: int, seconds: float) -> dict[str, int]:
    """Run one flood for ``seconds`` or until SIGTERM; the answers by status (``closed``: connections the server
    closed)."""
    counts: Counter[str] = Counter()
    lock = threading.Lock()
    ended = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: ended.set())
    ends = time.monotonic() + seconds

    def going() -> bool:
        return not ended.is_set() and time.monotonic() < ends

    def count(key: str) -> None:
        with lock:
            counts[key] += 1

    if kind == "idle":
        host, port = url.removeprefix("http://").rsplit(":", 1)
        held: list[socket.socket] = []
        while going():
            held = [s for s in held if not _closed(s, count)]
            while len(held) < clients and going():
                try:
                    held.append(socket.create_connection((host, int(port)), timeout=2))
                    count("opened")
                except OSError:
                    count("refused")
                    break
            time.sleep(0.2)
        for sock in held:
            sock.close()
        return dict(counts)

    body: dict[str, Any] | None = None
    path, method = "/metrics", "GET"
    extra = ""
    if kind == "checks":
        path, method = "/v1/check-thread", "POST"
        body = {"lines": [HO.format(i=i) for i in range(2000)], "detail": True}
    elif kind == "console":
        path = "/console/dead-letters"  # the one route: the page reads its dead-letter topic, renders the letters
    elif kind == "mcp":
        path, method = "/mcp", "POST"
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "validate", "arguments": {"line": HO.format(i=1)}},
        }
        extra = "accept: application/json, text/event-stream\r\n"
    payload = json.dumps(body).encode() if body is not None else b""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    head = f"{method} {path} HTTP/1.1\r\nhost: {host}:{port}\r\n{extra}"
    if body is not None:
        head += f"content-type: application/json\r\ncontent-length: {len(payload)}\r\n"
    request = head.encode() + b"\r\n" + payload

    def client() -> None:
        """Keep-alive requests on a raw socket, the request's bytes made once: the flood's own CPU stays small
        (an attacker's CPU is not the daemon's; on two shared cores an HTTP client library's would be)."""
        sock: socket.socket | None = None
        reader: Any = None
        while going():
            try:
                if sock is None:
                    sock = socket.create_connection((host, int(port)), timeout=10)
                    reader = sock.makefile("rb")
                sock.sendall(request)
                status = reader.readline().split(b" ", 2)[1].decode()
                length, close = None, False
                while (line := reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                    elif name.lower() == b"connection" and value.strip().lower() == b"close":
                        close = True
                if length is None:
                    reader.read()
                    close = True
                else:
                    reader.read(length)
                count(status)
                if close:
                    sock.close()
                    sock = None
            except (OSError, IndexError, ValueError) as exc:
                count(type(exc).__name__)
                if sock is not None:
                    sock.close()
                sock = None
        if sock is not None:
            sock.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):  # the main thread takes SIGTERM
        time.sleep(0.1)
    return dict(counts)


def _closed(s: socket.socket, count: Any) -> bool:
    s.setblocking(False)
    try:
        gone = s.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        gone = True
    if gone:
        count("closed")
        s.close()
    return gone


# ------------------------------------------------------------------------------------------------ the driver


async def _healthy(url: str, stop: asyncio.Event, seen: Counter[str]) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=5) as c:
        while not stop.is_set():
            try:
                seen[str((await c.get("/healthz")).status_code)] += 1
            except httpx.HTTPError as exc:
                seen[type(exc).__name__] += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)


async def phase(env: Env, name: str, kind: str | None, rate: float, seconds: float, flood_nice: int) -> dict[str, Any]:
    n = int(rate * seconds)
    t = traffic(n, seed=31, tag=name)
    topics = await env.topics(name)
    prefix = env.prefix(name)
    await env.load_records(prefix, t.records)
    # rate limit off: the flood reaches the server (the worst case, an attacker with many addresses)
    proc = Process(
        env,
        name,
        topics,
        prefix,
        group=f"flood-{env.run}-{name}",
        passthrough=False,
        overrides={"http": {"rate_limit": 0}},
    )
    flood: subprocess.Popen[bytes] | None = None
    stop = asyncio.Event()
    health: Counter[str] = Counter()
    try:
        url = await asyncio.to_thread(proc.metrics_url, 30.0)
        if url is None:
            raise RuntimeError(f"{name}: the daemon did not listen: {proc.log.read_text()[-500:]}")
        await asyncio.sleep(4.0)  # joined
        watching = asyncio.create_task(_healthy(url, stop, health))
        if kind is not None:
            flood = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    *("--flood", kind, "--url", url, "--seconds", str(seconds + 15)),
                    *("--flood-nice", str(flood_nice)),
                ],
                stdout=subprocess.PIPE,
            )
            await asyncio.sleep(2.0)  # the flood under way before the first line
        cpu0 = proc.cpu_seconds()
        lat = await paced(topics, t.lines, rate)
        cpu = proc.cpu_seconds() - cpu0
        stop.set()
        await watching
        answers: dict[str, int] = {}
        if flood is not None:
            flood.terminate()
            out, _ = await asyncio.to_thread(flood.communicate, timeout=30)
            with contextlib.suppress(ValueError):
                answers = json.loads(out or b"{}")
        return {"name": name, "lat": lat, "lines": n, "answers": answers, "health": dict(health), "cpu": cpu}
    finally:
        stop.set()
        if flood is not None and flood.poll() is None:
            flood.kill()
        proc.stop()


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * q / 100))]


async def main_async(args: argparse.Namespace) -> int:
    say(f"http_flood: Kafka {e2e.BOOTSTRAP}, Redis {e2e.REDIS_URL}; {args.rate:g} lines/s, {args.seconds:g} s a phase")
    env = Env(1)
    results = []
    try:
        plan: list[tuple[str, str | None]] = [("undisturbed", None)]
        plan += [(kind, kind) for kind in FLOODS if args.only is None or kind in args.only]
        plan += [("undisturbed-2", None)]
        for name, kind in plan:
            say(f"  phase {name}")
            results.append(await phase(env, name.replace("-", ""), kind, args.rate, args.seconds, args.flood_nice))
    finally:
        await env.close()
    base = [r for r in results if r["name"].startswith("undisturbed")]
    base_p99 = max(_pct(r["lat"], 99) for r in base)
    rows = []
    for r in results:
        p99 = _pct(r["lat"], 99)
        answers = ", ".join(f"{k} {v:,}" for k, v in sorted(r["answers"].items())) or "-"
        healthz = ", ".join(f"{k} {v}" for k, v in sorted(r["health"].items()))
        rows.append(
            [
                r["name"],
                f"{len(r['lat']):,}/{r['lines'] - r['lines'] // 10:,}",
                _pct(r["lat"], 50),
                p99,
                max(r["lat"]) if r["lat"] else float("nan"),
                f"{p99 - base_p99:+.0f}",
                f"{1000 * r['cpu'] / max(1, r['lines']):.2f}",
                answers,
                healthz,
            ]
        )
    table(
        f"HTTP floods against the worker at {args.rate:g} lines/s: line latency, ms (producer to outcome)",
        [
            "phase",
            "lines timed",
            "p50",
            "p99",
            "max",
            "p99 vs undisturbed",
            "daemon CPU ms/line",
            "flood answers",
            "/healthz",
        ],
        rows,
    )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=150.0, help="lines per second fed to the daemon (default 150)")
    ap.add_argument("--seconds", type=float, default=20.0, help="seconds a phase (default 20)")
    ap.add_argument("--smoke", action="store_true", help="3 s a phase: it runs, no figures")
    ap.add_argument(
        "--flood-nice", type=int, default=19, help="the flood's CPU priority (default 19; 0: as the daemon's)"
    )
    ap.add_argument(
        "--only",
        action="append",
        choices=sorted(FLOODS),
        help="only this flood (repeat for several), between the two undisturbed phases",
    )
    ap.add_argument("--flood", choices=sorted(FLOODS), help=argparse.SUPPRESS)  # the flood process
    ap.add_argument("--url", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.flood:
        # the attacker's machine is not the daemon's: on one machine, the flood's own clients yield the CPU to the
        # daemon, its broker and its Redis (nice 19), so the figures are the daemon's isolation, not the clients'
        os.nice(args.flood_nice)
        print(json.dumps(_flood(args.url, args.flood, FLOODS[args.flood], args.seconds)), flush=True)
        return 0
    if args.smoke:
        args.seconds = 3.0
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
