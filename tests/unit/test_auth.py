"""gatekeeper.auth: the signature header agents put on their records, and its verification (pure)."""

from __future__ import annotations

import base64
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gatekeeper.auth import (
    BAD_SIGNATURE,
    MALFORMED,
    MISSING,
    OLD_VERSION,
    UNKNOWN_KEY,
    WRONG_ROUTE,
    KeyRing,
    check_record,
    generate,
    load_keys_file,
    private_key_from_text,
    private_key_text,
    public_key_text,
    sign,
    signed_bytes,
    verify,
)
from gatekeeper.config import ConfigError, SenderAuthSettings, SenderKey, load_settings

ROUTE = "agents.pay"
LINE = b"RW1 AN scheduler-2 re=payer-1 p=pay from=scheduler to=payer val=Y"
SCHEDULER = generate()
PAYER = generate()
RING = KeyRing(
    [
        SenderKey(id="scheduler-1", agent="scheduler", public_key=public_key_text(SCHEDULER.public_key())),
        SenderKey(id="payer-1", agent="payer", public_key=public_key_text(PAYER.public_key())),
    ]
)


def test_the_signed_bytes_are_documented_exactly() -> None:
    assert signed_bytes("agents.pay", "c-17", b"RW1 X") == b"rw-sig-v2\x00agents.pay\x00c-17\x00RW1 X"


def test_a_good_signature_names_its_agent() -> None:
    header = sign(SCHEDULER, "scheduler-1", "c-17", LINE, route=ROUTE)
    version, key_id, sig = header.split(" ")
    assert (version, key_id, len(sig)) == ("v2", "scheduler-1", 86)
    proof = verify(RING, header.encode(), ROUTE, "c-17", LINE)
    assert (proof.agent, proof.key_id, proof.failure) == ("scheduler", "scheduler-1", None)


def test_a_tampered_value_fails() -> None:
    header = sign(SCHEDULER, "scheduler-1", "c-17", LINE, route=ROUTE)
    proof = verify(RING, header, ROUTE, "c-17", LINE.replace(b"val=Y", b"val=N"))
    assert proof.agent is None and proof.failure == BAD_SIGNATURE
    assert header.split(" ")[2] not in proof.detail  # the signature is never echoed


def test_a_line_moved_to_another_conversation_fails() -> None:
    header = sign(SCHEDULER, "scheduler-1", "c-17", LINE, route=ROUTE)
    assert verify(RING, header, ROUTE, "c-18", LINE).failure == BAD_SIGNATURE


def test_a_line_copied_to_another_route_fails() -> None:
    """The attack of issue 28: a signed thread copied byte for byte, headers and all, onto a second route."""
    header = sign(SCHEDULER, "scheduler-1", "c-17", LINE, route=ROUTE)
    assert verify(RING, header, "agents.pay2", "c-17", LINE).failure == BAD_SIGNATURE
    assert verify(RING, header, ROUTE, "c-17", LINE).agent == "scheduler"


def test_a_version_1_signature_is_refused_with_what_to_change() -> None:
    """v1 covered the conversation and the line, not the route: a valid one is refused all the same."""
    from gatekeeper.auth import b64url

    v1 = SCHEDULER.sign(b"rw-sig-v1\x00c-17\x00" + LINE)
    proof = verify(RING, f"v1 scheduler-1 {b64url(v1)}", ROUTE, "c-17", LINE)
    assert proof.agent is None and proof.failure == OLD_VERSION
    assert "route" in proof.detail and "v2" in proof.detail


def test_a_key_limited_to_routes_signs_on_those_routes_only() -> None:
    ring = KeyRing([SenderKey(id="p-1", agent="payer", public_key=public_key_text(PAYER.public_key()), routes=[ROUTE])])
    on_route = sign(PAYER, "p-1", "c-17", LINE, route=ROUTE)
    assert verify(ring, on_route, ROUTE, "c-17", LINE).agent == "payer"
    elsewhere = sign(PAYER, "p-1", "c-17", LINE, route="agents.mail")  # a valid signature, on a route not its own
    proof = verify(ring, elsewhere, "agents.mail", "c-17", LINE)
    assert proof.agent is None and proof.failure == WRONG_ROUTE and "agents.mail" in proof.detail
    with pytest.raises(ConfigError, match="routes"):
        load_settings(sender_auth={"keys": [{"id": "a", "agent": "a", "public_key": "A" * 43 + "=", "routes": []}]})


def test_a_key_id_naming_another_agent_s_key_fails() -> None:
    """The payer signs with its own key but names the scheduler's key id: the signature does not verify."""
    header = sign(PAYER, "scheduler-1", "c-17", LINE, route=ROUTE)
    assert verify(RING, header, ROUTE, "c-17", LINE).failure == BAD_SIGNATURE


def test_the_payer_s_own_key_proves_the_payer_only() -> None:
    """The wrong agent in from= is the decision's finding: the proof says who signed."""
    proof = verify(RING, sign(PAYER, "payer-1", "c-17", LINE, route=ROUTE), ROUTE, "c-17", LINE)
    assert proof.agent == "payer"


def test_an_unknown_key_id_fails() -> None:
    other = generate()
    proof = verify(RING, sign(other, "mallory-1", "c-17", LINE, route=ROUTE), ROUTE, "c-17", LINE)
    assert proof.failure == UNKNOWN_KEY and "mallory-1" in proof.detail


@pytest.mark.parametrize(
    "header",
    [
        "",
        "v2",
        "v3 scheduler-1 " + "A" * 86,
        "v2 scheduler-1",
        "v2 scheduler-1 " + "A" * 85,
        "v2 scheduler-1 " + "A" * 86 + " extra",
        "v2 sched/uler " + "A" * 86,
        "v2 scheduler-1 " + "+" * 86,
        "v2  scheduler-1 " + "A" * 86,
        b"v2 scheduler-1 \xff",
    ],
)
def test_a_malformed_header_fails(header: str | bytes) -> None:
    assert verify(RING, header, ROUTE, "c-17", LINE).failure == MALFORMED


def test_no_header_fails() -> None:
    assert verify(RING, None, ROUTE, "c-17", LINE).failure == MISSING
    assert check_record(RING, [("traceparent", b"x")], "rw-sig", ROUTE, "c-17", LINE).failure == MISSING


def test_two_signature_headers_are_malformed() -> None:
    good = sign(SCHEDULER, "scheduler-1", "c-17", LINE, route=ROUTE).encode()
    assert check_record(RING, [("rw-sig", good)], "rw-sig", ROUTE, "c-17", LINE).agent == "scheduler"
    assert check_record(RING, [("rw-sig", good), ("rw-sig", good)], "rw-sig", ROUTE, "c-17", LINE).failure == MALFORMED


def test_a_conversation_with_nul_is_refused() -> None:
    with pytest.raises(ValueError):
        sign(SCHEDULER, "scheduler-1", "a\x00b", LINE, route=ROUTE)
    forged = "v2 scheduler-1 " + base64.urlsafe_b64encode(bytes(64)).rstrip(b"=").decode()
    assert verify(RING, forged, ROUTE, "a\x00b", LINE).failure == MALFORMED


def test_private_keys_round_trip() -> None:
    again = private_key_from_text(private_key_text(PAYER))
    assert public_key_text(again.public_key()) == public_key_text(PAYER.public_key())


def test_the_keys_file_adds_keys(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "keys.yaml"
    path.write_text(f"- id: payer-2\n  agent: payer\n  public_key: {public_key_text(PAYER.public_key())}\n")
    ring = KeyRing.from_settings(SenderAuthSettings(keys_file=path))
    found = ring.key("payer-2")
    assert found is not None and found.agent == "payer" and len(ring) == 1
    assert load_keys_file(path)[0].id == "payer-2"
    path.write_text("- id: payer-2\n  agent: payer\n  public_key: nope\n")
    with pytest.raises(ConfigError, match="public_key"):
        KeyRing.from_settings(SenderAuthSettings(keys_file=path))


def test_the_configuration_refuses_what_cannot_work() -> None:
    with pytest.raises(ConfigError, match="public_key"):
        load_settings(sender_auth={"keys": [{"id": "a", "agent": "a", "public_key": "AAAA"}]})
    with pytest.raises(ConfigError, match="header"):
        load_settings(sender_auth={"header": "gk.sig"})
    route = {
        "input": "in",
        "output": "out",
        "dead_letter": "dlq",
        "alerts": "al",
        "profile": "pay",
        "sender_auth": True,
    }
    with pytest.raises(ConfigError, match="no sender key"):
        load_settings(routes=[route])
    key = {"id": "a", "agent": "a", "public_key": public_key_text(PAYER.public_key())}
    with pytest.raises(ConfigError, match="more than once"):
        load_settings(sender_auth={"keys": [key, key]})
    assert load_settings(routes=[route], sender_auth={"keys": [key]}).routes[0].sender_auth


# ---------------------------------------------------------------- hostile input: any bytes, never an exception

_GOOD = sign(SCHEDULER, "scheduler-1", "c-17", LINE, route=ROUTE)
_HEADER_TEXT = st.one_of(
    st.text(),
    st.text(alphabet=" v12", max_size=40),  # many spaces, near-misses of the version
    st.builds(lambda k, s: f"v2 {k} {s}", st.text(max_size=70), st.text(max_size=100)),
    st.builds(
        lambda s: f"v2 scheduler-1 {s}",
        st.text(alphabet=string.ascii_letters + string.digits + "_-+/=", min_size=80, max_size=90),
    ),
    st.builds(lambda n: _GOOD[:n] + _GOOD[n + 1 :], st.integers(0, len(_GOOD) - 1)),  # one character dropped
)
_HEADERS = st.one_of(
    st.none(), st.binary(max_size=300), _HEADER_TEXT, _HEADER_TEXT.map(lambda t: t.encode("utf-8", "surrogatepass"))
)


@settings(max_examples=400, deadline=None)
@given(header=_HEADERS, conversation=st.text(max_size=40), value=st.binary(max_size=64))
def test_verify_never_raises_and_refuses_any_header_it_was_not_signed_with(
    header: bytes | str | None, conversation: str, value: bytes
) -> None:
    proof = verify(RING, header, ROUTE, conversation, value)
    assert proof.agent is None and proof.key_id is None
    assert proof.failure in {MISSING, MALFORMED, OLD_VERSION, UNKNOWN_KEY, BAD_SIGNATURE}


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), st.binary(max_size=200), _HEADER_TEXT.map(str.encode)), max_size=3),
    conversation=st.text(max_size=40),
)
def test_check_record_never_raises_on_any_headers(values: list[bytes | None], conversation: str) -> None:
    headers = [("rw-sig", v) for v in values] + [("other", b"\xff")]
    proof = check_record(RING, headers, "rw-sig", ROUTE, conversation, LINE)  # type: ignore[arg-type]
    assert proof.agent is None and proof.failure in {MISSING, MALFORMED, OLD_VERSION, UNKNOWN_KEY, BAD_SIGNATURE}


def test_odd_but_plausible_headers_are_failures_not_exceptions() -> None:
    sig = _GOOD.split(" ")[2]
    for header in (
        b"",
        b" " * 10_000,
        b"v2 scheduler-1 " + b"A" * 1_000_000,
        b"\xff\xfe v2",
        f"v2 scheduler-1 {sig} ".encode(),
        f"v2  scheduler-1 {sig}".encode(),
        f"v2 scheduler-1 {sig[:-1]}=".encode(),
        f"v2 scheduler-1\n {sig}".encode(),
        f"v2 scheduler-1 {sig}\n".encode(),
        f"v2 sch\u00e9duler-1 {sig}",
    ):
        assert verify(RING, header, ROUTE, "c-17", LINE).failure == MALFORMED, header[:40]
    assert check_record(RING, [("rw-sig", None)], "rw-sig", ROUTE, "c-17", LINE).failure == MALFORMED  # type: ignore[list-item]
    assert (
        verify(RING, _GOOD, ROUTE, "c-\ud800", LINE).failure == MALFORMED
    )  # a conversation no agent could have signed
