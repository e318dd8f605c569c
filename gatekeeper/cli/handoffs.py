"""``gatekeeper handoffs``: the handoff lifecycle as Redis holds it: which handoffs are open, which ran out of time,
and one handoff's thread, state and deadlines.

Reads only: the lifecycle indexes (``open``, ``lapsed``: see ``gatekeeper.redis_store``), the conversations' states
and the cancel intents. Nothing is changed. Times are shown in UTC (``--json`` gives ISO-8601 and epoch seconds).
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer

from gatekeeper.cli import app
from gatekeeper.cli.common import EXIT_USAGE, ConfigOption, cli_errors, fail, not_found, run, settings_from
from gatekeeper.config import Route, Settings
from gatekeeper.handoff_views import describe, thread_of, when
from gatekeeper.inert import inert, json_inert
from gatekeeper.policy import ConversationState
from gatekeeper.redis_store import RedisStore
from gatekeeper.store import CancelIntent

handoffs_app = typer.Typer(
    name="handoffs",
    help="The handoff lifecycle in Redis: open handoffs, the ones whose time ran out, one handoff's thread.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)
app.add_typer(handoffs_app, name="handoffs")

LIST_EPILOG = """\
[bold]Examples[/bold]

  [cyan]gatekeeper handoffs list -c gk.yaml[/cyan]
  [cyan]gatekeeper handoffs list --open --route agents.pay[/cyan]
  [cyan]gatekeeper handoffs list --expired --json[/cyan]
  [cyan]gatekeeper handoffs list --conversation c-17 -r agents.pay[/cyan]

Open: no DN, UN or FL closed it and no cancel was acknowledged
(a cancelled handoff stays open until its receiver acknowledges).
Expired: the gatekeeper acted when its time ran out (a CX on the
sender's behalf, or a thread-orphaned or cleared-not-done alert);
listed for redis.retention_seconds, closed since or not.
Neither flag: both. --conversation: every handoff of it.

--route is needed with --conversation when several routes are
configured; without --conversation, leaving it out lists them all.
Exit status 0 (an empty list is an answer: "no open handoffs on
route R"; --json prints []), 2 on a usage error, 3 when Redis
cannot be reached.
"""

SHOW_EPILOG = """\
[bold]Examples[/bold]

  [cyan]gatekeeper handoffs show c-17 scheduler-1 -c gk.yaml[/cyan]
  [cyan]gatekeeper handoffs show c-17 scheduler-1 -r agents.pay --json[/cyan]

Shows the handoff (from, to, item, ask, its approval binding), its
status (open; cancelled, by whom; closed, by what; superseded), its
deadlines (exp, due, the route's readback deadline: pending, acted
on, or no longer applying), the gatekeeper's cancel intent if it
wrote one, and the lines of the thread: its readbacks and their
answers, the closing reports, the cancels and their acknowledgements,
with their verdicts (sensitive values masked).

Exit status 1 when the conversation or the handoff is unknown (never
seen, or expired after retention), 3 when Redis cannot be reached.
"""


RouteOption = Annotated[
    str | None, typer.Option("--route", "-r", metavar="ROUTE", help="The route, by its input topic.")
]


def _route_for(settings: Settings, name: str | None, *, required: bool) -> Route | None:
    with cli_errors():
        if name is not None:
            return settings.route(name)
    if len(settings.routes) == 1:
        return settings.routes[0]
    if not settings.routes:
        fail("no route configured (routes: in the configuration)", EXIT_USAGE)
    if required:
        names = ", ".join(r.input for r in settings.routes)
        fail(f"several routes are configured ({names}): name one with --route", EXIT_USAGE)
    return None


def _store(settings: Settings) -> RedisStore:
    with cli_errors():
        return RedisStore(settings.redis)


def _mask(text: str | None, settings: Settings, route: Route) -> str | None:
    if text is None:
        return None
    from gatekeeper.masking import mask_line
    from rwcore import FormError, get_profile

    try:
        sensitive = get_profile(route.profile, extra_dirs=settings.all_profile_dirs()).sensitive
    except FormError:
        sensitive = frozenset()
    return mask_line(text, sensitive)


# ---------------------------------------------------------------- list


@handoffs_app.command("list", epilog=LIST_EPILOG)
def list_(
    open_: Annotated[bool, typer.Option("--open", help="Only the open handoffs.")] = False,
    expired: Annotated[bool, typer.Option("--expired", help="Only the handoffs whose time ran out.")] = False,
    conversation: Annotated[
        str | None, typer.Option("--conversation", metavar="C", help="Only this conversation (its whole state).")
    ] = None,
    route: Annotated[
        str | None, typer.Option("--route", "-r", metavar="ROUTE", help="The route (its input topic).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
    config: ConfigOption = None,
) -> None:
    """List handoffs: open ones, the ones whose time ran out, or every handoff of one conversation."""
    if open_ and expired:
        fail("--open and --expired exclude each other (leave both out for both)", EXIT_USAGE)
    settings = settings_from(config)
    chosen = _route_for(settings, route, required=conversation is not None)
    routes = [chosen] if chosen is not None else list(settings.routes)
    rows = run(_list(settings, routes, conversation, open_, expired, time.time()))
    if as_json:
        typer.echo(json_inert(json.dumps(rows, ensure_ascii=False, indent=2)))
    elif rows:
        _print_table(rows)
    else:  # an empty list is an answer, not an error
        typer.echo(nothing_listed(routes, conversation, open_, expired))


def nothing_listed(routes: list[Route], conversation: str | None, open_: bool, expired: bool) -> str:
    """What ``list`` says when it lists nothing: which handoffs, where."""
    what = "open " if open_ else ("expired " if expired else "")
    if conversation is None and not open_ and not expired:
        what = "open or expired "
    names = ", ".join(r.input for r in routes)
    where = f"on route{'s' if len(routes) != 1 else ''} {names}"
    if conversation is not None:
        where = f"in conversation {conversation} {where}"
    return f"no {what}handoffs {where}"


async def _list(
    settings: Settings,
    routes: list[Route],
    conversation: str | None,
    open_only: bool,
    expired_only: bool,
    now: float,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    async with _store(settings) as store:
        for route in routes:
            pairs: list[tuple[str, str | None]] = []
            if conversation is not None:
                pairs.append((conversation, None))
            else:
                if not expired_only:
                    pairs += [(m.conversation, m.ho) for _, m in await store.index(route.input, "open")]
                if not open_only:
                    pairs += [(m.conversation, m.ho) for _, m in await store.index(route.input, "lapsed")]
            convs = sorted({c for c, _ in pairs})
            if not convs:
                continue
            loaded = await store.load(route.input, dict.fromkeys(convs), ())  # whole conversations
            seen: set[tuple[str, str]] = set()
            for conv, only in pairs:
                state = loaded.states[conv]
                for ho in [only] if only is not None else list(state.handoffs):
                    if ho is None or (conv, ho) in seen or ho not in state.handoffs:
                        continue
                    seen.add((conv, ho))
                    row = describe(route, conv, state, ho, now)
                    is_open = row["status"].startswith(("open", "cancelled"))
                    ran_out = state.handoffs[ho].lapsed_at is not None
                    if (open_only and not is_open) or (expired_only and not ran_out):
                        continue
                    rows.append(row)
    rows.sort(key=lambda r: (r["opened_at"] or "", r["route"], r["conversation"], r["handoff"]))
    return rows


def _print_table(rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    head = ("ROUTE", "CONVERSATION", "HANDOFF", "FROM>TO", "ITEM", "ASK", "OPENED", "NEXT DEADLINE", "STATUS")
    table = [
        tuple(
            inert(x)  # what agents wrote (a conversation key, a name, an item): escaped
            for x in (
                r["route"],
                r["conversation"],
                r["handoff"],
                f"{r['from']}>{r['to']}",
                r["item"],
                r["ask"],
                (r["opened_at"] or "-")[:16],
                r["next_deadline"] or "-",
                r["status"],
            )
        )
        for r in rows
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *table, strict=True)]
    for line in (head, *table):
        typer.echo("  ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)).rstrip())


# ---------------------------------------------------------------- show


@handoffs_app.command("show", epilog=SHOW_EPILOG)
def show(
    conversation: Annotated[str, typer.Argument(metavar="CONV", help="The conversation (the record key).")],
    handoff: Annotated[str, typer.Argument(metavar="ID", help="The HO's id, e.g. scheduler-1.")],
    route: Annotated[
        str | None, typer.Option("--route", "-r", metavar="ROUTE", help="The route (its input topic).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    config: ConfigOption = None,
) -> None:
    """Show one handoff: its thread, its state and its deadlines."""
    settings = settings_from(config)
    chosen = _route_for(settings, route, required=True)
    assert chosen is not None
    found = run(_show(settings, chosen, conversation, handoff, time.time()))
    if found is None:
        not_found(f"no conversation {conversation} on route {chosen.input} (never seen, or expired after retention)")
    state, intent = found
    if handoff not in state.handoffs:
        known = ", ".join(sorted(state.handoffs)) or "none"
        not_found(f"no forwarded handoff {handoff} in conversation {conversation} (its handoffs: {known})")
    doc = describe(chosen, conversation, state, handoff, time.time())
    doc["thread"] = thread_of(state, handoff)
    for row in doc["thread"]:
        row["text"] = _mask(row["text"], settings, chosen)
    doc["cancel_intent"] = None
    if intent is not None:
        doc["cancel_intent"] = {
            "cx": intent.cx,
            "why": intent.why,
            "topic": intent.topic,
            "partition": intent.partition,
            "offset_before": intent.offset,
            "published_at_offset": intent.published,
            "done": intent.done,
            "owner": intent.owner,
            "token": intent.token,
            "at": when(intent.at),
        }
    if as_json:
        typer.echo(json_inert(json.dumps(doc, ensure_ascii=False, indent=2)))
        return
    _print_show(doc)


async def _show(
    settings: Settings, route: Route, conversation: str, handoff: str, now: float
) -> tuple[ConversationState, CancelIntent | None] | None:
    async with _store(settings) as store:
        loaded = await store.load(route.input, {conversation: None}, ())  # the whole conversation
        state = loaded.states[conversation]
        if not state.lines:
            return None
        intents = await store.intents(route.input, [(conversation, handoff)])
        return state, intents.get((conversation, handoff))


def _print_show(doc: dict[str, Any]) -> None:
    def echo(line: str) -> None:
        typer.echo(inert(line))  # each line is one line: what agents wrote (the thread's lines, the key) escaped

    echo(f"{doc['handoff']}  {doc['from']} > {doc['to']}  item={doc['item']} ask={doc['ask']}")
    echo(f"  route         {doc['route']}")
    echo(f"  conversation  {doc['conversation']}")
    echo(f"  status        {doc['status']}")
    echo(f"  opened        {doc['opened_at']}")
    approval = "bound to this handoff" if doc["bound"] else ("free" if doc["exec"] else "n/a (not an exec ask)")
    if doc["relay_of"]:
        approval = f"bound to {doc['relay_of']}, which this handoff relays"
    echo(f"  approval      {approval}")
    if doc["passed_rb"]:
        echo(f"  readback      {doc['passed_rb']} passed" + (", cleared by an answer" if doc["cleared_by"] else ""))
    if doc["superseded_by"]:
        echo(f"  superseded by {doc['superseded_by']}")
    if doc["relay_of"]:
        echo(f"  relays        {doc['relay_of']} (its approval stays bound there)")
    if doc["relayed_by"]:
        echo(f"  relayed by    {doc['relayed_by']}")
    cx = doc["gatekeeper_cancel"]
    if cx is not None:
        echo(f"  gatekeeper cancel  {cx['id']} why={cx['why']} at {cx['at']}")
    if doc["overdue"] is not None:
        echo(f"  alert at expiry    {doc['overdue']['alert']} at {doc['overdue']['at']}")
    echo("  deadlines")
    if not doc["deadlines"]:
        echo("    none (no exp=, no due=, no readback deadline on this route)")
    for d in doc["deadlines"]:
        echo(f"    {d['kind']:<9} {d['value']:<16} {d['at'] or 'never':<26} {d['state']}")
    intent = doc["cancel_intent"]
    if intent is not None:
        state = "done" if intent["done"] else "pending (published? the next sweep searches the topic)"
        echo(
            f"  cancel intent  {intent['cx']} {state}; {intent['topic']}[{intent['partition']}] from offset "
            f"{intent['offset_before']}, held by {intent['owner']} (token {intent['token']})"
        )
    echo("  thread")
    for row in doc["thread"]:
        verdict = row["verdict"] + (f" ({row['reason']})" if row["reason"] else "")
        text = f"  {row['text']}" if row["text"] else ""
        echo(f"    {row['at']}  {row['type']} {row['id']}  {verdict}{text}")
