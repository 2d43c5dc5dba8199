"""The checkpoint's key directory: Ed25519 signing keys and the manifest of their status.

Layout::

    KEYS_DIR/keyset.json           manifest: kid, public key, status, file, created_at
    KEYS_DIR/<kid hex>.pem         PKCS#8 PEM private key, mode 0600

Exactly one key is ``active`` (signs new approvals). ``rotate`` makes a new active key
and keeps the old one ``retired`` — it signs nothing new but still verifies approvals in
flight. ``revoke`` marks a key ``revoked``: it then verifies nothing. The executor trusts
the public key set that ``export-public`` writes (:meth:`KeyDirectory.public_keyset`).

A private key file whose mode allows anyone but its owner is refused: the service does
not start. This module never logs, prints or returns private key bytes.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
)

from airlock.protocol import KeySet, KeyStatus, TrustedKey, b64decode_strict, b64encode

from .errors import ConfigError
from .signer import Signer

__all__ = ["MANIFEST", "KeyDirectory", "KeyRecord", "KeyRing"]

MANIFEST: Final = "keyset.json"
_PRIVATE_MODE: Final = 0o600


@dataclass(frozen=True, slots=True)
class KeyRecord:
    kid: str
    public_key: bytes
    status: KeyStatus
    file: str
    created_at: int

    def to_value(self) -> dict[str, Any]:
        return {
            "kid": self.kid,
            "public_key": b64encode(self.public_key),
            "status": self.status.value,
            "file": self.file,
            "created_at": self.created_at,
        }


class KeyDirectory:
    """A directory of signing keys with a manifest. Reads and writes files only."""

    __slots__ = ("path",)

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    def exists(self) -> bool:
        return self.manifest_path.exists()

    def records(self) -> list[KeyRecord]:
        try:
            raw = json.loads(self.manifest_path.read_bytes())
        except FileNotFoundError:
            raise ConfigError(
                f"no key set at {self.manifest_path}: run `airlock keys generate`"
            ) from None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"key set {self.manifest_path} is unreadable: {exc}") from None
        try:
            records = [
                KeyRecord(
                    kid=str(entry["kid"]),
                    public_key=b64decode_strict(entry["public_key"]),
                    status=KeyStatus(entry["status"]),
                    file=str(entry["file"]),
                    created_at=int(entry["created_at"]),
                )
                for entry in raw["keys"]
            ]
            # Re-derive every kid: a manifest may not name a key that is not its own.
            KeySet([TrustedKey.from_raw(r.public_key, r.status) for r in records])
            for r in records:
                if TrustedKey.from_raw(r.public_key).kid != r.kid:
                    raise ValueError(f"kid {r.kid} does not match its public key")
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"key set {self.manifest_path} is malformed: {exc}") from None
        return records

    def public_keyset(self) -> KeySet:
        """Every key with its status, as the executor should trust them."""
        return KeySet([TrustedKey.from_raw(r.public_key, r.status) for r in self.records()])

    def active_signer(self) -> Signer:
        """Load the one active key, refusing a private key file not mode 0600."""
        active = [r for r in self.records() if r.status is KeyStatus.ACTIVE]
        if len(active) != 1:
            raise ConfigError(
                f"key set {self.manifest_path} has {len(active)} active keys; exactly one "
                "must be active (`airlock keys rotate` makes one)"
            )
        record = active[0]
        key_path = self.path / record.file
        try:
            mode = stat.S_IMODE(key_path.stat().st_mode)
        except OSError as exc:
            raise ConfigError(f"signing key {key_path}: {exc.strerror}") from None
        if mode & 0o077:
            raise ConfigError(
                f"signing key {key_path} has mode {mode:04o}; it must be 0600 (chmod 600 it)"
            )
        try:
            key = load_pem_private_key(key_path.read_bytes(), password=None)
        except (OSError, ValueError, TypeError) as exc:
            raise ConfigError(
                f"signing key {key_path} cannot be loaded: {type(exc).__name__}"
            ) from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ConfigError(f"signing key {key_path} is not an Ed25519 key")
        signer = Signer(key)
        if signer.keyid != record.kid:
            raise ConfigError(f"signing key {key_path} is not key {record.kid}")
        return signer

    # -- changes (the `airlock keys` commands) --------------------------------------

    def generate(self, now: int) -> KeyRecord:
        """Create the first key. Refuses if a key set already exists (use rotate)."""
        if self.exists():
            raise ConfigError(f"a key set already exists at {self.path}; use `airlock keys rotate`")
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        record = self._new_key(now)
        self._write([record])
        return record

    def rotate(self, now: int) -> KeyRecord:
        """Retire the active key (it still verifies) and make a new active one."""
        records = [
            KeyRecord(r.kid, r.public_key, KeyStatus.RETIRED, r.file, r.created_at)
            if r.status is KeyStatus.ACTIVE
            else r
            for r in self.records()
        ]
        record = self._new_key(now)
        self._write([*records, record])
        return record

    def revoke(self, kid: str) -> KeyRecord:
        records = self.records()
        if kid not in {r.kid for r in records}:
            raise ConfigError(f"no key {kid} in {self.manifest_path}")
        updated = [
            KeyRecord(r.kid, r.public_key, KeyStatus.REVOKED, r.file, r.created_at)
            if r.kid == kid
            else r
            for r in records
        ]
        self._write(updated)
        return next(r for r in updated if r.kid == kid)

    def _new_key(self, now: int) -> KeyRecord:
        private = Ed25519PrivateKey.generate()
        public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        kid = TrustedKey.from_raw(public).kid
        name = kid.removeprefix("ed25519:") + ".pem"
        pem = private.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        # O_EXCL + mode at creation: the key is never readable by others, not even briefly.
        fd = os.open(self.path / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _PRIVATE_MODE)
        with os.fdopen(fd, "wb") as handle:
            handle.write(pem)
            handle.flush()
            os.fsync(handle.fileno())
        return KeyRecord(kid, public, KeyStatus.ACTIVE, name, now)

    def _write(self, records: list[KeyRecord]) -> None:
        data = json.dumps({"keys": [r.to_value() for r in records]}, indent=2).encode() + b"\n"
        fd, tmp = tempfile.mkstemp(dir=self.path, prefix=".keyset-")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, self.manifest_path)


class KeyRing:
    """The running service's view of a key directory: the active signer, reloaded on change.

    ``airlock keys rotate|revoke`` rewrite the manifest while the checkpoint runs; the
    next signature uses the new active key without a restart. A manifest that changes to
    something unusable (no active key) makes signing fail closed until it is fixed.
    """

    __slots__ = ("_directory", "_lock", "_signer", "_stamp")

    def __init__(self, directory: KeyDirectory) -> None:
        self._directory = directory
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._signer: Signer | None = None
        self.signer()  # refuse to start without a usable active key

    @property
    def directory(self) -> KeyDirectory:
        return self._directory

    def _manifest_stamp(self) -> tuple[int, int, int]:
        # The manifest is replaced by rename, so a change always brings a new inode even
        # when two writes fall inside the file system's timestamp granularity.
        try:
            st = self._directory.manifest_path.stat()
        except OSError:
            return (-1, -1, -1)
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def signer(self) -> Signer:
        stamp = self._manifest_stamp()
        with self._lock:
            if self._signer is None or stamp != self._stamp:
                self._signer = None
                self._stamp = stamp
                self._signer = self._directory.active_signer()
            return self._signer

    def public_keyset(self) -> KeySet:
        return self._directory.public_keyset()
