"""``gatekeeper serve -c gk.yaml``: the API alone, as a process (a small Typer app around the command, as
``gatekeeper.cli`` registers it), stopped by SIGTERM; and ``serve_api`` in the test's own loop."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from gatekeeper.cli.serve import serve_api
from tests.api.conftest import settings_with
from tests.api.test_functions import SEED_ANSWER, SEED_BODY

REPO = Path(__file__).resolve().parents[2]
APP = (
    "import typer; from gatekeeper.cli.serve import serve; app = typer.Typer(); app.callback()(lambda: None); "
    "app.command('serve')(serve); app()"
)


async def test_serve_api_answers_until_stopped() -> None:
    stop = asyncio.Event()
    urls: list[str] = []
    task = asyncio.create_task(serve_api(settings_with(), stop, on_listening=urls.append))
    while not urls:
        assert not task.done(), task
        await asyncio.sleep(0.02)
    async with httpx.AsyncClient(base_url=urls[0]) as c:
        r = await c.post("/check-ho", content=SEED_BODY, headers={"content-type": "application/json"})
        assert r.text == SEED_ANSWER
        r = await c.get("/readyz")
        assert r.json() == {"status": "ready", "mode": "api", "gate": "off"}
        assert (await c.get("/metrics")).text.count("gatekeeper_ready 1.0") == 1
    stop.set()
    await asyncio.wait_for(task, 10)


def _run(config: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GK_")}
    return subprocess.Popen(
        [sys.executable, "-c", APP, "serve", "-c", str(config)],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_the_serve_command_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    config = tmp_path / "gk.yaml"
    config.write_text("http:\n  host: 127.0.0.1\n  port: 0\nlog_format: text\n")
    proc = _run(config)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        deadline = time.monotonic() + 30
        while "API on" not in line:
            assert time.monotonic() < deadline and proc.poll() is None, line
            line = proc.stderr.readline()
        found = re.search(r"API on (http://\S+) ", line)
        assert found, line
        url = found.group(1)
        r = httpx.post(f"{url}/v1/check-ho", json=json.loads(SEED_BODY), timeout=10)
        assert r.text == SEED_ANSWER
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_an_address_in_use_is_a_usage_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        config = tmp_path / "gk.yaml"
        config.write_text(f"http:\n  host: 127.0.0.1\n  port: {port}\n")
        proc = _run(config)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in err
