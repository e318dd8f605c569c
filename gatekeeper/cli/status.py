"""``gatekeeper status``: how far behind the gatekeeper is, how much it has refused, how much is open.

Read-only and outside the consumer group (it never joins, so it never triggers a rebalance): per route, the group's
lag on every input partition (end offset minus committed offset), the dead-letter topic's depth (records retained on
it now), and the open handoffs from the handoff lifecycle's index in Redis.

Before reading Redis it applies the generation marker's rule (``gatekeeper.generation``), as the daemon does at its
start: a Redis that lost its data is one the gatekeepers decide nothing against, so ``status`` says so and exits 3
(as the commands that refuse on a loss do), the open handoffs unknown (the index went with the data).
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer

from gatekeeper.admin import group_lag, partition_offsets, plain_consumer
from gatekeeper.cli import app
from gatekeeper.cli._out import console
from gatekeeper.cli.common import (
    EXIT_FINDING,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    ConfigOption,
    cli_errors,
    fail,
    run,
    settings_from,
)
from gatekeeper.cli.topics import missing_topics, missing_topics_message
from gatekeeper.config import Route, Settings
from gatekeeper.generation import RESOLVE, Refused, lost_message, require

EPILOG = """\
[bold]Examples[/bold]

  [cyan]gatekeeper status -c gk.yaml[/cyan]
  [cyan]gatekeeper status -c gk.yaml --route agents.pay --json | jq '.routes[0].lag_total'[/cyan]

Per route: the consumer group's lag per input partition (records not yet answered: a rising lag means the
gatekeepers are too few, or stuck on Redis or the broker: see /readyz), the dead-letter depth (records on the
dead-letter topic now; [cyan]gatekeeper replay[/cyan] re-drives them, retention removes them), and the open handoffs
(from the handoff lifecycle's index in Redis; "unknown" when no index is kept; the handoffs themselves:
[cyan]gatekeeper handoffs list --open[/cyan]).

[bold]Redis lost its data.[/bold] When the generation marker is missing while the consumer group has committed
offsets (the rule the gatekeepers apply at their start: README, Runbook, "Redis lost its data"), the gatekeepers
decide and forward nothing: the lag is printed, the open handoffs are unknown, and the reason and what resolves it
([cyan]gatekeeper redis accept-loss[/cyan]) end the output on stderr, exit 3 ([cyan]redis_data_lost[/cyan] in the
JSON). A first start (no marker, no committed offset) is not a loss.

Exit status: 0 done, 1 a route's topic is missing (named, at once, as [cyan]gatekeeper topics describe[/cyan] names
it; [cyan]gatekeeper topics create[/cyan] creates it), 2 bad configuration or unknown route, 3 Kafka or Redis
unreachable, or Redis lost its data (the gatekeepers decide nothing until the loss is accepted).
"""


@app.command("status", epilog=EPILOG)
def status(
    route: Annotated[
        str | None, typer.Option("--route", "-r", metavar="ROUTE", help="Only this route (its input topic).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the status as JSON.")] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.5, metavar="SECONDS", help="How long to wait for Kafka and Redis.")
    ] = 10.0,
    config: ConfigOption = None,
) -> None:
    """Lag per input partition, dead-letter depth and open handoffs, per route."""
    settings = settings_from(config)
    if not settings.routes:
        fail("routes: no route configured (see config/gatekeeper.example.yaml)", EXIT_USAGE)
    with cli_errors():
        routes = list(settings.routes) if route is None else [settings.route(route)]
    missing = run(missing_topics(settings, routes, timeout))
    if missing:  # said at once, as topics describe says it (status would otherwise wait for their metadata)
        fail(missing_topics_message(missing, config), EXIT_FINDING)
    report = run(_status(settings, routes, timeout))
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        _print(report)
    if report["redis_data_lost"]:
        fail(report["redis_data_lost"], EXIT_UNAVAILABLE)
    if report["redis_error"]:
        fail(f"open handoffs unknown: {report['redis_error']}", EXIT_UNAVAILABLE)


async def _status(settings: Settings, routes: list[Route], timeout: float) -> dict[str, Any]:
    group = settings.kafka.group_id
    lags = await group_lag(settings.kafka, group, [r.input for r in routes], timeout)
    depths: dict[str, list[dict[str, int]]] = {}
    async with plain_consumer(settings.kafka, timeout) as consumer:
        for r in routes:
            offsets = await partition_offsets(consumer, settings.kafka, r.dead_letter, timeout)
            depths[r.dead_letter] = [{"partition": o.partition, "depth": o.depth} for o in offsets]
    open_handoffs, redis_error, data_lost = await _open_handoffs(settings, routes, timeout)
    out_routes = []
    for r in routes:
        parts = [
            {"partition": x.partition, "committed": x.committed, "end": x.end, "lag": x.lag}
            for x in lags
            if x.topic == r.input
        ]
        out_routes.append(
            {
                "route": r.input,
                "mode": r.mode,
                "lag": parts,
                "lag_total": sum(p["lag"] or 0 for p in parts),
                "dead_letter": r.dead_letter,
                "dead_letter_depth": sum(d["depth"] for d in depths[r.dead_letter]),
                "dead_letter_partitions": depths[r.dead_letter],
                "open_handoffs": open_handoffs.get(r.input),
            }
        )
    return {"group": group, "routes": out_routes, "redis_error": redis_error, "redis_data_lost": data_lost}


async def _open_handoffs(
    settings: Settings, routes: list[Route], timeout: float
) -> tuple[dict[str, dict[str, Any] | None], str | None, str | None]:
    """Per route: the open handoffs (count, oldest) from the lifecycle's index; None when no index is kept. Then
    the error that left them unknown (Redis unavailable), and why the gatekeepers decide nothing when Redis lost
    its data (``gatekeeper.generation``'s rule: the marker missing while the group committed offsets)."""
    import asyncio

    from gatekeeper.redis_store import RedisStore
    from gatekeeper.store import StoreError

    out: dict[str, dict[str, Any] | None] = {r.input: None for r in routes}
    store = RedisStore(settings.redis)
    try:
        if await asyncio.wait_for(store.generation(), timeout) is None:
            try:
                await require(settings, store, timeout=timeout)  # Kafka asked only here, each step bounded
            except Refused:
                return out, None, data_lost_message(settings)
        index = getattr(store, "index", None)
        if index is None:
            return out, None, None
        now = time.time()
        for r in routes:
            members = await asyncio.wait_for(index(r.input, "open"), timeout)
            oldest = min((m.score for _, m in members), default=None)
            out[r.input] = {"open": len(members), "oldest_age_seconds": None if oldest is None else now - oldest}
        return out, None, None
    except (StoreError, TimeoutError) as exc:
        return out, str(exc) or f"redis did not answer within {timeout:g}s", None
    finally:
        await store.close()


def data_lost_message(settings: Settings) -> str:
    """Why the gatekeepers decide nothing, in the daemon's words, and what resolves it."""
    what = lost_message(settings.redis.key_prefix, settings.kafka.group_id)
    return f"{what}. The gatekeepers decide and forward nothing until the loss is resolved: {RESOLVE}"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(max(0, seconds))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def _print(report: dict[str, Any]) -> None:
    from rich.table import Table

    out = console()
    lag = Table(title=f"consumer group {report['group']}: lag per input partition", show_edge=False, pad_edge=False)
    for col in ("route", "partition", "committed", "end", "lag"):
        lag.add_column(col, justify="left" if col == "route" else "right")
    for r in report["routes"]:
        for p in r["lag"]:
            committed = "-" if p["committed"] is None else str(p["committed"])
            lag.add_row(r["route"], str(p["partition"]), committed, str(p["end"]), str(p["lag"]))
    out.print(lag)
    summary = Table(title="per route", show_edge=False, pad_edge=False)
    for col in ("route", "mode", "lag", "dead letters", "open handoffs", "oldest open"):
        summary.add_column(col)
    for r in report["routes"]:
        handoffs = r["open_handoffs"]
        if handoffs is None:
            opened, oldest = "unknown", "-"
        else:
            opened, oldest = str(handoffs["open"]), _age(handoffs["oldest_age_seconds"])
        summary.add_row(
            r["route"],
            r["mode"],
            str(r["lag_total"]),
            f"{r['dead_letter_depth']} on {r['dead_letter']}",
            opened,
            oldest,
        )
    out.print(summary)
