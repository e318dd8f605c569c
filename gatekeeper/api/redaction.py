"""What a gate answer shows of a line's problems, by the token's scopes.

A token holder gates its own agents' lines; it is not an operator. Left whole, a dry run would be an oracle: send an
HO with a guessed amount and read the approved one back (``record: amt mismatch: record 5400.00 vs HO 5400.01``),
or learn which conversation holds an approval (``record-used``: ``... bound to another handoff
(agents.pay/c-9/scheduler-1)``). So a gate answer (``POST /v1/gate``, dry run or not) shows every problem's
``code``, ``tier`` and ``slot`` and what the line itself carried (``got``), and only to a token with the
``operator`` scope:

- the record's values: a problem's ``expected`` drawn from the approved record (``record-missing``,
  ``record-mismatch``, ``resolved-mismatch``) or from its withheld criteria (``acc-gap``, ``acc-contradiction``),
  and the message quoting them;
- the holder of a binding: ``record-used``'s ``got`` (the route, conversation and id of the handoff that holds the
  approval, or the relay that spent it) and the message naming it.

Without the scope such a problem's message is rewritten from its code and slot, never from the withheld value. The
dead-letter topic's headers (read by operators) keep the full problems; sensitive values (``acct``...) are masked
there already (``gatekeeper.masking``), and stay masked for an operator too.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Final

#: The scope that sees the record's values and the holders of bindings in a gate answer.
OPERATOR: Final = "operator"

Template = Callable[[str, str, str], str]  # (tier, slot, got) -> the message without the withheld value

#: The codes whose ``expected`` (and message) carry a value of the approved record or of its withheld criteria.
RECORD_VALUE_CODES: Final[Mapping[str, Template]] = {
    "record-missing": lambda tier, slot, got: f"record: HO does not carry {slot}, which the record holds",
    "record-mismatch": lambda tier, slot, got: f"record: {slot} mismatch: HO {got} is not the record's value",
    "resolved-mismatch": lambda tier, slot, got: f"{tier}: {slot} mismatch: {got} is not the record's resolved value",
    "acc-gap": lambda tier, slot, got: f"tier4 comprehension: gap, receiver did not derive a criterion of {slot}",
    "acc-contradiction": lambda tier, slot, got: f"tier4 comprehension: contradiction on {slot}: receiver {got}",
}

#: The codes whose ``got`` (and message) name the handoff holding an approval.
BINDING_CODES: Final[Mapping[str, Template]] = {
    "record-used": lambda tier, slot, got: "record: the approval is bound to another handoff; one approval, one act",
}

WITHHELD_NOTE: Final = " (withheld: the operator scope shows it)"


def redact(problems: Iterable[Mapping[str, Any]], scopes: Collection[str]) -> list[dict[str, Any]]:
    """The problems (``Problem.to_dict()`` shapes: code, tier, slot, expected, got, message) as a token with
    ``scopes`` may see them: whole with ``operator``; else with the record's values and the binding's holder
    withheld (``expected``/``got`` None, the message rewritten). Pure: the input is not changed."""
    out: list[dict[str, Any]] = []
    whole = OPERATOR in scopes
    for p in problems:
        q = dict(p)
        if not whole:
            code = str(q.get("code") or "")
            tier, slot, got = str(q.get("tier") or "?"), str(q.get("slot") or "?"), str(q.get("got") or "?")
            if code in RECORD_VALUE_CODES:
                q["expected"] = None
                q["message"] = RECORD_VALUE_CODES[code](tier, slot, got) + WITHHELD_NOTE
            elif code in BINDING_CODES:
                q["expected"] = None
                q["got"] = None
                q["message"] = BINDING_CODES[code](tier, slot, got) + WITHHELD_NOTE
        out.append(q)
    return out


__all__ = ["BINDING_CODES", "OPERATOR", "RECORD_VALUE_CODES", "WITHHELD_NOTE", "redact"]
