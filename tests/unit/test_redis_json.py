"""The Redis store's JSON: read faster than the standard library, never differently from it."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gatekeeper.policy import Record
from gatekeeper.redis_store import _loads, _member, _read_record, _unmember

_json: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=500)
@given(_json, st.booleans())
def test_loads_reads_what_the_standard_library_reads(value: Any, ascii_only: bool) -> None:
    raw = json.dumps(value, ensure_ascii=ascii_only)
    assert _loads(raw) == json.loads(raw)
    assert _loads(raw.encode()) == json.loads(raw)


def test_loads_keeps_big_integers_and_lone_surrogates_exact() -> None:
    raw = '{"amt": 123456789012345678901234567890, "x": "\\ud800"}'
    got = _loads(raw)
    assert got == {"amt": 123456789012345678901234567890, "x": "\ud800"}
    assert isinstance(got["amt"], int)


@settings(max_examples=500)
@given(st.text(), st.text())
def test_an_index_member_has_the_bytes_earlier_releases_wrote(conversation: str, ho: str) -> None:
    try:
        expected = json.dumps([conversation, ho], separators=(",", ":"), ensure_ascii=False)
        expected.encode("utf-8")  # what Redis is sent: a lone surrogate never reached it
    except UnicodeEncodeError:
        return
    assert _member(conversation, ho) == expected
    assert _unmember(expected.encode("utf-8")) == (conversation, ho)


_scalar = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
_record_doc = st.fixed_dictionaries(
    {"item": st.text(max_size=8), "ask": st.text(max_size=8)},
    optional={
        "values": st.none() | st.dictionaries(st.text(max_size=6), _json, max_size=4),
        "resolved": st.none() | st.dictionaries(st.text(max_size=6), st.text(max_size=6) | _scalar, max_size=3),
        "expect_acc": st.none() | st.lists(st.text(max_size=6) | st.integers(), max_size=3),
        "sig": _scalar,
        "other": _json,
    },
)


@settings(max_examples=500)
@given(_record_doc, st.booleans())
def test_a_stored_record_reads_as_from_dict_reads_it(doc: dict[str, Any], ascii_only: bool) -> None:
    """Decoded straight into a Record where its fields are the Record's types, or read by ``from_dict`` where they
    are not: the same Record either way."""
    raw = json.dumps(doc, ensure_ascii=ascii_only)
    try:
        expected = Record.from_dict(json.loads(raw))
    except (ValueError, KeyError, TypeError) as exc:
        try:
            _read_record(raw.encode())
        except (ValueError, KeyError, TypeError) as got:
            assert type(got) is type(exc)
            return
        raise AssertionError("read a record from_dict refuses") from exc
    assert _read_record(raw.encode()) == expected
    assert _read_record(raw) == expected
