"""SQLite: no INSERT may replace a refusal note or an audit row.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04 09:00:00

SQLite's REPLACE conflict resolution (``INSERT OR REPLACE``) deletes the rows the new
one conflicts with, and fires DELETE triggers for that only with ``PRAGMA
recursive_triggers`` on (off by default; ``make_engine`` sets it, the sqlite3 shell does
not), so one statement could swap a note or an audit row past the insert-only triggers.
The two tables those triggers keep get a BEFORE INSERT trigger refusing (ABORT) an
insert whose row conflicts with a row kept, on ``rowid`` or any UNIQUE key; it runs
before conflict resolution, so REPLACE has nothing left to delete. Both are inserted
with no conflict clause, so a conflict was an error before and still is (the note's
``IntegrityError`` handler sees the same error type). The audit guard is the one
``create_audit_log`` gives a fresh database (``guard_audit_log_against_replace``).

The checkpoint has no ``ON CONFLICT`` insert at all, and its other tables are updated
in place by design: no trigger keeps their rows, so REPLACE can do there nothing an
UPDATE could not. PostgreSQL has no REPLACE: nothing to do there. ``NEW.rowid`` is -1
when SQLite assigns the rowid, as for every insert of ours.
"""

from collections.abc import Sequence

from alembic import op

from airlock.store import guard_audit_log_against_replace

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "refusal_notes"

# The DDL interpolates only this module's constants.
_SQLITE_NO_REPLACE = f"""
    CREATE TRIGGER {_TABLE}_no_replace BEFORE INSERT ON {_TABLE}
    WHEN (NEW.rowid > 0 AND EXISTS (SELECT 1 FROM {_TABLE} WHERE rowid = NEW.rowid))
      OR EXISTS (SELECT 1 FROM {_TABLE} WHERE receipt_sha256 = NEW.receipt_sha256)
    BEGIN
      SELECT RAISE(ABORT, '{_TABLE} is insert-only: INSERT conflicting with a row refused');
    END
    """  # noqa: S608


def upgrade() -> None:
    if op.get_context().dialect.name != "sqlite":
        return
    op.execute(_SQLITE_NO_REPLACE)
    guard_audit_log_against_replace(op)


def downgrade() -> None:
    # Without the guards, one INSERT OR REPLACE in the sqlite3 shell rewrites the record.
    raise RuntimeError("the checkpoint's REPLACE guards are never downgraded")
