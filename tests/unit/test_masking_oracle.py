"""The native masking, inert JSON and time format held to what they were specified as: Python's regex of a
``key=value`` token, Python's ``datetime`` for the time, ``json.loads`` for the escapes. Any text, hypothesis-made."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from gatekeeper.consumers.outcomes import iso
from gatekeeper.inert import json_inert
from gatekeeper.masking import Masker, mask_value, masker_for

_TOKEN = re.compile(r"(?<![A-Za-z0-9_])([a-z][a-z0-9_]*)=(\S+)")

# texts made of what tokens are made of, with the characters that could confuse a scanner mixed in
_ALPHABET = st.sampled_from([*"acdprtx_=+ 1234567890-/AZé€\u2003\u00a0\t\n", "\U0001f600", "\u202e"])
_TEXT = st.lists(_ALPHABET, max_size=60).map("".join)
_SLOTS = st.frozensets(st.sampled_from(["acct", "a", "x", "t_1", "addr"]), max_size=3)


def _oracle(text: str, slots: frozenset[str]) -> str:
    """The specification, in Python's regex: sensitive tokens masked, then each learnt value (the longest first;
    equal lengths in the order of their UTF-8 bytes)."""
    m = Masker.for_slots(slots)
    learnt: set[str] = set()
    for t in _TOKEN.finditer(text):
        if t.group(1) in m.slots:
            for v in (t.group(2), *t.group(2).split("+")):
                if len(v) >= 4:
                    learnt.add(v)

    def token(t: re.Match[str]) -> str:
        if t.group(1) in m.slots:
            return f"{t.group(1)}=" + "+".join(mask_value(p) for p in t.group(2).split("+"))
        return t.group(0)

    out = _TOKEN.sub(token, text)
    for v in sorted(sorted(learnt, key=lambda s: s.encode()), key=lambda s: -len(s)):
        if v in out:
            out = out.replace(v, mask_value(v))
    return out


@given(_TEXT, _SLOTS)
def test_masking_a_text_matches_the_regex_it_is_specified_by(text: str, slots: frozenset[str]) -> None:
    assert masker_for(text, (), slots).text(text) == _oracle(text, slots)


@given(st.text(max_size=20))
def test_a_masked_value_keeps_at_most_its_last_four_characters(value: str) -> None:
    masked = mask_value(value)
    keep = 4 if len(value) >= 12 else 3 if len(value) >= 7 else 2 if len(value) >= 5 else 0
    assert masked == "****" + (value[-keep:] if keep else "")


@given(st.floats(min_value=-2e9, max_value=2e11, allow_nan=False))
def test_the_time_is_written_as_pythons_datetime_writes_it(epoch: float) -> None:
    expected = datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    assert iso.__wrapped__(epoch) == expected


@given(st.dictionaries(st.text(max_size=5), st.text(max_size=20), max_size=4))
def test_an_indented_document_keeps_its_lines_and_its_values(doc: dict[str, str]) -> None:
    text = json.dumps(doc, ensure_ascii=False, indent=2)
    out = json_inert(text)
    assert json.loads(out) == doc
    assert out.count("\n") == text.count("\n")
