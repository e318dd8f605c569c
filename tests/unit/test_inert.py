"""Untrusted text is inert when shown: ``gatekeeper.inert`` and the log formats."""

from __future__ import annotations

import io
import json
import logging
import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from gatekeeper.inert import ESCAPED_CATEGORIES, inert, json_inert
from gatekeeper.logs import JsonFormatter, TextFormatter

HOSTILE = "pay\n12:00:00 INFO    gatekeeper: forged\x1b[2J\x1b]0;owned\x07\u202eevil\u2066x\u2069\u2028\x85\x7f"


def _shown(text: str) -> bool:
    return not any(unicodedata.category(ch) in ESCAPED_CATEGORIES for ch in text)


@given(st.text())
def test_any_text_comes_out_with_no_control_format_or_separator_character(text: str) -> None:
    out = inert(text)
    assert _shown(out) and "\n" not in out and "\x1b" not in out


@given(st.text(), st.text())
def test_distinct_texts_show_distinct(a: str, b: str) -> None:
    assert (inert(a) == inert(b)) == (a == b)


@given(st.text())
def test_the_escapes_read_back_to_the_text(text: str) -> None:
    assert inert(text).encode("latin-1", "backslashreplace").decode("unicode_escape") == text


def test_the_escape_form() -> None:
    assert inert("a\nb\x1b[31m\u202e\u2028\x9b\\x1b") == "a\\x0ab\\x1b[31m\\u202e\\u2028\\x9b\\\\x1b"
    assert inert("READY 20261001 // tail: café ☕ ok") == "READY 20261001 // tail: café ☕ ok"
    assert inert(b"raw") == "b'raw'" and inert(7) == "7"


@given(st.dictionaries(st.text(), st.text()))
def test_json_inert_keeps_the_values_and_nothing_raw(doc: dict[str, str]) -> None:
    out = json_inert(json.dumps(doc, ensure_ascii=False))
    assert json.loads(out) == doc and _shown(out)


def _record(msg: str, *args: object, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("gatekeeper.test", logging.WARNING, __file__, 1, msg, args, None)
    for k, v in extra.items():
        setattr(record, k, v)
    return record


def test_the_text_log_keeps_a_record_on_one_line() -> None:
    out = TextFormatter().format(_record("refused %s", HOSTILE, conversation=HOSTILE, **{"k\nx": 1}))
    assert "\n" not in out and "\x1b" not in out and _shown(out)
    assert "refused pay\\x0a12:00:00 INFO" in out and "conversation=pay\\x0a12" in out and "k\\x0ax=1" in out
    # through a real handler and stream: one line
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter())
    handler.handle(_record("line %r", HOSTILE, line=HOSTILE))
    assert stream.getvalue().count("\n") == 1


def test_a_traceback_in_the_text_log_is_escaped_line_by_line() -> None:
    try:
        raise ValueError(HOSTILE)
    except ValueError:
        import sys

        record = logging.LogRecord("gk", logging.ERROR, __file__, 1, "boom", (), sys.exc_info())
    first, *rest = TextFormatter().format(record).split("\n")
    assert first.endswith("gk: boom") and rest[0] == "  | Traceback (most recent call last):"
    assert all(ln.startswith("  | ") and _shown(ln) for ln in rest)
    assert rest[-2:] == ["  | ValueError: pay", "  | 12:00:00 INFO    gatekeeper: " + inert(HOSTILE.split(": ")[1])]


def test_the_json_log_writes_bidi_c1_and_del_as_escapes() -> None:
    out = JsonFormatter().format(_record("refused %s", HOSTILE, conversation=HOSTILE))
    assert "\n" not in out and _shown(out)
    doc = json.loads(out)
    assert doc["msg"] == f"refused {HOSTILE}" and doc["conversation"] == HOSTILE


def test_json_documents_alerts_and_problems_carry_no_raw_control_bidi_or_separator() -> None:
    """Alerts and the gk.problems header are written by json_document: what they quote is escaped and parses back
    to the same values. A line with such characters never passes the gate; its dead letter's problems say so
    without the raw character."""
    import json

    from gatekeeper.consumers.outcomes import OutcomeKind, Source, Targets, build
    from gatekeeper.inert import json_document
    from tests.policy.world import DN, HO, RB, pay_world

    doc = {"alert": "x", "item": "inv:1\u202egnp.exe", "line": "a\x85b\u2028c", "n": 1}
    raw = json_document(doc).decode("utf-8")
    assert not any(ch in raw for ch in "\u202e\x85\u2028") and json.loads(raw) == doc
    w = pay_world()
    for line in (HO, RB):
        w.send(line)
    bad = DN.replace("// as executed", "// done \u202egnp.exe ok")
    d = w.send(bad)
    targets = Targets(output="out", dead_letter="dlq", alerts="alerts", name="agents.pay")
    source = Source(topic="agents.pay", partition=0, offset=1, value=bad.encode(), key=b"c1")
    (dead,) = [o for o in build(d, source, targets, conversation="c1", now=0.0) if o.kind is OutcomeKind.DEAD_LETTER]
    problems = dict(dead.headers)["gk.problems"].decode("utf-8")
    assert "\u202e" not in problems and json.loads(problems)
