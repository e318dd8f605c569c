"""The native record batches (``_native.record_batches``, native/engine/src/record_batch.rs) against aiokafka's own
builder, the C one its producer runs (its pure-Python one lets a batch reach the size where the C one stops short):
for any records and batch size, the same batches, byte for byte, before and after the producer's state is written
into them; and what aiokafka's producer calls on a builder answers as its ``BatchBuilder`` does for a closed
batch."""

from __future__ import annotations

from typing import NamedTuple

import pytest
from aiokafka.record._crecords.default_records import DefaultRecordBatchBuilder
from aiokafka.record.default_records import DefaultRecordBatch
from hypothesis import given, settings
from hypothesis import strategies as st

from rwcore import _native


class Rec(NamedTuple):
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes | None], ...]


records = st.lists(
    st.builds(
        Rec,
        st.one_of(st.none(), st.binary(max_size=30)),
        st.binary(max_size=400),
        st.lists(st.tuples(st.text(max_size=12), st.one_of(st.none(), st.binary(max_size=20))), max_size=5).map(tuple),
    ),
    min_size=1,
    max_size=40,
)


def aiokafka_batches(recs: list[Rec], max_size: int, timestamp: int, state: tuple[int, int, int]) -> list[bytes]:
    """The batches aiokafka's builder makes of ``recs``: a new one each time a record does not fit."""
    out: list[bytes] = []

    def builder() -> DefaultRecordBatchBuilder:
        return DefaultRecordBatchBuilder(
            2, 0, is_transactional=0, producer_id=-1, producer_epoch=-1, base_sequence=0, batch_size=max_size
        )

    current, n = builder(), 0
    for r in recs:
        if current.append(n, timestamp, r.key, r.value, list(r.headers)) is None:
            current.set_producer_state(*state)
            out.append(bytes(current.build()))
            current, n = builder(), 0
            assert current.append(n, timestamp, r.key, r.value, list(r.headers)) is not None
        n += 1
    current.set_producer_state(*state)
    out.append(bytes(current.build()))
    return out


@settings(max_examples=300, deadline=None)
@given(
    recs=records,
    max_size=st.integers(70, 5000),
    timestamp=st.integers(0, 2**41),
    state=st.tuples(st.integers(-1, 2**40), st.integers(-1, 2**15 - 1), st.integers(0, 2**31 - 1)),
)
def test_the_batches_are_aiokafkas_byte_for_byte(
    recs: list[Rec], max_size: int, timestamp: int, state: tuple[int, int, int]
) -> None:
    ours = _native.record_batches(recs, max_size, timestamp)
    for b in ours:
        b._set_producer_state(*state)
    assert [bytes(b._build()) for b in ours] == aiokafka_batches(recs, max_size, timestamp, state)
    assert sum(b.record_count() for b in ours) == len(recs)
    for b in ours:
        read = DefaultRecordBatch(b._build())
        assert read.validate_crc()
        assert not read.is_transactional


def test_a_batch_answers_the_producer_as_a_closed_batch_builder_does() -> None:
    recs = [Rec(b"k", b"v" * 10, (("gk.reason", b"x"),)), Rec(None, b"w", ())]
    (batch,) = _native.record_batches(recs, 16384, 1_700_000_000_000)
    assert batch.closed() and batch.record_count() == 2
    assert batch.append(timestamp=None, key=b"k", value=b"v", headers=[]) is None  # the per-record path: refused
    batch.close()
    unsent = bytes(batch._build())
    assert batch.size() == len(unsent)
    assert batch._build() is batch._build()  # built once, as aiokafka's builder is
    batch._set_producer_state(7, 1, 40)
    sent = bytes(batch._build())
    assert sent != unsent and len(sent) == len(unsent)
    assert [(r.key, r.value, list(r.headers)) for r in DefaultRecordBatch(sent)] == [
        (b"k", b"v" * 10, [("gk.reason", b"x")]),
        (None, b"w", []),
    ]


def test_a_record_larger_than_a_batch_goes_alone_and_nothing_is_an_empty_batch() -> None:
    recs = [Rec(b"a", b"x" * 50, ()), Rec(b"b", b"y" * 500, ()), Rec(b"c", b"z", ())]
    assert [b.record_count() for b in _native.record_batches(recs, 200, 0)] == [1, 1, 1]
    assert _native.record_batches([], 200, 0) == []


def test_a_key_or_value_that_is_not_bytes_is_refused_not_sent_as_null() -> None:
    for bad in (Rec(b"k", "text", ()), Rec("k", b"v", ()), Rec(b"k", b"v", (("gk.n", "text"),))):
        with pytest.raises(TypeError):
            _native.record_batches([bad], 16384, 0)
