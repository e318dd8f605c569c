"""``POST /v1/gate``: the gatekeeper's own verdict for one line of a conversation, for a service without Kafka.

    curl -s http://127.0.0.1:9108/v1/gate -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' \\
         -d '{"route": "agents.pay", "conversation": "c-17", "line": "RW1 HO scheduler-1 from=scheduler ..."}'

**One decider.** The HTTP path never decides a line itself: it produces the line to the route's input topic, keyed
by the conversation (the same record an agent on Kafka would produce), and answers with the outcome the daemon
produced for that record. So the HTTP path and the Kafka path cannot disagree, and a conversation keeps one decider
at a time: the instance that owns its partition. The outcome is found by its coordinates: every outcome carries
``gk.original.topic``, ``gk.original.partition`` and ``gk.original.offset`` (``consumers/outcomes.py``), and the
correlator reads the route's output and dead-letter topics (not only this process's decisions: another instance
may own the partition).

**A timeout is not a refusal.** No outcome within the timeout (``http.gate_timeout_seconds``, or the request's
``timeout``) answers 504 ``pending`` with the line's coordinates: it is in the pipeline and will be decided (a held
reply, a daemon that is down, a partition being rebalanced). Sending the line again is safe: a line the gatekeeper
has decided is answered from its stored first decision (``repeated``).

**dry_run** decides the line against the conversation's current state in Redis, with the daemon's own ``Processor``
on a store that never writes (nothing is produced, claimed or saved); the answer is built from the outcome records
the daemon would produce. A reply whose handoff is not known yet answers ``hold``. After Redis lost its data (its
generation marker missing while the daemon's consumer group has committed offsets: ``gatekeeper.generation``) a
dry run answers 503 ``redis-data-lost`` instead of a verdict against the bindings that are gone, until an operator
runs ``gatekeeper redis accept-loss``; Redis (or Kafka, asked only while there is no marker) not answering is 503
``gate-unavailable``.

**Who may gate.** A bearer token (``gatekeeper.api.auth``) that speaks for the line's ``from=``: a token for
``payer`` cannot gate a line ``from=scheduler`` (403). A line larger than the route's ``max_line_bytes`` is refused
before it is produced (413); an unknown route is 404. On a route with ``sender_auth`` the request carries the
agent's signature (``signature``: the ``rw-sig`` header's value, ``gatekeeper.auth``), which becomes the record's
header; without it the request is refused (422 ``signature-required``) rather than producing a line the daemon would
dead-letter ``sender-auth``. The token does not stand in for the signature: the daemon verifies it like any other.

The answer (200) is the outcome, with sensitive values masked as in the outcome's headers, and, dry run or not,
without the record's values and the holder of a binding unless the token has the ``operator`` scope
(``gatekeeper.api.redaction``: otherwise the gate would be an oracle of approved values); the dead-letter topic's
headers keep them::

    {"ok": false, "verdict": "dead-letter", "reason": "check-ho", "check": "check_ho", "problems": ["..."],
     "notes": [], "repeated": false, "route": "agents.pay", "conversation": "c-17",
     "original": {"topic": "agents.pay", "partition": 0, "offset": 41}, "decided_at": "2026-10-01T09:00:00.000Z",
     "dry_run": false}
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal, cast

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from pydantic import BaseModel, ConfigDict, Field

from gatekeeper.admin import reader_consumer
from gatekeeper.api.auth import Principal, TokenBook
from gatekeeper.api.functions import HO_EXAMPLE, MAX_TEXT, Unicode, problem_document
from gatekeeper.api.redaction import redact
from gatekeeper.auth import KeyRing, check_record
from gatekeeper.config import Route, Settings
from gatekeeper.consumers.kafka import make_producer
from gatekeeper.consumers.outcomes import Outcome, OutcomeKind, Source, Targets, build
from gatekeeper.errors import Unavailable
from gatekeeper.generation import refusal, require
from gatekeeper.metrics import Metrics
from gatekeeper.policy import BindingChange, Decision, Verdict
from gatekeeper.processor import Line, Processor
from gatekeeper.store import DataLost, Loaded, Store

log = logging.getLogger(__name__)

RECENT_OUTCOMES = 4096  # outcomes seen before their request asked (the produce acknowledgement came late)
CONNECT_BACKOFF_MAX = 10.0


class GateRequest(Unicode):
    """One line of a conversation, to be gated on a route."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"route": "agents.pay", "conversation": "c-17", "line": HO_EXAMPLE}]},
    )

    route: str = Field(min_length=1, max_length=249, description="the route: its input topic", examples=["agents.pay"])
    conversation: str = Field(
        min_length=1, max_length=1000, description="the conversation id: the record's key", examples=["c-17"]
    )
    line: str = Field(min_length=1, max_length=MAX_TEXT, description="the RW1 line", examples=[HO_EXAMPLE])
    dry_run: bool = Field(False, description="decide against the current state; produce and change nothing")
    timeout: float | None = Field(
        None, gt=0, le=300, description="seconds to wait for the outcome (at most http.gate_timeout_seconds)"
    )
    detail: bool = Field(False, description="add `detail`: the problems as data (code, tier, slot, expected, got)")
    signature: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="the agent's signature of the line (`v2 <key id> <signature>`, docs/security.md), "
        "sent as the record's signature header; required on a route with sender_auth",
    )


class Original(BaseModel):
    topic: str
    partition: int
    offset: int


class GateAnswer(BaseModel):
    """The outcome of the line: what the daemon produced for it (or, dry run, would produce)."""

    ok: bool = Field(description="the line was forwarded with no finding")
    verdict: Literal["forward", "dead-letter", "alert", "hold"]
    reason: str | None = Field(None, description="the reason code (check-ho, invalid, ...)")
    check: str | None = Field(None, description="where the problems come from (check_ho, check_rb_full, ...)")
    problems: list[str]
    notes: list[str]
    detail: dict[str, Any] | None = None
    repeated: bool = Field(False, description="answered from the line's stored first decision")
    route: str
    conversation: str
    original: Original | None = Field(None, description="the input record's coordinates (not on a dry run)")
    decided_at: str | None = None
    dry_run: bool
    would_verdict: str | None = Field(None, description="a route in dry-run mode: what enforce mode would do")
    would_reason: str | None = None
    trimmed: str | None = Field(None, description="what the outcome had to leave out to fit its topic")


class PendingAnswer(BaseModel):
    """504: no outcome yet. The line is in the pipeline and will be decided; it was not refused."""

    ok: bool = False
    status: int = 504
    code: str = "pending"
    title: str
    detail: str
    original: Original


# ------------------------------------------------------------------------------------------------ the outcome


def sender_of(line: str) -> str | None:
    """The ``from=`` of a line, read as the parser reads the envelope (before the tail); None when absent."""
    body = line.split(" // ", 1)[0]
    for tok in body.split():
        if tok.startswith("from="):
            return tok[5:] or None
    return None


def answer_of(
    kind: str,
    headers: Mapping[str, bytes],
    *,
    route: str,
    conversation: str,
    dry_run: bool,
    detail: bool,
    original: Original | None,
    scopes: Collection[str] = (),
) -> dict[str, Any]:
    """The answer of an outcome record (``kind``: output or dead-letter), from its headers, its problems as a token
    with ``scopes`` may see them (``gatekeeper.api.redaction``: the record's values and a binding's holder only
    with ``operator``)."""

    def h(name: str) -> str | None:
        v = headers.get(name)
        return None if v is None else v.decode("utf-8", errors="replace")

    if kind == OutcomeKind.DEAD_LETTER.value:
        verdict = "dead-letter"
        decided = h("gk.decided.at")
    else:
        verdict = h("gk.verdict") or "forward"
        decided = h("gk.checked.at")
    problems: list[dict[str, Any]] = []
    raw = headers.get("gk.problems")
    if raw:
        try:
            loaded = orjson.loads(raw)
            problems = [p for p in loaded if isinstance(p, dict)] if isinstance(loaded, list) else []
        except orjson.JSONDecodeError:
            problems = []
    problems = redact(problems, scopes)
    out: dict[str, Any] = {
        "ok": verdict == "forward" and not problems,
        "verdict": verdict,
        "reason": h("gk.reason") or h("gk.would.reason"),
        "check": h("gk.check"),
        "problems": [str(p.get("message", "")) for p in problems],
        "notes": [],
        "repeated": h("gk.repeated") == "true",
        "route": route,
        "conversation": conversation,
        "original": None if original is None else original.model_dump(),
        "decided_at": decided,
        "dry_run": dry_run,
    }
    if h("gk.would.verdict") is not None:
        out["would_verdict"] = h("gk.would.verdict")
        out["would_reason"] = h("gk.would.reason")
    if h("gk.trimmed") is not None:
        out["trimmed"] = h("gk.trimmed")
    if detail:
        out["detail"] = {"problems": problems, "notes": []}
    return out


# ------------------------------------------------------------------------------------------------ the correlator


Key = tuple[str, int, int]  # the input record's topic, partition, offset


class Correlator:
    """Reads the gated routes' output and dead-letter topics from their end, and hands each outcome to the request
    waiting for its input coordinates. Outcomes nobody waits for yet are kept a while (``RECENT_OUTCOMES``)."""

    def __init__(self, settings: Settings, kinds: Mapping[str, str]) -> None:
        self.settings = settings
        self.kinds = dict(kinds)  # topic -> output | dead-letter
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._waiters: dict[Key, list[asyncio.Future[tuple[str, dict[str, bytes]]]]] = {}
        self._recent: OrderedDict[Key, tuple[str, dict[str, bytes]]] = OrderedDict()

    async def start(self, partitions: Mapping[str, Collection[int]]) -> None:
        """Assign every partition of the outcome topics (``partitions``: topic -> its partitions) at its end."""
        consumer = reader_consumer(self.settings.kafka, "gate", auto_offset_reset="latest")
        await consumer.start()
        try:
            tps = [TopicPartition(t, p) for t in sorted(self.kinds) for p in sorted(partitions[t])]
            consumer.assign(tps)
            await consumer.seek_to_end(*tps)
            for tp in tps:  # resolved now: every outcome produced from here on is read
                await consumer.position(tp)
        except BaseException:
            with contextlib.suppress(Exception):
                await consumer.stop()
            raise
        self._consumer = consumer
        self._task = asyncio.create_task(self._read(), name="gatekeeper-gate-correlator")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._consumer.stop(), timeout=5.0)
            self._consumer = None
        for futs in self._waiters.values():
            for f in futs:
                if not f.done():
                    f.cancel()
        self._waiters.clear()

    async def _read(self) -> None:
        assert self._consumer is not None
        while True:
            try:
                batches = await self._consumer.getmany(timeout_ms=200, max_records=1000)
            except KafkaError as exc:
                log.warning("the gate's outcome reader failed; retrying", extra={"error": str(exc)})
                await asyncio.sleep(1.0)
                continue
            for tp, records in batches.items():
                kind = self.kinds.get(tp.topic)
                if kind is None:
                    continue
                for r in records:
                    self._seen(kind, r.headers or ())

    def _seen(self, kind: str, raw_headers: Sequence[tuple[str, bytes | None]]) -> None:
        headers = {str(k): bytes(v) if v is not None else b"" for k, v in raw_headers}
        try:
            key = (
                headers["gk.original.topic"].decode("utf-8"),
                int(headers["gk.original.partition"]),
                int(headers["gk.original.offset"]),
            )
        except (KeyError, ValueError, UnicodeDecodeError):
            return
        found = (kind, headers)
        futs = self._waiters.pop(key, None)
        if futs:
            for f in futs:
                if not f.done():
                    f.set_result(found)
            return
        self._recent[key] = found
        while len(self._recent) > RECENT_OUTCOMES:
            self._recent.popitem(last=False)

    async def wait(self, key: Key, timeout: float) -> tuple[str, dict[str, bytes]] | None:
        """The outcome (kind, headers) of the input record at ``key``, or None after ``timeout`` seconds."""
        hit = self._recent.pop(key, None)
        if hit is not None:
            return hit
        fut: asyncio.Future[tuple[str, dict[str, bytes]]] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, []).append(fut)
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            return None
        finally:
            futs = self._waiters.get(key)
            if futs is not None and fut in futs:
                futs.remove(fut)
                if not futs:
                    del self._waiters[key]


# ------------------------------------------------------------------------------------------------ dry run


class ReadOnlyStore:
    """A store that reads through to the real one and never writes: a dry run's claims all succeed (nothing is
    bound) and its saves are dropped."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def load(self, route: str, wants: Any, keys: Collection[Any]) -> Loaded:
        return await self._store.load(route, wants, keys)

    async def claim(self, changes: Sequence[BindingChange]) -> list[BindingChange]:
        return []

    async def save(self, *args: Any, **kwargs: Any) -> list[BindingChange]:
        return []


# ------------------------------------------------------------------------------------------------ the gate


class Gate:
    """Serves ``POST /v1/gate``. ``start()`` connects in the background (the server starts whether or not Kafka
    answers); until connected, a non-dry-run request answers 503. ``store`` is the state store of dry runs (a
    ``RedisStore`` on ``settings.redis`` by default, made on first use and closed by ``close()``)."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics | None = None,
        *,
        tokens: TokenBook | None = None,
        store: Store | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.tokens = tokens if tokens is not None else TokenBook.from_settings(settings.http)
        self.routes: dict[str, Route] = {r.input: r for r in settings.routes}
        kinds = {}
        for r in settings.routes:
            kinds[r.output] = OutcomeKind.OUTPUT.value
            kinds[r.dead_letter] = OutcomeKind.DEAD_LETTER.value
        self._kinds = kinds
        self._store = store
        self._owns_store = store is None
        self._pinned = False  # the generation marker found and pinned on the dry runs' store (``_dry_store``)
        self._producer: AIOKafkaProducer | None = None
        self._correlator: Correlator | None = None
        self._connect: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._error: str | None = "connecting to Kafka"
        self._processors: dict[str, Processor] = {}
        # the agents' public keys, for dry runs on a sender_auth route: read here (a bad keys file fails the start,
        # as a bad tokens file does), not on the first request
        signed = any(r.sender_auth for r in settings.routes)
        self._keys = KeyRing.from_settings(settings.sender_auth) if signed else None

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    @property
    def status(self) -> dict[str, Any]:
        """For readiness documents: whether the gate can produce and read outcomes."""
        if not self.routes or not len(self.tokens):
            return {"gate": "off"}
        return {"gate": "ready"} if self.ready else {"gate": "not-ready", "gate_error": self._error}

    async def start(self) -> None:
        if not self.routes or not len(self.tokens):
            return  # nothing can be gated: no clients
        self._connect = asyncio.create_task(self._connect_loop(), name="gatekeeper-gate-connect")

    async def _connect_loop(self) -> None:
        delay = 0.2
        while True:
            try:
                producer = make_producer(
                    self.settings.kafka, transactional_id=None, client_id=f"{self.settings.kafka.client_id}-gate"
                )
                try:
                    await producer.start()
                except BaseException:
                    with contextlib.suppress(Exception):
                        await producer.stop()
                    raise
                correlator = Correlator(self.settings, self._kinds)
                try:
                    partitions = {}
                    for topic in sorted(self._kinds):
                        parts = await asyncio.wait_for(producer.partitions_for(topic), timeout=30.0)
                        if not parts:
                            raise KafkaError(f"topic {topic} has no partitions")
                        partitions[topic] = parts
                    await correlator.start(partitions)
                except BaseException:
                    with contextlib.suppress(Exception):
                        await producer.stop()
                    raise
                self._producer, self._correlator = producer, correlator
                self._error = None
                self._ready.set()
                log.info("the gate is connected", extra={"routes": sorted(self.routes)})
                return
            except (KafkaError, OSError, TimeoutError) as exc:
                self._error = f"{type(exc).__name__}: {exc}"
                log.warning("the gate cannot reach Kafka yet; retrying", extra={"error": self._error})
                await asyncio.sleep(delay)
                delay = min(CONNECT_BACKOFF_MAX, delay * 2)

    async def close(self) -> None:
        if self._connect is not None:
            self._connect.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._connect
            self._connect = None
        if self._correlator is not None:
            await self._correlator.close()
            self._correlator = None
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._producer.stop(), timeout=5.0)
            self._producer = None
        self._ready.clear()
        if self._store is not None and self._owns_store:
            closer = getattr(self._store, "close", None)
            if closer is not None:
                with contextlib.suppress(Exception):
                    await closer()
            self._store = None

    # -------------------------------------------------------------------------------------------- a request

    async def handle(self, req: GateRequest, authorization: str | None) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON document) for one request."""
        status, doc = await self._handle(req, authorization)
        if self.metrics is not None:
            outcome = doc.get("verdict") if status == 200 else doc.get("code", "error")
            self.metrics.api_gate.labels(outcome=str(outcome)).inc()
        return status, doc

    async def _handle(self, req: GateRequest, authorization: str | None) -> tuple[int, dict[str, Any]]:
        principal = self.tokens.principal(authorization)
        if principal is None:
            why = (
                "a bearer token, and none is configured (http.tokens)"
                if not len(self.tokens)
                else "a valid bearer token"
            )
            return 401, problem_document(401, "unauthorized", f"POST /v1/gate needs {why}")
        route = self.routes.get(req.route)
        if route is None:
            known = ", ".join(sorted(self.routes)) or "none configured"
            return 404, problem_document(404, "unknown-route", f"unknown route {req.route!r} (routes: {known})")
        refused = self._refuse(principal, route, req)
        if refused is not None:
            return refused
        value = req.line.encode("utf-8")
        if len(value) > route.max_line_bytes:
            return 413, problem_document(
                413,
                "line-too-large",
                f"the line is {len(value)} bytes; route {route.input} takes at most {route.max_line_bytes}",
            )
        if route.sender_auth and req.signature is None:
            return 422, problem_document(
                422,
                "signature-required",
                f"route {route.input} takes signed lines only (sender_auth): give the agent's signature of the line "
                f"in `signature` ({self.settings.sender_auth.header}: v2 <key id> <signature>)",
            )
        if req.dry_run:
            return await self._dry_run(req, route, value, principal.scopes)
        return await self._gate(req, route, value, principal.scopes)

    def _headers(self, req: GateRequest) -> list[tuple[str, bytes]]:
        """The record's headers: the agent's signature, when the request carries one."""
        if req.signature is None:
            return []
        return [(self.settings.sender_auth.header, req.signature.encode("utf-8"))]

    def _refuse(self, principal: Principal, route: Route, req: GateRequest) -> tuple[int, dict[str, Any]] | None:
        if not principal.may_gate(route.input):
            return 403, problem_document(403, "forbidden", f"token {principal.name} may not gate route {route.input}")
        sender = sender_of(req.line)
        if not principal.speaks_for(sender):
            who = f"from={sender}" if sender is not None else "a line without from="
            agents = ", ".join(sorted(principal.agents))
            return 403, problem_document(403, "forbidden", f"token {principal.name} speaks for {agents}, not for {who}")
        return None

    async def _gate(
        self, req: GateRequest, route: Route, value: bytes, scopes: Collection[str]
    ) -> tuple[int, dict[str, Any]]:
        if not self.ready or self._producer is None or self._correlator is None:
            return 503, problem_document(503, "gate-unavailable", f"the gate cannot reach Kafka: {self._error}")
        timeout = self.settings.http.gate_timeout_seconds
        if req.timeout is not None:
            timeout = min(timeout, req.timeout)
        started = time.monotonic()
        try:
            fut = await self._producer.send(
                route.input, value, key=req.conversation.encode("utf-8"), headers=self._headers(req) or None
            )
            meta = await asyncio.wait_for(fut, timeout=max(1.0, timeout))
        except (KafkaError, TimeoutError) as exc:
            return 503, problem_document(
                503,
                "gate-unavailable",
                f"Kafka did not acknowledge the line ({type(exc).__name__}); it may or may not be on the input "
                "topic: sending it again is safe (a line already decided is answered from its first decision)",
            )
        original = Original(topic=route.input, partition=meta.partition, offset=meta.offset)
        left = max(0.0, timeout - (time.monotonic() - started))
        found = await self._correlator.wait((route.input, meta.partition, meta.offset), left)
        if found is None:
            doc = problem_document(
                504,
                "pending",
                f"no outcome within {timeout:g}s: the line is in the pipeline (input partition {meta.partition}, "
                f"offset {meta.offset}) and will be decided; it was not refused",
            )
            doc["original"] = original.model_dump()
            return 504, doc
        kind, headers = found
        return 200, answer_of(
            kind,
            headers,
            route=route.input,
            conversation=req.conversation,
            dry_run=False,
            detail=req.detail,
            original=original,
            scopes=scopes,
        )

    async def _dry_run(
        self, req: GateRequest, route: Route, value: bytes, scopes: Collection[str]
    ) -> tuple[int, dict[str, Any]]:
        """The dry run's answer; 503 ``redis-data-lost`` while Redis lost its data (``generation.require``, as the
        daemon and the operator's commands check it), 503 ``gate-unavailable`` when Redis (or, to tell a first start
        from a loss, Kafka) does not answer. A loss met by a store whose marker was pinned drops the store and
        checks again from the start: the refusal is the commands' (with what resolves it), and once the loss is
        accepted the dry runs answer again."""
        for again in (True, False):
            try:
                return 200, await self._dry_decide(req, route, value, scopes)
            except DataLost as exc:
                pinned = self._pinned
                await self._forget_store()
                if again and pinned:
                    continue
                detail = f"{refusal(exc, 'deciding a dry run')}; nothing is decided, not even a dry run"
                return 503, problem_document(503, "redis-data-lost", detail)
            except Unavailable as exc:
                return 503, problem_document(503, "gate-unavailable", f"the dry run cannot be decided: {exc}")
        raise AssertionError("unreachable: the second attempt returns")

    async def _dry_decide(
        self, req: GateRequest, route: Route, value: bytes, scopes: Collection[str]
    ) -> dict[str, Any]:
        store = await self._dry_store()
        processor = self._processors.get(route.input)
        if processor is None:
            from gatekeeper.consumers.deciding import route_policy

            policy = route_policy(route, self.settings)
            processor = self._processors[route.input] = Processor(ReadOnlyStore(store), policy)
        now = time.time()
        sender = None
        if route.sender_auth and self._keys is not None:
            sender = check_record(
                self._keys,
                self._headers(req),
                self.settings.sender_auth.header,
                route.input,
                req.conversation,
                value,
            )
        (decision,) = await processor.process([Line(req.conversation, value, first_seen=now, sender=sender)], now)
        return self._dry_answer(req, route, processor, decision, value, now, scopes)

    async def _dry_store(self) -> Store:
        """The dry runs' store. One the gate makes (a ``RedisStore``) is checked first as the operator's commands
        check theirs (``generation.require``: refused after a loss) and its marker pinned, so every load reads the
        marker in the same round trip; with no marker yet (a first start) it is checked again at the next dry run.
        An injected store is the caller's to check."""
        if self._store is None:
            from gatekeeper.redis_store import RedisStore

            self._store = RedisStore(self.settings.redis)
            self._owns_store = True
        if self._owns_store and not self._pinned:
            checked = await require(self.settings, cast(Any, self._store), pin=True)
            self._pinned = checked.marker is not None
        return self._store

    async def _forget_store(self) -> None:
        """After a loss: the store the gate made is closed and dropped, with its processors (made again, and checked
        again, at the next dry run)."""
        if not self._owns_store or self._store is None:
            return
        store, self._store = self._store, None
        self._processors.clear()
        self._pinned = False
        closer = getattr(store, "close", None)
        if closer is not None:
            with contextlib.suppress(Exception):
                await closer()

    def _dry_answer(
        self,
        req: GateRequest,
        route: Route,
        processor: Processor,
        d: Decision,
        value: bytes,
        now: float,
        scopes: Collection[str],
    ) -> dict[str, Any]:
        if d.verdict is Verdict.HOLD:
            problems = redact([p.to_dict() for p in d.problems], scopes)
            return {
                "ok": False,
                "verdict": "hold",
                "reason": None if d.reason is None else d.reason.value,
                "check": d.check,
                "problems": [str(p["message"]) for p in problems],
                "notes": [],
                "repeated": d.repeated,
                "route": route.input,
                "conversation": req.conversation,
                "original": None,
                "decided_at": None,
                "dry_run": True,
                **({"detail": {"problems": problems, "notes": []}} if req.detail else {}),
            }
        source = Source(topic=route.input, partition=-1, offset=-1, value=value, key=req.conversation.encode())
        targets = Targets(route.output, route.dead_letter, route.alerts, route.input, route.mode == "dry-run")
        sensitive = frozenset(processor.route.profile.sensitive)
        outs: list[Outcome] = build(d, source, targets, conversation=req.conversation, sensitive=sensitive, now=now)
        first = outs[0]
        return answer_of(
            first.kind.value,
            dict(first.headers),
            route=route.input,
            conversation=req.conversation,
            dry_run=True,
            detail=req.detail,
            original=None,
            scopes=scopes,
        )


__all__ = [
    "Correlator",
    "Gate",
    "GateAnswer",
    "GateRequest",
    "PendingAnswer",
    "ReadOnlyStore",
    "answer_of",
    "sender_of",
]
