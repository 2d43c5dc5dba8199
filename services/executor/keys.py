"""The executor's trusted approval keys, re-read from their file when it changes.

An operator who revokes or rotates the checkpoint's signing key re-exports the public
key set (``airlock keys export-public``) to the file the executor reads. A running executor
must stop trusting a revoked key at its next bundle, not at its next restart, so
:class:`TrustedKeysFile` looks at the file's identity (inode, size, modification time)
before every execution and parses it again when any of them changed.

It fails closed: while the file is missing or does not parse as a key set, every
execution raises :class:`TrustedKeysUnavailable` before anything is recorded or
consumed — the daemon then keeps the bundle unacknowledged and retries after its
backoff, so nothing is lost and nothing is verified against a stale key set. Each key
set the executor starts trusting is recorded in the audit chain by the executor.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from airlock.protocol import KeySet, KeySetError

from .errors import ExecutorError

__all__ = ["KeySetVersion", "TrustedKeysFile", "TrustedKeysUnavailable"]


class TrustedKeysUnavailable(ExecutorError):
    """The trusted key file is missing or malformed: the executor verifies nothing."""


@dataclass(frozen=True, slots=True)
class KeySetVersion:
    """One parsed version of the file: the key set and the SHA-256 of its bytes."""

    keys: KeySet
    sha256: str


class TrustedKeysFile:
    """A key set file, parsed again whenever its inode, size or mtime changes."""

    def __init__(self, path: Path) -> None:
        self._path = path
        # One tuple, replaced whole: the daemon's threads read it without a lock.
        self._cached: tuple[tuple[int, int, int], KeySetVersion] | None = None

    @property
    def path(self) -> Path:
        return self._path

    def current(self) -> KeySetVersion:
        """The key set as the file holds it now; raises TrustedKeysUnavailable."""
        try:
            st = os.stat(self._path)
        except OSError as exc:
            self._forget()
            raise TrustedKeysUnavailable(
                f"trusted key set {str(self._path)!r} unreadable: {exc.strerror or exc}"
            ) from None
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        cached = self._cached
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            data = self._path.read_bytes()
            keys = KeySet.from_json_bytes(data)
        except (OSError, KeySetError) as exc:
            # A half-written file parses again at the next bundle; until then, nothing.
            self._forget()
            raise TrustedKeysUnavailable(
                f"trusted key set {str(self._path)!r} is not a valid key set: {exc}"
            ) from None
        if len(keys) == 0:
            self._forget()
            raise TrustedKeysUnavailable(f"trusted key set {str(self._path)!r} has no keys")
        version = KeySetVersion(keys, "sha256:" + hashlib.sha256(data).hexdigest())
        self._cached = (stamp, version)
        return version

    def _forget(self) -> None:
        self._cached = None
