"""The console's reads and its one act, behind the pages (``gatekeeper.console.pages``): what each page needs from
Redis and Kafka, bounded, and the replay of chosen dead letters with its audit record.

Everything here runs in the process that serves HTTP (``gatekeeper run`` serves it from a process of its own), so a
console user costs the worker nothing: the reads go to Redis and the broker, never through the worker, and each is
bounded (a page reads at most ``MAX_LISTED`` index members, ``LetterReader.per_partition`` letters a partition, one
conversation's state). The replay is ``gatekeeper replay``'s own ``Replayer``, given the letters the operator chose
(``Selection.letters``), one at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gatekeeper.api.auth import TokenBook
from gatekeeper.config import Route, Settings
from gatekeeper.console.history import LineRates, counters_of
from gatekeeper.console.letters import Letter, LetterReader
from gatekeeper.consumers.outcomes import iso
from gatekeeper.masking import sensitive_slots

log = logging.getLogger(__name__)

#: index members a page lists at most (open handoffs, next deadlines, overdue), per route
MAX_LISTED = 50
#: conversations an item or agent search looks into at most
MAX_SEARCHED = 200


@dataclass(frozen=True, slots=True)
class Deadline:
    conversation: str
    ho: str
    at: float

    @property
    def when(self) -> str:
        return iso(self.at)


@dataclass(frozen=True, slots=True)
class RouteNow:
    """One route on the "Now" page."""

    route: Route
    open_count: int
    next_deadlines: tuple[Deadline, ...]
    lapsed: tuple[Deadline, ...]
    breaker_open: bool | None  # None: not known here (no worker in this process)
    unanswered: int | None


class Console:
    """The console's state in the HTTP process: the token book, a Redis store, the letter reader, the last hour of
    line counters (sampled from ``worker_metrics``, the worker's metrics text; None: ``gatekeeper serve``, which
    decides no lines), and the audit producer."""

    def __init__(
        self,
        settings: Settings,
        *,
        worker_metrics: Callable[[], bytes] | None = None,
        readiness: Callable[[], tuple[bool, dict[str, Any]]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.book = TokenBook.from_settings(settings.http)
        self.worker_metrics = worker_metrics
        self.readiness = readiness
        self.clock = clock
        self.sensitive = sensitive_slots(settings)
        self.rates = LineRates()
        self.letters = LetterReader(settings)
        self._store: Any = None
        self._producer: Any = None
        self._sampler: asyncio.Task[None] | None = None
        self._replaying = asyncio.Lock()

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if self.worker_metrics is not None:
            self.sample()
            self._sampler = asyncio.create_task(self._sample_every(), name="gatekeeper-console-sampler")

    async def close(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._sampler
        await self.letters.close()
        if self._store is not None:
            with contextlib.suppress(Exception):
                await self._store.close()
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._producer.stop(), timeout=5.0)

    def sample(self) -> None:
        if self.worker_metrics is None:
            return
        try:
            counters = counters_of(self.worker_metrics())
        except Exception:  # a half-written file or a format change: skip one sample, never the page
            log.warning("the console could not read the worker's metrics", exc_info=True)
            return
        self.rates.add(self.clock(), counters)

    async def _sample_every(self) -> None:
        while True:
            await asyncio.sleep(self.rates.every)
            self.sample()

    def replay_settings(self) -> Settings:
        """The settings a replay runs with: the daemon's, with the console's Redis user when one is configured
        (``http.console_redis_username``: under the chart's ACLs, the operator's user, whose rights a replay needs)."""
        http = self.settings.http
        if http.console_redis_username is None:
            return self.settings
        redis = self.settings.redis.model_copy(
            update={"username": http.console_redis_username, "password": http.console_redis_password}
        )
        return self.settings.model_copy(update={"redis": redis})

    def store(self) -> Any:
        if self._store is None:
            from gatekeeper.redis_store import RedisStore

            self._store = RedisStore(self.settings.redis)
        return self._store

    # ------------------------------------------------------------ reads

    def worker_gauges(self) -> dict[tuple[str, str], float]:
        """(metric name, route) -> value of the worker's per-route gauges the page shows."""
        if self.worker_metrics is None:
            return {}
        from prometheus_client.parser import text_string_to_metric_families

        out: dict[tuple[str, str], float] = {}
        wanted = {"gatekeeper_dead_letter_breaker_open", "gatekeeper_unanswered_questions_total"}
        try:
            for family in text_string_to_metric_families(self.worker_metrics().decode("utf-8", errors="replace")):
                for s in family.samples:
                    if s.name in wanted and "route" in s.labels:
                        out[(s.name, s.labels["route"])] = s.value
        except Exception:
            log.warning("the console could not read the worker's metrics", exc_info=True)
        return out

    async def now(self) -> list[RouteNow]:
        """Per route: open handoffs, the next deadlines, the handoffs whose time ran out (bounded reads)."""
        store = self.store()
        gauges = self.worker_gauges()
        out = []
        for route in self.settings.routes:
            parts = await self.letters.partitions(route.input)
            opened = await store.index_size(route.input, "open", parts)
            due = await store.index_head(route.input, "due", parts, MAX_LISTED)
            lapsed = await store.index_head(route.input, "lapsed", parts, MAX_LISTED, newest=True)
            known = self.worker_metrics is not None
            out.append(
                RouteNow(
                    route=route,
                    open_count=opened,
                    next_deadlines=tuple(Deadline(m.conversation, m.ho, m.score) for m in due),
                    lapsed=tuple(Deadline(m.conversation, m.ho, m.score) for m in lapsed),
                    breaker_open=bool(gauges.get(("gatekeeper_dead_letter_breaker_open", route.input)))
                    if known
                    else None,
                    unanswered=int(gauges.get(("gatekeeper_unanswered_questions_total", route.input), 0))
                    if known
                    else None,
                )
            )
        return out

    async def conversation(self, route: Route, conversation: str) -> Any:
        """The conversation's whole state (a ``ConversationState``; no lines: never seen, or expired)."""
        loaded = await self.store().load(route.input, {conversation: None}, ())
        return loaded.states[conversation]

    async def find(self, route: Route, query: str) -> list[tuple[str, str]]:
        """Conversations an item or an agent names, with why: the handoff on this route bound to the item's approval
        of each act the route's profile names (a GET of each binding: the daemon's Redis user may not list an
        item's records), then the open and lapsed handoffs sent by or to the agent (at most ``MAX_SEARCHED``
        conversations looked into)."""
        from gatekeeper.policy import RecordKey, bound_handoff
        from rwcore import get_profile

        store = self.store()
        found: dict[str, str] = {}
        profile = get_profile(route.profile, extra_dirs=self.settings.all_profile_dirs())
        for ask in sorted(profile.exec_map):
            holder = await store.binding(RecordKey(query, ask))
            if holder is None:
                continue
            r, _, rest = bound_handoff(holder).partition("/")
            conv, _, ho = rest.rpartition("/")
            if r == route.input and conv:
                found.setdefault(conv, f"{ask} approval of {query} bound to {ho}")
        parts = await self.letters.partitions(route.input)
        members = await store.index_head(route.input, "open", parts, MAX_SEARCHED)
        members += await store.index_head(route.input, "lapsed", parts, MAX_SEARCHED, newest=True)
        convs = list(dict.fromkeys(m.conversation for m in members))[:MAX_SEARCHED]
        if convs:
            wants = {c: [m.ho for m in members if m.conversation == c] for c in convs}
            loaded = await store.load(route.input, wants, ())
            for conv, state in loaded.states.items():
                for ho in state.handoffs:
                    view = state.tracker.handoff(ho)
                    if view is not None and query in (view.sender, view.receiver):
                        found.setdefault(conv, f"handoff {ho} {view.sender} > {view.receiver}")
        return sorted(found.items())

    async def dead_letters(self, route: Route, *, unmask: bool) -> tuple[list[Letter], bool]:
        return await self.letters.newest(route, self.sensitive, unmask=unmask)

    # ------------------------------------------------------------ the act

    async def replay(
        self, route: Route, letters: Sequence[tuple[int, int]], *, dry_run: bool, who: str, client: str | None
    ) -> Any:
        """Replay (or dry-run) the chosen letters of ``route``'s dead-letter topic exactly as ``gatekeeper replay
        --route R --letter P:O ...`` does, then write the audit record. Returns the ``ReplayReport``."""
        from gatekeeper.replay import Replayer, Selection, Status

        async with self._replaying:
            started = self.clock()
            doc: dict[str, Any] = {
                "action": "replay-dry-run" if dry_run else "replay",
                "who": who,
                "client": client,
                "at": iso(started),
                "letters": [f"{p}:{o}" for p, o in sorted(letters)],
                "topic": route.dead_letter,
            }
            try:
                report = await Replayer(self.replay_settings()).run(
                    route=route.input, selection=Selection(letters=frozenset(letters)), dry_run=dry_run
                )
            except Exception as exc:  # an act that failed is audited too: it may have forwarded some lines
                doc["error"] = f"{type(exc).__name__}: {exc}"
                with contextlib.suppress(Exception):
                    await self.audit(route, doc)
                raise
            doc["result"] = {
                "read": report.read,
                "passed": report.passed,
                "still_failing": report.failing,
                "skipped": report.count(Status.SKIPPED),
            }
            await self.audit(route, doc)
            return report

    async def audit(self, route: Route, doc: dict[str, Any]) -> None:
        """An audit record on the route's alerts topic: JSON ``{"audit": "console", ...}``, keyed ``console``, with
        the header ``gk.audit: console``. Raises when Kafka does not acknowledge it (the page then says so)."""
        if self._producer is None:
            from aiokafka import AIOKafkaProducer

            from gatekeeper.consumers.kafka import client_kwargs

            kafka = self.settings.kafka
            kw = client_kwargs(kafka)
            kw["client_id"] = f"{kafka.client_id}-console"
            producer = AIOKafkaProducer(**kw, acks="all", enable_idempotence=True)
            await asyncio.wait_for(producer.start(), 10.0)
            self._producer = producer
        value = json.dumps({"audit": "console", **doc}, ensure_ascii=False).encode("utf-8")
        await asyncio.wait_for(
            self._producer.send_and_wait(
                route.alerts, value, key=b"console", headers=[("gk.audit", b"console"), ("gk.author", b"gatekeeper")]
            ),
            10.0,
        )


__all__ = ["MAX_LISTED", "Console", "Deadline", "RouteNow"]
