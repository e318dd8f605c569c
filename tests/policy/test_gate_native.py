"""The gate's rules run natively (``native/engine``): held here to what Python itself says of the same text.

The oracles are the standard library's: the UTF-8 decoder's error (its position and reason), ``str.isprintable``
and ``unicodedata.category``, ``calendar.monthrange``, ``time.strptime`` and ``re``. The rules promise to say what
Python would say, character for character, on any input.
"""

from __future__ import annotations

import calendar
import re
import time
import unicodedata

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gatekeeper.policy.gate import conversation_problem, screen
from rwcore import _native

_SOUP = st.text(
    alphabet=st.one_of(
        st.sampled_from([*list("RW1 HO ab-=/+0123:.TZ\t\r\n\x00\x7f"), "\xa0", "\u200b", "\u2028", "�"]),
        st.characters(),
    ),
    max_size=24,
)


def _first_refused(text: str) -> tuple[int, str] | None:
    for pos, ch in enumerate(text):
        if not ch.isprintable():
            return pos, unicodedata.category(ch)
    return None


@settings(max_examples=3000)
@given(st.binary(max_size=24))
@example(b"ab\xe2\x82")
@example(b"\xed\xa0\x80")
@example(b"\xf0\x9fA")
def test_utf8_errors_say_what_the_decoder_says(raw: bytes) -> None:
    text, problems = screen(raw, 8192)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        assert text is None
        assert problems[0].message == f"input: the value is not UTF-8 (byte {exc.start}: {exc.reason})"
    else:
        assert not raw or all(p.code != "input-not-utf8" for p in problems)


@settings(max_examples=3000)
@given(_SOUP)
def test_refused_characters_are_pythons_unprintable_ones(text: str) -> None:
    found = _first_refused(text)
    problem = conversation_problem(text)
    if found is None:
        assert problem is None
    else:
        pos, category = found
        assert problem is not None
        assert f"has U+{ord(text[pos]):04X} ({category}) at {pos}:" in problem.message
    if any("\ud800" <= c <= "\udfff" for c in text):
        return  # not UTF-8 as a value: the decoder's refusal (above)
    raw = text.encode("utf-8")
    accepted, problems = screen(raw, 8192)
    codes = [p.code for p in problems]
    assert (accepted is None) == bool(problems)
    assert ("input-multiline" in codes or "input-control-character" in codes) == (found is not None and bool(raw))


@settings(max_examples=3000)
@given(st.integers(0, 10000), st.integers(0, 14), st.integers(0, 33), st.integers(0, 25), st.integers(0, 61))
def test_calendar_rules_are_the_calendars(y: int, mo: int, d: int, h: int, mi: int) -> None:
    date = f"{y:04d}{mo:02d}{d:02d}"
    real = 1 <= y <= 9999 and 1 <= mo <= 12 and 1 <= d <= calendar.monthrange(y, mo)[1]
    try:
        time.strptime(date, "%Y%m%d")
        parsed = True
    except ValueError:
        parsed = False
    assert _native.impossible_date(date) is (not parsed)
    assert parsed is real or len(date) != 8


@settings(max_examples=3000)
@given(st.text(alphabet=st.sampled_from([*list("0123456789 "), "٣", "٠", "१"]), max_size=10))
def test_impossible_date_is_strptimes(text: str) -> None:
    try:
        time.strptime(text, "%Y%m%d")
        parsed = True
    except ValueError:
        parsed = False
    assert _native.impossible_date(text) is (not parsed)


_NUMBER = re.compile(r"-?\d+(\.\d+)?")


@settings(max_examples=2000)
@given(st.text(alphabet=st.sampled_from([*list("-.0129"), "٣", "x"]), max_size=8))
def test_a_number_answer_is_the_patterns(val: str) -> None:
    found = _native.answer_problems("a-2", "q-1", "NUM", val, [], None)
    assert (not found) is bool(_NUMBER.fullmatch(val))


def test_reserved_ids() -> None:
    assert _native.is_reserved_id("gatekeeper-900000001")
    assert not _native.is_reserved_id("a-899999999")
    assert _native.id_number("a-" + "9" * 5000) == _native.RESERVED_ID_MAX + 1
    assert _native.id_number("a-\u0661") is None  # ASCII digits only
