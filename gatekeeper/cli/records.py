"""``gatekeeper records``: sign, load, show and delete the approved records the gatekeeper checks handoffs against.

The records live in Redis (``redis.url`` of the configuration), keyed by (item, ask): one approval per act. An
approving system signs them (``records sign``, ``gatekeeper.approvals``); ``records load`` verifies each against the
configured approver keys, and refuses to change a record whose approval a handoff holds (``gatekeeper.record_changes``).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import msgspec
import typer

from gatekeeper.approvals import ApproverRing, sign_record
from gatekeeper.cli import app
from gatekeeper.cli.common import (
    EXIT_FINDING,
    EXIT_USAGE,
    ConfigOption,
    cli_errors,
    fail,
    not_found,
    profile_from,
    run,
    settings_from,
    stdout_is_tty,
    warn,
)
from gatekeeper.cli.keys import read_private_key
from gatekeeper.config import Settings
from gatekeeper.generation import require
from gatekeeper.inert import inert, json_inert
from gatekeeper.masking import mask_values, sensitive_slots
from gatekeeper.policy import Record, RecordKey
from gatekeeper.record_changes import raise_alerts, refusal
from gatekeeper.records import load_records_file
from gatekeeper.redis_store import RedisStore
from gatekeeper.store import RecordExists

records_app = typer.Typer(
    name="records",
    help="Sign, load, show and delete the approved records (in Redis) that handoffs are checked against.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)
app.add_typer(records_app, name="records")

LOAD_EPILOG = """\
[bold]Examples[/bold]

  [cyan]gatekeeper records load config/records.example.json --config gk.yaml[/cyan]
  [cyan]gatekeeper records load approvals.jsonl --profile pay --supersede[/cyan]

The file is one JSON object mapping each item to a record (or a list of records), or JSON lines with an item each.
A record holds the values the handoff must carry, as written on the line (ask, to, the profile's slots), optionally
"resolved" (values the receiver resolves itself, e.g. {"prev": "..."}) and "expect_acc" (withheld comprehension
criteria). See config/records.example.json.

A record that already exists for its (item, ask) is refused unless --supersede: the others are loaded, the refused
ones are named, and the exit status is 1. A bad file loads nothing (exit 2). Redis unreachable: exit 3.

[bold]Signed records.[/bold] With approver keys configured ([cyan]records.approvers[/cyan]), every signed record is
verified, and with [cyan]records.require_signed[/cyan] every record must be signed ([cyan]gatekeeper records
sign[/cyan]): one that is not, or whose signature does not hold, loads nothing (exit 2), naming each.

[bold]A bound approval is not changed.[/bold] --supersede of a record whose approval a handoff holds (in flight, or
spent) is refused, named, alerted on its route's alerts topic ([cyan]record-change-refused[/cyan]), exit 1: the
handoff keeps the values it was checked against. Its sender cancels it (CX why=REVOKED) to withdraw it.

[bold]After a data loss[/bold] (Redis restarted empty or flushed: no generation marker, while the daemon's consumer
group has committed offsets) nothing is loaded, exit 3, until [cyan]gatekeeper redis accept-loss[/cyan]: see the
runbook (docs/troubleshooting.md). Before the first gatekeeper start (no marker, no offsets) records load as usual.
"""

GET_EPILOG = """\
[bold]Examples[/bold]

  [cyan]gatekeeper records get inv:MD-2026-057[/cyan]              every ask of the item
  [cyan]gatekeeper records get inv:MD-2026-057 --ask PAY --json[/cyan]

Shows each record with its exec binding: the handoff it is bound to,
[cyan]<route>/<conversation>/<HO id>#<line digest>@<bound at, epoch seconds>[/cyan].
Sensitive values (acct, prev, addr, and those the configured routes' profiles list) are masked as everywhere
else ([cyan]acct=****2938[/cyan]); [cyan]--unmasked[/cyan] shows them in full, e.g. to compare with the approving
system. Exit status 1 when there is no record.
"""

DELETE_EPILOG = """\
[bold]Examples[/bold]

  [cyan]gatekeeper records delete inv:MD-2026-057 --ask PAY[/cyan]      asks for confirmation
  [cyan]gatekeeper records delete inv:MD-2026-057 --yes[/cyan]          every ask of the item, no question

A record whose approval a handoff holds (in flight, or spent: its act ran) is not deleted: it is named, alerted on
its route's alerts topic ([cyan]record-change-refused[/cyan]), and the exit status is 1; the others are deleted.
Bindings are never deleted here. Exit status 1 when there is no record; 3 when Redis lost its data (as
[cyan]records load[/cyan]: accept the loss first).
"""

SIGN_EPILOG = """\
[bold]Examples[/bold]

  [cyan]gatekeeper records sign approvals.json --key finance.key --id finance-1 > approvals.signed.jsonl[/cyan]
  [cyan]gatekeeper records load approvals.signed.jsonl --config gk.yaml[/cyan]

Signs each record of FILE (either records format) with the approving system's private key (made by
[cyan]gatekeeper keys generate --approver NAME[/cyan]) and writes them as JSON lines, each with its
[cyan]signature[/cyan]: [cyan]v1 <key id> <signature>[/cyan], Ed25519 over the record as the gatekeeper keeps it
(item, ask, values, resolved, expect_acc). Run it where the approval is made, never on the gatekeeper's hosts: the
gatekeeper holds only the public key ([cyan]records.approvers[/cyan]).
"""


def _store(settings: Settings) -> RedisStore:
    with cli_errors():
        return RedisStore(settings.redis)


def _item_ask(item: str, ask: str | None) -> str:
    return f"item {item}" + ("" if ask is None else f" ask {ask}")


@records_app.command("load", epilog=LOAD_EPILOG)
def load(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="The records file (JSON or JSON lines).")],
    supersede: Annotated[
        bool, typer.Option("--supersede", help="Replace records that already exist for their (item, ask).")
    ] = False,
    profile: Annotated[
        str | None,
        typer.Option("--profile", "-p", metavar="NAME", help="Check slot names and values against this profile."),
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Load approved records from FILE into Redis."""
    settings = settings_from(config)
    prof = None if profile is None else profile_from(profile, settings)
    if not file.exists():
        fail(f"records file {file} does not exist", EXIT_USAGE)
    with cli_errors():
        records = load_records_file(file, prof)
        unproven = _unproven(settings, records)
    if unproven:
        for message in unproven:
            typer.echo(f"gatekeeper: {message}", err=True)
        fail(f"{len(unproven)} record(s) not proven by an approver's signature: nothing loaded", EXIT_USAGE)
    new, replaced, refused, held = run(_load(settings, records, supersede))
    typer.echo(
        f"loaded {len(new) + len(replaced)} record{'s' if len(new) + len(replaced) != 1 else ''} "
        f"({len(new)} new, {len(replaced)} superseded), refused {len(refused)} existing"
    )
    for r in replaced:
        typer.echo(f"  superseded {_item_ask(r.item, r.ask)}")
    _refuse_bound(settings, "supersede", held)
    if refused:
        for r in refused:
            typer.echo(f"gatekeeper: refused {_item_ask(r.item, r.ask)}: a record exists", err=True)
        fail(f"{len(refused)} record(s) already exist; use --supersede to replace them", EXIT_FINDING)


async def _writable(settings: Settings, store: RedisStore) -> None:
    """Before anything is written: the generation marker's check (``gatekeeper.generation``). A Redis that lost its
    data refuses (``DataLost``, exit 3) until the loss is accepted; a first start goes on."""
    checked = await require(settings, store)
    if checked.note is not None:
        warn(checked.note)


def _unproven(settings: Settings, records: list[Record]) -> list[str]:
    """What is wrong with each record an approver's signature does not prove (``gatekeeper.approvals``), when
    approver keys are configured; nothing otherwise."""
    conf = settings.records
    if not (conf.require_signed or conf.approvers or conf.approvers_file is not None):
        return []
    ring = ApproverRing.from_settings(conf)
    return [p.message for p in map(ring.check, records) if p is not None]


def _refuse_bound(settings: Settings, operation: str, held: list[tuple[Record, str]]) -> None:
    """Name each record left unchanged because a handoff holds its approval, alert, and exit 1."""
    if not held:
        return
    for rec, binding in held:
        typer.echo(f"gatekeeper: {refusal(operation, rec.key, binding)}", err=True)
    try:
        asyncio.run(raise_alerts(settings, [(operation, rec.key, binding) for rec, binding in held]))
    except Exception as exc:  # the change stays refused; the alert is what could not be written
        warn(f"the record-change-refused alert could not be published: {type(exc).__name__}: {exc}")
    fail(f"{len(held)} record(s) bound to a handoff left unchanged", EXIT_FINDING)


async def _load(
    settings: Settings, records: list[Record], supersede: bool
) -> tuple[list[Record], list[Record], list[Record], list[tuple[Record, str]]]:
    new: list[Record] = []
    replaced: list[Record] = []
    refused: list[Record] = []
    held: list[tuple[Record, str]] = []
    async with _store(settings) as store:
        await _writable(settings, store)
        for rec in records:
            if supersede and (binding := await store.binding(rec.key)) is not None:
                held.append((rec, binding))  # a record no handoff holds is superseded; this one is not
                continue
            try:
                existed = await store.store_record(rec, supersede=supersede)
            except RecordExists:
                refused.append(rec)
                continue
            (replaced if existed else new).append(rec)
    return new, replaced, refused, held


@records_app.command("get", epilog=GET_EPILOG)
def get(
    item: Annotated[str, typer.Argument(metavar="ITEM", help="The item, e.g. inv:MD-2026-057.")],
    ask: Annotated[str | None, typer.Option("--ask", "-a", help="Only the record for this ask.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list (records with their binding).")] = False,
    unmasked: Annotated[
        bool,
        typer.Option("--unmasked", help="Show sensitive values (acct, prev, addr...) in full instead of ****2938."),
    ] = False,
    config: ConfigOption = None,
) -> None:
    """Show the records of ITEM (every ask, or one with --ask) and their exec bindings."""
    settings = settings_from(config)
    found = run(_get(settings, item, ask))
    if not unmasked:
        slots = sensitive_slots(settings)
        found = [(_masked(r, slots), b) for r, b in found]
    if as_json:
        doc = [{**r.to_dict(), "binding": b} for r, b in found]
        typer.echo(json_inert(json.dumps(doc, ensure_ascii=False, indent=2)))
    else:
        for r, b in found:
            typer.echo(_describe(r, b, stdout_is_tty()))
    if not found:
        not_found(f"no record for {_item_ask(item, ask)}")


def _masked(r: Record, slots: frozenset[str]) -> Record:
    return msgspec.structs.replace(r, values=mask_values(r.values, slots), resolved=mask_values(r.resolved, slots))


async def _get(settings: Settings, item: str, ask: str | None) -> list[tuple[Record, str | None]]:
    async with _store(settings) as store:
        records = await store.get_records(item, ask)
        return [(r, await store.binding(RecordKey(r.item, r.ask))) for r in records]


def _describe(r: Record, binding: str | None, colour: bool) -> str:
    """A record as ``records get`` prints it: every text from Redis made inert (``gatekeeper.inert``)."""
    head = inert(f"{r.item} {r.ask}")
    if colour:
        head = typer.style(head, bold=True)
    values = " ".join(f"{k}={_show(v)}" for k, v in r.values.items() if k not in ("item", "ask"))
    lines = [head, f"  values    {inert(values)}"]
    if r.resolved:
        lines.append("  resolved  " + inert(" ".join(f"{k}={v}" for k, v in r.resolved.items())))
    if r.expect_acc is not None:
        lines.append("  expect    acc=" + inert("+".join(r.expect_acc)))
    lines.append(f"  binding   {inert(binding) if binding else '(none)'}")
    return "\n".join(lines)


def _show(v: Any) -> str:
    return "+".join(str(x) for x in v) if isinstance(v, list | tuple) else str(v)


@records_app.command("delete", epilog=DELETE_EPILOG)
def delete(
    item: Annotated[str, typer.Argument(metavar="ITEM", help="The item whose records to delete.")],
    ask: Annotated[str | None, typer.Option("--ask", "-a", help="Only the record for this ask.")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    config: ConfigOption = None,
) -> None:
    """Delete the records of ITEM (every ask, or one with --ask) that no handoff holds."""
    settings = settings_from(config)
    found = run(_get(settings, item, ask))
    if not found:
        not_found(f"no record for {_item_ask(item, ask)}")
    if not yes:
        if not stdout_is_tty():
            fail("not a terminal: confirm the deletion with --yes", EXIT_USAGE)
        names = ", ".join(f"{r.item} {r.ask}" for r, _ in found)
        typer.confirm(f"delete {len(found)} record(s): {names}?", abort=True)
    deleted, held = run(_delete(settings, [r for r, _ in found]))
    typer.echo(f"deleted {deleted} record{'s' if deleted != 1 else ''} of {_item_ask(item, ask)}")
    _refuse_bound(settings, "delete", held)


async def _delete(settings: Settings, records: list[Record]) -> tuple[int, list[tuple[Record, str]]]:
    deleted = 0
    held: list[tuple[Record, str]] = []
    async with _store(settings) as store:
        await _writable(settings, store)
        for rec in records:
            binding = await store.binding(rec.key)
            if binding is not None:
                held.append((rec, binding))
            else:
                deleted += await store.delete_records(rec.item, rec.ask)
    return deleted, held


@records_app.command("sign", epilog=SIGN_EPILOG)
def sign(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="The records file to sign (JSON or JSON lines).")],
    key: Annotated[Path, typer.Option("--key", "-k", metavar="FILE", help="The approver's private key file.")],
    key_id: Annotated[str, typer.Option("--id", metavar="ID", help="The key id of that key (records.approvers).")],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", metavar="FILE", help="Write here instead of stdout.")
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option("--profile", "-p", metavar="NAME", help="Check slot names and values against this profile."),
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Sign the records of FILE with an approver's key: JSON lines, each with its signature."""
    if not file.exists():
        fail(f"records file {file} does not exist", EXIT_USAGE)
    private = read_private_key(key)
    prof = None if profile is None else profile_from(profile, settings_from(config))  # its profile_dirs
    with cli_errors():
        records = load_records_file(file, prof)
    try:
        signed = [sign_record(private, key_id, r) for r in records]
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    text = "".join(json.dumps(_as_file_object(r), ensure_ascii=False) + "\n" for r in signed)
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")
        typer.echo(f"signed {len(signed)} record{'s' if len(signed) != 1 else ''} with {key_id}: {out}", err=True)


def _as_file_object(r: Record) -> dict[str, Any]:
    """A record as a line of a records file (the values at the top, then resolved, expect_acc, signature)."""
    obj: dict[str, Any] = {"item": r.item, "ask": r.ask, **r.values}
    if r.resolved:
        obj["resolved"] = dict(r.resolved)
    if r.expect_acc is not None:
        obj["expect_acc"] = list(r.expect_acc)
    obj["signature"] = r.signature
    return obj
