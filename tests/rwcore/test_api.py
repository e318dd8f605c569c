"""rwcore's public API: the pinned names, the typed values, the problem codes (every one reachable), and the
documented differences from the reference (docs/rwcore-differences.md), each pinned here."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import pickle
from pathlib import Path
from typing import Any

import pytest
import rogerwilco as ref
from hypothesis import given, settings
from hypothesis import strategies as st

import rwcore as rw
from rwcore._codec import twin_json
from tests.seed import DN, HO, RB
from tests.seed import RECORD_VALUES as RECORD

NOW = "20261001T1200Z"
PAY = rw.get_profile("pay")


def msg(line: str, profile: rw.Profile | str | None = PAY) -> rw.Message:
    parsed = rw.parse_line(line, profile)
    assert parsed.message is not None, parsed.errors
    return parsed.message


# ---------------------------------------------------------------- the public surface


def test_all_is_pinned() -> None:
    assert rw.__all__ == [
        "CHECK_CODES", "PARSE_CODES", "PROBLEM_CODES", "PROFILES", "PROFILE_PATH_ENV", "THREAD_CODES",
        "TRANSLATION_CODES", "VERSION", "CheckResult",
        "CodeInfo", "FormError", "HandoffView", "Message", "Parsed", "Problem", "Profile", "SlotValue",
        "ThreadTracker", "TypeDef", "acc_check", "canonical", "check_dn", "check_dn_lines", "check_ho",
        "check_ho_lines", "check_rb", "check_rb_full", "check_rb_lines", "check_thread", "clear_profile_cache",
        "compare_acc", "digest", "dn_check", "encode", "encode_message", "from_json", "get_profile", "ho_check",
        "legend", "load_core", "load_profile", "make_rb", "make_readback", "message_digest", "now_utc", "parse",
        "parse_line", "rb_check", "thread_check", "to_json", "translation_check", "validate",
    ]  # fmt: skip
    for name in rw.__all__:
        assert hasattr(rw, name), name
    assert (Path(rw.__file__).parent / "py.typed").exists()


def test_the_references_names_are_all_here_with_its_signatures() -> None:
    for name in ref.__all__:
        ours, theirs = getattr(rw, name), getattr(ref, name)
        if callable(theirs) and not isinstance(theirs, type):
            ours_params = list(inspect.signature(ours).parameters)
            theirs_params = list(inspect.signature(theirs).parameters)
            assert ours_params == theirs_params, name
    assert rw.VERSION == ref.VERSION == "RW1"


def test_typed_signatures() -> None:
    def params(f: Any) -> list[str]:
        return list(inspect.signature(f).parameters)

    assert params(rw.get_profile) == ["name", "extra_dirs"]
    assert params(rw.parse_line) == ["line", "profile"]
    assert params(rw.encode_message) == ["msg", "profile"]
    assert params(rw.message_digest) == ["msg"]
    assert params(rw.ho_check) == ["ho", "record", "profile"]
    assert params(rw.rb_check) == ["ho", "rb", "profile", "expect_acc", "now"]
    assert params(rw.dn_check) == ["ho", "dn", "profile", "plan_rb"]
    assert params(rw.acc_check) == ["expected", "derived", "keys", "derived_not", "profile"]
    assert params(rw.make_readback) == ["ho", "rb_id", "profile", "with_hash", "eta", "acc", "do"]
    assert params(rw.legend) == ["profile", "lean"]


def test_one_error_type() -> None:
    assert issubclass(rw.FormError, ValueError)
    with pytest.raises(rw.FormError):
        rw.encode({"type": "HO", "id": "a-1", "from": "a", "to": "b", "slots": {"ask": "DANCE"}})
    with pytest.raises(rw.FormError) as info:
        rw.from_json("{nope")
    assert isinstance(info.value.__cause__, json.JSONDecodeError)
    with pytest.raises(rw.FormError) as info2:
        rw.canonical({"a": object()})  # type: ignore[dict-item]
    assert isinstance(info2.value.__cause__, TypeError)


def test_values_are_frozen_and_slotted() -> None:
    parsed = rw.parse_line(HO, PAY)
    result = rw.rb_check(msg(HO), msg(RB), PAY, now=NOW)
    for value in (parsed.message, result, PAY, PAY.types["HO"], rw.Problem("x", "y")):
        assert dataclasses.is_dataclass(value)
        assert not hasattr(value, "__dict__")
        with pytest.raises(dataclasses.FrozenInstanceError):
            value.__setattr__(dataclasses.fields(value)[0].name, None)
    # Parsed is a slotted class of its own (its raw twin is built on first use), frozen the same way
    assert not hasattr(parsed, "__dict__")
    for name in ("message", "errors", "warnings", "profile", "raw"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(parsed, name, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        del parsed.message
    assert parsed == rw.parse_line(HO, "pay")
    assert parsed != rw.parse_line(RB, "pay")
    assert "scheduler-1" in repr(parsed)


def test_a_messages_slots_refuse_every_change() -> None:
    m = msg(HO)
    slots: Any = m.slots
    before = dict(slots)
    changes = [
        lambda: slots.__setitem__("amt", "1.00"),
        lambda: slots.__delitem__("amt"),
        lambda: slots.pop("amt"),
        lambda: slots.popitem(),
        lambda: slots.setdefault("x_a", "1"),
        lambda: slots.update(amt="1.00"),
        lambda: slots.clear(),
        lambda: slots.__ior__({"amt": "1.00"}),
    ]
    for change in changes:
        with pytest.raises(TypeError, match="read-only"):
            change()
    assert dict(slots) == before
    copy = dict(slots)  # a plain, mutable copy; and the merges the checks do read it as a dict
    copy["amt"] = "1.00"
    assert {**slots, "amt": "1.00"} == copy and slots | {"amt": "1.00"} == copy
    assert pickle.loads(pickle.dumps(m)) == m
    assert rw.Message("RW1", "AN", "a-1", "a", "b", slots={"val": ["Y"]}).slots == {"val": ("Y",)}


# ---------------------------------------------------------------- parse_line, encode, digest


def test_parse_line() -> None:
    parsed = rw.parse_line(HO, "pay")
    assert parsed.ok
    assert parsed.errors == parsed.warnings == ()
    assert parsed.profile is PAY
    m = parsed.message
    assert m is not None
    assert (m.type, m.id, m.from_, m.to, m.re, m.item) == (
        "HO",
        "scheduler-1",
        "scheduler",
        "payer",
        None,
        "inv:MD-2026-057",
    )
    assert m.slots["rb"] == ("exec",)
    assert m.to_dict() == parsed.raw == ref.parse(HO, "pay")[0]
    assert rw.parse_line(HO).profile is PAY  # p= switches the core to pay
    assert rw.parse_line(HO, rw.get_profile("core")).profile is PAY


def test_parse_line_invalid_keeps_the_raw_twin() -> None:
    parsed = rw.parse_line("RW1 HO a-1 from=a to=b ask=DRAFT pri=9 zz=1", None)
    assert parsed.message is None
    assert not parsed.ok
    assert parsed.raw["slots"] == {"ask": "DRAFT", "pri": 9}
    assert [(e.code, e.slot, e.got, e.tier) for e in parsed.errors] == [
        ("out-of-range", "pri", "9", "form"),
        ("missing-slot", "item", None, "form"),
    ]
    assert parsed.errors[0].expected == "int:1-5"
    assert [(w.code, w.slot) for w in parsed.warnings] == [("unknown-key", "zz")]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.sampled_from([None, "pay", "clin", "deploy", "pform"]))
def test_parse_line_never_raises(line: str, profile: str | None) -> None:
    parsed = rw.parse_line(line, profile)
    assert (parsed.message is None) == bool(parsed.errors)
    assert all(p.code in rw.PARSE_CODES for p in (*parsed.errors, *parsed.warnings))


def test_parse_line_refuses_what_is_not_a_line() -> None:
    with pytest.raises(rw.FormError):
        rw.parse_line(b"RW1 HO a-1")  # type: ignore[arg-type]
    with pytest.raises(rw.FormError, match="unknown profile 'nope'"):
        rw.parse_line(HO, "nope")


def test_encode_message() -> None:
    m = msg(HO)
    assert rw.encode_message(m) == rw.encode(m.to_dict()) == ref.encode(ref.parse(HO)[0])
    assert rw.encode_message(m, "pay") == rw.encode_message(m, PAY)
    bad = dataclasses.replace(m, slots={**m.slots, "amt": "5,400"})
    with pytest.raises(rw.FormError, match="money is digits"):
        rw.encode_message(bad)
    with pytest.raises(rw.FormError, match="version must be RW1"):
        rw.encode_message(dataclasses.replace(m, v="RW2"))


@pytest.mark.parametrize(
    "line",
    [
        "RW1 HO a-1 from=a to=b item=x:1 ask=FIX rb=+exec++all+ keep=p",  # a list with empty parts
        'RW1 HO a-1 from=a to=b item=x:1 ask=FIX rb=+ keep=p++q // t "q"',  # an empty list; a tail to escape
        'RW1 HO a-1 from=a to=b item=x:1 ask=FIX pri=3 x_z="y" //',  # a number; a value to escape; an empty tail
        "RW1 UN b-2 re=a-1 from=b to=a why=UNK",  # no item
        "RW1 AN b-2 re=a-1 from=b to=a val=tail // here",  # a type whose rules read its slots
    ],
)
def test_digest_of_a_line_written_from_its_words(line: str) -> None:
    """A clean line's digest is written from the line's words, not its parsed slots: the same as the reference's
    and as the parsed message's, for lists with empty parts, values to escape, numbers, an envelope slot left out."""
    assert rw.digest(line) == ref.digest(line) == rw.message_digest(msg(line, None))


def test_message_digest() -> None:
    assert rw.message_digest(msg(HO)) == rw.digest(HO) == "a7a82de76607"
    built = rw.Message(v="RW1", type="HO", id="a-1", from_="a", to="b", item="x:1", slots={"ask": "FIX", "keep": ["p"]})
    assert rw.message_digest(built) == ref.digest(built.to_dict())


_SCALARS = st.one_of(
    st.text(max_size=8),
    st.sampled_from(['a"b', "a\\b", "tab\there", "nl\n", "\x00", "é", "%s", "%d", "\ud800", ""]),
    st.integers(-(10**20), 10**20),
    st.booleans(),
    st.none(),
)
_VALUES = st.one_of(_SCALARS, st.lists(_SCALARS, max_size=3).map(tuple), st.lists(_SCALARS, max_size=3))
_KEYS = st.one_of(st.sampled_from(["ask", "amt", "rb", "x_a", "a1", "a", "%s", "k%d", 'q"k']), st.text(max_size=4))


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.dictionaries(_KEYS, _VALUES, max_size=6), min_size=1, max_size=3),
    st.lists(st.one_of(st.none(), st.text(max_size=6), st.integers(0, 9)), min_size=4, max_size=4),
    st.one_of(st.none(), st.text(max_size=6)),
    st.text(max_size=6),
)
def test_the_canonical_form_equals_the_json_encoders(
    shapes: list[dict[str, Any]], envelope: list[Any], tail: str | None, mid: str
) -> None:
    """The canonical form (native) is the sorted, compact ``json.dumps`` of the twin, for any keys and any mix of
    strings (to escape or not), numbers, booleans, None and lists, messages of one shape with other kinds of value
    too. (The id, type and tail are text, as a Message declares them: one that is not is refused.)"""
    from rwcore._codec import canonical_message

    re_, frm, to, item = envelope
    for slots in shapes:
        m = rw.Message("RW1", "HO", mid, frm, to, re_, item, slots, tail)  # type: ignore[arg-type]
        want = json.dumps(m.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert canonical_message(m) == want
    with pytest.raises(rw.FormError, match="not a JSON twin: a message's id is text, not int"):
        rw.message_digest(rw.Message("RW1", "HO", 7, "a", "b"))  # type: ignore[arg-type]


def test_many_shapes_and_rb_readings_agree_with_the_reference() -> None:
    """Messages of thousands of shapes (x_ keys no message repeats) and rb= values: every digest, line and check
    equals the reference's."""
    for n in range(4146):
        slots = {"ask": "FIX", f"x_k{n}": str(n), "keep": ("p",) if n % 2 else "p", "pri": n % 5 + 1}
        built = rw.Message("RW1", "HO", "a-1", "a", "b", item="x:1", slots=slots)
        if n % 97 == 0:  # the reference is slow: a sample, spread over the run
            assert rw.message_digest(built) == ref.digest(built.to_dict())
            assert rw.encode_message(built, None) == ref.encode(built.to_dict(), None)
        else:
            assert rw.message_digest(built) == rw.digest(built.to_dict())
            rw.encode_message(built, None)
    ho = msg(HO)
    for n in range(1100):  # more rb= values than kept
        levels = ("exec", f"x_{n}") if n % 3 else ("all",)
        changed = rw.Message(ho.v, ho.type, ho.id, ho.from_, ho.to, ho.re, ho.item, {**ho.slots, "rb": levels})
        got = rw.rb_check(changed, msg(RB), PAY, now=NOW)
        if n % 97 == 0:
            want = ref.check_rb_full(rw.encode_message(changed, PAY), RB, "pay", None, NOW)
            assert got.compat() == want


# ---------------------------------------------------------------- the typed checks


def test_ho_check() -> None:
    assert rw.ho_check(msg(HO), RECORD, PAY).ok
    result = rw.ho_check(msg(HO), {**RECORD, "acct": "40-12-88/61102983"}, PAY)
    [p] = result.problems
    assert (p.code, p.tier, p.slot, p.expected, p.got) == (
        "record-mismatch",
        "record",
        "acct",
        "40-12-88/61102983",
        "40-12-88/61102938",
    )
    assert p.message == "record: acct mismatch: record 40-12-88/61102983 vs HO 40-12-88/61102938"


def test_rb_check_fields() -> None:
    rb = msg(RB.replace("amt=5400.00", "amt=5100.00"))
    result = rw.rb_check(msg(HO), rb, PAY, now=NOW)
    assert [(p.code, p.tier, p.slot, p.expected, p.got) for p in result.problems] == [
        ("exec-mismatch", "execution", "amt", "5400.00", "5100.00"),
    ]
    assert result.compat() == ref.check_rb_full(HO, RB.replace("amt=5400.00", "amt=5100.00"), "pay", now=NOW)


_TIMES = (None, "", "20261012T0959Z", "20261012T1000Z", "20261012T1001Z")
NOW_EDGE = "20261012T1000Z"


@pytest.mark.parametrize("h_exp", _TIMES)
@pytest.mark.parametrize("r_exp", _TIMES)
def test_expiry_at_every_edge_agrees_with_the_reference(h_exp: str | None, r_exp: str | None) -> None:
    """The clock against each exp= and the statement's against the HO's, on each side of equal (the usual case, both
    ahead and in order, is told apart at once): the problems are the reference's."""
    ho = HO + (f" exp={h_exp}" if h_exp is not None else "")
    rb = RB.replace("h=a7a82de76607 ", "") + (f" exp={r_exp}" if r_exp is not None else "")
    assert rw.check_rb_full(ho, rb, "pay", now=NOW_EDGE) == ref.check_rb_full(ho, rb, "pay", now=NOW_EDGE)


def test_rb_check_reads_the_clock_only_without_now(monkeypatch: pytest.MonkeyPatch) -> None:
    ho = msg(HO + " exp=20261012T1000Z")
    rb = msg(RB.replace("h=a7a82de76607 ", ""))
    assert rw.rb_check(ho, rb, PAY, now="20261012T0959Z").ok
    [p] = rw.rb_check(ho, rb, PAY, now="20261012T1000Z").problems
    assert (p.code, p.tier, p.expected, p.got) == ("expired-ho", "expiry", "20261012T1000Z", "20261012T1000Z")
    from rwcore import _checks

    monkeypatch.setattr(_checks, "now_utc", lambda: "20261012T1001Z")
    assert [p.code for p in rw.rb_check(ho, rb, PAY).problems] == ["expired-ho"]
    monkeypatch.setattr(_checks, "now_utc", lambda: "20261012T0000Z")
    assert rw.rb_check(ho, rb, PAY).ok
    assert len(rw.now_utc()) == 14


def test_dn_check_with_a_vouched_plan() -> None:
    ho_line = (
        "RW1 HO scheduler-1 p=pay from=scheduler to=payer item=sup:evergreen ask=CHGBANK rb=exec sup=evergreen "
        "acct=60-83-71/44019482 eff=20261003 apref=FD-0926 exp=20200101T0000Z"
    )
    rb_line = rw.make_rb(ho_line, "payer-1", "pay").replace("apref=FD-0926", "apref=FD-0926 prev=30-98-71/22019483")
    dn_line = (
        "RW1 DN payer-2 re=scheduler-1 p=pay from=payer to=scheduler item=sup:evergreen out=OK sup=evergreen "
        "acct=60-83-71/44019482 eff=20261003 apref=FD-0926 prev=30-98-71/22019484"
    )
    ho, rb, dn = msg(ho_line), msg(rb_line), msg(dn_line)
    # the typed check takes the readback as vouched for: no re-check, no clock (the HO expired in 2020)
    result = rw.dn_check(ho, dn, PAY, plan_rb=rb)
    assert [(p.code, p.slot, p.expected, p.got) for p in result.problems] == [
        ("dn-mismatch", "prev", "30-98-71/22019483", "30-98-71/22019484"),
    ]
    # the compatible check re-checks the readback now, as the reference does, and refuses it as the plan
    compat = rw.check_dn(ho_line, dn_line, "pay", rb_line=rb_line)
    assert compat == ref.check_dn(ho_line, dn_line, "pay", rb_line=rb_line)
    [p] = rw.check_dn_lines(ho_line, dn_line, "pay", rb_line=rb_line).problems
    assert (p.code, p.got) == ("rb-not-plan", "expired-ho")
    # without a plan readback, prev was resolved by the receiver: a note
    notes = rw.dn_check(ho, dn, PAY).notes
    assert [n.code for n in notes] == ["dn-resolved"]


def test_make_readback() -> None:
    rb = rw.make_readback(msg(HO), "payer-1", PAY)
    assert isinstance(rb, rw.Message)
    assert rw.encode_message(rb) == rw.make_rb(HO, "payer-1", "pay") == ref.make_rb(HO, "payer-1", "pay")
    assert rb.slots["h"] == "a7a82de76607"
    with pytest.raises(rw.FormError, match="must be <from>-<n>"):
        rw.make_readback(msg(HO), "payer-x", PAY)


def test_acc_check() -> None:
    result = rw.acc_check(["len:120w", "must:monday-problem"], ["len:150w", "must:the-monday-problems", "fmt:md"])
    assert [(p.code, p.slot, p.expected, p.got) for p in result.problems] == [
        ("acc-contradiction", "len", "120w", "150w")
    ]
    assert [n.code for n in result.notes] == ["acc-assumption"]
    assert result.compat() == ref.compare_acc(
        ["len:120w", "must:monday-problem"], ["len:150w", "must:the-monday-problems", "fmt:md"]
    )


def test_legend_typed() -> None:
    assert rw.legend(PAY) == rw.legend("pay")
    assert rw.legend(rw.get_profile(None), lean=True) == ref.legend(None, lean=True)


def test_check_results() -> None:
    ok = rw.CheckResult()
    assert ok.ok and ok.compat() == ([], [])
    assert rw.check_rb_lines(HO, RB, "pay", now=NOW) == rw.rb_check(msg(HO), msg(RB), PAY, now=NOW)
    assert rw.check_ho_lines(HO, RECORD, "pay") == rw.ho_check(msg(HO), RECORD, PAY)
    assert rw.check_dn_lines(HO, DN, "pay") == rw.dn_check(msg(HO), msg(DN), PAY)


# ---------------------------------------------------------------- every problem code is reachable


def _parse_codes(tmp_path: Path) -> set[str]:
    (tmp_path / "odd.json").write_text(
        json.dumps({"profile": "odd", "slots": [{"key": "zz", "type": "colour", "on": ["HO"]}]}), encoding="utf-8"
    )
    odd = rw.get_profile("odd", extra_dirs=[tmp_path])
    base = "RW1 HO a-1 from=a to=b item=x:1 ask=DRAFT"
    cases: list[tuple[str, rw.Profile | str | None]] = [
        ("RW1 HO", None),
        ("FC2 HO a-1 from=a to=b item=x:1 ask=DRAFT", None),
        ("RW1 XX a-1 from=a to=b", None),
        ("RW1 HO a$1 from=a to=b item=x:1 ask=DRAFT", None),
        (base + " hello Foo=1 ask=FIX pri= p=nope", None),
        (base.replace("DRAFT", "DANCE") + " pri=x due=2026 exp=2026 retry=maybe", None),
        (base + " pri=9 keep=a!b", None),
        ("RW1 FL a-2 re=b-1 from=a to=b item=x:1 why=ERR retry=maybe", None),
        ("RW1 HO TRI-1 p=pform from=TRI to=BOB item=pensive:1 ask=SCORE4 stall=2w", "pform"),
        ("RW1 HO a-1 p=pay from=a to=b item=x:1 ask=PAY amt=1.5", "pay"),
        ("RW1 ST a-1 p=clin from=a to=b item=meas:x act=OBS pol=POS cert=CERT subj=PT time=CUR res=7,2", "clin"),
        ("RW1 HO a-1 p=odd from=a to=b item=x:1 ask=DRAFT zz=1", odd),
        ("RW1 HO a-1 from=a to=b ask=DRAFT", None),
        ("RW1 AN a-1 re=b-1 from=a to=b val=tail", None),
        ("RW1 AQ a-1 from=a to=b need=ENUM", None),
        ("RW1 HO x-1 from=a to=b item=x:1 ask=DRAFT", None),
        ("RW1 AN human-1 p=pay re=b-1 from=human to=payer val=MAYBE", "pay"),
        ("RW1 AQ payer-1 p=pay from=payer to=human need=ENUM opts=PAY-USD", "pay"),
        (base + " // " + "x" * 301, None),
        ("  " + base + "  zz=1", None),
        ("RW1 HO a-1 p=clin from=a to=a item=x:1 ask=DRAFT out=OK", "pay"),
    ]
    found: set[str] = set()
    for line, profile in cases:
        parsed = rw.parse_line(line, profile)
        found |= {p.code for p in (*parsed.errors, *parsed.warnings)}
    return found


def _check_codes() -> set[str]:
    found: list[rw.Problem] = []

    def take(result: rw.CheckResult) -> None:
        found.extend(result.problems)
        found.extend(result.notes)

    ho, rb, dn = msg(HO), msg(RB), msg(DN)
    take(rw.check_ho_lines("garbage", {}, "pay"))
    take(rw.check_rb_lines(HO, "garbage", "pay"))
    take(rw.check_dn_lines(HO, "garbage", "pay"))
    take(rw.ho_check(rb, {}, PAY))
    no_exec = msg(HO.replace("rb=exec", "rb=all").replace(" acct=40-12-88/61102938", ""))
    take(rw.ho_check(no_exec, {"zzz": 1, "amt": "1.00"}, PAY))
    take(rw.ho_check(msg(HO), {"to": "payer"}, PAY))
    take(rw.ho_check(msg("RW1 HO scheduler-1 p=pay from=scheduler to=payer item=sup:e ask=CHGBANK rb=exec"), {}, PAY))
    wrong = RB.replace("re=scheduler-1", "re=scheduler-9").replace("to=scheduler", "to=auditor")
    wrong = wrong.replace("h=a7a82de76607", "h=deadbeef0000").replace("amt=5400.00", "amt=1.00")
    take(rw.rb_check(ho, msg(wrong.replace(" acct=40-12-88/61102938", "").replace("ask=PAY", "ask=SEND")), PAY))
    timed = msg(HO.replace("rb=exec", "rb=exec+plan+due") + " due=20261002 exp=20261001T1000Z")
    rb2 = msg(RB.replace("h=a7a82de76607 ", "") + " exp=20261001T1100Z not=monday")
    take(rw.rb_check(timed, rb2, PAY, ["must:monday", "len:120w"], now="20261001T1130Z"))
    brief = msg("RW1 HO a-1 from=a to=b item=x:1 ask=DRAFT rb=acc keys=tone", None)
    take(
        rw.rb_check(
            brief,
            msg("RW1 RB b-1 re=a-1 from=b to=a item=x:1 ask=DRAFT acc=len:1w+zz:1", None),
            rw.get_profile(None),
            ["len:120w", "must:regulated-proof", "must:pricing"],
        )
    )
    take(
        rw.rb_check(
            brief,
            msg("RW1 RB b-1 re=a-1 from=b to=a item=x:1 ask=DRAFT acc=must:regulated-ai+fmt:md", None),
            rw.get_profile(None),
            ["must:regulated-proof"],
        )
    )
    take(
        rw.rb_check(
            brief, msg("RW1 RB b-1 re=a-1 from=b to=a item=x:1 ask=DRAFT acc=len:1w", None), rw.get_profile(None)
        )
    )
    take(rw.rb_check(msg(HO.replace("ask=PAY", "ask=AUDIT")), msg(RB.replace("ask=PAY", "ask=AUDIT")), PAY, now=NOW))
    take(rw.dn_check(rb, dn, PAY))
    odd_dn = DN.replace("re=scheduler-1", "re=scheduler-9").replace("to=scheduler", "to=auditor")
    take(
        rw.dn_check(
            ho,
            msg(
                odd_dn.replace("item=inv:MD-2026-057", "item=inv:2")
                .replace(" acct=40-12-88/61102938", "")
                .replace("amt=5400.00", "amt=1.00")
            ),
            PAY,
        )
    )
    take(rw.dn_check(ho, msg(DN.replace("out=OK", "out=PARTIAL").replace(" acct=40-12-88/61102938", "")), PAY))
    take(rw.dn_check(ho, msg(DN.replace("out=OK", "out=NOOP")), PAY))
    recon = "RW1 HO scheduler-1 p=pay from=scheduler to=payer item=run:1 ask=RECON sup=a"
    take(
        rw.dn_check(
            msg(recon), msg("RW1 DN payer-2 re=scheduler-1 p=pay from=payer to=scheduler item=run:1 out=OK sup=b"), PAY
        )
    )
    take(rw.dn_check(msg(HO.replace(" acct=40-12-88/61102938", "")), dn, PAY))
    take(rw.check_dn_lines(HO, DN, "pay", rb_line=RB.replace("amt=5400.00", "amt=1.00")))
    take(rw.check_dn_lines(HO, DN, "pay", rb_line=DN))
    return {p.code for p in found}


def test_every_problem_code_is_reachable(tmp_path: Path) -> None:
    parse_codes = _parse_codes(tmp_path)
    check_codes = _check_codes()
    assert parse_codes == set(rw.PARSE_CODES)
    assert check_codes == set(rw.CHECK_CODES)
    assert set(rw.PROBLEM_CODES) == set(rw.PARSE_CODES) | set(rw.CHECK_CODES) | set(rw.THREAD_CODES) | set(
        rw.TRANSLATION_CODES
    )
    for code, info in rw.PROBLEM_CODES.items():
        assert info.kind in ("error", "warning", "problem", "note"), code
        assert info.tier in (
            "form",
            "record",
            "receipt",
            "integrity",
            "echo",
            "comprehension",
            "execution",
            "expiry",
            "executed",
            "thread",
            "translation",
        ), code


# ---------------------------------------------------------------- the documented differences, pinned


def test_difference_pay_agents() -> None:
    line = "RW1 AQ coordinator-1 p=pay from=coordinator to=desk need=ENUM opts=APPROVE+HOLD item=inv:1"
    assert rw.parse(line, "pay")[1] == []
    assert ref.parse(line, "pay")[1] == [
        "from=coordinator: not an agent named in profile pay",
        "to=desk: not an agent named in profile pay",
    ]


def test_difference_huge_integers_are_out_of_range_not_a_crash() -> None:
    line = "RW1 HO a-1 from=a to=b item=x:1 ask=DRAFT pri=" + "1" * 5000
    with pytest.raises(ValueError, match="Exceeds the limit"):
        ref.parse(line)
    [e] = rw.parse_line(line).errors
    assert e.code == "out-of-range"


def test_difference_lone_surrogates_digest() -> None:
    line = "RW1 HO a-1 from=a to=b item=x:1 ask=DRAFT // \ud800"
    assert ref.parse(line)[1] == rw.parse(line)[1] == []
    with pytest.raises(UnicodeEncodeError):
        ref.digest(line)
    assert len(rw.digest(line)) == 12


def test_difference_tuples_are_lists() -> None:
    record = {"keep": ("a", "b")}
    line = "RW1 HO x-1 from=x to=y item=i:1 ask=FIX keep=a+b"
    assert rw.check_ho(line, record)[0] == []
    assert ref.check_ho(line, record)[0] == ["record: keep mismatch: record ('a', 'b') vs HO a+b"]


def test_difference_malformed_twins_raise_form_error() -> None:
    with pytest.raises(KeyError):
        ref.encode({"id": "a-1"})
    with pytest.raises(rw.FormError):
        rw.encode({"id": "a-1"})


def test_difference_typed_api_names_the_core() -> None:
    assert rw.get_profile("core").is_core
    with pytest.raises(rw.FormError):
        rw.parse(HO, "core")
    with pytest.raises(ref.FormError):
        ref.parse(HO, "core")


def test_parse_takes_a_spec() -> None:
    """As the reference: a spec dict (load_profile's shape, perhaps edited) replaces the profile; a compiled
    Profile does too, without compiling per call."""
    for name in [None, "pay", "pform"]:
        spec = ref.load_profile(name)
        assert rw.parse(HO, spec=rw.load_profile(name)) == ref.parse(HO, spec=spec)
    edited = ref.load_profile("pay")
    edited["agents"] = {"scheduler"}
    edited["enums"]["cur"]["CHF"] = "Swiss francs"
    line = HO.replace("cur=GBP", "cur=CHF")
    assert rw.parse(line, spec=edited) == ref.parse(line, spec=edited)
    assert rw.parse(HO, spec=PAY) == ref.parse(HO, "pay")
    with pytest.raises(rw.FormError, match="not a profile spec"):
        rw.parse(HO, spec={"types": {}})


_plain = st.recursive(
    st.one_of(st.text(), st.integers(), st.booleans(), st.none()),
    lambda inner: st.lists(inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=5), _plain, max_size=6), st.text(), st.one_of(st.none(), st.text()))
def test_digest_is_sha256_of_the_canonical_json(slots: dict[str, Any], text: str, tail: str | None) -> None:
    """The canonical form written directly equals json.dumps(sort_keys, no whitespace, ensure_ascii=False)."""
    m = rw.Message(v="RW1", type="HO", id=text, from_="a", to=text, re=None, item=text, slots=slots, tail=tail)
    want = json.dumps(m.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert rw.message_digest(m) == hashlib.sha256(want.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    assert rw.digest(m.to_dict()) == rw.message_digest(m)
    assert twin_json(m.to_dict()) == json.dumps(m.to_dict(), ensure_ascii=False)
    floaty = rw.Message(v="RW1", type="HO", id="a-1", from_="a", to="b", slots={**slots, "f": 1.5})
    assert twin_json(floaty.to_dict()) == json.dumps(floaty.to_dict(), ensure_ascii=False)
    want = json.dumps(floaty.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert rw.message_digest(floaty) == hashlib.sha256(want.encode("utf-8", "surrogatepass")).hexdigest()[:12]
