"""Untrusted text made inert before it is shown: in a log record, on a terminal, in an alert.

What an agent or a record wrote (a line, a conversation key, a header value, a problem's message quoting a value)
may carry characters that act on whoever reads it: a newline forges a log line, ESC and OSC sequences clear a
terminal or set its title, a bidirectional override or isolate (U+202A-202E, U+2066-2069) shows a line in another
order than it is read, a line or paragraph separator (U+2028, U+2029) breaks a line where a viewer does.

``inert`` escapes every character of the categories the gate refuses in a line (``gatekeeper.policy.gate``:
control C0, DEL and C1 ``Cc``, format ``Cf`` (bidi controls, zero-width characters), separators ``Zl``/``Zp``,
surrogates ``Cs``, private use ``Co``, unassigned ``Cn``), and the backslash itself, in Python's escape form:
``\\x1b``, ``\\u202e``, ``\\U000e0001``, ``\\\\``. Everything else is kept, so a printable line shows as it is
(its backslashes doubled). Two different texts never show the same: the escapes start with a backslash and an
original backslash is doubled.

``json_inert`` does the same for JSON text written with ``ensure_ascii=False`` (which escapes C0 controls but keeps
DEL, C1, bidi controls and separators raw): those characters become JSON ``\\uXXXX`` escapes, so the document
parses to the same values.
"""

from __future__ import annotations

import re
import unicodedata

from rwcore import _native

#: The Unicode categories escaped: the same as the gate refuses in a line.
ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})

_ASCII_UNSAFE = re.compile(r"[\x00-\x1f\x7f\\]")


def _escape(ch: str) -> str:
    code = ord(ch)
    if ch == "\\":
        return "\\\\"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _unsafe(ch: str) -> bool:
    return ch == "\\" or unicodedata.category(ch) in ESCAPED_CATEGORIES


def inert(text: object) -> str:
    """``text`` (any object: ``str()`` of it) with control, format, separator, unassigned, private-use and surrogate
    characters and the backslash escaped (see the module docstring): safe to print, one line."""
    s = text if isinstance(text, str) else str(text)
    if s.isascii():
        return _ASCII_UNSAFE.sub(lambda m: _escape(m.group()), s) if _ASCII_UNSAFE.search(s) else s
    return "".join(_escape(ch) if _unsafe(ch) else ch for ch in s)


def json_inert(doc: str) -> str:
    """JSON text (as ``json.dumps(..., ensure_ascii=False)`` writes it) with every character of the escaped
    categories written as a JSON escape: the same values, nothing raw that acts on a terminal or a viewer. Outside
    strings JSON has no such character but its whitespace (a tab, a newline, a carriage return), which is kept: an
    indented document keeps its lines. The native engine's (``engine::inert``, which the outcome records use too)."""
    return _native.json_inert(doc)


def json_document(doc: object) -> bytes:
    """A JSON document (an alert) as UTF-8 bytes with ``json_inert``'s escapes: what an agent wrote inside it (a
    masked line, an item) cannot act on whoever reads the topic."""
    import orjson

    return json_inert(orjson.dumps(doc).decode("utf-8")).encode("utf-8")


__all__ = ["ESCAPED_CATEGORIES", "inert", "json_document", "json_inert"]
