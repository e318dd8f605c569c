"""Approvals with provenance: the approving system signs each record it approves; the gatekeeper, which holds only
the approvers' public keys, honours a record only with a valid signature (``records.require_signed``).

Without it a record is only data in Redis: whoever can write the gatekeeper's keys there (a leaked password, a
Redis user with too many rights, a script run by mistake) can create an approval, and a handoff paying 99999.00 to a
new account would be forwarded. With it, a record created or changed by anyone but an approver is refused.

A record's signature is a string in the record itself (``"signature"`` in a records file, ``sig`` in Redis)::

    v1 <key id> <signature>

``<key id>`` names a configured approver key (``records.approvers[].id``: 1-64 of ``A-Z a-z 0-9 . _ : -``),
``<signature>`` is the 64-byte Ed25519 signature in base64url without padding. The signed bytes are the record as
the gatekeeper keeps it (``Record.to_dict`` without the signature), as canonical JSON (keys sorted, no spaces,
UTF-8)::

    b"rw-record-v1\\x00" + {"ask": ..., "expect_acc": [...], "item": ..., "resolved": {...}, "values": {...}}

so the item, the ask, every value the handoff must carry, the values the receiver resolves and the withheld
acceptance criteria are all covered: changing any of them, or moving the signature to another record, breaks it.

The check is pure (no I/O, no clock) and runs twice: when ``gatekeeper records load`` stores a record (a bad one is
refused there, with a reason), and when a handoff is checked against it (the decision refuses a handoff whose
record does not verify, dead-letter ``no-record`` with the problem ``record-unsigned`` or ``record-signature``), so
a record written into Redis by any other means is caught. Verifications are cached by the record's bytes, so a
busy record costs one Ed25519 verification, not one per handoff.

Approvers sign with ``gatekeeper records sign`` (or ``sign_record`` in their own code) and a key made by
``gatekeeper keys generate --approver NAME``.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import msgspec
import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from gatekeeper.auth import KeyRing, parse_public_key, public_key_raw
from gatekeeper.config import ApproverKey, ConfigError, RecordSettings, Settings, load_entries
from gatekeeper.policy.state import Record
from gatekeeper.verdicts import b64url
from rwcore import Problem

VERSION = "v1"
DOMAIN = b"rw-record-v1\x00"
KEY_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_SIGNATURE = re.compile(r"[A-Za-z0-9_-]{86}")  # 64 bytes, base64url without padding

UNSIGNED = "record-unsigned"
BAD_SIGNATURE = "record-signature"
_CACHE_MAX = 4_096


def record_bytes(record: Record) -> bytes:
    """The exact bytes an approver signs for ``record`` (see the module docstring)."""
    body = record.to_dict()
    body.pop("sig", None)
    return DOMAIN + orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def sign_record(private_key: Ed25519PrivateKey, key_id: str, record: Record) -> Record:
    """``record`` with its signature by the approver key ``key_id`` (any signature it had is replaced)."""
    if not KEY_ID.fullmatch(key_id):
        raise ValueError(f"key id {key_id!r}: 1-64 of A-Z a-z 0-9 . _ : -")
    unsigned = msgspec.structs.replace(record, signature=None)
    return msgspec.structs.replace(
        record, signature=f"{VERSION} {key_id} {b64url(private_key.sign(record_bytes(unsigned)))}"
    )


@dataclass(frozen=True, slots=True)
class _Key:
    approver: str
    public: Ed25519PublicKey


def _problem(code: str, record: Record, message: str) -> Problem:
    return Problem(code=code, message=message, tier="record", slot="item", expected=None, got=record.item)


class ApproverRing:
    """The approvers' public keys, and whether a record must be signed by one of them (``records.*``)."""

    def __init__(self, keys: Iterable[ApproverKey], *, require_signed: bool = False) -> None:
        self.require_signed = require_signed
        self._keys: dict[str, _Key] = {}
        owners: dict[bytes, tuple[str, str]] = {}  # raw public key: (key id, approver)
        for k in keys:
            if k.id in self._keys:
                raise ConfigError(f"records: approver key id {k.id} is configured twice")
            public = parse_public_key(k.public_key)
            first = owners.setdefault(public_key_raw(public), (k.id, k.approver))
            if first[1] != k.approver:
                raise ConfigError(
                    f"records: approver key ids {first[0]} (approver {first[1]}) and {k.id} (approver {k.approver}) "
                    "have the same public key: either approver could sign as the other. Give each approver its own "
                    "key pair (gatekeeper keys generate --approver NAME) and remove the entry that is not its own"
                )
            self._keys[k.id] = _Key(k.approver, public)
        self._verified: OrderedDict[tuple[bytes, str], str | None] = OrderedDict()

    @classmethod
    def from_settings(cls, settings: RecordSettings) -> ApproverRing:
        keys = list(settings.approvers)
        if settings.approvers_file is not None:
            keys += load_entries(
                settings.approvers_file, ApproverKey, "records.approvers_file", "approvers", empty_ok=False
            )
        if settings.require_signed and not keys:
            raise ConfigError(
                "records.require_signed is on but no approver key is configured: every record would be refused. "
                "Add the approving systems' public keys to records.approvers (gatekeeper keys generate --approver "
                "NAME makes a pair), or set records.require_signed: false to honour unsigned records (a trial)"
            )
        return cls(keys, require_signed=settings.require_signed)

    def __len__(self) -> int:
        return len(self._keys)

    def publics(self) -> dict[bytes, tuple[str, str]]:
        """The raw public keys configured, each with (key id, approver)."""
        return {public_key_raw(k.public): (kid, k.approver) for kid, k in self._keys.items()}

    def check(self, record: Record) -> Problem | None:
        """None when ``record`` may be honoured: signed by a configured approver key over exactly its content, or
        unsigned where signatures are not required. Else the problem (``record-unsigned``, ``record-signature``),
        whose message never echoes the signature. Pure; never raises on what the record carries."""
        sig = record.signature
        if sig is None:
            if not self.require_signed:
                return None
            return _problem(
                UNSIGNED,
                record,
                f"the record for item {record.item} ask {record.ask} is not signed by an approver "
                "(records.require_signed): it is not honoured",
            )
        body = record_bytes(msgspec.structs.replace(record, signature=None))
        cache_key = (body, sig)
        if cache_key in self._verified:
            self._verified.move_to_end(cache_key)
            failure = self._verified[cache_key]
        else:
            failure = self._verify(body, sig)
            self._verified[cache_key] = failure
            if len(self._verified) > _CACHE_MAX:
                self._verified.popitem(last=False)
        if failure is None:
            return None
        return _problem(
            BAD_SIGNATURE,
            record,
            f"the record for item {record.item} ask {record.ask} has a signature that does not hold: {failure}; "
            "it is not honoured",
        )

    def _verify(self, body: bytes, sig: str) -> str | None:
        """What is wrong with ``sig`` over ``body`` (None: it verifies)."""
        parts = sig.split(" ")
        if len(parts) != 3 or parts[0] != VERSION:
            return f"not '{VERSION} <key id> <signature>'"
        _, key_id, text = parts
        if not KEY_ID.fullmatch(key_id) or not _SIGNATURE.fullmatch(text):
            return "a malformed key id or signature"
        key = self._keys.get(key_id)
        if key is None:
            return f"key {key_id} is not a configured approver key"
        try:
            raw = base64.urlsafe_b64decode(text + "==")
        except (binascii.Error, ValueError):
            return "a malformed signature"
        try:
            key.public.verify(raw, body)
        except InvalidSignature:
            return f"key {key_id} (approver {key.approver}) did not sign this record as it is"
        return None


def check_shared_keys(senders: KeyRing, approvers: ApproverRing) -> None:
    """Refuse a public key that is both an agent's (``sender_auth``) and an approver's (``records.approvers``): the
    agent could sign approvals, the approver lines. ``ConfigError`` naming both key ids, never the key."""
    theirs = approvers.publics()
    for raw, (kid, agent) in sorted(senders.publics().items(), key=lambda kv: kv[1]):
        found = theirs.get(raw)
        if found is not None:
            raise ConfigError(
                f"sender_auth key id {kid} (agent {agent}) and records approver key id {found[0]} (approver "
                f"{found[1]}) have the same public key: the agent could sign approvals of its own handoffs. An "
                "approving system and an agent each have their own key pair (gatekeeper keys generate)"
            )


def check_key_settings(settings: Settings) -> None:
    """The daemon's key checks at start, for every key configured whether a route uses it or not: the keys files
    load and hold keys, no public key is two agents' or two approvers', none is both an agent's and an approver's,
    and the signing key (``signing.private_key_file``) loads and is readable by its owner (and group) only. Raises
    ``ConfigError``."""
    from gatekeeper.verdicts import signer_for

    auth = settings.sender_auth
    senders = KeyRing.from_settings(auth) if auth.keys or auth.keys_file is not None else KeyRing(())
    records = settings.records
    if records.require_signed or records.approvers or records.approvers_file is not None:
        check_shared_keys(senders, ApproverRing.from_settings(records))
    signer_for(settings.signing)


__all__ = [
    "BAD_SIGNATURE",
    "DOMAIN",
    "UNSIGNED",
    "VERSION",
    "ApproverRing",
    "check_key_settings",
    "check_shared_keys",
    "record_bytes",
    "sign_record",
]
