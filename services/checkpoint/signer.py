"""The approval signer: the only code that turns a statement into a signed DSSE envelope.

It holds an Ed25519 private key in memory and never writes it anywhere; loading the key
from a 0600 file is the caller's job. The kernel verifies; only this module signs
approvals.
"""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from airlock.protocol import (
    APPROVAL_PAYLOAD_TYPE,
    ApprovalStatement,
    Envelope,
    KeyStatus,
    Signature,
    ToolApprovalStatement,
    TrustedKey,
    key_id,
    pae,
)

__all__ = ["Signer"]


class Signer:
    """Signs approval statements with one Ed25519 key."""

    __slots__ = ("_key", "keyid", "public_raw")

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._key = private_key
        self.public_raw = private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.keyid = key_id(self.public_raw)

    @classmethod
    def from_seed(cls, seed: bytes) -> Signer:
        """From a raw 32-byte RFC 8032 seed (used for key files and fixed test vectors)."""
        return cls(Ed25519PrivateKey.from_private_bytes(seed))

    def trusted_key(self, status: KeyStatus = KeyStatus.ACTIVE) -> TrustedKey:
        return TrustedKey.from_raw(self.public_raw, status)

    def sign_payload(self, payload_type: str, payload: bytes) -> Envelope:
        sig = self._key.sign(pae(payload_type, payload))
        return Envelope(payload_type, payload, (Signature(self.keyid, sig),))

    def sign_statement(self, statement: ApprovalStatement | ToolApprovalStatement) -> Envelope:
        """DSSE over PAE(approval payload type, JCS(statement)): a cloud approval or a
        tool call's, in the same payload type (the statement's ``type`` tells them apart)."""
        return self.sign_payload(APPROVAL_PAYLOAD_TYPE, statement.canonical_bytes())

    def __repr__(self) -> str:  # never show key material
        return f"Signer(keyid={self.keyid!r})"
