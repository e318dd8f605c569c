"""``gatekeeper topics`` and ``gatekeeper status`` against the real broker and Redis (typer's CliRunner)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
import yaml
from aiokafka.admin import AIOKafkaAdminClient

from tests.integration._pipeline import cli, produce

pytestmark = pytest.mark.integration


async def test_topics_create_is_idempotent_and_status_reports_lag_and_dead_letters(
    kafka_bootstrap: str, redis_url: str, redis_client: object, tmp_path: Path
) -> None:
    base = f"gk-test-cli-{uuid.uuid4().hex[:8]}"
    route = {
        "input": base,
        "output": f"{base}.checked",
        "dead_letter": f"{base}.dlq",
        "alerts": f"{base}.alerts",
        "profile": "pay",
    }
    config = tmp_path / "gk.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": kafka_bootstrap, "group_id": f"{base}-group"},
                "redis": {"url": redis_url, "key_prefix": f"gkt{uuid.uuid4().hex[:8]}"},
                "routes": [route],
            }
        )
    )
    c = str(config)
    try:
        missing = await cli("topics", "describe", "-c", c)
        assert missing.exit_code == 1 and "4 topic(s) missing" in missing.stderr
        started = time.monotonic()
        no_topics = await cli("status", "-c", c, "--timeout", "20")  # at once, not after the timeout
        assert time.monotonic() - started < 10
        assert no_topics.exit_code == missing.exit_code == 1 and no_topics.stdout == ""
        names = f"{base}, {base}.checked, {base}.dlq, {base}.alerts"
        said = f"gatekeeper: error: 4 topic(s) missing: {names} (create them with: gatekeeper topics create -c {c})\n"
        assert no_topics.stderr == missing.stderr == said
        created = await cli(
            "topics", "create", "-c", c, "--partitions", "2", "--set", "retention.ms=3600000",
            "--dead-letter-set", "retention.ms=7200000",
        )  # fmt: skip
        assert created.exit_code == 0, created.output
        assert "4 created, 0 already existed" in created.stdout
        again = await cli("topics", "create", "-c", c, "--partitions", "5")
        assert again.exit_code == 0 and "0 created, 4 already existed" in again.stdout
        described = await cli("topics", "describe", "-c", c, "--json")
        assert described.exit_code == 0, described.output
        rows = {r["kind"]: r for r in json.loads(described.stdout)}
        assert set(rows) == {"input", "output", "dead_letter", "alerts"}
        assert all(r["exists"] and r["partitions"] == 2 and r["replication_factor"] == 1 for r in rows.values())
        assert rows["input"]["configs"]["retention.ms"] == "3600000"
        assert rows["dead_letter"]["configs"]["retention.ms"] == "7200000"
        table = await cli("topics", "describe", "-c", c)
        assert table.exit_code == 0 and f"{base}.dlq" in table.stdout and "dead_letter" in table.stdout

        await produce(kafka_bootstrap, base, [(b"c1", b"RW1 line", ())] * 3, partition=0)
        await produce(kafka_bootstrap, f"{base}.dlq", [(b"c1", b"RW1 line", ())] * 2, partition=1)
        status = await cli("status", "-c", c, "--json")
        assert status.exit_code == 0, status.output
        doc = json.loads(status.stdout)
        (r,) = doc["routes"]
        assert doc["group"] == f"{base}-group" and r["route"] == base
        assert [(p["partition"], p["committed"], p["end"], p["lag"]) for p in r["lag"]] == [
            (0, None, 3, 3),
            (1, None, 0, 0),
        ]
        assert r["lag_total"] == 3 and r["dead_letter_depth"] == 2
        assert r["open_handoffs"] == {"open": 0, "oldest_age_seconds": None}
        text = await cli("status", "-c", c)
        assert text.exit_code == 0 and "lag per input partition" in text.stdout and f"2 on {base}.dlq" in text.stdout
    finally:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        await admin.start()
        try:
            await admin.delete_topics([route[k] for k in ("input", "output", "dead_letter", "alerts")])
        except Exception:
            pass
        finally:
            await admin.close()
