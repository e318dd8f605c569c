"""rwcore's native extension (``rwcore._native``, native/): what each ported function returns is what the Python it
replaced returned, on generated input; the Rust side has its own tests and property tests (cargo test)."""

from __future__ import annotations

import hashlib
import json

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
