"""The gatekeeper's Grafana dashboard, generated from code (grafana-foundation-sdk).

    .venv/bin/python deploy/grafana/dashboard.py           writes deploy/grafana/gatekeeper.json
    .venv/bin/python deploy/grafana/dashboard.py --check   exits 1 when the committed JSON is not what this makes

Import gatekeeper.json in Grafana (Dashboards > New > Import) and pick a Prometheus data source. The metric names
are those of gatekeeper/metrics.py; tests/deploy/test_monitoring.py evaluates every query below against a real
Prometheus scraping a real gatekeeper. Variables: ``datasource``, ``instance`` and ``route`` (multi-value, All
matches any). ``route`` is a route's input topic, which is also the ``topic`` label of the per-partition gauges.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus, stat, statetimeline, timeseries
from grafana_foundation_sdk.cog import builder as cog
from grafana_foundation_sdk.cog import variants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dm

OUT = Path(__file__).with_name("gatekeeper.json")
UID = "rogerwilco-gatekeeper"

DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
# The selectors every query starts from.
ROUTE = 'route=~"$route", instance=~"$instance"'  # metrics with a route label
INST = 'instance=~"$instance"'  # instance-wide metrics
PART = 'topic=~"$route", instance=~"$instance"'  # per-partition gauges: topic is the route's input topic
RATE = "$__rate_interval"


def q(expr: str, legend: str = "__auto", ref: str = "A", instant: bool = False) -> prometheus.Dataquery:
    query = prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DS)
    return query.instant() if instant else query.range()


Targets = list[cog.Builder[variants.Dataquery]]


def refs(*queries: tuple[str, str]) -> Targets:
    return [q(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(queries)]


def rate_by(metric: str, by: str, selector: str = ROUTE, legend: str | None = None) -> tuple[str, str]:
    """``sum by (BY) (rate(METRIC{SELECTOR}[RATE]))`` and its legend (default: the ``by`` labels), for ``refs``."""
    default = " ".join(f"{{{{{label.strip()}}}}}" for label in by.split(","))
    return f"sum by ({by}) (rate({metric}{{{selector}}}[{RATE}]))", legend or default


def series(
    title: str,
    description: str,
    targets: Targets,
    unit: str = "short",
    stack: bool = False,
    width: int = 8,
    height: int = 8,
    bars: bool = False,
) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .targets(targets)
        .unit(unit)
        .min(0)
        .span(width)
        .height(height)
        .fill_opacity(10)
        .line_width(1)
        .legend(
            cb.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
            .calcs(["mean", "max", "lastNotNull"])
        )
        .tooltip(cb.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI).sort(common.SortOrder.DESCENDING))
    )
    if stack:
        panel = panel.stacking(cb.StackingConfig().mode(common.StackingMode.NORMAL)).fill_opacity(60)
    if bars:
        panel = panel.draw_style(common.GraphDrawStyle.BARS).fill_opacity(80)
    return panel


def thresholds(*steps: tuple[float | None, str]) -> db.ThresholdsConfig:
    return db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps([dm.Threshold(v, c) for v, c in steps])


def single(
    title: str,
    description: str,
    expr: str,
    unit: str = "short",
    steps: tuple[tuple[float | None, str], ...] = ((None, "green"),),
    mappings: list[dm.ValueMapping] | None = None,
    width: int = 4,
) -> stat.Panel:
    panel = (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .with_target(q(expr, instant=True))
        .unit(unit)
        .span(width)
        .height(4)
        .thresholds(thresholds(*steps))
        .color_mode(common.BigValueColorMode.BACKGROUND)
        .graph_mode(common.BigValueGraphMode.NONE)
        .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
    )
    if mappings:
        panel = panel.mappings(mappings)
    return panel


def states(
    title: str, description: str, expr: str, legend: str, mapping: dict[str, tuple[str, str]], width: int = 12
) -> statetimeline.Panel:
    options = {value: dm.ValueMappingResult(text=text, color=color) for value, (text, color) in mapping.items()}
    return (
        statetimeline.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .with_target(q(expr, legend))
        .span(width)
        .height(6)
        .mappings([dm.ValueMap(options=options)])
        .thresholds(thresholds((None, "green")))
        .show_value(common.VisibilityMode.NEVER)
        .merge_values(True)
        .fill_opacity(80)
    )


def quantiles(metric: str, by: str = "route", selector: str = ROUTE) -> Targets:
    def one(p: str) -> str:
        return f"histogram_quantile({p}, sum by (le, {by}) (rate({metric}_bucket{{{selector}}}[{RATE}])))"

    return refs((one("0.5"), "p50 {{" + by + "}}"), (one("0.99"), "p99 {{" + by + "}}"))


def variables() -> list[cog.Builder[dm.VariableModel]]:
    def label_values(name: str, label: str, query: str, regex_all: bool = True) -> db.QueryVariable:
        v = (
            db.QueryVariable(name)
            .label(label)
            .datasource(DS)
            .query({"query": query, "refId": f"{name}-variable"})
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(dm.VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .current(dm.VariableOption(selected=True, text="All", value="$__all"))
        )
        return v.all_value(".*") if regex_all else v

    return [
        db.DatasourceVariable("datasource")
        .label("Data source")
        .type("prometheus")
        .current(dm.VariableOption(selected=True, text="default", value="default")),
        label_values("instance", "Instance", "label_values(gatekeeper_info, instance)"),
        # gatekeeper_held_lines is set for every configured route from the start (a counter appears only once used)
        label_values("route", "Route", 'label_values(gatekeeper_held_lines{instance=~"$instance"}, route)'),
    ]


def build() -> dm.Dashboard:
    d = (
        db.Dashboard("rogerwilco gatekeeper")
        .uid(UID)
        .description(
            "The handoff protocol's gatekeeper: lines decided, dead letters, alerts, handoffs, latency, "
            "Kafka and Redis. Generated by deploy/grafana/dashboard.py; edit that, not the JSON."
        )
        .tags(["rogerwilco", "gatekeeper"])
        .editable()
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .time("now-6h", "now")
        .timezone("browser")
        .refresh("30s")
        .variables(variables())
    )

    d = d.with_row(db.Row("Overview"))
    d = d.with_panel(
        single(
            "Instances ready",
            "Instances reporting ready (gatekeeper_ready) out of those scraped.",
            f"sum(gatekeeper_ready{{{INST}}}) or vector(0)",
            steps=((None, "red"), (1, "green")),
        )
    )
    d = d.with_panel(
        single(
            "Lines decided /s",
            "Lines decided per second, every verdict, over the last 5 minutes.",
            f"sum(rate(gatekeeper_lines_total{{{ROUTE}}}[5m])) or vector(0)",
            unit="reqps",
        )
    )
    d = d.with_panel(
        single(
            "Dead-lettered (5m)",
            "Share of the lines decided in the last 5 minutes that were dead-lettered.",
            f"(sum(rate(gatekeeper_dead_letters_total{{{ROUTE}}}[5m])) or vector(0)) / "
            f"sum(rate(gatekeeper_lines_total{{{ROUTE}}}[5m]))",
            unit="percentunit",
            steps=((None, "green"), (0.05, "orange"), (0.25, "red")),
        )
    )
    d = d.with_panel(
        single(
            "DN differs from plan (24h)",
            "check-dn alerts in the last 24 hours: a done report that does not match its handoff. Each needs a "
            "human (GatekeeperDoneDiffersFromPlan).",
            f'sum(increase(gatekeeper_alerts_total{{reason="check-dn", {ROUTE}}}[24h])) or vector(0)',
            steps=((None, "green"), (1, "red")),
        )
    )
    d = d.with_panel(
        single(
            "Open handoffs now",
            "Open handoffs on the selected routes, summed over instances.",
            f"sum(gatekeeper_open_handoffs{{{ROUTE}}}) or vector(0)",
        )
    )
    d = d.with_panel(
        single(
            "Oldest open handoff",
            "Age of the oldest open handoff (max over instances).",
            f"max(gatekeeper_oldest_open_handoff_seconds{{{ROUTE}}}) or vector(0)",
            unit="s",
            steps=((None, "green"), (3600, "orange"), (86400, "red")),
        )
    )

    d = d.with_row(db.Row("Lines"))
    d = d.with_panel(
        series(
            "Lines per second by verdict",
            "Lines decided per second: forward, alert (forwarded, flagged and alerted), dead-letter. A held line "
            "counts once, when decided.",
            refs(rate_by("gatekeeper_lines_total", "verdict")),
            unit="reqps",
            stack=True,
        )
    )
    d = d.with_panel(
        series(
            "Dead letters by reason",
            "Lines dead-lettered per second, by reason (policy.Reason).",
            refs(rate_by("gatekeeper_dead_letters_total", "reason")),
            unit="reqps",
            stack=True,
        )
    )
    d = d.with_panel(
        series(
            "Alerts by reason",
            "Alerts raised per second, by reason. check-dn: a done report differs from its plan.",
            refs(rate_by("gatekeeper_alerts_total", "reason")),
            unit="reqps",
            stack=True,
        )
    )
    d = d.with_panel(
        series(
            "Dry-run: would dead-letter",
            "Lines of dry-run routes that enforce mode would dead-letter (they were forwarded), by route and reason.",
            refs(rate_by("gatekeeper_dry_run_would_dead_letter_total", "route, reason")),
            unit="reqps",
            stack=True,
        )
    )
    d = d.with_panel(
        series(
            "Lines per second by route and type",
            "Lines decided per second by route and message type (none: a line that did not parse).",
            refs(rate_by("gatekeeper_lines_total", "route, type")),
            unit="reqps",
        )
    )
    d = d.with_panel(
        series(
            "Outcomes produced",
            "Records produced per second by kind (output, dead-letter, alert); trimmed: outcomes cut to fit their "
            "topic; repeated: lines answered from their stored first decision.",
            refs(
                rate_by("gatekeeper_outcomes_total", "kind"),
                rate_by("gatekeeper_outcomes_trimmed_total", "kind", legend="trimmed {{kind}}"),
                (f"sum(rate(gatekeeper_repeated_total{{{ROUTE}}}[{RATE}]))", "repeated"),
            ),
            unit="reqps",
        )
    )

    d = d.with_row(db.Row("Latency"))
    d = d.with_panel(
        series(
            "Check latency p50 / p99",
            "Deciding one batch: one Redis load and one save (gatekeeper_check_seconds).",
            quantiles("gatekeeper_check_seconds"),
            unit="s",
        )
    )
    d = d.with_panel(
        series(
            "End-to-end line latency p50 / p99",
            "One line, from consumed to its outcome acknowledged by Kafka (gatekeeper_line_seconds). Held lines "
            "include their wait.",
            quantiles("gatekeeper_line_seconds"),
            unit="s",
        )
    )
    d = d.with_panel(
        series(
            "Batch size p50 / p99",
            "Lines per decided batch.",
            quantiles("gatekeeper_batch_size"),
        )
    )

    d = d.with_row(db.Row("Handoffs"))
    d = d.with_panel(
        series(
            "Open handoffs by route",
            "Open handoffs per route, summed over the instances holding its partitions.",
            refs((f"sum by (route) (gatekeeper_open_handoffs{{{ROUTE}}})", "{{route}}")),
        )
    )
    d = d.with_panel(
        series(
            "Oldest open handoff age",
            "Age of the oldest open handoff per route (max over instances).",
            refs((f"max by (route) (gatekeeper_oldest_open_handoff_seconds{{{ROUTE}}})", "{{route}}")),
            unit="s",
        )
    )
    d = d.with_panel(
        series(
            "Cancels emitted",
            "CX lines the gatekeeper published on a sender's behalf (EXPIRED: exp=/due= passed; TIMEOUT: no "
            "readback in time), per interval.",
            refs((f"sum by (route, why) (increase(gatekeeper_cancels_total{{{ROUTE}}}[{RATE}]))", "{{route}} {{why}}")),
            bars=True,
        )
    )
    d = d.with_panel(
        series(
            "Handoffs expired",
            "Handoffs whose time ran out while open, by deadline (exp, due, readback), per interval.",
            refs(
                (
                    f"sum by (route, reason) (increase(gatekeeper_handoffs_expired_total{{{ROUTE}}}[{RATE}]))",
                    "{{route}} {{reason}}",
                )
            ),
            bars=True,
        )
    )
    d = d.with_panel(
        series(
            "Thread audit problems",
            "The thread audit's problems by code, per interval (thread-orphaned: a handoff open past its "
            "deadline; cleared-not-done: cleared, never reported done).",
            refs(
                (
                    f"sum by (route, code) (increase(gatekeeper_handoff_problems_total{{{ROUTE}}}[{RATE}]))",
                    "{{route}} {{code}}",
                )
            ),
            bars=True,
        )
    )
    d = d.with_panel(
        series(
            "Sweep duration p50 / p99",
            "One sweep of the partitions an instance holds (expiry cancels).",
            quantiles("gatekeeper_sweep_seconds", by="instance", selector=INST),
            unit="s",
        )
    )

    d = d.with_row(db.Row("Kafka and Redis"))
    d = d.with_panel(
        series(
            "Consumer lag per partition",
            "Records not yet consumed per input partition (high water mark minus position).",
            refs((f"max by (topic, partition) (gatekeeper_consumer_lag{{{PART}}})", "{{topic}}[{{partition}}]")),
            width=12,
        )
    )
    d = d.with_panel(
        series(
            "Kafka errors",
            "Kafka operations that failed per second, by operation and instance.",
            refs(rate_by("gatekeeper_kafka_errors_total", "instance, operation", INST)),
            unit="reqps",
            width=12,
        )
    )
    d = d.with_panel(
        series(
            "Redis errors and fenced writes",
            "Store operations that failed (Redis unavailable), and state writes refused because a newer owner of "
            "the partition wrote (this instance lost it in a rebalance), per second.",
            refs(
                rate_by("gatekeeper_redis_errors_total", "instance", INST, legend="redis errors {{instance}}"),
                rate_by("gatekeeper_fenced_writes_total", "instance", INST, legend="fenced {{instance}}"),
            ),
            unit="reqps",
        )
    )
    d = d.with_panel(
        series(
            "Internal errors",
            "Lines or handoffs whose handling raised: a bug (the line dead-lettered internal-error), per interval.",
            refs(
                (
                    f"sum by (route, stage) (increase(gatekeeper_internal_errors_total{{{ROUTE}}}[{RATE}]))",
                    "{{route}} {{stage}}",
                )
            ),
            bars=True,
        )
    )
    d = d.with_panel(
        series(
            "Redis round trips",
            "The store's round trips to Redis on a batch's path per second (a pipeline is one), by operation.",
            refs(rate_by("gatekeeper_redis_round_trips_total", "operation", INST)),
            unit="reqps",
        )
    )

    d = d.with_row(db.Row("Instances, holds and the breaker"))
    d = d.with_panel(
        states(
            "Readiness per instance",
            "1 when Kafka and Redis answer and the group is joined; down: the target is not scraped.",
            f"max by (instance) (gatekeeper_ready{{{INST}}})"
            f' or max by (instance) (up{{job=~".*gatekeeper.*", {INST}}}) * 0 - 1',
            "{{instance}}",
            {"1": ("ready", "green"), "0": ("not ready", "red"), "-1": ("down", "dark-red")},
        )
    )
    d = d.with_panel(
        states(
            "Dead-letter breaker",
            "1 while a route's dead-letter breaker has tripped (action pause: the route is paused).",
            f"max by (route) (gatekeeper_dead_letter_breaker_open{{{ROUTE}}})",
            "{{route}}",
            {"0": ("closed", "green"), "1": ("open", "red")},
        )
    )
    d = d.with_panel(
        series(
            "Assigned partitions",
            "Input partitions assigned to each instance.",
            refs((f"sum by (instance) (gatekeeper_assigned_partitions{{{INST}}})", "{{instance}}")),
        )
    )
    d = d.with_panel(
        series(
            "Work loop stalled",
            "Seconds since each instance's work loop last turned (a batch, a poll or a retry). /healthz fails past "
            "http.stall_seconds while partitions have lag.",
            refs((f"max by (instance) (gatekeeper_work_loop_stalled_seconds{{{INST}}})", "{{instance}}")),
            unit="s",
        )
    )
    d = d.with_panel(
        series(
            "Held lines and hold pressure",
            "Lines in the hold buffer (replies waiting for their handoff), and 1 while a route's held lines are at "
            "a bound.",
            refs(
                (f"sum by (route) (gatekeeper_held_lines{{{ROUTE}}})", "held {{route}}"),
                (f"max by (route) (gatekeeper_hold_pressure{{{ROUTE}}})", "pressure {{route}}"),
            ),
        )
    )
    d = d.with_panel(
        series(
            "Holds forced and dead-letter ratio",
            "Held lines decided early because a bound was reached (per second, by bound), and the share of the "
            "route's lines dead-lettered over the breaker's window.",
            refs(
                rate_by("gatekeeper_holds_forced_total", "route, bound", legend="forced {{route}} {{bound}}"),
                (f"max by (route) (gatekeeper_dead_letter_ratio{{{ROUTE}}})", "dead-letter ratio {{route}}"),
                (
                    f"sum by (route) (increase(gatekeeper_dead_letter_breaker_trips_total{{{ROUTE}}}[{RATE}]))",
                    "trips {{route}}",
                ),
            ),
        )
    )
    return d.build()


def render() -> str:
    return json.dumps(build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed JSON is stale")
    parser.add_argument("--out", type=Path, default=OUT, help=f"where to write (default {OUT.name} beside this)")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is stale: run {Path(__file__).as_posix()} and commit the result", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
