"""A redis-server of a test's own, on a free loopback port, for tests that restart, pause or protect Redis (never the
shared one): no persistence, as a Redis that loses everything on restart.

    with OwnRedis(password="s3cret") as r:
        r.url                      # redis://:s3cret@127.0.0.1:<port>/0
        r.restart()                # same port, empty (nothing persisted)
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OwnRedis:
    def __init__(self, *, password: str | None = None) -> None:
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server is not installed")
        self.port = _free_port()
        self.password = password
        self.dir = Path(tempfile.mkdtemp(prefix="gk-own-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, socket_timeout=5)

    def start(self) -> None:
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += ["--dir", str(self.dir), "--daemonize", "no", "--loglevel", "warning"]
        if self.password:
            args += ["--requirepass", self.password]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                with self.client() as c:
                    if c.ping():
                        return
            except redis.RedisError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
            time.sleep(0.05)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def restart(self) -> None:
        """Stop and start again on the same port: without persistence, everything is gone."""
        self.stop()
        self.start()

    def __enter__(self) -> OwnRedis:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
