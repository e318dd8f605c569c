"""Fuzzing the codec: ``parse_line`` and ``parse`` return on any text, never raise, and agree with the reference.

The h11 habit: a protocol parser either parses a line or says why not. Whatever arrives on a Kafka topic (control
characters, NUL, any Unicode scalar value, a megabyte on one line, thousands of slots, stray ``//``) must come back
as a ``Parsed`` with problems, in time proportional to its length. No timing asserts here: each call must simply
complete (hypothesis ``deadline=None``); the sizes keep the whole module to a few seconds.
"""

from __future__ import annotations

import contextlib
import re

import pytest
import rogerwilco as rw
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rwcore import FormError, Message, Parsed, Problem, encode_message, message_digest, parse, parse_line

PROFILES = (None, "pay", "clin", "deploy", "pform")
_HEX12 = re.compile(r"[0-9a-f]{12}")

# every Unicode scalar value (surrogates cannot be encoded as UTF-8, so a Kafka value never holds one)
any_char = st.characters(exclude_categories=("Cs",))
controls = st.sampled_from(["\x00", "\t", "\n", "\r", "\x0b", "\x0c", "\x1b", "\x7f", "\x85", "\u2028", "\ufeff"])


def _check(line: str, profile: str | None) -> Parsed:
    """Parse under both APIs and check the invariants every result holds."""
    parsed = parse_line(line, profile)
    assert isinstance(parsed, Parsed)
    assert all(isinstance(p, Problem) and p.code and p.message for p in parsed.errors + parsed.warnings)
    assert (parsed.message is None) == bool(parsed.errors)
    if parsed.message is not None:
        assert isinstance(parsed.message, Message)
        assert _HEX12.fullmatch(message_digest(parsed.message))
        with contextlib.suppress(FormError):  # a valid line encodes, or is refused with the one error type
            encode_message(parsed.message, parsed.profile)
    raw, errors, warnings = parse(line, profile)
    assert isinstance(raw, dict) and isinstance(errors, list) and isinstance(warnings, list)
    assert errors == [e.message for e in parsed.errors]
    return parsed


def _same_as_reference(line: str, profile: str | None) -> None:
    assert parse(line, profile) == rw.parse(line, profile)


# ---------------------------------------------------------------- any text at all


@settings(max_examples=300, deadline=None)
@given(line=st.text(any_char, max_size=400), profile=st.sampled_from(PROFILES))
def test_any_text(line: str, profile: str | None) -> None:
    _check(line, profile)
    _check("RW1 HO a-1 " + line, profile)


@settings(max_examples=150, deadline=None)
@given(
    parts=st.lists(st.one_of(st.text(any_char, max_size=20), controls), max_size=30), profile=st.sampled_from(PROFILES)
)
def test_control_characters_anywhere(parts: list[str], profile: str | None) -> None:
    line = "RW1 HO alice-1 from=alice to=bob item=x ask=DRAFT " + "".join(parts)
    _check(line, profile)
    _check("".join(parts) + " // " + "".join(parts), profile)


# ---------------------------------------------------------------- lines that look like RW1: the parser's own paths

TYPES = ["HO", "RB", "AQ", "AN", "ST", "DN", "UN", "FL", "CX", "ZZ", "ho", ""]
KEYS = [
    "re", "from", "to", "item", "ask", "due", "pri", "keep", "rb", "acc", "exp", "val", "out", "why", "need", "opts",
    "retry", "p", "h", "amt", "cur", "kind", "net", "vat", "src", "flag", "n", "x_ext", "Bad", "1x", "", "unknown",
]  # fmt: skip
VALUES = [
    "alice", "bob", "alice-1", "bob-2", "DRAFT", "PAY", "20261012", "20261012T1000Z", "2026-10-12", "3", "99", "-1",
    "5400.00", "5400", "GBP", "XXX", "GROSS", "Y", "N", "a+b", "+", "++", "pay", "core", "clin", "nope", "../pay",
    "ENUM", "tail", "APPROVE", "exec", "acc+pri", "", "=", "a=b", "//", "x//y", "0x10", "١٢٣",
]  # fmt: skip
SEPS = [" ", " ", " ", "  ", " // ", "//", " //", "// ", "\t"]

token = st.one_of(
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS), st.sampled_from(VALUES)),
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS), st.text(any_char, max_size=8)),
    st.sampled_from(VALUES),
)


@st.composite
def rw_lines(draw: st.DrawFn) -> str:
    head = [
        draw(st.sampled_from(["RW1", "RW1", "RW1", "RW2", "rw1", ""])),
        draw(st.sampled_from(TYPES)),
        draw(st.sampled_from(["alice-1", "bob-2", "x", "a b", "alice-1x", ""])),
    ]
    toks = head + draw(st.lists(token, max_size=14))
    out = toks[0]
    for t in toks[1:]:
        out += draw(st.sampled_from(SEPS)) + t
    if draw(st.booleans()):
        out += draw(st.sampled_from([" // ", " //", " // // x", "  ", "\n", " "])) + draw(
            st.text(any_char, max_size=30)
        )
    return out


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(line=rw_lines(), profile=st.sampled_from(PROFILES))
def test_rw_like_lines_agree_with_the_reference(line: str, profile: str | None) -> None:
    _check(line, profile)
    _same_as_reference(line, profile)


# ---------------------------------------------------------------- sizes: a megabyte, thousands of slots

MB = 1_000_000
HO = "RW1 HO alice-1 from=alice to=bob item=gh:x/y#1 ask=DRAFT"


BIG = {
    "one-megabyte-of-a": "a" * MB,
    "one-megabyte-of-spaces": " " * MB,
    "one-megabyte-of-nul": "\x00" * MB,
    "one-megabyte-of-slashes": "/" * MB,
    "one-megabyte-of-separators": " // " * (MB // 4),
    "one-megabyte-tail": HO + " // " + "t" * MB,
    "one-megabyte-value": HO + " x_big=" + "v" * MB,
    "one-megabyte-item": HO.replace("item=gh:x/y#1", "item=" + "i" * MB),
    "one-megabyte-id": "RW1 HO alice-" + "1" * MB + " from=alice to=bob item=x ask=DRAFT",
    "list-of-100k": HO + " keep=" + "+".join(["alice"] * 100_000),
    "list-of-plus": HO + " keep=" + "+" * MB,
    "5000-distinct-slots": HO + " " + " ".join(f"x_k{i}=v{i}" for i in range(5000)),
    "5000-unknown-slots": HO + " " + " ".join(f"k{i}=v{i}" for i in range(5000)),
    "5000-duplicate-keys": HO + " " + " ".join("pri=2" for _ in range(5000)),
    "5000-positional": HO + " " + " ".join("word" for _ in range(5000)),
    "5000-bad-enums": HO + " " + " ".join(f"x{i}=1" for i in range(5000)) + " cur=" + "+".join(["XXX"] * 5000),
    "long-number": HO + " pri=" + "9" * 10_000,
    "pay-long-money": HO + " p=pay amt=" + "9" * MB + ".00",
}


@pytest.mark.parametrize("name", sorted(BIG))
def test_huge_inputs_return(name: str) -> None:
    line = BIG[name]
    for profile in (None, "pay"):
        _check(line, profile)


@pytest.mark.parametrize("name", ["5000-distinct-slots", "5000-unknown-slots", "5000-duplicate-keys", "list-of-100k"])
def test_huge_inputs_agree_with_the_reference(name: str) -> None:
    _same_as_reference(BIG[name], None)


def test_a_line_that_is_not_text_is_refused_with_the_one_error() -> None:
    with pytest.raises(FormError):
        parse_line(b"RW1 HO a-1", None)  # type: ignore[arg-type]
