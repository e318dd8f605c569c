"""The monitoring kit: the alert rules, their promtool unit tests and the Grafana dashboard.

- ``promtool check rules`` and ``promtool test rules`` (every alert tested firing and not firing);
- the dashboard JSON is what ``deploy/grafana/dashboard.py`` generates, every panel has a query;
- every metric name and label a query uses is one ``gatekeeper.metrics`` exposes;
- a real Prometheus parses every query (its AST gives the selectors and groupings checked);
- live: a real gatekeeper (``gatekeeper run``, a subprocess) decides a few lines on real Kafka and Redis, a real
  Prometheus scrapes it every second with the rules loaded, and every dashboard query and every rule is evaluated
  through ``/api/v1/query``; every rule evaluates healthy, and the check-dn alert fires on the first done report
  that differs from its plan.

promtool and prometheus are built by ``deploy/tools/install.sh`` (Go, cached); a tool that cannot be built fails
the tests, it never skips them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from gatekeeper.config import Settings
from gatekeeper.metrics import BatchHistogram, Metrics

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "helm" / "gatekeeper" / "files" / "prometheus-rules.yaml"
RULES_TEST = REPO / "deploy" / "prometheus" / "rules-test.yaml"
DASHBOARD_PY = REPO / "deploy" / "grafana" / "dashboard.py"
DASHBOARD_JSON = REPO / "deploy" / "grafana" / "gatekeeper.json"

#: Labels the scrape adds (instance, job) or a Kubernetes scrape adds (namespace), on every series.
TARGET_LABELS = frozenset({"job", "instance", "namespace"})
#: What the dashboard's variables stand for when every value is selected.
VARIABLES = {"$route": ".*", "$instance": ".*", "$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}
SEVERITIES = frozenset({"critical", "warning", "info"})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _api(base: str, path: str, **params: str) -> Any:
    """A Prometheus API call; the whole answer (status, data, error, warnings)."""
    status, body = _get(f"{base}{path}?{urllib.parse.urlencode(params)}", timeout=15.0)
    doc = json.loads(body)
    assert isinstance(doc, dict), body[:300]
    doc.setdefault("http_status", status)
    return doc


def _stop(proc: subprocess.Popen[bytes] | None, timeout: float = 20.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


@contextlib.contextmanager
def prometheus_server(
    binary: Path, folder: Path, targets: Sequence[str] = (), rule_files: Sequence[Path] = ()
) -> Iterator[str]:
    """A real Prometheus on a free local port, scraping ``targets`` every second (job ``gatekeeper``) and
    evaluating ``rule_files`` every second. Yields its base URL; stopped on exit."""
    folder.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [{"job_name": "gatekeeper", "static_configs": [{"targets": list(targets)}]}]
        if targets
        else [],
    }
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log = (folder / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            str(binary),
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        _until_ready(proc, "prometheus", folder / "prometheus.log", lambda: f"{base}/-/ready")
        yield base
    finally:
        _stop(proc)
        log.close()


def _until_ready(proc: subprocess.Popen[bytes], what: str, log_path: Path, url: Callable[[], str | None]) -> None:
    """Polls ``url()`` (None: not known yet) until it answers 200; fails the test if ``proc`` exits or after 60 s."""
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited {proc.returncode}:\n{_tail(log_path)}", pytrace=False)
        where = url()
        if where is not None:
            with contextlib.suppress(OSError):
                if _get(where, timeout=2.0)[0] == 200:
                    return
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not ready after 60 s:\n{_tail(log_path)}", pytrace=False)
        time.sleep(0.2)


def _tail(path: Path, n: int = 4000) -> str:
    with contextlib.suppress(OSError):
        return path.read_text(encoding="utf-8", errors="replace")[-n:]
    return ""


# ------------------------------------------------------------------------------------------------ the queries


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"]]


def _dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD_JSON.read_text(encoding="utf-8"))
    return doc


def _panels() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for panel in _dashboard()["panels"]:
        out.extend(panel.get("panels", []) if panel["type"] == "row" else [panel])
    return out


def _substitute(expr: str) -> str:
    for name, value in sorted(VARIABLES.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(name, value).replace("${" + name[1:] + "}", value)
    assert "$" not in expr, f"a dashboard variable without a value in the tests: {expr}"
    return expr


def _label_values(query: str) -> tuple[str, str]:
    """``label_values(SELECTOR, LABEL)`` (a Grafana variable query) -> (SELECTOR, LABEL)."""
    match = re.fullmatch(r"label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\)", query.strip())
    assert match, f"not a label_values() query: {query}"
    return match.group(1), match.group(2)


def dashboard_queries() -> dict[str, str]:
    """Every PromQL expression of the dashboard, variables substituted: {where: expr}."""
    out: dict[str, str] = {}
    for panel in _panels():
        for target in panel.get("targets", []):
            where = f"panel {panel['title']!r} {target['refId']}"
            assert where not in out, f"two queries are {where}"
            out[where] = _substitute(target["expr"])
    for var in _dashboard()["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            selector, _label = _label_values(query)
            out[f"variable {var['name']}"] = _substitute(selector)
    return out


def rule_queries() -> dict[str, str]:
    return {f"rule {r.get('alert') or r.get('record')}": r["expr"] for r in _rules()}


def recording_rule_names() -> set[str]:
    return {r["record"] for r in _rules() if "record" in r}


def exposed() -> dict[str, frozenset[str]]:
    """Every sample name ``gatekeeper.metrics`` exposes -> the labels it has (the metric's own, ``le`` on a
    histogram's buckets). ``_created`` samples are left out: nothing should query them."""
    out: dict[str, frozenset[str]] = {}
    for metric in vars(Metrics()).values():
        if isinstance(metric, BatchHistogram):  # the gatekeeper's own histogram (observed a batch at a time)
            labels = frozenset(metric.labelnames)
            out.update({f"{metric.name}_bucket": labels | {"le"}, f"{metric.name}_sum": labels})
            out[f"{metric.name}_count"] = labels
            continue
        name, kind = getattr(metric, "_name", None), getattr(metric, "_type", None)
        if name is None or kind is None:
            continue
        labels = frozenset(metric._labelnames)
        if kind == "counter":
            out[f"{name}_total"] = labels
        elif kind == "histogram":
            out.update({f"{name}_bucket": labels | {"le"}, f"{name}_sum": labels, f"{name}_count": labels})
        else:
            out[name] = labels
    out["up"] = frozenset()
    return out


def live_names(text: str) -> set[str]:
    """The sample names a live ``/metrics`` declares (from its ``# TYPE`` lines: a labelled metric with no child
    yet has no sample, but it is declared)."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
            else:
                names.add(name)
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def names_in(expr: str) -> set[str]:
    """The gatekeeper metric names an expression mentions (a textual scan; the AST check below is exact)."""
    names = set(re.findall(r"\bgatekeeper_[a-z0-9_]+\b", expr))
    return names | {"up"} if re.search(r"\bup\s*\{", expr) else names


# ------------------------------------------------------------------------------------------------ AST (from Prometheus)


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        if "type" in node:
            yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def _selector_name(node: dict[str, Any]) -> str:
    if node.get("name"):
        return str(node["name"])
    for m in node.get("matchers") or []:
        if m["name"] == "__name__" and m["type"] == "=":
            return str(m["value"])
    raise AssertionError(f"a selector without a metric name: {node}")


def ast_problems(ast: Any, known: dict[str, frozenset[str]]) -> list[str]:
    """What is wrong in a parsed query: a metric name nothing exposes, a matcher or a grouping on a label the
    metrics under it do not have."""
    problems: list[str] = []
    for node in _walk(ast):
        if node["type"] in ("vectorSelector", "matrixSelector"):
            name = _selector_name(node)
            if name not in known:
                problems.append(f"unknown metric {name}")
                continue
            for m in node.get("matchers") or []:
                label = m["name"]
                if label != "__name__" and label not in known[name] | TARGET_LABELS:
                    problems.append(f"{name} has no label {label}")
        elif node["type"] == "aggregation" or (node["type"] == "binaryExpr" and node.get("matching")):
            labels = node.get("grouping") if node["type"] == "aggregation" else node["matching"].get("labels")
            below = {_selector_name(n) for n in _walk(node) if n["type"] in ("vectorSelector", "matrixSelector")}
            have = set(TARGET_LABELS)
            for name in below:
                have |= known.get(name, frozenset())
            problems += [
                f"grouping on {label}, which none of {sorted(below)} has" for label in labels or [] if label not in have
            ]
    return problems


# ------------------------------------------------------------------------------------------------ static tests


def test_promtool_checks_the_rules_file(promtool: Path) -> None:
    proc = subprocess.run(
        [str(promtool), "check", "rules", "--lint=all", "--lint-fatal", str(RULES)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in proc.stdout


def test_promtool_unit_tests_pass(promtool: Path) -> None:
    proc = subprocess.run(
        [str(promtool), "test", "rules", str(RULES_TEST)], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr


def test_every_alert_is_unit_tested_firing_and_not_firing() -> None:
    doc = yaml.safe_load(RULES_TEST.read_text(encoding="utf-8"))
    assert doc["rule_files"] == ["../helm/gatekeeper/files/prometheus-rules.yaml"]
    fires: set[str] = set()
    quiet: set[str] = set()
    for group in doc["tests"]:
        for case in group.get("alert_rule_test", []):
            (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
    alerts = {r["alert"] for r in _rules() if "alert" in r}
    assert alerts - fires == set(), "alerts never tested firing"
    assert alerts - quiet == set(), "alerts never tested not firing"
    assert (fires | quiet) - alerts == set(), "tests of alerts that do not exist"


def test_every_alert_has_a_severity_a_summary_and_what_to_do() -> None:
    names = [r["alert"] for r in _rules() if "alert" in r]
    assert len(names) == len(set(names)), "an alert name used twice"
    for rule in _rules():
        if "alert" not in rule:
            continue
        name = rule["alert"]
        assert rule.get("labels", {}).get("severity") in SEVERITIES, name
        annotations = rule.get("annotations", {})
        assert annotations.get("summary") and annotations.get("description"), name
        assert "What to do" in annotations["description"], f"{name}: the description says what to do"
        assert "$labels" in annotations["summary"] + annotations["description"] or name == "GatekeeperAbsent", name


def test_the_dashboard_is_what_its_generator_makes() -> None:
    proc = subprocess.run(
        [sys.executable, str(DASHBOARD_PY), "--check"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr


def test_the_dashboard_check_catches_a_stale_json(tmp_path: Path) -> None:
    stale = tmp_path / "gatekeeper.json"
    stale.write_text(DASHBOARD_JSON.read_text(encoding="utf-8").replace("Lines per second", "Lines a second"))
    proc = subprocess.run(
        [sys.executable, str(DASHBOARD_PY), "--check", "--out", str(stale)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1 and "stale" in proc.stderr


def test_every_panel_has_a_query_on_the_chosen_data_source() -> None:
    panels = _panels()
    assert len(panels) >= 20
    for panel in panels:
        targets = panel.get("targets", [])
        assert targets, f"panel {panel['title']!r} has no target"
        for target in targets:
            assert target.get("expr", "").strip(), f"panel {panel['title']!r} {target.get('refId')}: no expr"
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
    titles = [p["title"] for p in panels]
    assert len(titles) == len(set(titles)), "two panels with one title"
    variables = {v["name"]: v for v in _dashboard()["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ("route", "instance"):
        assert variables[name]["type"] == "query" and variables[name]["includeAll"], name
        _label_values(variables[name]["query"]["query"])


@pytest.mark.parametrize("where, expr", sorted({**dashboard_queries(), **rule_queries()}.items()))
def test_every_query_names_real_metrics_and_labels(where: str, expr: str) -> None:
    known = exposed()
    names = names_in(expr)
    assert names, f"{where}: no gatekeeper metric"
    assert names - known.keys() - recording_rule_names() == set(), f"{where}: {expr}"
    for name, matchers in re.findall(r"\b(gatekeeper_[a-z0-9_]+)\{([^}]*)\}", expr):
        for label in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", matchers):
            assert label in known.get(name, frozenset()) | TARGET_LABELS, f"{where}: {name} has no label {label}"


def test_prometheus_parses_every_query(prometheus_bin: Path, tmp_path: Path) -> None:
    """A real Prometheus's parser on every query, and its AST for the exact names and labels."""
    queries = {**dashboard_queries(), **rule_queries()}
    known = exposed()
    with prometheus_server(prometheus_bin, tmp_path / "prometheus") as base:
        failures = []
        for where, expr in sorted(queries.items()):
            answer = _api(base, "/api/v1/parse_query", query=expr)
            if answer.get("status") != "success":
                failures.append(f"{where}: {answer.get('error')}\n    {expr}")
                continue
            failures += [f"{where}: {p}\n    {expr}" for p in ast_problems(answer["data"], known)]
        # the checks themselves: a misspelt name, a label a metric does not have, a grouping on nothing
        for wrong in (
            "sum(rate(gatekeeper_line_total[1m]))",
            'gatekeeper_redis_errors_total{route="x"}',
            "sum by (reason) (gatekeeper_held_lines)",
        ):
            bad = _api(base, "/api/v1/parse_query", query=wrong)
            assert bad["status"] == "success" and ast_problems(bad["data"], known), wrong
    assert not failures, "\n".join(failures)


# ------------------------------------------------------------------------------------------------ live


def _gatekeeper_config(kafka: str, redis: str, routes: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "kafka": {
            "bootstrap_servers": kafka,
            "group_id": f"gk-test-mon-{uuid.uuid4().hex[:8]}",
            "batch_timeout_ms": 50,
            "request_timeout_ms": 10_000,
        },
        "redis": {"url": redis, "key_prefix": f"gkm{uuid.uuid4().hex[:10]}"},
        "http": {"host": "127.0.0.1", "port": 0},
        "routes": routes,
        "sweeper": {"interval_seconds": 1.0},
        "grace_seconds": 5.0,
        "log_format": "text",
        "log_level": "INFO",
    }


@contextlib.contextmanager
def gatekeeper_daemon(config: dict[str, Any], folder: Path) -> Iterator[str]:
    """``gatekeeper run -c CONFIG`` as a subprocess, its HTTP server on a free port; yields its base URL once
    ``/readyz`` answers 200. SIGTERM on exit."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "gatekeeper.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GK_")}  # the file alone configures it
    exe = Path(sys.executable).with_name("gatekeeper")
    command = [str(exe)] if exe.exists() else [sys.executable, "-c", "from gatekeeper.cli import main; main()"]
    log_path = folder / "gatekeeper.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [*command, "run", "-c", str(path), "--startup-timeout", "30"],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=REPO,
    )
    try:
        base = ""

        def ready_url() -> str | None:
            nonlocal base
            if not base:
                found = re.search(r"metrics on (http://\S+)/metrics", _tail(log_path, 1_000_000))
                base = found.group(1) if found else ""
            return f"{base}/readyz" if base else None

        _until_ready(proc, "gatekeeper run", log_path, ready_url)
        yield base
    finally:
        _stop(proc)
        log.close()


def _wait(what: str, predicate: Any, timeout: float, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def _query(base: str, expr: str) -> dict[str, Any]:
    answer: dict[str, Any] = _api(base, "/api/v1/query", query=expr)
    return answer


def _values(answer: dict[str, Any], label: str) -> set[str]:
    return {s["metric"].get(label, "") for s in answer["data"]["result"]}


@pytest.mark.integration
async def test_every_query_evaluates_against_a_live_gatekeeper(
    prometheus_bin: Path,
    topic_factory: Any,
    kafka_bootstrap: str,
    redis_url: str,
    redis_client: object,
    tmp_path: Path,
) -> None:
    from gatekeeper.redis_store import RedisStore
    from tests.integration._pipeline import make_route, produce
    from tests.policy.world import AN, DN, HO, RB, RECORD

    enforce = await make_route(topic_factory)
    dry = await make_route(topic_factory, mode="dry-run")
    config = _gatekeeper_config(kafka_bootstrap, redis_url, [enforce, dry])
    store = RedisStore(Settings.model_validate(config).redis)
    try:
        await store.put_record(RECORD)
    finally:
        await store.close()

    bad_dn = DN.replace("amt=5400.00", "amt=5100.00")  # a done report that differs from its plan: check-dn
    with gatekeeper_daemon(config, tmp_path / "gatekeeper") as gk:
        await produce(kafka_bootstrap, enforce["input"], [(b"mon-pay", v.encode(), ()) for v in (HO, RB, AN, bad_dn)])
        await produce(kafka_bootstrap, enforce["input"], [(b"mon-bad", b"this is not an RW1 line", ())])
        await produce(kafka_bootstrap, dry["input"], [(b"mon-dry", b"nor is this", ())])

        def metrics_text() -> str:
            return _get(f"{gk}/metrics")[1].decode()

        def decided() -> str | None:
            text = metrics_text()
            wanted = (
                'gatekeeper_alerts_total{reason="check-dn"',
                'gatekeeper_dead_letters_total{reason="invalid"',
                "gatekeeper_dry_run_would_dead_letter_total{",
            )
            return text if all(w in text for w in wanted) else None

        text = _wait("the gatekeeper to decide the lines", decided, 60)
        live = live_names(text)
        assert exposed().keys() - {"up"} <= live, "gatekeeper.metrics and the live /metrics disagree"

        port = urllib.parse.urlsplit(gk).port
        with prometheus_server(
            prometheus_bin, tmp_path / "prometheus", targets=[f"127.0.0.1:{port}"], rule_files=[RULES]
        ) as prom:
            _wait("the target to be up", lambda: _values(_query(prom, 'up{job="gatekeeper"} == 1'), "instance"), 30)
            # rate() needs two samples in its window
            _wait(
                "two scrapes of the lines counter",
                lambda: _query(prom, "rate(gatekeeper_lines_total[1m])")["data"]["result"],
                30,
            )

            failures = []
            for where, expr in sorted({**dashboard_queries(), **rule_queries()}.items()):
                answer = _query(prom, expr)
                if answer.get("status") != "success":
                    failures.append(f"{where}: {answer.get('error')}\n    {expr}")
                    continue
                ast = _api(prom, "/api/v1/parse_query", query=expr)["data"]
                used = {_selector_name(n) for n in _walk(ast) if n["type"] in ("vectorSelector", "matrixSelector")}
                missing = used - live - {"up"} - recording_rule_names()
                if missing:
                    failures.append(f"{where}: not in the live /metrics: {sorted(missing)}")
            assert not failures, "\n".join(failures)

            # the queries see the lines: the selectors and the variables' All match
            dq = dashboard_queries()
            verdicts = _values(_query(prom, dq["panel 'Lines per second by verdict' A"]), "verdict")
            assert {"forward", "alert", "dead-letter"} <= verdicts
            assert "invalid" in _values(_query(prom, dq["panel 'Dead letters by reason' A"]), "reason")
            assert "check-dn" in _values(_query(prom, dq["panel 'Alerts by reason' A"]), "reason")
            assert dry["input"] in _values(_query(prom, dq["panel 'Dry-run: would dead-letter' A"]), "route")
            assert {enforce["input"], dry["input"]} <= _values(_query(prom, dq["variable route"]), "route")
            assert f"127.0.0.1:{port}" in _values(_query(prom, dq["variable instance"]), "instance")
            assert enforce["input"] in _values(_query(prom, dq["panel 'Consumer lag per partition' A"]), "topic")
            ready = _query(prom, dq["panel 'Readiness per instance' A"])["data"]["result"]
            assert [s["value"][1] for s in ready] == ["1"]
            p99 = _query(prom, dq["panel 'End-to-end line latency p50 / p99' B"])["data"]["result"]
            assert {s["metric"]["route"] for s in p99} >= {enforce["input"]}

            # every rule evaluated by Prometheus itself, healthy; the DN alert fires on its first increment
            def evaluated() -> list[dict[str, Any]] | None:
                groups = _api(prom, "/api/v1/rules")["data"]["groups"]
                rules = [r for g in groups for r in g["rules"]]
                # before its first evaluation a rule's lastEvaluation is the zero time, 0001-01-01T00:00:00Z
                done = len(rules) == len(_rules()) and not any(r["lastEvaluation"].startswith("0001") for r in rules)
                return rules if done else None

            rules = _wait("every rule evaluated", evaluated, 30)
            unhealthy = [
                f"{r['name']}: {r.get('health')} {r.get('lastError')}" for r in rules if r.get("health") != "ok"
            ]
            assert not unhealthy, unhealthy

            def firing() -> set[str]:
                alerts = _api(prom, "/api/v1/alerts")["data"]["alerts"]
                return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}

            _wait("GatekeeperDoneDiffersFromPlan to fire", lambda: "GatekeeperDoneDiffersFromPlan" in firing(), 30)
            alerts = _api(prom, "/api/v1/alerts")["data"]["alerts"]
            (dn,) = [a for a in alerts if a["labels"]["alertname"] == "GatekeeperDoneDiffersFromPlan"]
            assert dn["labels"]["route"] == enforce["input"] and dn["labels"]["severity"] == "critical"
            assert (
                f"Route {enforce['input']} (job gatekeeper) raised 1 check-dn alert(s)"
                in dn["annotations"]["description"]
            )
            assert firing() == {"GatekeeperDoneDiffersFromPlan"}, "nothing else is wrong with this gatekeeper"
