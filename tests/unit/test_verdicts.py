"""Signed verdicts: the exact signed bytes, sign and verify, every bound field, keys, rotation, malformed headers."""

from __future__ import annotations

import base64
import hashlib
import string
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from gatekeeper.config import Settings, SigningSettings
from gatekeeper.errors import ConfigError
from gatekeeper.verdicts import (
    CLEARANCE_VERDICTS,
    HEADER,
    VERDICTS,
    KeyLoadError,
    Signature,
    SignatureError,
    Signer,
    Verifier,
    new_key_pair,
    private_key_from,
    public_key_from,
    signed_bytes,
    signer_for,
)
from tests.seed import AN

LINE = AN.encode()
RB_D, HO_D = "0123456789abcdef", "fedcba9876543210"  # the digests of a readback and its handoff


def signer(key_id: str = "gk-1") -> Signer:
    return Signer(key_id, Ed25519PrivateKey.generate())


def test_the_signed_bytes_are_exactly_as_documented() -> None:
    got = signed_bytes("gk-1", "agents.pay", "c-17", LINE, "forward")
    digest = hashlib.sha256(LINE).hexdigest()
    assert got == f"rw1-gatekeeper-verdict v2\ngk-1\nagents.pay\nforward\nfirst\n-\n{digest}\nc-17".encode()
    cleared = signed_bytes("gk-1", "agents.pay", "c-17", LINE, "forward", repeat=True, clears=(RB_D, HO_D))
    assert cleared == (
        f"rw1-gatekeeper-verdict v2\ngk-1\nagents.pay\nforward\nrepeat\n{RB_D}.{HO_D}\n{digest}\nc-17".encode()
    )
    # the conversation is last and free-form: a line feed in it cannot shift another field
    assert signed_bytes("gk-1", "agents.pay", "a\nb", LINE, "forward").endswith(b"\na\nb")
    for bad in (
        lambda: signed_bytes("gk 1", "agents.pay", "c", LINE, "forward"),
        lambda: signed_bytes("gk-1", "agents.pay", "c", LINE, "dead-letter"),
        lambda: signed_bytes("gk-1", "a\nb", "c", LINE, "forward"),
        lambda: signed_bytes("gk-1", "agents.pay", "c", LINE, "forward", clears=("x" * 16, HO_D)),
    ):
        with pytest.raises(ValueError):
            bad()


def test_a_signature_verifies_and_names_its_key_and_verdict() -> None:
    s = signer()
    header = s.sign("agents.pay", "c-17", LINE, "forward")
    assert header.startswith(b"v2 gk-1 forward first - ") and b"=" not in header and len(header.split()[5]) == 86
    v = Verifier({"gk-1": s.public_key})
    sig = v.verify(header, route="agents.pay", conversation="c-17", value=LINE)
    assert (sig.key_id, sig.verdict, sig.repeat, sig.clears) == ("gk-1", "forward", False, None)
    cleared = s.sign("agents.pay", "c-17", LINE, "forward", repeat=True, clears=(RB_D, HO_D))
    assert cleared.split()[3:5] == [b"repeat", f"{RB_D}.{HO_D}".encode()]
    # any Ed25519 implementation checks it: the signature is over the documented bytes
    public_key_from(s.public_key).verify(sig.signature, signed_bytes("gk-1", "agents.pay", "c-17", LINE, "forward"))
    sig = v.verify(cleared, route="agents.pay", conversation="c-17", value=LINE)
    assert (sig.repeat, sig.clears) == (True, (RB_D, HO_D))


@pytest.mark.parametrize(
    "field",
    ["route", "conversation", "value", "verdict", "key id", "repeat", "clears"],
)
def test_tampering_with_any_bound_field_fails(field: str) -> None:
    s = signer()
    v = Verifier({"gk-1": s.public_key, "gk-2": s.public_key})
    header = s.sign("agents.pay", "c-17", LINE, "forward", clears=(RB_D, HO_D)).decode()
    kw: dict[str, object] = {"route": "agents.pay", "conversation": "c-17", "value": LINE}
    if field == "route":
        kw["route"] = "agents.other"
    elif field == "conversation":
        kw["conversation"] = "c-18"
    elif field == "value":
        kw["value"] = LINE.replace(b"val=Y", b"val=Y ")
    elif field == "verdict":
        header = header.replace(" forward ", " alert ")
    elif field == "repeat":  # a stale clearance re-produced cannot pass as a first decision
        header = header.replace(" first ", " repeat ")
    elif field == "clears":  # nor as the clearance of another statement
        header = header.replace(f" {RB_D}.", f" {'0' * 16}.")
    else:  # the same key under another id: the key id is signed too
        header = header.replace(" gk-1 ", " gk-2 ")
    with pytest.raises(SignatureError, match="does not verify"):
        v.verify(header, **kw)  # type: ignore[arg-type]


def test_another_key_an_unknown_key_id_and_no_header_are_refused() -> None:
    genuine, forger = signer(), signer()
    v = Verifier({"gk-1": genuine.public_key})
    with pytest.raises(SignatureError, match="does not verify"):
        v.verify(forger.sign("r", "c", LINE, "forward"), route="r", conversation="c", value=LINE)
    with pytest.raises(SignatureError, match="not one of the gatekeeper's"):
        v.verify(signer("gk-9").sign("r", "c", LINE, "forward"), route="r", conversation="c", value=LINE)
    with pytest.raises(SignatureError, match=r"no gk\.sig"):
        v.verify(None, route="r", conversation="c", value=LINE)


def test_only_what_an_enforcing_gatekeeper_forwarded_is_a_clearance() -> None:
    # the gatekeeper's own lines (its cancels, its refusal notices) and a dry run's records never clear an act
    assert {"forward", "alert"} == CLEARANCE_VERDICTS
    assert {"cancel", "notice", "dry-run"} <= VERDICTS and not CLEARANCE_VERDICTS & {"cancel", "notice", "dry-run"}


@pytest.mark.parametrize("verdict", ["dry-run", "cancel", "notice"])
def test_a_signed_verdict_that_is_no_clearance_is_refused_unless_accepted(verdict: str) -> None:
    s = signer()
    v = Verifier({"gk-1": s.public_key})
    header = s.sign("r", "c", LINE, verdict)
    with pytest.raises(SignatureError, match=f"verdict on this record is {verdict}"):
        v.verify(header, route="r", conversation="c", value=LINE)
    assert v.verify(header, route="r", conversation="c", value=LINE, accept={verdict}).verdict == verdict


@pytest.mark.parametrize(
    "header",
    [
        b"",
        b"v2 gk-1 forward first -",
        b"v3 gk-1 forward first - AAAA",
        b"v2 gk-1 forward first - AAAA extra",
        b"v2 gk/1 forward first - " + b"A" * 86,
        b"v2 gk-1 dead-letter first - " + b"A" * 86,
        b"v2 gk-1 forward again - " + b"A" * 86,
        b"v2 gk-1 forward first abc.def " + b"A" * 86,
        b"v2 gk-1 forward first - " + b"!" * 86,
        b"v2 gk-1 forward first - " + b"A" * 43,
        "v2 gk-1 forward first - é".encode(),
    ],
)
def test_a_malformed_header_is_refused(header: bytes) -> None:
    with pytest.raises(SignatureError, match="malformed"):
        Signature.parse(header)
    with pytest.raises(SignatureError):
        Verifier({"gk-1": signer().public_key}).verify(header, route="r", conversation="c", value=LINE)


def test_a_version_1_signature_is_refused_saying_why() -> None:
    """v1 covered neither the repeat nor the statement cleared: a tool takes v2 only."""
    with pytest.raises(SignatureError, match="v1 covers neither"):
        Signature.parse(b"v1 gk-1 forward " + b"A" * 86)


def test_rotation_the_tools_accept_the_old_and_the_new_key() -> None:
    old, new = signer("gk-2026-11"), signer("gk-2026-12")
    v = Verifier({"gk-2026-11": old.public_key, "gk-2026-12": new.public_key})
    for s in (old, new):
        assert v.verify(s.sign("r", "c", LINE, "alert"), route="r", conversation="c", value=LINE).key_id == s.key_id
    retired = Verifier({"gk-2026-12": new.public_key})
    with pytest.raises(SignatureError, match="not one of"):
        retired.verify(old.sign("r", "c", LINE, "forward"), route="r", conversation="c", value=LINE)


def test_verify_record_reads_the_headers_and_refuses_two_signatures() -> None:
    s = signer()
    v = Verifier({"gk-1": s.public_key})
    sig = s.header("agents.pay", "c-17", LINE, "forward")
    headers = [("gk.original.topic", b"agents.pay"), sig]
    assert v.verify_record(headers, LINE, conversation="c-17").verdict == "forward"
    assert v.verify_record(headers, LINE, conversation="c-17", route="agents.pay").key_id == "gk-1"
    with pytest.raises(SignatureError, match="does not verify"):  # a tool bound to another route
        v.verify_record(headers, LINE, conversation="c-17", route="agents.other")
    with pytest.raises(SignatureError, match="does not verify"):  # the route header rewritten
        v.verify_record([("gk.original.topic", b"agents.other"), sig], LINE, conversation="c-17")
    with pytest.raises(SignatureError, match=r"2 gk\.sig headers"):
        v.verify_record([*headers, (HEADER, b"v2 x forward first - y")], LINE, conversation="c-17")
    with pytest.raises(SignatureError, match=r"no gk\.original\.topic"):
        v.verify_record([sig], LINE, conversation="c-17")


def test_keys_load_from_pem_and_raw_base64_and_refuse_anything_else(tmp_path: Path) -> None:
    pem, public = new_key_pair()
    key = private_key_from(pem)
    seed = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    for text in (base64.b64encode(seed), base64.urlsafe_b64encode(seed).rstrip(b"=") + b"\n"):
        assert Signer("k", private_key_from(text)).public_key == public
    pub_pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert Verifier({"k": pub_pem}).keys["k"] == Verifier({"k": public}).keys["k"]
    for bad in (
        b"not a key",
        base64.b64encode(b"x" * 31),
        b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----",
    ):
        with pytest.raises(KeyLoadError):
            private_key_from(bad)
    with pytest.raises(KeyLoadError):
        public_key_from("AAAA")
    with pytest.raises(ValueError):
        Verifier({})


def test_the_settings_turn_signing_on_and_a_bad_key_file_is_a_config_error(tmp_path: Path) -> None:
    assert Settings().signing.private_key_file is None and signer_for(Settings().signing) is None
    pem, public = new_key_pair()
    path = tmp_path / "gk.pem"
    path.write_bytes(pem)
    path.chmod(0o600)
    s = signer_for(SigningSettings(key_id="gk-7", private_key_file=path))
    assert s is not None and s.key_id == "gk-7" and s.public_key == public
    assert "PRIVATE" not in repr(s) and pem.decode() not in repr(s)
    path.write_bytes(b"garbage")
    with pytest.raises(ConfigError, match=r"signing\.private_key_file"):
        signer_for(SigningSettings(private_key_file=path))
    with pytest.raises(ConfigError, match="cannot read it"):
        signer_for(SigningSettings(private_key_file=tmp_path / "missing.pem"))
    with pytest.raises(ValueError):
        SigningSettings(key_id="has space")


def test_the_daemon_s_routes_and_its_sweeper_get_the_signer(tmp_path: Path) -> None:
    from gatekeeper.consumers.deciding import RouteRuntime
    from gatekeeper.consumers.loop import Gatekeeper
    from gatekeeper.store import MemoryStore

    pem, public = new_key_pair()
    (tmp_path / "gk.pem").write_bytes(pem)
    (tmp_path / "gk.pem").chmod(0o600)
    route = {"input": "sig.in", "output": "sig.out", "dead_letter": "sig.dlq", "alerts": "sig.alerts", "profile": "pay"}
    signing = {"key_id": "gk-3", "private_key_file": str(tmp_path / "gk.pem")}
    settings = Settings.model_validate({"routes": [route], "signing": signing})
    rt = RouteRuntime.of(settings.routes[0], settings, MemoryStore())
    assert rt.targets.signer is not None and rt.targets.signer.public_key == public
    gk = Gatekeeper(settings, store=MemoryStore(), http=False)
    assert gk.sweeper is not None
    [swept] = gk.sweeper.routes.values()
    assert swept.signer is not None and swept.signer.public_key == public
    off = Settings.model_validate({"routes": [route]})
    assert RouteRuntime.of(off.routes[0], off, MemoryStore()).targets.signer is None


# ------------------------------------------------------------------------ hostile input: SignatureError, nothing else

_SIGNER = signer()
_VERIFIER = Verifier({"gk-1": _SIGNER.public_key})
_GOOD = _SIGNER.sign("agents.pay", "c-17", LINE, "forward").decode()
_HEADER_TEXT = st.one_of(
    st.text(),
    st.text(alphabet=" v12", max_size=40),
    st.builds(
        lambda k, v, f, c, s: f"v2 {k} {v} {f} {c} {s}",
        st.text(max_size=70),
        st.sampled_from(["forward", "x"]),
        st.sampled_from(["first", "repeat", "y"]),
        st.one_of(st.just("-"), st.text(alphabet="0123456789abcdef.", max_size=40)),
        st.text(),
    ),
    st.builds(
        lambda s: f"v2 gk-1 forward first - {s}",
        st.text(alphabet=string.ascii_letters + string.digits + "_-+/=", min_size=80, max_size=90),
    ),
    st.builds(lambda n: _GOOD[:n] + _GOOD[n + 1 :], st.integers(0, len(_GOOD) - 1)),
)


@settings(max_examples=400, deadline=None)
@given(
    header=st.one_of(st.none(), st.binary(max_size=300), _HEADER_TEXT, _HEADER_TEXT.map(str.encode)),
    route=st.text(max_size=30),
    conversation=st.text(max_size=30),
)
def test_verify_raises_signature_error_only_on_any_header(
    header: bytes | str | None, route: str, conversation: str
) -> None:
    with pytest.raises(SignatureError):
        _VERIFIER.verify(header, route=route, conversation=conversation, value=LINE)


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), st.binary(max_size=120), _HEADER_TEXT.map(str.encode)), max_size=3),
    topic=st.one_of(st.none(), st.binary(max_size=30)),
)
def test_verify_record_raises_signature_error_only_on_any_headers(
    values: list[bytes | None], topic: bytes | None
) -> None:
    headers = [(HEADER, v) for v in values] + ([] if topic is None else [("gk.original.topic", topic)])
    with pytest.raises(SignatureError):
        _VERIFIER.verify_record(headers, LINE, conversation="c-17")  # type: ignore[arg-type]


def test_a_good_signature_with_a_trailing_newline_or_another_encoding_is_refused() -> None:
    assert _VERIFIER.verify(_GOOD, route="agents.pay", conversation="c-17", value=LINE).key_id == "gk-1"
    sig = _GOOD.split(" ")[5]
    padded = base64.b64encode(base64.urlsafe_b64decode(sig + "==")).decode()
    for header in (f"{_GOOD}\n", f"{_GOOD}==", _GOOD.replace("gk-1", "gk-1\n"), _GOOD.replace(sig, padded)):
        with pytest.raises(SignatureError, match="malformed"):
            _VERIFIER.verify(header, route="agents.pay", conversation="c-17", value=LINE)
    with pytest.raises(SignatureError):  # a route with LF: never signed
        _VERIFIER.verify(_GOOD, route="agents.pay\n", conversation="c-17", value=LINE)
    with pytest.raises(SignatureError):  # a conversation that is not valid Unicode
        _VERIFIER.verify(_GOOD, route="agents.pay", conversation="c-\ud800", value=LINE)
