"""``gatekeeper check``: the daemon's decision, offline, over a file of lines.

The same ``Processor`` the daemon runs, on a ``MemoryStore`` loaded with the records file: every line gets exactly
the verdict the gatekeeper would give it on the route. Each line is its own batch, in file order. Offline, nothing
else can arrive, so a reply whose handoff is unknown is decided at once (the route's hold window is 0): refused, or
alerted for a done report.

**Replaying with the clock.** A JSON line may carry ``at``, the time it was decided (``YYYYMMDDTHHMMZ`` or ISO-8601
in UTC ending in ``Z``), so an incident replays with its own times and the expiry rules decide as they did. There is
one clock, in file order: a line without ``at`` takes the time of the line before it; lines before the first ``at``
take ``--now``, or without it the first ``at`` (so a replay never depends on the day it runs); a file without any
``at`` is decided at ``--now``, or the current time. The clock never goes backwards: an ``at`` before the time of
the line before it (or before ``--now``) is a usage error naming both, as is an ``at`` that is not a time.
"""

from __future__ import annotations

import calendar
import json
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer

from gatekeeper.auth import KeyRing, check_record
from gatekeeper.cli import app
from gatekeeper.cli.common import (
    EXIT_FINDING,
    EXIT_OK,
    EXIT_USAGE,
    ConfigOption,
    cli_errors,
    fail,
    profile_from,
    read_text,
    run,
    settings_from,
    stdout_is_tty,
)
from gatekeeper.config import CONFIG_ENV, Settings
from gatekeeper.inert import inert, json_inert
from gatekeeper.masking import masker_for
from gatekeeper.policy import Decision, Mode, Record, RoutePolicy, Verdict
from gatekeeper.processor import Line, Processor
from gatekeeper.records import load_records_file
from gatekeeper.store import MemoryStore

DEFAULT_PROFILE = "pay"
DEFAULT_CONVERSATION = "check"  # the conversation of a plain file of RW1 lines

EPILOG = """\
[bold]Examples[/bold]

  The seed's payment flow (HO, RB, AN val=Y, DN), one RW1 line per line, against the approved record:

    [cyan]gatekeeper check flow.rw1 --records config/records.example.json --now 20261001T0900Z[/cyan]

  Several conversations: JSON lines [cyan]{"key": "<conversation>", "line": "<RW1 line>"}[/cyan] in, JSON lines out:

    [cyan]gatekeeper check lines.jsonl --records records.json --json | jq 'select(.verdict != "forward")'[/cyan]

  An incident replayed with its clock ([cyan]"at"[/cyan], when each line was decided), a clearance after exp=:

    [cyan]{"key": "c-17", "line": "RW1 HO scheduler-1 ... exp=20261001T1000Z", "at": "20261001T0958Z"}[/cyan]
    [cyan]{"key": "c-17", "line": "RW1 RB payer-1 re=scheduler-1 ...", "at": "2026-10-01T09:59:30Z"}[/cyan]
    [cyan]{"key": "c-17", "line": "RW1 AN scheduler-2 re=payer-1 ... val=Y", "at": "20261001T1001Z"}[/cyan]

    [cyan]gatekeeper check incident.jsonl --records records.json --format table[/cyan]   (AN: clearance-expired)

  As a route of the configuration checks them (its profile, sender binding and sender_auth):

    [cyan]gatekeeper check flow.rw1 --records records.json --config gk.yaml --route agents.pay[/cyan]

A plain FILE is one conversation: one RW1 line per line, in order; blank lines and lines starting with # are
skipped. A file whose first non-blank character is [cyan]{[/cyan] is read as JSON lines.

[bold]Which rules.[/bold] A configuration with routes ([cyan]--config[/cyan] or [cyan]GK_CONFIG[/cyan]) has the lines
checked as one of its routes checks them, never by a profile alone (which would pass what the route's
[cyan]senders[/cyan] or [cyan]sender_auth[/cyan] refuses): the route [cyan]--route[/cyan] names; without it, the
configuration's only route (said on stderr); a configuration with several routes and no [cyan]--route[/cyan] is
refused (exit 2, naming them). Only without routes in the configuration do the lines meet [cyan]--profile[/cyan]
alone (default pay): no sender binding, no signatures.

[bold]Sender authentication.[/bold] A route with [cyan]sender_auth: true[/cyan] is checked as
the daemon checks it: every line's signature is verified against the configured keys, never assumed. A plain
line has no headers, so it is dead-lettered [cyan]sender-auth[/cyan] (sender-auth-missing); give JSON lines with the
record's headers to check signed lines:
[cyan]{"key": "c-17", "line": "RW1 ...", "headers": {"rw-sig": "v2 scheduler-1 ..."}}[/cyan].

[bold]The clock.[/bold] [cyan]at[/cyan] is [cyan]YYYYMMDDTHHMMZ[/cyan] (RW1's form, as in exp=) or ISO-8601 in UTC
ending in Z ([cyan]2026-10-01T09:03Z[/cyan], [cyan]2026-10-01T09:03:27Z[/cyan], [cyan]2026-10-01T09:03:27.120Z[/cyan],
the form of the gatekeeper's [cyan]gk.decided.at[/cyan]), from 1970 on. One clock, in file order: a line without
[cyan]at[/cyan] takes the time of the line before it; the lines before the first [cyan]at[/cyan] take
[cyan]--now[/cyan], or without it the first [cyan]at[/cyan] (a replay does not depend on the day it runs); a file
with no [cyan]at[/cyan] (a plain file never has one) is decided at [cyan]--now[/cyan], or the current time. Times
never go backwards: an [cyan]at[/cyan] before the line before it, or before [cyan]--now[/cyan], is refused (exit 2);
put the lines in the order they were decided. Offline nothing else can arrive, so a reply whose handoff is not known
at its time is decided as at the end of its hold window (refused, or alerted for a done report). Each line's time is
printed as [cyan]decided_at[/cyan] ([cyan]--json[/cyan]) and, when the file gives times, in the table's AT
column.

Sensitive values (acct, prev, addr, and those the profile lists) are masked in what is printed, the lines
included, as in the gatekeeper's headers and logs ([cyan]acct=****2938[/cyan]); [cyan]--unmasked[/cyan] prints
them in full (the verdicts are the same either way: the check itself always sees the whole values).

Exit status: 0 every line forwarded, 1 any line dead-lettered or alerted, 2 usage error (missing file, bad --now,
a bad or backward at, bad records file, unknown profile or route, several routes configured and no --route).
"""


@dataclass(frozen=True, slots=True)
class InputLine:
    lineno: int
    conversation: str
    text: str
    headers: tuple[tuple[str, bytes], ...] = ()
    #: the time the line is decided at (epoch seconds): its ``at`` as read, every line's once ``timeline`` ran;
    #: None: the ``now`` given to ``decide_lines``
    at: float | None = None
    given: str | None = None  # the ``at`` the line carried, as written (None: it had none)


#: The forms of ``--now`` and ``at``, as said in every error about them.
TIME_FORMS = (
    "YYYYMMDDTHHMMZ in UTC (e.g. 20261001T0903Z) or ISO-8601 in UTC ending in Z "
    "(2026-10-01T09:03Z, 2026-10-01T09:03:27Z, 2026-10-01T09:03:27.120Z), from 1970 on"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_RW1_TIME = re.compile(r"([0-9]{4})([0-9]{2})([0-9]{2})T([0-9]{2})([0-9]{2})Z")
_ISO_TIME = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]{1,9}))?)?Z")


def _shown(value: str) -> str:
    """A value as an error quotes it: repr (every odd character escaped), at most 40 characters of it."""
    return repr(value if len(value) <= 40 else value[:40] + "...")


def parse_time(value: str) -> float:
    """``YYYYMMDDTHHMMZ`` or ISO-8601 in UTC ending in ``Z`` (minutes, seconds, a fraction of up to 9 digits, kept to
    the millisecond) as UTC epoch seconds, from 1970 on. Strict: ASCII digits, upper-case T and Z, no offset, no
    spaces, a real instant of the calendar. Raises ValueError quoting the value and saying the forms."""
    m = _RW1_TIME.fullmatch(value) or _ISO_TIME.fullmatch(value)
    if m is None:
        raise ValueError(f"{_shown(value)}: expected {TIME_FORMS}")
    year, month, day, hour, minute = (int(g) for g in m.groups()[:5])
    second = int(m[6] or 0) if m.re is _ISO_TIME else 0
    fraction = m[7] if m.re is _ISO_TIME else None
    try:
        datetime(year, month, day, hour, minute, second)
    except ValueError as exc:  # month 13, 30 February, hour 24, second 60...
        raise ValueError(f"{_shown(value)} is not a time of the calendar ({exc}): expected {TIME_FORMS}") from None
    if year < 1970:
        raise ValueError(f"{_shown(value)} is before 1970: expected {TIME_FORMS}")
    millis = int((fraction or "0")[:3].ljust(3, "0"))  # kept to the millisecond, as gk.decided.at writes times
    return (calendar.timegm((year, month, day, hour, minute, second)) * 1000 + millis) / 1000


def parse_now(value: str | None) -> float:
    """``--now`` (a form of ``TIME_FORMS``) as UTC epoch seconds (the current time when None). Raises ValueError."""
    if value is None:
        return time.time()
    try:
        return parse_time(value)
    except ValueError as exc:
        raise ValueError(f"--now {exc}") from None


def iso(epoch: float) -> str:
    """An epoch time as the gatekeeper's headers write it (``gk.decided.at``): ``2026-10-01T09:03:00.000Z``. To
    the nearest millisecond, computed in integers: ``parse_time`` reads it back to the same time."""
    when = _EPOCH + timedelta(milliseconds=round(epoch * 1000))
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def clock_now() -> float:
    """The current time, to the millisecond (the precision of ``at`` and ``decided_at``)."""
    return math.floor(time.time() * 1000) / 1000


def read_input(text: str, source: str) -> list[InputLine]:
    """The lines of FILE: plain RW1 lines (one conversation) or JSON lines with ``key`` and ``line`` (and optional
    ``headers`` and ``at``). Raises ValueError naming the line."""
    first = next((ch for ch in text if not ch.isspace()), "")
    json_lines = first == "{"
    out: list[InputLine] = []
    for lineno, raw in enumerate(text.split("\n"), 1):
        line = raw.removesuffix("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not json_lines:
            out.append(InputLine(lineno, DEFAULT_CONVERSATION, line))
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{source} line {lineno}: not JSON: {exc.msg} at column {exc.colno}") from None
        if not isinstance(obj, dict):
            raise ValueError(f"{source} line {lineno}: expected an object with key and line")
        key, value = obj.get("key"), obj.get("line")
        if not isinstance(key, str) or not key:
            raise ValueError(f"{source} line {lineno}: key: expected the conversation id, a non-empty string")
        if not isinstance(value, str):
            raise ValueError(f"{source} line {lineno}: line: expected the RW1 line, a string")
        headers = obj.get("headers", {})
        if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
            raise ValueError(f"{source} line {lineno}: headers: expected an object of header names to strings")
        at, given = None, None
        if "at" in obj:
            given = obj["at"]
            if not isinstance(given, str):
                raise ValueError(
                    f"{source} line {lineno}: at: expected the time the line was decided, a string: {TIME_FORMS}"
                )
            try:
                at = parse_time(given)
            except ValueError as exc:
                raise ValueError(f"{source} line {lineno}: at {exc}") from None
        hdrs = tuple((str(k), v.encode("utf-8")) for k, v in headers.items())
        out.append(InputLine(lineno, key, value, hdrs, at, given))
    return out


def timeline(lines: Sequence[InputLine], now: float | None, source: str) -> list[InputLine]:
    """Every line with the time it is decided at, on one clock in file order: its ``at``, else the time of the line
    before it; before the first ``at``, ``now`` (``--now``), else the first ``at``; with neither, the current time.
    Raises ValueError naming the line whose ``at`` is before the clock (times never go backwards: the lines are
    decided in order, as the route decided them)."""
    first = next((ln.at for ln in lines if ln.at is not None), None)
    clock = now if now is not None else first if first is not None else clock_now()
    setter: InputLine | None = None  # the line whose at set the clock (None: --now, or the first at)
    out: list[InputLine] = []
    for ln in lines:
        if ln.at is not None:
            if ln.at < clock:
                since = f"--now {iso(clock)}" if setter is None else f"line {setter.lineno}'s at {setter.given}"
                raise ValueError(
                    f"{source} line {ln.lineno}: at {ln.given} is before {since}: times must not go backwards (the "
                    "lines are decided in file order, on one clock); put the lines in the order they were decided"
                )
            clock, setter = ln.at, ln
        out.append(replace(ln, at=clock))
    return out


def route_policy(settings: Settings, route_name: str | None, profile_name: str | None) -> RoutePolicy:
    """The route policy of the check: a configured route's, else one built from ``--profile``. Offline, the hold
    window is 0: nothing else can arrive.

    Which route: ``--route``; without it, a configuration with routes has its one route checked (said on stderr),
    and one with several is a usage error naming them. Never the profile alone while routes are configured: that
    leaves out a route's ``senders`` and ``sender_auth``, and would pass a line the route refuses. Only a
    configuration without routes (no ``--config``, no ``GK_CONFIG``) checks against ``--profile`` alone."""
    implied = route_name is None and len(settings.routes) == 1
    if route_name is None and settings.routes:
        if len(settings.routes) > 1:
            names = ", ".join(r.input for r in settings.routes)
            fail(
                f"the configuration has {len(settings.routes)} routes ({names}): give --route ROUTE, the route whose "
                "rules (profile, senders, sender_auth) the lines are checked by",
                EXIT_USAGE,
            )
        route_name = settings.routes[0].input
    if route_name is None:
        return RoutePolicy(
            name="check", profile=profile_from(profile_name or DEFAULT_PROFILE, settings), hold_seconds=0.0
        )
    with cli_errors():
        route = settings.route(route_name)
    if profile_name is not None and profile_name != route.profile:
        if implied:
            fail(
                f"--profile {profile_name}: route {route.input}, the configuration's only route, uses profile "
                f"{route.profile} (a check by a profile alone is one without a configuration: no --config, no "
                f"{CONFIG_ENV})",
                EXIT_USAGE,
            )
        fail(f"--profile {profile_name}: route {route.input} uses profile {route.profile}", EXIT_USAGE)
    if implied:
        typer.echo(f"note: checking as route {route.input}, the configuration's only route", err=True)
    return RoutePolicy(
        name=route.input,
        profile=profile_from(route.profile, settings),
        mode=Mode(route.mode),
        senders=None if route.senders is None else frozenset(route.senders),
        hold_seconds=0.0,
        max_line_bytes=route.max_line_bytes,
        sender_auth=route.sender_auth,
    )


async def decide_lines(
    lines: list[InputLine],
    records: list[Record],
    route: RoutePolicy,
    now: float,
    keys: KeyRing | None = None,
    header: str = "rw-sig",
) -> list[Decision]:
    """Each line its own batch, in order, on a MemoryStore holding ``records``, decided at its ``at`` (``timeline``),
    else at ``now``. ``keys``: the agents' public keys, which verify each line's ``header`` on a route with
    sender_auth (a line without it is refused, as the daemon refuses it)."""
    store = MemoryStore()
    for rec in records:
        await store.put_record(rec)
    processor = Processor(store, route)
    decisions: list[Decision] = []
    for ln in lines:
        # a JSON line may carry a lone surrogate (\ud800), which no UTF-8 encodes: its bytes go to the gate as they
        # would arrive from Kafka, invalid UTF-8, and the line is dead-lettered as invalid (never an internal error);
        # a key with one is what the daemon makes of a record key that is not UTF-8: no conversation
        value = ln.text.encode("utf-8", errors="surrogatepass")
        conversation = ln.conversation if _utf8(ln.conversation) else None
        sender = None
        if route.sender_auth and conversation is not None:
            sender = check_record(keys or KeyRing(()), ln.headers, header, route.name, conversation, value)
        (d,) = await processor.process([Line(conversation, value, sender=sender)], now if ln.at is None else ln.at)
        decisions.append(d)
    return decisions


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def outcome(ln: InputLine, d: Decision, sensitive: frozenset[str] | None = None) -> dict[str, Any]:
    """One input line's outcome as the JSON object ``--format jsonl`` prints. With ``sensitive`` (the profile's
    sensitive slots), its sensitive values are masked as the daemon masks its headers: the line's, and the problems'
    expected and got (and wherever those occur in a message). ``decided_at``: the time the line was decided at."""
    msg = d.message
    problems, notes = d.problems, d.notes
    text = ln.text
    if sensitive is not None:
        m = masker_for(text, (*problems, *notes), sensitive)
        text, problems, notes = m.text(text), m.problems(problems), m.problems(notes)
    return {
        "lineno": ln.lineno,
        "conversation": ln.conversation,
        "line": text,
        "id": None if msg is None else msg.id,
        "type": None if msg is None else msg.type,
        "verdict": d.verdict.value,
        "reason": None if d.reason is None else d.reason.value,
        "check": d.check,
        "alert": d.alerts,
        "repeated": d.repeated,
        "problems": [p.to_dict() for p in problems],
        "notes": [n.to_dict() for n in notes],
        "decided_at": iso(d.decided_at if ln.at is None else ln.at),
    }


_VERDICT_COLOURS = {"forward": "green", "dead-letter": "red", "alert": "yellow", "hold": "blue"}


def render_table(rows: list[dict[str, Any]], colour: bool, times: bool = False) -> str:
    """A readable aligned table: one row per line, its problems (and notes) indented below it. ``times``: an AT
    column, the time each line was decided at (to the second)."""
    several = len({r["conversation"] for r in rows}) > 1
    heads = ["LINE", *(["AT"] if times else []), *(["CONVERSATION"] if several else []), "ID", "TYPE", "VERDICT"]
    heads.append("REASON")
    table = [
        [
            str(r["lineno"]),
            *([r["decided_at"][:19] + "Z"] if times else []),
            *([inert(r["conversation"])] if several else []),
            inert(r["id"] or "-"),
            inert(r["type"] or "-"),
            r["verdict"],
            r["reason"] or "-",
        ]
        for r in rows
    ]
    widths = [max(len(h), *(len(row[i]) for row in table)) if table else len(h) for i, h in enumerate(heads)]
    vcol = heads.index("VERDICT")

    def fmt(cells: list[str], style: bool) -> str:
        parts = []
        for i, cell in enumerate(cells):
            text = cell.ljust(widths[i]) if i < len(cells) - 1 else cell
            if style and i == vcol:
                text = typer.style(text, fg=_VERDICT_COLOURS.get(cell.strip()), bold=True)
            parts.append(text)
        return "  ".join(parts).rstrip()

    out = [fmt(heads, False)]
    for r, cells in zip(rows, table, strict=True):
        out.append(fmt(cells, colour))
        out.extend(f"    ! {p['code']}: {inert(p['message'])}" for p in r["problems"])  # messages quote values
        out.extend(f"    . {n['code']}: {inert(n['message'])}" for n in r["notes"])
    counts = {v: sum(1 for r in rows if r["verdict"] == v) for v in ("forward", "dead-letter", "alert")}
    out.append("")
    out.append(
        f"{len(rows)} line{'s' if len(rows) != 1 else ''}: {counts['forward']} forwarded, "
        f"{counts['dead-letter']} dead-lettered, {counts['alert']} alerted"
    )
    return "\n".join(out)


@app.command("check", epilog=EPILOG)
def check(
    file: Annotated[
        Path,
        typer.Argument(
            metavar="FILE",
            help="RW1 lines, or JSON lines {key, line} (and headers: {rw-sig: ...}, at: the time it was decided).",
        ),
    ],
    records: Annotated[
        Path | None,
        typer.Option("--records", metavar="RECORDS.json", help="The approved records (JSON or JSON lines)."),
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option("--profile", "-p", metavar="NAME", help=f"The route's profile \\[default: {DEFAULT_PROFILE}]."),
    ] = None,
    now: Annotated[
        str | None,
        typer.Option(
            "--now",
            metavar="YYYYMMDDTHHMMZ",
            help="The clock (UTC) until a line's at \\[default: the first at, else the current time].",
        ),
    ] = None,
    output_format: Annotated[
        str | None,
        typer.Option(
            "--format", "-f", metavar="jsonl|table", help="The output \\[default: table on a terminal, else jsonl]."
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON lines, one object per input line (the same as --format jsonl).")
    ] = False,
    route: Annotated[
        str | None,
        typer.Option(
            "--route",
            "-r",
            metavar="ROUTE",
            help="Check as this configured route (its input topic) would \\[default: the configuration's only route; "
            "required when it has several].",
        ),
    ] = None,
    unmasked: Annotated[
        bool,
        typer.Option("--unmasked", help="Print sensitive values (acct, prev, addr...) in full instead of ****2938."),
    ] = False,
    config: ConfigOption = None,
) -> None:
    """Decide every line of FILE exactly as the gatekeeper would, offline, against the records.

    Runs the daemon's decision (the same verdict table, the same conversation state) over the lines in order, with
    the records in memory: nothing is read from or written to Kafka or Redis. JSON lines may carry the time each
    line was decided ("at"), to replay an incident with its clock.
    """
    if output_format not in (None, "jsonl", "table"):
        fail(f"--format {output_format!r}: expected jsonl or table", EXIT_USAGE)
    if as_json:
        if output_format == "table":
            fail("--json and --format table: give one (--json is --format jsonl)", EXIT_USAGE)
        output_format = "jsonl"
    try:
        start = None if now is None else parse_now(now)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    text = read_text(file, "FILE")
    try:
        lines = timeline(read_input(text, str(file)), start, str(file))
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    settings = settings_from(config)
    policy = route_policy(settings, route, profile)
    approved: list[Record] = []
    if records is not None:
        with cli_errors():
            approved = load_records_file(records, policy.profile)
    keys = None
    if policy.sender_auth:
        with cli_errors():
            keys = KeyRing.from_settings(settings.sender_auth)
        if any(not ln.headers for ln in lines):
            typer.echo(
                f"note: route {policy.name} takes signed lines only (sender_auth) and some lines of {file} carry no "
                f"headers: they are refused sender-auth, as the daemon would refuse them (JSON lines with "
                f'"headers": {{"{settings.sender_auth.header}": "v2 ..."}} carry the signature)',
                err=True,
            )
    # every line has its time (timeline): the now given here is never used
    decisions = run(decide_lines(lines, approved, policy, time.time(), keys, settings.sender_auth.header))
    sensitive = None if unmasked else frozenset(policy.profile.sensitive)
    rows = [outcome(ln, d, sensitive) for ln, d in zip(lines, decisions, strict=True)]
    fmt = output_format or ("table" if stdout_is_tty() else "jsonl")
    if fmt == "jsonl":
        for row in rows:
            text = json.dumps(row, ensure_ascii=False, separators=(",", ":"))
            if not text.isascii():
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:  # a lone surrogate from a JSON input line: escaped, as JSON allows
                    text = json.dumps(row, separators=(",", ":"))
            typer.echo(json_inert(text))
    else:
        times = any(ln.given is not None for ln in lines)
        typer.echo(render_table(rows, colour=stdout_is_tty(), times=times))
    ok = all(d.verdict is Verdict.FORWARD and not d.alerts for d in decisions)
    raise typer.Exit(EXIT_OK if ok else EXIT_FINDING)
