"""``gatekeeper replay``: re-drive a dead-letter topic (see ``gatekeeper.replay`` for what it does and guarantees)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from typing import Annotated

import typer

from gatekeeper.cli import app
from gatekeeper.cli._out import console
from gatekeeper.cli.common import (
    EXIT_FINDING,
    EXIT_USAGE,
    ConfigOption,
    cli_errors,
    fail,
    settings_from,
)
from gatekeeper.inert import inert, json_inert
from gatekeeper.masking import sensitive_slots
from gatekeeper.replay import (
    MAX_ATTEMPTS,
    Replayer,
    ReplayError,
    ReplayReport,
    Selection,
    Status,
    masked,
    parse_letters,
    parse_when,
    summary_rows,
)

EPILOG = """\
[bold]Examples[/bold]

  The approval for a held payment has landed; forward what it held:

    [cyan]gatekeeper records load approvals.json -c gk.yaml[/cyan]
    [cyan]gatekeeper replay --route agents.pay --reason no-record --since 2h -c gk.yaml[/cyan]

  See first what would happen (changes nothing: no state, no topic):

    [cyan]gatekeeper replay --route agents.pay --dry-run --details[/cyan]

  One conversation, within a window, re-dead-lettering what still fails (attempt count raised):

    [cyan]gatekeeper replay -r agents.pay --conversation c-17 --since 2026-10-01 --until 1h --requeue-failed[/cyan]

  A copy of a route's dead-letter topic (an archive): name the route whose dead letters it holds:

    [cyan]gatekeeper replay --from-topic agents.pay.dlq.archive --route agents.pay --limit 100[/cyan]

  Two letters picked by their place on the dead-letter topic (what the console's replay sends):

    [cyan]gatekeeper replay -r agents.pay --letter 0:17 --letter 2:5 --dry-run[/cyan]

Each dead letter is decided again, with the current records and conversation state, at the current time. What
passes now goes to its route's output topic with [cyan]gk.replayed.from.topic/partition/offset[/cyan],
[cyan]gk.replayed.at[/cyan] and [cyan]gk.attempt[/cyan]; what still fails stays where it is (or, with --requeue-failed,
is dead-lettered again). A second replay of the same range forwards nothing twice. An expired handoff, a clearance
of a failed readback, a handoff whose approval is bound to another stay held. A dead letter whose conversation has
no state left in Redis (expired after redis.retention_seconds, or deleted) is decided as the first line of a new
conversation: the report says so ("its conversation has no state in Redis") rather than give a new reason.

[bold]A requeue replaces a letter, it does not add one.[/bold] The letters of one line (its input record: the
gk.original.topic, partition and offset headers) are its dead letter and each requeued copy; only the newest (the
highest gk.attempt) is replayed, the others are skipped as superseded (found from --since to the end of the topic,
past --until: a copy is always newer than what it replaces). A line still failing at attempt --max-attempts (5) is
requeued once more with [cyan]gk.parked: max-attempts[/cyan] and never again; replay skips parked letters
(counted) unless --include-parked, and a parked letter that still fails stays where it is.

[bold]Letters that are not the route's are refused[/bold] (skipped, with the reason): one naming a route whose dead
letters do not go to the topic read (a letter planted on route A's dead-letter topic naming route B), a
gk.original.partition that is not a partition of the route's input topic, an offset at or past its end, or
gk.original.* and gk.attempt values that are not the integers the gatekeeper writes.

[bold]After a data loss[/bold] (Redis restarted empty or flushed while the daemon's consumer group has committed
offsets), replay refuses before reading anything, its dry run too (exit 3), until
[cyan]gatekeeper redis accept-loss[/cyan]: see the runbook (docs/troubleshooting.md).

Times: relative ([cyan]90s 15m 2h 3d 1w[/cyan]: that long ago), ISO-8601 ([cyan]2026-10-01T09:00:00Z[/cyan], UTC
unless an offset is given) or RW1's [cyan]20261001T0900Z[/cyan]. They select by when the line was dead-lettered.

Exit status: 0 nothing left failing, 1 some lines still fail, 2 usage (unknown route or topic, bad time, bad config),
3 Kafka or Redis unavailable, or Redis lost its data (what was acknowledged stays done; run it again to finish).
"""


@app.command("replay", epilog=EPILOG)
def replay(
    route: Annotated[
        str | None,
        typer.Option("--route", "-r", metavar="ROUTE", help="Replay this route's dead-letter topic (its input topic)."),
    ] = None,
    from_topic: Annotated[
        str | None,
        typer.Option(
            "--from-topic",
            metavar="TOPIC",
            help="Replay this topic instead: a route's dead-letter topic, or with --route a copy of that route's.",
        ),
    ] = None,
    since: Annotated[
        str | None, typer.Option("--since", metavar="TIME", help="Only lines dead-lettered at or after TIME.")
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", metavar="TIME", help="Only lines dead-lettered at or before TIME.")
    ] = None,
    reason: Annotated[
        list[str] | None,
        typer.Option("--reason", metavar="CODE", help="Only lines dead-lettered for CODE (repeat for several)."),
    ] = None,
    conversation: Annotated[
        str | None, typer.Option("--conversation", metavar="ID", help="Only this conversation's lines.")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, metavar="N", help="Replay at most N lines.")] = None,
    letter: Annotated[
        list[str] | None,
        typer.Option(
            "--letter",
            metavar="P:O",
            help="Only the dead letter at partition P, offset O of the topic read (repeat for several).",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Decide and report only: no state is saved, nothing is produced.")
    ] = False,
    requeue_failed: Annotated[
        bool,
        typer.Option(
            "--requeue-failed",
            help="Dead-letter what still fails again (attempt raised, replacing the letter), not leave it.",
        ),
    ] = False,
    max_attempts: Annotated[
        int,
        typer.Option(
            "--max-attempts",
            min=1,
            metavar="N",
            help="With --requeue-failed: a line still failing at attempt N is parked (gk.parked), not requeued again.",
        ),
    ] = MAX_ATTEMPTS,
    include_parked: Annotated[
        bool, typer.Option("--include-parked", help="Replay parked letters too (skipped otherwise).")
    ] = False,
    details: Annotated[bool, typer.Option("--details", help="List every replayed line, not only the summary.")] = False,
    unmasked: Annotated[
        bool,
        typer.Option("--unmasked", help="Show sensitive values in the problems in full instead of ****2938."),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON (every line included).")] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.5, metavar="SECONDS", help="How long to wait for Kafka.")
    ] = 10.0,
    config: ConfigOption = None,
) -> None:
    """Re-decide dead-lettered lines now; forward what passes, leave (or requeue) what still fails."""
    settings = settings_from(config)
    now = time.time()
    try:
        selection = Selection(
            since=None if since is None else parse_when(since, now),
            until=None if until is None else parse_when(until, now),
            reasons=None if not reason else frozenset(reason),
            conversation=conversation,
            limit=limit,
        )
    except ValueError as exc:
        fail(f"--since/--until: {exc}", EXIT_USAGE)
    if letter:
        try:
            selection = dataclasses.replace(selection, letters=parse_letters(letter))
        except ValueError as exc:
            fail(f"--letter: {exc}", EXIT_USAGE)
    replayer = Replayer(settings, timeout=timeout)
    with cli_errors():
        try:
            replayer.source_topic(route, from_topic)
        except ReplayError as exc:
            fail(str(exc), EXIT_USAGE)
    report = _run_with_progress(
        replayer, route, from_topic, selection, dry_run, requeue_failed, max_attempts, include_parked, quiet=as_json
    )
    if not unmasked:
        report = masked(report, sensitive_slots(settings))
    if as_json:
        typer.echo(json_inert(json.dumps(report.to_dict(), ensure_ascii=False, indent=2)))
    else:
        print_report(report, details)
    if report.failing:
        raise typer.Exit(EXIT_FINDING)


def _run_with_progress(
    replayer: Replayer,
    route: str | None,
    from_topic: str | None,
    selection: Selection,
    dry_run: bool,
    requeue_failed: bool,
    max_attempts: int,
    include_parked: bool,
    quiet: bool,
) -> ReplayReport:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    err = Console(stderr=True)
    progress = Progress(
        TextColumn("replaying {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=quiet or not err.is_terminal,
    )
    task = progress.add_task(route or from_topic or "", total=None)

    def advance(done: int, total: int) -> None:
        progress.update(task, completed=done, total=total)

    with cli_errors(), progress:
        try:
            return asyncio.run(
                replayer.run(
                    route=route,
                    from_topic=from_topic,
                    selection=selection,
                    dry_run=dry_run,
                    requeue_failed=requeue_failed,
                    max_attempts=max_attempts,
                    include_parked=include_parked,
                    progress=advance,
                )
            )
        except ReplayError as exc:
            fail(str(exc), EXIT_USAGE)


def print_report(report: ReplayReport, details: bool = False) -> None:
    """The summary table (and, with ``details``, one row per line) on stdout."""
    from rich.table import Table
    from rich.text import Text

    out = console()
    title = f"replay of {report.topic}" + (" (dry run: nothing was changed)" if report.dry_run else "")
    if details and report.lines:
        lines = Table(title=f"{title}: lines", show_edge=False, pad_edge=False)
        for col in ("dead letter", "conversation", "line", "was", "now", "why"):
            lines.add_column(col)
        for ln in report.lines:
            where = f"{ln.partition}@{ln.offset}"
            now = ln.status.value
            if ln.output is not None:
                now += f" -> {ln.output[0]}[{ln.output[1]}]@{ln.output[2]}"
            why = ln.reason or ln.note or ""
            if ln.state_gone:  # the reason is a new conversation's, not the one it was dead-lettered for
                why = "no state in Redis for its conversation (expired after retention, or deleted)"
                if ln.reason:
                    why += f"; decided as new: {ln.reason}"
            elif ln.problems and ln.status in (Status.STILL_FAILING, Status.REQUEUED, Status.PARKED):
                why = f"{why}: {ln.problems[0].message}"
            cells = (where, ln.conversation or "-", f"{ln.type or '?'} {ln.id or '?'}", ln.was or "-", now, why)
            lines.add_row(*(Text(inert(c)) for c in cells))  # what a record wrote: escaped, never markup
        out.print(lines)
    table = Table(title=title, show_edge=False, pad_edge=False)
    table.add_column("result")
    table.add_column("lines", justify="right")
    rows = summary_rows(report)
    for label, n in rows:
        if n or label.startswith("passed"):
            table.add_row(label, str(n))
    out.print(table)
    out.print(f"{report.read} dead letter(s) read" + (", stopped at --limit" if report.limited else ""))
