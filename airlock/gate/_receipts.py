"""The gate's receipt key: it signs what the gate did with each approval.

A gate holds exactly one private key, this one (SECURITY.md): an Ed25519 key of its own,
never an approval key, in a PKCS#8 PEM file readable by its owner only (0600 or 0400);
anything else is refused at load. The receipt it signs is the kernel's
(:class:`airlock.protocol.Receipt`, ``executor`` = the gate's audience), so
``airlock receipts verify`` and the checkpoint verify it as an executor's, against the
gate's public key. Never logs or returns key material.
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

from airlock.protocol import (
    RECEIPT_PAYLOAD_TYPE,
    Envelope,
    KeySet,
    Receipt,
    Signature,
    TrustedKey,
    key_id,
    pae,
)

from .errors import ConfigError

__all__ = ["ReceiptSigner", "generate_receipt_key"]


class ReceiptSigner:
    """Signs receipts with the gate's Ed25519 receipt key."""

    __slots__ = ("_key", "keyid", "public_raw")

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._key = private_key
        self.public_raw = private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.keyid = key_id(self.public_raw)

    @classmethod
    def from_file(cls, path: Path) -> ReceiptSigner:
        """Load a PKCS#8 PEM Ed25519 key, refusing a file others could read.

        Raises:
            ConfigError: missing, not a regular file, readable by others, or not Ed25519.
        """
        try:
            st = path.stat()
        except FileNotFoundError:
            raise ConfigError(f"E_CONFIG: receipt key {path} does not exist") from None
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"E_CONFIG: receipt key {path} is not a regular file")
        if st.st_mode & 0o077:
            mode = stat.S_IMODE(st.st_mode)
            raise ConfigError(f"E_CONFIG: receipt key {path} has mode {mode:04o}, not 0600")
        try:
            key = load_pem_private_key(path.read_bytes(), password=None)
        except ValueError:
            raise ConfigError(f"E_CONFIG: receipt key {path} is not a PKCS#8 PEM key") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ConfigError(f"E_CONFIG: receipt key {path} is not an Ed25519 key")
        return cls(key)

    def trusted_key(self) -> TrustedKey:
        """The public half, as a verifier trusts it."""
        return TrustedKey.from_raw(self.public_raw)

    def key_set(self) -> KeySet:
        """The key set that verifies this gate's receipts."""
        return KeySet([self.trusted_key()])

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
