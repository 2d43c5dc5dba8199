"""Key changes in the checkpoint's audit chain: the :class:`~.keys.KeyAudit` the CLI uses.

``airlock keys stage|rotate|revoke`` change files (the key directory), while the record of
every other administrative change (users, tokens) is the checkpoint's hash-chained audit
log. This puts the key changes there too, each committed on its own before the manifest
is replaced (see :meth:`~.keys.KeyDirectory.rotate` for the order). It never reads or
writes a key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from airlock.store import AuditLog

from ._db import Database

__all__ = ["ChainKeyAudit"]


class ChainKeyAudit:
    """Appends each key event to the checkpoint database's audit chain, one commit each."""

    __slots__ = ("_clock", "_db")

    def __init__(self, db: Database, clock: Callable[[], int]) -> None:
        self._db = db
        self._clock = clock

    def record(self, event: Mapping[str, Any]) -> None:
        with self._db.engine.begin() as conn:
            AuditLog.append(conn, event, at=datetime.fromtimestamp(self._clock(), UTC))
