"""Signed verdicts through the real broker and Redis: the daemon, configured with a signing key, signs what it
forwards; the payer's two-phase tool, holding only the public key, acts on the clearance it reads from the output
topic, and refuses a clearance an attacker produced straight to the output topic. Dead letters are never signed;
replay's forwarded lines are."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from gatekeeper.replay import Replayer, Status
from gatekeeper.twophase import Clearance, ForgedClearance, TwoPhaseTool
from gatekeeper.verdicts import SignatureError, Verifier, new_key_pair
from tests.integration._pipeline import Got, Pipeline, TopicFactory, make_route, produce, settings_for
from tests.integration.test_lifecycle import Running, cancels, forwarded
from tests.lifecycle.memory import Clock
from tests.policy.test_lifecycle import HO_EXP, RB_EXP, T_EXP
from tests.policy.world import AN, HO, NOW, RECORD

pytestmark = pytest.mark.integration

KEY_ID = "gk-it-1"


def _key(tmp_path: Path) -> tuple[dict[str, Any], str]:
    pem, public = new_key_pair()
    path = tmp_path / "gk-signing.pem"
    path.write_bytes(pem)
    path.chmod(0o600)
    return {"key_id": KEY_ID, "private_key_file": str(path)}, public


def _clearance(r: Got) -> Clearance:
    return Clearance(r.value, tuple(r.headers.items()))


class Bank:
    def __init__(self) -> None:
        self.calls: list[dict[str, str]] = []

    def __call__(self, values: Any) -> None:
        self.calls.append(dict(values))


async def test_the_tool_acts_on_the_gatekeeper_s_signed_clearance_and_refuses_a_forged_one(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object, tmp_path: Path
) -> None:
    signing, public = _key(tmp_path)
    route = await make_route(topic_factory)
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, [route], signing=signing) as p:
        await p.store.put_record(RECORD)
        bank = Bank()
        tool = TwoPhaseTool("payer", bank, profile="pay", gatekeeper_keys={KEY_ID: public}, route=route["input"])
        statement = tool.prepare(HO, conversation="paid")
        an = AN.replace("re=payer-1", f"re={statement.line.split()[2]}")  # the seed's clearance, to this statement
        await p.send("paid", HO, statement.line, an)
        got = await p.collect(lambda g: len(g.of("output", "paid")) >= 3)
        out = got.of("output", "paid")
        assert [r.text for r in out] == [HO, statement.line, an]
        verifier = Verifier({KEY_ID: public})
        for r in out:  # every forwarded line carries the gatekeeper's signature
            assert (r.h("gk.sig") or "").startswith(f"v2 {KEY_ID} forward first ")
            verifier.verify_record(r.headers.items(), r.value, conversation="paid", route=route["input"])

        # an attacker produces a clearance straight to the output topic, for a statement the gatekeeper never saw
        # checked: as the gatekeeper would forward it, but without its signature (or with another record's)
        forged_st = tool.prepare(HO, conversation="forged")
        forged_an = AN.replace("re=payer-1", f"re={forged_st.line.split()[2]}")
        genuine_sig = out[2].headers["gk.sig"]
        attempts = [
            [("gk.verdict", b"forward"), ("gk.original.topic", route["input"].encode())],
            [("gk.verdict", b"forward"), ("gk.original.topic", route["input"].encode()), ("gk.sig", genuine_sig)],
        ]
        await produce(kafka_bootstrap, route["output"], [(b"forged", forged_an.encode(), h) for h in attempts])
        got = await p.collect(lambda g: len(g.of("output", "forged")) >= 2)
        unsigned, copied = got.of("output", "forged")
        for r, why in ((unsigned, r"no gk\.sig"), (copied, "does not verify")):
            with pytest.raises(ForgedClearance, match=why):
                tool.commit(forged_st.token, True, clearance=_clearance(r))
        # the genuine clearance answers another statement, in another conversation: it does not clear this one
        with pytest.raises(ForgedClearance, match="is not scheduler's answer"):
            tool.commit(forged_st.token, True, clearance=_clearance(out[2]))
        assert bank.calls == []

        # the genuine clearance, read from the output topic with its headers, acts
        dn = tool.commit(statement.token, True, clearance=_clearance(out[2]))
        assert len(bank.calls) == 1 and dn.startswith("RW1 DN ")
        await p.send("paid", dn)
        got = await p.collect(lambda g: len(g.of("output", "paid")) >= 4)
        assert got.of("output", "paid")[3].h("gk.verdict") == "forward"
        assert got.of("dead", "paid") == []


async def test_dead_letters_are_never_signed_and_replay_signs_what_it_forwards(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object, tmp_path: Path
) -> None:
    signing, public = _key(tmp_path)
    route = await make_route(topic_factory)
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, [route], signing=signing) as p:
        await p.send("late", HO)  # no approved record yet: dead-lettered no-record
        got = await p.collect(lambda g: g.count("late") >= 1)
        (dl,) = got.of("dead", "late")
        assert dl.h("gk.reason") == "no-record" and "gk.sig" not in dl.headers
        await p.store.put_record(RECORD)
        started = time.monotonic()
        report = await Replayer(p.settings).run(route=route["input"])
        assert report.count(Status.FORWARDED) == 1, report.to_dict()
        got = await p.collect(lambda g: len(g.of("output", "late")) >= 1, timeout=30.0 - (time.monotonic() - started))
        (fwd,) = got.of("output", "late")
        assert fwd.h("gk.replayed.from.topic") == route["dead_letter"]
        sig = Verifier({KEY_ID: public}).verify_record(fwd.headers.items(), fwd.value, conversation="late")
        assert (sig.key_id, sig.verdict) == (KEY_ID, "forward")


async def test_the_daemon_s_sweeper_signs_the_cancel_it_publishes(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: object, tmp_path: Path
) -> None:
    signing, public = _key(tmp_path)
    route = await make_route(topic_factory)
    sweeper = {"interval_seconds": 0.1, "takeover_seconds": 30.0}
    settings = settings_for(kafka_bootstrap, redis_url, [route], sweeper=sweeper, signing=signing)
    r = Running(kafka_bootstrap, settings, Clock(NOW))
    try:
        await r.store.put_record(RECORD)
        await r.start()
        await r.send("exp", HO_EXP, RB_EXP)
        await r.collector.wait(lambda g: len(forwarded(g, "exp")) >= 2)
        r.clock.now = T_EXP  # the gatekeeper's clock passes exp=: its sweeper cancels in the sender's name
        got = await r.collector.wait(lambda g: len(cancels(g, "exp")) >= 1)
        (cx,) = cancels(got, "exp")
        verifier = Verifier({KEY_ID: public})
        # (the gatekeeper's own CX has no gk.original.topic: the route is given)
        kw: dict[str, Any] = {"conversation": "exp", "route": route["input"]}
        sig = verifier.verify_record(cx.headers.items(), cx.value, accept={"cancel"}, **kw)
        assert sig.verdict == "cancel"
        with pytest.raises(SignatureError, match="cancel"):  # a cancel is never a clearance
            verifier.verify_record(cx.headers.items(), cx.value, **kw)
    finally:
        await r.stop()
