"""The operator's commands through typer's CliRunner, without services: legend, version, rw, every command's help,
and the errors that need no broker to show (bad config, unknown route, unreachable broker: one line, exit code)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml
from typer.testing import CliRunner, Result

import rwcore as rw
from gatekeeper import __version__
from gatekeeper.cli import app
from tests.policy.world import HO

UNREACHABLE = "127.0.0.1:1"  # nothing listens on port 1: the connection is refused at once
ROUTE = {"input": "agents.pay", "output": "agents.pay.checked", "dead_letter": "agents.pay.dlq",
         "alerts": "agents.pay.alerts", "profile": "pay"}  # fmt: skip


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("GK_"):
            monkeypatch.delenv(name)


def cli(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "gk.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": UNREACHABLE, "request_timeout_ms": 2000},
                "redis": {"url": "redis://127.0.0.1:1/0"},
                "routes": [ROUTE],
            }
        )
    )
    return path


def one_error(result: Result, code: int, *fragments: str) -> None:
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gatekeeper: error: "), result.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])


# ---------------------------------------------------------------- help teaches by example


@pytest.mark.parametrize(
    "command",
    [
        ["replay"],
        ["topics", "create"],
        ["topics", "describe"],
        ["status"],
        ["legend"],
        ["version"],
        ["rw", "--help"],
        ["demo"],
    ],
)
def test_every_command_has_help_with_examples(command: list[str]) -> None:
    args = command if command[0] == "rw" else [*command, "--help"]
    result = cli(*args)
    assert result.exit_code == 0, result.output
    if command[0] == "rw":  # the protocol's own help, passed through
        assert "check-rb" in result.stdout and "make-rb" in result.stdout
    else:
        assert "Examples" in result.stdout and f"gatekeeper {command[0]}" in result.stdout


def test_the_top_level_help_lists_the_commands() -> None:
    result = cli("--help")
    for name in ("run", "check", "replay", "records", "topics", "status", "legend", "version", "rw", "demo"):
        assert f" {name} " in result.stdout


def _commands() -> list[tuple[list[str], Any]]:
    """Every command of the tree (click commands, as typer builds them) with its path (``[]``: the top level)."""
    out: list[tuple[list[str], Any]] = []

    def walk(path: list[str], cmd: Any) -> None:
        out.append((path, cmd))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk([*path, name], sub)

    walk([], typer.main.get_command(app))
    return out


def _options(cmd: Any) -> list[Any]:
    return [p for p in cmd.params if p.param_type_name == "option"]


def test_flags_show_no_value_placeholder_in_help() -> None:
    """A flag takes no value: --help writes none after it (typer's rich help wrote ``--dry-run <bool>``)."""
    flags = 0
    for path, cmd in _commands():
        if path == ["rw"]:  # the protocol's own help, passed through
            continue
        result = cli(*path, "--help")
        assert result.exit_code == 0, (path, result.output)
        assert "<bool>" not in result.stdout, path
        for param in _options(cmd):
            if not param.is_flag or not param.help:
                continue
            flags += 1
            long = next(o for o in param.opts if o.startswith("--"))
            row = next(ln for ln in result.stdout.splitlines() if f" {long} " in ln)
            between = row.split(f" {long} ", 1)[1].split(param.help[:10], 1)[0]
            shorts = [[s] for s in param.opts if not s.startswith("--")]
            assert between.split() in ([], *shorts, param.secondary_opts), (path, row)  # no <bool>, no type
    assert flags >= 10


def test_a_short_option_means_one_thing_in_every_command() -> None:
    meaning: dict[str, set[str]] = {}
    for _, cmd in _commands():
        for param in _options(cmd):
            longs = {o for o in param.opts if o.startswith("--")}
            for short in (o for o in param.opts if not o.startswith("--")):
                meaning.setdefault(short, set()).update(longs)
    assert {k: v for k, v in meaning.items() if len(v) != 1} == {}
    assert (meaning["-r"], meaning["-p"], meaning["-c"]) == ({"--route"}, {"--profile"}, {"--config"})
    check = next(cmd for path, cmd in _commands() if path == ["check"])
    route = next(p for p in _options(check) if "--route" in p.opts)
    records = next(p for p in _options(check) if "--records" in p.opts)
    assert "-r" in route.opts and records.opts == ["--records"]


# ---------------------------------------------------------------- legend, version, rw


def test_legend_prints_the_profiles_text() -> None:
    full = cli("legend", "--profile", "pay")
    lean = cli("legend", "--profile", "pay", "--lean")
    assert full.exit_code == 0 and lean.exit_code == 0
    assert full.stdout.strip() == rw.legend("pay")
    assert lean.stdout.strip() == rw.legend("pay", lean=True) and len(lean.stdout) < len(full.stdout)
    assert cli("legend").stdout.strip() == rw.legend(None)


def test_legend_of_a_route_and_its_errors(config: Path) -> None:
    assert cli("legend", "--route", "agents.pay", "-c", str(config)).stdout.strip() == rw.legend("pay")
    one_error(cli("legend", "--route", "nope", "-c", str(config)), 2, "unknown route 'nope'", "agents.pay")
    one_error(cli("legend", "--profile", "nosuch"), 2, "--profile")
    one_error(cli("legend", "--profile", "pay", "--route", "agents.pay"), 2, "not both")


def test_version() -> None:
    result = cli("version")
    assert result.exit_code == 0 and result.stdout.startswith(f"gatekeeper {__version__} (protocol RW1")
    doc = json.loads(cli("version", "--json").stdout)
    assert doc["gatekeeper"] == __version__ and doc["protocol"] == "RW1"


def test_rw_passes_the_protocol_commands_through() -> None:
    digest = cli("rw", "digest", HO, "--profile", "pay")
    assert digest.exit_code == 0 and digest.stdout.strip() == rw.digest(HO, "pay")
    bad = cli("rw", "validate", "RW1 HO x from=a to=b")
    assert bad.exit_code == 1 and bad.stdout.startswith("ERROR:")
    assert cli("rw").exit_code == 2
    made = cli("rw", "make-rb", HO, "payer-1", "--profile", "pay")
    assert made.exit_code == 0 and made.stdout.strip() == rw.make_rb(HO, "payer-1", "pay")


# ---------------------------------------------------------------- errors: one line, the right exit code

KAFKA_COMMANDS = [
    ["replay", "--route", "agents.pay"],
    ["topics", "create"],
    ["topics", "describe"],
    ["status"],
]


@pytest.mark.parametrize("command", KAFKA_COMMANDS)
def test_a_broker_that_cannot_be_reached_is_one_line_and_exit_3(command: list[str], config: Path) -> None:
    one_error(cli(*command, "--timeout", "2", "-c", str(config)), 3, f"kafka at {UNREACHABLE}")


@pytest.mark.parametrize("command", KAFKA_COMMANDS)
def test_a_bad_configuration_exits_2_naming_the_key(command: list[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kafka: {bootstrap_servers: x, grup_id: y}\n")
    result = cli(*command, "-c", str(bad))
    assert result.exit_code == 2 and "kafka.grup_id: unknown key" in result.stderr
    one_error(cli(*command, "-c", str(tmp_path / "missing.yaml")), 2, "does not exist")


@pytest.mark.parametrize(
    "command", [["replay", "--route", "nope"], ["topics", "create", "-r", "nope"], ["status", "-r", "nope"]]
)
def test_an_unknown_route_exits_2(command: list[str], config: Path) -> None:
    one_error(cli(*command, "-c", str(config)), 2, "unknown route 'nope'", "routes: agents.pay")


def test_no_route_configured_exits_2(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("kafka: {bootstrap_servers: '127.0.0.1:1'}\n")
    for command in (["topics", "create"], ["status"]):
        one_error(cli(*command, "-c", str(empty)), 2, "no route configured")


def test_bad_options_are_usage_errors(config: Path) -> None:
    one_error(cli("topics", "create", "--set", "retention.ms", "-c", str(config)), 2, "KEY=VALUE")
    one_error(cli("replay", "-r", "agents.pay", "--until", "soon", "-c", str(config)), 2, "--since/--until")
    one_error(cli("replay", "-c", str(config)), 2, "give --route ROUTE (its dead-letter topic), --from-topic TOPIC")


def test_gk_environment_variables_are_honoured(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GK_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:2")
    one_error(cli("status", "--timeout", "2", "-c", str(config)), 3, "kafka at 127.0.0.1:2")
    monkeypatch.setenv("GK_CONFIG", str(config))
    one_error(cli("topics", "describe", "--timeout", "2"), 3, "kafka at 127.0.0.1:2")


def test_the_demo_reports_a_missing_configuration_and_an_unreachable_broker(tmp_path: Path) -> None:
    one_error(cli("demo", "--config", str(tmp_path / "none.yaml")), 2, "does not exist")
    result = cli(
        "demo", "--bootstrap", UNREACHABLE, "--redis-url", "redis://127.0.0.1:1/0", "--http-port", "0",
        "--log-file", str(tmp_path / "gk.log"),
    )  # fmt: skip
    one_error(result, 3, f"kafka at {UNREACHABLE}")
