"""``gatekeeper demo``: the real gatekeeper on the local services, with small agents (see ``gatekeeper.demo``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from gatekeeper.cli import app
from gatekeeper.cli._out import console
from gatekeeper.cli.common import EXIT_FINDING, EXIT_USAGE, cli_errors, fail

EPILOG = """\
[bold]Examples[/bold]

  [cyan]make run[/cyan]                                                   starts the local Kafka and Redis, then this
  [cyan]gatekeeper demo --bootstrap 127.0.0.1:9092 --redis-url redis://127.0.0.1:6379/0[/cyan]
  [cyan]gatekeeper demo --config my-demo.yaml --http-port 0 --forget-state[/cyan]

Creates the route's topics, loads the sample approvals (config/samples/records.json), starts
[cyan]gatekeeper run[/cyan] as a subprocess, and plays six conversations through the broker: a clean payment, a
payment tool resolving a lookalike account, a tool paying another amount, a cancel, a comprehension handoff, and a
payment whose handoff arrives before its approval. Each line's verdict is shown as it arrives; then the dead-letter
topic, the late approval ([cyan]gatekeeper records load[/cyan]), [cyan]gatekeeper replay[/cyan] forwarding the held
handoff, and /metrics. It stops the gatekeeper at the end; [cyan]make stop[/cyan] stops the services.

Kafka and Redis: --bootstrap and --redis-url, else GK_KAFKA_BOOTSTRAP and GK_REDIS_URL (the local stack's
.local/stack/stack.env), else the configuration file.

The demo's world stays after it: its Redis state (under the configuration's redis.key_prefix, "demo") and its
topics, so the commands it ends with ([cyan]gatekeeper status[/cyan], [cyan]handoffs[/cyan], [cyan]records get[/cyan],
[cyan]replay --dry-run[/cyan], with -c config/samples/gatekeeper.yaml) show what it did. The next demo clears that
Redis state first (one approval, one act: the same payments could not be paid twice); it refuses to clear keys no
demo wrote. [cyan]make stop[/cyan] deletes everything. --forget-state deletes the Redis state at the end instead.

Exit status: 0 done, 1 a step failed, 2 bad configuration, 3 Kafka or Redis unreachable.
"""


@app.command("demo", epilog=EPILOG)
def demo(
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", metavar="FILE", help="The demo's configuration (samples/gatekeeper.yaml)."),
    ] = None,
    bootstrap: Annotated[
        str | None,
        typer.Option(
            "--bootstrap", envvar="GK_KAFKA_BOOTSTRAP", metavar="HOST:PORT", help="Kafka (bootstrap servers)."
        ),
    ] = None,
    redis_url: Annotated[
        str | None, typer.Option("--redis-url", envvar="GK_REDIS_URL", metavar="URL", help="Redis.")
    ] = None,
    http_port: Annotated[
        int | None,
        typer.Option("--http-port", min=0, max=65535, help="The gatekeeper's /metrics port (0: any free port)."),
    ] = None,
    log_file: Annotated[
        Path, typer.Option("--log-file", metavar="FILE", help="Where the gatekeeper's log goes.")
    ] = Path(".local/demo/gatekeeper.log"),
    keep_state: Annotated[
        bool,
        typer.Option(
            "--keep-state/--forget-state",
            help="Keep the demo's Redis state after it, for the commands it ends with (the next demo clears it).",
        ),
    ] = True,
) -> None:
    """Play the newcomer's demo: agents, the real gatekeeper, verdicts as they happen, a replay."""
    from gatekeeper.demo import Demo, DemoError, default_options

    options = default_options(config)
    for what, path in (("config", options.config), ("records", options.records), ("records", options.late_records)):
        if not path.exists():
            fail(f"{what} file {path} does not exist (run from the repository, or give --config)", EXIT_USAGE)
    options.bootstrap = bootstrap
    options.redis_url = redis_url
    options.http_port = http_port
    options.log_file = log_file
    options.keep_state = keep_state
    with cli_errors():
        try:
            asyncio.run(Demo(options, console()).run())
        except DemoError as exc:
            fail(str(exc), EXIT_FINDING)
