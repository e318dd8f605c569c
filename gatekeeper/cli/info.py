"""``gatekeeper legend``, ``gatekeeper version`` and ``gatekeeper rw ...`` (the protocol commands of rwcore)."""

from __future__ import annotations

import json
import platform
from importlib import metadata
from typing import Annotated

import typer

from gatekeeper import __version__
from gatekeeper.cli import app
from gatekeeper.cli.common import EXIT_USAGE, ConfigOption, cli_errors, fail, profile_from, settings_from

LEGEND_EPILOG = """\
[bold]Examples[/bold]

  [cyan]gatekeeper legend --profile pay[/cyan]                     the text an agent needs in its prompt
  [cyan]gatekeeper legend --profile pay --lean >> prompt.txt[/cyan]   without comprehension keys and unused core asks
  [cyan]gatekeeper legend --route agents.pay -c gk.yaml[/cyan]        the profile of a configured route

Profiles are searched in the configuration's profile_dirs (and $GK_PROFILE_DIRS) first, then rwcore's own
(pay, clin, deploy, pform). Without --profile or --route: the core vocabulary.
"""

VERSION_EPILOG = """\
[bold]Examples[/bold]

  [cyan]gatekeeper version[/cyan]
  [cyan]gatekeeper version --json[/cyan]

The gatekeeper's version is the one every outcome carries in its [cyan]gk.version[/cyan] header.
"""

RW_EPILOG = """\
[bold]Examples[/bold]

  [cyan]gatekeeper rw validate "RW1 HO scheduler-1 from=scheduler to=payer item=inv:1 ask=PAY p=pay rb=exec ..."[/cyan]
  [cyan]gatekeeper rw check-rb "$HO" "$RB" --profile pay[/cyan]
  [cyan]gatekeeper rw make-rb "$HO" payer-1 --profile pay[/cyan]
  [cyan]gatekeeper rw digest "$HO" --profile pay[/cyan]
  [cyan]gatekeeper rw check-thread conversation.rw1 --profile pay --now 20261001T0900Z[/cyan]
  [cyan]gatekeeper rw --help[/cyan]                                   every protocol command

The protocol commands of [cyan]python -m rwcore[/cyan] (the reference CLI's commands, options, output and exit
codes: 0 valid, 1 an error found, 2 usage): validate, check-rb, make-rb, check-ho, check-dn, check-thread, digest,
to-json, from-json, legend, lint. Everything after [cyan]rw[/cyan] is passed to it unchanged.
"""


@app.command("legend", epilog=LEGEND_EPILOG)
def legend(
    profile: Annotated[str | None, typer.Option("--profile", "-p", metavar="NAME", help="The profile.")] = None,
    route: Annotated[
        str | None, typer.Option("--route", "-r", metavar="ROUTE", help="The profile of this configured route.")
    ] = None,
    lean: Annotated[
        bool, typer.Option("--lean", help="Drop the comprehension-readback keys and the unused core asks.")
    ] = False,
    config: ConfigOption = None,
) -> None:
    """Print the legend an agent needs in its prompt to read and write RW1 lines."""
    from rwcore import get_profile
    from rwcore import legend as rw_legend

    if profile is not None and route is not None:
        fail("give --profile or --route, not both", EXIT_USAGE)
    settings = settings_from(config)
    if route is not None:
        with cli_errors():
            profile = settings.route(route).profile
    prof = get_profile(None) if profile is None else profile_from(profile, settings)
    typer.echo(rw_legend(prof, lean=lean))


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


@app.command("version", epilog=VERSION_EPILOG)
def version(as_json: Annotated[bool, typer.Option("--json", help="Print the versions as JSON.")] = False) -> None:
    """Print the gatekeeper's version (and the protocol's, Python's and the clients')."""
    from rwcore import VERSION as RW_VERSION

    info = {
        "gatekeeper": __version__,
        "protocol": RW_VERSION,
        "python": platform.python_version(),
        "aiokafka": _version("aiokafka"),
        "redis": _version("redis"),
    }
    if as_json:
        typer.echo(json.dumps(info))
        return
    typer.echo(
        f"gatekeeper {info['gatekeeper']} (protocol {info['protocol']}, python {info['python']}, "
        f"aiokafka {info['aiokafka']}, redis-py {info['redis']})"
    )


@app.command(
    "rw",
    epilog=RW_EPILOG,
    add_help_option=False,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
)
def rw(ctx: typer.Context) -> None:
    """The protocol commands of python -m rwcore: validate, check-rb, make-rb, digest... (gatekeeper rw --help)."""
    from rwcore._cli import main as rw_main

    raise typer.Exit(rw_main(list(ctx.args), prog=ctx.command_path))  # its usage lines say `gatekeeper rw`
