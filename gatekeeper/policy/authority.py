"""Who may say what in a thread: one table, as data (the pattern of h11's state machine).

A line that replies (``re=``) names its target: a handoff, a readback, a question, a cancel. For each line type and
kind of target the table says which role the line's sender must hold in the target's thread, whom it must address,
what it does, and how it is refused when it comes from anyone else. ``policy.decide`` resolves the target and its
parties from the conversation's state, asks ``authorize``, and only then checks the content (the readback's values,
the done report against the plan...): no handler states who may send a line. A line refused here changes nothing in
the target's thread.

The table and its rule are the native engine's (``native/engine/src/authority.rs``); this module gives them their
Python names: the rows as data (``TABLE``, for the documentation and the tests).

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
from rwcore import _native


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


#: The table, as the native engine holds it. One row per line type and kind of target; a pair not listed has no rule
#: (an HO with no ``re=`` is a new handoff; an ST or an AN to a handoff changes no thread).
TABLE: tuple[Rule, ...] = tuple(
    Rule(
        line,
        Target(target),
        tuple(Permit(Role(s), Role(t), effect) for s, t, effect in permits),
        Refusal(Verdict(verdict), Reason(reason), code, alert),
    )
    for line, target, permits, (verdict, reason, code, alert) in _native.authority_table()
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
