"""gatekeeper.approvals: records signed by the approving system, verified when loaded and when a handoff is checked."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gatekeeper.approvals import BAD_SIGNATURE, UNSIGNED, ApproverRing, record_bytes, sign_record
from gatekeeper.auth import generate, public_key_text
from gatekeeper.config import ApproverKey, ConfigError, load_settings
from gatekeeper.policy import Reason, Record, Verdict
from gatekeeper.records import RecordsError, parse_records
from tests.policy.world import HO, RECORD, World, route

FINANCE = generate()
ENTRY = ApproverKey(id="finance-1", approver="finance", public_key=public_key_text(FINANCE.public_key()))
REQUIRED = ApproverRing([ENTRY], require_signed=True)
SIGNED = sign_record(FINANCE, "finance-1", RECORD)


def test_the_signed_bytes_are_the_record_as_kept_in_canonical_json() -> None:
    body = record_bytes(Record("inv:1", "PAY", {"to": "payer", "amt": "5.00"}, {"acct": "x"}, ("len:1w",), "v1 a b"))
    assert body == (
        b'rw-record-v1\x00{"ask":"PAY","expect_acc":["len:1w"],"item":"inv:1",'
        b'"resolved":{"acct":"x"},"values":{"amt":"5.00","to":"payer"}}'
    )


def test_a_signed_record_is_honoured_and_an_unsigned_one_only_where_signatures_are_not_required() -> None:
    assert SIGNED.signature is not None and SIGNED.signature.startswith("v1 finance-1 ")
    assert REQUIRED.check(SIGNED) is None
    unsigned = REQUIRED.check(RECORD)
    assert unsigned is not None and unsigned.code == UNSIGNED and unsigned.got == RECORD.item
    assert ApproverRing([ENTRY]).check(RECORD) is None  # not required: an unsigned record is honoured


@pytest.mark.parametrize(
    "altered",
    [
        lambda r: msgspec.structs.replace(r, values={**r.values, "amt": "99999.00"}),
        lambda r: msgspec.structs.replace(r, values={**r.values, "acct": "99-99-99/12345678"}),
        lambda r: msgspec.structs.replace(r, item="inv:MD-2026-999"),
        lambda r: msgspec.structs.replace(r, ask="CHGBANK"),
        lambda r: msgspec.structs.replace(r, resolved={"acct": "99-99-99/12345678"}),
        lambda r: msgspec.structs.replace(r, expect_acc=("len:1w",)),
    ],
)
def test_an_altered_record_is_refused_even_where_signatures_are_not_required(altered: object) -> None:
    changed = altered(SIGNED)  # type: ignore[operator]
    for ring in (REQUIRED, ApproverRing([ENTRY])):
        problem = ring.check(changed)
        assert problem is not None and problem.code == BAD_SIGNATURE
        assert "did not sign this record" in problem.message
        assert changed.signature.split(" ")[2] not in problem.message  # never echoed


def test_a_signature_by_another_key_or_of_another_record_is_refused() -> None:
    other = sign_record(generate(), "finance-1", RECORD)  # the right key id, another key
    assert (REQUIRED.check(other) or _no()).code == BAD_SIGNATURE
    unknown = sign_record(generate(), "mallory-1", RECORD)
    assert "not a configured approver key" in (REQUIRED.check(unknown) or _no()).message
    second = Record("inv:2", "PAY", {"to": "payer", "amt": "1.00"})
    moved = msgspec.structs.replace(second, signature=SIGNED.signature)  # a signature moved to another record
    assert (REQUIRED.check(moved) or _no()).code == BAD_SIGNATURE


def _no() -> object:
    raise AssertionError("expected a problem")


@settings(max_examples=300, deadline=None)
@given(sig=st.one_of(st.text(max_size=120), st.builds(lambda s: f"v1 finance-1 {s}", st.text(max_size=100))))
def test_any_signature_text_is_a_problem_never_an_exception(sig: str) -> None:
    problem = REQUIRED.check(msgspec.structs.replace(RECORD, signature=sig))
    assert problem is not None and problem.code == BAD_SIGNATURE


def test_a_signed_record_survives_the_records_file_and_the_store_s_json() -> None:
    line = json.dumps({**SIGNED.values, "ask": SIGNED.ask, "signature": SIGNED.signature})
    (parsed,) = parse_records(line)
    assert parsed == SIGNED and REQUIRED.check(parsed) is None
    again = Record.from_dict(json.loads(json.dumps(SIGNED.to_dict())))
    assert again == SIGNED and REQUIRED.check(again) is None
    bad = json.dumps({**SIGNED.values, "ask": SIGNED.ask, "signature": 7})
    with pytest.raises(RecordsError, match="signature"):
        parse_records(bad)


def test_the_configuration_refuses_what_cannot_work() -> None:
    with pytest.raises(ConfigError, match="no approver key"):  # refused when the daemon (or a command) starts
        ApproverRing.from_settings(load_settings(records={"require_signed": True}).records)
    entry = {"id": "a", "approver": "a", "public_key": public_key_text(FINANCE.public_key())}
    with pytest.raises(ConfigError, match="more than once"):
        load_settings(records={"approvers": [entry, entry]})
    assert load_settings(records={"require_signed": True, "approvers": [entry]}).records.require_signed


# ---------------------------------------------------------------- the decision: a raw record is not an approval


def test_a_handoff_against_a_record_nobody_approved_is_refused() -> None:
    """Issue 28's attack 5: a record written straight into Redis (a raw SET) paying 99999.00 to a new account."""
    forged = msgspec.structs.replace(RECORD, values={**RECORD.values, "amt": "99999.00", "acct": "99-99-99/12345678"})
    ho = HO.replace("amt=5400.00", "amt=99999.00").replace("40-12-88/61102938", "99-99-99/12345678")
    w = World(policy=route(record_check=REQUIRED.check)).add(forged)
    d = w.send(ho)
    assert (d.verdict, d.reason) == (Verdict.DEAD_LETTER, Reason.NO_RECORD)
    assert [p.code for p in d.problems] == [UNSIGNED]
    assert w.bindings == {}  # nothing bound to it
    tampered = msgspec.structs.replace(SIGNED, values=forged.values)  # the approver's signature, other values
    w2 = World(policy=route(record_check=REQUIRED.check)).add(tampered)
    assert [p.code for p in w2.send(ho).problems] == [BAD_SIGNATURE]


def test_a_handoff_against_its_approver_s_signed_record_passes() -> None:
    w = World(policy=route(record_check=REQUIRED.check)).add(SIGNED)
    assert w.send(HO).verdict is Verdict.FORWARD
    stored = json.loads(w.state().field("o:scheduler-1") or "{}")
    assert "sig" not in stored["rec"]  # the handoff keeps the values it was checked against, not the signature
