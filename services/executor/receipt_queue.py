"""The executor's receipt queue: what the outbox still has to deliver, in order.

Receipts are queued in ``executor_outbox`` by the transaction that commits them (an
outcome, a resolution, a refusal before the consume) and leave it when their delivery
is recorded. :func:`pending_receipts` reads the queue a batch at a time, oldest first;
:func:`requeue_undelivered` rebuilds it at start from what the ledger, the deliveries
and the resends show undelivered. Reads and inserts only: the courier
(:mod:`services.executor.outbox`) posts and records.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from airlock.ledger import insert_ignore, reportable_refusal
from airlock.store import Prepared

from .models import TERMINAL_STATES, deliveries, ledger, outbox, refusals, resends, resolutions

__all__ = ["PendingReceipt", "pending_receipts", "requeue_undelivered"]

# The feed's logger, as the outbox's: operators filter on it.
_log = logging.getLogger("airlock.executor.feed")


@dataclass(frozen=True, slots=True)
class PendingReceipt:
    kind: str  # outcome | resolution | refusal
    approval_id: str
    receipt: str
    queued_at: int  # with approval_id, its place in the queue
    attempt: int = 1  # 1, or the attempt a resend request queued

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.approval_id)


#: Where a kind's read of the queue starts: past the last receipt of that kind already
#: seen, or (``_FROM_THE_START``) before every position a receipt can have.
_SEEN_AT = sa.bindparam("seen_at", type_=sa.BigInteger)
_SEEN_ID = sa.bindparam("seen_id", type_=outbox.c.approval_id.type)
_LIMIT = sa.bindparam("limit", type_=sa.Integer)
_FROM_THE_START: Final = (-(1 << 62), "")


def _past_seen() -> sa.ColumnElement[bool]:
    return (outbox.c.queued_at > _SEEN_AT) | (
        (outbox.c.queued_at == _SEEN_AT) & (outbox.c.approval_id > _SEEN_ID)
    )


def _resend_pending(kind: str, approval_id: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
    """A resend of the receipt was requested and its attempt is not recorded yet."""
    recorded = deliveries.alias("recorded")
    return sa.exists().where(
        resends.c.kind == kind,
        resends.c.approval_id == approval_id,
        ~sa.exists().where(
            recorded.c.kind == resends.c.kind,
            recorded.c.approval_id == resends.c.approval_id,
            recorded.c.attempt == resends.c.attempt,
        ),
    )


# The three reads of the queue, one per kind, compiled once: the courier reads the queue
# at least twice a flush, and building these statements anew cost more than running them.
_QUEUED: Final = {
    "outcome": Prepared(
        sa.select(ledger.c.approval_id, ledger.c.receipt, outbox.c.queued_at, outbox.c.attempt)
        .select_from(outbox.join(ledger, ledger.c.approval_id == outbox.c.approval_id))
        .where(
            outbox.c.kind == "outcome",
            _past_seen(),
            # Each terminal state as its own fixed value: a prepared statement takes no
            # IN-list parameter.
            sa.or_(*(ledger.c.state == s.value for s in TERMINAL_STATES)),
            ledger.c.receipt.is_not(None),
        )
        .order_by(outbox.c.queued_at, outbox.c.approval_id)
        .limit(_LIMIT)
    ),
    "resolution": Prepared(
        sa.select(
            resolutions.c.approval_id, resolutions.c.receipt, outbox.c.queued_at, outbox.c.attempt
        )
        .select_from(outbox.join(resolutions, resolutions.c.approval_id == outbox.c.approval_id))
        .where(
            outbox.c.kind == "resolution",
            _past_seen(),
            sa.exists().where(
                deliveries.c.kind == "outcome",
                deliveries.c.approval_id == resolutions.c.approval_id,
            ),
            ~_resend_pending("outcome", resolutions.c.approval_id),
        )
        .order_by(outbox.c.queued_at, outbox.c.approval_id)
        .limit(_LIMIT)
    ),
    "refusal": Prepared(
        sa.select(refusals.c.approval_id, refusals.c.receipt, outbox.c.queued_at, outbox.c.attempt)
        .select_from(
            outbox.join(refusals, refusals.c.id == reportable_refusal(outbox.c.approval_id))
        )
        .where(outbox.c.kind == "refusal", _past_seen())
        .order_by(outbox.c.queued_at, outbox.c.approval_id)
        .limit(_LIMIT)
    ),
}


def pending_receipts(
    conn: Connection, limit: int, *, after: Mapping[str, tuple[int, str]] | None = None
) -> list[PendingReceipt]:
    """Queued receipts, oldest first; a resolution only once the outcome it resolves was
    delivered, and not while that outcome is being sent again (the checkpoint replaces an
    in_doubt outcome by its resolution, and refuses it the other way round). Reads the
    outbox queue, never the whole ledger.

    ``after`` maps a kind to the (queued_at, approval_id) of the last receipt of that
    kind already seen, to read on past it (one pass through the queue per flush).
    """
    after = after or {}
    if not conn.in_transaction():
        conn.begin()  # as an execute would autobegin: the caller's to end
    found: list[PendingReceipt] = []
    for kind, statement in _QUEUED.items():
        seen_at, seen_id = after.get(kind, _FROM_THE_START)
        params = {"seen_at": seen_at, "seen_id": seen_id, "limit": limit}
        found += [
            PendingReceipt(kind, a, r, int(q), int(n))
            for a, r, q, n in statement.rows(conn, params)
        ]
    return found


def requeue_undelivered(conn: Connection) -> int:
    """Queue every receipt the ledger and deliveries show undelivered, or whose requested
    resend has no delivery record yet, and the outbox does not hold (a full scan: the
    reporter runs it once, at start). Returns how many.

    Not a refusal's first attempt: whether a refusal is reported is decided when it is
    recorded, by whether the ledger had consumed its approval then (see
    :func:`~airlock.ledger.refusal_to_report`), and only its queue row says so;
    the refusals recorded before executor migration 0007 are not reported."""

    def undelivered(kind: str, approval_id: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
        return ~sa.exists().where(
            deliveries.c.kind == kind, deliveries.c.approval_id == approval_id
        ) & ~sa.exists().where(outbox.c.kind == kind, outbox.c.approval_id == approval_id)

    # A resend whose attempt is neither recorded nor queued (its queue row lost, say).
    # Only a receipt's last resend can be: the next needs this one's attempt recorded.
    recorded = deliveries.alias("recorded")
    resent = sa.select(
        resends.c.kind, resends.c.approval_id, resends.c.requested_at, resends.c.attempt
    ).where(
        ~sa.exists().where(
            recorded.c.kind == resends.c.kind,
            recorded.c.approval_id == resends.c.approval_id,
            recorded.c.attempt == resends.c.attempt,
        ),
        ~sa.exists().where(
            outbox.c.kind == resends.c.kind, outbox.c.approval_id == resends.c.approval_id
        ),
    )
    queued = 0
    for what, columns, select in (
        (
            "outcome",
            ["kind", "approval_id", "queued_at"],
            sa.select(sa.literal("outcome"), ledger.c.approval_id, ledger.c.updated_at).where(
                ledger.c.state.in_([s.value for s in TERMINAL_STATES]),
                ledger.c.receipt.is_not(None),
                undelivered("outcome", ledger.c.approval_id),
            ),
        ),
        (
            "resolution",
            ["kind", "approval_id", "queued_at"],
            sa.select(
                sa.literal("resolution"), resolutions.c.approval_id, resolutions.c.decided_at
            ).where(undelivered("resolution", resolutions.c.approval_id)),
        ),
        ("resent", ["kind", "approval_id", "queued_at", "attempt"], resent),
    ):
        # RETURNING, not rowcount: psycopg reports -1 for INSERT … ON CONFLICT DO NOTHING.
        count = len(
            conn.execute(
                insert_ignore(conn, outbox)
                .from_select(columns, select)
                .returning(outbox.c.approval_id)
            ).all()
        )
        queued += count
        _log.debug("re-queued %d undelivered %s receipts", count, what)
    return queued


#: Answers that say "not now" rather than "never". These are about the whole server (a
#: proxy with the checkpoint down behind it, a rate limit): every receipt would get them.
