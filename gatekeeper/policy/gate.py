"""The input rules at the gate: stricter than ``rwcore.parse`` on purpose.

A model reading a forwarded line must not be fooled by what it cannot see. Before a value is parsed it must be:

- UTF-8, at most ``max_bytes`` long;
- one line: no CR, LF, NUL or any other control character, no Unicode line or paragraph separator, and no
  invisible format character (zero-width joiners, bidirectional overrides) anywhere, tail included;
- in its head (everything before `` // ``) printable ASCII with single ASCII spaces between tokens and no leading or
  trailing space, so ids, agent names, codes and values cannot hide lookalike characters. The tail may carry any
  printable Unicode.

``screen`` returns the text, or the problems that make the line ``invalid``.
"""

from __future__ import annotations

import re
import unicodedata

from rwcore import Problem

#: Unicode categories refused anywhere in a line: control, format, line and paragraph separators, unassigned,
#: private use and surrogates.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cn", "Co", "Cs"})
_TAIL_SEPARATOR = " // "
_ASCII_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _problem(code: str, message: str) -> Problem:
    return Problem(code=code, message=f"input: {message}", tier="input")


def _first_refused(text: str) -> tuple[int, str] | None:
    """The position and Unicode category of the first character the gate refuses, if any. ASCII text (the
    common case) is searched with one regular expression; other text character by character."""
    if text.isascii():
        m = _ASCII_CONTROL.search(text)
        return None if m is None else (m.start(), "Cc")
    for pos, ch in enumerate(text):
        category = unicodedata.category(ch)
        if category in _REFUSED_CATEGORIES:
            return pos, category
    return None


def screen(raw: bytes, max_bytes: int) -> tuple[str | None, tuple[Problem, ...]]:
    """Apply the gate's input rules to a record value. Returns ``(text, ())`` or ``(None, problems)``."""
    if len(raw) > max_bytes:
        return None, (_problem("input-too-long", f"the value is {len(raw)} bytes; the limit is {max_bytes}"),)
    if not raw:
        return None, (_problem("input-empty", "the value is empty"),)
    try:
        text = raw.decode("utf-8", errors="strict")
    except UnicodeDecodeError as exc:
        return None, (_problem("input-not-utf8", f"the value is not UTF-8 (byte {exc.start}: {exc.reason})"),)
    problems: list[Problem] = []
    found = _first_refused(text)
    if found is not None:
        pos, category = found
        if text[pos] in "\r\n":
            problems.append(_problem("input-multiline", f"a line break at character {pos}: one line per message"))
        else:
            problems.append(
                _problem(
                    "input-control-character",
                    f"character U+{ord(text[pos]):04X} ({category}) at {pos} is not allowed in a line",
                )
            )
    head, sep, _tail = text.partition(_TAIL_SEPARATOR)
    if not sep and text.endswith(" //"):
        head = text[:-3]
    if not head.isascii():
        at = next(i for i, ch in enumerate(head) if not ch.isascii())
        problems.append(
            _problem("input-non-ascii", f"non-ASCII character {head[at]!r} at {at}: ids, names, codes are ASCII")
        )
    # Other whitespace in the head is refused already: ASCII tabs and breaks are control characters, and any
    # non-ASCII space is non-ASCII.
    if head != head.strip(" ") or "  " in head:
        problems.append(_problem("input-spacing", "tokens are separated by single spaces, with none at either end"))
    if problems:
        return None, tuple(problems)
    return text, ()
