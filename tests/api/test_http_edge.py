"""The HTTP edge on the real server (uvicorn on a loopback port): the server's own thread (liveness sees a starved
worker loop), connection bounds (idle, read, count, keep-alive), the limits per endpoint class, the answer cap, and
the token and rate limit of ``/metrics``."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from gatekeeper.api.auth import hash_token
from gatekeeper.http import HttpServer
from gatekeeper.metrics import Metrics
from tests.api.conftest import settings_with


async def _started(**http: Any) -> HttpServer:
    server = HttpServer("127.0.0.1", 0, Metrics(), lambda: (True, {}), settings=settings_with(**http))
    await server.start()
    return server


@pytest.fixture
async def edge(request: pytest.FixtureRequest) -> AsyncIterator[HttpServer]:
    server = await _started(**getattr(request, "param", {}))
    try:
        yield server
    finally:
        await server.close()


def _connect(server: HttpServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def _closed_within(sock: socket.socket, seconds: float) -> tuple[float, bytes]:
    """Read until the server closes the connection: (seconds it took, what it sent)."""
    t0 = time.monotonic()
    sock.settimeout(seconds)
    got = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return time.monotonic() - t0, got
        got += chunk


# ------------------------------------------------------------------------------------------------ connections


@pytest.mark.parametrize("edge", [{"idle_timeout_seconds": 0.5}], indirect=True)
async def test_a_silent_connection_is_closed_after_the_idle_timeout(edge: HttpServer) -> None:
    sock = _connect(edge)
    with sock:
        took, got = await asyncio.to_thread(_closed_within, sock, 5.0)
    assert got == b""
    assert 0.3 < took < 2.0


@pytest.mark.parametrize("edge", [{"idle_timeout_seconds": 0.5}], indirect=True)
async def test_an_idle_keep_alive_connection_is_closed_after_an_answer(edge: HttpServer) -> None:
    sock = _connect(edge)
    with sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        took, got = await asyncio.to_thread(_closed_within, sock, 5.0)
    assert got.startswith(b"HTTP/1.1 200")
    assert took < 2.0


@pytest.mark.parametrize("edge", [{"read_timeout_seconds": 1.0, "idle_timeout_seconds": 30}], indirect=True)
async def test_headers_trickled_a_byte_at_a_time_get_408_and_the_connection_closes(edge: HttpServer) -> None:
    def trickle() -> tuple[float, bytes]:
        sock = _connect(edge)
        with sock:
            t0 = time.monotonic()
            head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
            try:
                for b in head:  # well inside the idle timeout each, never the whole head
                    sock.sendall(bytes([b]))
                    time.sleep(0.05)
            except OSError:
                pass  # closed by the server while sending
            _, got = _closed_within(sock, 5.0)
            return time.monotonic() - t0, got

    took, got = await asyncio.to_thread(trickle)
    assert got.startswith(b"HTTP/1.1 408")
    assert b'"code": "request-timeout"' in got
    assert took < 4.0


@pytest.mark.parametrize("edge", [{"read_timeout_seconds": 1.0, "idle_timeout_seconds": 30}], indirect=True)
async def test_a_body_announced_and_never_sent_is_cut_at_the_read_timeout(edge: HttpServer) -> None:
    sock = _connect(edge)
    with sock:
        sock.sendall(
            b"POST /v1/validate HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"
        )
        took, got = await asyncio.to_thread(_closed_within, sock, 6.0)
    assert took < 3.0
    assert got == b"" or got.startswith(b"HTTP/1.1 408")


@pytest.mark.parametrize("edge", [{"max_connections": 8, "idle_timeout_seconds": 60}], indirect=True)
async def test_a_flood_of_silent_connections_cannot_lock_out_a_probe(edge: HttpServer) -> None:
    async with httpx.AsyncClient(base_url=edge.url, timeout=5) as prober:
        assert (await prober.get("/healthz")).status_code == 200  # a keep-alive connection that made a request
        socks = [_connect(edge) for _ in range(40)]
        await asyncio.sleep(0.2)
        # the silent ones are closed before it, however much older it is
        assert (await prober.get("/healthz")).status_code == 200
    try:
        async with httpx.AsyncClient(base_url=edge.url, timeout=5) as c:
            for _ in range(3):
                r = await c.get("/healthz")
                assert r.status_code == 200
        await asyncio.sleep(0.2)
        # the server closed the longest-idle ones: at most max_connections of the 40 are still open
        open_ = 0
        for s in socks:
            s.setblocking(False)
            try:
                open_ += 1 if s.recv(1) != b"" else 0
            except BlockingIOError:
                open_ += 1
            except OSError:
                pass
        assert open_ <= 8
    finally:
        for s in socks:
            s.close()


@pytest.mark.parametrize("edge", [{"max_requests_per_connection": 3}], indirect=True)
async def test_a_connection_serves_at_most_max_requests(edge: HttpServer) -> None:
    async with httpx.AsyncClient(base_url=edge.url, timeout=5) as c:
        answers = [await c.get("/healthz") for _ in range(3)]
    assert [r.headers.get("connection") for r in answers] == [None, None, "close"]


# ------------------------------------------------------------------------------------------------ the worker's loop


async def test_the_daemons_port_is_a_process_whose_liveness_sees_a_starved_worker_loop(tmp_path: Any) -> None:
    """``gatekeeper run``'s port (``HttpProcess``): the probes answer from what the worker's loop published, in a
    process of their own; a worker loop that does not run (blocked here by a sleep in it) fails /healthz, and the
    answer does not wait for it. /metrics joins the worker's families and the port's own."""
    from gatekeeper.http_process import HttpProcess

    metrics = Metrics()
    metrics.ready.set(1)
    port = HttpProcess(settings_with(stall_seconds=0.5), metrics)
    await port.start((True, {"partitions": 2}), (True, {}))
    seen: list[tuple[int, dict[str, Any], float]] = []

    def probe_later() -> None:
        time.sleep(0.8)
        t0 = time.monotonic()
        r = httpx.get(f"{port.url}/healthz", timeout=5)
        seen.append((r.status_code, r.json(), time.monotonic() - t0))

    try:
        assert port.alive()
        r = await asyncio.to_thread(httpx.get, f"{port.url}/readyz", timeout=5)
        assert (r.status_code, r.json()) == (200, {"status": "ready", "partitions": 2})
        text = (await asyncio.to_thread(httpx.get, f"{port.url}/metrics", timeout=5)).text
        assert "gatekeeper_ready 1.0" in text  # the worker's
        assert 'gatekeeper_api_requests_total{endpoint="/readyz",status="200"} 1.0' in text  # the port's own
        assert text.count("# TYPE gatekeeper_ready gauge") == 1 and text.count("# TYPE gatekeeper_api_gate") == 1
        prober = threading.Thread(target=probe_later)
        prober.start()
        time.sleep(1.5)  # this loop (the worker's) does not run: nothing is published for 1.5 s
        await asyncio.to_thread(prober.join)
        status, body, took = seen[0]
        assert status == 503
        assert body["reason"] == "the worker's event loop has not run"
        assert took < 0.5  # answered while the worker's loop was blocked
        port.publish((True, {}), (True, {}))
        r = await asyncio.to_thread(httpx.get, f"{port.url}/healthz", timeout=5)
        assert r.status_code == 200
    finally:
        await port.close()
    assert not port.alive()


# ------------------------------------------------------------------------------------------------ limits


@pytest.mark.parametrize("edge", [{"in_flight": {"api": 1}, "read_timeout_seconds": 10}], indirect=True)
async def test_one_request_past_its_class_limit_is_busy_and_the_probes_still_answer(edge: HttpServer) -> None:
    holder = _connect(edge)  # an API request in progress: its body is still arriving
    with holder:
        holder.sendall(b"POST /v1/validate HTTP/1.1\r\nHost: x\r\ncontent-length: 50\r\n\r\n{")
        await asyncio.sleep(0.3)
        async with httpx.AsyncClient(base_url=edge.url, timeout=5) as c:
            busy = await c.post("/v1/validate", json={"line": "RW1 AK x-1 re=y-1"})
            assert busy.status_code == 503
            assert busy.json()["code"] == "busy"
            assert busy.headers["retry-after"] == "1"
            assert (await c.get("/healthz")).status_code == 200
            assert (await c.get("/metrics")).status_code == 200  # another class
    await asyncio.sleep(0.3)
    async with httpx.AsyncClient(base_url=edge.url, timeout=5) as c:
        assert (await c.post("/v1/validate", json={"line": "RW1 AK x-1 re=y-1"})).status_code == 200


@pytest.mark.parametrize("edge", [{"max_answer_bytes": 65_536}], indirect=True)
async def test_an_answer_over_the_cap_is_413_answer_too_large(edge: HttpServer) -> None:
    ho = "RW1 HO s-{i} from=s to=p ask=PAY item=inv-{i} amt=10.00 cur=EUR exp=2026-01-01T00:00Z h=zzzzzz"
    lines = [ho.format(i=i) for i in range(2000)]
    async with httpx.AsyncClient(base_url=edge.url, timeout=30) as c:
        r = await c.post("/v1/check-thread", json={"lines": lines, "detail": True})
        small = await c.post("/v1/validate", json={"line": "RW1 AK x-1 re=y-1"})
    assert r.status_code == 413, r.text[:300]
    assert r.json()["code"] == "answer-too-large"
    assert len(r.content) < 1000
    assert small.status_code == 200


# ------------------------------------------------------------------------------------------------ /metrics


def _token_entry(name: str, token: str, scopes: list[str]) -> dict[str, Any]:
    return {"name": name, "sha256": hash_token(token), "agents": [], "scopes": scopes}


@pytest.mark.parametrize(
    "edge",
    [
        {
            "metrics_auth": True,
            "tokens": [
                _token_entry("prometheus", "scrape-me", ["metrics"]),
                _token_entry("payer", "pay-only", []),
            ],
        }
    ],
    indirect=True,
)
async def test_metrics_needs_a_token_with_the_metrics_scope_when_configured(edge: HttpServer) -> None:
    async with httpx.AsyncClient(base_url=edge.url, timeout=5) as c:
        bare = await c.get("/metrics")
        other = await c.get("/metrics", headers={"authorization": "Bearer pay-only"})
        wrong = await c.get("/metrics", headers={"authorization": "Bearer nope"})
        good = await c.get("/metrics", headers={"authorization": "Bearer scrape-me"})
        probe = await c.get("/healthz")
    assert [bare.status_code, other.status_code, wrong.status_code] == [401, 401, 401]
    assert bare.json()["code"] == "unauthorized"
    assert bare.headers["www-authenticate"] == "Bearer"
    assert good.status_code == 200 and b"gatekeeper_" in good.content
    assert probe.status_code == 200


@pytest.mark.parametrize("edge", [{"rate_limit": 1.0, "rate_burst": 2}], indirect=True)
async def test_metrics_is_rate_limited_and_the_probes_never_are(edge: HttpServer) -> None:
    async with httpx.AsyncClient(base_url=edge.url, timeout=5) as c:
        metrics = [(await c.get("/metrics")).status_code for _ in range(4)]
        probes = [(await c.get("/healthz")).status_code for _ in range(20)]
    assert metrics[:2] == [200, 200]
    assert 429 in metrics[2:]
    assert set(probes) == {200}


async def test_metrics_is_rendered_at_most_once_per_interval_and_speaks_gzip_and_openmetrics(edge: HttpServer) -> None:
    """A flood of scrapes costs one render per METRICS_RENDER_SECONDS; a scrape after it sees what changed."""
    from gatekeeper.api.app import METRICS_RENDER_SECONDS

    async with httpx.AsyncClient(base_url=edge.url, timeout=5) as c:
        first = await c.get("/metrics", headers={"accept-encoding": "identity"})
        edge.metrics.api_requests.labels(endpoint="/probe-of-the-cache", status="200").inc()
        again = await c.get("/metrics", headers={"accept-encoding": "identity"})
        await asyncio.sleep(METRICS_RENDER_SECONDS + 0.05)
        later = await c.get("/metrics", headers={"accept-encoding": "identity"})
        zipped = await c.get("/metrics", headers={"accept-encoding": "gzip"})
        om = await c.get("/metrics", headers={"accept": "application/openmetrics-text; version=1.0.0"})
    assert first.headers["content-type"].startswith("text/plain")
    assert b"/probe-of-the-cache" not in again.content  # rendered within the interval: the same bytes
    assert b"/probe-of-the-cache" in later.content
    assert zipped.headers["content-encoding"] == "gzip" and b"/probe-of-the-cache" in zipped.content
    assert om.headers["content-type"].startswith("application/openmetrics-text") and om.text.endswith("# EOF\n")


async def test_docs_loads_nothing_from_another_site(edge: HttpServer) -> None:
    """/docs works on an air-gapped host: every script, style and icon it names is the gatekeeper's own, served
    here, and its content security policy allows nothing else."""
    import re

    async with httpx.AsyncClient(base_url=edge.url, timeout=5) as c:
        page = await c.get("/docs")
        assert page.status_code == 200
        assert "default-src 'none'" in page.headers["content-security-policy"]
        assert "script-src 'self'" in page.headers["content-security-policy"]
        refs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", page.text)
        refs += re.findall(r"""url:\s*['"]([^'"]+)['"]""", page.text)
        assert refs and all(r.startswith("/") for r in refs), refs
        assert "http://" not in page.text and "https://" not in page.text.replace("https://swagger.io", "")
        for ref in refs:
            r = await c.get(ref)
            assert r.status_code == 200 and r.content, ref
        js = await c.get("/docs/assets/swagger-ui-bundle.js")
        assert b"SwaggerUIBundle" in js.content
        assert (await c.get("/openapi.json")).json()["openapi"].startswith("3.")
