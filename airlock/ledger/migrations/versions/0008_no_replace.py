"""SQLite: no INSERT may replace a row of a table whose rows are never deleted.

Revision ID: 0008_no_replace
Revises: 0007_refusal_receipts
Create Date: 2026-12-04

SQLite's REPLACE conflict resolution (``INSERT OR REPLACE``, ``REPLACE INTO``) deletes
every row the new one conflicts with on a PRIMARY KEY, UNIQUE constraint or ``rowid``,
and fires DELETE triggers for that delete only with ``PRAGMA recursive_triggers`` on,
which is off by default (lang_conflict.html, "REPLACE"). ``make_engine`` sets it, but
the sqlite3 shell does not: there one ``INSERT OR REPLACE`` swapped a ``succeeded`` ledger
row for a ``claimed`` one with an expired lease, which recovery then wrote a second time.
``UPDATE OR REPLACE`` needs a key column changed, which the UPDATE triggers refuse
already (the ledger's identity columns, the cursor's feed; the other tables take no
UPDATE at all).

So every table here that a trigger keeps from DELETE gets a BEFORE INSERT trigger that
refuses an insert whose row conflicts with a row kept, on any of its keys. It runs before
conflict resolution, so REPLACE then has nothing to delete. Which refusal:

``RAISE(IGNORE)``, where our code inserts with ``ON CONFLICT DO NOTHING`` (the consume
in ``airlock.ledger`` and every ``insert_ignore``): a conflict there is expected (a replay,
a racing executor, a hold or head seen again) and must stay "nothing inserted, nothing
returned", which IGNORE gives exactly, row by row, also within an ``INSERT … SELECT``.
An ABORT would turn each replay into an error instead of ``E_REPLAY``. The cost: a
plain INSERT that conflicts (no code of ours makes one) is now skipped, not an error.
    executor_ledger, executor_resolutions, executor_feed_cursor, executor_revocations,
    executor_deliveries, executor_resends, executor_ledger_holds

``RAISE(ABORT)``, where our code inserts with no conflict clause and a conflict is a
bug: executor_refusals (its id is always assigned), and audit_log (through
``airlock.store.guard_audit_log_against_replace``, which a fresh database got from
``create_audit_log`` already; the guard is the same either way).

There is no ``ON CONFLICT DO UPDATE`` (upsert) in the executor, which a BEFORE INSERT
guard would break: the cursor is an insert that does nothing on conflict, then a
conditional UPDATE. Not guarded, because nothing keeps their rows from DELETE either:
``executor_outbox`` (a work queue: rows are deleted as receipts are delivered, and the
reporter re-queues whatever is undelivered) and ``executor_checkpoint_head`` (a cache of
the last head recorded; losing it costs a repeated audit event).

``NEW.rowid`` is -1 in a BEFORE INSERT trigger when SQLite assigns the rowid, as for
every insert of ours; no row of ours has a rowid below 1, so only an insert naming an
existing rowid matches there. PostgreSQL has no REPLACE (``ON CONFLICT DO UPDATE`` fires
the UPDATE trigger, which refuses): nothing to do there. A later migration that rebuilds
one of these tables on SQLite (new table, copy, drop, rename) must create its guard
again, as 0005 and 0007 did the insert-only triggers.
"""

from __future__ import annotations

from typing import Final

from alembic import op

from airlock.store import guard_audit_log_against_replace

revision: Final = "0008_no_replace"
down_revision: Final = "0007_refusal_receipts"
branch_labels: Final = None
depends_on: Final = None

#: Table -> (the keys of its rows besides rowid, each a tuple of columns; the refusal).
_GUARDED: Final = {
    "executor_ledger": ((("approval_id",), ("nonce",), ("action_hash",)), "IGNORE"),
    "executor_resolutions": ((("approval_id",),), "IGNORE"),
    "executor_feed_cursor": ((("feed",),), "IGNORE"),
    "executor_revocations": ((("approval_id",),), "IGNORE"),
    "executor_deliveries": ((("kind", "approval_id", "attempt"),), "IGNORE"),
    "executor_resends": ((("kind", "approval_id", "attempt"),), "IGNORE"),
    "executor_ledger_holds": ((("feed", "head_seq", "head_hash"),), "IGNORE"),
    "executor_refusals": ((), "ABORT"),
}


def _no_replace(table: str, keys: tuple[tuple[str, ...], ...], refusal: str) -> str:
    # Constants only (hence the S608 noqa); every key column is NOT NULL, so = decides.
    rowid = f"(NEW.rowid > 0 AND EXISTS (SELECT 1 FROM {table} WHERE rowid = NEW.rowid))"  # noqa: S608
    conflicts = [rowid]
    for key in keys:
        match = " AND ".join(f"{column} = NEW.{column}" for column in key)
        conflicts.append(f"EXISTS (SELECT 1 FROM {table} WHERE {match})")  # noqa: S608
    raise_ = (
        "RAISE(IGNORE)"
        if refusal == "IGNORE"
        else f"RAISE(ABORT, '{table}: an INSERT conflicting with a row kept is refused')"
    )
    return f"""
    CREATE TRIGGER {table}_no_replace BEFORE INSERT ON {table}
    WHEN {" OR ".join(conflicts)}
    BEGIN SELECT {raise_}; END
    """


def upgrade() -> None:
    if op.get_context().dialect.name != "sqlite":
        return
    for table, (keys, refusal) in _GUARDED.items():
        op.execute(_no_replace(table, keys, refusal))
    guard_audit_log_against_replace(op)


def downgrade() -> None:
    # Without the guards, one INSERT OR REPLACE in the sqlite3 shell rewrites the ledger.
    raise RuntimeError("the executor's REPLACE guards are never downgraded")
