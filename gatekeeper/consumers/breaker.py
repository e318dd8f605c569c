"""The dead-letter flood breaker, per route. Pure: no Kafka, no clock (times are passed in).

An upstream agent gone mad (a prompt regression, a loop) can send thousands of lines that all fail their checks.
Dead-lettering every one is correct, but nobody reads a dead-letter topic as it fills: the flood should page someone.
Modelled on Sentry Arroyo's ``DlqLimit`` (a maximum share of invalid messages), over a sliding time window:

- every decided line of the route is counted (a line answered from its stored first decision is not: it was counted
  when first decided), in one-second buckets covering ``window_seconds``;
- once the window holds at least ``min_lines`` lines and the dead-lettered share reaches ``ratio``, the breaker
  **trips**: the worker raises one ``dead-letter-flood`` alert on the route's alerts topic, counts the trip, and, with
  ``action: pause``, stops consuming the route's partitions for ``pause_seconds`` (its lines wait on the input topic,
  uncommitted: nothing is lost; other routes go on);
- it **closes** once the share over the window falls below ``ratio`` again (or the window empties), and can trip
  again after that. A route still flooding when its pause ends trips again as soon as the window says so.
"""

from __future__ import annotations

import enum
from collections import Counter, deque
from dataclasses import dataclass, field

from gatekeeper.config import BreakerSettings


class Change(enum.StrEnum):
    TRIPPED = "tripped"
    CLOSED = "closed"


@dataclass(slots=True)
class _Bucket:
    second: int
    lines: int = 0
    dead: int = 0
    reasons: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True, slots=True)
class Window:
    """What the window holds now."""

    lines: int
    dead: int
    reasons: dict[str, int]

    @property
    def ratio(self) -> float:
        return self.dead / self.lines if self.lines else 0.0


class DeadLetterBreaker:
    """One route's breaker (see the module docstring)."""

    def __init__(self, settings: BreakerSettings) -> None:
        self.settings = settings
        self._buckets: deque[_Bucket] = deque()
        # the window's totals, kept as buckets come and go: a batch reads the window twice (its verdict, the ratio
        # gauge), and summing the buckets each time cost a merge of every second's reasons
        self._lines = 0
        self._dead = 0
        self._reasons: Counter[str] = Counter()
        self.tripped_at: float | None = None

    @property
    def open(self) -> bool:
        return self.tripped_at is not None

    def paused(self, now: float) -> bool:
        """Whether the route's intake is paused now (a tripped breaker with ``action: pause``, within its pause)."""
        s = self.settings
        return self.tripped_at is not None and s.action == "pause" and now < self.tripped_at + s.pause_seconds

    def window(self, now: float) -> Window:
        self._expire(now)
        return Window(self._lines, self._dead, dict(self._reasons))

    def record(self, now: float, lines: int, dead_reasons: list[str]) -> Change | None:
        """Count ``lines`` decided at ``now``, of which the ones in ``dead_reasons`` (their reason codes) were
        dead-lettered. Returns the breaker's change, if any."""
        if not self.settings.enabled:
            return None
        if lines:
            second = int(now)
            if not self._buckets or self._buckets[-1].second != second:
                self._buckets.append(_Bucket(second))
            b = self._buckets[-1]
            b.lines += lines
            b.dead += len(dead_reasons)
            self._lines += lines
            self._dead += len(dead_reasons)
            if dead_reasons:
                b.reasons.update(dead_reasons)
                self._reasons.update(dead_reasons)
        return self.evaluate(now)

    def evaluate(self, now: float) -> Change | None:
        """Trip or close on what the window holds now (also called with nothing new: a paused route sees no lines)."""
        w = self.window(now)
        s = self.settings
        if self.tripped_at is None:
            if w.lines >= s.min_lines and w.ratio >= s.ratio:
                self.tripped_at = now
                return Change.TRIPPED
            return None
        if self.paused(now):
            return None
        if w.lines == 0 or w.ratio < s.ratio:
            self.tripped_at = None
            return Change.CLOSED
        return None

    def _expire(self, now: float) -> None:
        oldest = int(now - self.settings.window_seconds)
        while self._buckets and self._buckets[0].second <= oldest:
            b = self._buckets.popleft()
            self._lines -= b.lines
            self._dead -= b.dead
            if b.reasons:
                self._reasons.subtract(b.reasons)
                self._reasons = +self._reasons  # the reasons no bucket holds any more are gone


__all__ = ["Change", "DeadLetterBreaker", "Window"]
