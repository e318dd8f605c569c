"""The generation marker's rule (``gatekeeper.generation``), shared by the daemon and the commands that write: a
Redis without its marker lost its data when the group committed offsets and no owner epoch is left."""

from __future__ import annotations

from collections.abc import Collection

import pytest

from gatekeeper.config import Settings
from gatekeeper.generation import RESOLVE, lost_message, require, worked_before


class Facts:
    """What Redis and the group hold: the epochs' partitions, the committed partitions."""

    def __init__(self, epochs: Collection[tuple[str, int]] = (), offsets: Collection[tuple[str, int]] = ()) -> None:
        self.epochs = set(epochs)
        self.offsets = set(offsets)
        self.asked: list[str] = []

    async def epochs_exist(self, route: str, partitions: Collection[int]) -> bool:
        self.asked.append(route)
        return any((route, p) in self.epochs for p in partitions)

    async def committed(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self.offsets


PARTS = {"in.a": [0, 1, 2], "in.b": [0]}


@pytest.mark.parametrize(
    ("epochs", "offsets", "lost"),
    [
        (set(), set(), False),  # a first start: the group never committed
        (set(), {("in.a", 2)}, True),  # committed, no epoch left: the Redis it ran against had them
        (set(), {("in.b", 0)}, True),
        ({("in.a", 1)}, {("in.a", 2)}, False),  # epochs without a marker: a release before the marker
        ({("in.b", 0)}, {("in.a", 0)}, False),  # any epoch of any input partition
        (set(), {("other", 0)}, False),  # an offset on a topic that is no input of the routes
    ],
)
async def test_the_rule(epochs: set[tuple[str, int]], offsets: set[tuple[str, int]], lost: bool) -> None:
    facts = Facts(epochs, offsets)
    assert await worked_before(PARTS, facts.epochs_exist, facts.committed) is lost


async def test_no_input_partition_is_a_first_start() -> None:
    facts = Facts(offsets={("in.a", 0)})
    assert await worked_before({}, facts.epochs_exist, facts.committed) is False
    assert await worked_before({"in.a": []}, facts.epochs_exist, facts.committed) is False


def test_the_message_is_the_daemons_and_says_what_resolves_it() -> None:
    text = lost_message("gk", "gatekeeper")
    assert text.startswith("redis lost its data: no generation marker gk:generation")
    assert "consumer group gatekeeper has committed offsets" in text
    assert "`gatekeeper redis accept-loss`" in RESOLVE


class MarkedStore(Facts):
    def __init__(self, marker: str | None) -> None:
        super().__init__()
        self.marker = marker
        self.pinned: list[tuple[bool, bool]] = []

    async def generation(self) -> str | None:
        return self.marker

    async def ensure_generation(self, *, create: bool = True, copies: bool = True) -> str | None:
        self.pinned.append((create, copies))
        return self.marker


async def test_a_marker_is_enough_and_pinned_without_writing() -> None:
    settings = Settings.model_validate({"kafka": {"bootstrap_servers": "127.0.0.1:1"}, "routes": []})
    store = MarkedStore("abc")
    checked = await require(settings, store)
    assert (checked.marker, checked.note, store.pinned) == ("abc", None, [])  # Kafka is never asked
    await require(settings, store, pin=True)
    assert store.pinned == [(False, False)]  # neither the marker nor a cluster's copies are written


async def test_no_marker_and_no_route_goes_on_and_says_why() -> None:
    settings = Settings.model_validate({"kafka": {"bootstrap_servers": "127.0.0.1:1"}, "redis": {"key_prefix": "p"}})
    checked = await require(settings, MarkedStore(None), pin=True)
    assert checked.marker is None and checked.note is not None and "p:generation" in checked.note


async def test_no_marker_with_kafka_unreachable_is_not_taken_for_a_first_start() -> None:
    from gatekeeper.admin import KafkaUnavailable

    route = {"input": "in.a", "output": "o", "dead_letter": "d", "alerts": "a", "profile": "pay"}
    settings = Settings.model_validate({"kafka": {"bootstrap_servers": "127.0.0.1:1"}, "routes": [route]})
    with pytest.raises(KafkaUnavailable, match="a first start, or a lost Redis"):
        await require(settings, MarkedStore(None), timeout=2.0)
