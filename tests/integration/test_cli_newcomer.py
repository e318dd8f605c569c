"""``gatekeeper status`` on a Redis that lost its data, against the real broker and Redis.

The daemon decides nothing while the generation marker is missing after a loss (``gatekeeper.generation``: the
marker gone while the consumer group has committed offsets). ``status`` used to print the lag and exit 0 then, the
open handoffs read from the emptied index as "0 open": an operator saw a healthy gatekeeper that was refusing to
decide. It now applies the same rule and exits 3 with the daemon's reason and what resolves it.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration._pipeline import Pipeline, TopicFactory, cli, committed, config_file, make_route, settings_for
from tests.seed import HO

pytestmark = pytest.mark.integration

LOST = "gatekeeper: error: redis lost its data: no generation marker"


async def test_status_exits_3_while_the_gatekeepers_refuse_to_decide_after_a_loss(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: Any, tmp_path: Path
) -> None:
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p:
        settings, route = p.settings, p.route()
        await p.send("c1", HO)  # no record: dead-lettered, and its offset committed
        await p.collect(lambda g: g.count("c1") == 1)
        deadline = time.monotonic() + 20
        while (await committed(kafka_bootstrap, settings.kafka.group_id, route.input))[0] != 1:
            assert time.monotonic() < deadline, "the group did not commit"
            await asyncio.sleep(0.1)
    config = config_file(tmp_path / "gk.yaml", settings)
    c = str(config)

    healthy = await cli("status", "-c", c, "--json")
    assert healthy.exit_code == 0, healthy.output
    doc = json.loads(healthy.stdout)
    assert doc.get("redis_data_lost") is None and doc["routes"][0]["open_handoffs"] is not None

    prefix = settings.redis.key_prefix  # Redis loses this gatekeeper's data: its marker and owner epochs with it
    keys = [k async for k in redis_client.scan_iter(match=f"{prefix}:*")]
    assert f"{prefix}:generation".encode() in keys
    await redis_client.delete(*keys)

    lost = await cli("status", "-c", c, "--json")
    assert lost.exit_code == 3, lost.output
    assert lost.stderr.startswith(LOST) and lost.stderr.count("\n") == 1, lost.stderr
    assert f"consumer group {settings.kafka.group_id} has committed offsets" in lost.stderr
    assert "decide and forward nothing" in lost.stderr and "`gatekeeper redis accept-loss`" in lost.stderr
    doc = json.loads(lost.stdout)  # what can be known is still printed: the lag, the dead letters
    assert doc["redis_data_lost"] == lost.stderr.removeprefix("gatekeeper: error: ").strip()
    (r,) = doc["routes"]
    assert r["open_handoffs"] is None and r["lag_total"] == 0 and r["dead_letter_depth"] == 1
    table = await cli("status", "-c", c)
    assert table.exit_code == 3 and table.stderr == lost.stderr and "unknown" in table.stdout

    accepted = await cli("redis", "accept-loss", "--yes", "-c", c)
    assert accepted.exit_code == 0, accepted.output
    again = await cli("status", "-c", c, "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["redis_data_lost"] is None


async def test_status_on_a_first_start_is_not_a_loss(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    """No marker and no committed offset: no gatekeeper ran yet, nothing is refused."""
    settings = settings_for(kafka_bootstrap, redis_url, [await make_route(topic_factory)])
    config = config_file(tmp_path / "gk.yaml", settings)
    result = await cli("status", "-c", str(config), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["redis_data_lost"] is None and doc["routes"][0]["open_handoffs"] == {
        "open": 0,
        "oldest_age_seconds": None,
    }
