"""The "Now" chart's arithmetic: counters sampled from the worker's metrics text become rates per verdict and counts
per reason over the window; a counter that went down (a restarted worker) counts from zero; the SVG escapes."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, generate_latest

from gatekeeper.console.history import LineRates, chart_svg, counters_of


def _text(lines: dict[tuple[str, str, str], float], dead: dict[tuple[str, str], float]) -> bytes:
    reg = CollectorRegistry()
    c = Counter("gatekeeper_lines", "", ["route", "type", "verdict"], registry=reg)
    d = Counter("gatekeeper_dead_letters", "", ["route", "reason"], registry=reg)
    for labels, v in lines.items():
        c.labels(*labels).inc(v)
    for labels, v in dead.items():
        d.labels(*labels).inc(v)
    return generate_latest(reg)


def test_counters_are_summed_over_the_type_and_kept_apart_by_route() -> None:
    text = _text(
        {("a", "HO", "forward"): 3, ("a", "RB", "forward"): 2, ("b", "HO", "forward"): 7}, {("a", "no-record"): 1}
    )
    got = counters_of(text)
    assert got[("a", "verdict", "forward")] == 5 and got[("b", "verdict", "forward")] == 7
    assert got[("a", "reason", "no-record")] == 1


def test_rates_per_interval_and_reasons_over_the_window() -> None:
    rates = LineRates(window=3600, every=10)
    rates.add(1000.0, {("a", "verdict", "forward"): 10, ("a", "reason", "check-rb"): 1})
    rates.add(
        1010.0, {("a", "verdict", "forward"): 30, ("a", "verdict", "dead-letter"): 5, ("a", "reason", "check-rb"): 6}
    )
    rates.add(
        1020.0, {("a", "verdict", "forward"): 4, ("a", "verdict", "dead-letter"): 5, ("a", "reason", "check-rb"): 6}
    )
    series = {s.label: s.points for s in rates.series("a")}
    assert series["forward"] == ((1010.0, 2.0), (1020.0, 0.4))  # 20 in 10 s; then the worker restarted: 4 from zero
    assert series["dead-letter"] == ((1010.0, 0.5), (1020.0, 0.0))
    assert rates.reasons("a") == [("check-rb", 5)]
    assert rates.series("b") == [] and rates.reasons("b") == []
    assert rates.due(1025.0) is False and rates.due(1030.0) is True


def test_samples_older_than_the_window_are_dropped() -> None:
    rates = LineRates(window=60, every=10)
    for t in range(0, 200, 10):
        rates.add(float(t), {("a", "verdict", "forward"): float(t)})
    assert rates.since == 130.0
    assert all(t >= 140.0 for t, _ in rates.series("a")[0].points)


def test_the_chart_escapes_what_the_metrics_carry() -> None:
    rates = LineRates()
    rates.add(0.0, {("a", "verdict", "<script>"): 0})
    rates.add(10.0, {("a", "verdict", "<script>"): 50})
    svg = chart_svg(rates.series("a"), since=rates.since, now=10.0)
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert svg.startswith("<svg") and "5/s" in svg  # the ceiling: 5 lines a second
