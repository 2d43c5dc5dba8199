"""Receipts reported in a batch (``POST /v1/receipts``): each one recorded or refused as
its own endpoint (``POST /v1/outcomes``, ``POST /v1/refusals``) would, and committed up
to ``PER_COMMIT`` at a time.

Every receipt is verified first (no I/O). Those that verify are then recorded in
transactions of up to ``PER_COMMIT`` receipts, each in a savepoint of its own: a refused
receipt rolls back to its savepoint, so it leaves no write behind and changes no other
receipt's answer. Each transaction holds the audit chain's lock, which every other
write waits for, from its start to its commit. It takes :mod:`._tx`'s order for all of
them at its start: every proposal row an outcome names, in id order (two batches never
wait on each other in a cycle), then the chain lock; a receipt then waits only for
locks its transaction holds. An
``in_doubt`` outcome may take another proposal's slot (a row lock after the chain
lock, out of that order), so it is recorded in a transaction of its own, in its place.

This module must never answer a receipt otherwise than its own endpoint would, never
commit a refused receipt's writes, and never audit a refusal inside the batch's
transaction (the caller does, after it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, IntegrityError

from airlock.store import AuditLog

from . import _tx, reports
from .auth import Principal
from .errors import Refusal
from .models import approvals, proposals
from .reports import CheckedOutcome, CheckedRefusal, ResolvedHere

__all__ = ["PER_COMMIT", "Answer", "report_receipts"]

_log = logging.getLogger("airlock.checkpoint")

_Checked = CheckedOutcome | CheckedRefusal


@dataclass(frozen=True, slots=True)
class Answer:
    """One receipt's answer: its own endpoint's status and, if refused, the refusal."""

    status: int
    refusal: Refusal | None = None


#: Receipts recorded in one transaction, at most. It holds the audit chain's lock from
#: its start to its commit, and every other write (an approve) waits for it: a batch's
#: 50 in one would hold it ~5 times as long as this, for one commit instead of five.
PER_COMMIT: Final = 10

_ACCEPTED: Final = Answer(200)
#: What its own endpoint answers a receipt its handler failed on (no error body).
_FAILED: Final = Answer(500)

#: The proposals the outcomes name, locked in one order (_tx's step 2 for the batch).
_LOCK_ROWS: Final = (
    sa.select(proposals.c.id)
    .where(
        proposals.c.id.in_(
            sa.select(approvals.c.proposal_id).where(
                approvals.c.approval_id.in_(sa.bindparam("ids", expanding=True))
            )
        )
    )
    .order_by(proposals.c.id)
    .with_for_update(of=proposals)
)


def report_receipts(
    cp: _tx.Parts, principal: Principal, receipts: Sequence[tuple[str, Mapping[str, Any]]]
) -> list[Answer]:
    """Record each of ``receipts`` (``(kind, receipt)``, kind ``outcome`` or ``refusal``)
    as its own endpoint would; an answer for each, in order.

    Raises :class:`Refusal` (403) for a caller who may report none of them. A database
    error fails only the transaction it happens in (up to ``PER_COMMIT`` receipts): each
    receipt of it answers 500 and nothing of it is recorded; the others stand.
    """
    _tx.require(principal, reports.REPORTERS, "report receipts")
    now = cp.now()
    answers: list[Answer] = [_FAILED] * len(receipts)
    checked: list[tuple[int, _Checked]] = []
    for i, (kind, receipt) in enumerate(receipts):
        try:
            if kind == "outcome":
                checked.append((i, reports.check_outcome(cp, principal, receipt, now)))
            else:
                checked.append((i, reports.check_refusal(cp, principal, receipt, now)))
        except Refusal as exc:
            answers[i] = Answer(exc.status, exc)
    group: list[tuple[int, _Checked]] = []
    for i, item in checked:
        if isinstance(item, CheckedOutcome) and item.payload.outcome == "in_doubt":
            _together(cp, principal, group, answers, now)
            group = []
            answers[i] = _alone(cp, principal, item, now)
        else:
            group.append((i, item))
            if len(group) == PER_COMMIT:
                _together(cp, principal, group, answers, now)
                group = []
    _together(cp, principal, group, answers, now)
    return answers


def _together(
    cp: _tx.Parts,
    principal: Principal,
    items: Sequence[tuple[int, _Checked]],
    answers: list[Answer],
    now: int,
) -> None:
    """Record ``items`` in one transaction, each in its savepoint; fill in ``answers``."""
    if not items:
        return
    named = sorted({c.approval_id for _, c in items if isinstance(c, CheckedOutcome)})
    try:
        with cp.engine.begin() as conn:
            if named:
                conn.execute(_LOCK_ROWS, {"ids": named})
            # Held by the transaction, not a savepoint: a receipt rolled back keeps it.
            AuditLog.lock(conn)
            for i, item in items:
                answers[i] = _one(conn, cp, principal, item, now)
    except Exception:
        # The transaction failed (its commit, a lock, or a fault that ended it): none of
        # these receipts is known recorded, so each answers 500 and is posted again. What
        # a transaction before this one committed keeps its answers.
        _log.exception("a batch's transaction failed; its receipts answer 500")
        for i, _ in items:
            answers[i] = _FAILED


def _one(conn: Connection, cp: _tx.Parts, principal: Principal, item: _Checked, now: int) -> Answer:
    try:
        with conn.begin_nested():
            if isinstance(item, CheckedOutcome):
                reports.land_outcome(conn, cp, principal, item, now)
            else:
                reports.keep_refusal(conn, cp, principal, item, now)
        return _ACCEPTED
    except Refusal as exc:
        return Answer(exc.status, exc)
    except ResolvedHere:
        assert isinstance(item, CheckedOutcome)  # raised for a resolution only
        return _resolved_here(conn, cp, principal, item, now)
    except IntegrityError:
        # A refusal's note: not reachable under the chain lock; the UNIQUE digest is the
        # judge if it is (as report_refusal). Anything else: as the handler failing.
        if isinstance(item, CheckedRefusal) and reports.refusal_kept(conn, item) is not None:
            return _ACCEPTED
        if not _still_open(conn):
            raise
        _log.exception("a receipt in a batch failed; the others are recorded")
        return _FAILED
    except DBAPIError:
        # The database's own fault (a full disk, I/O, a lost server): SQLite may have
        # rolled back the whole transaction, and a later savepoint would then commit on
        # its own. The group fails whole (see _together).
        raise
    except Exception:
        # Rolled back to its savepoint: the others go on, unless the transaction is gone.
        if not _still_open(conn):
            raise
        _log.exception("a receipt in a batch failed; the others are recorded")
        return _FAILED


def _still_open(conn: Connection) -> bool:
    """Is the batch's transaction still open, and usable, on the database's side?"""
    raw = conn.connection.dbapi_connection
    info = getattr(raw, "info", None)
    status = getattr(info, "transaction_status", None)
    if status is not None:  # psycopg: in a transaction, not one that failed
        return getattr(status, "name", None) == "INTRANS"
    return bool(getattr(raw, "in_transaction", False))  # sqlite3


def _resolved_here(
    conn: Connection, cp: _tx.Parts, principal: Principal, item: CheckedOutcome, now: int
) -> Answer:
    """An executor resolution of an in_doubt a person resolved here first: kept in its
    own savepoint (``reports.resolution_after_person``), a conflict answered 409."""
    try:
        with conn.begin_nested():
            _, conflict = reports.resolution_after_person(conn, cp, principal, item.receipt, now)
    except Refusal as exc:
        return Answer(exc.status, exc)
    if conflict is not None:
        return Answer(conflict.status, conflict)
    return _ACCEPTED


def _alone(cp: _tx.Parts, principal: Principal, item: CheckedOutcome, now: int) -> Answer:
    """An in_doubt outcome in a transaction of its own, as ``POST /v1/outcomes`` takes it."""
    try:
        with cp.engine.begin() as conn:
            reports.land_outcome(conn, cp, principal, item, now)
    except Refusal as exc:
        return Answer(exc.status, exc)
    except Exception:
        _log.exception("a receipt in a batch failed; the others are recorded")
        return _FAILED
    return _ACCEPTED
