"""``gatekeeper topics create|describe``: the configured routes' topics (input, output, dead_letter, alerts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from gatekeeper.admin import TopicSpec, create_topics, describe_topics, route_topics
from gatekeeper.cli import app
from gatekeeper.cli._out import console
from gatekeeper.cli.common import EXIT_FINDING, EXIT_USAGE, ConfigOption, cli_errors, fail, run, settings_from
from gatekeeper.config import Route, Settings

topics_app = typer.Typer(
    name="topics",
    help="Create or describe the topics of the configured routes (input, output, dead_letter, alerts).",
    no_args_is_help=True,
    rich_markup_mode="rich",
)
app.add_typer(topics_app, name="topics")

CREATE_EPILOG = """\
[bold]Examples[/bold]

  [cyan]gatekeeper topics create -c gk.yaml[/cyan]                                  every route's four topics
  [cyan]gatekeeper topics create -c gk.yaml --partitions 12 --replication-factor 3 --set min.insync.replicas=2[/cyan]
  [cyan]gatekeeper topics create --route agents.pay --dead-letter-set retention.ms=2592000000[/cyan]   DLQ kept 30 days

Idempotent: a topic that exists is left exactly as it is (its partitions and configs are not changed) and reported
as [cyan]exists[/cyan]; run it on every deploy. The input topic's partitions bound how many gatekeepers share the work
(one consumer group), so size it for the scale you expect: partitions can be added later, never removed, and adding
them moves conversations to other partitions.

Exit status: 0 done, 2 bad option or configuration or the broker refused a topic, 3 Kafka unreachable.
"""

DESCRIBE_EPILOG = """\
[bold]Examples[/bold]

  [cyan]gatekeeper topics describe -c gk.yaml[/cyan]
  [cyan]gatekeeper topics describe --route agents.pay --json[/cyan]

Shows, per topic: its route and kind, whether it exists, partitions, replication factor and retention.ms,
cleanup.policy, max.message.bytes and min.insync.replicas. Exit status 1 when a configured topic is missing (each is
named, with the command that creates them).
"""


def _routes(settings: Settings, route: str | None) -> list[Route]:
    if not settings.routes:
        fail("routes: no route configured (see config/gatekeeper.example.yaml)", EXIT_USAGE)
    if route is None:
        return list(settings.routes)
    with cli_errors():
        return [settings.route(route)]


def _pairs(values: list[str] | None, option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values or ():
        key, sep, value = v.partition("=")
        if not sep or not key.strip() or not value.strip():
            fail(f"{option} {v!r}: expected KEY=VALUE, e.g. retention.ms=604800000", EXIT_USAGE)
        out[key.strip()] = value.strip()
    return out


RouteOption = Annotated[
    str | None, typer.Option("--route", "-r", metavar="ROUTE", help="Only this route (its input topic).")
]
TimeoutOption = Annotated[
    float, typer.Option("--timeout", min=0.5, metavar="SECONDS", help="How long to wait for Kafka.")
]


@topics_app.command("create", epilog=CREATE_EPILOG)
def create(
    partitions: Annotated[int, typer.Option("--partitions", min=1, help="Partitions of each new topic.")] = 3,
    replication_factor: Annotated[
        int, typer.Option("--replication-factor", min=1, help="Replicas of each new topic (3 in production).")
    ] = 1,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", metavar="KEY=VALUE", help="A topic config for every new topic (repeatable)."),
    ] = None,
    dead_letter_set: Annotated[
        list[str] | None,
        typer.Option("--dead-letter-set", metavar="KEY=VALUE", help="A topic config for dead-letter topics only."),
    ] = None,
    route: RouteOption = None,
    timeout: TimeoutOption = 10.0,
    config: ConfigOption = None,
) -> None:
    """Create the routes' topics that do not exist yet (idempotent)."""
    settings = settings_from(config)
    routes = _routes(settings, route)
    common = _pairs(set_, "--set")
    dlq = _pairs(dead_letter_set, "--dead-letter-set")
    wanted = route_topics(settings, routes)
    specs = [
        TopicSpec(t.name, partitions, replication_factor, {**common, **(dlq if t.kind == "dead_letter" else {})})
        for t in wanted
    ]
    result = run(create_topics(settings.kafka, specs, timeout))
    width = max(len(t.name) for t in wanted)
    for t in wanted:
        state = result.get(t.name, "?")
        extra = f" ({partitions} partitions, replication {replication_factor})" if state == "created" else ""
        typer.echo(f"{t.name:<{width}}  {t.kind:<11}  {state}{extra}")
    created = sum(1 for v in result.values() if v == "created")
    typer.echo(f"{created} created, {len(result) - created} already existed")


@topics_app.command("describe", epilog=DESCRIBE_EPILOG)
def describe(
    route: RouteOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
    timeout: TimeoutOption = 10.0,
    config: ConfigOption = None,
) -> None:
    """Describe the routes' topics: existence, partitions, replication and retention."""
    settings = settings_from(config)
    routes = _routes(settings, route)
    wanted = route_topics(settings, routes)
    info = run(describe_topics(settings.kafka, [t.name for t in wanted], timeout))
    rows = []
    for t in wanted:
        i = info[t.name]
        rows.append(
            {
                "topic": t.name,
                "route": t.route,
                "kind": t.kind,
                "exists": i.exists,
                "partitions": i.partitions if i.exists else None,
                "replication_factor": i.replication_factor if i.exists else None,
                "configs": i.configs,
            }
        )
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    else:
        from rich.table import Table

        table = Table(show_edge=False, pad_edge=False)
        for col in ("topic", "route", "kind", "partitions", "replicas", "retention.ms", "max.message.bytes"):
            table.add_column(col)
        for r in rows:
            cfg = r["configs"]
            assert isinstance(cfg, dict)
            table.add_row(
                str(r["topic"]),
                str(r["route"]),
                str(r["kind"]),
                str(r["partitions"]) if r["exists"] else "[red]missing[/red]",
                str(r["replication_factor"]) if r["exists"] else "-",
                cfg.get("retention.ms", "-"),
                cfg.get("max.message.bytes", "-"),
            )
        console().print(table)
    missing = [str(r["topic"]) for r in rows if not r["exists"]]
    if missing:
        fail(missing_topics_message(missing, config), EXIT_FINDING)


async def missing_topics(settings: Settings, routes: list[Route], timeout: float) -> list[str]:
    """The routes' topics (input, output, dead_letter, alerts) the broker does not have, in configuration order."""
    wanted = [t.name for t in route_topics(settings, routes)]
    info = await describe_topics(settings.kafka, wanted, timeout)
    return [n for n in dict.fromkeys(wanted) if not info[n].exists]


def missing_topics_message(missing: list[str], config: Path | None) -> str:
    """One line naming the missing topics and the command that creates them."""
    fix = "gatekeeper topics create" + ("" if config is None else f" -c {config}")
    return f"{len(missing)} topic(s) missing: {', '.join(missing)} (create them with: {fix})"
