"""A runbook for every alert rule, one to one: each rule of the rules file has a page under docs/runbooks/ and a
``runbook_url`` naming that page on the documentation site (``site_url`` of mkdocs.yml + ``runbooks/<alert name,
lower case>/``, as kube-prometheus names its runbooks); every page there is a rule's (no orphan), is in the site's
navigation, and says what the alert means, how to confirm it and what to do. The promtool unit tests expect the same
``runbook_url`` (they compare every annotation), and the chart's ``prometheusRule.runbookBaseUrl`` replaces the base."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.test_chart import PRODUCTION, docs, helm_env, kind, template

__all__ = ["helm_env"]  # the chart tests' fixture, used here too

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "helm" / "gatekeeper" / "files" / "prometheus-rules.yaml"
RULES_TEST = REPO / "deploy" / "prometheus" / "rules-test.yaml"
RUNBOOKS = REPO / "docs" / "runbooks"
MKDOCS = REPO / "mkdocs.yml"
TEMPLATE = REPO / "deploy" / "helm" / "gatekeeper" / "templates" / "prometheusrule.yaml"


def _alerts() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"] if "alert" in rule]


def _base() -> str:
    site = re.search(r"^site_url: (\S+)$", MKDOCS.read_text(encoding="utf-8"), re.M)
    assert site, "mkdocs.yml names no site_url: the runbooks' base"
    return site.group(1).rstrip("/") + "/runbooks/"


def test_every_rule_has_its_page_and_a_runbook_url_naming_it() -> None:
    alerts = _alerts()
    assert len(alerts) >= 16
    for rule in alerts:
        name = rule["alert"]
        page = RUNBOOKS / f"{name.lower()}.md"
        assert page.is_file(), f"{name}: no runbook {page.relative_to(REPO)}"
        assert rule["annotations"].get("runbook_url") == f"{_base()}{name.lower()}/", name


def test_no_page_without_its_rule() -> None:
    pages = {p.stem for p in RUNBOOKS.glob("*.md")} - {"index"}
    assert pages == {rule["alert"].lower() for rule in _alerts()}


def test_each_page_says_what_it_means_how_to_confirm_it_and_what_to_do() -> None:
    index = (RUNBOOKS / "index.md").read_text(encoding="utf-8")
    nav = MKDOCS.read_text(encoding="utf-8")
    for rule in _alerts():
        name = rule["alert"]
        text = (RUNBOOKS / f"{name.lower()}.md").read_text(encoding="utf-8")
        assert text.startswith(f"# {name}\n"), name
        for heading in ("## What it means", "## How to confirm it", "## What to do"):
            assert heading in text, f"{name}: {heading}"
        confirm = text.split("## How to confirm it", 1)[1].split("## What to do", 1)[0]
        assert "gatekeeper_" in confirm or "up{" in confirm, f"{name}: confirm it with the metrics"
        assert re.search(r"`(gatekeeper |curl |kubectl )", confirm), f"{name}: confirm it with a command"
        assert f"({name.lower()}.md)" in index, f"{name}: not listed in docs/runbooks/index.md"
        assert f"runbooks/{name.lower()}.md" in nav, f"{name}: its runbook is not in the site's nav (mkdocs.yml)"
    assert "runbooks/index.md" in nav, "the runbooks are not in the site's nav"


def test_the_promtool_unit_tests_expect_each_alert_s_runbook_url() -> None:
    doc = yaml.safe_load(RULES_TEST.read_text(encoding="utf-8"))
    seen = 0
    for group in doc["tests"]:
        for case in group.get("alert_rule_test", []):
            for alert in case.get("exp_alerts", []):
                assert alert["exp_annotations"]["runbook_url"] == f"{_base()}{case['alertname'].lower()}/"
                seen += 1
    assert seen >= len(_alerts())


def test_the_chart_replaces_the_base_it_is_given() -> None:
    template = TEMPLATE.read_text(encoding="utf-8")
    assert f'replace "{_base()}"' in template, "the chart's runbookBaseUrl replaces another base than the rules'"
    values = yaml.safe_load((REPO / "deploy" / "helm" / "gatekeeper" / "values.yaml").read_text(encoding="utf-8"))
    assert values["prometheusRule"]["runbookBaseUrl"] == ""


def test_the_chart_renders_the_runbook_urls_under_the_base_it_is_given(helm: Path, helm_env: dict[str, str]) -> None:
    for base, want in (
        (None, _base()),
        ("https://docs.acme.internal/gk/runbooks", "https://docs.acme.internal/gk/runbooks/"),
    ):
        args = ["-f", str(PRODUCTION)] + (["--set", f"prometheusRule.runbookBaseUrl={base}"] if base else [])
        rule = kind(docs(template(helm, helm_env, *args)), "PrometheusRule")
        alerts = [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
        assert len(alerts) == len(_alerts())
        for alert in alerts:
            assert alert["annotations"]["runbook_url"] == f"{want}{alert['alert'].lower()}/", alert["alert"]
