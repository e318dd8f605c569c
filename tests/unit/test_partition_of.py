"""The sender places its record batches where the producer's default partitioner would put each key (Kafka's Java
client's murmur2): the native ``partition_of`` agrees with aiokafka's ``DefaultPartitioner`` on any key and any
number of partitions. A disagreement would put a conversation's outcomes on two partitions, out of order."""

from __future__ import annotations

import pytest
from aiokafka.partitioner import DefaultPartitioner
from hypothesis import given, settings
from hypothesis import strategies as st

from gatekeeper.consumers.sending import partition_of
from rwcore import _native

PARTITIONER = DefaultPartitioner()


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=1, max_value=200))
def test_any_key_goes_where_the_default_partitioner_puts_it(key: bytes, count: int) -> None:
    partitions = tuple(range(count))
    assert partition_of(key, partitions) == PARTITIONER(key, partitions, partitions)


def test_the_partitions_are_the_topics_own_numbers() -> None:
    ids = (3, 7, 11)  # the sorted partition ids, not necessarily 0..n-1
    for key in (b"c-1", b"", b"\xff" * 9, "conversation-\u00e9".encode()):
        assert partition_of(key, ids) == PARTITIONER(key, ids, ids)
        assert partition_of(key, ids) in ids


def test_no_partitions_is_an_error_not_a_crash() -> None:
    with pytest.raises(ValueError, match="without partitions"):
        _native.key_partition(b"c-1", 0)
