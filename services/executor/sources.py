"""Where bundles come from and where outcomes go: the executor's two feed-side seams.

``BundleSource`` is the port a feed implements. The checkpoint's long-poll feed (with
its revocations) is :class:`~services.executor.feed.CheckpointFeedSource`; here are the
sources for tests and the CLI: a directory inbox and a single file or stdin.

``OutcomeSink`` is an immediate, best-effort copy of each terminal outcome (a receipts
directory), made after the ledger commit: the ledger is the source of truth, and a sink
failure never changes an outcome. Reporting to the checkpoint is not a sink but an
outbox over the ledger (:class:`~services.executor.outbox.OutboxReporter`), so nothing is
lost when the checkpoint is down. A source never decides anything: every bundle it hands
over is verified and consumed by the executor, so delivering the same bundle twice is
harmless (E_REPLAY).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import stat
import sys
import time
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final, Protocol, runtime_checkable

from sqlalchemy.engine import Connection

from airlock.protocol import BUNDLE_MAX_BYTES

from .models import Outcome

__all__ = [
    "AckInTransaction",
    "BundleSource",
    "Delivery",
    "DirectorySource",
    "FileSource",
    "OutcomeSink",
    "ReceiptDirectorySink",
    "Revoked",
    "beyond_ledger",
    "read_capped",
    "read_revocations_file",
]

_log = logging.getLogger("airlock.executor")

#: Files a directory hands over per call. Each is held in memory (up to the 64 KiB
#: bundle cap) until executed, so a backlog of thousands is taken a batch at a time.
DIRECTORY_BATCH: Final = 20

#: How often a waiting inbox is looked at again: a bundle renamed in is taken within
#: this, instead of after the daemon's whole poll wait.
INBOX_SCAN_S: Final = 0.1


@dataclass(frozen=True, slots=True)
class Delivery:
    """One bundle as delivered: ``ref`` names it for acknowledgement and logs."""

    ref: str
    raw: bytes


@runtime_checkable
class BundleSource(Protocol):
    def receive(self, *, wait_s: float) -> Sequence[Delivery]:
        """Bundles available now; a long-poll source may wait up to ``wait_s`` for one."""
        ...

    def revoked(self) -> Container[str]:
        """Approval ids revoked so far.

        Revocations arrive on the same feed (docs/protocol.md#executor-checks, step 12).
        """
        ...

    def ack(self, delivery: Delivery) -> None:
        """The bundle's outcome is committed to the ledger; do not deliver it again."""
        ...


@runtime_checkable
class AckInTransaction(Protocol):
    """A source whose acknowledgement is a database write (the feed's cursor): it is made
    in the transaction that records the bundle, so both commit or neither does. The
    deliveries of one batch may be executed side by side and commit in any order."""

    def ack_in(self, conn: Connection, delivery: Delivery) -> Mapping[str, object]:
        """Acknowledge ``delivery`` in ``conn``'s open transaction, before it commits;
        give the fields the transaction's audit event is to carry with it."""
        ...

    def forget(self, delivery: Delivery) -> None:
        """The transaction that acknowledged ``delivery`` committed."""
        ...

    def settle(self) -> None:
        """Every delivery of the batch has committed or failed: make the acknowledgement
        that commits side by side may have left undone (see the feed's)."""
        ...


@runtime_checkable
class OutcomeSink(Protocol):
    def report(self, outcome: Outcome) -> None:
        """Report a terminal outcome; may raise, the executor logs and carries on."""
        ...


def beyond_ledger(revoked: Container[str]) -> Container[str]:
    """The part of ``revoked`` that the ledger's own revocations table does not hold.

    The consume into ``executing`` checks that table in its INSERT (under the chain lock
    that revocations are recorded under), so the execute path asks only the rest again
    just before it: one read of the ledger's revocations per execution, not two. A set
    that does not say (``beyond_ledger``) is all beyond it.
    """
    outside = getattr(revoked, "beyond_ledger", None)
    return revoked if outside is None else outside


class Revoked(Container[str]):
    """Revoked if any of the given sets says so (the ledger's revocations and a file)."""

    def __init__(self, *sets: Container[str]) -> None:
        self._sets = sets

    def __contains__(self, approval_id: object) -> bool:
        return any(approval_id in s for s in self._sets)

    @property
    def beyond_ledger(self) -> Container[str]:
        return Revoked(*(beyond_ledger(s) for s in self._sets))


def read_capped(stream: BinaryIO) -> bytes:
    """Read at most one byte past the bundle cap: an oversized bundle is refused as
    E_SIZE by the verifier without the whole thing ever being held in memory."""
    return stream.read(BUNDLE_MAX_BYTES + 1)


class DirectorySource:
    """Bundles are ``*.json`` files in ``inbox``; each is moved to ``inbox/done`` once
    its outcome is committed. Writers must create files atomically (write elsewhere,
    then rename in); names starting with ``.`` are ignored. ``revocations``, if given,
    is a text file of revoked approval ids, one per line, re-read on every call;
    ``also_revoked`` adds another set (the ledger's recorded revocations).

    With ``sleep`` (the daemon's interruptible :meth:`Shutdown.sleep`), an empty inbox
    is looked at again every :data:`INBOX_SCAN_S` for up to ``wait_s``, so a bundle is
    taken as soon as it is renamed in; without it, :meth:`receive` answers at once.
    """

    def __init__(
        self,
        inbox: Path,
        revocations: Path | None = None,
        also_revoked: Container[str] = frozenset(),
        *,
        sleep: Callable[[float], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not inbox.is_dir():
            raise FileNotFoundError(f"inbox {inbox} is not a directory")
        self._inbox = inbox
        self._done = inbox / "done"
        self._warned: set[str] = set()  # names skipped and logged once
        self._revocations = revocations
        self._also = also_revoked
        self._sleep = sleep
        self._mono = monotonic
        #: The daemon paces a source that does not wait itself (daemon.serve).
        self.long_poll = sleep is not None

    def receive(self, *, wait_s: float = 0.0) -> Sequence[Delivery]:
        out = self._scan()
        if out or self._sleep is None or wait_s <= 0:
            return out
        deadline = self._mono() + wait_s
        while not out:
            left = deadline - self._mono()
            if left <= 0:
                break
            self._sleep(min(INBOX_SCAN_S, left))
            out = self._scan()
        return out

    def _scan(self) -> list[Delivery]:
        out: list[Delivery] = []
        for path in sorted(self._inbox.glob("*.json")):
            if len(out) >= DIRECTORY_BATCH:
                break  # the rest next call: the daemon asks again at once after work
            if path.name.startswith(".") or not path.is_file():
                continue
            raw = _read_regular_file(path, self._warned)
            if raw is not None:
                out.append(Delivery(path.name, raw))
        return out

    def revoked(self) -> Container[str]:
        return Revoked(read_revocations_file(self._revocations), self._also)

    def ack(self, delivery: Delivery) -> None:
        self._done.mkdir(exist_ok=True)
        os.replace(self._inbox / delivery.ref, self._done / delivery.ref)


def _read_regular_file(path: Path, warned: set[str]) -> bytes | None:
    """The file's bytes (capped), or None if it is not a regular file or cannot be read:
    logged (once per name) and left in place.

    Opened non-blocking, without following a symlink, and checked after the open: a FIFO
    swapped in after the ``is_file`` check would otherwise block the open, and the daemon
    with it, until someone writes to it; a symlink could make the executor open any file
    or device it may read. One unreadable file must not hold up the others either."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY)
    except OSError as exc:
        _skipped(path, f"not read: {exc.strerror or exc}", warned)
        return None
    with os.fdopen(fd, "rb") as stream:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                _skipped(path, "not a regular file; skipped", warned)
                return None
            return read_capped(stream)
        except OSError as exc:
            _skipped(path, f"not read: {exc.strerror or exc}", warned)
            return None


def _skipped(path: Path, why: str, warned: set[str]) -> None:
    if path.name not in warned:  # left in place: seen again at every poll
        warned.add(path.name)
        _log.warning("inbox file %s %s (left in place)", ascii(path.name), why)


def read_revocations_file(path: Path | None) -> frozenset[str]:
    """Approval ids, one per line; no file (or no path) is an empty set."""
    if path is None or not path.exists():
        return frozenset()
    lines = path.read_text(encoding="utf-8").splitlines()
    return frozenset(line.strip() for line in lines if line.strip())


class FileSource:
    """One bundle from a file, or from stdin when the path is ``-``."""

    def __init__(self, path: str, revoked: Container[str] = frozenset()) -> None:
        self._path = path
        self._revoked = revoked
        self._done = False

    def receive(self, *, wait_s: float = 0.0) -> Sequence[Delivery]:
        del wait_s
        if self._done:
            return ()
        if self._path == "-":
            raw = read_capped(sys.stdin.buffer)
        else:
            with open(self._path, "rb") as stream:
                raw = read_capped(stream)
        return (Delivery(self._path, raw),)

    def revoked(self) -> Container[str]:
        return self._revoked

    def ack(self, delivery: Delivery) -> None:
        del delivery
        self._done = True


class ReceiptDirectorySink:
    """Writes each terminal outcome's receipt to ``<dir>/<approval id or seq>.receipt.json``."""

    def __init__(self, directory: Path) -> None:
        if not directory.is_dir():
            raise FileNotFoundError(f"receipts directory {directory} is not a directory")
        self._dir = directory
        self._numbers = itertools.count(1)  # one each, whichever thread reports

    def report(self, outcome: Outcome) -> None:
        if outcome.receipt is None:
            return
        n = next(self._numbers)
        name = outcome.approval_id or f"refused-{os.getpid()}-{n}"
        if outcome.approval_id is not None and outcome.state is None:
            name = f"{name}.refused-{os.getpid()}-{n}"  # a replay: keep the first receipt
        data = json.dumps(outcome.receipt.to_value(), sort_keys=True).encode() + b"\n"
        tmp = self._dir / f".{name}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, self._dir / f"{name}.receipt.json")
