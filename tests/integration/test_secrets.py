"""Secrets never in logs, metrics or error messages, even at ``log_level: DEBUG`` with the libraries' loggers at
DEBUG too: a Redis password (a redis-server of the test's own with ``requirepass``, the password in the settings and
in the URL), and a Kafka SASL password (against the plaintext broker the SASL handshake fails: its error path)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import generate_latest

from gatekeeper.consumers.loop import Gatekeeper
from gatekeeper.errors import Unavailable
from gatekeeper.logs import configure_logging
from gatekeeper.redis_store import RedisStore
from tests.integration._own_redis import OwnRedis
from tests.integration._pipeline import Pipeline, TopicFactory, make_route, settings_for
from tests.policy.world import HO, RB, RECORD

REDIS_SECRET = "r3dis-Pw-7c1e0d"
KAFKA_SECRET = "k4fka-Pw-93ab2f"
WRONG_SECRET = "wr0ng-Pw-55d0aa"


@contextlib.contextmanager
def debug_logs() -> Iterator[io.StringIO]:
    """Every log line of the gatekeeper, rwcore, aiokafka and redis-py at DEBUG, as the handler writes them."""
    out = io.StringIO()
    libs = {name: logging.getLogger(name).level for name in ("aiokafka", "redis", "gatekeeper", "rwcore")}
    root = logging.getLogger().level
    handler = configure_logging("json", "DEBUG", out)
    for name in libs:
        logging.getLogger(name).setLevel(logging.DEBUG)
    try:
        yield out
    finally:
        logging.getLogger().removeHandler(handler)
        logging.getLogger().setLevel(root)
        for name, level in libs.items():
            logging.getLogger(name).setLevel(level)


def assert_no_secret(where: str, text: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in text, f"{secret!r} in {where}"


async def test_a_redis_password_is_in_no_log_line_metric_or_error(
    topic_factory: TopicFactory, kafka_bootstrap: str
) -> None:
    with OwnRedis(password=REDIS_SECRET) as redis_server, debug_logs() as out:
        route = await make_route(topic_factory)
        async with Pipeline.create(
            topic_factory,
            kafka_bootstrap,
            f"redis://127.0.0.1:{redis_server.port}/0",
            [route],
            redis={"password": REDIS_SECRET},
            log_level="DEBUG",
        ) as p:
            gk = p.gatekeeper
            await p.store.put_record(RECORD)
            await p.send("c1", HO, RB)
            await p.collect(lambda g: g.count("c1") == 2)
            redis_server.restart()  # connection errors, then the data loss: the error paths' messages
            await p.send("c2", HO)
            for _ in range(200):
                if gk.readiness()[1].get("reason") == "redis lost its data":
                    break
                await asyncio.sleep(0.05)
            ready, detail = gk.readiness()
            assert not ready and detail["reason"] == "redis lost its data"
            assert_no_secret("/readyz", json.dumps(detail), REDIS_SECRET)
            assert_no_secret("/metrics", generate_latest(gk.metrics.registry).decode(), REDIS_SECRET)
            assert_no_secret("the settings' repr", repr(p.settings) + str(p.settings.model_dump()), REDIS_SECRET)

        # wrong passwords, in the settings and in the URL: the errors name the server, never the password
        for url, kw in (
            (f"redis://127.0.0.1:{redis_server.port}/0", {"password": WRONG_SECRET}),
            (f"redis://:{WRONG_SECRET}@127.0.0.1:{redis_server.port}/0", {}),
        ):
            settings = settings_for(kafka_bootstrap, url, [route], redis=kw, log_level="DEBUG")
            store = RedisStore(settings.redis)
            gk = Gatekeeper(settings, store=store, http=False, startup_timeout=1.0)
            with pytest.raises(Unavailable) as raised:
                await gk.run()
            await store.close()
            assert "redis is unavailable" in str(raised.value)
            assert_no_secret("the startup error", str(raised.value) + repr(raised.value), WRONG_SECRET, REDIS_SECRET)
            assert_no_secret("/readyz", json.dumps(gk.readiness()[1]), WRONG_SECRET)
    lines = out.getvalue()
    records = [json.loads(line) for line in lines.splitlines()]
    assert any(r["level"] == "debug" for r in records) and "redis lost its data" in lines  # captured, at DEBUG
    assert any(r["logger"].startswith("aiokafka") for r in records)
    assert_no_secret("the logs", lines, REDIS_SECRET, WRONG_SECRET)


async def test_a_sasl_password_is_in_no_log_line_or_error(topic_factory: TopicFactory, kafka_bootstrap: str) -> None:
    with OwnRedis() as redis_server, debug_logs() as out:
        route = await make_route(topic_factory)
        security: dict[str, Any] = {
            "protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_username": "gatekeeper",
            "sasl_password": KAFKA_SECRET,
        }
        settings = settings_for(kafka_bootstrap, redis_server.url, [route], kafka={"security": security})
        store = RedisStore(settings.redis)
        gk = Gatekeeper(settings, store=store, http=False, startup_timeout=3.0)
        with pytest.raises(Unavailable) as raised:
            await gk.run()
        await store.close()
        assert "kafka" in str(raised.value)
        assert_no_secret("the startup error", str(raised.value) + repr(raised.value), KAFKA_SECRET)
        assert_no_secret("/readyz", json.dumps(gk.readiness()[1]), KAFKA_SECRET)
        assert_no_secret("/metrics", generate_latest(gk.metrics.registry).decode(), KAFKA_SECRET)
        assert_no_secret("the settings' repr", repr(settings) + str(settings.model_dump()), KAFKA_SECRET)
    lines = out.getvalue()
    records = [json.loads(line) for line in lines.splitlines()]
    assert "kafka unavailable" in lines and any(r["logger"].startswith("aiokafka") for r in records)
    assert_no_secret("the logs", lines, KAFKA_SECRET)
