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

After parsing, one more rule (``impossible_dates``): every slot the profile types as a date (``YYYYMMDD``) or a time
(``YYYYMMDDTHHMMZ``) names a real instant of the calendar: a year 0001-9999, a month 01-12, a day the month has, an
hour 00-23 and a minute 00-59. The RW1 parser checks only the shape (``20270230`` and ``T2599Z`` pass it); a line
with a date that never comes would never expire, or expire at a time nobody wrote.
"""

from __future__ import annotations

import calendar
import functools
import re
import unicodedata

from rwcore import Message, Problem, Profile

#: Unicode categories refused anywhere in a line: control, format, line and paragraph separators, unassigned,
#: private use and surrogates; and every space separator (``Zs``) but the ASCII space (``_first_refused``).
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
        if category in _REFUSED_CATEGORIES or (category == "Zs" and ch != " "):
            return pos, category
    return None


def conversation_problem(conversation: str) -> Problem | None:
    """The input rules for a conversation id (the record key, or the route's conversation header): a character the
    gate refuses in a line (a control, format, separator, surrogate, private-use or unassigned one) makes it no
    conversation id at all: it would forge a log line or reorder a terminal where the id is shown, and a model
    reading it would read something else than a program does."""
    found = _first_refused(conversation)
    if found is None:
        return None
    pos, category = found
    return _problem(
        "conversation-invalid",
        f"the conversation id (the record key) has U+{ord(conversation[pos]):04X} ({category}) at {pos}: a "
        "conversation id follows the input rules of a line",
    )


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


_DATE_FIELDS = re.compile(r"(\d{4})(\d{2})(\d{2})")
_TIME_FIELDS = re.compile(r"(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})Z")


@functools.lru_cache(maxsize=4096)
def _real_instant(value: str, kind: str) -> bool:
    """Memoised: lines carry the same few dates and expiry times (a batch's flows share them)."""
    m = (_DATE_FIELDS if kind == "date" else _TIME_FIELDS).fullmatch(value)
    if m is None:
        return True  # not of the shape at all: the parser already refused it (or the slot is empty)
    y, mo, d = int(m[1]), int(m[2]), int(m[3])
    if not (1 <= y <= 9999 and 1 <= mo <= 12 and 1 <= d <= calendar.monthrange(y, mo)[1]):
        return False
    return kind == "date" or (int(m[4]) <= 23 and int(m[5]) <= 59)


_CALENDAR_SLOTS: dict[int, tuple[Profile, tuple[tuple[str, str], ...]]] = {}


def _calendar_slots(profile: Profile) -> tuple[tuple[str, str], ...]:
    """The profile's date and time slots, as (key, kind), computed once per profile (kept with it, by identity)."""
    found = _CALENDAR_SLOTS.get(id(profile))
    if found is None or found[0] is not profile:
        found = _CALENDAR_SLOTS[id(profile)] = (
            profile,
            tuple((k, t) for k, t in profile.slot_types.items() if t in ("date", "time")),
        )
    return found[1]


def impossible_dates(msg: Message, profile: Profile) -> tuple[Problem, ...]:
    """The date and time slots of a parsed line that name no real instant (see the module docstring)."""
    problems: list[Problem] = []
    slots = msg.slots
    for key, kind in _calendar_slots(profile):
        value = slots.get(key)
        if not isinstance(value, str) or _real_instant(value, kind):
            continue
        what = "date (YYYYMMDD)" if kind == "date" else "time (YYYYMMDDTHHMMZ, UTC)"
        problems.append(
            Problem(
                code="input-impossible-date",
                message=f"input: {key}={value} is not a real calendar {what}",
                tier="input",
                slot=key,
                expected=f"a real {kind}",
                got=value,
            )
        )
    return tuple(problems)
