"""A proposal's ``proposal_routes`` row, read at most once per transaction.

An approve asks for it four times (the voter's check, the signers' check, the event's
recipients, the answer's ``route``); the proposal row is locked for the whole
transaction (``_tx``'s order), so the route cannot move under it. The memo lives on the
connection, tied to the transaction it was read in: a later transaction, or one after a
rollback, reads afresh. Whoever writes a route in a transaction calls :func:`forget`.
Inside a savepoint nothing is kept: rolling it back would undo a route written in it
(say an escalation) while the memo kept the row as written.

This module must never write, and never answer from another transaction's read.
"""

from __future__ import annotations

from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from airlock.store import Prepared
from services.checkpoint.models import proposal_routes

__all__ = ["forget", "route"]

#: The key of the memo in ``Connection.info``: ``(transaction, {proposal_id: row})``.
_MEMO: Final = "airlock.proposal_routes"

_SELECT: Final = sa.select(proposal_routes).where(
    proposal_routes.c.proposal_id == sa.bindparam("proposal_id")
)
_PREPARED: Final = Prepared(_SELECT)


def route(conn: Connection, proposal_id: str) -> Any:
    """The ``proposal_routes`` row of ``proposal_id`` (None: routed by no rule), from this
    transaction's memo when it was read in it already."""
    tx = conn.get_transaction()
    # No transaction to tie a memo to, or a savepoint whose rollback the memo would outlive.
    if tx is None or conn.get_nested_transaction() is not None:
        return conn.execute(_SELECT, {"proposal_id": proposal_id}).first()
    memo = conn.info.get(_MEMO)
    if memo is None or memo[0] is not tx:
        memo = (tx, {})
        conn.info[_MEMO] = memo
    rows: dict[str, Any] = memo[1]
    if proposal_id not in rows:
        rows[proposal_id] = _PREPARED.row(conn, {"proposal_id": proposal_id})
    return rows[proposal_id]


def forget(conn: Connection, proposal_id: str) -> None:
    """Drop ``proposal_id``'s memo (its route was just written in this transaction)."""
    memo = conn.info.get(_MEMO)
    if memo is not None:
        memo[1].pop(proposal_id, None)
