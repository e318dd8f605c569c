"""A two-phase act tool for agent builders: prepare (state what will run), then commit (run exactly that).

The seed's ``examples/payment.py`` pattern as a reusable helper. The tool that acts is split in two:

- ``prepare(ho_line, resolve=...)`` resolves every value the act will use (the resolver may look values up, such as
  the account on file), freezes them under a token with an expiry, and returns the readback line that states them:
  ``RB`` with ``h=`` (the handoff's digest), ``exp=`` (the end of the statement's window) and the execution slots as
  they will be executed. Nothing has happened yet. The readback goes to the sender (through the gatekeeper, which
  checks it against the handoff and the approved record).
- ``commit(token, confirmed)`` runs the executor with the frozen values only, and only for a confirmed, unexpired
  token; it returns the done report ``DN`` built from what the executor says it executed (not from what was meant),
  so the done check compares the act with the plan.
- With the gatekeeper's public keys (``gatekeeper_keys=``), ``commit(token, True, clearance=Clearance.of(record))``
  acts only on the record the clearance arrived in from the route's output topic: its line must be the sender's
  ``AN val=Y`` to this statement's readback, and the record must carry the gatekeeper's valid signature
  (``gk.sig``, see ``gatekeeper.verdicts``) for this conversation and this line, with the verdict ``forward`` or
  ``alert``, given the first time the gatekeeper decided it (not a repeat), and naming the very statement this
  tool prepared: the digests of its readback line and of the handoff it answers. A clearance that did not pass
  through the gatekeeper (unsigned, signed by another key, signed for another conversation, route or line, a
  dry-run route's record), a re-produced one, or one that cleared another statement under the same ids (a tool
  restarted with its ids reused) raises ``ForgedClearance`` and nothing runs. A tool that moves money (or does
  anything irreversible) should always be given the keys: without them, any process that can produce to the
  output topic, or call ``commit``, can trigger the act.
- ``cancel(cx_line)`` abandons what was prepared for that handoff and answers the cancel with ``AN val=Y``. If the
  act already ran, it raises ``AlreadyExecuted`` carrying the done report: the truthful answer to a late cancel.

    from gatekeeper.twophase import Clearance, TwoPhaseTool

    def pay(values):                       # your bank call; return what was actually executed (or None: as frozen)
        receipt = bank.pay(**values)
        return {"amt": receipt.amount, "acct": receipt.account}

    tool = TwoPhaseTool("payer", pay, profile="pay", resolve=lambda ho: {"acct": accounts_on_file[ho.slots["sup"]]},
                        gatekeeper_keys={"gk-1": GATEKEEPER_PUBLIC_KEY}, route="agents.pay")
    statement = tool.prepare(ho_line, conversation=record.key.decode())  # send statement.line; keep statement.token
    ...                                    # the sender's AN val=Y to that RB arrives on the output topic, as `an`
    dn_line = tool.commit(statement.token, confirmed=True, clearance=Clearance.of(an))

Errors (``TwoPhaseError`` is their root)::

    TwoPhaseError
     ├── Refused           (also a ValueError) a line the tool does not take: not an HO/CX, not addressed to it,
     │                      invalid, or an execution value that cannot be stated
     ├── CommitRefused     (also a PermissionError) no confirmation, an unknown or spent token, or an expired one
     │    └── ForgedClearance   the clearance is not the gatekeeper's signed AN val=Y to this statement (the token
     │                          stays pending: the genuine clearance may still come)
     └── AlreadyExecuted   a cancel after the act ran; ``.done_report`` is the DN that was returned by commit

An executor that raises does not leave the token to be tried again (the act may have half run): ``commit`` returns a
failure report, ``FL ... why=ERR``, naming the exception's type (never its text, which may carry values).

The tool is safe to share between threads; it keeps its pending statements in memory (a process restart forgets
them, which is safe: an unknown token never commits).
"""

from __future__ import annotations

import contextlib
import math
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gatekeeper.policy.decide import line_digest  # a line's digest, as the gatekeeper's signature names it
from gatekeeper.policy.model import AFFIRMATIVE  # the affirmative answers of a clearance: the gatekeeper's own
from gatekeeper.verdicts import PublicKeyLike, SignatureError, Verifier
from rwcore import FormError, Message, Profile, encode_message, get_profile, make_readback, parse_line

#: What a resolver returns: the values the act will use, by slot (missing execution slots come from the handoff).
Resolver = Callable[[Message], Mapping[str, str]]
#: The executor: runs the act with the frozen values; returns what it executed (None: exactly the frozen values).
Executor = Callable[[Mapping[str, str]], Mapping[str, str] | None]

DEFAULT_TTL_SECONDS = 300.0


class TwoPhaseError(Exception):
    """The root of the tool's errors."""


class Refused(TwoPhaseError, ValueError):
    """A line the tool does not take (not an HO or CX, not addressed to this agent, invalid)."""


class CommitRefused(TwoPhaseError, PermissionError):
    """``commit`` without a confirmation, for an unknown or spent token, or after the statement expired."""


class ForgedClearance(CommitRefused):
    """The clearance given to ``commit`` is not the gatekeeper's signed ``AN val=Y`` to this statement: nothing runs,
    and the token stays pending."""


@dataclass(frozen=True, slots=True)
class Clearance:
    """The record a clearance arrived in, as consumed from the route's output topic: its value (the line) and its
    headers (with the gatekeeper's ``gk.sig``)."""

    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()

    @classmethod
    def of(cls, record: Any) -> Clearance:
        """From a consumed record (aiokafka's ``ConsumerRecord``, or anything with ``value`` and ``headers``)."""
        value = record.value
        if isinstance(value, str):
            value = value.encode("utf-8")
        headers = tuple((str(k), bytes(v) if v is not None else b"") for k, v in (record.headers or ()))
        return cls(bytes(value or b""), headers)

    @property
    def line(self) -> str:
        return self.value.decode("utf-8", errors="replace")


class AlreadyExecuted(TwoPhaseError):
    """A cancel arrived after the act ran: answer with the done report instead."""

    def __init__(self, message: str, done_report: str) -> None:
        super().__init__(message)
        self.done_report = done_report


def _rw_time(epoch: float) -> str:
    return time.strftime("%Y%m%dT%H%MZ", time.gmtime(epoch))


def _epoch(rw: str) -> float:
    import calendar

    return float(calendar.timegm(time.strptime(rw, "%Y%m%dT%H%MZ")))


def _show(v: object) -> str:
    if isinstance(v, tuple | list):
        return "+".join(str(x) for x in v)
    return str(v)


@dataclass(frozen=True, slots=True)
class Statement:
    """What ``prepare`` froze: the token, the readback line that states it, and the values."""

    token: str
    line: str  # the RB: send it to the handoff's sender
    exp: str  # YYYYMMDDTHHMMZ, UTC: the token cannot be committed at or after this minute
    values: Mapping[str, str]  # the frozen execution values
    handoff: str  # the HO's id
    conversation: str | None = None
    ho: Message | None = field(default=None, repr=False, compare=False)
    ho_digest: str = ""  # ``policy.line_digest`` of the handoff's line, as prepare was given it


class TwoPhaseTool:
    """A two-phase act tool for the agent ``agent``: see the module docstring.

    ``profile`` is the route's profile (a name or a ``Profile``); ``resolve`` the default resolver (``prepare`` may
    give its own); ``ttl_seconds`` how long a statement stays committable (never past the handoff's own ``exp=``);
    ``next_id`` makes the tool's message ids (default ``<agent>-<n>`` with ``n`` the microseconds since the epoch
    at the first id, then one more each time, never behind the clock: a restarted tool never reuses an id of the
    run before it; give your agent's own counter if it writes other lines too); ``clock`` and ``token`` are for
    tests.

    ``gatekeeper_keys`` (the gatekeeper's Ed25519 public keys by key id, or a ``verdicts.Verifier``) makes ``commit``
    require the gatekeeper's signed clearance (see the module docstring); ``route`` (the route's input topic) binds
    it to one route (None: the route the record names, which the signature covers). With keys, ``prepare`` needs the
    ``conversation`` (a signature is for one conversation); a clearance is taken only for the statement it names
    (the digests of the readback and its handoff), never for a readback id alone.
    """

    def __init__(
        self,
        agent: str,
        execute: Executor,
        *,
        profile: str | Profile = "pay",
        resolve: Resolver | None = None,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        next_id: Callable[[], str] | None = None,
        clock: Callable[[], float] = time.time,
        token: Callable[[], str] | None = None,
        gatekeeper_keys: Mapping[str, PublicKeyLike] | Verifier | None = None,
        route: str | None = None,
    ) -> None:
        if ttl_seconds < 60:
            raise ValueError("ttl_seconds: at least 60 (exp= has a resolution of one minute)")
        self.agent = agent
        self.profile = profile if isinstance(profile, Profile) else get_profile(profile)
        self._execute = execute
        self._resolve = resolve
        self._ttl = ttl_seconds
        self._clock = clock
        self._next_id = next_id if next_id is not None else _ClockIds(agent, clock)
        self._token = token if token is not None else (lambda: secrets.token_hex(8))
        self._lock = threading.Lock()
        self._pending: dict[str, Statement] = {}
        self._done: dict[tuple[str | None, str], str] = {}  # (conversation, HO id) -> the DN commit returned
        self._verifier: Verifier | None = (
            gatekeeper_keys
            if isinstance(gatekeeper_keys, Verifier) or gatekeeper_keys is None
            else Verifier(gatekeeper_keys)
        )
        self._route = route

    # ------------------------------------------------------------ phase 1

    def prepare(self, ho_line: str, resolve: Resolver | None = None, *, conversation: str | None = None) -> Statement:
        """Resolve the values the act will use, freeze them under a new token and return the statement (its
        ``line`` is the RB to send). ``conversation`` scopes the handoff id (ids are unique per conversation)."""
        ho = self._parse(ho_line, "HO")
        if ho.to != self.agent:
            raise Refused(f"refused: {ho.id} is addressed to {ho.to}, not {self.agent}")
        if self._verifier is not None and conversation is None:
            raise Refused(f"refused: {ho.id}: a tool with the gatekeeper's keys needs the conversation to prepare")
        ask = str(ho.slots.get("ask"))
        exec_slots = self.profile.exec_slots(ask)
        resolver = resolve if resolve is not None else self._resolve
        resolved = dict(resolver(ho)) if resolver is not None else {}
        values: dict[str, str] = {}
        for k in exec_slots:
            if k in resolved:
                values[k] = str(resolved[k])
            elif k in ho.slots:
                values[k] = _show(ho.slots[k])
        values.update({k: str(v) for k, v in resolved.items() if k not in values})
        missing = [k for k in exec_slots if k not in values and _asks_exec(ho)]
        if missing:
            raise Refused(f"refused: cannot state {'+'.join(missing)} for {ho.id} (neither the HO nor the resolver)")
        exp = self._expiry(ho)
        rb_id = self._next_id()
        try:
            base = make_readback(ho, rb_id, self.profile)
            slots: dict[str, Any] = dict(base.slots)
            slots.update(values)
            slots["exp"] = exp
            rb = Message(
                v=base.v, type="RB", id=rb_id, from_=self.agent, to=ho.from_, re=ho.id, item=ho.item, slots=slots
            )
            line = encode_message(rb, self.profile)
        except FormError as exc:
            raise Refused(f"refused: the statement for {ho.id} would not be a valid line: {exc}") from None
        statement = Statement(
            token=self._token(),
            line=line,
            exp=exp,
            values=MappingProxyType(dict(values)),
            handoff=ho.id,
            conversation=conversation,
            ho=ho,
            ho_digest=line_digest(ho_line.encode("utf-8")),
        )
        with self._lock:
            self._pending[statement.token] = statement
        return statement

    def _expiry(self, ho: Message) -> str:
        deadline = math.floor((self._clock() + self._ttl) / 60) * 60
        ho_exp = ho.slots.get("exp")
        if isinstance(ho_exp, str) and len(ho_exp) == 14:
            with contextlib.suppress(ValueError):
                deadline = min(deadline, int(_epoch(ho_exp)))
        return _rw_time(deadline)

    # ------------------------------------------------------------ phase 2

    def commit(self, token: str, confirmed: bool, *, clearance: Clearance | None = None) -> str:
        """Execute the frozen values of ``token``, only when ``confirmed`` and not expired; return the done report
        (DN) of what the executor executed, or a failure report (FL why=ERR) when it raised. The token is spent
        either way. Raises ``CommitRefused`` (nothing runs) otherwise.

        ``clearance``: the record the sender's ``AN val=Y`` arrived in. Required with ``gatekeeper_keys``: then its
        signature is verified, and ``ForgedClearance`` (nothing runs, the token stays pending) is raised for one that
        is not the gatekeeper's clearance of this statement. Without keys, a clearance given is checked as a line
        only (the ``AN val=Y`` to this statement's readback, from the handoff's sender)."""
        if not confirmed:
            raise CommitRefused("no confirmation for this token: nothing is executed")
        with self._lock:
            pending = self._pending.get(token)
        if pending is None:
            raise CommitRefused("unknown or spent token: nothing is executed (prepare again)")
        if self._verifier is not None or clearance is not None:
            self._check_clearance(pending, clearance)
        with self._lock:
            statement = self._pending.pop(token, None)
        if statement is None:
            raise CommitRefused("unknown or spent token: nothing is executed (prepare again)")
        if self._clock() >= _epoch(statement.exp):
            raise CommitRefused(f"the statement expired at {statement.exp} before it was confirmed: prepare again")
        ho = statement.ho
        assert ho is not None
        try:
            executed = self._execute(statement.values)
        except Exception as exc:
            return self._line(
                "FL",
                ho,
                {"why": "ERR"},
                tail=f"the executor raised {type(exc).__name__}; check the act before retrying",
            )
        done: dict[str, str] = dict(statement.values)
        if executed is not None:
            done.update({k: str(v) for k, v in executed.items()})
        line = self._line("DN", ho, {"out": "OK", **done})
        with self._lock:
            self._done[(statement.conversation, statement.handoff)] = line
        return line

    def _check_clearance(self, statement: Statement, clearance: Clearance | None) -> None:
        """Raise ``ForgedClearance`` unless ``clearance`` clears ``statement`` (see ``commit``)."""
        rb_id = statement.line.split(" ", 3)[2]
        if clearance is None:
            raise ForgedClearance(
                f"no clearance: this tool acts only on the gatekeeper's signed AN val=Y to {rb_id}; nothing is executed"
            )
        ho = statement.ho
        assert ho is not None
        parsed = parse_line(clearance.line, self.profile)
        an = parsed.message
        if an is None or an.type != "AN":
            raise ForgedClearance("the clearance is not an AN line: nothing is executed")
        if str(an.slots.get("val")) not in AFFIRMATIVE:
            raise ForgedClearance(
                f"the clearance {an.id} answers val={an.slots.get('val')}, not Y: nothing is executed"
            )
        if an.re != rb_id or an.from_ != ho.from_ or an.to != self.agent:
            raise ForgedClearance(
                f"the clearance {an.id} (re={an.re} from={an.from_} to={an.to}) is not {ho.from_}'s answer to {rb_id} "
                f"for {self.agent}: nothing is executed"
            )
        if self._verifier is None:
            return
        if statement.conversation is None:
            raise ForgedClearance("the statement has no conversation: a signed clearance cannot be checked")
        try:
            sig = self._verifier.verify_record(
                clearance.headers, clearance.value, conversation=statement.conversation, route=self._route
            )
        except SignatureError as exc:
            raise ForgedClearance(
                f"the clearance {an.id} is not the gatekeeper's: {exc}; nothing is executed"
            ) from None
        if sig.repeat:
            raise ForgedClearance(
                f"the clearance {an.id} is a repeat (the gatekeeper's stored decision, returned for a line it had "
                "already decided): only its first decision clears an act; nothing is executed"
            )
        mine = (line_digest(statement.line.encode("utf-8")), statement.ho_digest)
        if sig.clears != mine:
            raise ForgedClearance(
                f"the clearance {an.id} cleared another statement than this tool's {rb_id} for {statement.handoff} "
                "(the gatekeeper signed the digests of the readback and the handoff it cleared): nothing is executed"
            )

    # ------------------------------------------------------------ cancel

    def cancel(self, cx_line: str, *, conversation: str | None = None) -> str:
        """Abandon every statement prepared for the handoff ``cx_line`` cancels, and return the ``AN val=Y`` that
        acknowledges it. Raises ``AlreadyExecuted`` (with the done report) when the act already ran."""
        cx = self._parse(cx_line, "CX")
        if cx.to != self.agent:
            raise Refused(f"refused: {cx.id} is addressed to {cx.to}, not {self.agent}")
        handoff = cx.re or ""
        with self._lock:
            done = self._done.get((conversation, handoff))
            doomed = [t for t, s in self._pending.items() if s.handoff == handoff and s.conversation == conversation]
            for t in doomed:
                del self._pending[t]
        if done is not None:
            raise AlreadyExecuted(f"{handoff} was already executed: answer the cancel with the done report", done)
        tail = "statement abandoned; nothing executed" if doomed else "nothing was prepared; nothing executed"
        an = Message(
            v="RW1",
            type="AN",
            id=self._next_id(),
            from_=self.agent,
            to=cx.from_,
            re=cx.id,
            slots=self._p({"val": "Y"}),
            tail=tail,
        )
        return encode_message(an, self.profile)

    def pending(self) -> list[Statement]:
        """The statements prepared and not yet committed or abandoned."""
        with self._lock:
            return list(self._pending.values())

    # ------------------------------------------------------------ helpers

    def _p(self, slots: dict[str, Any]) -> dict[str, Any]:
        return slots if self.profile.is_core else {"p": self.profile.name, **slots}

    def _parse(self, line: str, want: str) -> Message:
        parsed = parse_line(line, self.profile)
        if parsed.message is None:
            reasons = "; ".join(e.message for e in parsed.errors) or "not a valid line"
            raise Refused(f"refused: {reasons}")
        if parsed.message.type != want:
            raise Refused(f"refused: expected a {want} line, got {parsed.message.type}")
        return parsed.message

    def _line(self, type_: str, ho: Message, slots: dict[str, Any], tail: str | None = None) -> str:
        msg = Message(
            v="RW1",
            type=type_,
            id=self._next_id(),
            from_=self.agent,
            to=ho.from_,
            re=ho.id,
            item=ho.item,
            slots=self._p(slots),
            tail=tail,
        )
        return encode_message(msg, self.profile)


class _ClockIds:
    """The default message ids: ``<agent>-<n>``, ``n`` the microseconds since the epoch at the first id, then one
    more each time and never behind the clock. A tool restarted later starts past every id of the run before it
    (unless that run made more than a million ids a second), so its readbacks never meet ``duplicate-id``."""

    def __init__(self, agent: str, clock: Callable[[], float]) -> None:
        self._agent = agent
        self._clock = clock
        self._last = 0
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            self._last = max(self._last + 1, int(self._clock() * 1_000_000))
            return f"{self._agent}-{self._last}"


def _asks_exec(ho: Message) -> bool:
    rb = ho.slots.get("rb") or ()
    levels = rb if isinstance(rb, tuple) else (rb,)
    return any(str(x).lower() == "exec" for x in levels)


__all__ = [
    "AFFIRMATIVE",
    "DEFAULT_TTL_SECONDS",
    "AlreadyExecuted",
    "Clearance",
    "CommitRefused",
    "Executor",
    "ForgedClearance",
    "Refused",
    "Resolver",
    "Statement",
    "TwoPhaseError",
    "TwoPhaseTool",
]
