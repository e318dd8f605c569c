"""What every command shares: the ``--config`` option, exit codes, and errors as one clear line on stderr.

Exit codes (the same for every command)::

    0  done; an empty list is an answer, not an error (``handoffs list``: "no open handoffs on route R" on stdout,
       ``[]`` with --json); for ``check``: every line forwarded
    1  done, with a finding: a line dead-lettered or alerted (``check``), a line still failing (``replay``), a record
       refused (``records load``), a configured topic missing (``topics describe``, ``status``), the one thing asked
       for not there (``records get ITEM``, ``handoffs show CONV ID``)
    2  usage: a bad option, a missing or malformed file, a bad configuration, an unknown profile or route
    3  a service is unavailable: Kafka or Redis cannot be reached or answered with an error (retry later), or
       Redis lost its data (``records load``, ``records delete``, ``replay`` refuse, ``status`` says the gatekeepers
       decide nothing: until ``gatekeeper redis accept-loss``)

Results go to stdout. Errors are printed as ``gatekeeper: error: <what>`` on stderr, never as a traceback:
``cli_errors()`` is the one place errors become a line and an exit code: the gatekeeper's own
(``gatekeeper.errors``: each class carries its exit code, ``Unavailable`` 3, ``ConfigError`` and ``UsageError`` 2),
rwcore's FormError (2) and redis-py's errors (3). A lookup that finds nothing says so as ``gatekeeper: <what>`` on
stderr (``not_found``), exit 1.

An unreachable Kafka or Redis at the built-in default address (127.0.0.1:9092, redis://127.0.0.1:6379/0) is almost
always a shell without the local stack's addresses: the error line ends with a hint saying how to start the stack and
load them (``local_stack_hint``), still one line.

Short options mean one thing in every command: ``-c`` --config, ``-r`` --route, ``-p`` --profile, ``-a`` --ask,
``-f`` --format, ``-y`` --yes, ``-h`` --help. Every other option is long only.

Sensitive values (acct, prev, addr, and those a profile lists) are masked in what the commands print, as in the
daemon's headers and logs (``****2938``); the commands that print records or lines take ``--unmasked``.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from redis import exceptions as redis_exc

from gatekeeper.config import CONFIG_ENV, KafkaSettings, RedisSettings, Settings, load_settings
from gatekeeper.errors import GatekeeperError
from rwcore import FormError, Profile, get_profile

EXIT_OK = 0
EXIT_FINDING = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3

T = TypeVar("T")

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        envvar=CONFIG_ENV,
        show_envvar=True,
        metavar="FILE",
        help="The YAML configuration (see config/gatekeeper.example.yaml). GK_ variables override it.",
    ),
]


def fail(message: str, code: int = EXIT_FINDING) -> NoReturn:
    """Print ``message`` as an error on stderr and exit with ``code``. A service unavailable (exit 3) at the
    built-in default address gets the local stack's hint (``local_stack_hint``)."""
    hint = local_stack_hint(message) if code == EXIT_UNAVAILABLE else None
    typer.echo(f"gatekeeper: error: {message}" + (f" (hint: {hint})" if hint else ""), err=True)
    raise typer.Exit(code)


def local_stack_hint(message: str) -> str | None:
    """What to do when the Kafka or Redis that could not be reached is at the built-in default address (the
    configuration's defaults, also written in config/gatekeeper.example.yaml): the local stack (``make services``)
    listens on free ports written to its stack.env, so a shell that did not load it asks the default and fails.
    None for any other address, and for Redis errors that are not about reaching it (a data loss, a refusal)."""
    kafka = str(KafkaSettings.model_fields["bootstrap_servers"].default)
    redis = str(RedisSettings.model_fields["url"].default)
    if re.search(rf"\bkafka at {re.escape(kafka)}(?=[ :])", message):
        address, variable = kafka, "GK_KAFKA__BOOTSTRAP_SERVERS"
    elif f"redis {redis}:" in message and re.search(r"ConnectionError|TimeoutError|did not answer", message):
        address, variable = redis, "GK_REDIS__URL"
    else:
        return None
    return (
        f"{address} is the built-in default; is the local stack running? `make services` starts it, then "
        f"`set -a; . .local/stack/stack.env; set +a` gives this shell its addresses; or set {variable}"
    )


def not_found(message: str) -> NoReturn:
    """The one thing a command was asked for is not there (``records get ITEM``, ``handoffs show CONV ID``): a
    finding, exit 1, said on stderr as what it is, not as an error."""
    warn(message)
    raise typer.Exit(EXIT_FINDING)


def warn(message: str) -> None:
    typer.echo(f"gatekeeper: {message}", err=True)


@contextmanager
def cli_errors() -> Iterator[None]:
    """Turn the errors a command can meet into one line on stderr and an exit code."""
    try:
        yield
    except (typer.Exit, typer.Abort):
        raise
    except GatekeeperError as exc:  # the gatekeeper's own tree (gatekeeper.errors): each class has its exit code
        fail(str(exc), exc.exit_code)
    except FormError as exc:
        fail(str(exc), EXIT_USAGE)
    except redis_exc.RedisError as exc:
        fail(f"redis: {type(exc).__name__}: {exc}", EXIT_UNAVAILABLE)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine, with its errors mapped (see ``cli_errors``)."""
    with cli_errors():
        return asyncio.run(coro)


def settings_from(config: Path | None) -> Settings:
    """The settings of ``--config`` (or ``$GK_CONFIG``, or the defaults), with ``GK_`` overrides."""
    with cli_errors():
        return load_settings(config)


def profile_from(name: str, settings: Settings) -> Profile:
    """A profile by name, searched in the configured profile folders first."""
    try:
        return get_profile(name, extra_dirs=settings.all_profile_dirs())
    except FormError as exc:
        fail(f"--profile: {exc}", EXIT_USAGE)


def read_text(path: Path, what: str) -> str:
    """A file's text, or a usage error naming it."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        fail(f"{what} {path} does not exist", EXIT_USAGE)
    except IsADirectoryError:
        fail(f"{what} {path} is a directory", EXIT_USAGE)
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"{what} {path} cannot be read: {exc}", EXIT_USAGE)


def stdout_is_tty() -> bool:
    return sys.stdout.isatty()
