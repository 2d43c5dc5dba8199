"""Signed receipts: the executor signs its own DSSE statement of what it did with one bundle.

Each terminal outcome (succeeded, failed, in_doubt, refused, and a human's resolution of
an in_doubt row) produces a receipt signed with the executor's **receipt** key — an
Ed25519 key of its own, never the approval key — naming the approval, the action hash,
the outcome, the refusal code, the cloud request id, the time and the executor's audit
chain head at that moment, so a receipt can be checked against the audit chain later.
The statement and its verification are the kernel's (:mod:`airlock.protocol`,
docs/protocol.md#receipts); this module holds the key.

The receipt key file must be a regular file readable by its owner only (0600 or 0400);
anything else is refused at load. This module never logs or returns key material.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
)

from airlock import protocol
from airlock.protocol import (
    RECEIPT_PAYLOAD_TYPE,
    RECEIPT_TYPE,
    AuditHead,
    Envelope,
    KeySet,
    Receipt,
    Resolution,
    Signature,
    TrustedKey,
    key_id,
    pae,
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
    """:func:`airlock.protocol.verify_receipt`'s receipt, or :class:`InvalidReceipt`
    (the executor's error tree)."""
    try:
        return protocol.verify_receipt(data, keys, now).receipt
    except protocol.InvalidReceipt as exc:
        raise InvalidReceipt(str(exc)) from None
