"""``gatekeeper.api.redaction.redact``: a gate answer's problems without the record's values and a binding's holder,
unless the token has the operator scope. The problems are the daemon's own (``tests.policy.world``), masked as the
outcome's headers mask them."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from gatekeeper.api.auth import TokenBook, hash_token
from gatekeeper.api.redaction import BINDING_CODES, OPERATOR, RECORD_VALUE_CODES, redact
from gatekeeper.config import ApiToken
from gatekeeper.masking import masker_for
from gatekeeper.policy import Reason, Record
from rwcore import CHECK_CODES, Problem
from tests.policy.world import HO, RB, RECORD, pay_world

NOBODY: frozenset[str] = frozenset()
OPERATORS = frozenset({OPERATOR})


def problems_of(line: str, *before: tuple[str, str], conversation: str = "c1", record: Record = RECORD) -> list[Any]:
    """The problems the daemon decides for ``line`` (after ``before``: (conversation, line)), as ``gk.problems``
    carries them."""
    w = pay_world()
    w.add(record)
    for conv, text in before:
        assert w.send(text, conv).forwarded, text
    d = w.send(line, conversation)
    assert d.problems, d
    masker = masker_for(line.encode(), d.problems, ())
    return list(orjson.loads(orjson.dumps([p.to_dict() for p in masker.problems(d.problems)])))


def test_a_record_mismatch_keeps_its_code_slot_and_the_line_s_value_and_withholds_the_record_s() -> None:
    bad = HO.replace("amt=5400.00", "amt=5400.01").replace("to=payer", "to=auditor")
    problems = problems_of(bad)
    assert {p["code"] for p in problems} == {"record-mismatch"}
    assert "5400.00" in orjson.dumps(problems).decode() and '"payer"' in orjson.dumps(problems).decode()
    seen = redact(problems, NOBODY)
    text = orjson.dumps(seen).decode()
    assert "5400.00" not in text and '"payer"' not in text and "record payer" not in text
    by_slot = {p["slot"]: p for p in seen}
    assert set(by_slot) == {"amt", "to"}
    assert by_slot["amt"]["got"] == "5400.01" and by_slot["to"]["got"] == "auditor"
    assert all(p["expected"] is None and p["code"] == "record-mismatch" and p["tier"] == "record" for p in seen)
    assert "amt mismatch" in by_slot["amt"]["message"] and "operator" in by_slot["amt"]["message"]
    assert redact(problems, OPERATORS) == problems  # the operator sees them whole


def test_a_missing_slot_withholds_the_record_s_value() -> None:
    bad = HO.replace(" apref=FD-0929", "")
    (p,) = problems_of(bad)
    assert (p["code"], p["expected"]) == ("record-missing", "FD-0929")
    (q,) = redact([p], NOBODY)
    assert (q["code"], q["slot"], q["expected"]) == ("record-missing", "apref", None)
    assert "FD-0929" not in orjson.dumps(q).decode() and "apref" in q["message"]


def test_record_used_withholds_the_holder() -> None:
    problems = problems_of(HO, ("c-holder", HO), conversation="c2")
    (p,) = problems
    assert (p["code"], p["got"]) == (Reason.RECORD_USED.value, "agents.pay/c-holder/scheduler-1")
    assert "c-holder" in p["message"]
    (q,) = redact(problems, NOBODY)
    assert (q["code"], q["tier"], q["slot"], q["expected"], q["got"]) == ("record-used", "record", "item", None, None)
    assert "c-holder" not in orjson.dumps(q).decode() and "agents.pay/" not in q["message"]
    assert redact(problems, OPERATORS) == problems


def test_a_resolved_value_and_withheld_criteria_are_withheld() -> None:
    # the shapes the policy (resolved-mismatch) and rwcore's comprehension tier (acc-*) give them
    problems = [
        Problem("resolved-mismatch", "tier5 execution: prev mismatch: record 4455 vs RB 4466", "resolved", "prev",
                "4455", "4466").to_dict(),
        Problem("acc-gap", "tier4 comprehension: gap, receiver did not derive len:120w", "comprehension", "len",
                "120w").to_dict(),
        Problem("acc-contradiction", "tier4 comprehension: contradiction on tone: sender formal vs receiver casual",
                "comprehension", "tone", "formal", "casual").to_dict(),
    ]  # fmt: skip
    seen = redact(problems, NOBODY)
    text = orjson.dumps(seen).decode()
    for secret in ("4455", "120w", "formal"):
        assert secret not in text
    assert [(p["code"], p["slot"], p["got"]) for p in seen] == [
        ("resolved-mismatch", "prev", "4466"),
        ("acc-gap", "len", None),
        ("acc-contradiction", "tone", "casual"),
    ]
    assert redact(problems, OPERATORS) == problems


def test_other_problems_pass_whole_and_the_input_is_not_changed() -> None:
    bad_rb = RB.replace("amt=5400.00", "amt=5400.01")
    problems = problems_of(bad_rb, ("c1", HO))
    assert {p["code"] for p in problems} >= {"exec-mismatch"}  # the HO's value: the reader of the HO knows it
    before = copy.deepcopy(problems)
    assert redact(problems, NOBODY) == problems
    mixed = [*problems, *problems_of(HO, ("c9", HO), conversation="c2")]
    frozen = copy.deepcopy(mixed)
    out = redact(mixed, NOBODY)
    assert mixed == frozen and problems == before  # pure: the input is left as it was
    assert out[: len(problems)] == problems and out[-1]["got"] is None


def test_sensitive_values_stay_masked_for_an_operator() -> None:
    bad = HO.replace("acct=40-12-88/61102938", "acct=40-12-88/61102983")
    problems = problems_of(bad)
    whole = orjson.dumps(redact(problems, OPERATORS)).decode()
    assert "61102938" not in whole and "****2938" in whole
    assert "2938" not in orjson.dumps(redact(problems, NOBODY)).decode()


@pytest.mark.parametrize("code", sorted(RECORD_VALUE_CODES))
def test_every_withheld_code_is_one_the_checks_or_the_policy_produce(code: str) -> None:
    assert code in CHECK_CODES or code == "resolved-mismatch"
    assert set(BINDING_CODES) == {Reason.RECORD_USED.value}


def test_an_unknown_scope_sees_no_more_than_none() -> None:
    problems = problems_of(HO.replace("amt=5400.00", "amt=5400.01"))
    assert redact(problems, {"viewer"}) == redact(problems, NOBODY) != problems


def test_a_token_s_scopes_are_none_by_default_and_only_known_ones() -> None:
    plain = ApiToken(name="svc", sha256=hash_token("t-plain-0123456789"), agents=["payer"])
    op = ApiToken(name="ops", sha256=hash_token("t-ops-0123456789"), agents=["*"], scopes=["operator"])
    book = TokenBook([plain, op])
    assert book.principal("Bearer t-plain-0123456789").scopes == frozenset()  # type: ignore[union-attr]
    assert book.principal("Bearer t-ops-0123456789").scopes == {OPERATOR}  # type: ignore[union-attr]
    with pytest.raises(ValidationError, match="scopes"):
        ApiToken(name="x", sha256=hash_token("t"), agents=["payer"], scopes=["admin"])
