"""The JSON log format: one object per record, whatever its extras hold."""

from __future__ import annotations

import importlib
import io
import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from gatekeeper.logs import JsonFormatter, configure_logging, held_lines
from gatekeeper.policy import Reason


def _record(msg: str, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("gatekeeper.consumers.loop", logging.INFO, __file__, 1, msg, (), None)
    record.__dict__.update(extra)
    return record


def test_a_record_is_one_json_object_with_its_extras() -> None:
    record = _record("line dead-letter", reason=Reason.CHECK_HO, offset=41, problems=["amt-mismatch"], slots={"x"})
    line = JsonFormatter().format(record)
    doc = json.loads(line)
    assert "\n" not in line
    assert doc["msg"] == "line dead-letter" and doc["level"] == "info" and doc["logger"] == record.name
    assert doc["reason"] == "check-ho" and doc["offset"] == 41 and doc["problems"] == ["amt-mismatch"]
    assert doc["slots"] == "{'x'}"  # what JSON cannot hold is written as its str
    expected = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    assert doc["ts"] == expected


@pytest.mark.parametrize("text", ["a lone surrogate \udc80 here", "\u202e reversed", "bell \x07 and DEL \x7f"])
def test_a_record_orjson_refuses_or_a_reader_would_act_on_is_still_one_inert_json_line(text: str) -> None:
    line = JsonFormatter().format(_record("line dead-letter", line=text, big=2**70))
    doc = json.loads(line)
    assert doc["line"] == text and doc["big"] == 2**70
    assert "\u202e" not in line and "\x07" not in line and "\x7f" not in line


def test_configure_logging_writes_json_lines_to_the_stream() -> None:
    stream = io.StringIO()
    handler = configure_logging("json", "INFO", stream)
    try:
        logging.getLogger("gatekeeper.test").info("hello", extra={"route": "agents.pay"})
    finally:
        logging.getLogger().removeHandler(handler)
    (line,) = stream.getvalue().splitlines()
    assert json.loads(line)["route"] == "agents.pay"


@dataclass(frozen=True)
class _Key:
    key_id: str
    secret: bytes = field(repr=False)


def test_a_dataclass_or_a_time_in_a_record_is_written_as_its_str_never_field_by_field() -> None:
    """A dataclass's ``repr`` may leave out what it holds (a private key's bytes): the record shows what ``str``
    shows, as the standard library's encoder did, never every field."""
    at = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)
    doc = json.loads(JsonFormatter().format(_record("signed", key=_Key("gk-1", b"s3cret"), at=at)))
    assert doc["key"] == "_Key(key_id='gk-1')" and "s3cret" not in json.dumps(doc)
    assert doc["at"] == str(at)


class _Writes(io.StringIO):
    """A stream that counts its writes (each one a system call on stderr)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, s: str) -> int:
        self.writes += 1
        return super().write(s)


def test_a_batchs_lines_are_held_and_written_together_in_order_when_it_is_counted() -> None:
    stream = _Writes()
    handler = configure_logging("json", "INFO", stream)
    log = logging.getLogger("gatekeeper.test")
    try:
        with held_lines():
            for i in range(5):
                log.info("line dead-letter", extra={"offset": i})
            assert stream.getvalue() == ""  # nothing written while the batch is counted
            with held_lines():  # a block inside another leaves the lines to the outer one
                log.info("line dead-letter", extra={"offset": 5})
            assert stream.getvalue() == ""
        assert stream.writes == 1
        log.info("after", extra={"offset": 6})  # outside a batch: written at once, as before
        assert stream.writes == 2
    finally:
        logging.getLogger().removeHandler(handler)
    offsets = [json.loads(line)["offset"] for line in stream.getvalue().splitlines()]
    assert offsets == [0, 1, 2, 3, 4, 5, 6]


class _Unformattable(JsonFormatter):
    def format(self, record: logging.LogRecord) -> str:
        if record.msg == "unformattable":
            raise ValueError("a record its formatter cannot write")
        return super().format(record)


def test_held_lines_are_written_when_the_batch_fails_and_a_line_that_cannot_be_made_is_reported() -> None:
    stream = _Writes()
    handler = configure_logging("json", "INFO", stream)
    log = logging.getLogger("gatekeeper.test")
    reported: list[logging.LogRecord] = []
    handler.handleError = reported.append  # type: ignore[method-assign]
    handler.setFormatter(_Unformattable())
    try:
        with pytest.raises(RuntimeError), held_lines():
            log.info("line dead-letter", extra={"offset": 1})
            log.info("unformattable")  # its formatting fails: reported, never raised into the worker
            raise RuntimeError("the accounting failed")
    finally:
        logging.getLogger().removeHandler(handler)
    assert [json.loads(line)["offset"] for line in stream.getvalue().splitlines()] == [1]
    assert [r.msg for r in reported] == ["unformattable"]


def test_without_the_gatekeepers_handler_held_lines_lets_lines_through() -> None:
    stream = io.StringIO()
    other = logging.StreamHandler(stream)
    logs_module = importlib.import_module("gatekeeper.logs")
    previous, logs_module._HANDLER = logs_module._HANDLER, None
    logging.getLogger().addHandler(other)
    try:
        with held_lines():
            logging.getLogger("gatekeeper.test").warning("through")
            assert "through" in stream.getvalue()
    finally:
        logging.getLogger().removeHandler(other)
        logs_module._HANDLER = previous
