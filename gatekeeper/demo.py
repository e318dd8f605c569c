"""``gatekeeper demo`` (what ``make run`` runs): the real gatekeeper on the local services, with small agents.

What it does, in order, printing each step:

1. creates the route's topics (``config/samples/gatekeeper.yaml``: ``demo.pay`` and its output, dead-letter and
   alerts topics), clears what an earlier demo left under the configuration's Redis key prefix (``demo``: each run
   starts afresh) and loads the sample approvals (``config/samples/records.json``);
2. starts ``gatekeeper run`` as a subprocess (its log goes to ``.local/demo/gatekeeper.log``) and waits for
   ``/readyz``;
3. plays six conversations through the broker. The agents publish RW1 lines to ``demo.pay`` and read only the
   checked output topic, as real agents behind a gatekeeper would: a scheduler (the sender, who builds each handoff
   from its approved record), a payer whose payment tool is two-phase (``gatekeeper.twophase``) and a desk that
   writes remittance notes. The seed's payment flows: a clean payment; the tool resolving a lookalike account (the
   readback is refused, the scheduler cancels when no readback passes in time); the tool paying a different amount
   (the done report is forwarded flagged, with an alert); the approval withdrawn before confirmation (a cancel, the
   tool abandons its statement); a comprehension handoff whose readback contradicts the withheld criteria; and a
   payment whose handoff arrives before its approval (``no-record``). Every line's verdict is printed as it arrives
   on the output, dead-letter and alert topics;
4. shows the dead-letter topic's contents, lands the missing approval with ``gatekeeper records load``, and runs
   ``gatekeeper replay``, which forwards the held handoff: the payment then completes;
5. shows where ``/metrics`` is, and a few of its numbers; stops the gatekeeper with SIGTERM (a clean stop, exit 0),
   and ends with the commands to look around: the demo's world (its Redis state and its topics) stays as it is until
   the next demo or ``make stop``, so ``gatekeeper status``, ``handoffs``, ``records get`` and ``replay --dry-run``
   with ``-c config/samples/gatekeeper.yaml`` see exactly what the demo did.

``run_demo`` returns what was seen (for the test that plays it end to end).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rich.console import Console

import rwcore as rw
from gatekeeper.admin import TopicSpec, create_topics, quiet_client_logs, route_topics
from gatekeeper.config import Route, Settings, load_settings
from gatekeeper.errors import GatekeeperError
from gatekeeper.masking import mask_value
from gatekeeper.records import load_records_file
from gatekeeper.twophase import TwoPhaseTool
from rwcore import get_profile

SAMPLES = Path("config") / "samples"
PROFILE = "pay"
LOOKALIKE = "40-12-88/61102983"  # one transposition away from marlow's account on file
READBACK_PATIENCE = 3.0  # seconds the scheduler waits for a readback that passes before it cancels
STEP_TIMEOUT = 45.0
DEMO_MARKER = "demo-run"  # <prefix>:demo-run: the key that says a demo wrote the keys under the prefix


class DemoError(GatekeeperError):
    """The demo could not run (a step did not finish in time, the gatekeeper did not start)."""


# ---------------------------------------------------------------- what the demo plays


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    item: str
    ask: str = "PAY"
    to: str = "payer"
    resolve_acct: str | None = None  # the payer's tool resolves this account instead of the one on the line
    pays_amt: str | None = None  # the payer's tool pays this amount at commit
    withdraw: bool = False  # the approval is withdrawn once the readback arrives: the scheduler cancels
    patience: float | None = None  # cancel when no readback passed within this many seconds
    desk_acc: tuple[str, ...] = ()  # what the desk understood (its readback's acc=)
    late: bool = False  # the approval is not loaded before the handoff: held no-record, then replayed
    note: str = ""


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("clean", "inv:MD-2026-057", note="a clean payment: handoff, readback, clearance, done"),
    Scenario(
        "lookalike",
        "inv:MD-2026-058",
        resolve_acct=LOOKALIKE,
        patience=READBACK_PATIENCE,
        note="the payer's tool resolves a lookalike account: its statement is refused, nothing is paid",
    ),
    Scenario(
        "amount", "inv:KS-4471", pays_amt="890.40", note="the tool pays another amount than it stated: flagged, alert"
    ),
    Scenario("cancel", "inv:HB-0193", withdraw=True, note="the approval is withdrawn before confirmation: a cancel"),
    Scenario(
        "brief",
        "inv:MD-2026-057",
        ask="DRAFT",
        to="desk",
        desk_acc=("len:300w", "tone:plain", "must:remittance-ref", "no:bank-details"),
        patience=READBACK_PATIENCE,
        note="a comprehension handoff: the desk's readback contradicts the withheld length",
    ),
    Scenario(
        "late", "inv:MD-2026-061", late=True, note="a payment whose handoff arrives before its approval is loaded"
    ),
)

BRIEF = "remittance note to marlow: 120 words, plain, quote the remittance reference, no bank details"


@dataclass(frozen=True, slots=True)
class Seen:
    """One record the demo saw on the output, dead-letter or alerts topic."""

    scenario: str
    topic: str  # output | dead-letter | alert
    type: str
    id: str
    sender: str
    verdict: str  # forward | alert | dead-letter | (for an alert record) the alert's reason
    reason: str | None
    replayed: bool = False


@dataclass(slots=True)
class DemoResult:
    seen: list[Seen] = field(default_factory=list)
    replay_exit: int | None = None
    gatekeeper_exit: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    metrics_url: str = ""

    def of(self, scenario: str) -> list[Seen]:
        return [s for s in self.seen if s.scenario == scenario]


# ---------------------------------------------------------------- the agents


class Agents:
    """The scheduler, the payer (with a two-phase payment tool) and the desk. They send on the route's input topic,
    keyed by conversation, and are handed the lines that reach the checked output topic."""

    def __init__(self, producer: Any, topic: str, run_id: str, records: Mapping[tuple[str, str], dict[str, Any]]):
        self.producer = producer
        self.topic = topic
        self.run_id = run_id
        self.records = records
        self.scenarios = {self.conversation(s): s for s in SCENARIOS}
        self.tasks: set[asyncio.Task[None]] = set()
        self.readback_passed: set[str] = set()
        self.tokens: dict[tuple[str, str], str] = {}  # (conversation, RB id) -> the tool's token
        self.tool = TwoPhaseTool("payer", self._execute, profile=PROFILE)
        self._committing: Scenario | None = None
        self.counters: dict[tuple[str, str], int] = {}

    def conversation(self, s: Scenario) -> str:
        return f"{s.name}-{self.run_id}"

    def next_id(self, conversation: str, agent: str) -> str:
        n = self.counters.get((conversation, agent), 0) + 1
        self.counters[(conversation, agent)] = n
        return f"{agent}-{n}"

    async def send(self, conversation: str, line: str) -> None:
        await self.producer.send_and_wait(self.topic, line.encode(), key=conversation.encode())

    def _later(self, delay: float, coro: Callable[[], Any]) -> None:
        async def run() -> None:
            await asyncio.sleep(delay)
            await coro()

        task = asyncio.create_task(run())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # ------------------------------------------------------------ the scheduler (the sender)

    async def hand_over(self, s: Scenario) -> None:
        """Write the handoff from the approved record and check it before it goes (check 1)."""
        conv = self.conversation(s)
        record = self.records[(s.item, s.ask)]
        slots = {k: v for k, v in record.items() if k not in ("to", "item", "expect_acc", "resolved")}
        slots["p"] = PROFILE
        slots["rb"] = ["acc"] if s.ask == "DRAFT" else ["exec"]
        msg: dict[str, Any] = {
            "type": "HO",
            "id": self.next_id(conv, "scheduler"),
            "from": "scheduler",
            "to": record["to"],
            "item": s.item,
            "slots": slots,
        }
        if s.ask == "DRAFT":
            msg["tail"] = BRIEF
        ho = rw.encode(msg, PROFILE)
        problems, _ = rw.check_ho(ho, {k: v for k, v in record.items() if k != "expect_acc"}, PROFILE)
        if problems:
            raise DemoError(f"the scheduler would not send {s.name}: {problems}")
        await self.send(conv, ho)
        if s.patience is not None:
            self._later(s.patience, lambda: self._no_readback(s))

    async def _no_readback(self, s: Scenario) -> None:
        conv = self.conversation(s)
        if conv in self.readback_passed:
            return
        cx = rw.encode(
            {
                "type": "CX",
                "id": self.next_id(conv, "scheduler"),
                "re": "scheduler-1",
                "from": "scheduler",
                "to": s.to,
                "item": s.item,
                "slots": {"p": PROFILE, "why": "TIMEOUT"},
                "tail": f"no readback passed within {s.patience:g}s",
            },
            PROFILE,
        )
        await self.send(conv, cx)

    async def _scheduler(self, conv: str, s: Scenario, msg: rw.Message) -> None:
        if msg.type == "RB":
            self.readback_passed.add(conv)
            if s.withdraw:
                line = rw.encode(
                    {
                        "type": "CX",
                        "id": self.next_id(conv, "scheduler"),
                        "re": msg.re,
                        "from": "scheduler",
                        "to": msg.from_,
                        "item": s.item,
                        "slots": {"p": PROFILE, "why": "REVOKED"},
                        "tail": "approval withdrawn by the finance director",
                    },
                    PROFILE,
                )
            else:
                line = rw.encode(
                    {
                        "type": "AN",
                        "id": self.next_id(conv, "scheduler"),
                        "re": msg.id,
                        "from": "scheduler",
                        "to": msg.from_,
                        "slots": {"p": PROFILE, "val": "Y"},
                        "tail": "readback matches the approved run; proceed",
                    },
                    PROFILE,
                )
            await self.send(conv, line)

    # ------------------------------------------------------------ the payer and its two-phase tool

    def _execute(self, values: Mapping[str, str]) -> Mapping[str, str] | None:
        """The 'bank': pays what it is given, except where the scenario makes the tool pay another amount."""
        s = self._committing
        return {"amt": s.pays_amt} if s is not None and s.pays_amt is not None else None

    async def _payer(self, conv: str, s: Scenario, msg: rw.Message, line: str) -> None:
        if msg.type == "HO":
            acct = s.resolve_acct
            resolve = (lambda ho: {"acct": acct}) if acct is not None else None
            st = self.tool.prepare(line, resolve, conversation=conv)
            rb = rw.parse_line(st.line, PROFILE).message
            assert rb is not None
            self.tokens[(conv, rb.id)] = st.token
            await self.send(conv, st.line)
        elif msg.type == "AN" and msg.slots.get("val") == "Y" and (conv, msg.re or "") in self.tokens:
            self._committing = s
            try:
                dn = self.tool.commit(self.tokens.pop((conv, msg.re or "")), confirmed=True)
            finally:
                self._committing = None
            await self.send(conv, dn)
        elif msg.type == "CX":
            await self.send(conv, self.tool.cancel(line, conversation=conv))

    # ------------------------------------------------------------ the desk

    async def _desk(self, conv: str, s: Scenario, msg: rw.Message, line: str) -> None:
        if msg.type == "HO":
            rb = rw.make_readback(msg, self.next_id(conv, "desk"), PROFILE, acc=list(s.desk_acc))
            await self.send(conv, rw.encode_message(rb, PROFILE))
        elif msg.type == "CX":
            an = rw.encode(
                {
                    "type": "AN",
                    "id": self.next_id(conv, "desk"),
                    "re": msg.id,
                    "from": "desk",
                    "to": msg.from_,
                    "slots": {"p": PROFILE, "val": "Y"},
                    "tail": "nothing drafted",
                },
                PROFILE,
            )
            await self.send(conv, an)

    async def deliver(self, conv: str, line: str) -> None:
        """A line that reached the checked output topic, handed to the agent it is addressed to."""
        s = self.scenarios.get(conv)
        msg = rw.parse_line(line, PROFILE).message
        if s is None or msg is None:
            return
        if msg.to == "scheduler":
            await self._scheduler(conv, s, msg)
        elif msg.to == "payer":
            await self._payer(conv, s, msg, line)
        elif msg.to == "desk":
            await self._desk(conv, s, msg, line)


# ---------------------------------------------------------------- the screen


def _summary(msg: rw.Message) -> str:
    sl = msg.slots

    def show(k: str) -> str:
        v = sl.get(k)
        if v is None:
            return ""
        text = "+".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        return f"{k}={mask_value(text) if k in ('acct', 'prev', 'addr') else text}"

    keys = {
        "HO": ("ask", "rb", "amt", "cur", "acct"),
        "RB": ("amt", "acct", "acc"),
        "AN": ("val",),
        "CX": ("why",),
        "DN": ("out", "amt", "acct"),
        "FL": ("why",),
        "UN": ("why",),
    }.get(msg.type, ())
    return " ".join(x for x in (show(k) for k in keys) if x)


class Screen:
    """Prints each outcome as it arrives, and keeps what was seen."""

    def __init__(self, console: Console, names: Mapping[str, str], alerts_topic: str) -> None:
        self.console = console
        self.names = names  # conversation -> scenario name
        self.alerts_topic = alerts_topic
        self.result = DemoResult()
        self.changed = asyncio.Event()
        self.paused: list[tuple[str, bool]] | None = None  # lines held back while a command's output is shown

    def print(self, text: str, markup: bool = True) -> None:
        if self.paused is not None:
            self.paused.append((text, markup))
        else:
            self.console.print(text, markup=markup)

    def pause(self) -> None:
        self.paused = []

    def resume(self) -> None:
        held, self.paused = self.paused or [], None
        for text, markup in held:
            self.console.print(text, markup=markup)

    def record(self, kind: str, rec: Any) -> str | None:
        """Print one record of the output ('output'), dead-letter ('dead') or alerts ('alert') topic; returns its
        conversation when it belongs to this run."""
        conv = (rec.key or b"").decode("utf-8", "replace")
        name = self.names.get(conv)
        if name is None:
            return None
        headers = {str(k): bytes(v or b"").decode("utf-8", "replace") for k, v in (rec.headers or ())}
        replayed = "gk.replayed.from.topic" in headers
        if kind == "alert":
            doc = json.loads(rec.value)
            label = f"⚑ alert {doc.get('alert')}"
            self.print(
                f"  {name:<10} {doc.get('type')} {doc.get('id')!s:<13} {'':<16} [magenta]{label:<31}[/] "
                f"[dim]on {self.alerts_topic}: an act that ran cannot be hidden[/]"
            )
            self.result.seen.append(
                Seen(
                    name,
                    "alert",
                    str(doc.get("type")),
                    str(doc.get("id")),
                    str(doc.get("from")),
                    "alert",
                    doc.get("alert"),
                    replayed,
                )
            )
            self.changed.set()
            return conv
        text = (rec.value or b"").decode("utf-8", "replace")
        msg = rw.parse_line(text, PROFILE).message
        mtype, mid, sender = (msg.type, msg.id, msg.from_) if msg is not None else ("?", "?", "?")
        if kind == "output":
            verdict = headers.get("gk.verdict", "forward")
            reason = headers.get("gk.reason")
        else:
            verdict, reason = "dead-letter", headers.get("gk.reason")
        who = f"{sender}→{msg.to}" if msg is not None else ""
        what = _summary(msg) if msg is not None else ""
        if verdict == "forward":
            label, style = "✔ forwarded", "green"
        elif verdict == "alert":
            label, style = f"⚑ flagged {reason}", "magenta"
        else:
            label, style = f"✘ dead-letter {reason}", "red"
        if replayed:
            label += " (replayed)"
        self.print(f"  {name:<10} {mtype} {mid:<13} {who:<16} [{style}]{label:<31}[/] [dim]{what}[/]")
        if verdict != "forward":
            try:
                problems = json.loads(headers.get("gk.problems", "[]"))
            except json.JSONDecodeError:
                problems = []
            for p in problems[:2]:
                self.print(f"  {'':<10}    └ {p.get('message')}", markup=False)
        self.result.seen.append(
            Seen(name, "output" if kind == "output" else "dead-letter", mtype, mid, sender, verdict, reason, replayed)
        )
        self.changed.set()
        return conv

    async def wait(self, predicate: Callable[[DemoResult], bool], what: str, timeout: float = STEP_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self.result):
            left = deadline - time.monotonic()
            if left <= 0:
                raise DemoError(f"{what} did not happen within {timeout:g}s (see the gatekeeper's log)")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 0.5))


# ---------------------------------------------------------------- plumbing


def _free_port(host: str, wanted: int) -> int:
    """``wanted`` when it can be bound, else a free port."""
    for port in (wanted, 0):
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise DemoError(f"no free port on {host}")


async def _http_get(host: str, port: int, path: str, timeout: float = 2.0) -> tuple[int, str]:
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
    return status, body.decode("utf-8", "replace")


def _rel(path: Path) -> str:
    """A path as the user would type it: relative to the working directory when it is under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def stack_env_file() -> Path | None:
    """The local stack's env file (``deploy/local/stack.sh``: ``$GK_STATE_DIR/stack.env``, else
    ``.local/stack/stack.env``), when it exists."""
    path = Path(os.environ.get("GK_STATE_DIR") or Path(".local") / "stack") / "stack.env"
    return path if path.is_file() else None


def _env_values(path: Path) -> dict[str, str]:
    with contextlib.suppress(OSError):
        lines = path.read_text(encoding="utf-8").splitlines()
        return dict(ln.split("=", 1) for ln in lines if "=" in ln and not ln.lstrip().startswith("#"))
    return {}


def _cli_argv(*args: str) -> list[str]:
    """The gatekeeper command line, run with this interpreter (no PATH lookup)."""
    return [sys.executable, "-c", "from gatekeeper.cli import main; main()", *args]


def _metric_values(text: str, names: tuple[str, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name_labels, _, value = line.rpartition(" ")
        if any(name_labels.startswith(n) for n in names):
            with contextlib.suppress(ValueError):
                out[name_labels] = float(value)
    return out


# ---------------------------------------------------------------- the demo


@dataclass(slots=True)
class DemoOptions:
    config: Path
    records: Path
    late_records: Path
    bootstrap: str | None = None
    redis_url: str | None = None
    http_port: int | None = None
    log_file: Path = Path(".local") / "demo" / "gatekeeper.log"
    keep_state: bool = True  # False: delete the demo's Redis state at the end (kept by default, to look around)


def default_options(config: Path | None = None) -> DemoOptions:
    """The sample files, from the working directory or next to the installed package (a source checkout)."""
    roots = [Path.cwd(), Path(__file__).resolve().parent.parent]
    base = next((r / SAMPLES for r in roots if (r / SAMPLES / "gatekeeper.yaml").exists()), Path.cwd() / SAMPLES)
    return DemoOptions(
        config=config or base / "gatekeeper.yaml",
        records=base / "records.json",
        late_records=base / "records.late.json",
    )


class Demo:
    def __init__(self, options: DemoOptions, console: Console | None = None) -> None:
        self.opt = options
        self.console = console or Console(highlight=False)
        self.run_id = uuid.uuid4().hex[:6]
        self.started = time.time()
        overrides: dict[str, Any] = {}
        if options.bootstrap:
            overrides["kafka"] = {"bootstrap_servers": options.bootstrap}
        redis: dict[str, Any] = {}
        if options.redis_url:
            redis["url"] = options.redis_url
        base = load_settings(options.config, **({"redis": redis} if redis else {}), **overrides)
        if not base.routes:
            raise DemoError(f"{options.config}: routes: the demo needs one route")
        self.prefix = base.redis.key_prefix  # the configuration's: the operator's commands with it see the demo's state
        port = _free_port(base.http.host, base.http.port if options.http_port is None else options.http_port)
        self.settings: Settings = load_settings(
            options.config,
            **overrides,
            **({"redis": redis} if redis else {}),
            http={"port": port},
        )
        self.route: Route = self.settings.routes[0]
        self.env = {
            **os.environ,
            "GK_KAFKA__BOOTSTRAP_SERVERS": self.settings.kafka.bootstrap_servers,
            "GK_REDIS__URL": self.settings.redis.url,
            "GK_REDIS__KEY_PREFIX": self.prefix,
            "GK_HTTP__PORT": str(port),
            "PYTHONUNBUFFERED": "1",
        }
        self.env.pop("GK_CONFIG", None)
        self.url = f"http://{self.settings.http.host}:{port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def say(self, text: str = "") -> None:
        with contextlib.suppress(OSError):  # a closed pipe (``gatekeeper demo | head``) must not stop the cleanup
            self.console.print(text)

    def step(self, n: int, title: str) -> None:
        self.console.print()
        self.console.rule(f"[bold]{n}. {title}[/]", align="left")

    def command(self, *args: str) -> None:
        self.console.print(f"  [dim]$[/] [cyan]gatekeeper {' '.join(args)}[/]")

    async def run(self) -> DemoResult:
        quiet_client_logs()
        r = self.route
        self.say(
            f"[bold]rogerwilco gatekeeper demo[/] (run {self.run_id}): "
            f"Kafka at {self.settings.kafka.bootstrap_servers}, Redis at {self.settings.redis.url}"
        )
        config = _rel(self.opt.config)
        self.step(1, "the route's topics and the approved records")
        self.command("topics", "create", "-c", config)
        specs = [TopicSpec(t.name, 3, 1) for t in route_topics(self.settings, [r])]
        created = await create_topics(self.settings.kafka, specs)
        for t in route_topics(self.settings, [r]):
            self.say(f"    {t.name:<20} {t.kind:<12} {created[t.name]}")
        await self.fresh_state()
        self.command("records", "load", _rel(self.opt.records), "-c", config)
        records = load_records_file(self.opt.records, get_profile(PROFILE))
        late = load_records_file(self.opt.late_records, get_profile(PROFILE))
        approvals = {(x.item, x.ask): {**x.values, "item": x.item, "ask": x.ask} for x in [*records, *late]}

        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

        from gatekeeper.admin import _bounded
        from gatekeeper.consumers.kafka import client_kwargs
        from gatekeeper.redis_store import RedisStore

        kw = client_kwargs(self.settings.kafka)
        consumer = AIOKafkaConsumer(**{**kw, "client_id": "gatekeeper-demo"}, enable_auto_commit=False)
        producer = AIOKafkaProducer(**{**kw, "client_id": "gatekeeper-demo-agents"}, acks="all", linger_ms=0)
        result: DemoResult | None = None
        reader: asyncio.Task[None] | None = None
        done = False
        try:
            store = RedisStore(self.settings.redis)
            try:
                for rec in records:
                    await store.store_record(rec)
            finally:
                await store.close()
            self.say(f"    loaded {len(records)} approvals: " + ", ".join(f"{x.item} {x.ask}" for x in records))
            kept = "kept after the demo, cleared by the next one" if self.opt.keep_state else "deleted at the end"
            self.say(f"    [dim](the demo's state: Redis keys {self.prefix}:*, {kept})[/]")
            await _bounded(consumer.start(), 30.0, self.settings.kafka, "connecting")
            await _bounded(producer.start(), 30.0, self.settings.kafka, "connecting")
            kinds = {r.output: "output", r.dead_letter: "dead", r.alerts: "alert"}
            tps: list[Any] = []
            for topic in kinds:
                parts = consumer.partitions_for_topic(topic)
                if not parts:
                    await consumer._client._wait_on_metadata(topic)
                    parts = consumer.partitions_for_topic(topic) or {0}
                tps.extend(TopicPartition(topic, p) for p in sorted(parts))
            consumer.assign(tps)
            ends = await consumer.end_offsets(tps)
            for tp in tps:
                consumer.seek(tp, ends[tp])
            dlq_start = {tp.partition: ends[tp] for tp in tps if tp.topic == r.dead_letter}
            agents = Agents(producer, r.input, self.run_id, approvals)
            screen = Screen(self.console, {agents.conversation(s): s.name for s in SCENARIOS}, r.alerts)
            result = screen.result
            result.metrics_url = f"{self.url}/metrics"

            async def read() -> None:
                while True:
                    batch = await consumer.getmany(timeout_ms=200)
                    for tp, recs in batch.items():
                        for rec in recs:
                            conv = screen.record(kinds[tp.topic], rec)
                            if conv is not None and kinds[tp.topic] == "output" and rec.value:
                                await agents.deliver(conv, rec.value.decode("utf-8", "replace"))

            reader = asyncio.create_task(read())
            self.step(2, "the gatekeeper")
            self.command("run", "-c", config)
            await self.start_gatekeeper()
            self.say(f"    running (pid {self.proc.pid if self.proc else '?'}); metrics on {self.url}/metrics")
            self.say(f"    its log: {self.opt.log_file}")

            self.step(3, "six conversations through the gatekeeper")
            for s in SCENARIOS:
                self.say(f"  [bold]{s.name:<10}[/] [dim]{s.note}[/]")
            self.say()
            for s in SCENARIOS:
                await agents.hand_over(s)
            await screen.wait(_phase_one_done, "the six conversations")
            await asyncio.sleep(0.3)

            self.step(4, "the dead-letter topic, an approval that lands late, and replay")
            await self.show_dead_letters(dlq_start)
            self.command("records", "load", _rel(self.opt.late_records), "-c", config)
            await self.cli("records", "load", str(self.opt.late_records), "-c", str(self.opt.config))
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started - 1))
            args = ("replay", "--route", r.input, "--reason", "no-record", "--since", since)
            self.command(*args, "-c", config)
            screen.pause()  # the replayed payment goes on while the command runs: show its output first
            try:
                result.replay_exit = await self.cli(*args, "-c", str(self.opt.config))
            finally:
                screen.resume()
            await screen.wait(_late_done, "the replayed payment")
            await asyncio.sleep(0.3)

            self.step(5, "metrics, and a clean stop")
            await self.show_metrics(result)
            result.gatekeeper_exit = await self.stop_gatekeeper()
            done = True
            return result
        finally:
            if self.proc is not None and self.proc.poll() is None:  # first: never leave a gatekeeper behind
                await self.stop_gatekeeper()
            if reader is not None:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await reader
            for task in list(agents.tasks) if "agents" in locals() else []:
                task.cancel()
            with contextlib.suppress(Exception):
                await producer.stop()
            with contextlib.suppress(Exception):
                await consumer.stop()
            if not self.opt.keep_state:
                await self.forget_state()
            self.say()
            if done and self.opt.keep_state:
                self.look_around(config)
            self.say(
                "The local Kafka and Redis are still running: [cyan]make stop[/] stops them and deletes their data "
                "(the demo's state and topics included); [cyan]make status[/] shows them."
            )

    # ------------------------------------------------------------ the gatekeeper subprocess

    async def start_gatekeeper(self) -> None:
        self.opt.log_file.parent.mkdir(parents=True, exist_ok=True)
        log = self.opt.log_file.open("wb")
        try:
            self.proc = subprocess.Popen(
                _cli_argv("run", "--config", str(self.opt.config), "--startup-timeout", "30"),
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        finally:
            log.close()
        host, port = self.settings.http.host, int(self.env["GK_HTTP__PORT"])
        deadline = time.monotonic() + STEP_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise DemoError(f"the gatekeeper exited with {self.proc.returncode}: {self._log_tail()}")
            with contextlib.suppress(OSError, TimeoutError, ValueError, IndexError):
                status, body = await _http_get(host, port, "/readyz")
                if status == 200:
                    await self._alone(json.loads(body).get("partitions"))
                    return
            if time.monotonic() > deadline:
                raise DemoError(f"the gatekeeper was not ready within {STEP_TIMEOUT:g}s: {self._log_tail()}")
            await asyncio.sleep(0.2)

    async def _alone(self, assigned: object) -> None:
        """The demo's gatekeeper must hold every input partition: another member of its consumer group (a gatekeeper
        left running with this configuration) would decide some of the demo's lines against another state."""
        from gatekeeper.admin import describe_topics

        info = await describe_topics(self.settings.kafka, [self.route.input])
        total = info[self.route.input].partitions
        if isinstance(assigned, int) and assigned < total:
            raise DemoError(
                f"another consumer in group {self.settings.kafka.group_id} holds {total - assigned} of "
                f"{self.route.input}'s {total} partitions: stop the gatekeeper running with "
                f"{_rel(self.opt.config)} (or give a --config with another kafka.group_id)"
            )

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            lines = self.opt.log_file.read_text(errors="replace").strip().splitlines()
            return " | ".join(lines[-3:]) or "(its log is empty)"
        return "(no log)"

    async def stop_gatekeeper(self) -> int | None:
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            self.say(
                "  [dim]$[/] kill -TERM " + str(proc.pid) + "   [dim](intake stops, in-flight work drains, offsets "
                "are committed)[/]"
            )
            proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 20
            while proc.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            if proc.poll() is None:
                proc.kill()
                await asyncio.sleep(0.2)
        code = proc.returncode
        self.say(f"    the gatekeeper stopped (exit {code})" + (": clean" if code == 0 else ""))
        self.proc = None
        return code

    async def cli(self, *args: str) -> int:
        """Run a gatekeeper command as an operator would, and show its output."""
        proc = await asyncio.create_subprocess_exec(
            *_cli_argv(*args), env=self.env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        out, _ = await asyncio.wait_for(proc.communicate(), STEP_TIMEOUT)
        for line in out.decode("utf-8", "replace").rstrip().splitlines():
            with contextlib.suppress(OSError):
                self.console.print(f"    {line}", markup=False)
        return proc.returncode if proc.returncode is not None else -1

    # ------------------------------------------------------------ showing things

    async def show_dead_letters(self, start: Mapping[int, int]) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        from gatekeeper.consumers.kafka import client_kwargs

        r = self.route
        self.say(f"  what is on [bold]{r.dead_letter}[/] from this run (value unchanged; why, in gk.* headers):")
        consumer = AIOKafkaConsumer(**client_kwargs(self.settings.kafka), enable_auto_commit=False)
        await consumer.start()
        try:
            tps = [TopicPartition(r.dead_letter, p) for p in sorted(start)]
            consumer.assign(tps)
            ends = await consumer.end_offsets(tps)
            for tp in tps:
                consumer.seek(tp, start[tp.partition])
            rows = []
            for tp in tps:
                while await consumer.position(tp) < ends[tp]:
                    batch = await consumer.getmany(tp, timeout_ms=2000)
                    for rec in batch.get(tp, []):
                        if rec.offset < ends[tp] and (rec.key or b"").decode().endswith(self.run_id):
                            rows.append((tp.partition, rec))
                    if not batch:
                        break
        finally:
            await consumer.stop()
        for partition, rec in rows:
            h = {str(k): bytes(v or b"").decode("utf-8", "replace") for k, v in (rec.headers or ())}
            value = (rec.value or b"").decode("utf-8", "replace")
            shown = value if len(value) <= 96 else value[:93] + "..."
            from gatekeeper.masking import mask_line

            self.say(f"    [{partition}]@{rec.offset:<4} key={(rec.key or b'').decode()}")
            self.console.print(f"      value  {mask_line(shown)}", markup=False)
            self.console.print(
                f"      gk.reason={h.get('gk.reason')}  gk.check={h.get('gk.check')}  gk.tier={h.get('gk.tier')}  "
                f"gk.attempt={h.get('gk.attempt')}  gk.original={h.get('gk.original.topic')}"
                f"[{h.get('gk.original.partition')}]@{h.get('gk.original.offset')}",
                markup=False,
            )

    async def show_metrics(self, result: DemoResult) -> None:
        host, port = self.settings.http.host, int(self.env["GK_HTTP__PORT"])
        self.say(f"  Prometheus scrapes [cyan]{self.url}/metrics[/] (and probes /healthz, /readyz). Some of it now:")
        try:
            status, body = await _http_get(host, port, "/metrics")
        except (OSError, TimeoutError) as exc:
            self.say(f"    (could not read /metrics: {exc})")
            return
        if status != 200:
            self.say(f"    (/metrics answered {status})")
            return
        values = _metric_values(
            body, ("gatekeeper_lines_total", "gatekeeper_dead_letters_total", "gatekeeper_alerts_total")
        )
        result.metrics = values
        for name, value in sorted(values.items()):
            self.console.print(f"    {name} {value:g}", markup=False)

    def look_around(self, config: str) -> None:
        """The commands an operator runs next, exactly as typed in a new shell from the repository."""
        self.say(
            "The demo's world stays as it is until the next demo or [cyan]make stop[/]. Look around, in a new shell:"
        )
        self.say()
        r = self.route
        runs = {s.name: f"{s.name}-{self.run_id}" for s in SCENARIOS}
        rows = [*self.shell_setup()]
        for args, why in (
            (("status",), "lag, dead letters, open handoffs"),
            (("topics", "describe"), "the route's four topics"),
            (("handoffs", "list", "--conversation", runs["clean"]), "the clean payment's handoff"),
            (("handoffs", "show", runs["lookalike"], "scheduler-1"), "the lookalike payment's thread"),
            (("records", "get", "inv:MD-2026-057"), "an approval, and the handoff bound to it"),
            (
                ("replay", "--route", r.input, "--dry-run", "--details"),
                "the dead letters decided again, changing nothing",
            ),
        ):
            rows.append((f"gatekeeper {' '.join(args)} -c {config}", why))
        rows.append((f"gatekeeper serve -c {config}", "the console, its API and MCP (Ctrl-C stops it)"))
        width = max(len(line) for line, _ in rows)
        for line, why in rows:
            self.console.print(f"  [cyan]{line:<{width}}[/]  [dim]# {why}[/]", markup=True, highlight=False)
        self.say()
        port = load_settings(self.opt.config).http.port  # serve's, not the port this demo's own run picked
        console = f"http://127.0.0.1:{port}/console/conversation?route={quote(r.input)}&q={quote(runs['lookalike'])}"
        self.say("With [cyan]gatekeeper serve[/] running, the console shows the lookalike payment's thread at")
        self.console.print(f"  {console}", markup=False, highlight=False, soft_wrap=True)
        self.say()

    def shell_setup(self) -> list[tuple[str, str]]:
        """How a new shell gets the ``gatekeeper`` command and the services' addresses (``GK_`` variables override
        the sample configuration's 9092 and 6379)."""
        out: list[tuple[str, str]] = []
        activate = Path(sys.prefix) / "bin" / "activate"
        if sys.prefix != sys.base_prefix and activate.exists():
            out.append((f". {_rel(activate)}", "the gatekeeper command"))
        env = stack_env_file()
        if (
            env is not None
            and _env_values(env).get("GK_KAFKA__BOOTSTRAP_SERVERS") == self.settings.kafka.bootstrap_servers
        ):
            out.append((f"set -a; . {_rel(env)}; set +a", "the local stack's Kafka and Redis"))
        else:
            out.append(
                (
                    f"export GK_KAFKA__BOOTSTRAP_SERVERS={self.settings.kafka.bootstrap_servers} "
                    f"GK_REDIS__URL={self.settings.redis.url}",
                    "the Kafka and Redis the demo used",
                )
            )
        return out

    async def _state_keys(self, client: Any) -> list[Any]:
        """The demo's keys under its prefix, but the generation marker (and its copies) and the owner epochs: those
        say this Redis is the one the demo's consumer group ran against (its offsets survive in Kafka), so the next
        run's gatekeeper starts instead of stopping for a data loss."""
        kept = (f"{self.prefix}:generation", f"{self.prefix}:epoch:")
        keys = [k async for k in client.scan_iter(match=f"{self.prefix}:*", count=500)]
        return [k for k in keys if not (k.decode() if isinstance(k, bytes) else k).startswith(kept)]

    async def fresh_state(self) -> None:
        """Clear what an earlier demo left under the prefix (each run starts afresh: one approval, one act, so the
        clean payment could not be paid twice), and mark the prefix as the demo's. Keys no demo wrote are left
        alone: the demo refuses to run on them."""
        from gatekeeper.redis_store import client_from_settings

        marker = f"{self.prefix}:{DEMO_MARKER}"
        client = client_from_settings(self.settings.redis)
        try:
            keys = await self._state_keys(client)
            if keys:
                previous = await client.get(marker)
                if previous is None:
                    raise DemoError(
                        f"Redis at {self.settings.redis.url} holds {len(keys)} key(s) under the prefix "
                        f"{self.prefix!r} that no demo wrote; the demo clears its prefix at each run, so give it a "
                        "configuration with a redis.key_prefix of its own (or make stop, which deletes the local "
                        "stack's data)"
                    )
                for i in range(0, len(keys), 500):
                    await client.delete(*keys[i : i + 500])
                run = json.loads(previous).get("run", "?")
                self.say(f"    [dim]cleared the previous demo's Redis state (run {run}, {len(keys)} keys)[/]")
            await client.set(marker, json.dumps({"run": self.run_id, "started": self.started}))
        finally:
            with contextlib.suppress(Exception):
                await client.aclose()

    async def forget_state(self) -> None:
        """Delete the demo's Redis keys (its prefix), with ``keep_state=False``."""
        from gatekeeper.redis_store import client_from_settings

        client = client_from_settings(self.settings.redis)
        try:
            keys = await self._state_keys(client)
            if keys:
                await client.delete(*keys)
        except Exception as exc:  # a demo's leftovers are not worth failing over
            self.say(f"  [dim](could not delete this run's Redis keys: {exc})[/]")
        finally:
            with contextlib.suppress(Exception):
                await client.aclose()


def _count(res: DemoResult, scenario: str, topic: str, type_: str) -> int:
    return sum(1 for s in res.of(scenario) if s.topic == topic and s.type == type_)


def _phase_one_done(res: DemoResult) -> bool:
    """Every scenario has reached its last line: a done report, or the acknowledgement of a cancel; the late one
    its dead letter."""
    return (
        _count(res, "clean", "output", "DN") >= 1
        and _count(res, "amount", "alert", "DN") >= 1
        and _count(res, "amount", "output", "DN") >= 1
        and all(_count(res, s, "output", "AN") >= 1 and _count(res, s, "output", "CX") >= 1 for s in ("cancel",))
        and all(
            _count(res, s, "output", "CX") >= 1 and _count(res, s, "output", "AN") >= 1 for s in ("lookalike", "brief")
        )
        and _count(res, "late", "dead-letter", "HO") >= 1
    )


def _late_done(res: DemoResult) -> bool:
    return _count(res, "late", "output", "DN") >= 1


__all__ = ["SCENARIOS", "Demo", "DemoError", "DemoOptions", "DemoResult", "Scenario", "Seen", "default_options"]
