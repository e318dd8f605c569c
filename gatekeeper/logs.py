"""Structured logging: one JSON object per line when stderr is not a terminal, readable text when it is.

Every module logs through its own ``logging.getLogger(__name__)``. Fields passed with ``extra={...}`` appear as keys
of the JSON object (and as ``key=value`` after the message in text form)::

    log.info("partitions assigned", extra={"partitions": 3})
    {"ts":"2026-10-01T09:00:00.120Z","level":"info","logger":"gatekeeper.consumers.loop","msg":"partitions assigned",
     "partitions":3}

(compact JSON, as orjson writes it: read the lines with a JSON parser, not by matching their text)

**Bounded during an outage.** A broker stopping gracefully made aiokafka's reconnect loop log 206,064 ERROR lines
in 15 s. ``RepeatFilter`` (installed on the handler by ``configure_logging``) lets through the first ``burst`` (10)
records of a kind (logger, level, message template) per ``interval`` (10 s), at WARNING and above, from every
logger (aiokafka's and the gatekeeper's own); the rest are counted, and one
``suppressed K similar messages in the last Ns: <template>`` line follows when the interval is over (with the next
record logged). DEBUG and INFO lines are not limited.

**A batch's lines in one write.** The worker logs every dead letter and alert; Python writes to stderr at each
newline, a system call per line, which cost more than the rest of the line's logging. While the worker counts a
batch, the gatekeeper's handler holds the lines it is given (``held_lines``) and writes them together when the
batch is counted (a few milliseconds later, in the order they were logged).

Nothing a record carries acts on the reader: in text form the message and every extra are escaped
(``gatekeeper.inert``: a newline, ESC, a bidi override), so a record is one line; in JSON, DEL, C1 controls, bidi
controls and separators are JSON escapes too.

Nothing sensitive is logged: settings hold secrets as ``SecretStr`` (shown as ``**********``), and a line is logged
only through ``gatekeeper.masking`` (account numbers and addresses masked).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

import orjson

from gatekeeper.inert import inert, json_inert
from rwcore import _native

#: Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


def _ts(created: float) -> str:
    """A record's time as ISO-8601 UTC with milliseconds and a ``Z`` (the native writer the outcome records use:
    a dead letter's log line is on the worker's per-line path)."""
    try:
        return _native.iso_time(created)
    except ValueError:  # a clock with no date: what datetime says of it
        return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


#: What orjson would write field by field but a record shows as its ``str``, as the standard library's encoder
#: does: a dataclass (its ``repr`` may leave out a field it holds, a key's bytes), a date and time.
_AS_STR = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


class JsonFormatter(logging.Formatter):
    """One JSON object per record, written by orjson (anything it cannot write as JSON as its ``str``); a record
    orjson refuses (a string with a lone surrogate) is written by the standard library's encoder instead."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": _ts(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for k, v in _extras(record).items():
            doc.setdefault(k, v)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        try:
            text = orjson.dumps(doc, default=str, option=_AS_STR).decode("utf-8")
        except TypeError:
            text = json.dumps(doc, default=str, ensure_ascii=False, separators=(",", ":"))
        return json_inert(text)


class TextFormatter(logging.Formatter):
    """``HH:MM:SS LEVEL logger: message key=value ...``, one line per record whatever the message and the extras
    carry (``gatekeeper.inert``: a newline, ESC, a bidi override are escaped); a traceback follows on its own lines,
    each escaped and marked ``  | ``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        text = f"{self.formatTime(record, self.datefmt)} {record.levelname:<7} {inert(record.name)}: "
        text += inert(record.getMessage())
        extras = _extras(record)
        if extras:
            text += " " + " ".join(f"{inert(k)}={inert(v)}" for k, v in extras.items())
        if record.exc_info:
            text += _continued(self.formatException(record.exc_info))
        if record.stack_info:
            text += _continued(self.formatStack(record.stack_info))
        return text


def _continued(block: str) -> str:
    """A traceback under its record: each of its lines escaped and marked ``  | ``, so that an exception's message
    with a newline cannot start what looks like a record of its own."""
    return "".join(f"\n  | {inert(ln)}" for ln in block.rstrip("\n").split("\n"))


@dataclass(slots=True)
class _Window:
    start: float
    passed: int = 0
    suppressed: int = 0


class RepeatFilter(logging.Filter):
    """At most ``burst`` records of a kind (logger, level, message template) per ``interval`` seconds, for records
    at ``level`` and above; the others are dropped and counted. When a kind's interval is over, one summary record
    (the same logger and level) says how many were suppressed: emitted through ``emit`` (the handler's ``handle``)
    with the next record that reaches the filter. ``clock`` is ``time.monotonic`` (tests pass a fake one)."""

    def __init__(
        self,
        emit: Callable[[logging.LogRecord], object] | None = None,
        *,
        burst: int = 10,
        interval: float = 10.0,
        level: int = logging.WARNING,
        max_kinds: int = 1000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.emit = emit
        self.burst = burst
        self.interval = interval
        self.level = level
        self.max_kinds = max_kinds
        self.clock = clock
        self._windows: dict[tuple[str, int, str], _Window] = {}
        self._next_sweep = clock() + interval

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.level or getattr(record, "_gk_summary", False):
            return True
        now = self.clock()
        if now >= self._next_sweep:
            self.flush(now)
        key = (record.name, record.levelno, str(record.msg))
        w = self._windows.get(key)
        if w is None:
            if len(self._windows) >= self.max_kinds:
                self.flush(now, every=True)
            w = self._windows[key] = _Window(now)
        elif now - w.start >= self.interval:
            self._summarise(key, w, now)
            w.start, w.passed, w.suppressed = now, 0, 0
        if w.passed < self.burst:
            w.passed += 1
            return True
        w.suppressed += 1
        return False

    def flush(self, now: float | None = None, *, every: bool = False) -> None:
        """Summarise the kinds whose interval is over (``every``: all of them), and forget them."""
        now = self.clock() if now is None else now
        self._next_sweep = now + self.interval
        for key, w in list(self._windows.items()):
            if every or now - w.start >= self.interval:
                self._summarise(key, w, now)
                del self._windows[key]

    def _summarise(self, key: tuple[str, int, str], w: _Window, now: float) -> None:
        if not w.suppressed or self.emit is None:
            return
        name, level, template = key
        summary = logging.LogRecord(
            name,
            level,
            __file__,
            0,
            "suppressed %d similar messages in the last %.0fs: %s",
            (w.suppressed, max(now - w.start, self.interval), template[:200]),
            None,
        )
        summary._gk_summary = True
        summary.suppressed = w.suppressed
        w.suppressed = 0
        self.emit(summary)


class LineHandler(logging.StreamHandler[TextIO]):
    """A ``StreamHandler`` that can hold its lines and write them together (see ``held_lines``)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self._held: list[str] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self._held is None:
            super().emit(record)
            return
        try:  # called with the handler's lock held, as ``StreamHandler.emit`` is
            self._held.append(self.format(record) + self.terminator)
        except Exception:  # as StreamHandler.emit: a record that cannot be written is reported, never raised
            self.handleError(record)

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Hold the lines logged inside the block; write them in one go (and flush) when it ends, however it ends."""
        self.acquire()
        try:
            outer, self._held = self._held is None, self._held if self._held is not None else []
        finally:
            self.release()
        try:
            yield
        finally:
            if outer:  # a block inside another leaves the lines to the outer one
                self._write_held()

    def _write_held(self) -> None:
        self.acquire()
        try:
            held, self._held = self._held or [], None
            if held:
                self.stream.write("".join(held))
                self.flush()
        except Exception:  # the stream failed: reported as a line that cannot be written is, never raised
            self.handleError(logging.makeLogRecord({"msg": "%d held log lines", "args": (len(held),)}))
        finally:
            self.release()


#: the handler ``configure_logging`` installed (None before it is called)
_HANDLER: LineHandler | None = None


@contextmanager
def held_lines() -> Iterator[None]:
    """Inside the block, the gatekeeper's log lines are held and written together when it ends (one write for a
    batch's dead letters instead of one each). Without ``configure_logging``'s handler, lines go out as usual."""
    handler = _HANDLER
    if handler is None:
        yield
        return
    with handler.holding():
        yield


def configure_logging(fmt: str = "auto", level: str = "INFO", stream: TextIO | None = None) -> logging.Handler:
    """Send the ``gatekeeper`` and ``rwcore`` loggers (and aiokafka's warnings) to ``stream`` (stderr) in ``fmt``:
    ``json``, ``text``, or ``auto`` (JSON unless the stream is a terminal), repeated warnings and errors limited
    (``RepeatFilter``). Returns the handler (idempotent: a second call replaces the first handler)."""
    stream = stream if stream is not None else sys.stderr
    # no formatter here writes a record's thread, process or process name: not looked up for every record (the
    # standard library's documented switches; a dead letter's log line is on the worker's per-line path)
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    # nor where a record was logged from (the documented switch, ``logging._srcfile``): finding it walks the stack
    logging._srcfile = None
    if fmt == "auto":
        fmt = "text" if getattr(stream, "isatty", lambda: False)() else "json"
    global _HANDLER
    handler = _HANDLER = LineHandler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(RepeatFilter(handler.handle))
    handler.set_name("gatekeeper")
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == "gatekeeper"]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    for name in ("gatekeeper", "rwcore"):
        logging.getLogger(name).setLevel(level)
    return handler


__all__ = ["JsonFormatter", "LineHandler", "RepeatFilter", "TextFormatter", "configure_logging", "held_lines"]
