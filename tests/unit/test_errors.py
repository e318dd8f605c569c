"""One exception tree (``gatekeeper.errors``), mapped once at the CLI's edge: every error a command can meet becomes
one line on stderr and the exit code its class carries, never a traceback."""

from __future__ import annotations

import pytest
import typer
from redis import exceptions as redis_exc

from gatekeeper.admin import KafkaUnavailable, TopicError
from gatekeeper.cli.common import cli_errors
from gatekeeper.config import ConfigError
from gatekeeper.demo import DemoError
from gatekeeper.errors import FatalError, GatekeeperError, Unavailable, UsageError
from gatekeeper.records import RecordsError
from gatekeeper.replay import ReplayError
from gatekeeper.store import Fenced, RecordExists, StoreError
from rwcore import FormError


@pytest.mark.parametrize(
    ("exc", "code", "family"),
    [
        (ConfigError("redis.url: must start with redis://"), 2, GatekeeperError),
        (RecordsError("records.json", ["line 1: item: missing"]), 2, UsageError),
        (ReplayError("no such route"), 2, UsageError),
        (TopicError("topic agents.pay does not exist"), 2, UsageError),
        (StoreError("redis 127.0.0.1:6379: ConnectionError"), 3, Unavailable),
        (Fenced("epoch 2 wrote", ["c1"]), 3, Unavailable),
        (KafkaUnavailable("kafka at 127.0.0.1:9092 is unreachable"), 3, Unavailable),
        (RecordExists("inv:1/PAY is loaded"), 1, GatekeeperError),
        (DemoError("the gatekeeper did not start"), 1, GatekeeperError),
        (FatalError("another producer took over"), 1, GatekeeperError),
        (FormError("unknown profile 'nope'"), 2, Exception),
        (redis_exc.ConnectionError("refused"), 3, Exception),
    ],
)
def test_each_error_is_one_line_and_its_exit_code(
    exc: Exception, code: int, family: type[Exception], capsys: pytest.CaptureFixture[str]
) -> None:
    assert isinstance(exc, family)
    with pytest.raises(typer.Exit) as info, cli_errors():
        raise exc
    assert info.value.exit_code == code
    err = capsys.readouterr().err
    assert err.startswith("gatekeeper: error: ") and err.count("\n") <= len(str(exc).splitlines()) + 1
    assert "Traceback" not in err


def test_a_bug_is_not_swallowed() -> None:
    """An exception outside the tree is not an error a command can meet: it is not dressed up as one."""
    with pytest.raises(KeyError), cli_errors():
        raise KeyError("bug")
