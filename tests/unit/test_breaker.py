"""The dead-letter flood breaker: trips on the share of dead letters over a sliding window, pauses only if told."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from gatekeeper.config import BreakerSettings
from gatekeeper.consumers.breaker import Change, DeadLetterBreaker


def breaker(**kw: object) -> DeadLetterBreaker:
    base: dict[str, object] = {"ratio": 0.5, "window_seconds": 10.0, "min_lines": 20}
    base.update(kw)
    return DeadLetterBreaker(BreakerSettings(**base))  # type: ignore[arg-type]


def test_it_trips_once_the_window_has_enough_lines_and_the_share_passes_the_ratio() -> None:
    b = breaker()
    assert b.record(0.0, 10, ["check-ho"] * 10) is None  # 100 %, but only 10 lines: not enough to judge
    assert b.record(1.0, 10, ["check-rb"] * 2) is Change.TRIPPED  # 12 of 20
    assert b.open and not b.paused(1.0)  # action alert: it never pauses
    assert b.window(1.0).reasons == {"check-ho": 10, "check-rb": 2}
    assert b.record(2.0, 10, ["check-ho"] * 10) is None  # tripped already: one alert, not one per batch


def test_a_healthy_route_never_trips() -> None:
    b = breaker()
    for t in range(100):
        assert b.record(float(t), 50, ["invalid"] * 20) is None  # 40 %
    assert not b.open


def test_it_closes_when_the_share_falls_or_the_window_slides_past_the_flood() -> None:
    b = breaker()
    assert b.record(0.0, 40, ["invalid"] * 40) is Change.TRIPPED
    assert b.record(1.0, 200, []) is Change.CLOSED  # 40 of 240
    assert b.record(2.0, 400, ["invalid"] * 400) is Change.TRIPPED  # and it can trip again
    assert b.evaluate(12.5) is Change.CLOSED  # nothing in the window any more


def test_action_pause_pauses_for_its_time_then_lets_the_route_try_again() -> None:
    b = breaker(action="pause", pause_seconds=30.0)
    assert b.record(0.0, 40, ["invalid"] * 40) is Change.TRIPPED
    assert b.paused(0.0) and b.paused(29.9)
    assert b.evaluate(15.0) is None  # still paused, though the window is empty by now
    assert b.evaluate(30.0) is Change.CLOSED and not b.paused(30.0)


def test_a_disabled_breaker_counts_nothing() -> None:
    b = breaker(enabled=False)
    assert b.record(0.0, 1000, ["invalid"] * 1000) is None and not b.open


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.0, 3.0),  # seconds since the last call
            st.integers(0, 30),  # lines decided
            st.lists(st.sampled_from(["invalid", "check-ho", "check-rb", "gk.unauthorised"]), max_size=30),
        ),
        max_size=60,
    )
)
def test_the_window_is_what_its_buckets_hold(calls: list[tuple[float, int, list[str]]]) -> None:
    """The window's totals are kept as buckets come and go: at every step they are the sums of the lines and dead
    letters decided in the last ``window_seconds`` (counted here from scratch)."""
    b = breaker(window_seconds=5.0, min_lines=10**9)  # never trips: only the counting is under test
    seen: list[tuple[int, int, list[str]]] = []  # (second, lines, reasons)
    now = 0.0
    for step, lines, reasons in calls:
        now += step
        dead = reasons[:lines]
        b.record(now, lines, dead)
        if lines:
            seen.append((int(now), lines, dead))
        oldest = int(now - 5.0)
        live = [(n, r) for second, n, r in seen if second > oldest]
        w = b.window(now)
        assert (w.lines, w.dead) == (sum(n for n, _ in live), sum(len(r) for _, r in live))
        assert w.reasons == dict(Counter(x for _, r in live for x in r))
