"""Signed receipts: the executor's own DSSE statement of what it did with one bundle.

Each terminal outcome (succeeded, failed, in_doubt, refused, and a human's resolution of
an in_doubt row) produces a receipt signed with the executor's **receipt** key — an
Ed25519 key of its own, never the approval key — naming the approval, the action hash,
the outcome, the refusal code, the cloud request id, the time and the executor's audit
chain head at that moment, so a receipt can be checked against the audit chain later.

The receipt key file must be a regular file readable by its owner only (0600 or 0400);
anything else is refused at load. This module never logs or returns key material.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated, Final, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from airlock.protocol import (
    Envelope,
    KeySet,
    Refused,
    Signature,
    TrustedKey,
    canonical_bytes,
    key_id,
    loads_strict,
    pae,
    verify_envelope,
)

from .errors import ConfigError, InvalidReceipt

__all__ = [
    "RECEIPT_PAYLOAD_TYPE",
    "RECEIPT_TYPE",
    "AuditHead",
    "Receipt",
    "ReceiptSigner",
    "Resolution",
    "generate_receipt_key",
    "verify_receipt",
]

RECEIPT_TYPE: Final = "airlock.receipt/v1"
RECEIPT_PAYLOAD_TYPE: Final = "application/vnd.airlock.receipt.v1+json"
RECEIPT_MAX_BYTES: Final = 64 * 1024

Outcome = Literal["succeeded", "failed", "in_doubt", "refused", "resolved"]


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class AuditHead(_Wire):
    """The executor audit chain's last row when the receipt was made."""

    seq: Annotated[int, Field(ge=0)]
    hash: Annotated[str, Field(min_length=1, max_length=100)]


class Resolution(_Wire):
    """A human's decision on an in_doubt row."""

    decision: Literal["happened", "did_not_happen"]
    by: Annotated[str, Field(min_length=1, max_length=128)]
    at: Annotated[int, Field(ge=0)]
    note: Annotated[str, Field(max_length=2000)]


class Receipt(_Wire):
    type: Literal["airlock.receipt/v1"]
    executor: str  # this executor's audience
    approval_id: str | None  # None when the bundle was refused before its statement parsed
    action_hash: str | None
    outcome: Outcome
    verified: bool  # succeeded because live state showed the effect, not the call's answer
    refusal_code: str | None
    cloud_request_id: str | None
    resolution: Resolution | None
    at: Annotated[int, Field(ge=0)]
    audit_head: AuditHead
    detail: Annotated[str, Field(max_length=2000)]

    def canonical_bytes(self) -> bytes:
        return canonical_bytes(self.model_dump(mode="json"))


def _check_key_file(path: Path) -> None:
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ConfigError(f"receipt key {path} does not exist") from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"receipt key {path} is not a regular file")
    if st.st_mode & 0o077:
        raise ConfigError(
            f"receipt key {path} has mode {stat.S_IMODE(st.st_mode):04o}; it must be 0600"
        )


class ReceiptSigner:
    """Signs receipts with the executor's Ed25519 receipt key."""

    __slots__ = ("_key", "keyid", "public_raw")

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._key = private_key
        self.public_raw = private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.keyid = key_id(self.public_raw)

    @classmethod
    def from_file(cls, path: Path) -> ReceiptSigner:
        """Load a PKCS#8 PEM Ed25519 key, refusing a file others could read."""
        _check_key_file(path)
        key = load_pem_private_key(path.read_bytes(), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ConfigError(f"receipt key {path} is not an Ed25519 key")
        return cls(key)

    def trusted_key(self) -> TrustedKey:
        return TrustedKey.from_raw(self.public_raw)

    def sign(self, receipt: Receipt) -> Envelope:
        payload = receipt.canonical_bytes()
        sig = self._key.sign(pae(RECEIPT_PAYLOAD_TYPE, payload))
        return Envelope(RECEIPT_PAYLOAD_TYPE, payload, (Signature(self.keyid, sig),))

    def __repr__(self) -> str:  # never show key material
        return f"ReceiptSigner(keyid={self.keyid!r})"


def generate_receipt_key(path: Path) -> ReceiptSigner:
    """Create a new receipt key at ``path`` (mode 0600, never overwriting a file)."""
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    # O_EXCL: an existing key is never replaced; 0o600 from the start, no chmod window.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    return ReceiptSigner(key)


def verify_receipt(data: bytes, keys: KeySet, now: int) -> Receipt:
    """Verify a receipt envelope against trusted receipt keys and parse its payload."""
    try:
        envelope = Envelope.from_json_bytes(
            data, payload_type=RECEIPT_PAYLOAD_TYPE, max_bytes=RECEIPT_MAX_BYTES
        )
        verify_envelope(envelope, keys, now)
        value = loads_strict(envelope.payload, max_bytes=RECEIPT_MAX_BYTES)
    except Refused as exc:
        raise InvalidReceipt(f"{exc.code.value}: {exc.detail}") from None
    try:
        return Receipt.model_validate(value)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "receipt"
        raise InvalidReceipt(f"not a receipt/v1: {where}: {err['msg']}") from None
