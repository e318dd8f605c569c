"""Outcome records: topics, keys, values unchanged, headers, alerts, masking, dry-run marks and trimming."""

from __future__ import annotations

import dataclasses
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gatekeeper import __version__
from gatekeeper.consumers.outcomes import (
    OUTCOME_TOO_LARGE,
    Outcome,
    OutcomeKind,
    Source,
    Targets,
    build,
    fit,
    iso,
    next_attempt,
)
from gatekeeper.policy import Decision, Reason, Verdict, line_digest
from gatekeeper.verdicts import SignatureError, Signer, Verifier
from tests.policy.world import AN, DN, HO, NOW, RB, pay_world

ACCT = "40-12-88/61102938"
TARGETS = Targets(output="out", dead_letter="dlq", alerts="alerts", name="agents.pay")
DRY = Targets(output="out", dead_letter="dlq", alerts="alerts", name="agents.pay", dry_run=True)


def source(value: bytes, **kw: object) -> Source:
    base: dict[str, object] = {
        "topic": "agents.pay",
        "partition": 2,
        "offset": 41,
        "value": value,
        "key": b"c1",
        "timestamp": 1790845200000,
        "headers": (("traceparent", b"00-abc-01"), ("gk.verdict", b"forward")),
    }
    base.update(kw)
    return Source(**base)  # type: ignore[arg-type]


def headers(o: Outcome) -> dict[str, str]:
    return {k: v.decode() for k, v in o.headers}


def swapped() -> tuple[Decision, bytes]:
    bad = HO.replace(ACCT, "40-12-88/61102983").encode()
    d = pay_world().send(bad)
    assert d.reason is Reason.CHECK_HO
    return d, bad


def test_forwarded_record_keeps_key_and_value_and_says_so() -> None:
    d = pay_world().send(HO)
    (o,) = build(d, source(HO.encode()), TARGETS, conversation="c1", now=NOW + 1)
    assert o.kind is OutcomeKind.OUTPUT and o.topic == "out"
    assert o.key == b"c1" and o.value == HO.encode()
    h = headers(o)
    assert h["gk.verdict"] == "forward"
    assert h["gk.checked.at"] == iso(NOW) == "2026-10-01T09:00:00.000Z"
    assert h["gk.version"] == __version__
    assert (h["gk.original.topic"], h["gk.original.partition"], h["gk.original.offset"]) == ("agents.pay", "2", "41")
    assert h["traceparent"] == "00-abc-01"
    assert "gk.reason" not in h and "gk.dry-run" not in h


def test_gk_headers_of_the_input_are_never_passed_through() -> None:
    d = pay_world().send(HO)
    (o,) = build(
        d,
        source(HO.encode(), headers=(("gk.verdict", b"alert"), ("GK.reason", b"x"))),
        TARGETS,
        conversation="c1",
        now=NOW,
    )
    assert [v for k, v in o.headers if k == "gk.verdict"] == [b"forward"]
    assert all(k != "GK.reason" for k, _ in o.headers)


def test_dead_letter_has_every_header_and_the_original_bytes() -> None:
    d, bad = swapped()
    (o,) = build(d, source(bad), TARGETS, conversation="c1", now=NOW)
    assert o.kind is OutcomeKind.DEAD_LETTER and o.topic == "dlq"
    assert o.value == bad and o.key == b"c1"
    h = headers(o)
    assert h["gk.reason"] == "check-ho"
    assert h["gk.check"] == "check_ho"
    assert h["gk.tier"] == d.problems[0].tier
    assert h["gk.attempt"] == "1"
    assert h["gk.decided.at"] == "2026-10-01T09:00:00.000Z"
    assert h["gk.conversation"] == "c1"
    assert h["gk.original.timestamp"] == "1790845200000"
    assert h["gk.version"] == __version__
    problems = json.loads(h["gk.problems"])
    assert problems[0]["slot"] == "acct"
    assert set(problems[0]) == {"code", "tier", "slot", "expected", "got", "message"}


def test_sensitive_values_are_masked_in_headers_but_not_in_the_value() -> None:
    d, bad = swapped()
    (o,) = build(d, source(bad), TARGETS, conversation="c1", now=NOW)
    h = headers(o)
    assert ACCT not in h["gk.problems"] and "40-12-88/61102983" not in h["gk.problems"]
    assert "****2938" in h["gk.problems"] and "****2983" in h["gk.problems"]
    assert b"40-12-88/61102983" in o.value  # the record body stays whole: replay needs it


def test_a_replayed_dead_letter_counts_its_attempt() -> None:
    d, bad = swapped()
    dead_letter_headers = (("gk.attempt", b"2"), ("gk.reason", b"check-ho"))
    (o,) = build(d, source(bad, attempt=next_attempt(dead_letter_headers)), TARGETS, conversation="c1", now=NOW)
    assert headers(o)["gk.attempt"] == "3"
    assert next_attempt((("gk.attempt", b"junk"),)) == 1
    assert next_attempt((("gk.attempt", b"9" * 5000),)) == 1  # more digits than int() takes: not a count
    assert next_attempt(()) == 1


def test_a_gk_attempt_header_the_producer_set_is_not_read() -> None:
    """Nothing the producer sets steers the gatekeeper: a consumed record's own ``gk.attempt`` counts for nothing."""
    d, bad = swapped()
    (o,) = build(d, source(bad, headers=(("gk.attempt", b"41"),)), TARGETS, conversation="c1", now=NOW)
    assert headers(o)["gk.attempt"] == "1"
    assert [v for k, v in o.headers if k == "gk.attempt"] == [b"1"]  # and it is not passed through either


def test_a_repeated_decision_is_marked() -> None:
    w = pay_world()
    w.send(HO)
    d = w.send(HO)
    assert d.repeated
    (o,) = build(d, source(HO.encode()), TARGETS, conversation="c1", now=NOW + 60)
    assert headers(o)["gk.repeated"] == "true"


def test_a_failed_done_report_is_forwarded_flagged_with_an_alert() -> None:
    w = pay_world()
    for line in (HO, RB):
        w.send(line)
    bad_dn = DN.replace("amt=5400.00", "amt=5100.00")
    d = w.send(bad_dn)
    assert d.verdict is Verdict.ALERT
    out, alert = build(d, source(bad_dn.encode()), TARGETS, conversation="c1", now=NOW + 2)
    assert out.kind is OutcomeKind.OUTPUT and out.value == bad_dn.encode()
    h = headers(out)
    assert h["gk.verdict"] == "alert" and h["gk.reason"] == "check-dn" and "gk.problems" in h
    assert alert.kind is OutcomeKind.ALERT and alert.topic == "alerts" and alert.key == b"c1"
    doc = json.loads(alert.value)
    assert doc["alert"] == "check-dn" and doc["verdict"] == "alert"
    assert doc["conversation"] == "c1" and doc["id"] == "payer-2" and doc["type"] == "DN"
    assert doc["original"] == {"topic": "agents.pay", "partition": 2, "offset": 41, "timestamp": 1790845200000}
    assert doc["route"] == "agents.pay" and doc["at"] == iso(NOW + 2)
    assert ACCT not in doc["line"] and "acct=****2938" in doc["line"]
    assert any(p["slot"] == "amt" for p in doc["problems"])


def test_dry_run_forwards_a_would_be_dead_letter_marked() -> None:
    d, bad = swapped()
    (o,) = build(d, source(bad), DRY, conversation="c1", now=NOW)
    assert o.kind is OutcomeKind.OUTPUT and o.topic == "out" and o.value == bad
    h = headers(o)
    assert h["gk.dry-run"] == "true"
    assert h["gk.verdict"] == "forward"
    assert h["gk.would.verdict"] == "dead-letter" and h["gk.would.reason"] == "check-ho"
    assert "****2983" in h["gk.problems"]


def test_dry_run_marks_every_record() -> None:
    d = pay_world().send(HO)
    (o,) = build(d, source(HO.encode()), DRY, conversation="c1", now=NOW)
    h = headers(o)
    assert h["gk.dry-run"] == "true" and "gk.would.verdict" not in h


def test_a_held_line_has_no_outcome() -> None:
    d = pay_world().send(RB)
    assert d.verdict is Verdict.HOLD
    with pytest.raises(ValueError):
        build(d, source(RB.encode()), TARGETS, conversation="c1", now=NOW)


def test_no_conversation_dead_letters_with_no_conversation_header() -> None:
    d = pay_world().send(HO, conversation=None)
    (o,) = build(d, source(HO.encode(), key=None), TARGETS, conversation=None, now=NOW)
    h = headers(o)
    assert o.key is None and h["gk.reason"] == "no-conversation" and "gk.conversation" not in h


# ---------------------------------------------------------------- trimming


def test_dead_letter_trims_problems_first_then_optional_headers_then_the_value() -> None:
    d, bad = swapped()
    (o0,) = build(d, source(bad), TARGETS, conversation="c1", now=NOW)
    o1 = o0.trimmed()
    assert o1 is not None and o1.level == 1
    h1 = headers(o1)
    assert "gk.problems" not in h1 and "gk.check" in h1 and h1["gk.trimmed"] == "problems"
    o2 = o1.trimmed()
    assert o2 is not None
    h2 = headers(o2)
    assert "gk.check" not in h2 and "traceparent" not in h2 and "gk.conversation" not in h2
    assert h2["gk.reason"] == "check-ho" and h2["gk.original.offset"] == "41" and o2.value == bad
    o3 = o2.trimmed()
    assert o3 is not None and o3.value == b"" and headers(o3)["gk.value.omitted"] == str(len(bad))
    assert o3.topic == "dlq" and headers(o3)["gk.trimmed"] == "problems,headers,value"
    assert o3.trimmed() is None
    assert o0.size > o1.size > o2.size > o3.size


def test_a_forwarded_line_is_never_sent_without_its_value() -> None:
    d = pay_world().send(HO)
    (o,) = build(d, source(HO.encode()), TARGETS, conversation="c1", now=NOW)
    o2 = o.trimmed().trimmed()  # type: ignore[union-attr]
    assert o2 is not None and o2.kind is OutcomeKind.OUTPUT and o2.value == HO.encode()
    o3 = o2.trimmed()
    assert o3 is not None and o3.kind is OutcomeKind.DEAD_LETTER and o3.topic == "dlq"
    assert o3.value == HO.encode() and headers(o3)["gk.reason"] == OUTCOME_TOO_LARGE
    o4 = o3.trimmed()
    assert o4 is not None and o4.value == b"" and o4.topic == "dlq"
    h4 = headers(o4)
    assert h4["gk.original.offset"] == "41" and h4["gk.value.omitted"] == str(len(HO.encode()))
    assert o4.trimmed() is None


def test_alerts_trim_problems_then_the_line() -> None:
    w = pay_world()
    for line in (HO, RB):
        w.send(line)
    d = w.send(DN.replace("amt=5400.00", "amt=5100.00"))
    _, alert = build(d, source(b"x"), TARGETS, conversation="c1", now=NOW)
    a1 = alert.trimmed()
    assert a1 is not None and "problems" not in json.loads(a1.value)
    a2 = a1.trimmed()
    assert a2 is not None and "line" not in json.loads(a2.value)
    a3 = a2.trimmed()
    assert a3 is not None and json.loads(a3.value)["original"]["offset"] == 41
    assert a3.trimmed() is None


def test_fit_trims_only_as_far_as_needed() -> None:
    d, bad = swapped()
    (o,) = build(d, source(bad), TARGETS, conversation="c1", now=NOW)
    assert fit(o, 10**6) is o
    fitted = fit(o, o.size - 1)
    assert fitted is not None and fitted.level == 1
    assert fit(o, 10) is None


# ---------------------------------------------------------------- signed verdicts (gatekeeper.verdicts)


def _signed() -> tuple[Targets, Verifier]:
    signer = Signer("gk-1", Ed25519PrivateKey.generate())
    return dataclasses.replace(TARGETS, signer=signer), Verifier({"gk-1": signer.public_key})


def test_a_forwarded_record_is_signed_for_its_route_conversation_line_and_verdict() -> None:
    targets, verifier = _signed()
    d = pay_world().send(HO)
    (o,) = build(d, source(HO.encode()), targets, conversation="c1", now=NOW)
    assert headers(o)["gk.sig"].startswith("v2 gk-1 forward first - ")
    sig = verifier.verify_record(o.headers, o.value, conversation="c1", route="agents.pay")
    assert sig.verdict == "forward"
    with pytest.raises(SignatureError):
        verifier.verify_record(o.headers, o.value, conversation="c2")
    # the producer's own gk.sig is never passed through: only the gatekeeper's is on the record
    forged = source(HO.encode(), headers=(("gk.sig", b"v2 gk-1 forward first - " + b"A" * 86),))
    (o2,) = build(d, forged, targets, conversation="c1", now=NOW)
    assert [k for k, _ in o2.headers].count("gk.sig") == 1
    verifier.verify_record(o2.headers, o2.value, conversation="c1")


def test_a_clearance_is_signed_with_the_statement_it_clears_and_a_repeat_as_a_repeat() -> None:
    """Issue 28: the signature covers the digests of the readback an AN val=Y cleared and of its handoff, and
    whether the verdict is the stored first decision returned again (a re-produced line)."""
    targets, verifier = _signed()
    w = pay_world()
    w.send(HO)
    w.send(RB)
    first = w.send(AN)
    want = (line_digest(RB.encode()), line_digest(HO.encode()))
    assert first.clears == want
    (o,) = build(first, source(AN.encode()), targets, conversation="c1", now=NOW)
    sig = verifier.verify_record(o.headers, o.value, conversation="c1", route="agents.pay")
    assert (sig.repeat, sig.clears) == (False, want)
    again = w.send(AN)  # the same line re-produced: the stored decision, signed as a repeat of the same statement
    assert again.repeated and again.clears == want
    (o2,) = build(again, source(AN.encode()), targets, conversation="c1", now=NOW)
    sig2 = verifier.verify_record(o2.headers, o2.value, conversation="c1", route="agents.pay")
    assert (sig2.repeat, sig2.clears) == (True, want)
    negative = w.send(AN.replace("scheduler-2", "scheduler-5").replace("val=Y", "val=N"))
    assert negative.forwarded and negative.clears is None  # only an affirmative answer clears a statement


def test_an_alerted_record_is_signed_alert_and_its_alert_and_dead_letters_are_not_signed() -> None:
    targets, verifier = _signed()
    w = pay_world()
    for line in (HO, RB):
        w.send(line)
    bad_dn = DN.replace("amt=5400.00", "amt=5100.00")
    out, alert = build(w.send(bad_dn), source(bad_dn.encode()), targets, conversation="c1", now=NOW)
    assert verifier.verify_record(out.headers, out.value, conversation="c1").verdict == "alert"
    assert "gk.sig" not in headers(alert)
    d, bad = swapped()
    (dead,) = build(d, source(bad), targets, conversation="c1", now=NOW)
    assert dead.kind is OutcomeKind.DEAD_LETTER and "gk.sig" not in headers(dead)
    for level in (dead.trimmed(), dead.trimmed().trimmed()):  # type: ignore[union-attr]
        assert level is not None and "gk.sig" not in headers(level)


def test_a_dry_run_record_is_signed_dry_run_which_is_no_clearance() -> None:
    targets, verifier = _signed()
    targets = dataclasses.replace(targets, dry_run=True)
    d, bad = swapped()
    (o,) = build(d, source(bad), targets, conversation="c1", now=NOW)
    assert o.kind is OutcomeKind.OUTPUT and headers(o)["gk.sig"].startswith("v2 gk-1 dry-run first - ")
    with pytest.raises(SignatureError, match="dry-run"):
        verifier.verify_record(o.headers, o.value, conversation="c1")
    assert verifier.verify_record(o.headers, o.value, conversation="c1", accept={"dry-run"}).verdict == "dry-run"


def test_a_trimmed_forwarded_record_keeps_its_signature_and_a_moved_one_loses_it() -> None:
    targets, verifier = _signed()
    d = pay_world().send(HO)
    (o,) = build(d, source(HO.encode()), targets, conversation="c1", now=NOW)
    o1 = o.trimmed()
    o2 = o1.trimmed() if o1 is not None else None
    for t in (o1, o2):
        assert t is not None and t.kind is OutcomeKind.OUTPUT and "gk.trimmed" in headers(t)
        verifier.verify_record(t.headers, t.value, conversation="c1")
    assert o2 is not None and "gk.conversation" not in headers(o2)  # the signature does not need it
    moved = o2.trimmed()
    assert moved is not None and moved.kind is OutcomeKind.DEAD_LETTER and "gk.sig" not in headers(moved)


def test_without_a_signer_nothing_is_signed() -> None:
    (o,) = build(pay_world().send(HO), source(HO.encode()), TARGETS, conversation="c1", now=NOW)
    assert "gk.sig" not in headers(o)


def test_the_checks_notes_ride_along_as_gk_notes() -> None:
    """A comprehension readback with nothing on record to check it against is forwarded, noted."""
    from gatekeeper.policy import Record
    from tests.policy.world import World

    w = World().add(Record("doc:1", "DRAFT", {"to": "desk", "item": "doc:1", "ask": "DRAFT"}))
    w.send("RW1 HO scheduler-1 from=scheduler to=desk item=doc:1 ask=DRAFT rb=acc p=pay")
    rb = "RW1 RB desk-1 re=scheduler-1 from=desk to=scheduler item=doc:1 ask=DRAFT acc=len:120w p=pay"
    d = w.send(rb)
    (o,) = build(d, source(rb.encode()), TARGETS, conversation="c1", now=NOW)
    assert o.kind is OutcomeKind.OUTPUT
    assert "comprehension-unverified" in headers(o)["gk.notes"].split(",")
    (clean,) = build(pay_world().send(HO), source(HO.encode()), TARGETS, conversation="c1", now=NOW)
    assert "gk.notes" not in headers(clean)
