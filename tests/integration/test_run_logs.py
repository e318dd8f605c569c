"""``gatekeeper run`` logs every dead letter once, as one JSON line, even though a batch's log lines are held and
written together when the batch is counted (``gatekeeper.logs.held_lines``): none is lost, repeated or cut into
another, and none waits past its batch."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests.integration._pipeline import Collector, TopicFactory, produce
from tests.integration.test_no_loss import Daemon

pytestmark = pytest.mark.integration


def _dead_letter_logs(log: Path) -> list[dict[str, object]]:
    out = []
    for text in log.read_text(errors="replace").splitlines():
        if text.startswith("{"):
            doc = json.loads(text)  # every line the daemon writes is one whole JSON object
            if doc.get("msg") == "line dead-letter":
                out.append(doc)
    return out


async def test_every_dead_letter_of_a_batch_is_logged_once_as_its_own_line(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    source, output, dead, alerts = [await topic_factory(1) for _ in range(4)]
    config = tmp_path / "gk.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": kafka_bootstrap, "group_id": f"gk-logs-{uuid.uuid4().hex[:8]}"},
                "redis": {"url": redis_url, "key_prefix": f"gkt{uuid.uuid4().hex[:10]}"},
                "http": {"host": "127.0.0.1", "port": 0},
                "routes": [
                    {"input": source, "output": output, "dead_letter": dead, "alerts": alerts, "profile": "pay"}
                ],
                "log_format": "json",
            }
        )
    )

    # 60 lines in one batch's reach: every third refused (an unknown ask), the others forwarded
    def line(n: int) -> bytes:
        ask = "PAYY" if n % 3 == 0 else "RECON"
        return f"RW1 HO scheduler-{n} p=pay from=scheduler to=payer item=run:l{n} ask={ask}".encode()

    lines = [(f"lg-{n}".encode(), line(n), ()) for n in range(60)]
    refused = {n for n in range(60) if n % 3 == 0}
    collector = Collector(kafka_bootstrap, {output: "output", dead: "dead", alerts: "alerts"})
    await collector.start()
    daemon = Daemon(config, tmp_path / "gatekeeper.log")
    try:
        await produce(kafka_bootstrap, source, lines)
        daemon.start()
        got = await collector.wait(lambda g: len(g.output) + len(g.dead) >= 60, timeout=60)
        assert len(got.dead) == len(refused)
        deadline = time.monotonic() + 10.0  # written when its batch is counted, just after its records are acked
        while len(_dead_letter_logs(daemon.log)) < len(refused) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert await asyncio.to_thread(daemon.terminate) == 0, daemon.tail()
    finally:
        daemon.cleanup()
        await collector.stop()
    logged = _dead_letter_logs(daemon.log)
    assert sorted(int(str(d["offset"])) for d in logged) == sorted(refused), daemon.tail()
    assert {d["reason"] for d in logged} == {"invalid"}
