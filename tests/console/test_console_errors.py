"""The console when what it reads does not answer: a page says which service did not answer (503), never a stack
trace, and gives the error's own words (addresses, topics) only to a signed-in reader. Every answer carries the
content security policy. A real HTTP server; Kafka and Redis addresses where nothing listens."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import httpx
import pytest

from gatekeeper.api.auth import hash_token
from gatekeeper.config import ApiToken, HttpSettings, KafkaSettings, RedisSettings, Route, Settings
from gatekeeper.http import HttpServer
from gatekeeper.metrics import Metrics


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the socket is: nothing listens there


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    token = ApiToken(name="oncall", sha256=hash_token("tok-oncall-0123456789"), agents=["*"], scopes=["operator"])
    settings = Settings(
        kafka=KafkaSettings(bootstrap_servers=f"127.0.0.1:{_closed_port()}"),
        redis=RedisSettings(url=f"redis://127.0.0.1:{_closed_port()}/0"),
        http=HttpSettings(host="127.0.0.1", port=0, rate_limit=0, tokens=[token], api=False),
        routes=[Route(input="agents.pay", output="o", dead_letter="d", alerts="a", profile="pay")],
    )
    server = HttpServer("127.0.0.1", 0, Metrics(), lambda: (False, {"reason": "kafka unreachable"}), settings=settings)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as c:
            yield c
    finally:
        await server.close()


async def test_a_page_says_what_did_not_answer_and_only_a_signed_in_reader_sees_the_details(
    client: httpx.AsyncClient,
) -> None:
    for path in ("/console", "/console/dead-letters", "/console/conversation?q=c-1"):
        res = await client.get(path)
        assert res.status_code == 503, (path, res.text)
        assert "did not answer" in res.text and "sign in for the details" in res.text and "Traceback" not in res.text
        assert "127.0.0.1" not in res.text.split("<main>", 1)[1]  # no address for an anonymous reader
        assert "default-src 'none'" in res.headers["content-security-policy"]
    client.cookies.set("gk_console", "tok-oncall-0123456789")
    res = await client.get("/console/dead-letters")
    assert res.status_code == 503 and "sign in for the details" not in res.text and "oncall" in res.text


async def test_the_style_sheet_and_the_sign_in_page_are_served_without_any_service(client: httpx.AsyncClient) -> None:
    css = await client.get("/console/console.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    page = await client.get("/console/sign-in")
    assert page.status_code == 200 and 'type="password"' in page.text
    login = page.cookies.get("gk_console_login")
    assert login is not None
    assert "<script" not in page.text
