"""``gatekeeper demo`` (``make run``) end to end on the real services: the real gatekeeper as a subprocess, the agents,
the verdicts of every conversation, the replay of the held payment, a clean stop."""

from __future__ import annotations

import io
import json
import re
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka.admin import AIOKafkaAdminClient
from rich.console import Console

from gatekeeper.demo import DEMO_MARKER, Demo, DemoError, DemoOptions, DemoResult
from gatekeeper.policy import bound_handoff
from tests.integration._pipeline import cli

pytestmark = pytest.mark.integration

SAMPLES = Path(__file__).resolve().parents[2] / "config" / "samples"


def _verdicts(result: DemoResult, scenario: str) -> Counter[tuple[Any, ...]]:
    return Counter((s.topic, s.type, s.sender, s.verdict, s.reason, s.replayed) for s in result.of(scenario))


def _expect(*rows: tuple[Any, ...]) -> Counter[tuple[Any, ...]]:
    return Counter(rows)


def _sample(tmp_path: Path, base: str, kafka_bootstrap: str, redis_url: str) -> tuple[Path, dict[str, Any]]:
    """The sample configuration on topics, a group and a Redis prefix of the test's own (a user's demo on the same
    services keeps its world), the services written in as the operator's commands need them."""
    sample = yaml.safe_load((SAMPLES / "gatekeeper.yaml").read_text())
    sample["kafka"].update(group_id=f"{base}-group", bootstrap_servers=kafka_bootstrap)
    sample["redis"].update(key_prefix=base, url=redis_url)
    route = sample["routes"][0]
    route.update(input=base, output=f"{base}.checked", dead_letter=f"{base}.dlq", alerts=f"{base}.alerts")
    config = tmp_path / "demo.yaml"
    config.write_text(yaml.safe_dump(sample))
    return config, route


async def test_the_demo_plays_every_conversation_and_replays_the_held_payment(
    kafka_bootstrap: str, redis_url: str, redis_client: Any, tmp_path: Path
) -> None:
    base = f"gk-test-demo-{uuid.uuid4().hex[:8]}"
    config, route = _sample(tmp_path, base, kafka_bootstrap, redis_url)
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
        text = out.getvalue()
        world = await _look_around(config, route["input"], demo.run_id)
        # the README's promise: each `make run` starts clean, a second one in a row too (the same consumer group,
        # whose offsets survive in Kafka: the generation marker and the epochs survive the demo's clearing)
        again_out = io.StringIO()
        again = await Demo(options, Console(file=again_out, width=200, color_system=None, highlight=False)).run()
        assert again.gatekeeper_exit == result.gatekeeper_exit, again_out.getvalue()
        assert again.replay_exit == result.replay_exit and "redis lost its data" not in again_out.getvalue()
        assert sorted((s.scenario, s.type, s.verdict) for s in again.seen) == sorted(
            (s.scenario, s.type, s.verdict) for s in result.seen
        )
        # it ends with the console's address for the lookalike payment: served, the page shows the refused readback
        found = re.search(r"http://127\.0\.0\.1:9108(/console/conversation\?\S+)", again_out.getvalue())
        assert found is not None, again_out.getvalue()[-2000:]
        page = await _console_page(config, found.group(1))
        assert "check-rb" in page and "exec-mismatch" in page and "****2983" in page
    finally:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        await admin.start()
        try:
            await admin.delete_topics([route[k] for k in ("input", "output", "dead_letter", "alerts")])
        finally:
            await admin.close()

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

    # the demo's world stays, under the configuration's own prefix, and the commands it ends with are shown
    assert demo.prefix == base and await redis_client.get(f"{base}:{DEMO_MARKER}") is not None
    c = str(config)
    for command in (
        f"gatekeeper status -c {c}",
        f"gatekeeper handoffs show lookalike-{demo.run_id} scheduler-1 -c {c}",
        f"gatekeeper replay --route {base} --dry-run --details -c {c}",
    ):
        assert command in text, command
    assert "until the next demo or make stop" in text
    # and it is coherent: what the commands say is what the demo did
    # the payer numbers its lines across the conversations it plays at once, so its DN's number varies
    assert re.fullmatch(r"closed by DN payer-\d+", world["clean"]), world["clean"]
    assert bound_handoff(world["binding"]).endswith(f"/clean-{demo.run_id}/scheduler-1")  # <route>/<conversation>/<id>
    assert world["replay"] == {"check-rb": 2, "already-forwarded": 1}  # the original reasons, not unknown-handoff
    assert world["state_gone"] == 0


async def _console_page(config: Path, path: str) -> str:
    """``path`` from a console served on the demo's configuration (as ``gatekeeper serve -c`` serves it)."""
    import httpx

    from gatekeeper.config import load_settings
    from gatekeeper.http import HttpServer
    from gatekeeper.metrics import Metrics

    settings = load_settings(config)
    settings = settings.model_copy(update={"http": settings.http.model_copy(update={"port": 0})})
    server = HttpServer("127.0.0.1", 0, Metrics(), lambda: (True, {}), settings=settings)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            res = await client.get(path)
            assert res.status_code == 200, res.text
            return res.text
    finally:
        await server.close()


async def _look_around(config: Path, route: str, run_id: str) -> dict[str, Any]:
    """What the operator's commands the demo ends with report about the demo's world."""
    c = str(config)
    handoffs = await cli("handoffs", "list", "--conversation", f"clean-{run_id}", "--json", "-c", c)
    assert handoffs.exit_code == 0, handoffs.output
    records = await cli("records", "get", "inv:MD-2026-057", "--ask", "PAY", "--json", "-c", c)
    assert records.exit_code == 0, records.output
    replay = await cli("replay", "--route", route, "--dry-run", "--json", "-c", c)
    assert replay.exit_code == 1, replay.output  # the two refused readbacks still fail: a finding
    doc = json.loads(replay.stdout)
    return {
        "clean": json.loads(handoffs.stdout)[0]["status"],
        "binding": json.loads(records.stdout)[0]["binding"],
        "replay": Counter(ln["reason"] or ln["status"] for ln in doc["lines"] if ln["conversation"].endswith(run_id)),
        "state_gone": doc["state_gone"],
    }


async def test_the_next_demo_clears_a_demos_state_and_never_keys_it_did_not_write(
    redis_url: str, redis_client: Any, tmp_path: Path
) -> None:
    base = f"gk-test-demo-{uuid.uuid4().hex[:8]}"
    config, _ = _sample(tmp_path, base, "127.0.0.1:1", redis_url)  # Kafka is never reached
    options = DemoOptions(
        config=config, records=SAMPLES / "records.json", late_records=SAMPLES / "records.late.json", http_port=0
    )
    out = io.StringIO()
    await redis_client.set(f"{base}:cs:{{someone/else}}", "1")
    demo = Demo(options, Console(file=out, width=200, color_system=None))
    with pytest.raises(DemoError, match=f"1 key\\(s\\) under the prefix '{base}' that no demo wrote"):
        await demo.fresh_state()
    assert await redis_client.get(f"{base}:cs:{{someone/else}}") == b"1"  # left alone

    await redis_client.set(f"{base}:{DEMO_MARKER}", json.dumps({"run": "earlier"}))  # an earlier demo's world
    await demo.fresh_state()
    assert [k async for k in redis_client.scan_iter(match=f"{base}:*")] == [f"{base}:{DEMO_MARKER}".encode()]
    assert json.loads(await redis_client.get(f"{base}:{DEMO_MARKER}"))["run"] == demo.run_id
    assert "cleared the previous demo's Redis state (run earlier, 2 keys)" in out.getvalue()
