"""``gatekeeper demo`` (``make run``) end to end on the real services: the real gatekeeper as a subprocess, the agents,
the verdicts of every conversation, the replay of the held payment, a clean stop."""

from __future__ import annotations

import io
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka.admin import AIOKafkaAdminClient
from rich.console import Console

from gatekeeper.demo import Demo, DemoOptions, DemoResult

pytestmark = pytest.mark.integration

SAMPLES = Path(__file__).resolve().parents[2] / "config" / "samples"


def _verdicts(result: DemoResult, scenario: str) -> Counter[tuple[Any, ...]]:
    return Counter((s.topic, s.type, s.sender, s.verdict, s.reason, s.replayed) for s in result.of(scenario))


def _expect(*rows: tuple[Any, ...]) -> Counter[tuple[Any, ...]]:
    return Counter(rows)


async def test_the_demo_plays_every_conversation_and_replays_the_held_payment(
    kafka_bootstrap: str, redis_url: str, redis_client: Any, tmp_path: Path
) -> None:
    base = f"gk-test-demo-{uuid.uuid4().hex[:8]}"
    sample = yaml.safe_load((SAMPLES / "gatekeeper.yaml").read_text())
    sample["kafka"]["group_id"] = f"{base}-group"
    route = sample["routes"][0]
    route.update(input=base, output=f"{base}.checked", dead_letter=f"{base}.dlq", alerts=f"{base}.alerts")
    config = tmp_path / "demo.yaml"
    config.write_text(yaml.safe_dump(sample))
    options = DemoOptions(
        config=config,
        records=SAMPLES / "records.json",
        late_records=SAMPLES / "records.late.json",
        bootstrap=kafka_bootstrap,
        redis_url=redis_url,
        http_port=0,
        log_file=tmp_path / "gatekeeper.log",
    )
    out = io.StringIO()
    demo = Demo(options, Console(file=out, width=200, color_system=None, highlight=False))
    try:
        result = await demo.run()
    finally:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        await admin.start()
        try:
            await admin.delete_topics([route[k] for k in ("input", "output", "dead_letter", "alerts")])
        finally:
            await admin.close()
    text = out.getvalue()

    def fwd(type_: str, sender: str, replayed: bool = False) -> tuple[Any, ...]:
        return ("output", type_, sender, "forward", None, replayed)

    assert _verdicts(result, "clean") == _expect(
        fwd("HO", "scheduler"), fwd("RB", "payer"), fwd("AN", "scheduler"), fwd("DN", "payer")
    )
    assert _verdicts(result, "lookalike") == _expect(
        fwd("HO", "scheduler"),
        ("dead-letter", "RB", "payer", "dead-letter", "check-rb", False),
        fwd("CX", "scheduler"),
        fwd("AN", "payer"),
    )
    assert _verdicts(result, "amount") == _expect(
        fwd("HO", "scheduler"),
        fwd("RB", "payer"),
        fwd("AN", "scheduler"),
        ("output", "DN", "payer", "alert", "check-dn", False),
        ("alert", "DN", "payer", "alert", "check-dn", False),
    )
    assert _verdicts(result, "cancel") == _expect(
        fwd("HO", "scheduler"), fwd("RB", "payer"), fwd("CX", "scheduler"), fwd("AN", "payer")
    )
    assert _verdicts(result, "brief") == _expect(
        fwd("HO", "scheduler"),
        ("dead-letter", "RB", "desk", "dead-letter", "check-rb", False),
        fwd("CX", "scheduler"),
        fwd("AN", "desk"),
    )
    assert _verdicts(result, "late") == _expect(
        ("dead-letter", "HO", "scheduler", "dead-letter", "no-record", False),
        fwd("HO", "scheduler", replayed=True),
        fwd("RB", "payer"),
        fwd("AN", "scheduler"),
        fwd("DN", "payer"),
    )
    assert result.replay_exit == 0 and result.gatekeeper_exit == 0
    assert result.metrics[f'gatekeeper_dead_letters_total{{reason="no-record",route="{base}"}}'] == 1.0
    assert result.metrics[f'gatekeeper_alerts_total{{reason="check-dn",route="{base}"}}'] == 1.0
    for fragment in (
        "tier5 execution: acct mismatch: HO ****2938 vs RB ****2983",
        "tier4 comprehension: contradiction on len: sender 120w vs receiver 300w",
        "executed: amt mismatch: plan 980.40 vs DN 890.40",
        "gk.reason=no-record",
        "$ gatekeeper records load",
        "$ gatekeeper replay --route",
        "passed: forwarded",
        "/metrics",
        "the gatekeeper stopped (exit 0): clean",
        "make stop",
    ):
        assert fragment in text, fragment
    assert "40-12-88/61102938" not in text  # accounts are masked on the screen
    assert [k async for k in redis_client.scan_iter(match=f"{demo.prefix}:*")] == []  # the run's state is gone
