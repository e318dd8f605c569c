"""The batch: load what it needs in one round trip, decide its lines in order in memory, claim bindings, write once.

A route's batch crosses into the native engine twice (``policy.decide.prepare_batch`` and ``decide_batch``): once to
screen and parse every line and learn what to load, once to decide, apply and index them all, so no Python runs per
line between the load and the save but making each line's ``Decision``.

Shared by the daemon, ``gatekeeper check`` and ``gatekeeper replay``: the only difference between them is where
the lines come from, which store is behind ``BatchStore`` (its load, claim and save) and where the outcomes go.

Order of writes, and why:
1. claim the exec bindings the batch made (compare-and-set). If another gatekeeper bound one of those approvals
   first, nothing else is written and the batch is decided again from a fresh load, so "one approval, one act"
   holds across instances;
2. save the conversation states (with each line's first decision) before any outcome is produced, so a crash
   after this point reprocesses the lines to the same stored verdicts instead of deciding them again later;
3. the caller produces the outcomes, then commits the offsets.

The first two are one ``Store.save`` (``claims=``): on a single Redis one script call, so a batch costs two round
trips, its load and its save.

**No line is fatal.** A line whose deciding raises (anything but ``StoreError``: deciding is pure, so any other
exception is a bug; a panic in the engine is raised as one) never reaches the caller: the batch is decided again from
a fresh load, line by line in Python (``decide`` and ``apply``, the same engine one line at a time), each line's
effects applied and its index entries computed under a guard; the line that raises gets the
``internal-error`` decision (``policy.decide.internal_error``: dead-lettered and alerted, its stack trace logged
once), its conversation's state and the batch's bindings are rolled back to before it, and the next line goes on.
Were the next instance to get the partition meet the same line, it would decide it the same way: no line can stop a
partition.

The lifecycle's indexes (``policy.lifecycle``: each open handoff's next deadline, when it was forwarded) are written
in the same round trip as the states, for the conversations of lines that carry their input ``partition``: the
entries of the handoffs the batch's decisions touched (what ``apply`` returns; one that closed leaves the open and
deadline indexes), so the cost follows the lines, not the open handoffs. A conversation whose lines all repeat their
stored decisions (a batch retried after a failed write) gets the entries of every open handoff its lines loaded
written again (idempotent), which repairs what that write may have left out: the handoffs a batch's effects touch
are among those its lines name, so they are the ones loaded again.

**The state a batch loads** is only what its lines name (``policy.state``): their ids, ``re=`` and ``ctx=``, and what
those entries point to; the save writes only the entries the batch changed. A line's cost does not depend on how
long its conversation is.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import msgspec

from gatekeeper.masking import mask_line
from gatekeeper.policy import (
    BindingChange,
    ConversationState,
    Decision,
    Overlay,
    Reason,
    RecordKey,
    RoutePolicy,
    SenderProof,
    Verdict,
    apply,
    decide,
)
from gatekeeper.policy.decide import Prepared, decide_batch, error_text, internal_error, prepare, prepare_batch
from gatekeeper.policy.lifecycle import IndexEntry, index_entries, index_of
from gatekeeper.policy.state import line_ids
from gatekeeper.store import BatchStore, StoreError, blocking
from rwcore import Problem

log = logging.getLogger(__name__)

MAX_CLAIM_ROUNDS = 5


class Line(msgspec.Struct, frozen=True, gc=False):
    """One consumed value and what the decision needs besides it."""

    conversation: str | None
    value: bytes
    first_seen: float | None = None  # when it was first consumed (the hold window of a reply)
    replay: bool = False  # re-decide a stored dead letter (gatekeeper replay)
    partition: int | None = None  # the input partition: the bucket of the lifecycle indexes (None: not indexed)
    sender: SenderProof | None = None  # who signed the record (gatekeeper.auth), on a route with sender_auth


def _record_key(prepared: Prepared) -> RecordKey | None:
    """The (item, ask) of a line that is an HO, so its record and binding are loaded with the batch."""
    msg = None if prepared.parsed is None else prepared.parsed.message
    if msg is None or msg.type != "HO" or msg.item is None:
        return None
    return RecordKey(msg.item, str(msg.slots.get("ask")))


def _names(
    lines: Sequence[Line], prepared: Sequence[Prepared | Exception]
) -> tuple[dict[str, set[str]], set[RecordKey]]:
    """What ``prepare_batch`` says of a batch, from its lines prepared one by one: the ids each conversation's lines
    name, and the (item, ask) of each handoff."""
    wants: dict[str, set[str]] = {}
    for ln, prep in zip(lines, prepared, strict=True):
        if ln.conversation is not None:
            named = wants.setdefault(ln.conversation, set())
            if isinstance(prep, Prepared) and prep.parsed is not None:
                msg = prep.parsed.message  # the raw fields (built on demand) only for a line that did not parse
                named.update(line_ids(msg, None if msg is not None else prep.parsed.raw))
    keys = {k for p in prepared if isinstance(p, Prepared) and (k := _record_key(p)) is not None}
    return wants, keys


#: The turns of the event loop a save takes to put its request on the wire (redis-py's pipeline writes it in its
#: first or second step): the work done meanwhile starts after them. Were it to take more, that work would only
#: run before the request leaves, as it did before the two overlapped.
SEND_TURNS = 2


async def _saving(save: Coroutine[Any, Any, list[BindingChange]], work: Callable[[], None]) -> list[BindingChange]:
    """Run ``save`` and do ``work`` while it waits for Redis: the save starts first, as a task, and is given the
    turns it takes to send its request. A ``work`` that raises (a bug) cancels the save before it is raised."""
    saving = asyncio.ensure_future(save)
    try:
        for _ in range(SEND_TURNS):
            if saving.done():
                break
            await asyncio.sleep(0)
        work()
    except BaseException:
        saving.cancel()
        raise
    return await saving


QUEUED = "queued-behind-held"  # the problem code of a line held only because an earlier line of its conversation is


def _queued(conversation: str, now: float) -> Decision:
    """A line not decided because an earlier line of its conversation in the batch is held: it is held too, so it
    cannot overtake that line (the caller keeps both and decides them again in order)."""
    problem = Problem(
        code=QUEUED,
        message=f"queued behind a held line of conversation {conversation}",
        tier="conversation",
    )
    return Decision(Verdict.HOLD, Reason.AWAITING_HANDOFF, (problem,), decided_at=now)


class Processor:
    """Decides batches of one route's lines against a store."""

    def __init__(self, store: BatchStore, route: RoutePolicy) -> None:
        self.store = store
        self.route = route
        #: The owner epoch of each input partition this instance holds (``Store.take_epochs``, set by the worker on
        #: assignment): the states of a partition's conversations are written fenced by it. A line without a
        #: partition, or of a partition with no epoch here (``gatekeeper check``, replay), is written unfenced.
        self.epochs: dict[int, int] = {}

    async def process(
        self, lines: Sequence[Line], now: float, meanwhile: Callable[[list[Decision]], None] | None = None
    ) -> list[Decision]:
        """Decide ``lines`` in order, as if one by one, and persist what changed. Returns one decision per line.
        ``meanwhile`` is called with the decisions once their save is on its way, while Redis writes them: work
        that needs only the decisions (the worker builds the lines' records then); when the save conflicts, it is
        called again with the decisions made again, so its last call is with the decisions returned.
        Once a line of a conversation is held (``HOLD``), its later lines in ``lines`` are held too, undecided
        (problem code ``queued-behind-held``): none overtakes it. A line whose deciding raises is dead-lettered
        ``internal-error`` (see the module docstring); nothing but ``StoreError`` leaves this method, bar what
        ``meanwhile`` itself raises (a bug of its caller's: the save is cancelled first).
        Raises ``StoreError`` when the store is unavailable: nothing was decided, retry the batch later; its subclass
        ``Fenced`` when a newer owner of a partition wrote one of the batch's conversations (this instance lost the
        partition: the batch must not land)."""
        prepared: list[Prepared | Exception] | None = None
        try:
            batch, wants, keys = prepare_batch(
                [ln.value for ln in lines], [ln.conversation for ln in lines], self.route
            )
        except Exception as exc:  # a bug in the native screen or parse: each line prepared and decided under a guard
            log.warning(
                "preparing the batch raised: deciding it line by line",
                extra={"route": self.route.name, "lines": len(lines), "error": error_text(exc)},
            )
            prepared = [self._prepare(ln) for ln in lines]
            wants, keys = _names(lines, prepared)
        rows = [(ln.value, ln.conversation, ln.first_seen, ln.replay, ln.partition, ln.sender) for ln in lines]
        partitions = {
            ln.conversation: ln.partition for ln in lines if ln.conversation is not None and ln.partition is not None
        }
        claimed: list[BindingChange] = []
        rounds = 0
        while rounds < MAX_CLAIM_ROUNDS:
            rounds += 1
            loaded = await self.store.load(self.route.name, wants, keys)
            overlay = Overlay(records=loaded.records, loaded_bindings=loaded.bindings)
            guarded = prepared is not None
            try:
                if prepared is None:
                    decisions, changed, hit = decide_batch(
                        batch, rows, loaded.states, overlay, self.route, now, _queued
                    )
                else:
                    decisions, changed, hit = self._decide_guarded_all(lines, prepared, loaded.states, overlay, now)
                deadlines = self._deadlines(loaded.states, partitions, changed, hit, guarded)
            except StoreError:
                raise
            except Exception as exc:
                if guarded:  # the guards catch every line's error: this is a bug in the guard itself
                    raise
                log.warning(
                    "a line of the batch raised: deciding the batch again line by line",
                    extra={"route": self.route.name, "lines": len(lines), "error": error_text(exc)},
                )
                prepared = [self._prepare(ln) for ln in lines]
                rounds -= 1  # not a claim round: the first one did not get as far as claiming
                continue
            changes = overlay.changes()
            if claimed:  # an earlier round claimed: what this round's decisions no longer hold is given back first
                await self._release_unused(claimed, overlay)
            states = {c: loaded.states[c] for c in changed}
            fences = {c: self.epochs[p] for c, p in partitions.items() if p in self.epochs}
            save = self.store.save(self.route.name, states, deadlines, fences or None, now=now, claims=changes)
            if meanwhile is None:
                conflicts = await save
            else:
                conflicts = await _saving(save, functools.partial(meanwhile, decisions))
            if not blocking(conflicts):
                return decisions
            # another handoff bound one of these approvals first: nothing was written; decide again from a fresh load
            claimed.extend(c for c in changes if c not in conflicts)
        raise StoreError(f"exec bindings kept changing under this batch after {MAX_CLAIM_ROUNDS} rounds")

    def _prepare(self, ln: Line) -> Prepared | Exception:
        try:
            return prepare(ln.value, self.route)
        except Exception as exc:  # the gate or the parser raised: a bug, decided as an internal error
            return exc

    def _deadlines(
        self,
        states: dict[str, ConversationState],
        partitions: dict[str, int],
        changed: set[str],
        hit: dict[str, set[str]],
        guarded: bool,
    ) -> list[IndexEntry]:
        """The lifecycle index entries to write: in a conversation the batch changed, those of the handoffs its
        decisions touched (``hit``); in one it did not change (its lines only repeated, as after a failed write),
        every open handoff's again, to repair what that write may have left out. ``guarded``: a conversation whose
        entries cannot be computed (each line's were, so this is not expected) is logged and left out."""
        rt = self.route.readback_timeout_seconds
        out: list[IndexEntry] = []
        for c, p in partitions.items():
            try:
                if c in changed:
                    out.extend(index_of(states[c], c, p, hit.get(c, ()), rt))
                else:
                    out.extend(index_entries(states[c], c, p, rt).values())
            except Exception:
                if not guarded:
                    raise
                log.exception(
                    "the lifecycle index of a conversation could not be computed: left as it was",
                    extra={"route": self.route.name, "conversation": c},
                )
        return out

    def _decide_guarded_all(
        self,
        lines: Sequence[Line],
        prepared: Sequence[Prepared | Exception],
        states: dict[str, ConversationState],
        overlay: Overlay,
        now: float,
    ) -> tuple[list[Decision], set[str], dict[str, set[str]]]:
        """Decide and apply each line in order, each under its guard (``_decide_guarded``): what ``decide_batch``
        does natively, for a batch in which a line raised. Returns the decisions, the conversations they changed,
        and per conversation with an input partition the handoffs their decisions touched (the lifecycle index)."""
        decisions = []
        changed: set[str] = set()
        hit: dict[str, set[str]] = {}
        held: set[str] = set()  # conversations with a held line in this batch: their later lines queue behind it
        for ln, prep in zip(lines, prepared, strict=True):
            if ln.conversation is not None and ln.conversation in held:
                decisions.append(_queued(ln.conversation, now))
                continue
            state = states.get(ln.conversation) if ln.conversation is not None else None
            if state is None:
                state = ConversationState()  # no conversation: decided without state, nothing to save
            d, touches = self._decide_guarded(ln, prep, state, states, overlay, now)
            if d.effects and ln.conversation is not None:
                changed.add(ln.conversation)
                if ln.partition is not None:
                    hit.setdefault(ln.conversation, set()).update(touches)
            if d.verdict is Verdict.HOLD and ln.conversation is not None:
                held.add(ln.conversation)
            decisions.append(d)
        return decisions, changed, hit

    def _decide_one(self, ln: Line, prep: Prepared, state: ConversationState, overlay: Overlay, now: float) -> Decision:
        return decide(
            ln.value,
            ln.conversation,
            state,
            overlay,
            self.route,
            now,
            first_seen=ln.first_seen,
            replay=ln.replay,
            prepared=prep,
            sender=ln.sender,
        )

    def _decide_guarded(
        self,
        ln: Line,
        prep: Prepared | Exception,
        state: ConversationState,
        states: dict[str, ConversationState],
        overlay: Overlay,
        now: float,
    ) -> tuple[Decision, set[str]]:
        """One line, with every step that could raise under a guard: deciding, applying, computing its index
        entries. On an error the conversation's state and the bindings go back to before the line, and the line
        gets the internal-error decision (applied: its tombstone). The conversation's state in ``states`` may be
        replaced by the rolled-back copy. Returns the decision and what applying it touched (``policy.apply``)."""
        conv = ln.conversation
        before = None
        checkpoint = overlay.checkpoint()
        try:
            if isinstance(prep, Exception):
                raise prep
            d = self._decide_one(ln, prep, state, overlay, now)
            touches: set[str] = set()
            if d.effects and conv is not None:
                before = state.copy()
                touches = apply(state, d, overlay)
                if ln.partition is not None:
                    index_of(state, conv, ln.partition, touches, self.route.readback_timeout_seconds)
            return d, touches
        except Exception as exc:
            if before is not None and conv is not None:
                state = states[conv] = before
            overlay.rollback(checkpoint)
            self._log_internal_error(ln, exc)
            d = internal_error(
                ln.value, state, self.route, now, exc, prep if isinstance(prep, Prepared) else None, ln.sender
            )
            return d, apply(state, d, overlay) if d.effects and conv is not None else set()

    def _log_internal_error(self, ln: Line, exc: Exception) -> None:
        log.error(
            "deciding a line raised: dead-lettered internal-error",
            exc_info=exc,
            extra={
                "route": self.route.name,
                "conversation": ln.conversation,
                "partition": ln.partition,
                "line": mask_line(ln.value[:512], self.route.profile.sensitive),
                "error": error_text(exc),
            },
        )

    async def _release_unused(self, claimed: list[BindingChange], current: Overlay) -> None:
        """A claim made in an earlier round that this round's decisions no longer hold is given back (and dropped
        from ``claimed``)."""
        unused = [c for c in claimed if c.after is not None and current.binding(c.key) != c.after]
        if unused:
            await self.store.claim([BindingChange(c.key, c.after, c.before) for c in unused])
            claimed[:] = [c for c in claimed if c not in unused]
