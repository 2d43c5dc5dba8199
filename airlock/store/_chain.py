"""The audit chain's hash, defined once for Python and for SQLite's SQL. Not public.

``row_hash = hex(SHA-256(raw(prev_hash) ‖ event_bytes))`` (docs/protocol.md#audit-chain). An append
computes it inside its INSERT, from the head that statement reads (see ``_audit.py``): PostgreSQL
with its built-in ``sha256``, SQLite with :func:`sqlite_chain_hash`, which
:func:`airlock.store.make_engine` registers on every connection as
:data:`SQLITE_CHAIN_HASH`. Both are checked against :func:`chain_hash` on the row the
INSERT returns.

This module must never read a database or hash anything but what it is given.
"""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = ["SQLITE_CHAIN_HASH", "chain_hash", "sqlite_chain_hash"]

#: The SQL name of :func:`sqlite_chain_hash` on connections from ``make_engine``.
SQLITE_CHAIN_HASH: Final = "airlock_chain_hash"


def chain_hash(prev_hash: str, event_bytes: bytes) -> str:
    """``hex(SHA-256(raw(prev_hash) ‖ event_bytes))``; ``prev_hash`` is 64 lowercase hex."""
    if len(prev_hash) != 64 or prev_hash != prev_hash.lower():
        raise ValueError("prev_hash must be 64 lowercase hex characters")
    return hashlib.sha256(bytes.fromhex(prev_hash) + event_bytes).hexdigest()


def sqlite_chain_hash(prev_hash: object, event_bytes: object) -> str | None:
    """:func:`chain_hash` as a SQLite function: text and a blob in, hex text out.

    Anything else gives NULL, which the NOT NULL ``row_hash`` column then refuses, and a
    malformed ``prev_hash`` raises, which fails the statement: never a hash of something
    other than the two values the chain defines.
    """
    if type(prev_hash) is not str or type(event_bytes) is not bytes:
        return None
    return chain_hash(prev_hash, event_bytes)
