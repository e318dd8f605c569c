"""Whether Redis lost its data: the generation marker's rule, in one place for the daemon and every command that
writes state or produces outcomes.

The marker (``<prefix>:generation``, see ``gatekeeper.redis_store``) is written once, at a gatekeeper's first start
against a Redis, and never expires. A Redis without it is either new (no gatekeeper ran against it yet) or one that
lost its data (restarted without persistence, flushed, failed over to an empty replica). ``worked_before`` tells
them apart: the consumer group has committed an offset on an input partition while Redis keeps no owner epoch of
any of them. A gatekeeper takes an epoch at every assignment and the keys never expire, so a group that committed
without leaving an epoch behind ran against a Redis that had its data: this one lost it. Epochs without a marker
are a Redis of a release before the marker (the daemon writes one then).

- **The daemon** (``consumers.loop``) applies it at startup, with its consumer's committed offsets: a loss, and it
  decides and forwards nothing until an operator runs ``gatekeeper redis accept-loss`` and restarts it.
- **The commands** apply it before they write anything (``require``): ``records load`` and ``records delete``,
  ``replay`` (its dry run too: it reports what would be forwarded, against bindings that are gone) and the gate's
  dry run (``api.gate``). They read the group's committed offsets with an admin client (never joining the group)
  and the input topics of the routes in their configuration, so they reach the daemon's verdict when given the
  daemon's configuration (its ``routes`` and ``kafka.group_id``). While the marker is missing after a loss they
  refuse with the daemon's message and the command that resolves it (``DataLost``: exit 3, as every Redis trouble).
  A first start (no marker, no committed offsets) goes on: ``records load`` before the first daemon start is the
  quick start. They never write the marker: the daemon does, at its start (or ``accept-loss``).

Only when the marker is missing is Kafka asked, so a command against a Redis that has its marker needs Redis alone.
A configuration without routes has no input partitions to look at: the command goes on and says so (``Checked``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gatekeeper.config import Settings
from gatekeeper.store import DataLost

#: What an operator does about a loss (the README's runbook, "Redis lost its data"), said by every refusal.
RESOLVE = (
    "restore Redis from its AOF or a backup if you can; if not, run `gatekeeper redis accept-loss` "
    '(docs/troubleshooting.md: "Redis lost its data"), load only the approvals still to be acted on, restart the '
    "gatekeepers, then replay"
)


class Refused(DataLost):
    """A command refused because Redis lost its data: the daemon's message and what resolves it (``RESOLVE``)."""


def refusal(exc: DataLost, doing: str) -> Refused:
    """A loss met while ``doing`` something (the marker went while a command ran: its store's ``DataLost``), said
    with what resolves it; one already said so is returned as it is."""
    if isinstance(exc, Refused):
        return exc
    return Refused(f"{exc} (while {doing}): {RESOLVE}", exc.expected, exc.found)


def lost_message(prefix: str, group: str) -> str:
    """The daemon's words for a loss caught at a start (and the commands', before what resolves it)."""
    return (
        f"redis lost its data: no generation marker {prefix}:generation and no owner epoch of the input partitions, "
        f"while consumer group {group} has committed offsets (it ran against a Redis that had them)"
    )


async def worked_before(
    partitions: Mapping[str, Sequence[int]],
    epochs_exist: Callable[[str, Collection[int]], Awaitable[bool]],
    committed: Callable[[str, int], Awaitable[bool]],
) -> bool:
    """The rule, for a Redis without a generation marker: True when the group has committed an offset on one of
    ``partitions`` (input topic -> its partitions) while Redis keeps no owner epoch of any of them (a loss); False
    when no offset was committed (a first start) or an epoch is there (a release before the marker).
    ``epochs_exist(topic, partitions)`` asks Redis, ``committed(topic, partition)`` the group."""
    offsets = False
    for topic in sorted(partitions):
        parts = sorted(partitions[topic])
        if await epochs_exist(topic, parts):
            return False
        for partition in parts:
            offsets = offsets or await committed(topic, partition)
    return offsets


class MarkerStore(Protocol):
    """What the check reads of a store (``RedisStore`` has it)."""

    async def generation(self) -> str | None: ...

    async def epochs_exist(self, route: str, partitions: Collection[int]) -> bool: ...

    async def ensure_generation(self, *, create: bool = True, copies: bool = True) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Checked:
    """The check's answer when the command may go on."""

    marker: str | None  # the marker in Redis; None: there is none yet (a first start)
    note: str | None = None  # for the operator: why the check could not look (no route configured)


async def require(settings: Settings, store: MarkerStore, *, pin: bool = False, timeout: float = 10.0) -> Checked:
    """Run before a command writes anything. Raises ``Refused`` (a ``DataLost``: the daemon's message and
    ``RESOLVE``) when the marker is missing and ``worked_before`` says the group ran against a Redis that had its
    data; ``StoreError`` or ``KafkaUnavailable`` when Redis, or (marker missing) Kafka, cannot be asked. Nothing is
    written.

    ``pin``: with a marker, the store remembers it (``ensure_generation(create=False, copies=False)``), so every
    later load, claim, save and ping of it reads the marker in the same round trip and raises ``DataLost`` if it
    goes (a loss while the command runs), as the daemon's do."""
    marker = await store.generation()
    if marker is not None:
        if pin:
            await store.ensure_generation(create=False, copies=False)
        return Checked(marker)
    if not settings.routes:
        return Checked(
            None,
            f"no generation marker at {settings.redis.key_prefix}:generation, and no route in the configuration "
            "to tell a first start from a lost Redis by: give the commands the daemon's configuration",
        )
    partitions, offsets = await _group_facts(settings, timeout)

    async def has_offset(topic: str, partition: int) -> bool:
        return (topic, partition) in offsets

    if await worked_before(partitions, store.epochs_exist, has_offset):
        group = settings.kafka.group_id
        raise Refused(f"{lost_message(settings.redis.key_prefix, group)}. Nothing was changed: {RESOLVE}")
    return Checked(None)


async def _group_facts(settings: Settings, timeout: float) -> tuple[dict[str, list[int]], set[tuple[str, int]]]:
    """The partitions of the routes' input topics (a topic that does not exist has none) and the group's committed
    offsets among them, read by an admin client (describe, list offsets: the group is never joined)."""
    from gatekeeper.admin import KafkaUnavailable, _bounded, _group_offsets, admin_client

    kafka = settings.kafka
    topics = sorted({r.input for r in settings.routes})
    try:
        async with admin_client(kafka, timeout) as admin:
            described: Any = await _bounded(admin.describe_topics(topics), timeout, kafka, "describing topics")
            committed: Any = await _group_offsets(admin, kafka, kafka.group_id, timeout)
    except KafkaUnavailable as exc:
        raise KafkaUnavailable(
            f"no generation marker at {settings.redis.key_prefix}:generation (a first start, or a lost Redis), and "
            f"telling them apart needs consumer group {kafka.group_id}'s offsets: {exc}"
        ) from None
    partitions: dict[str, list[int]] = {}
    for d in described:
        if int(d["error_code"]) == 0:
            partitions[str(d["topic"])] = sorted(int(p["partition"]) for p in d["partitions"])
    offsets = {
        (str(tp.topic), int(tp.partition))
        for tp, meta in committed.items()
        if meta is not None and int(meta.offset) >= 0 and str(tp.topic) in partitions
    }
    return partitions, offsets


__all__ = ["RESOLVE", "Checked", "MarkerStore", "Refused", "lost_message", "refusal", "require", "worked_before"]
