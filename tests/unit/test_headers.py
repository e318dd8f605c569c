"""The engine's outcome headers (``_native.Headers``, native/python/src/headers.rs): a sequence of ``(name, value)``
pairs that Python sees as the tuple of those pairs (equal, hashed, indexed, iterated and added as it), and that the
record batch builder and the size estimate read as their bytes, with the same result as from the tuple."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rwcore import _native

pairs = st.lists(st.tuples(st.text(max_size=12), st.binary(max_size=20)), max_size=8).map(tuple)


@settings(max_examples=300, deadline=None)
@given(items=pairs, other=pairs, at=st.integers(-10, 10))
def test_headers_are_the_tuple_of_their_pairs(
    items: tuple[tuple[str, bytes], ...], other: tuple[tuple[str, bytes], ...], at: int
) -> None:
    h = _native.Headers(items)
    assert h == items and items == h and (h != items) is False
    assert (h == other) == (items == other) and (h != other) == (items != other)
    assert h == _native.Headers(items) and (h == _native.Headers(other)) == (items == other)
    assert hash(h) == hash(items)
    assert len(h) == len(items) and bool(h) == bool(items)
    assert h.nbytes == sum(len(k.encode("utf-8", "surrogatepass")) + len(v) for k, v in items)
    assert tuple(h) == items and list(h) == list(items)
    assert h + other == items + other and other + h == other + items
    assert h[1:3] == items[1:3] and h[::-1] == items[::-1]
    if -len(items) <= at < len(items):
        assert h[at] == items[at]
    else:
        with pytest.raises(IndexError):
            h[at]
    assert all(p in h for p in items)
    assert repr(h) == f"Headers({items!r})"


def test_headers_compare_to_nothing_but_pairs() -> None:
    h = _native.Headers([("gk.verdict", b"forward")])
    assert h != [("gk.verdict", b"forward")]  # a list is not a tuple: as a tuple compares
    assert h != "gk.verdict" and h != None  # noqa: E711 (the comparison itself is what is tested)
    assert (h < (("a", b""),)) == (tuple(h) < (("a", b""),))  # ordered as its tuple is
    with pytest.raises(TypeError):
        h < _native.Headers([("a", b"")])  # noqa: B015 (two Headers are only equal or not)
    with pytest.raises(TypeError):
        _native.Headers([("name", "not bytes")])  # type: ignore[list-item]


@settings(max_examples=200, deadline=None)
@given(
    records=st.lists(
        st.tuples(st.one_of(st.none(), st.binary(max_size=20)), st.binary(max_size=200), pairs), max_size=30
    ),
    max_size=st.integers(200, 4000),
)
def test_a_batch_reads_the_headers_bytes_as_it_reads_their_tuple(
    records: list[tuple[bytes | None, bytes, tuple[tuple[str, bytes], ...]]], max_size: int
) -> None:
    class Rec:
        def __init__(self, key: bytes | None, value: bytes, headers: object) -> None:
            self.key, self.value, self.headers = key, value, headers

    as_tuples = [Rec(k, v, h) for k, v, h in records]
    as_native = [Rec(k, v, _native.Headers(h)) for k, v, h in records]
    built = [b._build() for b in _native.record_batches(as_tuples, max_size, 1_790_000_000_000)]
    assert [b._build() for b in _native.record_batches(as_native, max_size, 1_790_000_000_000)] == built
    for k, v, h in records:
        assert _native.record_size(k, v, _native.Headers(h)) == _native.record_size(k, v, h)
