"""``gatekeeper redis``: the generation marker that tells a gatekeeper its Redis still holds the data it started on.

    gatekeeper redis generation -c gk.yaml        show the marker
    gatekeeper redis accept-loss -c gk.yaml       after a loss: accept what Redis holds now (a new marker)

A gatekeeper that finds the marker missing or different (Redis restarted without persistence, was flushed, or
failed over to an empty replica) decides nothing and forwards nothing until an operator has run ``accept-loss`` and
restarted the gatekeepers; ``records load``, ``records delete``, ``replay`` and the gate's dry run refuse until then
(``gatekeeper.generation``). What to do: docs/troubleshooting.md, "Redis lost its data".
"""

from __future__ import annotations

from typing import Annotated

import typer

from gatekeeper.cli import app
from gatekeeper.cli.common import EXIT_USAGE, ConfigOption, cli_errors, fail, run, settings_from, stdout_is_tty
from gatekeeper.config import Settings
from gatekeeper.redis_store import RedisStore

redis_app = typer.Typer(
    name="redis",
    help="The Redis generation marker: show it, or accept a data loss after restoring the records.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)
app.add_typer(redis_app, name="redis")

ACCEPT_EPILOG = """\
[bold]Examples[/bold]

  [cyan]gatekeeper redis accept-loss --config gk.yaml[/cyan]          asks for confirmation
  [cyan]gatekeeper redis accept-loss --config gk.yaml --yes[/cyan]

Run it only after Redis lost its data and could not be restored (a backup, an AOF). Until then the gatekeepers
decide nothing, and [cyan]records load[/cyan], [cyan]records delete[/cyan], [cyan]replay[/cyan] and the gate's dry
run refuse. Then, in this order: load only the approvals still to be acted on ([cyan]gatekeeper records load[/cyan]),
restart the gatekeepers (they start on the new marker), and replay what was held for them.

[bold]What was lost stays lost.[/bold] The exec bindings (which approval a handoff already used) are gone: an
approval already used could be used a second time. Before loading, check which approvals were used (the output
topics' forwarded handoffs, the acting systems) and leave them out ([cyan]gatekeeper records delete[/cyan] one
loaded by mistake). Conversation states are gone too: replies to handoffs forwarded before the loss are
dead-lettered as unknown. Exit status 3 when Redis is unreachable.
"""


def _store(settings: Settings) -> RedisStore:
    with cli_errors():
        return RedisStore(settings.redis)


@redis_app.command("generation")
def generation(config: ConfigOption = None) -> None:
    """Show the generation marker (exit status 1 when there is none: no gatekeeper started, or Redis lost it)."""
    settings = settings_from(config)
    found = run(_generation(settings))
    if found is None:
        fail(f"no generation marker at {settings.redis.key_prefix}:generation")
    typer.echo(found)


async def _generation(settings: Settings) -> str | None:
    async with _store(settings) as store:
        return await store.generation()


@redis_app.command("accept-loss", epilog=ACCEPT_EPILOG)
def accept_loss(
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    config: ConfigOption = None,
) -> None:
    """Write a new generation marker: accept what Redis holds now, after a loss (then restart the gatekeepers)."""
    settings = settings_from(config)
    if not yes:
        if not stdout_is_tty():
            fail("not a terminal: confirm with --yes", EXIT_USAGE)
        typer.confirm(
            "accept what Redis holds now? exec bindings lost with the data let an approval already used be used "
            "again: load only the approvals still to be acted on after this",
            abort=True,
        )
    old, new = run(_accept(settings))
    typer.echo(
        f"generation marker {old or '(none)'} -> {new}; load the approvals still to be acted on, then restart the "
        "gatekeepers to resume"
    )


async def _accept(settings: Settings) -> tuple[str | None, str]:
    async with _store(settings) as store:
        return await store.accept_loss()
