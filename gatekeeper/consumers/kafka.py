"""A thin factory for the aiokafka clients, with TLS and SASL from ``KafkaSettings.security``.

The one place the gatekeeper's settings become aiokafka's keyword arguments:

- consumer: the configured group, manual commits (``enable_auto_commit=False``), ``auto_offset_reset="earliest"``
  (a new group starts from the beginning: nothing is skipped), ``read_committed`` when transactional;
- producer: idempotent (``enable_idempotence=True``, ``acks="all"``), or transactional under one input partition's
  ``transactional_id`` (exactly-once: one producer per input partition);
- admin: for the topics' ``max.message.bytes`` (an outcome is trimmed before it is sent, not after a refusal).

SASL mechanisms ``PLAIN``, ``SCRAM-SHA-256`` and ``SCRAM-SHA-512`` take ``sasl_username``/``sasl_password``.
``OAUTHBEARER`` needs a token provider, which a configuration file cannot give: it is refused with a clear error.
Secrets leave their ``SecretStr`` only here, into the client's constructor.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.helpers import create_ssl_context

from gatekeeper.config import ConfigError, KafkaSettings

log = logging.getLogger(__name__)

#: Kafka's default ``max.message.bytes`` (and the producer's ``max_request_size``), when a topic's is unknown.
DEFAULT_MAX_MESSAGE_BYTES = 1_048_576


def ssl_context(kafka: KafkaSettings) -> ssl.SSLContext | None:
    sec = kafka.security
    if sec.protocol not in ("SSL", "SASL_SSL"):
        return None
    ctx: ssl.SSLContext = create_ssl_context(
        cafile=sec.ssl_cafile,
        certfile=sec.ssl_certfile,
        keyfile=sec.ssl_keyfile,
        password=sec.ssl_password.get_secret_value() if sec.ssl_password is not None else None,
    )
    ctx.check_hostname = sec.ssl_check_hostname
    return ctx


def client_kwargs(kafka: KafkaSettings) -> dict[str, Any]:
    """The connection arguments every client shares."""
    sec = kafka.security
    kw: dict[str, Any] = {
        "bootstrap_servers": kafka.bootstrap_servers,
        "client_id": kafka.client_id,
        "request_timeout_ms": kafka.request_timeout_ms,
        "security_protocol": sec.protocol,
    }
    ctx = ssl_context(kafka)
    if ctx is not None:
        kw["ssl_context"] = ctx
    if sec.protocol.startswith("SASL"):
        if sec.sasl_mechanism == "OAUTHBEARER":
            raise ConfigError(
                "kafka.security.sasl_mechanism: OAUTHBEARER needs a token provider, which the configuration "
                "cannot give; use PLAIN or SCRAM-SHA-256/512"
            )
        kw["sasl_mechanism"] = sec.sasl_mechanism
        kw["sasl_plain_username"] = sec.sasl_username
        kw["sasl_plain_password"] = sec.sasl_password.get_secret_value() if sec.sasl_password is not None else None
    return kw


class GroupConsumer(AIOKafkaConsumer):  # type: ignore[misc]  # aiokafka is untyped
    """aiokafka's consumer, and a way to leave and rejoin the group on purpose."""

    def rejoin(self) -> None:
        """Rejoin the group: the partitions are revoked, then assigned again (the listener hears both). Written
        here because aiokafka has no public call for it (the Java client's ``enforceRebalance``): this is what its
        coordinator does itself when a heartbeat learns that the group moved on. The worker asks for it when an
        input partition's transactional producer was fenced or broke: it is started again only at an assignment,
        when the group says the partition is this instance's."""
        self._coordinator.request_rejoin()


def make_consumer(
    kafka: KafkaSettings,
    topics: Iterable[str],
    listener: ConsumerRebalanceListener | None = None,
    **overrides: Any,
) -> GroupConsumer:
    """A consumer of ``topics`` in the configured group, committing by hand. ``subscribe`` is done here."""
    kw = client_kwargs(kafka)
    kw.update(
        group_id=kafka.group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed" if kafka.transactional else "read_uncommitted",
        max_poll_records=kafka.max_batch,
        session_timeout_ms=kafka.session_timeout_ms,
        fetch_min_bytes=kafka.fetch_min_bytes,
        fetch_max_wait_ms=kafka.fetch_max_wait_ms,
    )
    if kafka.group_instance_id:
        kw["group_instance_id"] = kafka.group_instance_id
    kw.update(overrides)
    consumer = GroupConsumer(**kw)
    consumer.subscribe(topics=sorted(set(topics)), listener=listener)
    return consumer


def transactional_id(kafka: KafkaSettings, topic: str, partition: int) -> str:
    """The transactional id of an input partition's producer: ``<prefix>-<topic>-<partition>`` (the prefix is
    ``kafka.transactional_id_prefix``, default the group id). Every instance of the group derives the same id for a
    partition: the instance that is assigned it starts its producer under that id, which fences the producer of the
    previous owner (its open transaction aborted, its next request refused), however late that one wakes up."""
    return f"{kafka.transactional_id_prefix or kafka.group_id}-{topic}-{partition}"


def make_producer(
    kafka: KafkaSettings, *, max_batch_size: int | None = None, transactional_id: str | None = None, **overrides: Any
) -> AIOKafkaProducer:
    """An idempotent producer (``acks="all"``); transactional under ``transactional_id`` when one is given."""
    kw = client_kwargs(kafka)
    # no linger: the worker sends a whole batch's outcomes at once and waits for them, so a linger would only add
    # its time to every batch's latency (measured with bench/e2e.py: p50 44 -> 34 ms at 1,500 lines/s)
    kw.update(enable_idempotence=True, acks="all", linger_ms=0)
    if max_batch_size is not None:
        kw["max_batch_size"] = max_batch_size
    if transactional_id is not None:
        kw["transactional_id"] = transactional_id
    kw.update(overrides)
    return AIOKafkaProducer(**kw)


def make_admin(kafka: KafkaSettings) -> AIOKafkaAdminClient:
    kw = client_kwargs(kafka)
    kw["client_id"] = f"{kafka.client_id}-admin"
    return AIOKafkaAdminClient(**kw)


async def topic_limits(kafka: KafkaSettings, topics: Iterable[str]) -> dict[str, int]:
    """Each topic's ``max.message.bytes`` (best effort: a topic the broker does not describe is left out)."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    names = sorted(set(topics))
    admin = make_admin(kafka)
    limits: dict[str, int] = {}
    try:
        await admin.start()
        resources = [ConfigResource(ConfigResourceType.TOPIC, t, configs={"max.message.bytes": None}) for t in names]
        for response in await admin.describe_configs(resources):
            for resource in getattr(response, "resources", ()):
                error_code, _msg, _rtype, name, entries = resource[:5]
                if error_code != 0:
                    continue
                for entry in entries:
                    if entry[0] == "max.message.bytes" and entry[1] is not None:
                        limits[str(name)] = int(entry[1])
    except Exception as exc:  # the limit is an optimisation: a refusal is still handled by trimming
        log.warning("could not read the topics' max.message.bytes", extra={"error": f"{type(exc).__name__}: {exc}"})
    finally:
        try:
            await admin.close()
        except Exception as exc:
            log.debug("closing the admin client: %s", exc)
    return limits


__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "GroupConsumer",
    "client_kwargs",
    "make_admin",
    "make_consumer",
    "make_producer",
    "ssl_context",
    "topic_limits",
    "transactional_id",
]
