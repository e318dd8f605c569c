"""The worker's loop is the worker's, on real Kafka and Redis: the daemon serving its HTTP port (on its own thread)
decides every line while another process floods ``/metrics`` and holds hundreds of silent connections, and
``/healthz`` answers 200 throughout. (How much the flood delays a line is measured by ``bench/http_flood.py``.)"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import httpx

from tests.integration._pipeline import Pipeline, TopicFactory
from tests.policy.world import HO, RECORD

#: The flood, a process of its own: 8 clients fetching /metrics in a loop and 300 connections opened and left
#: silent (opened again as the server closes them); it prints its answers by status.
FLOOD = r"""
import json, socket, sys, threading, time
from collections import Counter
import httpx
url, seconds = sys.argv[1], float(sys.argv[2])
host, port = url.removeprefix("http://").rsplit(":", 1)
end = time.monotonic() + seconds
counts = Counter()
def metrics():
    with httpx.Client(base_url=url, timeout=10) as c:
        while time.monotonic() < end:
            try:
                counts[str(c.get("/metrics").status_code)] += 1
            except httpx.HTTPError as exc:
                counts[type(exc).__name__] += 1
threads = [threading.Thread(target=metrics) for _ in range(8)]
for t in threads:
    t.start()
held = []
while time.monotonic() < end:
    while len(held) < 300:
        try:
            held.append(socket.create_connection((host, int(port)), timeout=2))
            counts["opened"] += 1
        except OSError:
            counts["refused"] += 1
            break
    time.sleep(0.5)
    alive = []
    for s in held:
        s.setblocking(False)
        try:
            gone = s.recv(1) == b""
        except BlockingIOError:
            gone = False
        except OSError:
            gone = True
        (s.close() if gone else alive.append(s))
        counts["closed by the server"] += gone
    held = alive
for t in threads:
    t.join()
print(json.dumps(counts))
"""


async def test_every_line_is_decided_and_liveness_holds_under_an_http_flood(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str
) -> None:
    async with Pipeline.create(
        topic_factory, kafka_bootstrap, redis_url, serve_http=True, http={"rate_limit": 0, "idle_timeout_seconds": 2}
    ) as p:
        assert p.gatekeeper.http is not None
        url = p.gatekeeper.http.url
        await p.store.put_record(RECORD)
        flood = subprocess.Popen([sys.executable, "-c", FLOOD, url, "12"], stdout=subprocess.PIPE)
        try:
            await asyncio.sleep(2.0)  # the flood under way
            probes: list[int] = []
            async with httpx.AsyncClient(base_url=url, timeout=5) as c:
                t0 = time.monotonic()
                for i in range(60):  # 10 lines a second, each a conversation of its own
                    await p.send(f"c{i}", HO)
                    probes.append((await c.get("/healthz")).status_code)
                    await asyncio.sleep(max(0.0, t0 + (i + 1) / 10 - time.monotonic()))
            got = await p.collect(lambda g: sum(g.count(f"c{i}") for i in range(60)) == 60, timeout=30)
            assert sum(got.count(f"c{i}") for i in range(60)) == 60
            assert set(probes) == {200}
            await asyncio.sleep(0.5)  # the worker publishes its metrics every 0.25 s
            async with httpx.AsyncClient(base_url=url, timeout=5) as c:
                text = (await c.get("/metrics")).text
            assert "gatekeeper_ready 1.0" in text, text[-3000:]
            assert "gatekeeper_lines_total{" in text, text[-3000:]
        finally:
            out, _ = await asyncio.to_thread(flood.communicate, timeout=60)
        answers = json.loads(out)
        assert answers.get("200", 0) > 50, answers  # the flood reached the server
        assert answers.get("closed by the server", 0) > 0, answers  # silent connections were closed


async def test_the_daemon_stops_when_its_http_process_dies(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str
) -> None:
    """Its probes would be gone with it: a daemon whose HTTP process was killed stops (FatalError), and an
    orchestrator restarts it, rather than running on with no /healthz."""
    import os
    import signal

    import pytest

    from gatekeeper.errors import FatalError

    with pytest.raises(FatalError, match="the HTTP server's process exited"):
        async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, serve_http=True) as p:
            http = p.gatekeeper.http
            assert http is not None and http.alive()
            os.kill(http._proc.pid, signal.SIGKILL)
            await asyncio.wait_for(asyncio.shield(p.task), 10)
