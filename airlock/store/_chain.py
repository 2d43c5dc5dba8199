"""The audit chain's hash, defined once. Not public.

``row_hash = hex(SHA-256(raw(prev_hash) ‖ event_bytes))`` (docs/protocol.md#audit-chain). An append
on SQLite computes it here, from the head its transaction reads under the write lock; one on
PostgreSQL computes it inside its INSERT with the built-in ``sha256`` and checks the
returned row against :func:`chain_hash` (see ``_audit.py``).

This module must never read a database or hash anything but what it is given.
"""

from __future__ import annotations

import hashlib

__all__ = ["chain_hash"]


def chain_hash(prev_hash: str, event_bytes: bytes) -> str:
    """``hex(SHA-256(raw(prev_hash) ‖ event_bytes))``; ``prev_hash`` is 64 lowercase hex."""
    if len(prev_hash) != 64 or prev_hash != prev_hash.lower():
        raise ValueError("prev_hash must be 64 lowercase hex characters")
    return hashlib.sha256(bytes.fromhex(prev_hash) + event_bytes).hexdigest()
