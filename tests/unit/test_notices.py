"""Refusal notices (``gatekeeper.notices``), pure: the why table, the notice's form and validity under every bundled
profile, its id, determinism, masking, and who is never told. Their records (``outcomes.build``) and the worker's
choice (``deciding.notice_for``: the route's setting, dry-run) here too; through the real broker in
``tests/integration/test_notices.py``."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gatekeeper.config import Settings
from gatekeeper.consumers.deciding import RouteRuntime, notice_for
from gatekeeper.consumers.holds import Pending
from gatekeeper.consumers.outcomes import OutcomeKind, Source, Targets, build
from gatekeeper.metrics import Metrics
from gatekeeper.notices import (
    AUTHOR,
    NOTICE_SPAN,
    REFUSED_BY,
    RULES,
    refusal_notice,
    rules_table,
)
from gatekeeper.policy import Decision, Reason, RoutePolicy, SenderProof, Verdict
from gatekeeper.policy.gate import screen
from gatekeeper.policy.lifecycle import CANCEL_ID_MAX, NOTICE_ID_MIN, LifecycleError, cancel_id
from gatekeeper.policy.model import RESERVED_ID_MAX, RESERVED_ID_MIN, id_number, is_reserved_id
from gatekeeper.store import MemoryStore
from gatekeeper.verdicts import SignatureError, Signer, Verifier, new_key_pair, private_key_from
from rwcore import Problem, get_profile, parse_line
from tests.policy.world import HO, NOW, RB, World, pay_world, route

ROOT = Path(__file__).resolve().parents[2]
ACCT, LOOKALIKE = "40-12-88/61102938", "40-12-88/61102983"
BAD = HO.replace(ACCT, LOOKALIKE)  # refused check-ho: two digits of the account swapped
PROFILES = ("core", "pay", "clin", "deploy", "pform")
NOTIFIED = [r for r, rule in RULES.items() if rule.why is not None]
CORE_WHY = set(json.loads((ROOT / "rwcore/profiles/core.json").read_text())["enums"]["why"])


def policy_for(profile: str, **kw: object) -> RoutePolicy:
    return route(profile=get_profile(None if profile == "core" else profile), **kw)


def line_for(profile: str, n: int = 7) -> str:
    """A handoff valid under ``profile`` (its own agents where it names them), with a sensitive slot in the tail."""
    agents = json.loads((ROOT / f"rwcore/profiles/{profile}.json").read_text()).get("agents") or ["alpha", "beta"]
    a, b = agents[0], agents[1]
    p = "" if profile == "core" else f" p={profile}"
    return f"RW1 HO {a}-{n} from={a} to={b} item=x:1 ask=DRAFT{p} // brief, acct=40-12-88/61102938"


def dead(line: str, reason: Reason, policy: RoutePolicy, *problems: Problem, repeated: bool = False) -> Decision:
    msg = parse_line(line, policy.profile).message
    assert msg is not None
    return Decision(
        verdict=Verdict.DEAD_LETTER, reason=reason, problems=problems, message=msg, decided_at=NOW, repeated=repeated
    )


# ----------------------------------------------------------------------------------------------- the why table


def test_every_reason_has_a_row_and_every_why_is_a_code_of_the_specification() -> None:
    assert set(RULES) == set(Reason)
    assert {rule.why for rule in RULES.values()} - {None} <= CORE_WHY


def test_the_reasons_never_told_are_those_whose_sender_is_not_known_or_would_be_misled() -> None:
    never = {r for r, rule in RULES.items() if rule.why is None}
    assert never == {
        Reason.NO_CONVERSATION,  # nothing to key a notice by
        Reason.SENDER_BINDING,  # not a sender of the route
        Reason.SENDER_AUTH,  # from= not proven: never talk to whoever a line names
        Reason.RESERVED_ID,  # never a notice about a notice (or a cancel)
        Reason.DUPLICATE_ID,  # re= would name the line that holds the id
        Reason.AWAITING_HANDOFF,  # a hold, never a dead letter
    }
    assert RULES[Reason.EXPIRED].why == "EXPIRED" and RULES[Reason.RECORD_USED].why == "CONFLICT"
    assert RULES[Reason.INTERNAL_ERROR].why == "ERR" and not RULES[Reason.INTERNAL_ERROR].quote  # no internals out


def test_the_docs_table_is_the_rules() -> None:
    text = (ROOT / "docs" / "notices.md").read_text(encoding="utf-8")
    block = text.split("<!-- notices:start -->\n", 1)[1].split("\n<!-- notices:end -->", 1)[0]
    assert block.splitlines() == rules_table()


# ----------------------------------------------------------------------------------------------- form and validity


@pytest.mark.parametrize("reason", NOTIFIED, ids=lambda r: r.value)
@pytest.mark.parametrize("profile", PROFILES)
def test_a_notice_for_every_reason_is_valid_under_every_bundled_profile(profile: str, reason: Reason) -> None:
    policy = policy_for(profile)
    line = line_for(profile)
    problem = Problem(
        code="x-problem",
        message=f"acct mismatch: record {ACCT} vs HO {LOOKALIKE}",
        tier="record",
        slot="acct",
        expected=ACCT,
        got=LOOKALIKE,
    )
    d = dead(line, reason, policy, problem)
    n = refusal_notice(d, line.encode(), policy, None)
    assert n is not None
    parsed = parse_line(n.line, policy.profile)
    assert parsed.errors == () and parsed.warnings == (), parsed
    msg, refused = parsed.message, d.message
    assert msg is not None and refused is not None
    assert (msg.type, msg.re, msg.from_, msg.to, msg.item) == ("UN", refused.id, refused.to, refused.from_, "x:1")
    assert msg.slots["why"] == RULES[reason].why == n.why and n.reason == reason.value
    assert msg.slots.get("p") == (None if profile == "core" else profile)
    assert msg.tail is not None and msg.tail.startswith(f"{reason.value}: ") and msg.tail.endswith(REFUSED_BY)
    assert len(msg.tail) <= policy.profile.tail_max
    assert screen(n.line.encode(), policy.max_line_bytes) == (n.line, ())  # the gate's input rules
    assert ACCT not in n.line and LOOKALIKE not in n.line  # masked: ****2938
    if RULES[reason].quote:
        assert "****2938 vs HO ****2983" in msg.tail
    else:
        assert RULES[reason].says in msg.tail
    # the gatekeeper's own: an id of the addressee in the notices' part of the reserved range
    assert msg.id == n.id and msg.id.startswith(f"{refused.to}-") and is_reserved_id(msg.id)
    number = id_number(msg.id)
    assert number is not None and NOTICE_ID_MIN <= number <= RESERVED_ID_MAX


def test_real_refusals_under_the_pay_profile() -> None:
    w = pay_world()
    d = w.send(BAD)
    n = refusal_notice(d, BAD.encode(), w.policy, None)
    assert d.reason is Reason.CHECK_HO and n is not None
    assert n.line.startswith("RW1 UN payer-9") and n.line.split(" ", 3)[3].startswith(
        "re=scheduler-1 from=payer to=scheduler item=inv:MD-2026-057 why=PERM p=pay // check-ho: record: acct "
        "mismatch: record ****2938 vs HO ****2983 (refused by the gatekeeper, not delivered)"
    )
    # a readback of the lookalike account: its sender, the payer, is told in the scheduler's name
    w = pay_world()
    w.send(HO)
    rb = RB.replace(ACCT, LOOKALIKE)
    d = w.send(rb)
    n = refusal_notice(d, rb.encode(), w.policy, None)
    assert d.reason is Reason.CHECK_RB and n is not None
    assert (n.to, n.addressee, n.re, n.why) == ("payer", "scheduler", "payer-1", "PERM")
    # no approved record; a readback whose handoff never came (after the hold)
    d = World().send(HO)
    n = refusal_notice(d, HO.encode(), route(), None)
    assert d.reason is Reason.NO_RECORD and n is not None and "// no-record: no approved record for item" in n.line
    d = pay_world().send(RB, first_seen=NOW - 100)
    n = refusal_notice(d, RB.encode(), route(), None)
    assert d.reason is Reason.UNKNOWN_HANDOFF and n is not None and n.why == "NOCTX"


def test_an_invalid_line_that_still_parses_is_told_and_one_that_does_not_parse_is_not() -> None:
    w = pay_world()
    never = HO.replace("paid=20261002", "paid=20261302")  # a month that never comes: refused after the parser
    d = w.send(never)
    n = refusal_notice(d, never.encode(), w.policy, None)
    assert d.reason is Reason.INVALID and d.message is None and n is not None
    assert n.why == "UNK" and "// invalid: input: paid=20261302 is not a real calendar date" in n.line
    for broken in (HO.replace("from=scheduler ", ""), HO.replace("ask=PAY", "ask=PAYX"), "RW1 HO x", "\x00RW1"):
        d = w.send(broken)
        assert d.reason is Reason.INVALID and refusal_notice(d, broken.encode(), w.policy, None) is None


def test_a_long_explanation_is_cut_to_the_tail_and_its_attribution_kept() -> None:
    policy = policy_for("pay")
    line = line_for("pay")
    long = Problem(code="x", message="the values \u202eare wrong\n" + "and more " * 100, tier="record")
    n = refusal_notice(dead(line, Reason.CHECK_HO, policy, long), line.encode(), policy, None)
    assert n is not None
    tail = n.line.split(" // ", 1)[1]
    assert len(tail) == policy.profile.tail_max and tail.endswith("..." + REFUSED_BY)
    assert tail.isascii() and "are wrong and more" in tail and "?are" in tail  # one line, printable ASCII only
    assert parse_line(n.line, policy.profile).errors == ()


def test_a_small_line_limit_drops_the_item_then_the_notice() -> None:
    line = line_for("pay").replace("item=x:1", "item=x:" + "1" * 60)
    problem = Problem(code="x", message="a mismatch " * 30, tier="record")
    full = refusal_notice(dead(line, Reason.CHECK_HO, policy_for("pay")), line.encode(), policy_for("pay"), None)
    assert full is not None and " item=x:1" in full.line
    for limit in (160, 200):
        policy = policy_for("pay", max_line_bytes=limit)
        n = refusal_notice(dead(line, Reason.CHECK_HO, policy, problem), line.encode(), policy, None)
        assert n is not None and len(n.line.encode()) <= limit and " item=" not in n.line
        assert parse_line(n.line, policy.profile).errors == () and screen(n.line.encode(), limit)[0] == n.line
    policy = policy_for("pay", max_line_bytes=64)
    assert refusal_notice(dead(line, Reason.CHECK_HO, policy, problem), line.encode(), policy, None) is None


def test_the_tail_is_the_reason_the_explanation_and_the_attribution_and_the_id_is_the_documented_hash() -> None:
    """What the module docstring says of the id, computed here independently: ``NOTICE_ID_MIN`` plus the SHA-256 of
    the domain, the refused line's bytes, a NUL and the notice's words (reason, why, profile, tail, NUL-separated),
    its first 8 bytes big-endian, modulo ``NOTICE_SPAN``. (The tail's cutting is ``engine::notices``' own tests.)"""
    policy = policy_for("pay")
    notice = refusal_notice(dead(BAD, Reason.CHECK_HO, policy), BAD.encode(), policy, None)
    assert notice is not None
    tail = notice.line.split(" // ", 1)[1]
    assert tail.startswith("check-ho: ") and tail.endswith(REFUSED_BY)
    words = "\x00".join(("check-ho", "PERM", "pay", tail)).encode()
    digest = hashlib.sha256(b"rw1-refusal-notice v1\x00" + BAD.encode() + b"\x00" + words).digest()
    assert notice.id == f"payer-{NOTICE_ID_MIN + int.from_bytes(digest[:8], 'big') % NOTICE_SPAN}"


# ----------------------------------------------------------------------------------------------- the id


def test_the_same_refusal_is_the_same_notice_and_a_redelivered_line_s_too() -> None:
    w = pay_world()
    first = w.send(BAD)
    again = w.send(BAD)  # redelivered: its stored first decision
    assert again.repeated and again.reason is first.reason
    a = refusal_notice(first, BAD.encode(), w.policy, None)
    b = refusal_notice(again, BAD.encode(), w.policy, None)
    assert a is not None and a == b


def test_notices_of_different_lines_or_refusals_have_different_ids_in_their_own_part_of_the_range() -> None:
    policy = policy_for("core")
    ids = set()
    for n in range(1, 2001):
        line = f"RW1 HO alpha-{n} from=alpha to=beta item=x:{n} ask=DRAFT"
        notice = refusal_notice(dead(line, Reason.NO_RECORD, policy), line.encode(), policy, None)
        assert notice is not None
        ids.add(notice.id)
    assert len(ids) == 2000
    line = line_for("core")
    one = refusal_notice(dead(line, Reason.NO_RECORD, policy), line.encode(), policy, None)
    other = refusal_notice(dead(line, Reason.CHECK_HO, policy), line.encode(), policy, None)
    assert one is not None and other is not None and one.id != other.id  # one line refused otherwise: another id
    assert NOTICE_ID_MIN + NOTICE_SPAN - 1 == RESERVED_ID_MAX


def test_the_cancels_never_reach_the_notices_part_of_the_range() -> None:
    assert RESERVED_ID_MIN < CANCEL_ID_MAX < NOTICE_ID_MIN
    assert cancel_id("research", CANCEL_ID_MAX - RESERVED_ID_MIN) == "research-949999999"
    with pytest.raises(LifecycleError):
        cancel_id("research", NOTICE_ID_MIN - RESERVED_ID_MIN)


# ----------------------------------------------------------------------------------------------- who is told


def test_a_line_refused_sender_auth_is_never_answered() -> None:
    w = pay_world(sender_auth=True)
    for proof in (None, SenderProof(failure="sender-auth-missing"), SenderProof(agent="desk", key_id="desk-1")):
        d = w.send(BAD)  # World sends no proof: refused sender-auth
        assert d.reason is Reason.SENDER_AUTH
        assert refusal_notice(d, BAD.encode(), w.policy, proof) is None


def test_on_a_sender_auth_route_only_a_proven_sender_is_told() -> None:
    policy = policy_for("pay", sender_auth=True)
    d = dead(BAD, Reason.CHECK_HO, policy)
    proven = SenderProof(agent="scheduler", key_id="scheduler-1")
    assert refusal_notice(d, BAD.encode(), policy, proven) is not None
    for proof in (None, SenderProof(failure="sender-auth-bad-signature"), SenderProof(agent="desk", key_id="d-1")):
        assert refusal_notice(d, BAD.encode(), policy, proof) is None
    # without sender_auth, the parsed from= (see the module docstring for why that is acceptable)
    assert refusal_notice(d, BAD.encode(), policy_for("pay"), None) is not None


def test_no_notice_about_a_notice_a_duplicate_an_outsider_or_a_forwarded_line() -> None:
    w = pay_world(senders=frozenset({"scheduler", "payer"}))
    d = w.send(BAD)
    notice = refusal_notice(d, BAD.encode(), w.policy, None)
    assert notice is not None
    # the notice copied back to the input: reserved-id, never answered
    copied = w.send(notice.line)
    assert copied.reason is Reason.RESERVED_ID and refusal_notice(copied, notice.line.encode(), w.policy, None) is None
    # another line under an id the conversation already holds: re= would name the first
    other = BAD.replace("amt=5400.00", "amt=5400.01")
    dup = w.send(other)
    assert dup.reason is Reason.DUPLICATE_ID and refusal_notice(dup, other.encode(), w.policy, None) is None
    # a sender the route does not bind
    outsider = BAD.replace("scheduler", "desk")
    refused = w.send(outsider)
    assert refused.reason is Reason.SENDER_BINDING
    assert refusal_notice(refused, outsider.encode(), w.policy, None) is None
    # an invalid line from an outsider (decided before the binding): not told either
    late = outsider.replace("desk-1", "desk-2").replace("paid=20261002", "paid=20261302")
    assert w.send(late).reason is Reason.INVALID
    assert refusal_notice(w.send(late), late.encode(), w.policy, None) is None
    # forwarded lines and holds are not refusals
    ok = pay_world()
    forwarded = ok.send(HO)
    assert forwarded.verdict is Verdict.FORWARD and refusal_notice(forwarded, HO.encode(), ok.policy, None) is None
    held = ok.send(RB.replace("re=scheduler-1", "re=scheduler-9"))
    assert held.verdict is Verdict.HOLD and refusal_notice(held, RB.encode(), ok.policy, None) is None


# ----------------------------------------------------------------------------------------------- its records


def _signer() -> Signer:
    pem, _ = new_key_pair()
    return Signer("gk-1", private_key_from(pem))


def test_the_notice_s_record_beside_its_dead_letter() -> None:
    w = pay_world()
    d = w.send(BAD)
    notice = refusal_notice(d, BAD.encode(), w.policy, None)
    assert notice is not None
    source = Source("agents.pay", 2, 41, BAD.encode(), key=b"c-17", timestamp=1)
    signer = _signer()
    targets = Targets("out", "dlq", "alerts", "agents.pay", signer=signer)
    letter, record = build(d, source, targets, conversation="c-17", now=NOW, notice=notice)
    assert letter.kind is OutcomeKind.DEAD_LETTER and letter.header("gk.notice.id") == notice.id.encode()
    assert record.kind is OutcomeKind.NOTICE and record.topic == "out" and record.key == b"c-17"
    assert record.value == notice.line.encode() and record.source is source  # its input partition's transaction
    h = dict(record.headers)
    assert h["gk.author"] == AUTHOR.encode() and h["gk.notice.refused"] == b"scheduler-1"
    assert (h["gk.notice.reason"], h["gk.notice.why"], h["gk.conversation"]) == (b"check-ho", b"PERM", b"c-17")
    assert not any(k.startswith("gk.original.") for k in h) and "gk.repeated" not in h
    verifier = Verifier({"gk-1": signer.public_key})
    kw = {"conversation": "c-17", "route": "agents.pay"}
    sig = verifier.verify_record(record.headers, record.value, accept={"notice"}, **kw)  # type: ignore[arg-type]
    assert sig.verdict == "notice" and not sig.repeat
    with pytest.raises(SignatureError, match="notice, not"):  # never a clearance
        verifier.verify_record(record.headers, record.value, **kw)  # type: ignore[arg-type]
    assert record.trimmed() is None  # never trimmed: dropped (and counted) if it does not fit
    # redelivered: the same value, marked a repeat
    again = w.send(BAD)
    *_, repeat = build(again, source, targets, conversation="c-17", now=NOW + 5, notice=notice)
    assert repeat.value == record.value and repeat.header("gk.repeated") == b"true"
    assert verifier.verify_record(repeat.headers, repeat.value, accept={"notice"}, **kw).repeat  # type: ignore[arg-type]
    # a dry-run route writes none, and neither does a line without a dead letter
    dry = Targets("out", "dlq", "alerts", "agents.pay", dry_run=True)
    assert [o.kind for o in build(d, source, dry, conversation="c-17", now=NOW, notice=notice)] == [OutcomeKind.OUTPUT]
    assert all("gk.notice" not in k for o in build(d, source, dry, conversation="c-17", now=NOW) for k, _ in o.headers)


def _runtime(**route_kw: object) -> RouteRuntime:
    settings = Settings.model_validate(
        {
            "routes": [
                {"input": "in", "output": "out", "dead_letter": "dlq", "alerts": "al", "profile": "pay", **route_kw}
            ]
        }
    )
    return RouteRuntime.of(settings.routes[0], settings, MemoryStore())


def _pending(value: str) -> Pending:
    return Pending(route="in", source=Source("in", 0, 0, value.encode(), key=b"c1"), conversation="c1", first_seen=NOW)


def test_the_worker_writes_a_notice_counts_it_on_a_dry_run_route_and_none_when_turned_off() -> None:
    d = pay_world().send(BAD)
    metrics = Metrics()

    def counted() -> float:
        return (
            metrics.registry.get_sample_value("gatekeeper_refusal_notices_total", {"route": "in", "reason": "check-ho"})
            or 0.0
        )

    notice = notice_for(_pending(BAD), d, _runtime(), None, metrics)
    assert notice is not None and notice.reason == "check-ho" and counted() == 0  # counted when acknowledged
    assert notice_for(_pending(BAD), d, _runtime(mode="dry-run"), None, metrics) is None and counted() == 1
    assert notice_for(_pending(BAD), d, _runtime(refusal_notices=False), None, metrics) is None and counted() == 1
    assert _runtime().config.refusal_notices is True  # on by default


def test_a_notice_that_cannot_be_built_leaves_the_dead_letter_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    import gatekeeper.consumers.deciding as deciding

    def broken(*_: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(deciding, "refusal_notice", broken)
    metrics = Metrics()
    d = pay_world().send(BAD)
    assert notice_for(_pending(BAD), d, _runtime(), None, metrics) is None
    assert (
        metrics.registry.get_sample_value("gatekeeper_internal_errors_total", {"route": "in", "stage": "outcome"}) == 1
    )


def test_the_example_configuration_and_the_chart_schema_name_the_setting() -> None:
    example = (ROOT / "config/gatekeeper.example.yaml").read_text()
    assert re.search(r"^\s+refusal_notices: true\s", example, re.M)
    schema = json.loads((ROOT / "deploy/helm/gatekeeper/values.schema.json").read_text())
    assert schema["definitions"]["route"]["properties"]["refusal_notices"]["type"] == "boolean"


_WORDS = st.sampled_from([ACCT, LOOKALIKE, "caf\u00e9", "\u202e", " \t\n ", "\x1c", "x" * 90, "amt", "//", "\u3000"])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_WORDS | st.text(max_size=12), max_size=8).map(" ".join),
    st.sampled_from([Reason.CHECK_HO, Reason.NO_RECORD, Reason.CHECK_THREAD, Reason.INTERNAL_ERROR]),
    st.integers(min_value=150, max_value=600),
)
def test_any_notice_is_a_valid_masked_printable_line_within_the_route_s_limit(
    explanation: str, reason: Reason, limit: int
) -> None:
    """Whatever a problem says and however little room the route leaves: a notice, when one is written, parses,
    passes the gate within the route's limit, says its reason, says it was not delivered, is printable ASCII after
    its ``//`` and never shows the account."""
    policy = policy_for("pay", max_line_bytes=limit)
    problem = Problem(code="c", message=explanation, tier="record", slot="acct", expected=ACCT, got=LOOKALIKE)
    notice = refusal_notice(dead(BAD, reason, policy, problem), BAD.encode(), policy, None)
    if notice is None:
        return
    assert screen(notice.line.encode(), limit)[0] is not None
    parsed = parse_line(notice.line, policy.profile)
    assert not parsed.errors and parsed.message is not None and parsed.message.type == "UN"
    tail = notice.line.split(" // ", 1)[1]
    assert tail.startswith(reason.value) and tail.endswith(REFUSED_BY)
    assert all(" " <= c <= "~" for c in tail) and "  " not in tail
    assert ACCT not in notice.line and LOOKALIKE not in notice.line
