"""``gatekeeper check``: the daemon's decision, offline, over a file of lines.

The same ``Processor`` the daemon runs, on a ``MemoryStore`` loaded with the records file: every line gets exactly
the verdict the gatekeeper would give it on the route. Each line is its own batch, in file order. Offline, nothing
else can arrive, so a reply whose handoff is unknown is decided at once (the route's hold window is 0): refused, or
alerted for a done report.
"""

from __future__ import annotations

import calendar
import json
import time
from dataclasses import dataclass
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
from gatekeeper.config import Settings
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

  Several conversations in one file, JSON lines [cyan]{"key": "<conversation>", "line": "<RW1 line>"}[/cyan],
  one JSON object per input line on stdout:

    [cyan]gatekeeper check lines.jsonl --records records.json --format jsonl | jq 'select(.verdict != "forward")'[/cyan]

  With a route of the configuration (its profile and sender binding):

    [cyan]gatekeeper check flow.rw1 --records records.json --config gk.yaml --route agents.pay[/cyan]

A plain FILE is one conversation: one RW1 line per line, in order; blank lines and lines starting with # are
skipped. A file whose first non-blank character is [cyan]{[/cyan] is read as JSON lines.

[bold]Sender authentication.[/bold] A route with [cyan]sender_auth: true[/cyan] ([cyan]--route[/cyan]) is checked as
the daemon checks it: every line's signature is verified against the configured keys, never assumed. A plain
line has no headers, so it is dead-lettered [cyan]sender-auth[/cyan] (sender-auth-missing); give JSON lines with the
record's headers to check signed lines:
[cyan]{"key": "c-17", "line": "RW1 ...", "headers": {"rw-sig": "v2 scheduler-1 ..."}}[/cyan].

Sensitive values (acct, prev, addr, and those the profile lists) are masked in what is printed, the lines
included, as in the gatekeeper's headers and logs ([cyan]acct=****2938[/cyan]); [cyan]--unmasked[/cyan] prints
them in full (the verdicts are the same either way: the check itself always sees the whole values).

Exit status: 0 every line forwarded, 1 any line dead-lettered or alerted, 2 usage error (missing file, bad --now,
bad records file, unknown profile or route).
"""


@dataclass(frozen=True, slots=True)
class InputLine:
    lineno: int
    conversation: str
    text: str
    headers: tuple[tuple[str, bytes], ...] = ()


def parse_now(value: str | None) -> float:
    """``YYYYMMDDTHHMMZ`` as UTC epoch seconds (the current time when None). Raises ValueError."""
    if value is None:
        return time.time()
    try:
        return float(calendar.timegm(time.strptime(value, "%Y%m%dT%H%MZ")))
    except ValueError:
        raise ValueError(f"--now {value!r}: expected YYYYMMDDTHHMMZ in UTC, e.g. 20261001T0900Z") from None


def read_input(text: str, source: str) -> list[InputLine]:
    """The lines of FILE: plain RW1 lines (one conversation) or JSON lines with ``key`` and ``line``.
    Raises ValueError naming the line."""
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
        out.append(InputLine(lineno, key, value, tuple((str(k), v.encode("utf-8")) for k, v in headers.items())))
    return out


def route_policy(settings: Settings, route_name: str | None, profile_name: str | None) -> RoutePolicy:
    """The route policy of the check: a configured route's (``--route``), else one built from ``--profile``.
    Offline, the hold window is 0: nothing else can arrive."""
    if route_name is None:
        return RoutePolicy(
            name="check", profile=profile_from(profile_name or DEFAULT_PROFILE, settings), hold_seconds=0.0
        )
    with cli_errors():
        route = settings.route(route_name)
    if profile_name is not None and profile_name != route.profile:
        fail(f"--profile {profile_name}: route {route.input} uses profile {route.profile}", EXIT_USAGE)
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
    """Each line its own batch, in order, on a MemoryStore holding ``records``. ``keys``: the agents' public keys,
    which verify each line's ``header`` on a route with sender_auth (a line without it is refused, as the daemon
    refuses it)."""
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
        (d,) = await processor.process([Line(conversation, value, sender=sender)], now)
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
    expected and got (and wherever those occur in a message)."""
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
    }


_VERDICT_COLOURS = {"forward": "green", "dead-letter": "red", "alert": "yellow", "hold": "blue"}


def render_table(rows: list[dict[str, Any]], colour: bool) -> str:
    """A readable aligned table: one row per line, its problems (and notes) indented below it."""
    several = len({r["conversation"] for r in rows}) > 1
    heads = ["LINE", *(["CONVERSATION"] if several else []), "ID", "TYPE", "VERDICT", "REASON"]
    table = [
        [
            str(r["lineno"]),
            *([r["conversation"]] if several else []),
            r["id"] or "-",
            r["type"] or "-",
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
        out.extend(f"    ! {p['code']}: {p['message']}" for p in r["problems"])
        out.extend(f"    . {n['code']}: {n['message']}" for n in r["notes"])
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
        Path, typer.Argument(metavar="FILE", help="RW1 lines, or JSON lines {key, line} (and headers: {rw-sig: ...}).")
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
        typer.Option("--now", metavar="YYYYMMDDTHHMMZ", help="Fix the clock (UTC) \\[default: the current time]."),
    ] = None,
    output_format: Annotated[
        str | None,
        typer.Option(
            "--format", "-f", metavar="jsonl|table", help="The output \\[default: table on a terminal, else jsonl]."
        ),
    ] = None,
    route: Annotated[
        str | None,
        typer.Option("--route", "-r", metavar="ROUTE", help="Check as a configured route (its input topic) would."),
    ] = None,
    unmasked: Annotated[
        bool,
        typer.Option("--unmasked", help="Print sensitive values (acct, prev, addr...) in full instead of ****2938."),
    ] = False,
    config: ConfigOption = None,
) -> None:
    """Decide every line of FILE exactly as the gatekeeper would, offline, against the records.

    Runs the daemon's decision (the same verdict table, the same conversation state) over the lines in order, with
    the records in memory: nothing is read from or written to Kafka or Redis.
    """
    if output_format not in (None, "jsonl", "table"):
        fail(f"--format {output_format!r}: expected jsonl or table", EXIT_USAGE)
    try:
        at = parse_now(now)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    text = read_text(file, "FILE")
    try:
        lines = read_input(text, str(file))
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
    decisions = run(decide_lines(lines, approved, policy, at, keys, settings.sender_auth.header))
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
            typer.echo(text)
    else:
        typer.echo(render_table(rows, colour=stdout_is_tty()))
    ok = all(d.verdict is Verdict.FORWARD and not d.alerts for d in decisions)
    raise typer.Exit(EXIT_OK if ok else EXIT_FINDING)
