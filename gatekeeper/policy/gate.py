"""The input rules at the gate: stricter than ``rwcore.parse`` on purpose.

A model reading a forwarded line must not be fooled by what it cannot see. Before a value is parsed it must be:

- UTF-8, at most ``max_bytes`` long;
- one line: no CR, LF, NUL or any other control character, no Unicode line or paragraph separator, no space but
  the ASCII space (a no-break, em or ideographic space looks like one and is not), and no invisible format
  character (zero-width joiners, bidirectional overrides) anywhere, tail included;
- in its head (everything before `` // ``) printable ASCII with single ASCII spaces between tokens and no leading or
  trailing space, so ids, agent names, codes and values cannot hide lookalike characters. The tail may carry any
  printable Unicode.

``screen`` returns the text, or the problems that make the line ``invalid``.

After parsing, the decision applies one more rule of the gate's (``native/engine/src/gate.rs``): every slot the
profile types as a date (``YYYYMMDD``) or a time (``YYYYMMDDTHHMMZ``) names a real instant of the calendar: a year
0001-9999, a month 01-12, a day the month has, an hour 00-23 and a minute 00-59. The RW1 parser checks only the shape
(``20270230`` and ``T2599Z`` pass it); a line with a date that never comes would never expire, or expire at a time
nobody wrote.
"""

from __future__ import annotations

from rwcore import Problem, _native
from rwcore._codec import native_problems

# The rules are the native engine's (native/engine/src/gate.rs): these are their Python faces.


def conversation_problem(conversation: str) -> Problem | None:
    """The input rules for a conversation id (the record key, or the route's conversation header): a character the
    gate refuses in a line (a control, format, separator, surrogate, private-use or unassigned one) makes it no
    conversation id at all: it would forge a log line or reorder a terminal where the id is shown, and a model
    reading it would read something else than a program does."""
    found = native_problems(_native.conversation_problem(conversation))
    return found[0] if found else None


def screen(raw: bytes, max_bytes: int) -> tuple[str | None, tuple[Problem, ...]]:
    """Apply the gate's input rules to a record value. Returns ``(text, ())`` or ``(None, problems)``."""
    text, found = _native.screen(raw, max_bytes)
    return text, tuple(native_problems(found)) if found else ()
