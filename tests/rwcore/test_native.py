"""rwcore's native extension (``rwcore._native``, native/): what each ported function returns is what the Python it
replaced returned, on generated input; the Rust side has its own tests and property tests (cargo test)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

import rwcore as rw
from rwcore import _native


def _python_digest(text: str) -> str:
    """The digest as rwcore computed it in Python before the port."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


@given(st.text(alphabet=st.characters(codec=None), max_size=2000))
def test_the_native_digest_is_the_python_one(text: str) -> None:
    assert _native.digest(text.encode("utf-8", "surrogatepass")) == _python_digest(text)


def test_a_lone_surrogate_still_digests_and_a_line_digest_is_unchanged() -> None:
    assert _native.digest("\ud800x".encode("utf-8", "surrogatepass")) == _python_digest("\ud800x")
    line = "RW1 AN scheduler-2 re=payer-1 p=pay from=scheduler to=payer val=Y"
    assert rw.digest(line, "pay") == _python_digest(rw.canonical(json.loads(rw.to_json(line, "pay"))))


# ---------------------------------------------------------------- the parser


# Where Rust's text and Python's part: lone surrogates (a Python str may hold one, UTF-8 cannot), Python's
# whitespace (str.strip takes \x1c-\x1f and \x85, Rust's trim does not), decimal digits of other scripts (regex \d),
# repr's quoting and escapes, a newline before a $, numbers past i64 and past int()'s digit limit.
_SOUP = [
    *("RW1 ", "HO ", "RB ", "AQ ", "AN ", "DN ", "a-1 ", "scheduler-1 ", " ", " ", "=", "+", "//", " // ", "\n"),
    *("\t", "\x1c", "\x85", "\u3000", "\u200b", "\ud800", "\udfff", "é", "\x00", "\x7f", "\U000f0000", "'", '"'),
    *("\\", "١٢", "٣", "from=", "to=", "re=", "item=", "ask=PAY", "amt=", "12.00", "p=", "pay", "core", "nope"),
    *("x_a=", "need=ENUM", "opts=", "val=", "tail", "Y", "N", "-", "1", "0", "20261012", "T1000Z", "exp="),
    *("scheduler", "payer", "n=", "9" * 25, "d", "ttl=", "Upper=", "9x=", "ab\n=", "keep=", "rb=exec"),
]


@given(
    st.lists(st.sampled_from(_SOUP), max_size=16).map("".join),
    st.sampled_from([None, "pay", "clin", "deploy", "pform"]),
)
def test_the_native_parser_reads_text_as_python_does(line: str, profile: str | None) -> None:
    import rogerwilco as ref

    assert rw.parse(line, profile) == ref.parse(line, profile)
    assert rw.parse("RW1 HO scheduler-1 " + line, profile) == ref.parse("RW1 HO scheduler-1 " + line, profile)


def test_int_digits_past_pythons_limit_are_out_of_range_as_int_would_say() -> None:
    import rogerwilco as ref

    line = "RW1 HO a-1 from=a to=b item=x ask=FIX pri=" + "1" * 5000
    (_, errors, _) = rw.parse(line)
    assert errors == [f"pri={'1' * 5000}: out of range 1-5"]  # the reference raises int()'s ValueError here
    line = "RW1 HO a-1 from=a to=b item=x ask=FIX pri=-" + "0" * 40 + "3"
    raw, errors, _ = rw.parse(line)
    assert raw["slots"]["pri"] == -3 and errors == [f"pri=-{'0' * 40}3: out of range 1-5"]
    assert rw.parse(line) == ref.parse(line)


def test_the_parsers_tables_of_pythons_text_are_this_pythons() -> None:
    """rw1 reads digits, whitespace and printable characters from tables written out of Python's own (the Unicode
    version of the Python the reference runs on); they must be this Python's."""
    tool = Path(__file__).resolve().parents[2] / "native" / "rw1" / "tools" / "pytext_tables.py"
    subprocess.run([sys.executable, str(tool), "--check"], check=True)


def test_a_parsed_slots_keys_are_plain_strings_whatever_the_profile_was_given() -> None:
    """The compatible parse takes the vocabulary's slot names made once per profile: each key is a plain ``str``
    (even from a spec whose names are a ``str`` subclass), and a name the vocabulary lacks (an ``x_`` key) is made
    for the line."""

    class Name(str):
        pass

    spec = rw.load_profile("pay")
    spec["slots"] = {Name(k): v for k, v in spec["slots"].items()}
    line = "RW1 HO a-1 p=pay from=scheduler to=payer item=inv:1 ask=PAY amt=12.00 x_note=hi"
    for got in (rw.parse(line, "pay"), rw.parse(line, spec=spec)):
        assert got[0]["slots"] and all(type(k) is str for k in got[0]["slots"])
        assert got[0]["slots"]["x_note"] == "hi" and got[0]["slots"]["amt"] == "12.00"
