"""Refusal notices: the gatekeeper tells the sender of a line it dead-lettered, in the protocol's own words.

A dead-lettered line goes to the route's dead-letter topic, which agents cannot read. Without a word back, its
sender waits for a timeout: a handoff it believes delivered, a readback it believes on its way. So for every
dead-lettered line whose sender is known (below), the gatekeeper also writes to the route's **output** topic, keyed
by the conversation, the line the sender's model already understands: the protocol's refusal, a ``UN`` (one line,
folded here)::

    RW1 UN payer-984992799 re=scheduler-7 from=payer to=scheduler item=inv:MD-2026-057 why=PERM p=pay
      // check-ho: record: amt mismatch: record 5400.00 vs HO 5400.01 (refused by the gatekeeper, not delivered)

- ``re=`` the refused line's id; ``from=`` the refused line's addressee (its ``to=``) and ``to=`` its sender: the
  gatekeeper speaks in the addressee's name, as its cancels (``policy.lifecycle``) speak in the sender's, so the
  line is a well-formed answer to the refused one; ``item=`` the refused line's item, when it has one;
- ``why=`` from the reason's row of ``RULES`` (below); ``p=`` the route's profile (none on a core-vocabulary route);
- the tail: the reason code, a short explanation (the first problem's message, or the row's words), sensitive values
  masked (``gatekeeper.masking``), printable ASCII only, and that the gatekeeper refused it and nothing was
  delivered; within the profile's tail length and the route's ``max_line_bytes`` (the line passes the gate's input
  rules, ``policy.gate.screen``).

**Unmistakably the gatekeeper's.** Its id is ``<addressee>-<n>`` with ``n`` in the gatekeeper's reserved range
(``RESERVED_ID_MIN``-``RESERVED_ID_MAX``: an agent's line with such an id is dead-lettered ``reserved-id``), in the
part its cancels never use (``NOTICE_ID_MIN`` on; a cancel's number is ``RESERVED_ID_MIN`` plus a line number, at
most ``CANCEL_ID_MAX``). On the output topic it carries ``gk.author: gatekeeper`` and, with signing configured, the
gatekeeper's ``gk.sig`` with the verdict ``notice``, which is never a clearance (``verdicts.CLEARANCE_VERDICTS``).

**Deterministic.** ``n`` is ``NOTICE_ID_MIN`` plus a SHA-256 of the refused line's bytes and of the notice's own
words (reason, why, profile, tail), modulo the 50,000,000 numbers of the notices' part: a redelivered line, decided
to its stored first decision, gets the byte-identical notice; a line decided again differently (its state expired)
gets another id rather than a second meaning for one. Two different notices of one conversation from the same
addressee share an id with a chance of one in 50 million per pair; the clock is never involved.

**Sender known** (``engine::notices::told``), thinking of an agent that would use the gatekeeper to talk to another:

- the line parses under the route's profile (a line that does not parse has no sender: no notice); its id is not
  in the gatekeeper's range (a notice is never written about a notice, or about a cancel copied back);
- on a route with ``sender_auth``, only when the line's signature proves its ``from=`` (``SenderProof.agent``): a
  line refused ``sender-auth`` never gets one, or anyone could make the gatekeeper write to any agent in the name of
  any other;
- on other routes the parsed ``from=``: there, ``from=`` is what any agent on the input may write, and the notice
  gives a forger nothing it lacks: it could send the same ``UN`` in the addressee's name and have it forwarded. The
  notice names only the refused line, which nobody received, and it is never written where its ``re=`` would name
  another line (``duplicate-id``), so it cannot close a live handoff;
- a ``from=`` outside the route's ``senders`` gets none: nobody on the route to tell.

**A refused handoff is thereby closed for its sender**: a ``UN`` from the receiver is one of the ways a handoff
closes (specification 5.4), and the handoff was never delivered. Its sender re-issues it under a new id if it
still wants it done.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import msgspec

from gatekeeper.policy import Decision, Reason, RoutePolicy, SenderProof, Verdict, prepare
from gatekeeper.policy.decide import native_route
from rwcore import Message, _native
from rwcore._codec import _switch as profile_switch

#: ``gk.author`` of the gatekeeper's own lines.
AUTHOR = "gatekeeper"
#: What the tail says after the explanation: whoever reads only the line knows it is not the addressee's word.
REFUSED_BY: str = _native.REFUSED_BY
#: How many numbers the notices' part of the gatekeeper's range holds (from ``policy.lifecycle.NOTICE_ID_MIN`` to
#: ``RESERVED_ID_MAX``).
NOTICE_SPAN: int = _native.NOTICE_SPAN


@dataclass(frozen=True, slots=True)
class Rule:
    """What a notice says for one dead-letter reason: its ``why`` (None: no notice for this reason, ``says`` tells
    why not), the words of its tail when the line's own problem is not quoted, and whether it is."""

    why: str | None
    says: str
    quote: bool = True


#: Each dead-letter reason's refusal, as data in one place (docs/notices.md's table is held equal to it by a test).
RULES: Mapping[Reason, Rule] = MappingProxyType(
    {
        Reason.INVALID: Rule("UNK", "the line breaks the form or the gate's input rules"),
        Reason.NO_CONVERSATION: Rule(None, "the record names no conversation to key one by"),
        Reason.SENDER_BINDING: Rule(None, "its from= is not a sender of the route, nobody there to tell"),
        Reason.SENDER_AUTH: Rule(None, "its from= is not proven, the notice would go to whoever it names"),
        Reason.RESERVED_ID: Rule(None, "the id is in the gatekeeper's range, never a notice about one"),
        Reason.DUPLICATE_ID: Rule(None, "its re= would name the first line, which holds the id"),
        Reason.REFUSED_HANDOFF: Rule("NOCTX", "it answers a line that was refused"),
        Reason.EXPIRED: Rule("EXPIRED", "the handoff's exp= had passed"),
        Reason.NO_RECORD: Rule("PERM", "no approved record allows this handoff"),
        Reason.CHECK_HO: Rule("PERM", "the handoff differs from its approved record"),
        Reason.RECORD_USED: Rule("CONFLICT", "its approval is held by another handoff, or spent"),
        Reason.UNKNOWN_HANDOFF: Rule("NOCTX", "it answers a handoff this conversation does not know"),
        Reason.CHECK_RB: Rule("PERM", "the readback does not match its handoff"),
        Reason.CLEARANCE: Rule("PERM", "this answer may not clear that readback"),
        Reason.CHECK_DN: Rule("PERM", "the done report does not match the plan"),
        Reason.CHECK_THREAD: Rule("PERM", "the thread's rules do not allow this line here"),
        Reason.TRANSLATION: Rule("NOCTX", "the line lacks what the profile's translation rules require"),
        Reason.INTERNAL_ERROR: Rule("ERR", "the gatekeeper failed deciding it (its error, not the line's)", False),
        Reason.AWAITING_HANDOFF: Rule(None, "a held line is never dead-lettered"),
    }
)


class Notice(msgspec.Struct, frozen=True, gc=False):
    """A refusal notice: its ``line``, its ``id``, the refused line's id (``re``), the agent told (``to``: the refused
    line's sender) and the one it speaks for (``addressee``: the refused line's ``to=``), its ``why`` and the
    dead-letter ``reason``."""

    line: str
    id: str
    re: str
    to: str
    addressee: str
    why: str
    reason: str


def rules_table() -> list[str]:
    """``RULES`` as docs/notices.md's table (Markdown rows, header first): the page holds exactly these lines."""
    rows = ["| reason | `why=` | the tail explains it with (no notice: why not) |", "|---|---|---|"]
    for reason, rule in RULES.items():
        why = "no notice" if rule.why is None else f"`{rule.why}`"
        words = rule.says if rule.why is None or not rule.quote else f"the line's first problem; else: {rule.says}"
        rows.append(f"| `{reason.value}` | {why} | {words} |")
    return rows


def why_of(reason: Reason | None) -> str | None:
    """The ``why=`` of a notice for a line dead-lettered for ``reason``; None: no notice for it."""
    rule = RULES.get(reason) if reason is not None else None
    return None if rule is None else rule.why


def refused_line(decision: Decision, raw: bytes, route: RoutePolicy) -> Message | None:
    """The refused line as parsed: the decision's message, or, for a line refused ``invalid`` by a rule after the
    parser (another profile's ``p=``, a date that never comes), the line parsed again; None when it does not parse."""
    if decision.message is not None:
        return decision.message
    if decision.reason is not Reason.INVALID:
        return None
    parsed = prepare(raw, route).parsed
    if parsed is None or parsed.errors or parsed.message is None:
        return None
    return parsed.message


def refusal_notice(decision: Decision, raw: bytes, route: RoutePolicy, proof: SenderProof | None) -> Notice | None:
    """The notice to the sender of a dead-lettered line, or None when there is none to write (see the module
    docstring). Pure: a function of the decision, the line's bytes, the route and the signature's proof. The line is
    written natively (``engine::notices``: whether its sender is told, the masked and printable explanation, the
    tail cut to the room the route's limits leave, the id), from the refused line's parsed twin."""
    if decision.verdict is not Verdict.DEAD_LETTER:
        return None
    reason = decision.reason
    rule = RULES.get(reason) if reason is not None else None
    if reason is None or rule is None or rule.why is None:
        return None
    msg = refused_line(decision, raw, route)
    if msg is None:
        return None
    made = _native.refusal_notice(
        native_route(route),
        msg,
        raw,
        decision.problems,
        reason.value,
        (rule.why, rule.says, rule.quote),
        route.profile.sensitive,
        None if proof is None else proof.agent,
        profile_switch(route.profile),
    )
    if made is None:
        return None
    line, nid, re, to, addressee = made
    return Notice(line, nid, re, to, addressee, rule.why, reason.value)


__all__ = [
    "AUTHOR",
    "NOTICE_SPAN",
    "REFUSED_BY",
    "RULES",
    "Notice",
    "Rule",
    "refusal_notice",
    "refused_line",
    "rules_table",
    "why_of",
]
