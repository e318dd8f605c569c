"""``gatekeeper serve``: the HTTP API alone (the checks, ``/v1/gate``, MCP, the probes and ``/metrics``), no daemon.

For those who want only the checks: ``gatekeeper serve -c gk.yaml`` serves ``http.host:http.port`` until SIGTERM or
SIGINT. With routes and tokens configured, ``POST /v1/gate`` produces to the routes' input topics and answers with
the outcomes a daemon (``gatekeeper run``, anywhere in the group) produces; without them it answers 401. ``/readyz``
is ready once the server listens (the checks need nothing else), with the gate's state in its detail.

Exit status: 0 stopped by a signal, 2 a bad configuration or an address that cannot be bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from typing import Any

import typer

from gatekeeper.cli import app
from gatekeeper.cli.common import EXIT_USAGE, ConfigOption, fail, settings_from
from gatekeeper.config import ConfigError, Settings
from gatekeeper.logs import configure_logging

EPILOG = """\
[bold]Examples[/bold]

  [cyan]gatekeeper serve -c gk.yaml[/cyan]

  [cyan]curl -s http://127.0.0.1:9108/v1/check-ho -H 'content-type: application/json' -d @request.json[/cyan]

The OpenAPI document is at /openapi.json (rendered at /docs); the MCP tools at /mcp. The API binds to
http.host (127.0.0.1 unless configured): set it to 0.0.0.0 in a container.
"""


async def serve_api(
    settings: Settings,
    stop: asyncio.Event,
    *,
    on_listening: Callable[[str], None] | None = None,
    install_signals: bool = False,
) -> None:
    """Serve the API until ``stop`` is set (or SIGTERM/SIGINT with ``install_signals``). Raises ``OSError`` when
    the address cannot be bound, ``ConfigError`` for a bad tokens file or key."""
    from gatekeeper.api.gate import Gate
    from gatekeeper.approvals import check_key_settings
    from gatekeeper.http import HttpServer, freeze_startup_objects
    from gatekeeper.metrics import Metrics

    check_key_settings(settings)
    metrics = Metrics()
    gate = Gate(settings, metrics) if settings.http.api else None
    metrics.ready.set(0)

    def readiness() -> tuple[bool, dict[str, Any]]:
        detail: dict[str, Any] = {"mode": "api"}
        if gate is not None:
            detail.update(gate.status)
        return True, detail

    server = HttpServer(settings.http.host, settings.http.port, metrics, readiness, settings=settings, gate=gate)
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    if install_signals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
                installed.append(sig)
    try:
        await server.start()
        freeze_startup_objects()
        metrics.ready.set(1)
        if on_listening is not None:
            on_listening(server.url)
        await stop.wait()
    finally:
        metrics.ready.set(0)
        for sig in installed:
            loop.remove_signal_handler(sig)
        await server.close()


@app.command("serve", epilog=EPILOG)
def serve(config: ConfigOption = None) -> None:
    """Serve the HTTP API (the checks, /v1/gate, MCP), the probes and /metrics, without the daemon."""
    settings = settings_from(config)
    configure_logging(settings.log_format, settings.log_level)

    def listening(url: str) -> None:
        typer.echo(f"gatekeeper: API on {url} (OpenAPI: {url}/openapi.json, MCP: {url}/mcp)", err=True)

    async def main() -> None:
        await serve_api(settings, asyncio.Event(), on_listening=listening, install_signals=True)

    try:
        asyncio.run(main())
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)
    except OSError as exc:
        fail(f"cannot listen on {settings.http.host}:{settings.http.port}: {exc.strerror or exc}", EXIT_USAGE)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


__all__ = ["EPILOG", "serve", "serve_api"]
