"""The hold buffer and the commit watermarks. Pure: no Kafka, no clock (times are passed in).

A reply whose handoff is not known yet (the decision's ``HOLD``) is not decided: it is kept here with the time it was
first consumed and decided again later, until its handoff arrives or its route's ``hold_seconds`` run out (then the
decision refuses it). The partition does not wait for it: later records keep flowing.

Rules:

- **Queue behind a held line.** While a conversation has a held line, its later lines are not decided either: they
  queue behind it, in their original order, so no later line of the conversation overtakes it and changes a
  verdict. (``Processor.process`` applies the same rule inside one batch.) The one exception is the line a held
  reply is waiting for (its ``re=`` target, found by message id): it is decided ahead of the queue as soon as it
  arrives, because it is what the queue waits for.
- **Retry.** A conversation's queue is decided again with the next batch that brings a line of that conversation,
  and otherwise every ``retry_interval`` seconds, and as soon as the hold window of one of its lines has run out.
- **Watermark.** The committed offset of a partition never passes its lowest held (or in-flight) offset: after a
  crash the held lines are consumed again, and the lines after them, already decided, get their stored first
  decisions back (same verdict, no second state change). A restart begins a held line's hold window again.

- **Bounds.** Held lines are bounded per conversation, per input partition and per instance (``HoldLimits``), so
  a flood of replies to handoffs nobody sent (on one key or on thousands) never stalls the other conversations:
  intake is never paused for holds. When a bound is passed, whole queues are *forced*: decided at once as if their
  hold windows had ended (fail closed: a reply whose handoff is still unknown is refused, or alerted, exactly as at
  the end of its window). Which queues: the conversation's own (its bound), else the oldest queues of that partition
  (the partition's), else the oldest queues of the partition holding the most lines (the instance's), so a flood
  confined to some keys or partitions forces their holds and leaves the rest alone. ``Pending.forced`` names the
  bound; ``pressure`` says which routes forced a queue recently.

``Watermarks`` keeps, per partition, the next offset to read and what was last committed, and answers which
offsets may be committed given the offsets still open.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import msgspec

from gatekeeper.consumers.outcomes import Source

TP = tuple[str, int]  # (topic, partition)


def line_id(value: bytes) -> str | None:
    """The message id of an RW1 line (its third token), without parsing it; None when there is none."""
    if not value.startswith(b"RW1 "):
        return None
    parts = value.split(b" ", 3)
    if len(parts) < 3:
        return None
    try:
        token = parts[2].decode("ascii")
    except UnicodeDecodeError:
        return None
    return token if token and token.isprintable() else None


class Pending(msgspec.Struct, eq=False):
    """One consumed record on its way to an outcome."""

    source: Source
    route: str
    conversation: str | None
    first_seen: float
    awaits: str | None = None  # held: the id of the line it waits for (its re=); None for a line queued behind
    held: bool = False
    forced: str | None = None  # the bound that forced it out of the buffer: decide it as if its window had ended

    @property
    def tp(self) -> TP:
        return (self.source.topic, self.source.partition)

    @property
    def offset(self) -> int:
        return self.source.offset

    @property
    def line_id(self) -> str | None:
        """Its message id, read from the line when asked (only the hold buffer's ordering asks)."""
        return line_id(self.source.value)


@dataclass(slots=True)
class _Queue:
    lines: list[Pending] = field(default_factory=list)
    due: float = 0.0
    forced: str | None = None  # the bound that forced it: due now, its lines decided as if their windows ended


@dataclass(frozen=True, slots=True)
class HoldLimits:
    """How many held (and queued) lines the buffer keeps: per conversation, per input partition, per instance."""

    per_conversation: int = 100
    per_partition: int = 1_000
    total: int = 10_000


#: How long a route counts as under hold pressure after one of its queues was forced (seconds).
PRESSURE_SECONDS = 60.0


def order_for_retry(queue: Sequence[Pending]) -> list[Pending]:
    """A conversation's queue in the order to decide it: arrival order, except that a line some earlier held line
    is waiting for (by message id) moves just ahead of the first line that waits for it."""
    out = list(queue)
    for line in list(out):
        lid = line.line_id
        if lid is None:
            continue
        for i, other in enumerate(out):
            if other is line:
                break
            if other.awaits is not None and other.awaits == lid:
                out.remove(line)
                out.insert(i, line)
                break
    return out


class HoldBuffer:
    """Held lines and the lines queued behind them, by (route, conversation)."""

    def __init__(self, retry_interval: float = 1.0, limits: HoldLimits | None = None) -> None:
        self.retry_interval = retry_interval
        self.limits = limits if limits is not None else HoldLimits()
        self._queues: dict[tuple[str, str], _Queue] = {}
        self._total = 0
        self._by_tp: dict[TP, int] = {}
        self._by_route: dict[str, int] = {}
        self._forced_at: dict[str, float] = {}  # route -> when one of its queues was last forced

    def __len__(self) -> int:
        return self._total

    def __bool__(self) -> bool:
        return bool(self._queues)

    def count(self, route: str) -> int:
        return self._by_route.get(route, 0)

    def count_partition(self, tp: TP) -> int:
        return self._by_tp.get(tp, 0)

    def pressure(self, now: float) -> list[str]:
        """The routes that had a queue forced by a bound within the last ``PRESSURE_SECONDS``."""
        return sorted(r for r, at in self._forced_at.items() if now - at < PRESSURE_SECONDS)

    def _counted(self, lines: Iterable[Pending], sign: int) -> None:
        for p in lines:
            self._total += sign
            self._by_tp[p.tp] = self._by_tp.get(p.tp, 0) + sign
            self._by_route[p.route] = self._by_route.get(p.route, 0) + sign
            if self._by_tp[p.tp] == 0:
                del self._by_tp[p.tp]
            if self._by_route[p.route] == 0:
                del self._by_route[p.route]

    def _take(self, key: tuple[str, str]) -> _Queue:
        q = self._queues.pop(key)
        self._counted(q.lines, -1)
        for p in q.lines:
            p.forced = q.forced
        return q

    def holds(self, route: str, conversation: str) -> bool:
        return (route, conversation) in self._queues

    def plan(self, new: Sequence[Pending], now: float) -> list[Pending]:
        """The lines to decide now, in order, taken out of the buffer: every queue that is due (or that a new line
        of its conversation joins), each followed by its new lines, then the other new lines.

        Lines a decision holds again go back with ``hold``; the rest are decided."""
        joining: dict[tuple[str, str], list[Pending]] = {}
        rest: list[Pending] = []
        for p in new:
            key = (p.route, p.conversation) if p.conversation is not None else None
            if key is not None and key in self._queues:
                joining.setdefault(key, []).append(p)
            else:
                rest.append(p)
        out: list[Pending] = []
        for key in list(self._queues):
            q = self._queues[key]
            if key in joining or now >= q.due or q.forced is not None:
                self._take(key)
                out.extend(order_for_retry([*q.lines, *joining.get(key, ())]))
        return out + rest

    def hold(self, lines: Iterable[tuple[Pending, str | None]], now: float, hold_seconds: Mapping[str, float]) -> None:
        """Put lines back, in the order given (the order they were decided in): ``(line, awaits)`` where ``awaits``
        is the id a held line waits for, or None for a line queued behind it."""
        for p, awaits in lines:
            if p.conversation is None:
                raise ValueError("a line without a conversation cannot be held")
            p.awaits = awaits
            p.held = True
            key = (p.route, p.conversation)
            p.forced = None
            q = self._queues.get(key)
            if q is None:
                q = self._queues[key] = _Queue(due=now + self.retry_interval)
            q.lines.append(p)
            self._counted((p,), +1)
            window_end = p.first_seen + hold_seconds.get(p.route, 0.0)
            if window_end > now:
                q.due = min(q.due, window_end)
        self._enforce(now)

    def _force(self, key: tuple[str, str], bound: str, now: float) -> int:
        """Force a queue (see the module docstring); returns how many lines it releases from the counts."""
        q = self._queues[key]
        if q.forced is not None:
            return 0
        q.forced, q.due = bound, now
        self._forced_at[key[0]] = now
        return len(q.lines)

    def _enforce(self, now: float) -> None:
        """Force queues until every bound holds (counting a forced queue as gone: it is decided at the next plan)."""
        lim = self.limits
        by_tp: dict[TP, list[tuple[float, tuple[str, str]]]] = {}
        live: dict[TP, int] = {}
        for key, q in self._queues.items():
            if q.forced is not None:
                continue
            if len(q.lines) > lim.per_conversation:
                self._force(key, "conversation", now)
                continue
            for p in q.lines:
                live[p.tp] = live.get(p.tp, 0) + 1
            by_tp.setdefault(q.lines[0].tp, []).append((q.lines[0].first_seen, key))
        total = sum(live.values())
        oldest = {tp: iter(sorted(queues)) for tp, queues in by_tp.items()}  # each partition's queues, oldest first
        for tp, n in live.items():
            if n > lim.per_partition:
                for _, key in oldest[tp]:
                    released = self._force(key, "partition", now)
                    live[tp] -= released
                    total -= released
                    if live[tp] <= lim.per_partition:
                        break
        while total > lim.total and live:
            tp = max(live, key=lambda t: live[t])
            nxt = next(oldest[tp], None) if tp in oldest else None
            if nxt is None:
                live.pop(tp)
                continue
            released = self._force(nxt[1], "instance", now)
            live[tp] -= released
            total -= released

    def next_due(self) -> float | None:
        """When the next queue is due to be decided again (None when nothing is held)."""
        return min((q.due for q in self._queues.values()), default=None)

    def lowest(self) -> dict[TP, int]:
        """The lowest held offset of each partition."""
        low: dict[TP, int] = {}
        for q in self._queues.values():
            for p in q.lines:
                if p.offset < low.get(p.tp, p.offset + 1):
                    low[p.tp] = p.offset
        return low

    def drop(self, tps: Iterable[TP]) -> list[Pending]:
        """Forget the lines of these partitions (revoked: their next owner consumes them again)."""
        gone = set(tps)
        dropped: list[Pending] = []
        for key in list(self._queues):
            q = self._queues[key]
            keep = [p for p in q.lines if p.tp not in gone]
            lost = [p for p in q.lines if p.tp in gone]
            dropped.extend(lost)
            self._counted(lost, -1)
            if keep:
                q.lines = keep
            else:
                del self._queues[key]
        return dropped

    def lines(self) -> list[Pending]:
        return [p for q in self._queues.values() for p in q.lines]


def lowest_offsets(lines: Iterable[Pending]) -> dict[TP, int]:
    low: dict[TP, int] = {}
    for p in lines:
        if p.offset < low.get(p.tp, p.offset + 1):
            low[p.tp] = p.offset
    return low


def merge_lowest(*maps: Mapping[TP, int]) -> dict[TP, int]:
    out: dict[TP, int] = {}
    for m in maps:
        for tp, off in m.items():
            out[tp] = min(off, out.get(tp, off))
    return out


class Watermarks:
    """Per partition: the next offset to read (one past the last record consumed) and the last offset committed.

    The offset to commit for a partition is the next offset to read, or its lowest open offset (held or in flight)
    when that is lower. Commit offsets are "the next record to read", as Kafka means them."""

    def __init__(self) -> None:
        self._next: dict[TP, int] = {}
        self._committed: dict[TP, int] = {}

    def consumed(self, tp: TP, offset: int) -> None:
        if offset + 1 > self._next.get(tp, -1):
            self._next[tp] = offset + 1

    def next_offset(self, tp: TP) -> int | None:
        return self._next.get(tp)

    def committable(self, open_lowest: Mapping[TP, int], tps: Iterable[TP] | None = None) -> dict[TP, int]:
        """The offsets to commit now: per partition consumed from (or only ``tps``), the watermark, when it is past
        what was last committed."""
        out: dict[TP, int] = {}
        for tp in self._next if tps is None else tps:
            nxt = self._next.get(tp)
            if nxt is None:
                continue
            mark = min(nxt, open_lowest.get(tp, nxt))
            if mark > self._committed.get(tp, -1):
                out[tp] = mark
        return out

    def committed(self, offsets: Mapping[TP, int]) -> None:
        for tp, off in offsets.items():
            if off > self._committed.get(tp, -1):
                self._committed[tp] = off

    def last_committed(self, tp: TP) -> int | None:
        return self._committed.get(tp)

    def forget(self, tps: Iterable[TP]) -> None:
        for tp in tps:
            self._next.pop(tp, None)
            self._committed.pop(tp, None)

    def partitions(self) -> list[TP]:
        return list(self._next)


__all__ = [
    "PRESSURE_SECONDS",
    "TP",
    "HoldBuffer",
    "HoldLimits",
    "Pending",
    "Watermarks",
    "line_id",
    "lowest_offsets",
    "merge_lowest",
    "order_for_retry",
]
