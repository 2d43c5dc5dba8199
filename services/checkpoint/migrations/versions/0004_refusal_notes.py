"""refusal_notes: an executor's signed word that it refused an approval before using it.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 09:00:00

One row per refusal receipt an executor reported through ``POST /v1/refusals``: the
approval was refused at one of verify steps 1-12 (another audience, expired, revoked…)
and never consumed. A note, never a state: the proposal stays as it was, as another
executor sharing the ledger may still run the approval. Insert-only (triggers below),
like the audit chain; at most a few per approval (the service refuses more).

``receipt_sha256`` is the SHA-256 of the receipt's signed payload bytes, UNIQUE: the
executor re-posts a receipt whose answer it lost, and the same receipt is one note.

``proposal_id`` has no foreign key, on purpose. A note is written under the audit
chain lock, taken first, and locks no proposal row; a foreign key to ``proposals``
would make PostgreSQL take a KEY SHARE lock on the proposal row after the chain lock,
while a vote holds that row FOR UPDATE and waits for the chain lock: a deadlock. The
approval's row is never locked FOR UPDATE, so its key is checked here, and the
proposal is the approval's own (UNIQUE approvals.proposal_id).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "refusal_notes"

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
)

_PG_INSERT_ONLY = (
    """
    CREATE OR REPLACE FUNCTION checkpoint_insert_only() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
      RAISE EXCEPTION '%: % refused, the table is insert-only', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
    END $$
    """,
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
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("approval_id", sa.String(length=96), nullable=False),
        sa.Column("proposal_id", sa.String(length=96), nullable=False),
        sa.Column("refusal_code", sa.String(length=32), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("executor", sa.String(length=256), nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.Column("reported_at", sa.BigInteger(), nullable=False),
        sa.Column("receipt", sa.Text(), nullable=False),
        sa.Column("receipt_keyid", sa.String(length=64), nullable=False),
        sa.Column("receipt_sha256", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["approval_id"],
            ["approvals.approval_id"],
            name=op.f("fk_refusal_notes_approval_id_approvals"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_refusal_notes")),
        sa.UniqueConstraint("receipt_sha256", name=op.f("uq_refusal_notes_receipt_sha256")),
    )
    op.create_index("ix_refusal_notes_approval_id", _TABLE, ["approval_id"], unique=False)
    op.create_index("ix_refusal_notes_proposal_id", _TABLE, ["proposal_id"], unique=False)
    sqlite = op.get_context().dialect.name == "sqlite"
    for ddl in _SQLITE_INSERT_ONLY if sqlite else _PG_INSERT_ONLY:
        op.execute(ddl)


def downgrade() -> None:
    # The notes are part of the record (each has its audit event): never thrown away.
    raise RuntimeError("the checkpoint's refusal notes are never downgraded")
