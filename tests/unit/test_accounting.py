"""``account()`` counts a finished batch: the metric values it leaves, what it returns to the dead-letter breaker and
what it logs, and that each counter child is added to once per batch however many of its lines share its labels
(``Tally``), while the latency histogram still observes every line."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from gatekeeper.config import Settings
from gatekeeper.consumers.accounting import Children, account
from gatekeeper.consumers.deciding import Batch, RouteRuntime
from gatekeeper.consumers.holds import Pending
from gatekeeper.consumers.outcomes import Outcome, OutcomeKind, Source
from gatekeeper.consumers.sending import Send
from gatekeeper.logs import configure_logging
from gatekeeper.metrics import Metrics
from gatekeeper.policy import Decision, Reason, Verdict
from gatekeeper.store import MemoryStore
from rwcore import Message, Problem, _native

NOW = 1_790_000_000.0
ORPHANED = "thread-orphaned"  # one of HANDOFF_PROBLEM_CODES
HO = Message(v="RW1", type="HO", id="scheduler-1", from_="scheduler", to="payer")
RB = Message(v="RW1", type="RB", id="payer-1", from_="payer", to="scheduler", re="scheduler-1")
FWD, DL, AL = Verdict.FORWARD, Verdict.DEAD_LETTER, Verdict.ALERT


def _routes() -> dict[str, RouteRuntime]:
    settings = Settings.model_validate(
        {
            "routes": [
                {"input": "in", "output": "out", "dead_letter": "dlq", "alerts": "al", "profile": "pay"},
                {
                    "input": "dry",
                    "output": "o2",
                    "dead_letter": "d2",
                    "alerts": "a2",
                    "profile": "pay",
                    "mode": "dry-run",
                },
            ]
        }
    )
    return {r.input: RouteRuntime.of(r, settings, MemoryStore()) for r in settings.routes}


def _line(route: str, offset: int, age: float = 0.5, forced: str | None = None) -> Pending:
    source = Source(route, 0, offset, f"RW1 line {offset}".encode(), key=b"c1")
    return Pending(source, route, "c1", NOW - age, forced=forced)


def _send(route: str, kind: OutcomeKind, *, acked: bool = True, reason: bytes | None = None) -> Send:
    headers = (("gk.notice.reason", reason),) if reason is not None else ()
    outcome = Outcome(kind, "t", b"c1", b"v", headers, Source(route, 0, 0, b"v"))
    return Send(outcome, route, acked=acked)


def _batch() -> Batch:
    problems = (Problem(ORPHANED, "orphaned"), Problem("integrity", "not a handoff problem"), Problem(ORPHANED, "x"))
    done = [
        (_line("in", 0, age=0.002), Decision(FWD, None, message=HO)),
        (_line("in", 1, age=0.02), Decision(FWD, None, message=HO)),
        (_line("in", 2), Decision(FWD, None, message=RB)),
        (_line("in", 3), Decision(DL, Reason.CHECK_HO, problems=problems, message=HO)),
        (_line("in", 4), Decision(DL, Reason.INVALID)),
        (_line("in", 5), Decision(DL, Reason.CHECK_HO, problems=problems, message=HO, repeated=True)),
        (_line("in", 6), Decision(DL, Reason.INTERNAL_ERROR)),
        (_line("in", 7, forced="conversation"), Decision(AL, Reason.CHECK_RB, message=RB)),
        (_line("in", 8, forced="conversation"), Decision(DL, Reason.CHECK_HO, message=HO, raise_alert=True)),
        (_line("in", 9, forced="partition", age=-1.0), Decision(DL, Reason.INVALID, notes=problems[:1])),
        (_line("dry", 0), Decision(DL, Reason.CHECK_HO, message=HO)),
        (_line("dry", 1), Decision(DL, Reason.CHECK_HO, message=HO)),
        (_line("dry", 2), Decision(FWD, None, message=HO, repeated=True)),
    ]
    sends = [
        _send("in", OutcomeKind.OUTPUT),
        _send("in", OutcomeKind.OUTPUT),
        _send("in", OutcomeKind.OUTPUT, acked=False),  # not acknowledged: not counted
        _send("in", OutcomeKind.DEAD_LETTER),
        _send("in", OutcomeKind.NOTICE, reason=b"check-ho"),
        _send("in", OutcomeKind.NOTICE, reason=b"check-ho"),
        _send("in", OutcomeKind.NOTICE),  # no reason header: "none"
        _send("dry", OutcomeKind.OUTPUT),
    ]
    return Batch([p for p, _ in done], sends=sends, done=done)


#: (sample name, labels) -> value after accounting ``_batch()`` once
EXPECTED = {
    ("gatekeeper_lines_total", (("route", "in"), ("type", "HO"), ("verdict", "forward"))): 2,
    ("gatekeeper_lines_total", (("route", "in"), ("type", "RB"), ("verdict", "forward"))): 1,
    ("gatekeeper_lines_total", (("route", "in"), ("type", "HO"), ("verdict", "dead-letter"))): 3,
    ("gatekeeper_lines_total", (("route", "in"), ("type", "none"), ("verdict", "dead-letter"))): 3,
    ("gatekeeper_lines_total", (("route", "in"), ("type", "RB"), ("verdict", "alert"))): 1,
    ("gatekeeper_lines_total", (("route", "dry"), ("type", "HO"), ("verdict", "forward"))): 3,
    ("gatekeeper_repeated_total", (("route", "in"),)): 1,
    ("gatekeeper_repeated_total", (("route", "dry"),)): 1,
    ("gatekeeper_dead_letters_total", (("route", "in"), ("reason", "check-ho"))): 3,
    ("gatekeeper_dead_letters_total", (("route", "in"), ("reason", "invalid"))): 2,
    ("gatekeeper_dead_letters_total", (("route", "in"), ("reason", "internal-error"))): 1,
    ("gatekeeper_dry_run_would_dead_letter_total", (("route", "dry"), ("reason", "check-ho"))): 2,
    ("gatekeeper_alerts_total", (("route", "in"), ("reason", "check-rb"))): 1,
    ("gatekeeper_alerts_total", (("route", "in"), ("reason", "check-ho"))): 1,
    ("gatekeeper_handoff_problems_total", (("route", "in"), ("code", ORPHANED))): 3,  # not the repeated line's
    ("gatekeeper_internal_errors_total", (("route", "in"), ("stage", "decide"))): 1,
    ("gatekeeper_holds_forced_total", (("route", "in"), ("bound", "conversation"))): 2,
    ("gatekeeper_holds_forced_total", (("route", "in"), ("bound", "partition"))): 1,
    ("gatekeeper_outcomes_total", (("route", "in"), ("kind", "output"))): 2,
    ("gatekeeper_outcomes_total", (("route", "in"), ("kind", "dead-letter"))): 1,
    ("gatekeeper_outcomes_total", (("route", "in"), ("kind", "notice"))): 3,
    ("gatekeeper_outcomes_total", (("route", "dry"), ("kind", "output"))): 1,
    ("gatekeeper_refusal_notices_total", (("route", "in"), ("reason", "check-ho"))): 2,
    ("gatekeeper_refusal_notices_total", (("route", "in"), ("reason", "none"))): 1,
    # every line's latency, the repeated lines' too (a negative age counts as 0)
    ("gatekeeper_line_seconds_count", (("route", "in"),)): 10,
    ("gatekeeper_line_seconds_count", (("route", "dry"),)): 3,
    ("gatekeeper_line_seconds_bucket", (("route", "in"), ("le", "0.0025"))): 2,
    ("gatekeeper_line_seconds_bucket", (("route", "in"), ("le", "0.025"))): 3,
    ("gatekeeper_line_seconds_bucket", (("route", "in"), ("le", "0.5"))): 10,
}
COUNTERS = {
    "lines",
    "repeated",
    "dead_letters",
    "would_dead_letter",
    "alerts",
    "handoff_problems",
    "internal_errors",
    "holds_forced",
    "outcomes",
    "refusal_notices",
}


def _samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every nonzero sample of the registry (not the ``_created`` timestamps), labels sorted."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in metrics.registry.collect()
        for s in f.samples
        if s.value and not s.name.endswith("_created")
    }


class Recording(Children):
    """``Children`` that records each ``inc`` and ``observe`` made on the children it hands out."""

    def __init__(self, metrics: Metrics) -> None:
        super().__init__()
        self.attr = {id(v): k for k, v in vars(metrics).items()}
        self.calls: list[tuple[str, str, tuple[str, ...], float]] = []  # (method, metric attribute, labels, amount)

    def __call__(self, metric: Any, *labels: str) -> Any:
        return _Spy(super().__call__(metric, *labels), self.attr[id(metric)], labels, self.calls)


class _Spy:
    def __init__(self, real: Any, attr: str, labels: tuple[str, ...], calls: list[Any]) -> None:
        self.real, self.attr, self.labels, self.calls = real, attr, labels, calls

    def inc(self, amount: float = 1) -> None:
        self.calls.append(("inc", self.attr, self.labels, amount))
        self.real.inc(amount)

    def observe(self, amount: float) -> None:
        self.calls.append(("observe", self.attr, self.labels, amount))
        self.real.observe(amount)


def test_a_batch_leaves_the_metric_values_of_its_lines_and_outcomes() -> None:
    metrics = Metrics()
    decided = account(_batch(), _routes(), metrics, Children(), NOW)
    samples = _samples(metrics)
    for (name, labels), value in EXPECTED.items():
        assert samples.get((name, tuple(sorted(labels)))) == value, (name, labels)
    # no other counter moved, no other series appeared
    counted = {k: v for k, v in samples.items() if k[0].endswith("_total")}
    assert counted == {(n, tuple(sorted(labels))): v for (n, labels), v in EXPECTED.items() if n.endswith("_total")}
    assert metrics.registry.get_sample_value("gatekeeper_line_seconds_sum", {"route": "dry"}) == pytest.approx(1.5)
    # per route: the lines decided now (repeats are not) and the reasons of the dead-lettered, in their order
    assert decided == {
        "in": (9, ["check-ho", "invalid", "internal-error", "check-ho", "invalid"]),
        "dry": (2, ["check-ho", "check-ho"]),
    }


def test_a_second_batch_adds_to_the_first() -> None:
    metrics, child = Metrics(), Children()
    routes = _routes()
    account(_batch(), routes, metrics, child, NOW)
    account(_batch(), routes, metrics, child, NOW)
    samples = _samples(metrics)
    for (name, labels), value in EXPECTED.items():
        assert samples.get((name, tuple(sorted(labels)))) == 2 * value, (name, labels)


def test_each_counter_child_is_added_to_once_per_batch() -> None:
    metrics = Metrics()
    child = Recording(metrics)
    account(_batch(), _routes(), metrics, child, NOW)
    incs = [(attr, labels) for method, attr, labels, _ in child.calls if method == "inc"]
    assert len(incs) == len(set(incs))  # one inc per child, however many lines share its labels
    assert {attr for attr, _ in incs} == COUNTERS
    amounts = {(attr, labels): n for method, attr, labels, n in child.calls if method == "inc"}
    assert amounts[("lines", ("in", "none", "dead-letter"))] == 3
    assert amounts[("handoff_problems", ("in", ORPHANED))] == 3
    assert amounts[("outcomes", ("in", "notice"))] == 3
    assert sum(amounts.values()) == sum(n for (name, _), n in EXPECTED.items() if name.endswith("_total"))
    assert not [c for c in child.calls if c[0] == "observe"]  # the latencies are observed a batch at a time


def test_dead_letters_and_alerts_are_logged_one_by_one(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="gatekeeper.consumers.loop"):
        account(_batch(), _routes(), Metrics(), Children(), NOW)
    logged = [(r.levelname, r.getMessage(), r.__dict__["route"], r.__dict__["offset"]) for r in caplog.records]
    assert logged == [
        ("INFO", "line dead-letter", "in", 3),
        ("INFO", "line dead-letter", "in", 4),
        ("INFO", "line dead-letter", "in", 5),
        ("INFO", "line dead-letter", "in", 6),
        ("WARNING", "line alert", "in", 7),
        ("WARNING", "line dead-letter", "in", 8),
        ("INFO", "line dead-letter", "in", 9),
        ("INFO", "line would dead-letter (dry-run)", "dry", 0),
        ("INFO", "line would dead-letter (dry-run)", "dry", 1),
    ]


def test_a_dead_letter_s_json_log_record_has_the_fields_the_monitoring_page_shows() -> None:
    stream = io.StringIO()
    handler = configure_logging("json", "INFO", stream)
    try:
        account(_batch(), _routes(), Metrics(), Children(), NOW)
    finally:
        logging.getLogger().removeHandler(handler)
    logged = json.loads(stream.getvalue().splitlines()[0])
    page = (Path(__file__).resolve().parents[2] / "docs/monitoring.md").read_text(encoding="utf-8")
    example = page.split("\n\n    {", 1)[1].split("\n\n", 1)[0]
    shown = json.loads("{" + " ".join(ln.strip() for ln in example.splitlines()))
    assert list(logged) == list(shown)  # the same fields, in the same order
    assert logged["msg"] == "line dead-letter" and logged["level"] == "info"


def test_what_was_counted_before_a_line_that_raises_is_added() -> None:
    metrics = Metrics()
    b = _batch()
    b.done.insert(2, (_line("gone", 0), Decision(FWD, None, message=HO)))  # a route not configured: KeyError
    with pytest.raises(KeyError):
        account(b, _routes(), metrics, Children(), NOW)
    lines = {"route": "in", "type": "HO", "verdict": "forward"}
    assert metrics.registry.get_sample_value("gatekeeper_lines_total", lines) == 2
    outcomes = {"route": "in", "kind": "notice"}
    assert metrics.registry.get_sample_value("gatekeeper_outcomes_total", outcomes) == 3
    assert (
        metrics.registry.get_sample_value("gatekeeper_dead_letters_total", {"route": "in", "reason": "invalid"}) is None
    )


def test_the_plainly_forwarded_lines_are_counted_in_one_call_and_the_others_are_left_in_their_places() -> None:
    """``_native.count_done``: every line's latency by route (none below zero), the plain forwards by (route, type)
    whatever the routes' interleaving and however their type strings are made, the other lines' places in order."""
    ho_again = Message(v="RW1", type="".join(["H", "O"]), id="s-2", from_="s", to="p")  # an equal, distinct str
    done = [
        (_line("a", 0, age=0.25), Decision(FWD, None, message=HO)),
        (_line("b", 0, age=0.5), Decision(FWD, None, message=ho_again)),
        (_line("a", 1, age=-2.0), Decision(FWD, None)),  # no message: "none"
        (_line("a", 2), Decision(DL, Reason.INVALID)),
        (_line("b", 1), Decision(FWD, None, message=HO, repeated=True)),
        (_line("a", 3), Decision(FWD, None, message=ho_again)),
        (_line("a", 4, forced="partition"), Decision(FWD, None, message=HO)),
        (_line("b", 2), Decision(FWD, None, message=HO, notes=(Problem(ORPHANED, "x"),))),
        (_line("b", 3), Decision(AL, Reason.CHECK_RB, message=RB)),
        (_line("a", 5), Decision(FWD, None, message=RB, raise_alert=True)),
    ]
    seconds, plain, others = _native.count_done(done, NOW, FWD)
    assert seconds == {"a": [0.25, 0.0, 0.5, 0.5, 0.5, 0.5], "b": [0.5, 0.5, 0.5, 0.5]}
    assert plain == {("a", "HO"): 2, ("b", "HO"): 1, ("a", "none"): 1}
    assert others == [3, 4, 6, 7, 8, 9]
    assert _native.count_done([], NOW, FWD) == ({}, {}, [])
