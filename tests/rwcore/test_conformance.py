"""The reference's conformance suite, read from the installed rogerwilco package, run against rwcore.

Every case of every kind: parse (verdict, error needles, JSON form, round trip through encode), readback, presend,
done and thread (verdict, problem and note needles), digest. Beyond the suite's own criteria, each case's full
output (every string, in order) must equal the reference's. The agent cases score a model's replies, which this
repository has none of; for them the incoming line must get the verdict a correct reply presumes (an incoming line
answered with UN why=UNK or why=VER is invalid; every other one is valid).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest
import rogerwilco as ref

import rwcore as rw


def _cases() -> list[dict[str, Any]]:
    text = resources.files("rogerwilco").joinpath("tests/conformance.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


CASES = _cases()


def _of(kind: str) -> list[Any]:
    return [pytest.param(c, id=c["id"]) for c in CASES if c["kind"] == kind]


def test_the_suite_is_the_one_shipped() -> None:
    kinds: dict[str, int] = {}
    for c in CASES:
        kinds[c["kind"]] = kinds.get(c["kind"], 0) + 1
    assert kinds == {"parse": 46, "readback": 32, "thread": 10, "agent": 6, "done": 6, "presend": 3, "digest": 2}


def _needles(found: list[str], needles: list[str]) -> None:
    for needle in needles:
        assert any(needle in f for f in found), (needle, found)


@pytest.mark.parametrize("case", _of("parse"))
def test_parse(case: dict[str, Any]) -> None:
    profile = case.get("profile")
    msg, errors, warnings = rw.parse(case["line"], profile)
    assert (not errors) == (case["expect"] == "valid"), errors
    _needles(errors, case.get("errors_contain", []))
    if "json" in case:
        assert msg == case["json"]
    assert (msg, errors, warnings) == ref.parse(case["line"], profile)
    parsed = rw.parse_line(case["line"], profile)
    assert parsed.raw == msg
    assert [e.message for e in parsed.errors] == errors
    assert [w.message for w in parsed.warnings] == warnings
    if case["expect"] == "valid":
        assert parsed.message is not None
        assert parsed.message.to_dict() == msg
        back = rw.encode(msg, profile)
        assert back == ref.encode(msg, profile)
        msg2, errors2, _ = rw.parse(back, profile)
        assert not errors2
        assert msg2 == msg
        assert rw.encode_message(parsed.message, profile) == back
        assert rw.from_json(rw.to_json(case["line"], profile), profile) == back
    else:
        assert parsed.message is None
        assert all(e.code in rw.PARSE_CODES for e in parsed.errors)


@pytest.mark.parametrize("case", _of("readback"))
def test_readback(case: dict[str, Any]) -> None:
    expect_acc = case["expect_acc"].split("+") if case.get("expect_acc") else None
    args = (case["ho"], case["rb"], case.get("profile"), expect_acc, case.get("now"))
    problems, notes = rw.check_rb_full(*args)
    assert (not problems) == (case["expect"] == "match"), problems
    _needles(problems, case.get("problems_contain", []))
    _needles(notes, case.get("notes_contain", []))
    assert (problems, notes) == ref.check_rb_full(*args)
    assert rw.check_rb(*args[:4]) == ref.check_rb(*args[:4])
    # the typed check over the parsed lines says the same, with codes
    prof = rw.get_profile(case.get("profile"))
    ho = rw.parse_line(case["ho"], prof)
    rb = rw.parse_line(case["rb"], prof)
    if ho.message is not None and rb.message is not None:
        result = rw.rb_check(ho.message, rb.message, prof, expect_acc, case.get("now"))
        assert result.compat() == (problems, notes)
        assert all(p.code in rw.CHECK_CODES for p in (*result.problems, *result.notes))


@pytest.mark.parametrize("case", _of("presend"))
def test_presend(case: dict[str, Any]) -> None:
    args = (case["ho"], case["record"], case.get("profile"))
    problems, notes = rw.check_ho(*args)
    assert (not problems) == (case["expect"] == "match"), problems
    _needles(problems, case.get("problems_contain", []))
    assert (problems, notes) == ref.check_ho(*args)
    prof = rw.get_profile(case.get("profile"))
    ho = rw.parse_line(case["ho"], prof).message
    assert ho is not None
    assert rw.ho_check(ho, case["record"], prof).compat() == (problems, notes)


@pytest.mark.parametrize("case", _of("done"))
def test_done(case: dict[str, Any]) -> None:
    args = (case["ho"], case["dn"], case.get("profile"), case.get("rb"))
    problems, notes = rw.check_dn(*args)
    assert (not problems) == (case["expect"] == "match"), problems
    _needles(problems, case.get("problems_contain", []))
    assert (problems, notes) == ref.check_dn(*args)
    prof = rw.get_profile(case.get("profile"))
    ho = rw.parse_line(case["ho"], prof).message
    dn = rw.parse_line(case["dn"], prof).message
    rb = rw.parse_line(case["rb"], prof).message if case.get("rb") else None
    assert ho is not None and dn is not None
    # every readback in the suite's done cases passes, so the typed check with it as the plan agrees
    assert rw.dn_check(ho, dn, prof, plan_rb=rb).compat() == (problems, notes)


@pytest.mark.parametrize("case", _of("thread"))
def test_thread(case: dict[str, Any]) -> None:
    args = (case["lines"], case.get("profile"), case.get("now"))
    problems, notes = rw.check_thread(*args)
    assert (not problems) == (case["expect"] == "match"), problems
    _needles(problems, case.get("problems_contain", []))
    _needles(notes, case.get("notes_contain", []))
    assert (problems, notes) == ref.check_thread(*args)
    assert rw.thread_check(*args).compat() == (problems, notes)


@pytest.mark.parametrize("case", _of("digest"))
def test_digest(case: dict[str, Any]) -> None:
    assert rw.digest(case["line"]) == case["expect"]
    parsed = rw.parse_line(case["line"])
    assert parsed.message is not None
    assert rw.message_digest(parsed.message) == case["expect"]
    assert rw.digest(parsed.raw) == case["expect"]


@pytest.mark.parametrize("case", _of("agent"))
def test_agent_incoming_lines(case: dict[str, Any]) -> None:
    line = case["incoming"].replace("to=YOU", f"to={case['you']}")
    refuses_the_line = case.get("reply_type") == "UN" and case["reply_slots"].get("why") in ("UNK", "VER")
    _, errors, _ = rw.parse(line)
    assert bool(errors) == refuses_the_line, errors
    assert rw.parse(line) == ref.parse(line)
