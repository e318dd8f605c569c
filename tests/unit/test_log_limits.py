"""``RepeatFilter``: a library's reconnect loop cannot flood the logs (a fake clock)."""

from __future__ import annotations

import io
import json
import logging

from gatekeeper.logs import RepeatFilter, configure_logging


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _record(msg: str, *args: object, name: str = "aiokafka.conn", level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_the_first_of_a_kind_pass_then_one_summary_per_interval() -> None:
    clock = Clock()
    emitted: list[logging.LogRecord] = []
    f = RepeatFilter(emitted.append, burst=3, interval=10.0, clock=clock)
    passed = [f.filter(_record("Unable connect to node with id %s: %s", 1, f"refused {i}")) for i in range(1000)]
    assert passed == [True] * 3 + [False] * 997
    assert f.filter(_record("another message %s", 1))  # another kind has its own budget
    assert emitted == []
    clock.now += 10.0
    assert f.filter(_record("Unable connect to node with id %s: %s", 1, "refused again"))  # a new interval
    [summary] = emitted
    assert summary.name == "aiokafka.conn" and summary.levelno == logging.ERROR
    assert summary.getMessage() == (
        "suppressed 997 similar messages in the last 10s: Unable connect to node with id %s: %s"
    )
    assert f.filter(summary)  # the summary itself is never limited


def test_a_burst_that_ends_is_summarised_with_the_next_record_of_any_kind() -> None:
    clock = Clock()
    emitted: list[logging.LogRecord] = []
    f = RepeatFilter(emitted.append, burst=2, interval=5.0, clock=clock)
    for _ in range(10):
        f.filter(_record("Heartbeat failed", name="aiokafka.consumer.group_coordinator", level=logging.WARNING))
    clock.now += 6.0
    assert f.filter(_record("partitions assigned", name="gatekeeper.consumers.loop", level=logging.WARNING))
    assert [r.getMessage() for r in emitted] == ["suppressed 8 similar messages in the last 6s: Heartbeat failed"]


def test_info_and_debug_are_not_limited_and_kinds_are_bounded() -> None:
    clock = Clock()
    emitted: list[logging.LogRecord] = []
    f = RepeatFilter(emitted.append, burst=1, interval=10.0, max_kinds=3, clock=clock)
    assert all(f.filter(_record("batch decided", level=logging.INFO)) for _ in range(100))
    for i in range(10):  # messages that differ in their template (an f-string): the kinds kept stay bounded
        f.filter(_record(f"failed {i}"))
        f.filter(_record(f"failed {i}"))
    assert len(f._windows) <= 3
    assert all("suppressed 1 similar" in r.getMessage() for r in emitted) and emitted


def test_configure_logging_installs_it_on_the_handler() -> None:
    out = io.StringIO()
    handler = configure_logging("json", "INFO", out)
    try:
        noisy = logging.getLogger("aiokafka.gk-test-limits")
        noisy.setLevel(logging.WARNING)  # the CLI's commands quiet "aiokafka" (admin.quiet_client_logs)
        for i in range(500):
            noisy.error("Unable connect to node with id %s: %s", 1, f"[Errno 111] refused {i}")
        lines = [json.loads(line) for line in out.getvalue().splitlines()]
        assert len(lines) == 10
        assert all(line["logger"] == "aiokafka.gk-test-limits" for line in lines)
    finally:
        logging.getLogger().removeHandler(handler)
