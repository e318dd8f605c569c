"""``gatekeeper run``: the daemon, until SIGTERM or SIGINT.

Prints where ``/metrics`` is, then runs ``Gatekeeper(settings).run()``. On SIGTERM/SIGINT it stops in two stages
(intake stops, the in-flight batch drains for up to ``grace_seconds``, then is cancelled; the acknowledged offsets
are committed before the consumer stops) and exits 0. A second signal skips the grace period.

Startup errors are one line on stderr: a bad configuration exits 2; Kafka or Redis still unreachable after
``--startup-timeout`` seconds of retrying (with backoff) exits 3; a fatal error while running (a bug) exits 1.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Annotated

import typer

from gatekeeper.cli import app
from gatekeeper.cli.common import EXIT_FINDING, EXIT_UNAVAILABLE, EXIT_USAGE, ConfigOption, fail, settings_from
from gatekeeper.config import ConfigError
from gatekeeper.logs import configure_logging

EPILOG = """\
[bold]Examples[/bold]

  [cyan]gatekeeper run --config config/gatekeeper.example.yaml[/cyan]

  [cyan]GK_KAFKA__BOOTSTRAP_SERVERS=kafka:9092 GK_REDIS__URL=redis://redis:6379/0 gatekeeper run -c gk.yaml[/cyan]

Stop it with SIGTERM or Ctrl-C: intake stops, the batch in flight is finished (up to grace_seconds), its offsets are
committed, and it exits 0.
"""


#: The allocations between two collections of the youngest generation (CPython's default is 700).
GC_YOUNG_THRESHOLD = 20_000


def tune_gc() -> None:
    """Tune the cyclic garbage collector for the daemon's process, once its modules are imported.

    Measured on the catch-up of ``bench/e2e.py`` (100,000 lines): with CPython's defaults the process ran a full
    collection about every 1.5 s, each 70-120 ms with the loop stopped (the p99 latency), for about 20% of its CPU.
    Most of what a full collection walks is what the imports made and what lives until the process ends, and most
    of what a young collection promotes is a batch's records, alive a few milliseconds longer than 700 allocations.
    So the objects made so far are frozen (``gc.freeze``: never scanned again) and the youngest generation is
    collected every 20,000 allocations instead: 180-185 ms of CPU per 1,000 lines instead of 222-239, full
    collections of a few milliseconds. What the HTTP server's startup makes is frozen too, once it listens (about
    77,000 more objects, which every full collection walked otherwise). Only ``gatekeeper run`` does this: it
    changes the whole process (its HTTP process freezes its own: ``gatekeeper.http.freeze_startup_objects``)."""
    from gatekeeper.http import freeze_startup_objects

    freeze_startup_objects()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, oldest)


@app.command("run", epilog=EPILOG)
def run(
    config: ConfigOption = None,
    startup_timeout: Annotated[
        float,
        typer.Option(
            "--startup-timeout",
            min=0,
            metavar="SECONDS",
            help="How long to retry Kafka and Redis at startup before giving up (exit 3).",
        ),
    ] = 60.0,
) -> None:
    """Run the daemon: check every line on the configured routes, forward or dead-letter it, until stopped."""
    settings = settings_from(config)
    configure_logging(settings.log_format, settings.log_level)
    from gatekeeper.consumers.loop import FatalError, Gatekeeper, Unavailable

    def listening(url: str) -> None:
        typer.echo(f"gatekeeper: metrics on {url}/metrics (health: {url}/healthz, readiness: {url}/readyz)", err=True)
        gc.freeze()  # what the HTTP server's startup made (its app, its models) lives as long as the process too

    try:
        gk = Gatekeeper(settings, install_signals=True, startup_timeout=startup_timeout, on_listening=listening)
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)
    if not settings.records.require_signed:
        logging.getLogger("gatekeeper").warning(
            "records.require_signed is off: unsigned approved records are honoured, so anyone who can write them "
            "into Redis can approve an act (a signed record is still verified); turn it on in production "
            "(docs/records.md: Signed records)"
        )
    tune_gc()
    try:
        asyncio.run(gk.run())
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)
    except Unavailable as exc:
        fail(f"{exc} (gave up after {startup_timeout:g}s)", EXIT_UNAVAILABLE)
    except FatalError as exc:
        fail(str(exc), EXIT_FINDING)
    except OSError as exc:  # the HTTP port cannot be bound
        fail(f"cannot listen on {settings.http.host}:{settings.http.port}: {exc.strerror or exc}", EXIT_USAGE)
    except KeyboardInterrupt:  # a signal before the handlers were installed
        raise typer.Exit(130) from None
