"""The console's "Now" chart: the last hour of the worker's line counters, kept by the HTTP process that serves
the console, and drawn as an SVG on the server (the page loads no script).

The worker already counts every decided line in Prometheus counters and publishes its metrics text for the HTTP
process (``gatekeeper.http_process``); ``LineRates`` samples that text every ``every`` seconds and keeps one hour:

- ``gatekeeper_lines_total{route, type, verdict}``, summed over the type: lines per second by verdict;
- ``gatekeeper_dead_letters_total{route, reason}`` and ``gatekeeper_alerts_total{route, reason}``: lines per reason.

Nothing here is a second copy of the data: the counters are the worker's, and a restarted console starts a new
hour (the chart says since when). A counter that went down (the worker restarted) counts from zero again.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from html import escape

from prometheus_client.parser import text_string_to_metric_families

#: (route, kind, label): kind ``verdict`` (label: forward, dead-letter, alert...) or ``reason`` (label: a reason code)
Key = tuple[str, str, str]

VERDICT_COLOURS = {"forward": "#2f7d32", "dead-letter": "#b3261e", "alert": "#b26a00", "hold": "#5b5f97"}


def counters_of(text: str | bytes) -> dict[Key, float]:
    """The line counters in a Prometheus text exposition, by (route, kind, label)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    out: dict[Key, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            route = labels.get("route")
            if route is None or not sample.name.endswith("_total"):
                continue
            if sample.name == "gatekeeper_lines_total":
                key: Key = (route, "verdict", labels.get("verdict", "?"))
            elif sample.name in ("gatekeeper_dead_letters_total", "gatekeeper_alerts_total"):
                key = (route, "reason", labels.get("reason", "?"))
            else:
                continue
            out[key] = out.get(key, 0.0) + sample.value
    return out


@dataclass(frozen=True, slots=True)
class Series:
    """One verdict's lines per second over time: (epoch seconds, rate) at the end of each interval."""

    label: str
    points: tuple[tuple[float, float], ...]


class LineRates:
    """The last ``window`` seconds of counter samples, one every ``every`` seconds at most."""

    def __init__(self, window: float = 3600.0, every: float = 10.0) -> None:
        self.window = window
        self.every = every
        self._samples: deque[tuple[float, dict[Key, float]]] = deque()

    @property
    def since(self) -> float | None:
        return self._samples[0][0] if self._samples else None

    def due(self, now: float) -> bool:
        return not self._samples or now - self._samples[-1][0] >= self.every

    def add(self, now: float, counters: Mapping[Key, float]) -> None:
        self._samples.append((now, dict(counters)))
        while self._samples and now - self._samples[0][0] > self.window:
            self._samples.popleft()

    def _deltas(self) -> Iterable[tuple[float, float, dict[Key, float]]]:
        """(start, end, increase of each counter) of each interval between two samples."""
        for (t0, c0), (t1, c1) in zip(self._samples, list(self._samples)[1:], strict=False):
            inc = {}
            for key, v in c1.items():
                before = c0.get(key, 0.0)
                inc[key] = v - before if v >= before else v  # a counter that went down started again
            yield t0, t1, inc

    def series(self, route: str) -> list[Series]:
        """Lines per second by verdict on ``route``, one point per interval; verdicts never seen are left out."""
        points: dict[str, list[tuple[float, float]]] = {}
        labels = sorted({k[2] for _, c in self._samples for k in c if k[0] == route and k[1] == "verdict"})
        for t0, t1, inc in self._deltas():
            for label in labels:
                rate = inc.get((route, "verdict", label), 0.0) / max(t1 - t0, 1e-9)
                points.setdefault(label, []).append((t1, rate))
        return [Series(label, tuple(points.get(label, ()))) for label in labels]

    def reasons(self, route: str) -> list[tuple[str, int]]:
        """Lines dead-lettered or alerted on ``route`` in the window, by reason, the most first."""
        total: dict[str, float] = {}
        for _, _, inc in self._deltas():
            for (r, kind, label), n in inc.items():
                if r == route and kind == "reason" and n:
                    total[label] = total.get(label, 0.0) + n
        return sorted(((k, int(v)) for k, v in total.items()), key=lambda kv: (-kv[1], kv[0]))


def chart_svg(series: list[Series], *, since: float | None, now: float | None = None, width: int = 640) -> str:
    """An SVG line chart of lines per second by verdict (escaped: the labels come from the worker's metrics)."""
    height, left, bottom, top = 160, 44, 22, 8
    now = time.time() if now is None else now
    start = now - 3600.0
    peak = max((r for s in series for _, r in s.points), default=0.0)
    ceiling = max(1.0, _nice(peak))
    plot_w, plot_h = width - left - 8, height - bottom - top

    def x(t: float) -> float:
        return left + (max(t, start) - start) / 3600.0 * plot_w

    def y(r: float) -> float:
        return top + plot_h - (r / ceiling) * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="lines per second by verdict, last hour">',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" class="axis"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" class="axis"/>',
        f'<text x="{left - 4}" y="{top + 10}" class="tick" text-anchor="end">{ceiling:g}/s</text>',
        f'<text x="{left - 4}" y="{top + plot_h}" class="tick" text-anchor="end">0</text>',
        f'<text x="{left}" y="{height - 4}" class="tick">-60 min</text>',
        f'<text x="{left + plot_w}" y="{height - 4}" class="tick" text-anchor="end">now</text>',
    ]
    for s in series:
        if not s.points:
            continue
        colour = VERDICT_COLOURS.get(s.label, "#444")
        pts = " ".join(f"{x(t):.1f},{y(r):.1f}" for t, r in s.points if t >= start)
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{pts}">'
            f"<title>{escape(s.label)}</title></polyline>"
        )
    if since is not None and since > start:
        parts.append(f'<line x1="{x(since):.1f}" y1="{top}" x2="{x(since):.1f}" y2="{top + plot_h}" class="since"/>')
    parts.append("</svg>")
    return "".join(parts)


def _nice(v: float) -> float:
    """The smallest of 1, 2, 5 times a power of ten at or above ``v``."""
    if v <= 0:
        return 0.0
    scale = 1.0
    while scale * 10 < v:
        scale *= 10
    while scale > v * 10:
        scale /= 10
    for m in (1, 2, 5, 10):
        if m * scale >= v:
            return m * scale
    return 10 * scale


__all__ = ["LineRates", "Series", "chart_svg", "counters_of"]
