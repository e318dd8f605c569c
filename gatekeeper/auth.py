"""Sender authentication: each agent signs the records it produces with its own Ed25519 key; the gatekeeper, which
holds only the agents' public keys, verifies the signature before the line is decided.

The signature is a record header (``sender_auth.header``, ``rw-sig`` by default) whose value is ASCII::

    v2 <key id> <signature>

``<key id>`` names a configured key (``sender_auth.keys[].id``: 1-64 of ``A-Z a-z 0-9 . _ : -``), ``<signature>`` is
the 64-byte Ed25519 signature in base64url without padding (86 characters). The signed bytes bind the record's
route, its conversation and its line::

    b"rw-sig-v2\x00" + route (the route's input topic, ASCII) + b"\x00" + conversation (UTF-8) + b"\x00" + value

``route`` is the input topic the record was produced to; ``conversation`` is the conversation the gatekeeper reads
from the record: its key (UTF-8), else the route's ``conversation_header``; ``value`` is the record's value, byte for
byte. A line copied to another route or another conversation, or changed by one byte, no longer verifies. A
conversation containing NUL is refused (the encoding would be ambiguous); a topic name has no NUL.

A key may be limited to routes (``sender_auth.keys[].routes``): a signature by that key on any other route is
refused (``sender-auth-wrong-route``), even a valid one.

Version 1 (``v1 <key id> <signature>`` over ``b"rw-sig-v1\x00" + conversation + b"\x00" + value``) did not cover the
route: a signed thread copied byte for byte onto a second route verified there too. It is refused
(``sender-auth-version``) with a message saying what to change: agents sign with ``sign(..., route=...)``.

``verify`` is pure (no I/O, no clock): it returns a ``SenderProof``, the agent whose key signed the record or the
code of what failed; the decision (``policy.decide``) compares that agent with the line's ``from=``. It never
raises on what a record carries, and its messages never echo the signature.

For agents and tests, ``sign`` makes the header value::

    from gatekeeper.auth import sign, private_key_from_text
    key = private_key_from_text(open("payer.key").read())
    headers = [("rw-sig", sign(key, "payer-1", "c-17", line.encode(), route="agents.pay").encode())]
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from gatekeeper.config import ConfigError, SenderAuthSettings, SenderKey, load_entries
from gatekeeper.policy.model import SenderProof
from gatekeeper.verdicts import b64url, private_key_from, private_key_pem

VERSION = "v2"
DOMAIN = b"rw-sig-v2\x00"
OLD_VERSIONS = frozenset({"v1"})
KEY_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
SIGNATURE_CHARS = 86  # 64 bytes, base64url without padding
_SIGNATURE = re.compile(r"[A-Za-z0-9_-]+")

MISSING = "sender-auth-missing"
MALFORMED = "sender-auth-malformed"
UNKNOWN_KEY = "sender-auth-unknown-key"
BAD_SIGNATURE = "sender-auth-bad-signature"
OLD_VERSION = "sender-auth-version"
WRONG_ROUTE = "sender-auth-wrong-route"


def signed_bytes(route: str, conversation: str, value: bytes) -> bytes:
    """The exact bytes an agent signs for a record produced to ``route`` (the route's input topic) in
    ``conversation`` whose value is ``value``."""
    return DOMAIN + route.encode("utf-8") + b"\x00" + conversation.encode("utf-8") + b"\x00" + value


def sign(private_key: Ed25519PrivateKey, key_id: str, conversation: str, value: bytes | str, *, route: str) -> str:
    """The signature header's value (``v2 <key id> <signature>``) for a record of ``conversation`` with ``value``
    (a ``str`` is encoded UTF-8) produced to the input topic ``route``: what an agent puts in the ``rw-sig`` header
    of the record it produces."""
    if not KEY_ID.fullmatch(key_id):
        raise ValueError(f"key id {key_id!r}: 1-64 of A-Z a-z 0-9 . _ : -")
    if "\x00" in conversation:
        raise ValueError("a conversation id cannot contain NUL")
    if not route or "\x00" in route:
        raise ValueError("route: the route's input topic, not empty, no NUL")
    raw = value.encode("utf-8") if isinstance(value, str) else value
    return f"{VERSION} {key_id} {b64url(private_key.sign(signed_bytes(route, conversation, raw)))}"


# ---------------------------------------------------------------- keys


def public_key_raw(key: Ed25519PublicKey) -> bytes:
    """A public key's raw 32 bytes."""
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def public_key_text(key: Ed25519PublicKey) -> str:
    """A public key as configured: standard base64 of its raw 32 bytes."""
    return base64.b64encode(public_key_raw(key)).decode("ascii")


def private_key_text(key: Ed25519PrivateKey) -> str:
    """A private key as ``gatekeeper keys generate`` writes it: PKCS#8 PEM, unencrypted."""
    return private_key_pem(key).decode("ascii")


def private_key_from_text(text: str) -> Ed25519PrivateKey:
    """A private key from PKCS#8 PEM (what ``keys generate`` writes) or base64 of the raw 32-byte seed. Raises
    ``verdicts.KeyLoadError`` (a ValueError)."""
    return private_key_from(text.encode("utf-8"))


def parse_public_key(text: str) -> Ed25519PublicKey:
    """A configured public key (base64 of the raw 32 bytes). Raises ValueError."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("public_key: not base64") from None
    if len(raw) != 32:
        raise ValueError(f"public_key: {len(raw)} bytes; an Ed25519 public key is 32")
    return Ed25519PublicKey.from_public_bytes(raw)


@dataclass(frozen=True, slots=True)
class _Key:
    agent: str
    public: Ed25519PublicKey
    routes: frozenset[str] | None = None  # the routes (input topics) it signs for; None: every route


class KeyRing:
    """The agents' public keys, by key id (``sender_auth.keys`` and ``sender_auth.keys_file``)."""

    def __init__(self, keys: Iterable[SenderKey]) -> None:
        self._keys: dict[str, _Key] = {}
        owners: dict[bytes, tuple[str, str]] = {}  # raw public key: (key id, agent)
        for k in keys:
            if k.id in self._keys:
                raise ConfigError(f"sender_auth: key id {k.id} is configured twice")
            routes = None if k.routes is None else frozenset(k.routes)
            public = parse_public_key(k.public_key)
            raw = public_key_raw(public)
            first = owners.setdefault(raw, (k.id, k.agent))
            if first[1] != k.agent:
                raise ConfigError(
                    f"sender_auth: key ids {first[0]} (agent {first[1]}) and {k.id} (agent {k.agent}) have the same "
                    "public key: either agent could sign as the other. Give each agent its own key pair (gatekeeper "
                    "keys generate) and remove the entry that is not that agent's"
                )
            self._keys[k.id] = _Key(k.agent, public, routes)

    @classmethod
    def from_settings(cls, settings: SenderAuthSettings) -> KeyRing:
        keys = list(settings.keys)
        if settings.keys_file is not None:
            keys += load_keys_file(settings.keys_file)
        return cls(keys)

    def __len__(self) -> int:
        return len(self._keys)

    def publics(self) -> dict[bytes, tuple[str, str]]:
        """The raw public keys configured, each with (key id, agent)."""
        return {public_key_raw(k.public): (kid, k.agent) for kid, k in self._keys.items()}

    def key(self, key_id: str) -> _Key | None:
        return self._keys.get(key_id)

    def check(
        self, headers: Iterable[tuple[str, bytes]], name: str, route: str, conversation: str, value: bytes
    ) -> SenderProof:
        return check_record(self, headers, name, route, conversation, value)


def load_keys_file(path: Path) -> list[SenderKey]:
    """The entries of ``sender_auth.keys_file`` (YAML or JSON: a list of key entries, or ``{keys: [...]}``).
    Raises ConfigError, also when it holds no key."""
    return load_entries(path, SenderKey, "sender_auth.keys_file", "keys", empty_ok=False)


# ---------------------------------------------------------------- verifying


def _refused(code: str, detail: str) -> SenderProof:
    return SenderProof(failure=code, detail=detail)


def verify(keys: KeyRing, header: bytes | str | None, route: str, conversation: str, value: bytes) -> SenderProof:
    """Who signed a record: ``SenderProof(agent=..., key_id=...)`` when ``header`` (the signature header's value)
    is a valid signature of a configured key, allowed on ``route``, over ``route``, ``conversation`` and ``value``,
    else ``SenderProof(failure=code, detail=...)`` with ``code`` one of ``sender-auth-missing``, ``-malformed``,
    ``-version``, ``-unknown-key``, ``-wrong-route``, ``-bad-signature``. Pure; never raises on what the record
    carries."""
    if header is None:
        return _refused(MISSING, "the record has no signature header: this route takes signed lines only")
    if isinstance(header, (bytes, bytearray, memoryview)):
        try:
            header = bytes(header).decode("ascii")
        except UnicodeDecodeError:
            return _refused(MALFORMED, "the signature header is not ASCII")
    if not isinstance(header, str) or not header.isascii():
        return _refused(MALFORMED, "the signature header is not ASCII")
    parts = header.split(" ")
    if len(parts) == 3 and parts[0] in OLD_VERSIONS:
        return _refused(
            OLD_VERSION,
            f"the signature is format {parts[0]}, which does not cover the route; sign with {VERSION} "
            "(gatekeeper.auth.sign with route=, over the route, the conversation and the line)",
        )
    if len(parts) != 3 or parts[0] != VERSION:
        return _refused(MALFORMED, f"the signature header is not '{VERSION} <key id> <signature>'")
    _, key_id, sig_text = parts
    if not KEY_ID.fullmatch(key_id):
        return _refused(MALFORMED, "the signature header's key id is not 1-64 of A-Z a-z 0-9 . _ : -")
    if len(sig_text) != SIGNATURE_CHARS or not _SIGNATURE.fullmatch(sig_text):
        return _refused(MALFORMED, f"key {key_id}: the signature is not 64 bytes of base64url without padding")
    signature = base64.urlsafe_b64decode(sig_text + "==")
    found = keys.key(key_id)
    if found is None:
        return _refused(UNKNOWN_KEY, f"key id {key_id} is not a configured sender key")
    agent, public = found.agent, found.public
    if found.routes is not None and route not in found.routes:
        return _refused(
            WRONG_ROUTE,
            f"key {key_id} (agent {agent}) may sign on {', '.join(sorted(found.routes))} only, not on {route}",
        )
    if "\x00" in conversation or "\x00" in route:
        return _refused(MALFORMED, "the conversation id contains NUL: it cannot be signed unambiguously")
    try:
        message = signed_bytes(route, conversation, value)
    except UnicodeEncodeError:
        return _refused(MALFORMED, "the conversation id is not valid Unicode: it cannot be signed")
    try:
        public.verify(signature, message)
    except InvalidSignature:
        return _refused(
            BAD_SIGNATURE,
            f"the signature of key {key_id} (agent {agent}) does not verify over this record's route, conversation "
            "and line",
        )
    return SenderProof(agent=agent, key_id=key_id)


def check_record(
    keys: KeyRing, headers: Iterable[tuple[str, bytes]], name: str, route: str, conversation: str, value: bytes
) -> SenderProof:
    """``verify`` on a record's headers: the one ``name`` header (two or more are refused as malformed)."""
    found = [v for k, v in headers if k == name]
    if len(found) > 1:
        return _refused(MALFORMED, f"the record has {len(found)} {name} headers; a signed record has one")
    if found and found[0] is None:  # a Kafka header may carry no value at all
        return _refused(MALFORMED, f"the record's {name} header has no value")
    return verify(keys, found[0] if found else None, route, conversation, value)


def generate() -> Ed25519PrivateKey:
    """A new Ed25519 private key."""
    return Ed25519PrivateKey.generate()


__all__ = [
    "BAD_SIGNATURE",
    "DOMAIN",
    "MALFORMED",
    "MISSING",
    "OLD_VERSION",
    "UNKNOWN_KEY",
    "WRONG_ROUTE",
    "KeyRing",
    "check_record",
    "generate",
    "load_keys_file",
    "parse_public_key",
    "private_key_from_text",
    "private_key_text",
    "public_key_raw",
    "public_key_text",
    "sign",
    "signed_bytes",
    "verify",
]
