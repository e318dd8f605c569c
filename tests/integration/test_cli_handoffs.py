"""``gatekeeper handoffs list|show`` against real Redis (typer's CliRunner), on states the Processor and the Sweeper
wrote there."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml

from gatekeeper.config import load_settings
from gatekeeper.consumers.deciding import route_policy
from gatekeeper.processor import Line, Processor
from gatekeeper.redis_store import RedisStore
from gatekeeper.sweeper import Sweeper, SweepRoute
from tests.integration._pipeline import cli
from tests.lifecycle.memory import Clock, MemoryPublisher
from tests.policy.test_lifecycle import HO_EXP, T_EXP
from tests.policy.world import NOW, RECORD

pytestmark = pytest.mark.integration

ROUTE = "agents.pay.cli"


@pytest.fixture
def config(tmp_path: Path, redis_url: str) -> Path:
    path = tmp_path / "gk.yaml"
    route = {"input": ROUTE, "output": f"{ROUTE}.out", "dead_letter": f"{ROUTE}.dlq", "alerts": f"{ROUTE}.alerts"}
    path.write_text(
        yaml.safe_dump(
            {
                "redis": {"url": redis_url, "key_prefix": f"gkt{uuid.uuid4().hex[:8]}"},
                "routes": [{**route, "profile": "pay"}],
            }
        )
    )
    return path


async def _fill(config: Path) -> None:
    settings = load_settings(config)
    store = RedisStore(settings.redis)
    try:
        await store.put_record(RECORD)
        policy = route_policy(settings.routes[0], settings)
        proc = Processor(store, policy)
        review = "RW1 HO scheduler-1 p=pay from=scheduler to=payer item=inv:{n} ask=REVIEW"
        for conv, lines in {
            "c-open": [review.format(n="O-1")],
            "c-exp": [HO_EXP],
            "c-closed": [
                review.format(n="C-1"),
                "RW1 UN payer-1 re=scheduler-1 p=pay from=payer to=scheduler why=BUSY",
            ],
        }.items():
            await proc.process([Line(conv, ln.encode(), partition=0) for ln in lines], NOW)
        sweeper = Sweeper(store, [SweepRoute(policy, "out", "alerts")], MemoryPublisher(), clock=Clock(T_EXP))
        report = await sweeper.sweep([(ROUTE, 0)])
        assert [h.what for h in report.handled] == ["cancelled"]
    finally:
        await store.close()


async def test_list_and_show_the_handoffs_in_redis(config: Path, redis_client: object) -> None:
    await _fill(config)
    c = str(config)
    opened = await cli("handoffs", "list", "--open", "-c", c, "--json")
    assert opened.exit_code == 0, opened.output
    rows = json.loads(opened.stdout)
    assert sorted((r["conversation"], r["handoff"]) for r in rows) == [
        ("c-exp", "scheduler-1"),
        ("c-open", "scheduler-1"),
    ]
    by_conv = {r["conversation"]: r for r in rows}
    assert by_conv["c-exp"]["status"] == "cancelled by the gatekeeper, not acknowledged"
    assert by_conv["c-open"]["status"] == "open" and by_conv["c-open"]["next_deadline"] is None

    expired = await cli("handoffs", "list", "--expired", "-c", c, "--json")
    assert expired.exit_code == 0, expired.output
    (row,) = json.loads(expired.stdout)
    assert row["conversation"] == "c-exp" and row["gatekeeper_cancel"]["id"] == "scheduler-900000001"
    assert row["overdue"]["alert"] == "thread-orphaned"

    table = await cli("handoffs", "list", "-c", c)
    assert table.exit_code == 0 and "c-exp" in table.stdout and "c-open" in table.stdout
    assert "c-closed" not in table.stdout  # closed and never expired: neither open nor expired

    one = await cli("handoffs", "list", "--conversation", "c-closed", "-c", c, "--json")
    assert one.exit_code == 0, one.output
    assert json.loads(one.stdout)[0]["status"] == "closed by UN payer-1"

    shown = await cli("handoffs", "show", "c-exp", "scheduler-1", "-c", c)
    assert shown.exit_code == 0, shown.output
    out = shown.stdout
    assert "cancelled by the gatekeeper" in out and "scheduler-900000001 why=EXPIRED" in out
    assert "exp       20261001T1000Z" in out and "acted on" in out
    assert "CX scheduler-900000001" in out and "acct=****2938" in out and "61102938" not in out
    as_json = json.loads((await cli("handoffs", "show", "c-exp", "scheduler-1", "-c", c, "--json")).stdout)
    assert [t["type"] for t in as_json["thread"]] == ["HO", "CX"]
    assert as_json["cancel_intent"]["done"] is True and as_json["bound"] is True


async def test_clear_errors(config: Path, redis_client: object, tmp_path: Path) -> None:
    c = str(config)
    both = await cli("handoffs", "list", "--open", "--expired", "-c", c)
    assert both.exit_code == 2 and "exclude each other" in both.stderr
    unknown_route = await cli("handoffs", "list", "--route", "nope", "-c", c)
    assert unknown_route.exit_code == 2 and "unknown route" in unknown_route.stderr
    nothing = await cli("handoffs", "list", "-c", c)  # an empty list is an answer, not an error
    assert (nothing.exit_code, nothing.stdout, nothing.stderr) == (
        0,
        f"no open or expired handoffs on route {ROUTE}\n",
        "",
    )
    nothing_open = await cli("handoffs", "list", "--open", "-c", c)
    assert nothing_open.exit_code == 0 and nothing_open.stdout == f"no open handoffs on route {ROUTE}\n"
    in_conv = await cli("handoffs", "list", "--conversation", "ghost", "-c", c)
    assert in_conv.exit_code == 0 and in_conv.stdout == f"no handoffs in conversation ghost on route {ROUTE}\n"
    as_json = await cli("handoffs", "list", "--expired", "--json", "-c", c)
    assert as_json.exit_code == 0 and json.loads(as_json.stdout) == []
    no_conv = await cli("handoffs", "show", "ghost", "scheduler-1", "-c", c)
    assert no_conv.exit_code == 1 and no_conv.stderr.startswith("gatekeeper: no conversation ghost")
    await _fill(config)
    no_ho = await cli("handoffs", "show", "c-exp", "scheduler-7", "-c", c)
    assert no_ho.exit_code == 1 and "its handoffs: scheduler-1" in no_ho.stderr
    down = tmp_path / "down.yaml"
    doc = yaml.safe_load(config.read_text())
    doc["redis"]["url"] = "redis://127.0.0.1:1/0"
    down.write_text(yaml.safe_dump(doc))
    unreachable = await cli("handoffs", "list", "-c", str(down))
    assert unreachable.exit_code == 3 and "redis" in unreachable.stderr
