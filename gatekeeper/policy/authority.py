"""Who may say what in a thread: one table, as data (the pattern of h11's state machine).

A line that replies (``re=``) names its target: a handoff, a readback, a question, a cancel. For each line type and
kind of target the table says which role the line's sender must hold in the target's thread, whom it must address,
what it does, and how it is refused when it comes from anyone else. ``policy.decide`` resolves the target and its
parties from the conversation's state, asks ``authorize``, and only then checks the content (the readback's values,
the done report against the plan...): no handler states who may send a line. A line refused here changes nothing in
the target's thread.

The roles, resolved from the target:

- a handoff's **sender** and **receiver** (``from=`` and ``to=`` of the HO; for a readback or a cancel, of the
  handoff it reads back or cancels);
- a question's **asker** and the one **asked** (``from=`` and ``to=`` of the AQ);
- a **party** of a handoff (its sender or its receiver); **human** (``to=human``); **anyone**.

The documentation's verdict page (docs/verdicts.md) shows these rows (``markdown_rows``; a test holds the two equal,
and the site's build renders them from here).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from gatekeeper.policy.model import Reason, Verdict


class Role(enum.StrEnum):
    ANYONE = "anyone"
    SENDER = "the handoff's sender"
    RECEIVER = "the handoff's receiver"
    PARTY = "a party of the handoff"
    ASKER = "the asker"
    ASKED = "the one asked"
    HUMAN = "human"


class Target(enum.StrEnum):
    HANDOFF = "a handoff"
    READBACK = "a readback"
    QUESTION = "a question"
    CANCEL = "a cancel"


@dataclass(frozen=True, slots=True)
class Permit:
    """A sender and an addressee the line may have, and what the line does then."""

    sender: Role
    to: Role
    effect: str


@dataclass(frozen=True, slots=True)
class Refusal:
    """What happens to a line from anyone the rule does not permit: its verdict, reason and problem code. An alert
    (a done report) is still delivered, flagged, and changes nothing in the thread."""

    verdict: Verdict
    reason: Reason
    code: str
    alert: bool = False  # a dead letter that is alerted as well


@dataclass(frozen=True, slots=True)
class Rule:
    line: str
    target: Target
    permits: tuple[Permit, ...]
    refusal: Refusal

    def permit(self, sender: str, to: str, parties: Mapping[Role, str]) -> Permit | None:
        """The first permit the line's ``from=`` and ``to=`` satisfy, given the target's parties."""
        for p in self.permits:
            if _holds(p.sender, sender, parties) and _holds(p.to, to, parties):
                return p
        return None

    def expected(self, parties: Mapping[Role, str]) -> str:
        """Who may send it, as a problem's ``expected`` says it (``payer->scheduler``, ``payer|scheduler->*``)."""
        return " or ".join(f"{_who(p.sender, parties)}->{_who(p.to, parties)}" for p in self.permits)


def _holds(role: Role, agent: str, parties: Mapping[Role, str]) -> bool:
    if role is Role.ANYONE:
        return True
    if role is Role.HUMAN:
        return agent == "human"
    if role is Role.PARTY:
        return agent in (parties.get(Role.SENDER), parties.get(Role.RECEIVER))
    return parties.get(role) == agent


def _who(role: Role, parties: Mapping[Role, str]) -> str:
    if role is Role.ANYONE:
        return "*"
    if role is Role.HUMAN:
        return "human"
    if role is Role.PARTY:
        return f"{parties.get(Role.SENDER)}|{parties.get(Role.RECEIVER)}"
    return parties.get(role, "?")


_WRONG_CLOSE = Refusal(Verdict.DEAD_LETTER, Reason.CHECK_THREAD, "thread-close-wrong-agent")

#: The table. One row per line type and kind of target; a pair not listed has no rule here (an HO with no ``re=``
#: is a new handoff; an ST or an AN to a handoff changes no thread).
TABLE: tuple[Rule, ...] = (
    Rule(
        "HO",
        Target.HANDOFF,
        (
            Permit(Role.SENDER, Role.ANYONE, "a re-issue (its item and ask): replaces the handoff (superseded)"),
            Permit(
                Role.RECEIVER,
                Role.ANYONE,
                "a relay: carries the handoff's slots unchanged (they stand as its record), once, after the "
                "handoff's readback passed (and was cleared, for an exec ask)",
            ),
        ),
        Refusal(Verdict.DEAD_LETTER, Reason.CHECK_THREAD, "thread-reissue-wrong-agent"),
    ),
    Rule(
        "RB",
        Target.HANDOFF,
        (Permit(Role.RECEIVER, Role.SENDER, "reads the handoff back: its plan when it passes"),),
        Refusal(Verdict.DEAD_LETTER, Reason.CHECK_RB, "receipt-route"),
    ),
    Rule(
        "AN",
        Target.READBACK,
        (Permit(Role.SENDER, Role.RECEIVER, "clears the act (affirmative) or refuses the readback (negative)"),),
        Refusal(Verdict.DEAD_LETTER, Reason.CLEARANCE, "clearance-route"),
    ),
    Rule(
        "AN",
        Target.CANCEL,
        (Permit(Role.RECEIVER, Role.SENDER, "acknowledges the cancel (val=Y): closes the handoff, frees its record"),),
        Refusal(Verdict.DEAD_LETTER, Reason.CHECK_THREAD, "thread-ack-wrong-agent"),
    ),
    Rule(
        "AN",
        Target.QUESTION,
        (Permit(Role.ASKED, Role.ASKER, "answers the question, once, within its need and opts"),),
        Refusal(Verdict.DEAD_LETTER, Reason.CHECK_THREAD, "thread-answer-wrong-agent"),
    ),
    Rule(
        "DN",
        Target.HANDOFF,
        (Permit(Role.RECEIVER, Role.SENDER, "reports the act: closes the handoff"),),
        Refusal(Verdict.ALERT, Reason.CHECK_DN, "thread-done-wrong-agent"),
    ),
    Rule(
        "UN",
        Target.HANDOFF,
        (Permit(Role.RECEIVER, Role.SENDER, "refuses the handoff: closes it, frees its record"),),
        _WRONG_CLOSE,
    ),
    Rule(
        "UN",
        Target.QUESTION,
        (Permit(Role.ASKED, Role.ASKER, "refuses the question: answers it"),),
        Refusal(Verdict.DEAD_LETTER, Reason.CHECK_THREAD, "thread-answer-wrong-agent"),
    ),
    Rule(
        "FL",
        Target.HANDOFF,
        (Permit(Role.RECEIVER, Role.SENDER, "reports the act failed: closes the handoff, frees its record"),),
        _WRONG_CLOSE,
    ),
    Rule(
        "CX",
        Target.HANDOFF,
        (Permit(Role.SENDER, Role.RECEIVER, "withdraws the handoff (closed once its receiver acknowledges)"),),
        Refusal(Verdict.DEAD_LETTER, Reason.CHECK_THREAD, "thread-cancel-wrong-agent", alert=True),
    ),
    Rule(
        "AQ",
        Target.HANDOFF,
        (
            Permit(Role.PARTY, Role.ANYONE, "asks about the handoff"),
            Permit(Role.ANYONE, Role.HUMAN, "escalates the handoff to a human"),
        ),
        Refusal(Verdict.DEAD_LETTER, Reason.CHECK_THREAD, "thread-question-wrong-agent"),
    ),
)

RULES: Mapping[tuple[str, Target], Rule] = {(r.line, r.target): r for r in TABLE}


def rule(line: str, target: Target) -> Rule | None:
    """The rule of a line type replying to a kind of target (None: no rule: nobody's role is checked)."""
    return RULES.get((line, target))


def markdown_rows() -> list[str]:
    """The table as docs/verdicts.md shows it: one row per rule."""
    rows = []
    for r in TABLE:
        allowed = "; ".join(f"from {p.sender} to {p.to}: {p.effect}" for p in r.permits)
        refused = f"{r.refusal.verdict.value} `{r.refusal.reason.value}` (`{r.refusal.code}`)"
        if r.refusal.verdict is Verdict.ALERT:
            refused = f"forward, flagged, alert `{r.refusal.reason.value}` (`{r.refusal.code}`), closes nothing"
        elif r.refusal.alert:
            refused += ", and alerted"
        rows.append(f"| {r.line} | `re=` {r.target} | {allowed} | {refused} |")
    return rows


__all__ = ["RULES", "TABLE", "Permit", "Refusal", "Role", "Rule", "Target", "markdown_rows", "rule"]
