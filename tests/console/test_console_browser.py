"""The console in a real browser (Debian's headless chromium, driven through its chromium-driver by Selenium) against
a gatekeeper daemon on real Kafka and Redis, the console served by the real HTTP server beside it as ``gatekeeper
run`` serves it. The browser can reach nothing but 127.0.0.1 (its host resolver maps every other name to nothing),
and every page is checked to load only what this server serves, with no error in the browser's log (a content
security policy violation would be one). Screenshots of each page go to ``.local/test-output/console/``."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from aiokafka import AIOKafkaConsumer
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

from gatekeeper.api.auth import hash_token
from gatekeeper.config import ApiToken, HttpSettings, Settings
from gatekeeper.http import HttpServer
from tests.integration._pipeline import Pipeline, TopicFactory
from tests.policy.world import RECORD
from tests.seed import HO, RB

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / ".local" / "test-output" / "console"
DOCS = ROOT / "docs" / "console.md"
LOOKALIKE = "40-12-88/61102983"
TOKENS = {"oncall": "tok-oncall-operator-0123456789", "scheduler": "tok-scheduler-reader-0123456789"}


def console_settings(settings: Settings) -> Settings:
    tokens = [
        ApiToken(name="payments-oncall", sha256=hash_token(TOKENS["oncall"]), agents=["*"], scopes=["operator"]),
        ApiToken(name="scheduler-svc", sha256=hash_token(TOKENS["scheduler"]), agents=["scheduler"]),
    ]
    http = HttpSettings(host="127.0.0.1", port=0, rate_limit=0, tokens=tokens)
    return settings.model_copy(update={"http": http})


@asynccontextmanager
async def console_server(p: Pipeline) -> AsyncIterator[HttpServer]:
    """The HTTP server beside the daemon, fed the daemon's metrics text as ``gatekeeper run``'s HTTP process is."""
    from prometheus_client import generate_latest

    settings = console_settings(p.settings)
    server = HttpServer(
        "127.0.0.1",
        0,
        p.gatekeeper.metrics,
        p.gatekeeper.readiness,
        settings=settings,
        worker_metrics=lambda: generate_latest(p.gatekeeper.metrics.registry),
    )
    await server.start()
    try:
        yield server
    finally:
        await server.close()


def _paths() -> tuple[str, str]:
    proc = subprocess.run([str(ROOT / "deploy/local/browser.sh"), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, f"no browser for the console's tests (make browser installs it): {proc.stderr}"
    chromium, driver = proc.stdout.split()
    return chromium, driver


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    chromium, driver = _paths()
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in CI
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",  # no other origin is reachable
        "--no-proxy-server",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    chrome = webdriver.Chrome(options=opts, service=Service(executable_path=driver))
    chrome.set_page_load_timeout(30)
    try:
        yield chrome
    finally:
        chrome.quit()


def visit(browser: webdriver.Chrome, url: str, shot: str) -> str:
    """Open ``url``, check the page loaded only this server's resources and logged no error, save a screenshot;
    returns the page's visible text."""
    browser.get(url)
    return settle(browser, shot)


def settle(browser: webdriver.Chrome, shot: str) -> str:
    origin = browser.execute_script("return location.origin")
    loaded = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert all(u.startswith(origin + "/") for u in loaded), loaded
    assert "/console/console.css" in " ".join(loaded)  # the style sheet is this server's, and it loaded
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors
    SHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SHOTS / f"{shot}.png"))
    return str(browser.find_element(By.TAG_NAME, "body").text)


def sign_in(browser: webdriver.Chrome, base: str, token: str) -> None:
    browser.get(f"{base}/console/sign-in")
    browser.find_element(By.ID, "token").send_keys(token)
    browser.find_element(By.ID, "sign-in").click()
    # the click returns before the form's answer (a redirect to the Now page) has loaded: wait for it
    WebDriverWait(browser, 15).until(lambda b: b.current_url.endswith("/console") and b.find_elements(By.ID, "who"))


def answered(browser: webdriver.Chrome) -> None:
    """Wait for the replay form's answer (the click returns before it has loaded)."""
    WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.ID, "summary") or b.find_elements(By.ID, "error"))


async def audits(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None)
    await consumer.start()
    try:
        got = await consumer.getmany(timeout_ms=3000)
        return [
            json.loads(r.value)
            for records in got.values()
            for r in records
            if dict(r.headers).get("gk.audit") == b"console"
        ]
    finally:
        await consumer.stop()


async def test_the_console_shows_a_refused_readback_and_replays_a_held_handoff(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, browser: webdriver.Chrome
) -> None:
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p, console_server(p) as server:
        route = p.route()
        base = server.url
        r = quote(route.input)
        await p.store.put_record(RECORD)
        await p.send("tool", HO, RB.replace("40-12-88/61102938", LOOKALIKE))  # a payment tool resolved a lookalike
        held = HO.replace(RECORD.item, "inv:MD-2026-058").replace("scheduler-1", "scheduler-7")
        await p.send("late", held)  # its approval has not landed
        await p.collect(lambda g: len(g.dead) >= 2 and len(g.output) >= 1)

        # Now: the chart and the reasons, read-only
        browser.delete_all_cookies()
        text = await asyncio.to_thread(visit, browser, f"{base}/console", "now")
        assert "Ready" in text and route.input in text and "read-only" in text
        assert browser.find_element(By.ID, "open-1").text == "Open handoffs: 1"  # the lookalike's: its RB refused
        assert browser.find_element(By.CSS_SELECTOR, "svg.chart")

        # the refused readback in the timeline, with its tier-5 problem, the account masked
        url = f"{base}/console/conversation?route={r}&q=tool"
        text = await asyncio.to_thread(visit, browser, url, "conversation-lookalike")
        rb = browser.find_element(By.ID, "line-payer-1").text
        assert "dead-letter" in rb and "check-rb" in rb and "exec-mismatch" in rb and "execution" in rb
        assert "****2983" in rb and LOOKALIKE not in text and "61102938" not in text
        assert "HO scheduler-1" in browser.find_element(By.ID, "timeline").text

        # a reader without the operator scope sees the letters but cannot replay
        await asyncio.to_thread(sign_in, browser, base, TOKENS["scheduler"])
        text = await asyncio.to_thread(visit, browser, f"{base}/console/dead-letters?route={r}", "letters-reader")
        assert "scheduler-svc" in text and "no-record" in text
        assert browser.find_elements(By.ID, "replay") == [] and browser.find_element(By.ID, "read-only")
        reader_cookie = browser.get_cookie("gk_console")
        assert reader_cookie is not None and reader_cookie["httpOnly"] and reader_cookie["sameSite"] == "Strict"

        # the approval lands; the operator dry-runs, then replays the held handoff from the page
        await p.store.put_record(
            RECORD.__class__("inv:MD-2026-058", "PAY", {**RECORD.values, "item": "inv:MD-2026-058"})
        )
        await asyncio.to_thread(sign_in, browser, base, TOKENS["oncall"])
        await asyncio.to_thread(visit, browser, f"{base}/console/dead-letters?route={r}&conversation=late", "letters")
        (row,) = browser.find_elements(By.CSS_SELECTOR, "#letters input[name=letter]")
        row.click()
        browser.find_element(By.ID, "dry-run").click()
        await asyncio.to_thread(answered, browser)
        text = await asyncio.to_thread(settle, browser, "dry-run")
        assert "Nothing was changed" in text and "forwarded" in browser.find_element(By.ID, "replayed").text
        assert (await p.collector.settle(0.5)).of("output", "late") == []  # a dry run produced nothing

        await asyncio.to_thread(visit, browser, f"{base}/console/dead-letters?route={r}&conversation=late", "letters")
        browser.find_element(By.CSS_SELECTOR, "#letters input[name=letter]").click()
        browser.find_element(By.ID, "replay").click()
        await asyncio.to_thread(answered, browser)
        text = await asyncio.to_thread(settle, browser, "replayed")
        assert "Replayed." in text and "forwarded" in browser.find_element(By.ID, "replayed").text
        got = await p.collect(lambda g: len(g.of("output", "late")) >= 1)
        (fwd,) = got.of("output", "late")
        assert fwd.h("gk.replayed.from.topic") == route.dead_letter

        text = await asyncio.to_thread(
            visit, browser, f"{base}/console/conversation?route={r}&q=late", "conversation-replayed"
        )
        assert "forward" in browser.find_element(By.ID, "line-scheduler-7").text

        # every act is audited on the alerts topic: who, what, when, which letters
        found = await audits(kafka_bootstrap, route.alerts)
        assert [(a["action"], a["who"], a["letters"]) for a in found] == [
            (
                "replay-dry-run",
                "payments-oncall",
                [f"{fwd.h('gk.replayed.from.partition')}:{fwd.h('gk.replayed.from.offset')}"],
            ),
            (
                "replay",
                "payments-oncall",
                [f"{fwd.h('gk.replayed.from.partition')}:{fwd.h('gk.replayed.from.offset')}"],
            ),
        ]
        assert all(a["at"].endswith("Z") and a["result"]["read"] >= 1 for a in found)
        # the record is the one docs/console.md shows: the same keys, each value of the same type
        shown = json.loads(re.search(r"## Audit records.*?```json\n(.*?)```", DOCS.read_text(), re.S).group(1))  # type: ignore[union-attr]
        for a in found:
            assert {k: type(v) for k, v in a.items()} == {k: type(v) for k, v in shown.items()}
            assert {k: type(v) for k, v in a["result"].items()} == {k: type(v) for k, v in shown["result"].items()}


XSS = "<script>document.title='owned'</script><img src=x onerror=\"document.title='owned'\">"


async def test_what_an_agent_wrote_is_shown_as_text_never_run(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, browser: webdriver.Chrome
) -> None:
    """An agent with write access to the input puts markup in a line (its tail, its conversation id): the console
    shows it as text on every page that shows the line; no script runs and no element is made of it."""
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p, console_server(p) as server:
        route = p.route()
        conv = "c<b>x</b>"
        await p.send(conv, HO.replace(RECORD.item, "inv:NO-RECORD") + " // " + XSS)  # no approval: dead-lettered
        await p.collect(lambda g: len(g.dead) >= 1)
        r = quote(route.input)
        for url, shot in (
            (f"{server.url}/console/dead-letters?route={r}", "markup-letters"),
            (f"{server.url}/console/conversation?route={r}&q={quote(conv)}", "markup-conversation"),
        ):
            text = await asyncio.to_thread(visit, browser, url, shot)
            assert browser.title != "owned" and browser.find_elements(By.CSS_SELECTOR, "main img, main b") == []
            assert "<script>document.title='owned'</script>" in text or conv in text


async def test_a_replay_needs_the_operator_scope_this_origin_and_the_csrf_token(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str
) -> None:
    """The form's guards, attacked directly over HTTP: a reader's token (no operator scope), a cross-site POST with
    the operator's cookie, a POST without the CSRF token, a sign-in from another site. None replays anything."""
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url) as p, console_server(p) as server:
        route = p.route()
        await p.send("late", HO)
        got = await p.collect(lambda g: len(g.dead) >= 1)
        (dl,) = got.dead
        await p.store.put_record(RECORD)
        from gatekeeper.console.access import csrf_token

        origin = server.url
        form = {"route": route.input, "action": "replay", "letter": f"{dl.partition}:{dl.offset}"}
        async with httpx.AsyncClient(base_url=server.url) as client:
            reader = {"gk_console": TOKENS["scheduler"]}
            operator = {"gk_console": TOKENS["oncall"]}
            tries = [
                (reader, {"origin": origin}, csrf_token(TOKENS["scheduler"]), 403, "operator scope"),
                (operator, {"origin": "http://evil.example"}, csrf_token(TOKENS["oncall"]), 403, "origin or CSRF"),
                (operator, {}, csrf_token(TOKENS["oncall"]), 403, "origin or CSRF"),
                (operator, {"origin": origin}, "", 403, "origin or CSRF"),
                (operator, {"origin": origin}, csrf_token(TOKENS["scheduler"]), 403, "origin or CSRF"),
                ({}, {"origin": origin}, "", 403, "origin or CSRF"),
            ]
            for cookies, headers, csrf, status, words in tries:
                client.cookies.clear()
                client.cookies.update(cookies)
                res = await client.post("/console/dead-letters/replay", data={**form, "csrf": csrf}, headers=headers)
                assert res.status_code == status and words in res.text, (cookies, headers, res.status_code)
                assert "default-src 'none'" in res.headers["content-security-policy"]
            # a sign-in form posted from another site sets no cookie
            client.cookies.clear()
            res = await client.post(
                "/console/sign-in",
                data={"token": TOKENS["oncall"], "csrf": "x"},
                headers={"origin": "http://evil.example"},
            )
            assert res.status_code == 401 and "gk_console" not in res.cookies
        assert (await p.collector.settle(0.5)).of("output", "late") == []  # nothing was replayed
