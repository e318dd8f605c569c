"""Nothing is lost: a gatekeeper killed with SIGKILL mid-stream and restarted still answers for every input record.

3000 lines over 40 conversations and 3 partitions are published while ``gatekeeper run`` (a real subprocess, from
a temporary config) consumes them. It is SIGKILLed once a third of the outcomes have arrived, then started again;
every input record's (topic, partition, offset) must then appear among the outcome records' ``gk.original.*``
headers at least once, with the same verdict each time it appears (a crash may repeat work, never skip it or
change a verdict). The restarted process also serves ``/readyz`` and ``/metrics`` and stops cleanly on SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from tests.integration._pipeline import Collected, Collector, TopicFactory, produce

pytestmark = pytest.mark.integration

LINES = 3000
CONVERSATIONS = 40
PARTITIONS = 3


def line(conv: int, n: int) -> bytes:
    """The n-th line of a conversation: mostly handoffs that need no record (forwarded), every 7th invalid."""
    if n % 7 == 6:
        return f"RW1 HO scheduler-{n} p=pay from=scheduler to=payer item=run:c{conv} ask=PAYY".encode()
    return f"RW1 HO scheduler-{n} p=pay from=scheduler to=payer item=run:c{conv} ask=RECON // line {n}".encode()


def records() -> list[tuple[bytes, bytes, tuple[()]]]:
    out = []
    for i in range(LINES):
        conv = i % CONVERSATIONS
        out.append((f"nl-{conv}".encode(), line(conv, i // CONVERSATIONS + 1), ()))
    return out


class Daemon:
    """``gatekeeper run`` as a subprocess, its stderr in a file."""

    def __init__(self, config: Path, log: Path) -> None:
        self.config = config
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.mark = 0  # where the current process's log begins

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GK_")}
        env["PYTHONUNBUFFERED"] = "1"
        self.mark = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from gatekeeper.cli import main; main()", "run", "--config", str(self.config)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=env,
                cwd=Path(__file__).resolve().parents[2],
            )

    def url(self, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log.read_bytes()[self.mark :].decode(errors="replace")
            found = re.findall(r"metrics on (http://\S+)/metrics", text)
            if found:
                return found[-1]
            assert self.proc is not None and self.proc.poll() is None, self.tail()
            time.sleep(0.1)
        raise AssertionError(f"no metrics URL printed: {self.tail()}")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def coordinates(got: Collected) -> dict[tuple[str, int, int], set[tuple[str | None, str | None]]]:
    seen: dict[tuple[str, int, int], set[tuple[str | None, str | None]]] = {}
    for r in (*got.output, *got.dead):
        topic, part, off = r.h("gk.original.topic"), r.h("gk.original.partition"), r.h("gk.original.offset")
        assert topic is not None and part is not None and off is not None, r.headers
        verdict = r.h("gk.verdict") or "dead-letter"
        seen.setdefault((topic, int(part), int(off)), set()).add((verdict, r.h("gk.reason")))
    return seen


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def test_sigkill_mid_stream_loses_nothing(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object, tmp_path: Path
) -> None:
    source = await topic_factory(PARTITIONS)
    output, dead, alerts = await topic_factory(1), await topic_factory(1), await topic_factory(1)
    config = tmp_path / "gk.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "kafka": {
                    "bootstrap_servers": kafka_bootstrap,
                    "group_id": f"gk-noloss-{uuid.uuid4().hex[:8]}",
                    "max_batch": 200,
                    "batch_timeout_ms": 50,
                    "request_timeout_ms": 10000,
                },
                "redis": {"url": redis_url, "key_prefix": f"gkt{uuid.uuid4().hex[:10]}"},
                "http": {"host": "127.0.0.1", "port": 0},
                "routes": [
                    {"input": source, "output": output, "dead_letter": dead, "alerts": alerts, "profile": "pay"}
                ],
                "grace_seconds": 5,
                "log_format": "json",
            }
        )
    )
    all_records = records()
    collector = Collector(kafka_bootstrap, {output: "output", dead: "dead", alerts: "alerts"})
    await collector.start()
    daemon = Daemon(config, tmp_path / "gatekeeper.log")
    try:
        await produce(kafka_bootstrap, source, all_records[: LINES // 3])
        daemon.start()
        rest = asyncio.create_task(produce(kafka_bootstrap, source, all_records[LINES // 3 :]))
        await collector.wait(lambda g: len(g.output) + len(g.dead) >= LINES // 3, timeout=60)
        daemon.kill()  # mid-stream: outcomes produced, some offsets not committed yet
        killed_at = len(collector.got.output) + len(collector.got.dead)
        await rest
        daemon.start()
        url = await asyncio.to_thread(daemon.url)

        def complete(g: Collected) -> bool:
            return len(g.output) + len(g.dead) >= LINES and len(coordinates(g)) >= LINES

        got = await collector.wait(complete, timeout=90)
        # the first process may have answered every line before it was killed: the restarted one can still be
        # connecting when the outcomes are complete, so its readiness is waited for (as a probe would retry it)
        deadline = time.monotonic() + 30.0
        while True:
            status, body = await asyncio.to_thread(http_get, f"{url}/readyz")
            if status == 200 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert status == 200, body
        assert (await asyncio.to_thread(http_get, f"{url}/healthz"))[0] == 200
        assert (await asyncio.to_thread(http_get, f"{url}/nope"))[0] == 404
        deadline = time.monotonic() + 5.0  # the worker publishes its metrics every METRICS_INTERVAL (http_process)
        while True:
            status, metrics = await asyncio.to_thread(http_get, f"{url}/metrics")
            if (
                "gatekeeper_lines_total" in metrics and "gatekeeper_ready 1.0" in metrics
            ) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        assert status == 200 and "gatekeeper_lines_total" in metrics and "gatekeeper_ready 1.0" in metrics
        code = await asyncio.to_thread(daemon.terminate)
        assert code == 0, daemon.tail()
    finally:
        daemon.cleanup()
        await collector.stop()

    seen = coordinates(got)
    inputs = await _input_coordinates(kafka_bootstrap, source)
    assert len(inputs) == LINES
    missing = inputs - set(seen)
    assert not missing, f"{len(missing)} input records without an outcome, e.g. {sorted(missing)[:5]}"
    assert set(seen) <= inputs
    changed = {c: v for c, v in seen.items() if len(v) > 1}
    assert not changed, f"a line got two different verdicts: {list(changed.items())[:3]}"
    invalid = sum(1 for v in seen.values() if ("dead-letter", "invalid") in v)
    assert invalid == sum(1 for _, value, _ in all_records if value.endswith(b"ask=PAYY"))
    assert killed_at < LINES, "the kill came after everything was done: not mid-stream"


async def _input_coordinates(bootstrap: str, topic: str) -> set[tuple[str, int, int]]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        ends = await consumer.end_offsets(tps)
        starts = await consumer.beginning_offsets(tps)
        return {(topic, tp.partition, o) for tp in tps for o in range(starts[tp], ends[tp])}
    finally:
        with contextlib.suppress(Exception):
            await consumer.stop()


def _run_cli(config: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GK_")}
    return subprocess.run(
        [sys.executable, "-c", "from gatekeeper.cli import main; main()", "run", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def test_run_gives_up_on_an_unreachable_broker_with_one_clear_line(redis_url: str, tmp_path: Path) -> None:
    config = tmp_path / "gk.yaml"
    route = {"input": "a", "output": "b", "dead_letter": "c", "alerts": "d", "profile": "pay"}
    config.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": "127.0.0.1:1"},
                "redis": {"url": redis_url},
                "http": {"port": 0},
                "routes": [route],
            }
        )
    )
    done = _run_cli(config, "--startup-timeout", "1")
    assert done.returncode == 3, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("gatekeeper: error: kafka at 127.0.0.1:1 is unavailable"), last


def test_run_refuses_a_bad_configuration_with_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "gk.yaml"
    config.write_text("routes: []\nkafka: {bogus: 1}\n")
    done = _run_cli(config)
    assert done.returncode == 2, done.stderr
    assert "kafka.bogus: unknown key" in done.stderr and "Traceback" not in done.stderr
