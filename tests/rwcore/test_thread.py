"""The thread tracker: the reference check_thread's verdict, line by line, with state that survives a restart."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
import rogerwilco as rw
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rwcore import get_profile, parse_line
from rwcore._thread import STATE_VERSION, THREAD_CODES, HandoffView, ThreadTracker, check_thread
from rwcore._types import Message, Problem

NOW = "20261012T1000Z"


def _items(lines: Sequence[str], profile: str | None = None) -> list[tuple[int, Message | list[str] | None]]:
    """Number and parse the lines as the reference's check_thread does (with the reference's parser)."""
    out: list[tuple[int, Message | list[str] | None]] = []
    for n, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            out.append((n, None))
            continue
        msg, errors, _ = rw.parse(line, profile)
        out.append((n, errors if errors else Message.from_dict(msg)))
    return out


def _feed(t: ThreadTracker, items: Sequence[tuple[int, Message | list[str] | None]]) -> list[Problem]:
    streamed: list[Problem] = []
    for n, item in items:
        if item is None:
            continue
        if isinstance(item, Message):
            streamed += t.feed(item, n)
        else:
            streamed += t.feed_invalid(n, item)
    return streamed


def _track(lines: Sequence[str], profile: str | None = None) -> ThreadTracker:
    t = ThreadTracker()
    _feed(t, _items(lines, profile))
    return t


def _conformance_threads() -> list[dict[str, object]]:
    from pathlib import Path

    path = Path(rw.__file__).parent / "tests" / "conformance.jsonl"
    cases = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return [c for c in cases if c["kind"] == "thread"]


# ---------------------------------------------------------------- the conformance suite's thread cases


@pytest.mark.parametrize("case", _conformance_threads(), ids=lambda c: str(c["id"]))
def test_conformance_thread_cases(case: dict[str, object]) -> None:
    lines = case["lines"]
    assert isinstance(lines, list)
    now = str(case["now"])
    profile = case.get("profile")
    assert profile is None or isinstance(profile, str)
    want = rw.check_thread(lines, profile, now)
    assert _track(lines, profile).report(now).compat() == want
    assert check_thread(lines, profile, now) == want
    problems, _ = want
    assert bool(problems) == (case["expect"] == "mismatch")


# ---------------------------------------------------------------- each rule, with its code


PAY_HO = "RW1 HO scheduler-1 from=scheduler to=payer item=inv:MD-2026-057 ask=DRAFT"
CX = "RW1 CX scheduler-2 re=scheduler-1 from=scheduler to=payer item=inv:MD-2026-057 why=REVOKED"
ACK = "RW1 AN payer-1 re=scheduler-2 from=payer to=scheduler val=Y"
DN_OK = "RW1 DN payer-2 re=scheduler-1 from=payer to=scheduler item=inv:MD-2026-057 out=OK"
DN_NOOP = "RW1 DN payer-3 re=scheduler-1 from=payer to=scheduler item=inv:MD-2026-057 out=NOOP"
UN = "RW1 UN payer-4 re=scheduler-1 from=payer to=scheduler why=BUSY"


def _codes(ps: Sequence[Problem]) -> list[str]:
    return [p.code for p in ps]


def test_closed_twice_streams_and_reports() -> None:
    t = ThreadTracker()
    items = _items([PAY_HO, DN_OK, UN])
    assert t.feed(items[0][1], 1) == ()  # type: ignore[arg-type]
    assert t.feed(items[1][1], 2) == ()  # type: ignore[arg-type]
    (p,) = t.feed(items[2][1], 3)  # type: ignore[arg-type]
    assert p.code == "thread-closed-twice" and p.tier == "thread"
    assert p.message == "scheduler-1: closed 2 times (DN payer-2, UN payer-4); a handoff closes once"
    assert (p.expected, p.got) == ("1", "2")
    assert t.report(NOW).problems == (p,)
    view = t.handoff("scheduler-1")
    assert view is not None and view.closed and view.closes == (("DN", "payer-2"), ("UN", "payer-4"))
    assert list(t.open_handoffs()) == []


def test_done_after_cancel() -> None:
    t = ThreadTracker()
    streamed = _feed(t, _items([PAY_HO, CX, DN_NOOP, DN_OK]))
    assert _codes(streamed) == ["thread-closed-twice", "thread-done-after-cancel"]
    assert streamed[1].message == (
        "scheduler-1: payer-2 reports the act done after CX scheduler-2 cancelled it; decide whether to UNDO it"
    )
    assert (streamed[1].slot, streamed[1].expected, streamed[1].got) == ("out", "NOOP", "OK")
    v = t.handoff("scheduler-1")
    assert v is not None and v.done_after_cancel and v.cancelled and not v.acked


def test_cancel_wrong_agent_and_no_handoff() -> None:
    lines = [
        PAY_HO,
        "RW1 CX auditor-1 re=scheduler-1 from=auditor to=payer item=inv:MD-2026-057 why=REVOKED",
        "RW1 CX auditor-2 re=nobody-1 from=auditor to=payer item=inv:MD-2026-057 why=REVOKED",
    ]
    t = ThreadTracker()
    streamed = _feed(t, _items(lines))
    assert _codes(streamed) == ["thread-cancel-wrong-agent"]
    assert (streamed[0].expected, streamed[0].got) == ("scheduler->payer", "auditor->payer")
    r = t.report(NOW)
    assert _codes(r.problems) == ["thread-cancel-wrong-agent", "thread-cancel-no-handoff"]
    assert r.problems[1].message == "line 3: CX auditor-2 re=nobody-1 does not name an HO in this thread"
    assert _codes(r.notes) == ["thread-cancel-unacked", "thread-open"]
    assert r.compat() == rw.check_thread(lines, None, NOW)


def test_cancel_naming_a_later_ho_is_not_a_cancel_of_it_but_names_an_ho() -> None:
    lines = [CX, PAY_HO]
    assert _track(lines).report(NOW).compat() == rw.check_thread(lines, None, NOW)
    assert _track(lines).report(NOW).compat() == ([], ["scheduler-1: open"])


def test_acknowledged_cancel_closes() -> None:
    t = _track([PAY_HO, CX, ACK])
    assert t.report(NOW).compat() == ([], [])
    v = t.handoff("scheduler-1")
    assert v is not None and v.acked and v.closed and v.cancels == ("scheduler-2",)


def test_ack_before_the_cancel_does_not_count() -> None:
    lines = [PAY_HO, ACK, CX]
    assert _track(lines).report(NOW).compat() == rw.check_thread(lines, None, NOW)
    assert _codes(_track(lines).report(NOW).notes) == ["thread-cancel-unacked", "thread-open"]


def test_orphaned_by_exp_and_due() -> None:
    lines = [
        PAY_HO + " exp=20261012T0900Z",
        "RW1 HO scheduler-5 from=scheduler to=payer item=inv:1 ask=DRAFT due=20261011",
    ]
    r = _track(lines).report(NOW)
    assert _codes(r.problems) == ["thread-orphaned", "thread-orphaned"]
    assert (r.problems[0].slot, r.problems[0].got) == ("exp", NOW)
    assert r.problems[1].slot == "due"
    assert r.compat() == rw.check_thread(lines, None, NOW)
    # at a time before both limits they are open
    assert _codes(_track(lines).report("20261011T0800Z").notes) == ["thread-open", "thread-open"]


def test_invalid_and_skipped_lines_keep_their_numbers() -> None:
    lines = ["", "# comment", "RW1 ZZ x-1", PAY_HO, "   ", "RW1 CX scheduler-2 re=scheduler-1 from=scheduler"]
    t = _track(lines)
    r = t.report(NOW)
    assert r.compat() == rw.check_thread(lines, None, NOW)
    assert _codes(r.problems) == ["thread-invalid-line", "thread-invalid-line"]
    assert r.problems[0].message.startswith("line 3: ")
    assert r.problems[1].message.startswith("line 6: ")
    assert t.last_line == 6


def test_a_line_that_is_not_utf8_is_parsed_by_python_as_before() -> None:
    """The whole-thread check parses and feeds each line natively; a line Python cannot give as UTF-8 (a lone
    surrogate) is left to the Python parse, and is taken as that parse reads it, its number kept."""
    bad = PAY_HO.replace("scheduler-1", "scheduler-9").replace("item=", "item=\ud800", 1)
    tracker = ThreadTracker()
    assert tracker._t.feed_line(bad, 1, get_profile(None).grammar, lambda name: get_profile(name)) is False
    assert len(tracker) == 0 and tracker.last_line == 0  # nothing taken
    lines = [PAY_HO, bad, "RW1 ZZ x-1"]
    want = ThreadTracker()
    for n, line in enumerate(lines, 1):
        parsed = parse_line(line)
        if parsed.message is None or parsed.errors:
            want.feed_invalid(n, parsed.errors)
        else:
            want.feed(parsed.message, n)
    assert len(want) == 2  # the surrogate's line is a handoff
    assert check_thread(lines, None, NOW) == want.report(NOW).compat()


def test_line_numbers_must_increase() -> None:
    t = ThreadTracker()
    (_, msg), *_ = _items([PAY_HO])
    assert isinstance(msg, Message)
    t.feed(msg, 3)
    with pytest.raises(ValueError):
        t.feed(msg, 3)
    t.skip()
    t.feed(msg)  # defaults to the next line
    assert t.last_line == 5


def test_views_and_open_handoffs() -> None:
    lines = [
        PAY_HO + " due=20261020 exp=20261020T1200Z",
        "RW1 HO scheduler-7 from=scheduler to=payer item=inv:2 ask=DRAFT",
    ]
    t = _track([*lines, DN_OK])
    views = list(t.open_handoffs())
    assert [v.id for v in views] == ["scheduler-7"]
    first = t.handoff("scheduler-1")
    assert first == HandoffView(
        id="scheduler-1",
        sender="scheduler",
        receiver="payer",
        item="inv:MD-2026-057",
        exp="20261020T1200Z",
        due="20261020",
        line_no=1,
        closes=(("DN", "payer-2"),),
        cancels=(),
        acked=False,
        closed=True,
        cancelled=False,
        done_after_cancel=False,
    )
    assert t.handoff("nobody-1") is None
    assert len(t) == 2


def test_state_round_trip_and_version() -> None:
    lines = [PAY_HO, "RW1 ZZ x-1", CX, DN_OK, "RW1 CX auditor-1 re=scheduler-1 from=auditor to=payer item=i"]
    t = _track(lines)
    state = t.to_state()
    assert state["v"] == STATE_VERSION
    back = ThreadTracker.from_state(json.loads(json.dumps(state)))
    assert back.to_state() == state
    assert back.report(NOW) == t.report(NOW)
    with pytest.raises(ValueError):
        ThreadTracker.from_state({**state, "v": STATE_VERSION + 1})
    with pytest.raises(ValueError):
        ThreadTracker.from_state({"v": STATE_VERSION, "ho": [["x"]]})


def test_empty_state_is_small() -> None:
    assert json.dumps(ThreadTracker().to_state()) == '{"v": 1, "n": 0, "ho": []}'


def test_feed_is_linear() -> None:
    """10k handoffs, each closed: the tracker keeps no list it rescans (a quadratic run would take minutes)."""
    t = ThreadTracker()
    n = 0
    for i in range(1, 10001):
        n += 1
        t.feed(Message(v="RW1", type="HO", id=f"a-{i}", from_="a", to="b", item="x", slots={"ask": "DRAFT"}), n)
        n += 1
        t.feed(
            Message(v="RW1", type="DN", id=f"b-{i}", from_="b", to="a", re=f"a-{i}", item="x", slots={"out": "OK"}), n
        )
    assert t.report(NOW).compat() == ([], [])
    assert list(t.open_handoffs()) == []


# ---------------------------------------------------------------- properties against the reference

# conversations: handoffs and every reply the closing rule cares about, some invalid, sometimes shuffled

AGENTS = ("alice", "bob", "carol")
NOWS = ("20261011T2359Z", "20261012T0900Z", "20261012T1000Z", "20261013T0000Z")
EXPS = ("20261012T0900Z", "20261012T1000Z", "20261012T1100Z", "20261011T0000Z")
DUES = ("20261011", "20261012", "20261013")
GARBAGE = (
    "hello world",
    "RW1 ZZ alice-9 from=alice to=bob",
    "RW1 HO bad id from=alice to=bob item=x ask=DRAFT",
    "RW2 HO alice-9 from=alice to=bob item=x ask=DRAFT",
    "RW1 HO alice-77 from=alice to=bob item=x ask=NOPE",
    "RW1 DN bob-77 re=alice-1 from=bob to=alice item=x out=MAYBE",
    "RW1 CX alice-78 from=alice to=bob item=x",
    "RW1",
)
SKIPPED = ("", "   ", "# a comment", "  # indented comment")


@st.composite
def conversations(draw: st.DrawFn, max_events: int = 24) -> list[str]:
    """A conversation: a list of lines, possibly shuffled, with blank, comment and invalid lines mixed in."""
    counters = dict.fromkeys(AGENTS, 0)
    hos: list[tuple[str, str, str]] = []  # (id, from, to)
    cxs: list[tuple[str, str]] = []  # (id, ho receiver)
    ids: list[str] = []
    lines: list[str] = []

    def new_id(agent: str) -> str:
        if ids and draw(st.integers(0, 19)) == 0:  # an id used again, sometimes by another type of line
            n = draw(st.integers(1, max(1, counters[agent])))
        else:
            counters[agent] += 1
            n = counters[agent]
        i = f"{agent}-{n}"
        ids.append(i)
        return i

    def pick_ho() -> tuple[str, str, str]:
        if hos and draw(st.integers(0, 9)) > 0:
            return draw(st.sampled_from(hos))
        a, b = draw(st.permutations(AGENTS))[:2]
        return (f"{a}-{draw(st.integers(1, 6))}", a, b)  # may name no HO at all

    def agent(default: str) -> str:
        return default if draw(st.integers(0, 4)) > 0 else draw(st.sampled_from(AGENTS))

    n_events = draw(st.integers(0, max_events))
    for _ in range(n_events):
        kind = draw(
            st.sampled_from(
                ["HO", "HO", "HO", "RB", "DN", "DN", "UN", "FL", "CX", "CX", "AN", "AN", "ST", "BAD", "SKIP"]
            )
        )
        if kind == "HO" or (not hos and kind not in ("BAD", "SKIP")):
            a, b = draw(st.permutations(AGENTS))[:2]
            hid = new_id(a)
            slots = []
            if hos and draw(st.booleans()) and draw(st.booleans()):
                slots.append(f"re={draw(st.sampled_from(hos))[0]}")
            slots += [f"from={a}", f"to={b}", "item=gh:x/y#1", "ask=DRAFT"]
            if draw(st.booleans()):
                slots.append(f"due={draw(st.sampled_from(DUES))}")
            if draw(st.booleans()):
                slots.append(f"exp={draw(st.sampled_from(EXPS))}")
            hos.append((hid, a, b))
            lines.append(f"RW1 HO {hid} " + " ".join(slots))
        elif kind == "RB":
            hid, a, b = pick_ho()
            lines.append(f"RW1 RB {new_id(b)} re={hid} from={b} to={a} item=gh:x/y#1 ask=DRAFT")
        elif kind in ("DN", "UN", "FL"):
            hid, a, b = pick_ho()
            frm = agent(b)
            to = a if frm != a else b
            rid = new_id(frm)
            if kind == "DN":
                out = draw(st.sampled_from(["OK", "NOOP", "PARTIAL"]))
                lines.append(f"RW1 DN {rid} re={hid} from={frm} to={to} item=gh:x/y#1 out={out}")
            elif kind == "UN":
                lines.append(f"RW1 UN {rid} re={hid} from={frm} to={to} why=BUSY")
            else:
                lines.append(f"RW1 FL {rid} re={hid} from={frm} to={to} item=gh:x/y#1 why=ERR")
        elif kind == "CX":
            hid, a, b = pick_ho()
            if draw(st.integers(0, 9)) == 0 and ids:
                hid = draw(st.sampled_from(ids))  # names some line, maybe not an HO
            frm = agent(a)
            to = agent(b)
            if to == frm:
                to = next(x for x in AGENTS if x != frm)
            cid = new_id(frm)
            cxs.append((cid, b))
            lines.append(f"RW1 CX {cid} re={hid} from={frm} to={to} item=gh:x/y#1 why=REVOKED")
        elif kind == "AN":
            if cxs and draw(st.integers(0, 4)) > 0:
                cid, b = draw(st.sampled_from(cxs))
            else:
                cid, b = (draw(st.sampled_from(ids)) if ids else "alice-1"), draw(st.sampled_from(AGENTS))
            frm = agent(b)
            to = next(x for x in AGENTS if x != frm)
            val = draw(st.sampled_from(["Y", "Y", "N", "later"]))
            lines.append(f"RW1 AN {new_id(frm)} re={cid} from={frm} to={to} val={val}")
        elif kind == "ST":
            hid, a, b = pick_ho()
            lines.append(f"RW1 ST {new_id(b)} re={hid} from={b} to={a} item=gh:x/y#1 pct=50")
        elif kind == "BAD":
            lines.append(draw(st.sampled_from(GARBAGE)))
        else:
            lines.append(draw(st.sampled_from(SKIPPED)))
    if lines and draw(st.integers(0, 3)) == 0:
        lines = list(draw(st.permutations(lines)))
    return lines


nows = st.sampled_from(NOWS)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=conversations(), now=nows)
def test_tracker_equals_reference(lines: list[str], now: str) -> None:
    want = rw.check_thread(lines, None, now)
    t = ThreadTracker()
    streamed = _feed(t, _items(lines))
    got = t.report(now)
    assert got.compat() == want
    for p in got.problems:
        assert THREAD_CODES[p.code].kind == "problem" and p.tier == "thread"
    for n in got.notes:
        assert THREAD_CODES[n.code].kind == "note" and n.tier == "thread"
    # what feed streamed is what the report holds, bar the count in a close listed more than twice
    report_codes = {p.code for p in got.problems}
    assert {p.code for p in streamed} <= report_codes
    # open_handoffs agrees with the notes and problems about open handoffs
    assert {v.id for v in t.open_handoffs()} == {v.id for v in t.handoffs() if not v.closed}
    # flags() is the latest view's closed and cancelled, for every id the lines use and one they do not
    for id in {v.id for v in t.handoffs()} | {"no-such-ho"}:
        view = t.handoff(id)
        assert t.flags(id) == (None if view is None else (view.closed, view.cancelled))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=conversations(), now=nows)
def test_check_thread_equals_reference(lines: list[str], now: str) -> None:
    assert check_thread(lines, None, now) == rw.check_thread(lines, None, now)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=conversations(max_events=16), now=nows, data=st.data())
def test_state_round_trip_at_every_prefix(lines: list[str], now: str, data: st.DataObject) -> None:
    items = _items(lines)
    whole = ThreadTracker()
    _feed(whole, items)
    want = whole.report(now)
    for cut in range(len(items) + 1):
        first = ThreadTracker()
        _feed(first, items[:cut])
        state = json.loads(json.dumps(first.to_state()))
        resumed = ThreadTracker.from_state(state)
        assert resumed.to_state() == first.to_state()
        _feed(resumed, items[cut:])
        assert resumed.report(now) == want
        assert resumed.to_state() == whole.to_state()


@given(lines=conversations(), now=nows)
def test_a_partial_tracker_fed_line_by_line_equals_the_whole_one(lines: list[str], now: str) -> None:
    """The gatekeeper's per-entry state: before each line, a tracker holding only the handoffs that line names (its
    ``re=``, and for an answer to a CX the handoff that CX cancels) gives the same problems, and leaves those
    handoffs exactly as the whole tracker does. Ids are unique in a gatekeeper conversation: only such are tested."""
    items = [(n, m) for n, m in _items(lines) if isinstance(m, Message)]
    ids = [m.id for _, m in items]
    if len(set(ids)) != len(ids):
        return
    whole = ThreadTracker()
    records: dict[str, list[object]] = {}  # what a store of per-handoff records would hold
    cx_target: dict[str, str] = {}  # a CX's re=, as the gatekeeper remembers every line's re=
    last = 0
    for n, m in items:
        named = {m.id} | ({m.re} if m.re else set())
        if m.type == "AN" and m.re in cx_target:
            named.add(cx_target[m.re])
        part = ThreadTracker.partial(
            [json.loads(json.dumps(records[i])) for i in sorted(named) if i in records], last_line=last
        )
        assert part.probe(m, n) == whole.probe(m, n)
        assert part.feed(m, n) == whole.feed(m, n)
        for i in named:
            got = part.handoff_state(i)
            assert got == whole.handoff_state(i)
            if got is not None:
                records[i] = got
        if m.type == "CX" and m.re:
            cx_target[m.id] = m.re
        last = n
    # and the whole report, over the handoffs held, is the whole tracker's (no cancel of nothing, no invalid line)
    everything = ThreadTracker.partial(records.values(), last_line=last)
    assert [p for p in everything.report(now).problems if p.code != "thread-cancel-no-handoff"] == [
        p for p in whole.report(now).problems if p.code not in ("thread-cancel-no-handoff", "thread-invalid-line")
    ]
