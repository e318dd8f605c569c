"""Refusal notices through the real broker and Redis: the daemon tells the sender of a refused readback on the
route's output topic, in the handoff's sender's name, signed as the gatekeeper's own (``notice``, never a
clearance); a redelivered line gets the same notice; a route with notices turned off and a dry-run route write none
(the dry-run route counts it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gatekeeper.verdicts import SignatureError, Verifier, new_key_pair
from rwcore import get_profile, parse_line
from tests.integration._pipeline import Pipeline, TopicFactory, make_route
from tests.policy.world import HO, RB, RECORD

pytestmark = pytest.mark.integration

KEY_ID = "gk-notice-1"
ACCT, LOOKALIKE = "40-12-88/61102938", "40-12-88/61102983"
BAD_RB = RB.replace(ACCT, LOOKALIKE)  # the tool resolved a lookalike account: refused check-rb
BAD_HO = HO.replace(ACCT, LOOKALIKE)  # refused check-ho


async def test_the_sender_of_a_refused_readback_is_told_and_nobody_else(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object, tmp_path: Path
) -> None:
    pem, public = new_key_pair()
    (tmp_path / "gk.pem").write_bytes(pem)
    (tmp_path / "gk.pem").chmod(0o600)
    signing = {"key_id": KEY_ID, "private_key_file": str(tmp_path / "gk.pem")}
    told = await make_route(topic_factory)
    off = await make_route(topic_factory, refusal_notices=False)
    dry = await make_route(topic_factory, mode="dry-run")
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, [told, off, dry], signing=signing) as p:
        await p.store.put_record(RECORD)
        await p.send("rb", HO, BAD_RB)
        await p.send("off", BAD_HO, route=1)
        await p.send("dry", BAD_HO, route=2)
        got = await p.collect(lambda g: len(g.of("notices", "rb")) >= 1 and g.count("off") >= 1 and g.count("dry") >= 1)

        # the readback's sender, the payer, is told on the output topic, in the scheduler's name
        (notice,) = got.of("notices", "rb")
        (letter,) = got.of("dead", "rb")
        assert [r.text for r in got.of("output", "rb")] == [HO]  # the readback was not delivered
        assert letter.value == BAD_RB.encode() and letter.h("gk.reason") == "check-rb"
        assert notice.topic == told["output"] and notice.key == b"rb"
        parsed = parse_line(notice.text, get_profile("pay"))
        msg = parsed.message
        assert parsed.errors == () and msg is not None
        assert (msg.type, msg.re, msg.from_, msg.to, msg.slots["why"]) == (
            "UN",
            "payer-1",
            "scheduler",
            "payer",
            "PERM",
        )
        assert msg.id.startswith("scheduler-9") and letter.h("gk.notice.id") == msg.id
        assert msg.tail is not None and msg.tail.startswith("check-rb: ") and "****2983" in msg.tail
        assert LOOKALIKE not in notice.text
        assert notice.h("gk.author") == "gatekeeper" and notice.h("gk.notice.refused") == "payer-1"
        assert (notice.h("gk.notice.reason"), notice.h("gk.notice.why"), notice.h("gk.conversation")) == (
            "check-rb",
            "PERM",
            "rb",
        )
        assert notice.h("gk.original.topic") is None and notice.h("gk.repeated") is None

        # the gatekeeper's signature, with the verdict notice: its own, and never a clearance
        assert (notice.h("gk.sig") or "").startswith(f"v2 {KEY_ID} notice first - ")
        verifier = Verifier({KEY_ID: public})
        kw = {"conversation": "rb", "route": told["input"]}
        assert verifier.verify_record(notice.headers.items(), notice.value, accept={"notice"}, **kw).verdict == "notice"
        with pytest.raises(SignatureError, match="notice, not"):
            verifier.verify_record(notice.headers.items(), notice.value, **kw)
        with pytest.raises(SignatureError, match="does not verify"):  # bound to its bytes, route and conversation
            verifier.verify_record(
                notice.headers.items(), notice.value, accept={"notice"}, conversation="x", route=told["input"]
            )

        # the same readback again (a redelivery): its stored first decision, the byte-identical notice
        await p.send("rb", BAD_RB)
        got = await p.collect(lambda g: len(g.of("notices", "rb")) >= 2)
        first, again = got.of("notices", "rb")
        assert again.value == first.value and again.h("gk.repeated") == "true"
        assert (again.h("gk.sig") or "").startswith(f"v2 {KEY_ID} notice repeat - ")
        assert [d.h("gk.notice.id") for d in got.of("dead", "rb")] == [msg.id, msg.id]

        # notices off: the dead letter only; dry-run: forwarded as would-be, no notice written, one counted
        await p.collector.settle(1.0)
        (off_letter,) = got.of("dead", "off")
        assert off_letter.h("gk.reason") == "check-ho" and off_letter.h("gk.notice.id") is None
        (dry_out,) = got.of("output", "dry")
        assert dry_out.h("gk.would.reason") == "check-ho"
        assert got.of("notices", "off") == [] and got.of("notices", "dry") == []
        assert {n.topic for n in got.notices} == {told["output"]}
        sample = p.gatekeeper.metrics.registry.get_sample_value

        def counted(route: dict[str, str], reason: str) -> float | None:
            return sample("gatekeeper_refusal_notices_total", {"route": route["input"], "reason": reason})

        assert counted(told, "check-rb") == 2  # written, the redelivered line's again
        assert counted(dry, "check-ho") == 1  # would be written
        assert counted(off, "check-ho") is None
        assert sample("gatekeeper_outcomes_total", {"route": told["input"], "kind": "notice"}) == 2

        # the payer copies the notice it was told back onto the input: the gatekeeper's own id, refused
        # reserved-id, and no notice is written about a notice
        await p.send("rb", notice.text)
        got = await p.collect(lambda g: any(d.h("gk.reason") == "reserved-id" for d in g.of("dead", "rb")))
        (copied,) = [d for d in got.of("dead", "rb") if d.h("gk.reason") == "reserved-id"]
        assert copied.value == notice.value and copied.h("gk.notice.id") is None
        await p.collector.settle(1.0)
        assert len(got.of("notices", "rb")) == 2
        assert sample("gatekeeper_outcomes_total", {"route": told["input"], "kind": "notice"}) == 2
