"""Signed verdicts: the gatekeeper signs what it forwards, so an act tool can tell a clearance that passed through
the gatekeeper from one produced straight to the output topic.

The gatekeeper holds an Ed25519 private key (``signing.private_key_file``); act tools hold only its public key. Every
record the gatekeeper writes to a route's output topic (forwarded and alerted lines, replay's forwarded lines, the
sweeper's CX lines, its refusal notices) carries one header::

    gk.sig: v2 <key id> <verdict> <first|repeat> <clears> <signature>

``<signature>`` is the Ed25519 signature (64 bytes, base64url without padding) of these bytes (UTF-8, fields
separated by one LF, no LF at the end)::

    rw1-gatekeeper-verdict v2
    <key id>
    <route: the route's input topic>
    <verdict>
    <first|repeat>
    <clears>
    <sha256 of the record's value bytes, 64 lowercase hex digits>
    <conversation id>

The conversation is last: it is the only free-form field (the key id is ``[A-Za-z0-9_.-]{1,64}``, a topic name has no
LF, the verdict and the repeat flag are words, the digests are hex), so the bytes read back one way only.

- ``<verdict>``: ``forward`` and ``alert``: an enforce-mode route forwarded the line (``gk.verdict``); these are the
  clearances an act tool may act on (``CLEARANCE_VERDICTS``); ``dry-run``: any record of a route in dry-run mode
  (the gatekeeper did not enforce anything: never a clearance); ``cancel``: a CX the sweeper wrote in the sender's
  name (``gk.author: gatekeeper``; it has no ``gk.original.topic``: ``Verifier.verify_record`` needs its ``route``);
  ``notice``: a refusal notice, the ``UN`` the gatekeeper wrote to the sender of a line it dead-lettered
  (``gatekeeper.notices``; ``gk.author: gatekeeper``, no ``gk.original.topic`` either). ``cancel`` and ``notice``
  are the gatekeeper's own lines, never a clearance.
- ``<first|repeat>``: ``repeat`` when the verdict is the stored first decision returned again (the line was
  re-produced, or redelivered after a crash: ``gk.repeated``). An act tool never acts on a repeat.
- ``<clears>``: for an affirmative answer that cleared a readback, ``<readback digest>.<handoff digest>``: the
  digests (``policy.line_digest``: the first 16 hex digits of the SHA-256 of the line's bytes) of the very readback
  it clears and of that readback's handoff; ``-`` for any other line. An act tool compares them with the statement
  it prepared: a clearance of another statement under the same ids (a tool restarted, its ids reused) does not
  match.

Dead letters and alerts are never signed. Nothing else on the record is signed (its other headers are
informational); the line itself is bound by its digest. The signature does not expire: an act tool binds a
clearance to its own statement (the digests above) and to its own expiry.

Version 1 (``v1 <key id> <verdict> <signature>``) covered neither the repeat nor the statement cleared; a ``v1``
header is refused with a message saying so (a tool and the gatekeeper are upgraded together: an older tool refuses
``v2`` too, so the mismatch stops acts rather than allowing them).

Make the gatekeeper's key pair (``new_key_pair``; or any Ed25519 PKCS#8 PEM, e.g. ``openssl genpkey -algorithm
ed25519``)::

    python -c 'import gatekeeper.verdicts as v; k, pub = v.new_key_pair(); open("gk.pem", "wb").write(k); print(pub)'

The printed public key (base64url of the 32 raw bytes) is what act tools are given, with the key id:
``Verifier({"gk-2026-12": pub})``. Rotation: give the tools the new public key beside the old one, then switch
``signing.key_id`` and ``signing.private_key_file``; drop the old key from the tools once nothing in flight carries it.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from gatekeeper.errors import ConfigError

if TYPE_CHECKING:
    from gatekeeper.config import SigningSettings

HEADER = "gk.sig"
VERSION = "v2"
DOMAIN = b"rw1-gatekeeper-verdict v2"
FIRST = "first"
REPEAT = "repeat"
NO_CLEARANCE = "-"
FORWARD = "forward"
ALERT = "alert"
DRY_RUN = "dry-run"
CANCEL = "cancel"
NOTICE = "notice"
VERDICTS = frozenset({FORWARD, ALERT, DRY_RUN, CANCEL, NOTICE})
#: The signed verdicts that clear an act: lines an enforcing gatekeeper forwarded (never its own cancels and notices).
CLEARANCE_VERDICTS = frozenset({FORWARD, ALERT})
KEY_ID_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"
_KEY_ID = re.compile(KEY_ID_PATTERN)
_SIGNATURE = re.compile(r"[A-Za-z0-9_-]{86}")  # 64 bytes, base64url without padding
_CLEARS = re.compile(r"[0-9a-f]{16}\.[0-9a-f]{16}")  # <readback digest>.<handoff digest>

Headers = Iterable[tuple[str, bytes]]
PublicKeyLike = Ed25519PublicKey | str | bytes


class SignatureError(ValueError):
    """A signature that does not verify: missing, malformed, by an unknown key, or not over these fields."""


class KeyLoadError(ConfigError, ValueError):
    """A key that cannot be loaded (the message never contains the key's bytes). A ``ConfigError``: the daemon
    refuses to start (exit 2) with a signing key it cannot read."""


#: The permission bits a private key file may not have: none for others, and the group may only read (a
#: Kubernetes Secret mounted with ``defaultMode: 0440`` and the pod's ``fsGroup``; kubelet gives the group read on
#: such a volume whatever the mode asked).
PRIVATE_KEY_MODE_REFUSED = 0o037


def check_private_key_file(path: str | Path, what: str) -> None:
    """Refuse a private key file that others may read (or the group write): ``KeyLoadError`` naming ``what`` (the
    setting or option) and the file, never its content, saying what to do. 0600, 0400 and 0440 pass. Does nothing
    when the file cannot be stat'ed (reading it then fails with its own message)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if stat.S_ISREG(mode) and mode & PRIVATE_KEY_MODE_REFUSED:
        raise KeyLoadError(
            f"{what} {path}: the private key file has mode {stat.S_IMODE(mode):04o}, readable or writable by others "
            f"than its owner: chmod 600 {path} (0400, or 0440 for a Kubernetes Secret read through fsGroup, pass too)"
        )


def b64url(data: bytes) -> str:
    """Base64url without padding (the signatures of ``gk.sig`` and of ``gatekeeper.auth``)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    text = text.strip()
    try:
        return base64.urlsafe_b64decode(text.replace("+", "-").replace("/", "_") + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ValueError("not base64") from None


def clears_text(clears: tuple[str, str] | None) -> str:
    """The ``<clears>`` field: ``<readback digest>.<handoff digest>``, or ``-``."""
    if clears is None:
        return NO_CLEARANCE
    text = f"{clears[0]}.{clears[1]}"
    if not _CLEARS.fullmatch(text):
        raise ValueError(f"clears {clears!r}: two line digests of 16 lowercase hex digits")
    return text


def signed_bytes(
    key_id: str,
    route: str,
    conversation: str,
    value: bytes,
    verdict: str,
    *,
    repeat: bool = False,
    clears: tuple[str, str] | None = None,
) -> bytes:
    """The exact bytes a ``gk.sig`` signs (see the module docstring)."""
    if not _KEY_ID.fullmatch(key_id):
        raise ValueError(f"key id {key_id!r}: expected {KEY_ID_PATTERN}")
    if verdict not in VERDICTS:
        raise ValueError(f"verdict {verdict!r}: expected one of {sorted(VERDICTS)}")
    if "\n" in route:
        raise ValueError("a route has no line feed")
    return b"\n".join(
        (
            DOMAIN,
            key_id.encode("ascii"),
            route.encode("utf-8"),
            verdict.encode("ascii"),
            (REPEAT if repeat else FIRST).encode("ascii"),
            clears_text(clears).encode("ascii"),
            hashlib.sha256(value).hexdigest().encode("ascii"),
            conversation.encode("utf-8"),
        )
    )


# ------------------------------------------------------------------------------------------------------------ keys


def new_key_pair() -> tuple[bytes, str]:
    """A new Ed25519 key pair: the private key as PKCS#8 PEM (for ``signing.private_key_file``) and the public key
    as base64url of its 32 raw bytes (for act tools)."""
    key = Ed25519PrivateKey.generate()
    return private_key_pem(key), public_key_text(key.public_key())


def private_key_pem(key: Ed25519PrivateKey) -> bytes:
    """A private key as PKCS#8 PEM, unencrypted."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def public_key_text(key: Ed25519PublicKey) -> str:
    """A public key as base64url of its 32 raw bytes."""
    return b64url(key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))


def private_key_from(data: bytes) -> Ed25519PrivateKey:
    """An Ed25519 private key from PKCS#8 PEM (unencrypted) or the base64 (standard or url) of its 32-byte seed."""
    text = data.strip()
    if text.startswith(b"-----BEGIN"):
        try:
            key = serialization.load_pem_private_key(text, password=None)
        except (ValueError, TypeError):
            raise KeyLoadError("not an unencrypted PEM private key") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise KeyLoadError("the PEM key is not an Ed25519 key")
        return key
    try:
        seed = _unb64(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise KeyLoadError("neither PEM nor base64") from None
    if len(seed) != 32:
        raise KeyLoadError(f"a raw Ed25519 seed is 32 bytes, got {len(seed)}")
    return Ed25519PrivateKey.from_private_bytes(seed)


def public_key_from(key: PublicKeyLike) -> Ed25519PublicKey:
    """An Ed25519 public key from a key object, PEM (``BEGIN PUBLIC KEY``) or base64(url) of its 32 raw bytes."""
    if isinstance(key, Ed25519PublicKey):
        return key
    data = key.encode("ascii") if isinstance(key, str) else key
    data = data.strip()
    if data.startswith(b"-----BEGIN"):
        try:
            loaded = serialization.load_pem_public_key(data)
        except ValueError:
            raise KeyLoadError("not a PEM public key") from None
        if not isinstance(loaded, Ed25519PublicKey):
            raise KeyLoadError("the PEM key is not an Ed25519 key")
        return loaded
    try:
        raw = _unb64(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise KeyLoadError("neither PEM nor base64") from None
    if len(raw) != 32:
        raise KeyLoadError(f"a raw Ed25519 public key is 32 bytes, got {len(raw)}")
    return Ed25519PublicKey.from_public_bytes(raw)


# ------------------------------------------------------------------------------------------------------------ sign


class Signer:
    """Signs the gatekeeper's forwarded records with one key. Its ``repr`` never shows the key."""

    __slots__ = ("_key", "key_id", "public_key")

    def __init__(self, key_id: str, key: Ed25519PrivateKey) -> None:
        if not _KEY_ID.fullmatch(key_id):
            raise ValueError(f"key id {key_id!r}: expected {KEY_ID_PATTERN}")
        self.key_id = key_id
        self._key = key
        self.public_key = public_key_text(key.public_key())

    @classmethod
    def from_file(cls, key_id: str, path: str | Path) -> Signer:
        check_private_key_file(path, "signing.private_key_file")
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise KeyLoadError(
                f"signing.private_key_file {path}: cannot read it ({exc.strerror or type(exc).__name__})"
            ) from None
        try:
            return cls(key_id, private_key_from(data))
        except KeyLoadError as exc:
            raise KeyLoadError(f"signing.private_key_file {path}: {exc}") from None

    def sign(
        self,
        route: str,
        conversation: str | None,
        value: bytes,
        verdict: str,
        *,
        repeat: bool = False,
        clears: tuple[str, str] | None = None,
    ) -> bytes:
        """The ``gk.sig`` header's value for a record (a conversation of None signs as the empty string)."""
        message = signed_bytes(self.key_id, route, conversation or "", value, verdict, repeat=repeat, clears=clears)
        sig = self._key.sign(message)
        flag = REPEAT if repeat else FIRST
        return f"{VERSION} {self.key_id} {verdict} {flag} {clears_text(clears)} {b64url(sig)}".encode("ascii")

    def header(
        self,
        route: str,
        conversation: str | None,
        value: bytes,
        verdict: str,
        *,
        repeat: bool = False,
        clears: tuple[str, str] | None = None,
    ) -> tuple[str, bytes]:
        return HEADER, self.sign(route, conversation, value, verdict, repeat=repeat, clears=clears)

    def __repr__(self) -> str:
        return f"Signer(key_id={self.key_id!r}, public_key={self.public_key!r})"


@functools.lru_cache(maxsize=16)
def _load(key_id: str, path: str, mtime_ns: int) -> Signer:
    return Signer.from_file(key_id, path)


def signer_for(signing: SigningSettings) -> Signer | None:
    """The signer a ``config.SigningSettings`` configures (None: signing is off). The key file is read once per
    path and modification time. Raises ``KeyLoadError`` (a ValueError) when it cannot be read."""
    path = signing.private_key_file
    if path is None:
        return None
    key_id = signing.key_id
    try:
        mtime = Path(path).stat().st_mtime_ns
    except OSError as exc:
        raise KeyLoadError(
            f"signing.private_key_file {path}: cannot read it ({exc.strerror or type(exc).__name__})"
        ) from None
    check_private_key_file(path, "signing.private_key_file")  # each time: a chmod changes no mtime
    return _load(key_id, str(path), mtime)


# ------------------------------------------------------------------------------------------------------------ verify


@dataclass(frozen=True, slots=True)
class Signature:
    """A parsed ``gk.sig`` value: who signed, the verdict, whether it is a repeat, the statement it clears."""

    key_id: str
    verdict: str
    signature: bytes
    repeat: bool = False
    clears: tuple[str, str] | None = None  # (readback digest, handoff digest) of the statement an AN cleared

    @classmethod
    def parse(cls, value: bytes | str) -> Signature:
        try:
            text = value.decode("ascii") if isinstance(value, bytes) else value
        except UnicodeDecodeError:
            raise SignatureError("malformed gk.sig: not ASCII") from None
        parts = text.split(" ")
        if parts and parts[0] == "v1":
            raise SignatureError(
                "gk.sig v1 covers neither a repeat nor the statement a clearance clears: this tool takes v2 only "
                "(upgrade the gatekeeper)"
            )
        if len(parts) != 6 or parts[0] != VERSION:
            raise SignatureError(
                f"malformed gk.sig: expected '{VERSION} <key id> <verdict> <first|repeat> <clears> <signature>'"
            )
        _, key_id, verdict, flag, clears, sig_text = parts
        if not _KEY_ID.fullmatch(key_id):
            raise SignatureError("malformed gk.sig: bad key id")
        if verdict not in VERDICTS:
            raise SignatureError(f"malformed gk.sig: unknown verdict {verdict!r}")
        if flag not in (FIRST, REPEAT):
            raise SignatureError(f"malformed gk.sig: {flag!r} is neither {FIRST} nor {REPEAT}")
        if clears != NO_CLEARANCE and not _CLEARS.fullmatch(clears):
            raise SignatureError("malformed gk.sig: the cleared statement is not <readback digest>.<handoff digest>")
        if not _SIGNATURE.fullmatch(sig_text):
            raise SignatureError("malformed gk.sig: the signature is not 64 bytes of base64url without padding")
        pair = None if clears == NO_CLEARANCE else tuple(clears.split("."))
        return cls(
            key_id,
            verdict,
            base64.urlsafe_b64decode(sig_text + "=="),
            repeat=flag == REPEAT,
            clears=pair,  # type: ignore[arg-type]  # two fields, checked above
        )


def header_of(headers: Headers, name: str) -> bytes | None:
    """The one header ``name`` (None: absent). Raises ``SignatureError`` when there are several (ambiguous)."""
    found = [v for k, v in headers if k == name]
    if len(found) > 1:
        raise SignatureError(f"{len(found)} {name} headers on one record")
    return found[0] if found else None


class Verifier:
    """Verifies ``gk.sig`` headers against the gatekeeper's public keys, by key id (several: a rotation)."""

    def __init__(self, keys: Mapping[str, PublicKeyLike]) -> None:
        if not keys:
            raise ValueError("a Verifier needs at least one public key")
        for key_id in keys:
            if not _KEY_ID.fullmatch(key_id):
                raise ValueError(f"key id {key_id!r}: expected {KEY_ID_PATTERN}")
        self.keys: dict[str, Ed25519PublicKey] = {k: public_key_from(v) for k, v in keys.items()}

    def verify(
        self,
        header: bytes | str | None,
        *,
        route: str,
        conversation: str,
        value: bytes,
        accept: Iterable[str] = CLEARANCE_VERDICTS,
    ) -> Signature:
        """The signature, when ``header`` is a valid ``gk.sig`` by one of the keys over exactly these fields and
        its verdict is one of ``accept``; raises ``SignatureError`` otherwise."""
        if header is None:
            raise SignatureError("no gk.sig header: the record did not come from the gatekeeper")
        if not isinstance(header, (bytes, str)):
            raise SignatureError("malformed gk.sig: not bytes or text")
        sig = Signature.parse(header)
        key = self.keys.get(sig.key_id)
        if key is None:
            raise SignatureError(f"gk.sig by key {sig.key_id!r}, which is not one of the gatekeeper's")
        try:
            message = signed_bytes(
                sig.key_id, route, conversation, value, sig.verdict, repeat=sig.repeat, clears=sig.clears
            )
        except ValueError:  # a route with LF, a conversation that is not valid Unicode: nothing signed them
            raise SignatureError("gk.sig cannot cover this route and conversation") from None
        try:
            key.verify(sig.signature, message)
        except InvalidSignature:
            raise SignatureError(
                "gk.sig does not verify: not signed by the gatekeeper for this route, conversation and line"
            ) from None
        accepted = frozenset(accept)
        if sig.verdict not in accepted:
            raise SignatureError(f"the gatekeeper's verdict on this record is {sig.verdict}, not {'/'.join(accepted)}")
        return sig

    def verify_record(
        self,
        headers: Headers,
        value: bytes,
        *,
        conversation: str,
        route: str | None = None,
        accept: Iterable[str] = CLEARANCE_VERDICTS,
    ) -> Signature:
        """``verify`` for a consumed record's headers and value. ``route`` None: the record's
        ``gk.original.topic`` (the signature covers it either way; give it to bind the record to one route)."""
        hs = list(headers)
        if route is None:
            topic = header_of(hs, "gk.original.topic")
            if topic is None:
                raise SignatureError("no gk.original.topic header: the record did not come from the gatekeeper")
            route = topic.decode("utf-8", errors="replace")
        return self.verify(header_of(hs, HEADER), route=route, conversation=conversation, value=value, accept=accept)


__all__ = [
    "ALERT",
    "CANCEL",
    "CLEARANCE_VERDICTS",
    "DOMAIN",
    "DRY_RUN",
    "FIRST",
    "FORWARD",
    "HEADER",
    "KEY_ID_PATTERN",
    "NOTICE",
    "NO_CLEARANCE",
    "REPEAT",
    "KeyLoadError",
    "Signature",
    "SignatureError",
    "Signer",
    "Verifier",
    "b64url",
    "check_private_key_file",
    "clears_text",
    "new_key_pair",
    "private_key_from",
    "private_key_pem",
    "public_key_from",
    "public_key_text",
    "signed_bytes",
    "signer_for",
]
