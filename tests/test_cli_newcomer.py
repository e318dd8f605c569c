"""The newcomer's path through the command line, without services: what a first session meets and must not be
misled by. ``check`` with a configuration never checks by a profile alone; ``--json`` works on ``check`` as on the
other commands; the help says what is true and reflows to the terminal; ``gatekeeper rw`` names itself; an
unreachable built-in default address says how to reach the local stack; ``make status`` on a stopped stack says so.

(What needs Kafka and Redis, ``status`` on a Redis that lost its data, is in tests/integration/test_cli_newcomer.py.)
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner, Result

from gatekeeper.auth import generate, public_key_text
from gatekeeper.cli import app
from tests.seed import HO

ROOT = Path(__file__).resolve().parents[1]
RECORDS = str(ROOT / "config" / "records.example.json")
NOW = "20261001T0900Z"
ROUTE = {"input": "agents.pay", "output": "o", "dead_letter": "d", "alerts": "a", "profile": "pay"}
INTRUDER = HO.replace("from=scheduler", "from=extractor").replace("scheduler-1", "extractor-1")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("GK_"):
            monkeypatch.delenv(name)


def cli(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, list(args), env=env)


def _config(tmp_path: Path, *routes: dict[str, Any], **extra: Any) -> str:
    path = tmp_path / "gk.yaml"
    path.write_text(yaml.safe_dump({"routes": list(routes), **extra}))
    return str(path)


def _signed_route_config(tmp_path: Path) -> str:
    key = {"id": "s-1", "agent": "scheduler", "public_key": public_key_text(generate().public_key())}
    return _config(tmp_path, {**ROUTE, "sender_auth": True}, sender_auth={"keys": [key]})


def _check(tmp_path: Path, text: str, *args: str) -> Result:
    path = tmp_path / "flow.rw1"
    path.write_text(text + "\n")
    return cli("check", str(path), "--records", RECORDS, "--now", NOW, *args)


def _rows(result: Result) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.stdout.splitlines()]


# ---------------------------------------------------------------- 1. check with a configuration never assumes


def test_check_without_route_applies_the_only_routes_sender_auth(tmp_path: Path) -> None:
    """The finding: an unsigned line on a route that requires signatures came back forward, exit 0, when --route was
    left out (the profile alone was checked)."""
    config = _signed_route_config(tmp_path)
    result = _check(tmp_path, HO, "--config", config, "--json")
    assert result.exit_code == 1, result.output
    [row] = _rows(result)
    assert (row["verdict"], row["reason"]) == ("dead-letter", "sender-auth")
    assert "checking as route agents.pay, the configuration's only route" in result.stderr
    assert _rows(_check(tmp_path, HO, "--config", config, "--route", "agents.pay", "--json")) == [row]


def test_check_without_route_applies_the_only_routes_sender_binding(tmp_path: Path) -> None:
    config = _config(tmp_path, {**ROUTE, "senders": ["scheduler", "payer"]})
    result = _check(tmp_path, INTRUDER, "--config", config, "--json")
    assert result.exit_code == 1, result.output
    assert [r["reason"] for r in _rows(result)] == ["sender-binding"]


def test_check_with_the_configuration_from_the_environment_applies_its_route(tmp_path: Path) -> None:
    config = _config(tmp_path, {**ROUTE, "senders": ["scheduler"]})
    path = tmp_path / "flow.rw1"
    path.write_text(INTRUDER + "\n")
    result = cli("check", str(path), "--records", RECORDS, "--now", NOW, "--json", env={"GK_CONFIG": config})
    assert result.exit_code == 1 and _rows(result)[0]["reason"] == "sender-binding", result.output


def test_check_without_route_refuses_a_configuration_with_several_routes(tmp_path: Path) -> None:
    other = {**ROUTE, "input": "agents.clin", "output": "o2", "dead_letter": "d2", "alerts": "a2", "profile": "clin"}
    config = _config(tmp_path, {**ROUTE, "senders": ["payer"]}, other)
    result = _check(tmp_path, HO, "--config", config, "--json")
    assert result.exit_code == 2 and result.stdout == "", result.output
    [line] = result.stderr.splitlines()
    assert line.startswith("gatekeeper: error: the configuration has 2 routes (agents.pay, agents.clin)")
    assert "--route" in line
    named = _check(tmp_path, HO, "--config", config, "--route", "agents.pay", "--json")
    assert named.exit_code == 1 and _rows(named)[0]["reason"] == "sender-binding"


def test_check_without_routes_in_the_configuration_checks_the_profile(tmp_path: Path) -> None:
    result = _check(tmp_path, INTRUDER, "--config", _config(tmp_path), "--json")
    assert result.exit_code == 0 and _rows(result)[0]["verdict"] == "forward", result.output
    assert result.stderr == ""
    assert _check(tmp_path, INTRUDER, "--json").exit_code == 0  # no configuration at all: the profile alone


def test_check_a_profile_against_the_only_route_is_a_usage_error(tmp_path: Path) -> None:
    result = _check(tmp_path, HO, "--config", _config(tmp_path, ROUTE), "--profile", "clin")
    assert result.exit_code == 2 and result.stdout == ""
    assert "--profile clin: route agents.pay, the configuration's only route, uses profile pay" in result.stderr
    assert _check(tmp_path, HO, "--config", _config(tmp_path, ROUTE), "--profile", "pay", "--json").exit_code == 0


def test_check_help_says_which_rules_apply() -> None:
    text = " ".join(cli("check", "--help", env={"COLUMNS": "200", "TERM": "dumb"}).stdout.split())
    assert "never by a profile alone" in text and "the configuration's only route" in text
    assert "several routes and no --route is refused" in text


# ---------------------------------------------------------------- 8. --json everywhere


def test_check_takes_json_as_the_other_commands_do(tmp_path: Path) -> None:
    as_json = _check(tmp_path, HO, "--json")
    jsonl = _check(tmp_path, HO, "--format", "jsonl")
    table = _check(tmp_path, HO, "--format", "table")
    assert as_json.exit_code == jsonl.exit_code == table.exit_code == 0, as_json.output
    assert as_json.stdout == jsonl.stdout != table.stdout
    assert _rows(as_json)[0]["verdict"] == "forward"
    assert _check(tmp_path, HO, "--json", "--format", "jsonl").stdout == jsonl.stdout
    both = _check(tmp_path, HO, "--json", "--format", "table")
    assert both.exit_code == 2 and "--json and --format table" in both.stderr and both.stdout == ""


def test_every_command_that_prints_json_takes_json() -> None:
    import typer.main

    def walk(path: list[str], cmd: Any) -> list[tuple[list[str], Any]]:
        out = [(path, cmd)]
        for name, sub in getattr(cmd, "commands", {}).items():
            out += walk([*path, name], sub)
        return out

    for path, cmd in walk([], typer.main.get_command(app)):
        opts = {o for p in cmd.params for o in getattr(p, "opts", ())}
        if "--format" in opts:
            assert "--json" in opts, path


# ---------------------------------------------------------------- 3. make status on a stopped stack


def _make(*args: str, state_dir: Path) -> Any:
    import shutil
    import subprocess

    make = shutil.which("make")
    assert make is not None, "make is not installed"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GK_", "MAKE"))}
    env["GK_STATE_DIR"] = str(state_dir)
    return subprocess.run(
        [make, "--no-print-directory", "-C", str(ROOT), *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_make_status_on_a_stopped_stack_says_so_without_makes_error(tmp_path: Path) -> None:
    """The finding: ``make status`` with the stack stopped ended in ``make: *** [Makefile:58: status] Error 3``."""
    result = _make("status", state_dir=tmp_path)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "kafka: not running" in result.stdout and "redis: not running" in result.stdout
    assert "the local stack is not running: 'make services' starts it" in result.stdout
    assert f". {tmp_path}/stack.env" in result.stdout
    assert "Error" not in result.stderr and "***" not in result.stderr, result.stderr
    helped = _make("help", state_dir=tmp_path)
    assert "make status" in helped.stdout and "exits 0" in helped.stdout and "make stop" in helped.stdout
    assert "deploy/local/stack.sh status, exit 3" in helped.stdout and "GK_STATE_DIR" in helped.stdout


# ---------------------------------------------------------------- 4. a forgotten stack.env


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


HINT = "is the local stack running? `make services` starts it, then `set -a; . .local/stack/stack.env; set +a`"


def test_an_unreachable_kafka_at_the_built_in_default_says_how_to_reach_the_local_stack(tmp_path: Path) -> None:
    """The finding: a shell without stack.env got only ``kafka at 127.0.0.1:9092 is unreachable``."""
    if _listening(9092):
        pytest.skip("something listens on 127.0.0.1:9092, the address this test needs unreachable")
    for config in (_config(tmp_path, ROUTE), str(ROOT / "config" / "gatekeeper.example.yaml")):
        result = cli("topics", "describe", "-c", config)
        assert result.exit_code == 3, result.output
        [line] = result.stderr.splitlines()  # still one line
        assert line.startswith("gatekeeper: error: kafka at 127.0.0.1:9092 is unreachable: "), line
        assert f"(hint: 127.0.0.1:9092 is the built-in default; {HINT}" in line
        assert line.endswith("or set GK_KAFKA__BOOTSTRAP_SERVERS)"), line


def test_an_unreachable_redis_at_the_built_in_default_says_how_to_reach_the_local_stack() -> None:
    if _listening(6379):
        pytest.skip("something listens on 127.0.0.1:6379, the address this test needs unreachable")
    result = cli("records", "get", "inv:MD-2026-057")
    assert result.exit_code == 3, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith("gatekeeper: error: redis redis://127.0.0.1:6379/0: ") and "ConnectionError" in line
    assert f"(hint: redis://127.0.0.1:6379/0 is the built-in default; {HINT}" in line
    assert line.endswith("or set GK_REDIS__URL)"), line


def test_another_address_gets_no_hint(tmp_path: Path) -> None:
    config = _config(
        tmp_path, ROUTE, kafka={"bootstrap_servers": "127.0.0.1:1"}, redis={"url": "redis://127.0.0.1:1/0"}
    )
    for args in (["topics", "describe", "--timeout", "2"], ["records", "get", "inv:1"]):
        result = cli(*args, "-c", config)
        assert result.exit_code == 3 and "127.0.0.1:1" in result.stderr, result.output
        assert "hint" not in result.stderr and "make services" not in result.stderr


def test_the_hint_is_only_for_reaching_a_default_address() -> None:
    from gatekeeper.cli.common import local_stack_hint

    assert local_stack_hint("kafka at 127.0.0.1:9092 is unreachable: KafkaConnectionError") is not None
    assert local_stack_hint("kafka at 127.0.0.1:9092: connecting did not answer within 10s") is not None
    assert local_stack_hint("kafka at 127.0.0.1:9092,10.0.0.5:9092 is unreachable") is None
    assert local_stack_hint("kafka at 127.0.0.1:90921 is unreachable") is None
    assert local_stack_hint("redis redis://127.0.0.1:6379/0: load failed: ConnectionError: refused") is not None
    assert (
        local_stack_hint("redis redis://127.0.0.1:6379/0 lost its data: the generation marker ... is missing") is None
    )
    assert local_stack_hint("redis lost its data: no generation marker gatekeeper:generation") is None


# ---------------------------------------------------------------- 5. the top-level help is true


def _tree() -> list[tuple[list[str], Any]]:
    import typer.main

    def walk(path: list[str], cmd: Any) -> list[tuple[list[str], Any]]:
        out = [(path, cmd)]
        for name, sub in getattr(cmd, "commands", {}).items():
            out += walk([*path, name], sub)
        return out

    return walk([], typer.main.get_command(app))


def test_the_top_level_help_names_the_commands_without_config() -> None:
    """The finding: ``gatekeeper --help`` said every command takes --config; keys, rw and version do not."""
    leaves = [(path, cmd) for path, cmd in _tree() if path and not getattr(cmd, "commands", None)]
    without = {path[0] for path, cmd in leaves if "--config" not in {o for p in cmd.params for o in p.opts}}
    with_config = {path[0] for path, cmd in leaves} - without
    assert without == {"keys", "rw", "version"}
    assert not without & with_config  # a command group is on one side only: its help can say so by its name
    text = " ".join(cli("--help", env={"COLUMNS": "200", "TERM": "dumb"}).stdout.split())
    assert "Every command but keys, rw and version reads the configuration: --config FILE (or GK_CONFIG)" in text
    assert "Every command takes --config" not in text
    docs = " ".join((ROOT / "docs" / "cli.md").read_text().split())
    assert "Every command but `keys`, `rw` and `version` reads the configuration: `--config FILE`" in docs


def test_records_sign_reads_its_profile_from_the_configurations_profile_dirs(tmp_path: Path) -> None:
    """records sign read the configuration only from GK_CONFIG, never --config: a profile of the configuration's
    profile_dirs was unknown to it."""
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    pay = json.loads((ROOT / "rwcore" / "profiles" / "pay.json").read_text())
    (profiles / "acme.json").write_text(json.dumps({**pay, "profile": "acme"}))
    config = _config(tmp_path, profile_dirs=[str(profiles)])
    key = tmp_path / "finance.key"
    assert cli("keys", "generate", "--approver", "finance", "--out", str(key)).exit_code == 0
    args = ("records", "sign", RECORDS, "--key", str(key), "--id", "finance-1", "--profile", "acme")
    signed = cli(*args, "-c", config)
    assert signed.exit_code == 0, signed.output
    assert all(json.loads(line)["signature"] for line in signed.stdout.splitlines())
    unknown = cli(*args)  # without the configuration, the profile is not known
    assert unknown.exit_code == 2 and "--profile" in unknown.stderr


# ---------------------------------------------------------------- 6. rw names itself as it was invoked


def test_gatekeeper_rw_says_gatekeeper_rw_in_its_usage() -> None:
    """The finding: ``gatekeeper rw --help`` said ``usage: python -m rwcore``."""
    top = cli("rw", "--help")
    assert top.exit_code == 0 and top.stdout.startswith("usage: gatekeeper rw [-h] COMMAND"), top.stdout
    assert "usage: python -m rwcore" not in top.stdout
    sub = cli("rw", "check-rb", "--help")
    assert sub.exit_code == 0 and sub.stdout.startswith("usage: gatekeeper rw check-rb "), sub.stdout
    bad = cli("rw", "validate")
    assert bad.exit_code == 2 and "gatekeeper rw validate: error: the following arguments are required" in bad.stderr


def test_python_m_rwcore_and_a_script_name_themselves() -> None:
    import subprocess
    import sys

    from rwcore._cli import invoked_as

    result = subprocess.run([sys.executable, "-m", "rwcore", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.startswith("usage: python -m rwcore [-h] COMMAND"), result.stdout
    assert invoked_as("/usr/local/bin/rw") == "rw"
    assert invoked_as("/x/site-packages/rwcore/__main__.py") == "python -m rwcore"


# ---------------------------------------------------------------- 7. help reflows to the terminal


def test_reflow_joins_prose_and_keeps_indented_lines() -> None:
    from gatekeeper.cli import reflow

    text = "[bold]Examples[/bold]\n\n  [cyan]gk x[/cyan]\n  two\n\nOne paragraph\nwritten on\nthree lines.\n\nNext."
    assert reflow(text) == (
        "[bold]Examples[/bold]\n\n  [cyan]gk x[/cyan]\n  two\n\nOne paragraph written on three lines.\n\nNext."
    )
    assert reflow(reflow(text)) == reflow(text)
    assert reflow("prose\n  kept as written\nprose again\nand on") == "prose\n  kept as written\nprose again and on"


def _prose_breaks(text: str, width: int) -> list[tuple[str, str]]:
    """Lines of rendered help broken where the next word would still have fit: a newline from the source, not
    from the terminal's width. Only prose (the help's margin, one space in); boxes and indented examples aside."""
    lines = [ln.rstrip() for ln in text.splitlines()]

    def prose(ln: str) -> bool:
        return len(ln) > 1 and ln[0] == " " and not ln[1].isspace() and ln[1] not in "│╭╰"

    return [
        (a, b)
        for a, b in itertools.pairwise(lines)
        if prose(a) and prose(b) and len(a) + 1 + len(b.split()[0]) <= width - 1
    ]


@pytest.mark.parametrize("width", [60, 80, 100])
def test_every_help_is_wrapped_by_the_terminal_not_by_the_source(width: int) -> None:
    """The finding: epilogues hard-wrapped at 120 columns came out ragged in narrower terminals."""
    checked = 0
    for path, _ in _tree():
        if path == ["rw"]:  # argparse's own help, which wraps to the terminal itself
            continue
        result = cli(*path, "--help", env={"COLUMNS": str(width), "TERM": "dumb"})
        assert result.exit_code == 0, (path, result.output)
        assert _prose_breaks(result.stdout, width) == [], path
        checked += 1
    assert checked >= 20
    examples = cli("check", "--help", env={"COLUMNS": "200", "TERM": "dumb"}).stdout
    assert "    gatekeeper check flow.rw1 --records config/records.example.json --now 20261001T0900Z" in examples


# ---------------------------------------------------------------- 9. the command table (docs/cli.md) is complete


def test_the_docs_command_table_names_every_command() -> None:
    """The finding: the table lacked keys and serve (and redis, records sign). The table moved from the README to
    docs/cli.md."""
    text = (ROOT / "docs" / "cli.md").read_text()
    start = text.index("| command | what it does |")
    table = text[start : text.index("\n\n", start)]
    commands = " ".join(row.split(" | ")[0] for row in table.splitlines()[2:])
    leaves = [path for path, cmd in _tree() if path and not getattr(cmd, "commands", None)]
    assert len(leaves) >= 20
    missing = [" ".join(path) for path in leaves if f"`gatekeeper {' '.join(path)}" not in commands]
    missing = [name for name in missing if f"`{name}" not in commands]  # a group's rows write `records get ...`
    assert missing == []
