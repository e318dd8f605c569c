"""Structured logging: one JSON object per line when stderr is not a terminal, readable text when it is.

Every module logs through its own ``logging.getLogger(__name__)``. Fields passed with ``extra={...}`` appear as keys
of the JSON object (and as ``key=value`` after the message in text form)::

    log.info("partitions assigned", extra={"partitions": 3})
    {"ts": "2026-10-01T09:00:00.120Z", "level": "info", "logger": "gatekeeper.consumers.loop",
     "msg": "partitions assigned", "partitions": 3}

Nothing sensitive is logged: settings hold secrets as ``SecretStr`` (shown as ``**********``), and a line is logged
only through ``gatekeeper.masking`` (account numbers and addresses masked).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

#: Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for k, v in _extras(record).items():
            doc.setdefault(k, v)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extras = _extras(record)
        if extras:
            text += " " + " ".join(f"{k}={v}" for k, v in extras.items())
        return text


def configure_logging(fmt: str = "auto", level: str = "INFO", stream: TextIO | None = None) -> logging.Handler:
    """Send the ``gatekeeper`` and ``rwcore`` loggers (and aiokafka's warnings) to ``stream`` (stderr) in ``fmt``:
    ``json``, ``text``, or ``auto`` (JSON unless the stream is a terminal). Returns the handler (idempotent: a
    second call replaces the first handler)."""
    stream = stream if stream is not None else sys.stderr
    if fmt == "auto":
        fmt = "text" if getattr(stream, "isatty", lambda: False)() else "json"
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.set_name("gatekeeper")
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == "gatekeeper"]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    for name in ("gatekeeper", "rwcore"):
        logging.getLogger(name).setLevel(level)
    return handler


__all__ = ["JsonFormatter", "TextFormatter", "configure_logging"]
