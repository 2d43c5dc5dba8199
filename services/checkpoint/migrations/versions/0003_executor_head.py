"""executor_head: the latest executor audit chain head a receipt named.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 02:00:00

One row, always there (no head yet: NULLs). Every accepted receipt names the executor's
chain head after its outcome; the row keeps the latest (by the receipt's time, then seq,
so a receipt accepted late never moves it back) and the feed hands it to executors; an
executor whose own chain does not hold it has a ledger that went back (restored from a
backup, or replaced) and has forgotten approvals it used. The audit chain keeps every
head (``checkpoint.outcome.reported``); this row only makes the last one cheap to read.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "executor_head",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=True),
        sa.Column("hash", sa.String(length=100), nullable=True),
        sa.Column("at", sa.BigInteger(), nullable=True),
        sa.Column("recorded_at", sa.BigInteger(), nullable=True),
        sa.CheckConstraint("id = 1", name=op.f("ck_executor_head_single_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_executor_head")),
    )
    op.execute(sa.text("INSERT INTO executor_head (id) VALUES (1)"))


def downgrade() -> None:
    op.drop_table("executor_head")
