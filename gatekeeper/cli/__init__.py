"""The ``gatekeeper`` command line (typer).

    gatekeeper check FILE --records RECORDS.json      decide lines offline, exactly as the daemon would
    gatekeeper records load|get|delete ...            the approved records in Redis

Adding a command: write it in its own module, ``gatekeeper/cli/<name>.py``, registered on ``app`` when the module is
imported, and append ONE import line to the list at the bottom of this file (above ``_reflow_help(app)``)::

    # gatekeeper/cli/run.py
    from gatekeeper.cli import app

    @app.command("run", epilog=EXAMPLES)
    def run(config: ConfigOption = None) -> None:
        \"\"\"Run the daemon.\"\"\"

    # here, at the bottom:
    from gatekeeper.cli import run as _run  # noqa: E402, F401

(A plain function works too: ``from gatekeeper.cli.run import run`` and ``app.command("run")(run)``.) Shared
helpers are in ``gatekeeper.cli.common``: the ``--config`` option, exit codes, ``fail`` and ``cli_errors``.

Help texts (a command's docstring, its ``epilog``) are reflowed to the terminal (``reflow``): write prose as
paragraphs at any line width, separated by a blank line; indent a line (an example, a table) to keep it as written.
"""

from __future__ import annotations

import inspect
import os
import sys

import typer
import typer.core


def _flags_take_no_placeholder() -> None:
    """A flag takes no value, so ``--help`` shows no value placeholder after it. Typer's rich help writes the type
    (``--dry-run <bool>``, ``--help -h <bool>``) where its plain help, and click's, write nothing."""
    option = getattr(typer.core, "TyperOption", None)
    shown = getattr(option, "display_type_rich", None)
    if option is None or shown is None or getattr(shown, "_gk_flags", False):
        return

    def display_type_rich(self: typer.core.TyperOption, ctx: typer.Context) -> str | None:
        if self.is_flag or self.count:
            return None
        return shown(self, ctx)  # type: ignore[no-any-return]

    display_type_rich._gk_flags = True  # type: ignore[attr-defined]
    option.display_type_rich = display_type_rich


_flags_take_no_placeholder()

app = typer.Typer(
    name="gatekeeper",
    help=(
        "The rogerwilco gatekeeper: enforces the RW1 handoff protocol between AI agents on Kafka.\n\n"
        "Every command but keys, rw and version reads the configuration: --config FILE (or GK_CONFIG), with GK_ "
        "environment variables over the file (GK_REDIS__URL=redis://...). Exit status: 0 ok, 1 a finding, 2 usage "
        "error, 3 a service is unavailable (or Redis lost its data)."
    ),
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def reflow(text: str) -> str:
    """A help text as the terminal should wrap it: the lines of a prose paragraph (lines starting at the margin)
    joined into one, which the help's console wraps to the terminal's width; an indented line (an example, a
    preformatted block) and a blank line kept as they are. Rich's help keeps every newline of a text, so prose
    hard-wrapped in the source at 120 columns came out ragged in a narrower terminal."""
    out: list[str] = []
    prose = False  # the last line out is a prose line the next one continues
    for line in text.split("\n"):
        line = line.rstrip()
        if line and not line[0].isspace():
            if prose:
                out[-1] += " " + line
            else:
                out.append(line)
            prose = True
        else:
            out.append(line)
            prose = False
    return "\n".join(out)


def _reflow_help(typer_app: typer.Typer) -> None:
    """Reflow every command's help (its docstring, as typer reads it) and epilog, in every group."""
    for info in typer_app.registered_commands:
        if info.epilog:
            info.epilog = reflow(info.epilog)
        doc = inspect.getdoc(info.callback) if info.help is None else inspect.cleandoc(info.help)
        if doc:
            info.help = reflow(doc)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _reflow_help(group.typer_instance)


def main() -> None:
    """The console script. An unexpected error is one line on stderr (``GK_DEBUG=1`` shows the traceback)."""
    try:
        app()
    except Exception as exc:  # every known error is mapped by the commands; this is a bug, reported briefly
        if os.environ.get("GK_DEBUG"):
            raise
        print(f"gatekeeper: internal error: {type(exc).__name__}: {exc} (GK_DEBUG=1 for details)", file=sys.stderr)
        sys.exit(70)


# ---------------------------------------------------------------- commands: one import line each (see above)
from gatekeeper.cli import check as _check  # noqa: E402, F401
from gatekeeper.cli import demo as _demo  # noqa: E402, F401
from gatekeeper.cli import handoffs as _handoffs  # noqa: E402, F401
from gatekeeper.cli import info as _info  # noqa: E402, F401
from gatekeeper.cli import keys as _keys  # noqa: E402, F401
from gatekeeper.cli import records as _records  # noqa: E402, F401
from gatekeeper.cli import redis as _redis  # noqa: E402, F401
from gatekeeper.cli import replay as _replay  # noqa: E402, F401
from gatekeeper.cli import run as _run  # noqa: E402, F401
from gatekeeper.cli import serve as _serve  # noqa: E402, F401
from gatekeeper.cli import status as _status  # noqa: E402, F401
from gatekeeper.cli import topics as _topics  # noqa: E402, F401

_reflow_help(app)  # every command is registered now
