"""executor_resolutions: an executor's resolution receipt that came after a person's.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04 09:00:00

An ``in_doubt`` outcome can be resolved in two places: by an admin at the checkpoint
(``airlock approvals resolve``), which changes only this database, and by a person at
the executor (``airlock executor resolve``), which changes the executor's ledger (the
truth, docs/protocol.md#ledger) and sends a signed resolution receipt here. When the receipt comes
after the admin's resolution it cannot replace it (the proposal has moved on), and it
used to be refused with a plain ``E_STATE``, which the executor listed as one to send
again, for ever. Now it is kept: one row per approval, whether it agrees with the
admin's decision (``agrees``) or contradicts it, with the verified receipt, and the
proposal shows it (``OutcomeOut.executor_resolution``).

UNIQUE ``approval_id``: a ledger resolves a row once (``E_ALREADY_RESOLVED``), so one
receipt per approval; the same receipt posted again is the same answer, and another one
(a second ledger on this audience) is refused. Insert-only (triggers below), like
``refusal_notes``, and on SQLite guarded against ``INSERT OR REPLACE`` as migration 0005
guards that table (a BEFORE INSERT trigger refusing a row that conflicts with one kept).
No foreign key to ``proposals`` (``refusal_notes`` has none either: the approval's key
is checked, and its proposal is the approval's own).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "executor_resolutions"

# The DDL interpolates only this module's constants.
_SQLITE_INSERT_ONLY = (
    f"""
    CREATE TRIGGER {_TABLE}_no_update BEFORE UPDATE ON {_TABLE}
    BEGIN SELECT RAISE(ABORT, '{_TABLE} is insert-only'); END
    """,
    f"""
    CREATE TRIGGER {_TABLE}_no_delete BEFORE DELETE ON {_TABLE}
    BEGIN SELECT RAISE(ABORT, '{_TABLE} is insert-only'); END
    """,
    # As migration 0005's: REPLACE would delete the row it conflicts with (on rowid or
    # the primary key) without the delete trigger unless recursive_triggers is on.
    f"""
    CREATE TRIGGER {_TABLE}_no_replace BEFORE INSERT ON {_TABLE}
    WHEN (NEW.rowid > 0 AND EXISTS (SELECT 1 FROM {_TABLE} WHERE rowid = NEW.rowid))
      OR EXISTS (SELECT 1 FROM {_TABLE} WHERE approval_id = NEW.approval_id)
    BEGIN
      SELECT RAISE(ABORT, '{_TABLE} is insert-only: INSERT conflicting with a row refused');
    END
    """,  # noqa: S608
)

# checkpoint_insert_only() is migration 0004's. PostgreSQL has no REPLACE.
_PG_INSERT_ONLY = (
    f"""
    CREATE TRIGGER {_TABLE}_insert_only BEFORE UPDATE OR DELETE ON {_TABLE}
    FOR EACH ROW EXECUTE FUNCTION checkpoint_insert_only()
    """,
    f"""
    CREATE TRIGGER {_TABLE}_no_truncate BEFORE TRUNCATE ON {_TABLE}
    FOR EACH STATEMENT EXECUTE FUNCTION checkpoint_insert_only()
    """,
)


def upgrade() -> None:
    op.create_table(
        _TABLE,
        sa.Column("approval_id", sa.String(length=96), nullable=False),
        sa.Column("proposal_id", sa.String(length=96), nullable=False),
        sa.Column("decision", sa.String(length=16), nullable=False),
        sa.Column("decided_by", sa.String(length=128), nullable=False),
        sa.Column("decided_at", sa.BigInteger(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("checkpoint_decision", sa.String(length=16), nullable=False),
        sa.Column("checkpoint_resolved_by", sa.String(length=64), nullable=True),
        sa.Column("agrees", sa.Boolean(), nullable=False),
        sa.Column("reported_at", sa.BigInteger(), nullable=False),
        sa.Column("receipt", sa.Text(), nullable=False),
        sa.Column("receipt_keyid", sa.String(length=64), nullable=False),
        sa.Column("receipt_sha256", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["approval_id"],
            ["approvals.approval_id"],
            name=op.f("fk_executor_resolutions_approval_id_approvals"),
        ),
        sa.PrimaryKeyConstraint("approval_id", name=op.f("pk_executor_resolutions")),
    )
    op.create_index("ix_executor_resolutions_proposal_id", _TABLE, ["proposal_id"], unique=False)
    sqlite = op.get_context().dialect.name == "sqlite"
    for ddl in _SQLITE_INSERT_ONLY if sqlite else _PG_INSERT_ONLY:
        op.execute(ddl)


def downgrade() -> None:
    # Part of the record (each has its audit event): never thrown away.
    raise RuntimeError("the checkpoint's executor resolutions are never downgraded")
