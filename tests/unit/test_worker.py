"""The worker against an in-memory Kafka (``fake_kafka``) and the in-memory store: commit order, retries, trimming
and transactions, with trouble injected where a real broker cannot be made to misbehave on cue. The same paths run
on real Kafka in ``tests/integration`` (test_pipeline, test_no_loss, test_poison)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Collection
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

from gatekeeper.config import Settings
from gatekeeper.consumers.loop import Gatekeeper
from gatekeeper.store import Loaded, MemoryStore, RecordKey, StoreError, Wants
from tests.policy.world import AN, DN, HO, RB, RECORD
from tests.unit.fake_kafka import Cluster, FakeKafka, FakeRecord

ACCT, LOOKALIKE = "40-12-88/61102938", "40-12-88/61102983"
BAD = HO.replace(ACCT, LOOKALIKE)  # refused check-ho: two digits swapped


def _settings(**kafka: Any) -> Settings:
    return Settings.model_validate(
        {
            "kafka": {"batch_timeout_ms": 10, "request_timeout_ms": 1000, "commit_interval_ms": 0, **kafka},
            "routes": [{"input": "in", "output": "out", "dead_letter": "dlq", "alerts": "alerts", "profile": "pay"}],
            "sweeper": {"interval_seconds": 0},
            "grace_seconds": 2,
        }
    )


def _cluster(dlq_limit: int | None = None) -> Cluster:
    c = Cluster()
    c.create("in", 2)
    c.create("out")
    c.create("dlq", max_message_bytes=dlq_limit)
    c.create("alerts")
    return c


@contextlib.asynccontextmanager
async def running(cluster: Cluster, store: MemoryStore | None = None, **kafka: Any) -> AsyncIterator[Gatekeeper]:
    store = store or MemoryStore()
    await store.put_record(RECORD)
    gk = Gatekeeper(_settings(**kafka), store=store, kafka=FakeKafka(cluster), http=False, startup_timeout=5)
    task = asyncio.create_task(gk.run())
    try:
        yield gk
    finally:
        gk.request_stop()
        await asyncio.wait_for(task, 10)


async def until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def kafka_of(gk: Gatekeeper) -> FakeKafka:
    kafka = gk._kafka
    assert isinstance(kafka, FakeKafka)
    return kafka


def origin(r: FakeRecord) -> tuple[int, int]:
    h = dict(r.headers)
    return int(h["gk.original.partition"]), int(h["gk.original.offset"])


def forwarded(cluster: Cluster) -> list[FakeRecord]:
    """The forwarded lines on the output topic (not the gatekeeper's refusal notices beside them)."""
    return [r for r in cluster.records("out") if "gk.notice.reason" not in dict(r.headers)]


def notices(cluster: Cluster) -> list[FakeRecord]:
    """The gatekeeper's refusal notices on the output topic (``gatekeeper.notices``)."""
    return [r for r in cluster.records("out") if "gk.notice.reason" in dict(r.headers)]


def decided(cluster: Cluster) -> int:
    return len(forwarded(cluster)) + len(cluster.records("dlq"))


def send(cluster: Cluster, conversation: str, *lines: str, partition: int = 0) -> None:
    for line in lines:
        cluster.append("in", partition, conversation.encode(), line.encode())


def assert_commits_follow_acks(cluster: Cluster) -> None:
    """Every commit of an input partition at offset n comes after the acknowledgement of every outcome of every
    input record below n on that partition: its forward or dead letter, and its refusal notice (a notice names no
    coordinates: it is the one its dead letter names in ``gk.notice.id``)."""
    noticed: dict[bytes, tuple[int, int]] = {}  # notice id -> the input record it answers for
    for r in cluster.records("dlq"):
        nid = dict(r.headers).get("gk.notice.id")
        if nid is not None:
            noticed[nid] = origin(r)
    acked: dict[tuple[int, int], list[int]] = {}  # (input partition, input offset) -> indexes of its outcomes' acks
    for i, (kind, topic, partition, offset) in enumerate(cluster.events):
        if kind == "ack" and topic in ("out", "dlq"):
            record = cluster.logs[(topic, partition)][offset]
            if "gk.notice.reason" in dict(record.headers):
                nid = record.value.split()[2]
                assert nid in noticed, f"a notice no dead letter names: {record.value!r}"
                acked.setdefault(noticed[nid], []).append(i)
            else:
                acked.setdefault(origin(record), []).append(i)
    for i, (kind, topic, partition, offset) in enumerate(cluster.events):
        if kind == "commit" and topic == "in":
            for below in range(offset):
                acks = acked.get((partition, below), [])
                assert acks and max(acks) < i, (partition, below, cluster.events)


async def test_offsets_are_committed_only_after_the_outcomes_are_acknowledged() -> None:
    cluster = _cluster()
    send(cluster, "c1", HO, RB, AN, DN, partition=0)
    send(cluster, "c2", BAD, partition=1)
    async with running(cluster):
        await until(lambda: decided(cluster) == 5 and cluster.committed == {("in", 0): 4, ("in", 1): 1})
    assert [r.value for r in forwarded(cluster)] == [x.encode() for x in (HO, RB, AN, DN)]
    [dead] = cluster.records("dlq")
    assert dict(dead.headers)["gk.reason"] == b"check-ho"
    # the refused handoff's sender is told, on the output topic, before the offset passes it
    [notice] = notices(cluster)
    assert notice.key == b"c2" and notice.value.startswith(b"RW1 UN payer-9")
    assert b" re=scheduler-1 from=payer to=scheduler " in notice.value
    assert dict(dead.headers)["gk.notice.id"] == notice.value.split()[2]
    assert_commits_follow_acks(cluster)


async def test_a_failed_produce_is_retried_never_dead_lettered_nor_duplicated() -> None:
    cluster = _cluster()
    cluster.fail_sends = 3
    send(cluster, "c1", HO, RB, AN, DN)
    async with running(cluster) as gk:
        await until(lambda: cluster.committed.get(("in", 0)) == 4)
        assert gk.metrics.registry.get_sample_value(
            "gatekeeper_kafka_errors_total", {"operation": "produce"}
        ) == pytest.approx(3)
        assert len(kafka_of(gk).producers) >= 2  # the producer replaced after each failure
    assert [r.value for r in forwarded(cluster)] == [x.encode() for x in (HO, RB, AN, DN)]
    assert cluster.records("dlq") == []
    assert_commits_follow_acks(cluster)


async def test_acknowledgements_that_do_not_come_are_waited_for_never_sent_twice() -> None:
    cluster = _cluster()
    cluster.hold_acks = asyncio.Event()  # the broker takes the records and does not answer (yet)
    send(cluster, "c1", HO, RB)
    async with running(cluster) as gk:
        await until(lambda: not gk.readiness()[0] and "produce" in str(gk.readiness()[1].get("error")), timeout=5)
        assert cluster.committed.get(("in", 0), 0) == 0  # nothing past the records not acknowledged
        cluster.hold_acks.set()  # the answers come, after the request timeout
        await until(lambda: cluster.committed.get(("in", 0)) == 2)
        await until(lambda: gk.readiness()[0])
    assert [r.value for r in forwarded(cluster)] == [HO.encode(), RB.encode()]  # once each


async def test_the_next_batch_is_decided_while_the_last_one_waits_for_its_acknowledgements() -> None:
    """At-least-once, the batch after a batch sent and not acknowledged yet is decided (its state saved) meanwhile;
    its records go out only once those before them are acknowledged, and nothing is committed past either."""
    cluster = _cluster()
    cluster.hold_acks = asyncio.Event()
    send(cluster, "c1", HO, RB)
    async with running(cluster, max_batch=1) as gk:  # one line a batch: the HO's, then the RB's
        store = gk.store
        assert isinstance(store, MemoryStore)
        await until(lambda: (st := store.state("in", "c1")) is not None and "payer-1" in st.lines)  # RB decided
        assert cluster.records("out") == [] and cluster.committed.get(("in", 0), 0) == 0
        cluster.hold_acks.set()
        await until(lambda: cluster.committed.get(("in", 0)) == 2)
    assert [r.value for r in forwarded(cluster)] == [HO.encode(), RB.encode()]
    assert_commits_follow_acks(cluster)


class _GatedLoads(MemoryStore):
    """The in-memory store whose loads after the first ``free`` wait for ``go``, or fail (``StoreError``) ``fail``
    times first."""

    def __init__(self, free: int = 1, fail: int = 0) -> None:
        super().__init__()
        self.free, self.fail = free, fail
        self.go = asyncio.Event()
        self.waiting = False

    async def load(self, route: str, wants: Wants, keys: Collection[RecordKey]) -> Loaded:
        if self.free > 0:
            self.free -= 1
        elif self.fail > 0:
            self.fail -= 1
            raise StoreError("redis is down (injected)")
        else:
            self.waiting = True
            await self.go.wait()
            self.waiting = False
        return await super().load(route, wants, keys)


async def test_the_batch_before_settles_while_the_next_waits_for_redis() -> None:
    """At-least-once, the batch sent last is acknowledged, counted and committed while the next batch waits for its
    store (the settling runs beside the deciding); the next batch's records go out only after it."""
    cluster = _cluster()
    send(cluster, "c1", HO, RB)
    store = _GatedLoads()
    async with running(cluster, store=store, max_batch=1) as gk:  # one line a batch: the HO's, then the RB's
        await until(lambda: store.waiting)  # the RB's batch waits for its load
        await until(lambda: cluster.committed.get(("in", 0)) == 1)  # the HO's batch settled meanwhile
        lines = gk.metrics.registry.get_sample_value(
            "gatekeeper_lines_total", {"route": "in", "type": "HO", "verdict": "forward"}
        )
        assert lines == 1 and [r.value for r in forwarded(cluster)] == [HO.encode()]
        store.go.set()
        await until(lambda: cluster.committed.get(("in", 0)) == 2)
    assert [r.value for r in forwarded(cluster)] == [HO.encode(), RB.encode()]
    assert_commits_follow_acks(cluster)


async def test_a_batch_whose_store_fails_still_lets_the_batch_before_settle() -> None:
    """Redis down while the next batch is decided: the batch before is settled and committed all the same, the
    failed batch is retried after the backoff, and every line goes out once, in order."""
    cluster = _cluster()
    send(cluster, "c1", HO, RB)
    store = _GatedLoads(fail=2)
    store.go.set()
    async with running(cluster, store=store, max_batch=1) as gk:
        await until(lambda: cluster.committed.get(("in", 0)) == 2)
        assert gk.metrics.registry.get_sample_value("gatekeeper_redis_errors_total") == 2
    assert [r.value for r in forwarded(cluster)] == [HO.encode(), RB.encode()]
    assert_commits_follow_acks(cluster)


async def test_a_batch_whose_store_fails_while_the_batch_before_cannot_be_acknowledged_loses_nothing() -> None:
    """Both fail at once (Redis for the batch being decided, the broker's acknowledgements for the batch before):
    both are counted, both retried, and every line goes out once, in order, nothing committed before its records."""
    cluster = _cluster()
    cluster.hold_acks = asyncio.Event()  # the HO's records are taken and not answered (yet)
    send(cluster, "c1", HO, RB)
    store = _GatedLoads(fail=1)
    store.go.set()
    async with running(cluster, store=store, max_batch=1) as gk:
        await until(lambda: gk.metrics.registry.get_sample_value("gatekeeper_redis_errors_total") == 1)
        await until(
            lambda: (
                (gk.metrics.registry.get_sample_value("gatekeeper_kafka_errors_total", {"operation": "produce"}) or 0)
                >= 1
            )
        )
        assert cluster.committed.get(("in", 0), 0) == 0
        cluster.hold_acks.set()
        await until(lambda: cluster.committed.get(("in", 0)) == 2)
    assert [r.value for r in forwarded(cluster)] == [HO.encode(), RB.encode()]
    assert_commits_follow_acks(cluster)


async def test_an_outcome_is_trimmed_before_it_is_sent_when_its_topic_limit_is_known() -> None:
    cluster = _cluster(dlq_limit=1000)
    send(cluster, "big", BAD + " // " + "y" * 280)
    async with running(cluster) as gk:
        await until(lambda: cluster.committed.get(("in", 0)) == 1)
        trimmed = gk.metrics.registry.get_sample_value(
            "gatekeeper_outcomes_trimmed_total", {"route": "in", "kind": "dead-letter"}
        )
    [dead] = cluster.records("dlq")
    headers = dict(dead.headers)
    assert headers["gk.trimmed"] and headers["gk.reason"] == b"check-ho" and origin(dead) == (0, 0)
    assert cluster.refused_batches == 0 and trimmed == 1


async def test_a_refusal_shared_by_a_batch_is_sent_alone_then_only_the_large_one_trimmed() -> None:
    cluster = _cluster(dlq_limit=1000)
    cluster.describe_limits = False  # the worker learns the limit from the broker's refusal
    small = BAD.replace("scheduler-1", "scheduler-2", 1)
    send(cluster, "big", BAD + " // " + "y" * 280, small)
    async with running(cluster):
        await until(lambda: cluster.committed.get(("in", 0)) == 2)
    first, second = cluster.records("dlq")
    assert origin(first) == (0, 0) and origin(second) == (0, 1)  # the partition's order holds
    assert b"gk.trimmed" not in dict(second.headers) and dict(first.headers).get("gk.trimmed")
    assert second.value == small.encode()
    assert cluster.refused_batches >= 2  # the shared batch, then the large one alone
    assert_commits_follow_acks(cluster)


async def test_a_failed_commit_is_tried_again_and_never_passes_an_open_line() -> None:
    cluster = _cluster()
    cluster.fail_commits = 2
    send(cluster, "c1", HO, RB)
    async with running(cluster) as gk:
        await until(lambda: cluster.committed.get(("in", 0)) == 2)
        assert gk.metrics.registry.get_sample_value("gatekeeper_kafka_errors_total", {"operation": "commit"}) == 2
        send(cluster, "c1", AN, DN)
        await until(lambda: cluster.committed.get(("in", 0)) == 4)
    assert len(forwarded(cluster)) == 4
    assert_commits_follow_acks(cluster)


async def test_a_reply_held_for_its_handoff_keeps_the_commit_below_it() -> None:
    cluster = _cluster()
    send(cluster, "c1", RB)  # the readback first: held for the handoff
    async with running(cluster):
        await until(lambda: cluster.logs[("in", 0)] and decided(cluster) == 0 and ("in", 0) not in cluster.committed)
        await asyncio.sleep(0.2)
        assert cluster.committed.get(("in", 0), 0) == 0  # the held line is open: nothing past it
        send(cluster, "c1", HO)
        await until(lambda: decided(cluster) == 2 and cluster.committed.get(("in", 0)) == 2)
    assert [r.value for r in forwarded(cluster)] == [HO.encode(), RB.encode()]
    assert_commits_follow_acks(cluster)


async def test_exactly_once_offsets_ride_in_the_transaction_and_an_aborted_one_is_retried() -> None:
    cluster = _cluster()
    cluster.fail_commits = 1  # the first commit_transaction times out: aborted, nothing visible
    send(cluster, "c1", HO, RB, AN, DN)
    async with running(cluster, transactional=True):
        await until(lambda: cluster.committed.get(("in", 0)) == 4)
    assert [r.value for r in forwarded(cluster)] == [x.encode() for x in (HO, RB, AN, DN)]  # once each
    kinds = [k for k, *_ in cluster.events]
    assert kinds.index("commit") > max(i for i, k in enumerate(kinds) if k == "ack")  # offsets after the records
    assert_commits_follow_acks(cluster)


async def test_exactly_once_each_input_partition_has_its_own_transactional_producer() -> None:
    cluster = _cluster()
    send(cluster, "c1", HO, RB, partition=0)
    send(cluster, "c2", BAD, partition=1)
    async with running(cluster, transactional=True, transactional_id_prefix="gk"):
        await until(lambda: cluster.committed == {("in", 0): 2, ("in", 1): 1})
        assert sorted(cluster.transactional) == ["gk-in-0", "gk-in-1"]
    assert [r.value for r in forwarded(cluster)] == [HO.encode(), RB.encode()]
    assert len(cluster.records("dlq")) == 1 and len(notices(cluster)) == 1  # in in-1's transaction
    assert_commits_follow_acks(cluster)


async def test_a_zombie_fenced_mid_transaction_drops_that_partition_and_rejoins_nothing_twice() -> None:
    """The partition's new owner starts a producer under the partition's transactional id while this instance's
    transaction is in flight (the zombie's case): the transaction never becomes visible, the worker does not stop,
    drops that partition's work and rejoins; the assignment that follows starts its producer again (which fences
    the other), reads the partition again from its committed offset, and every line has one outcome."""
    from tests.unit.fake_kafka import FakeProducer

    cluster = _cluster()
    send(cluster, "c1", HO, partition=0)
    send(cluster, "c2", BAD, partition=1)
    async with running(cluster, transactional=True) as gk:
        await until(lambda: cluster.committed == {("in", 0): 1, ("in", 1): 1})
        consumer = gk._consumer
        assert consumer is not None
        cluster.hold_acks = asyncio.Event()  # the next transactions stay in flight
        send(cluster, "c1", RB, partition=0)
        await until(lambda: gk._batch is not None and gk._batch.sends is not None)
        other = FakeProducer(cluster, "gatekeeper-in-0")
        await other.start()  # the new owner of in-0: this instance's producer of in-0 is fenced
        cluster.hold_acks.set()
        await until(lambda: cluster.committed.get(("in", 0)) == 2)
        assert consumer.rejoins == 1
        assert other.fenced  # the assignment after the rejoin gave in-0 back, and its new producer fenced the other
        send(cluster, "c2", BAD, partition=1)
        await until(lambda: cluster.committed.get(("in", 1)) == 2)
        assert gk._work is not None and not gk._work.done()
    assert [r.value for r in forwarded(cluster)] == [HO.encode(), RB.encode()]  # once each
    assert [origin(r) for r in cluster.records("dlq")] == [(1, 0), (1, 1)]
    # the same line again: its stored first decision, and the byte-identical notice (marked a repeat)
    first, again = notices(cluster)
    assert first.value == again.value and dict(again.headers)["gk.repeated"] == b"true"
    assert_commits_follow_acks(cluster)


async def test_a_partition_whose_producer_did_not_start_stays_paused_until_it_does() -> None:
    """Nothing is read from a partition before its producer has fenced the previous owner: a start that fails
    leaves the partition paused, and it is tried again between batches."""
    from tests.unit import fake_kafka

    cluster = _cluster()
    send(cluster, "c1", HO, partition=0)
    real_start = fake_kafka.FakeProducer.start
    failing = {"left": 3}
    seen: list[int] = []  # outcomes produced when each failed start was tried

    async def flaky(self: fake_kafka.FakeProducer) -> None:
        if self.transactional_id == "gatekeeper-in-0" and failing["left"] > 0:
            failing["left"] -= 1
            seen.append(decided(cluster))
            raise KafkaConnectionError("init_transactions: connection refused (fake)")
        await real_start(self)

    fake_kafka.FakeProducer.start = flaky  # type: ignore[method-assign]
    try:
        async with running(cluster, transactional=True) as gk:
            await until(lambda: cluster.committed.get(("in", 0)) == 1)
            assert seen == [0, 0, 0]  # nothing read from in-0 before its producer started
            await until(lambda: cluster.committed.get(("in", 0)) == 1)
            assert gk._pauses.unopened == set()
    finally:
        fake_kafka.FakeProducer.start = real_start  # type: ignore[method-assign]
    assert [r.value for r in forwarded(cluster)] == [HO.encode()]


async def test_records_of_a_partition_given_away_are_not_taken_in_and_leave_no_watermark() -> None:
    """A fetch that raced a revocation may bring records of the partition given away: they are not decided, and
    leave no watermark that could outlive the assignment (given back later, a commit would pass lines this
    instance never read). The next assignment reads the partition again from its committed offset."""
    from aiokafka import TopicPartition

    cluster = _cluster()
    send(cluster, "c1", HO, partition=0)
    send(cluster, "c2", BAD, partition=1)
    async with running(cluster) as gk:
        await until(lambda: cluster.committed == {("in", 0): 1, ("in", 1): 1})
        consumer = gk._consumer
        assert consumer is not None
        await gk._on_revoked([TopicPartition("in", 1)])  # the group took in-1 away; the fake still returns it
        send(cluster, "c2", BAD, partition=1)
        send(cluster, "c1", RB, partition=0)
        await until(lambda: cluster.committed.get(("in", 0)) == 2)
        await asyncio.sleep(0.1)
        assert gk._watermarks.next_offset(("in", 1)) is None
        assert [origin(r) for r in cluster.records("dlq")] == [(1, 0)]  # in-1's second line not decided here
        consumer.rejoin()  # in-1 given back: read again from its committed offset
        await until(lambda: cluster.committed.get(("in", 1)) == 2)
    assert [origin(r) for r in cluster.records("dlq")] == [(1, 0), (1, 1)]  # once each
    assert [r.value for r in forwarded(cluster)] == [HO.encode(), RB.encode()]
    assert_commits_follow_acks(cluster)


@pytest.mark.parametrize("transactional", [False, True], ids=["at-least-once", "exactly-once"])
async def test_a_rebalance_during_the_backoff_leaves_no_partition_paused(transactional: bool) -> None:
    """The batch fails (the broker refuses every produce) and waits for its retry; meanwhile the group rebalances:
    the revocation takes the batch's lines away, the assignment gives the partitions back. What the backoff's
    polling then reads must not leave them paused with nobody to resume them: every line is decided once the
    broker takes produces again."""
    cluster = _cluster()
    send(cluster, "c1", HO, partition=0)
    send(cluster, "c2", BAD, partition=1)
    cluster.fail_sends = 1_000_000
    async with running(cluster, transactional=transactional) as gk:
        await until(lambda: gk._failures >= 2)  # in the backoff
        consumer = gk._consumer
        assert consumer is not None
        consumer.rejoin()
        # the revocation took the batch's lines; the assignment gave the partitions back
        await until(lambda: consumer._rejoining is not None and consumer._rejoining.done())
        await asyncio.sleep(0.5)  # the backoff's polling reads the partitions given back
        cluster.fail_sends = 0
        send(cluster, "c1", RB, partition=0)
        await until(lambda: cluster.committed.get(("in", 0)) == 2 and cluster.committed.get(("in", 1)) == 1)
    assert [r.value for r in forwarded(cluster)] == [HO.encode(), RB.encode()]
    assert [origin(r) for r in cluster.records("dlq")] == [(1, 0)]


async def test_a_signature_check_that_raises_refuses_the_line_and_the_worker_goes_on() -> None:
    """Verifying never raises on what a record carries; were it to (a bug), the line is refused sender-auth, fail
    closed, and the partition moves on."""
    from gatekeeper.auth import KeyRing

    def broken(self: KeyRing, *args: object) -> object:
        raise RuntimeError("a bug in verifying")

    cluster = _cluster()
    send(cluster, "c1", HO)
    settings = _settings()
    route = {"input": "in", "output": "out", "dead_letter": "dlq", "alerts": "alerts", "profile": "pay"}
    key = {"id": "k1", "agent": "scheduler", "public_key": "A" * 43 + "="}
    settings = Settings.model_validate(
        {**settings.model_dump(mode="json"), "routes": [{**route, "sender_auth": True}], "sender_auth": {"keys": [key]}}
    )
    store = MemoryStore()
    await store.put_record(RECORD)
    original = KeyRing.check
    KeyRing.check = broken  # type: ignore[method-assign,assignment]
    try:
        gk = Gatekeeper(settings, store=store, kafka=FakeKafka(cluster), http=False, startup_timeout=5)
        task = asyncio.create_task(gk.run())
        await until(lambda: cluster.committed.get(("in", 0)) == 1)
        gk.request_stop()
        await asyncio.wait_for(task, 10)
    finally:
        KeyRing.check = original  # type: ignore[method-assign]
    [dead] = cluster.records("dlq")
    assert dict(dead.headers)["gk.reason"] == b"sender-auth"
    assert cluster.records("out") == []
