"""The checkpoint's key directory: Ed25519 signing keys and the manifest of their status.

Layout::

    KEYS_DIR/keyset.json           manifest: kid, public key, status, file, created_at
                                   (and not_after, for a retired key)
    KEYS_DIR/<kid hex>.pem         PKCS#8 PEM private key, mode 0600 (the active key's,
                                   and the staged key's)
    KEYS_DIR/.keyset.lock          flock(2) taken around every change of the manifest

Exactly one key is ``active`` (signs new approvals). Rotation has two phases, so that no
executor meets a key it was not given: ``stage`` makes the ``next`` key, which signs
nothing but is in the public key set, so executors trust it ahead of time; ``rotate``
then makes it active and keeps the old one ``retired`` — it signs nothing new but still
verifies the approvals in flight, until its ``not_after`` (the rotation, plus the
execution window, plus clock skew), after which executors refuse it (E_KEY_REVOKED).
``rotate`` with no staged key is refused unless asked for at once (``immediate``): such a
key is refused by every executor (E_UNKNOWN_KEY) until the key set reaches it. ``revoke``
marks a key ``revoked``: it then verifies nothing. The checkpoint signs only with the
active key, so rotate and revoke delete the private key of the key they retire or
revoke. The executor trusts the public key set that ``export-public`` writes
(:meth:`KeyDirectory.public_keyset`).

Every change is a read-modify-write of the manifest under an exclusive lock, so a revoke
racing a rotate is never undone by it; stage, rotate and revoke record the change in the
checkpoint's audit chain (:class:`KeyAudit`) before the manifest is replaced.

A private key file whose mode allows anyone but its owner is refused: the service does
not start. This module never logs, prints or returns private key bytes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import stat
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
)

from airlock.events import CheckpointEvent
from airlock.protocol import (
    KeySet,
    KeySetError,
    KeyStatus,
    TrustedKey,
    b64decode_strict,
    b64encode,
)

from .errors import ConfigError
from .signer import Signer

__all__ = ["MANIFEST", "RETIRE_SKEW", "KeyAudit", "KeyDirectory", "KeyRecord", "KeyRing"]

MANIFEST: Final = "keyset.json"
_LOCK: Final = ".keyset.lock"
_PRIVATE_MODE: Final = 0o600
#: Clock skew allowed on top of the execution window before a retired key expires: the
#: executor's default ``AIRLOCK_EXECUTOR_SKEW``. The executor compares both an approval's
#: ``expires_at`` and a key's ``not_after`` with its own clock, so its skew against the
#: checkpoint cancels out; this covers the host that runs ``keys rotate`` reading another
#: clock than the checkpoint that signs, and a signature begun as the rotation landed.
RETIRE_SKEW: Final = 30
#: How often the running checkpoint reads a manifest that changes while it reads it.
_RELOAD_ATTEMPTS: Final = 3


class KeyAudit(Protocol):
    """Where key changes are recorded: the checkpoint's audit chain (the CLI's port)."""

    def record(self, event: Mapping[str, Any]) -> None:
        """Commit ``event`` durably, or raise: then the change is not made."""


@dataclass(frozen=True, slots=True)
class KeyRecord:
    kid: str
    public_key: bytes
    status: KeyStatus
    file: str
    created_at: int
    #: Unix seconds after which verifiers refuse the key; set on a retired key by rotate.
    not_after: int | None = None

    @property
    def unbounded(self) -> bool:
        """A retired key with no ``not_after``: written by rotate before it set one, and
        trusted by executors for ever. ``keys list`` and ``doctor`` warn of it."""
        return self.status is KeyStatus.RETIRED and self.not_after is None

    def to_value(self) -> dict[str, object]:
        value: dict[str, object] = {
            "kid": self.kid,
            "public_key": b64encode(self.public_key),
            "status": self.status.value,
            "file": self.file,
            "created_at": self.created_at,
        }
        if self.not_after is not None:
            value["not_after"] = self.not_after
        return value


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
        return self._parse(self._read())[0]

    def _read(self) -> bytes:
        try:
            return self.manifest_path.read_bytes()
        except FileNotFoundError:
            raise ConfigError(
                f"no key set at {self.manifest_path}: run `airlock keys generate`"
            ) from None
        except OSError as exc:
            raise ConfigError(f"key set {self.manifest_path} is unreadable: {exc}") from None

    def _parse(self, data: bytes) -> tuple[list[KeyRecord], str]:
        """The records and the manifest's ``sha256:`` digest (what the audit names)."""
        try:
            raw = json.loads(data)
        except ValueError as exc:
            raise ConfigError(f"key set {self.manifest_path} is unreadable: {exc}") from None
        try:
            records = [
                KeyRecord(
                    kid=str(entry["kid"]),
                    public_key=b64decode_strict(entry["public_key"]),
                    status=KeyStatus(entry["status"]),
                    file=str(entry["file"]),
                    created_at=int(entry["created_at"]),
                    not_after=_not_after(entry.get("not_after")),
                )
                for entry in raw["keys"]
            ]
            # Re-derive every kid: a manifest may not name a key that is not its own.
            KeySet([TrustedKey.from_raw(r.public_key, r.status) for r in records])
            for r in records:
                if TrustedKey.from_raw(r.public_key).kid != r.kid:
                    raise ValueError(f"kid {r.kid} does not match its public key")
        except (KeyError, TypeError, ValueError, KeySetError) as exc:
            raise ConfigError(f"key set {self.manifest_path} is malformed: {exc}") from None
        return records, _digest(data)

    def public_keyset(self) -> KeySet:
        """Every key with its status and ``not_after``, as the executor should trust them.

        Not under the lock: the manifest is only ever replaced by rename, so one read sees
        it whole, before or after a change (and the checkpoint serving ``/v1/keys`` may
        have the directory read-only).
        """
        return KeySet(
            [TrustedKey.from_raw(r.public_key, r.status, r.not_after) for r in self.records()]
        )

    def warnings(self) -> list[str]:
        """What an operator must act on in this key set (``keys list``, ``doctor``)."""
        found: list[str] = []
        for r in self.records():
            if r.unbounded:
                found.append(
                    f"retired key {r.kid} has no not_after (rotated by an older Airlock): "
                    f"executors trust it with no end; run `airlock keys revoke {r.kid}` "
                    "(its approvals expired an execution window after that rotation) and "
                    "re-export the public key set"
                )
            on_disk = (self.path / r.file).exists()
            if r.status in (KeyStatus.RETIRED, KeyStatus.REVOKED) and on_disk:
                found.append(
                    f"the private key of {r.status.value} key {r.kid} is still on disk "
                    f"({self.path / r.file}); nothing signs with it: delete it"
                )
            if r.status is KeyStatus.NEXT and not on_disk:
                found.append(
                    f"the private key of staged key {r.kid} is missing "
                    f"({self.path / r.file}): `airlock keys rotate` refuses to make it "
                    f"active; run `airlock keys revoke {r.kid}` and stage another"
                )
        staged = [r.kid for r in self.records() if r.status is KeyStatus.NEXT]
        if len(staged) > 1:
            found.append(
                f"{len(staged)} staged keys ({', '.join(staged)}); `airlock keys rotate` "
                "needs one: revoke the others"
            )
        return found

    def active_signer(self) -> Signer:
        """Load the one active key, refusing a private key file not mode 0600."""
        active = [r for r in self.records() if r.status is KeyStatus.ACTIVE]
        if len(active) != 1:
            raise ConfigError(
                f"key set {self.manifest_path} has {len(active)} active keys; exactly one "
                "must be active (`airlock keys rotate` makes the staged key active; "
                "`rotate --now` makes one at once)"
            )
        return self._load_signer(active[0])

    def _load_signer(self, record: KeyRecord) -> Signer:
        """The private key of ``record``: mode 0600, Ed25519, and the key it names."""
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

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """An exclusive flock(2) on the key directory's lock file, held while a command
        reads, changes and writes the manifest: two of them never interleave (a revoke
        landing inside a rotate would otherwise be undone by the rotate's write)."""
        fd = os.open(self.path / _LOCK, os.O_RDWR | os.O_CREAT, _PRIVATE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def generate(self, now: int) -> KeyRecord:
        """Create the first key. Refuses if a key set already exists (stage, then rotate)."""
        if self.exists():
            raise ConfigError(
                f"a key set already exists at {self.path}; use `airlock keys stage`, then rotate"
            )
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        with self._locked():
            if self.exists():  # made by another generate while we waited
                raise ConfigError(
                    f"a key set already exists at {self.path}; use `airlock keys stage`, "
                    "then rotate"
                )
            record = self._new_key(now)
            self._write([record])
        return record

    def stage(self, now: int, *, audit: KeyAudit) -> KeyRecord:
        """Make the ``next`` key: in the public key set, so executors can be given it
        before it signs anything; :meth:`rotate` makes it active. Recorded in ``audit``.

        Refused while a key is staged already (rotate to it, or revoke it first). A key
        set with no active key (it was revoked) may stage one too: nothing signs until the
        rotate, which then retires nothing.
        """
        with self._locked():
            records, before = self._parse(self._read())
            staged = [r.kid for r in records if r.status is KeyStatus.NEXT]
            if staged:
                raise ConfigError(
                    f"key {staged[0]} is staged already: `airlock keys rotate` makes it "
                    f"active, or `airlock keys revoke {staged[0]}` to stage another"
                )
            record = replace(self._new_key(now), status=KeyStatus.NEXT)
            try:
                data = self._serialize([*records, record])
                audit.record(
                    {
                        "type": CheckpointEvent.KEY_STAGED,
                        "next": record.kid,
                        "keyset_before": before,
                        "keyset_after": _digest(data),
                    }
                )
            except BaseException:
                _unlink(self.path / record.file)  # never used: the manifest does not name it
                raise
            self._replace(data)
        return record

    def rotate(
        self, now: int, *, execution_window: int, audit: KeyAudit, immediate: bool = False
    ) -> KeyRecord:
        """Make the staged key active and retire the active one; record it in ``audit``.

        With no staged key this is refused, unless ``immediate``: then a new key is made
        and made active at once, and every executor refuses its approvals (E_UNKNOWN_KEY)
        until it is given the new key set. ``immediate`` with a staged key is refused too:
        which of the two was meant is not for this code to guess.

        The retired key keeps verifying only the approvals it signed that may still be in
        flight: those expire at most ``execution_window`` (the checkpoint's
        ``AIRLOCK_CHECKPOINT_EXECUTION_WINDOW``, which sets every approval's
        ``expires_at - issued_at``) after now, so its ``not_after`` is now + that window
        + :data:`RETIRE_SKEW`. A retired key an older rotate left unbounded gets the same
        bound: whatever it signed expired before. Their private keys are deleted; the
        checkpoint signs only with the active key.
        """
        not_after = now + execution_window + RETIRE_SKEW
        with self._locked():
            records, before = self._parse(self._read())
            staged = [r for r in records if r.status is KeyStatus.NEXT]
            if len(staged) > 1:
                raise ConfigError(
                    f"{len(staged)} keys are staged ({', '.join(r.kid for r in staged)}); "
                    "revoke all but the one to make active"
                )
            if staged and immediate:
                raise ConfigError(
                    f"key {staged[0].kid} is staged: `airlock keys rotate` (without --now) "
                    "makes it active; to make a new key instead, first `airlock keys "
                    f"revoke {staged[0].kid}`"
                )
            if not staged and not immediate:
                raise ConfigError(
                    "no key is staged: a key made active now is refused by every executor "
                    "(E_UNKNOWN_KEY) until it has the new public key set. Run `airlock keys "
                    "stage`, give every executor the exported key set, then rotate; or "
                    "`airlock keys rotate --now` to accept that"
                )
            retiring = [r for r in records if r.status is KeyStatus.ACTIVE or r.unbounded]
            bounded = {
                r.kid: replace(r, status=KeyStatus.RETIRED, not_after=not_after) for r in retiring
            }
            if staged:
                # Loaded before anything changes: a staged key whose private key is gone
                # or unreadable would leave the checkpoint unable to sign.
                self._load_signer(staged[0])
                record = replace(staged[0], status=KeyStatus.ACTIVE)
                updated = [
                    record if r.kid == record.kid else bounded.get(r.kid, r) for r in records
                ]
            else:
                record = self._new_key(now)
                updated = [*(bounded.get(r.kid, r) for r in records), record]
            try:
                data = self._serialize(updated)
                audit.record(
                    {
                        "type": CheckpointEvent.KEY_ROTATED,
                        "active": record.kid,
                        "staged": bool(staged),
                        "retired": sorted(bounded),
                        "not_after": not_after,
                        "keyset_before": before,
                        "keyset_after": _digest(data),
                    }
                )
            except BaseException:
                if not staged:  # never used: the manifest does not name it
                    _unlink(self.path / record.file)
                raise
            self._replace(data)
            for r in bounded.values():
                _unlink(self.path / r.file)
        return record

    def revoke(self, kid: str, *, audit: KeyAudit) -> KeyRecord:
        """Mark ``kid`` revoked (it verifies nothing), delete its private key, record it."""
        with self._locked():
            records, before = self._parse(self._read())
            found = next((r for r in records if r.kid == kid), None)
            if found is None:
                raise ConfigError(f"no key {kid} in {self.manifest_path}")
            revoked = replace(found, status=KeyStatus.REVOKED)
            data = self._serialize([revoked if r.kid == kid else r for r in records])
            audit.record(
                {
                    "type": CheckpointEvent.KEY_REVOKED,
                    "kid": kid,
                    "was": found.status.value,
                    "keyset_before": before,
                    "keyset_after": _digest(data),
                }
            )
            self._replace(data)
            _unlink(self.path / found.file)
        return revoked

    # The record goes first, the manifest second. A crash between them leaves a record
    # of a change that did not happen, never a change without a record; the event names
    # the digests of the manifest it read and of the one it wrote, so such a crash shows
    # in the chain as the next key event starting from a manifest the previous one did
    # not write, and against the manifest itself (its digest is not the last recorded).

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

    @staticmethod
    def _serialize(records: list[KeyRecord]) -> bytes:
        return json.dumps({"keys": [r.to_value() for r in records]}, indent=2).encode() + b"\n"

    def _write(self, records: list[KeyRecord]) -> None:
        self._replace(self._serialize(records))

    def _replace(self, data: bytes) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.path, prefix=".keyset-")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, self.manifest_path)
        _fsync_dir(self.path)


def _not_after(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError("not_after must be Unix seconds")
    return value


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
        _fsync_dir(path.parent)


class KeyRing:
    """The running service's view of a key directory: the active signer, reloaded on change.

    ``airlock keys stage|rotate|revoke`` rewrite the manifest while the checkpoint runs; the
    next signature after the manifest is replaced uses the new active key, without a
    restart (a staged key is never loaded: :meth:`KeyDirectory.active_signer` takes the
    active one only). A manifest that changes to something unusable (no active key)
    makes signing fail closed until it is fixed.

    Reading takes no lock. The writers' flock is held across their audit append, and a
    signature is made inside a database transaction, so a reader waiting on that flock
    could wait on a writer that waits on the reader's transaction. Nor does it need one:
    the manifest is only ever replaced by rename, and a key file is deleted only after
    the manifest that stops naming it is in place, so a read that fails while the
    manifest changed under it is read again (:data:`_RELOAD_ATTEMPTS`).
    """

    __slots__ = ("_directory", "_lock", "_manifest", "_signer", "_stamp")

    def __init__(self, directory: KeyDirectory) -> None:
        self._directory = directory
        # Asked before every signature: the path as a string, built once.
        self._manifest = os.fspath(directory.manifest_path)
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
            st = os.stat(self._manifest)
        except OSError:
            return (-1, -1, -1)
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def signer(self) -> Signer:
        with self._lock:
            stamp = self._manifest_stamp()
            if self._signer is not None and stamp == self._stamp:
                return self._signer
            self._signer = None
            for attempt in range(_RELOAD_ATTEMPTS):
                try:
                    signer = self._directory.active_signer()
                except ConfigError:
                    # A rotation that landed between reading the manifest and reading
                    # the key it named has deleted that key (now retired): the manifest
                    # changed meanwhile, so read the new one. One that did not change
                    # is the answer: fail closed.
                    again = self._manifest_stamp()
                    if again == stamp or attempt == _RELOAD_ATTEMPTS - 1:
                        raise
                    stamp = again
                    continue
                # The stamp from before the read that worked: a change after it is seen
                # at the next signature.
                self._stamp = stamp
                self._signer = signer
                return signer
            raise AssertionError("unreachable: the last attempt returns or raises")

    def public_keyset(self) -> KeySet:
        return self._directory.public_keyset()
