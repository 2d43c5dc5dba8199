"""Rate limits shared by checkpoint replicas: sign-in counts and refusal budgets.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07 08:00:00

On PostgreSQL every checkpoint process on the database reads and writes these
(``services/checkpoint/limits.py``), so a guesser slowed on one replica is slowed on all,
and a token out of refusal budget on one is refused by all. On SQLite (one process) they
stay empty: the counts live in memory.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "sign_in_counts",
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("next_at", sa.BigInteger(), nullable=False),
        sa.Column("last_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_sign_in_counts")),
    )
    op.create_table(
        "refusal_budgets",
        sa.Column("token_key", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("tokens", sa.Float(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("token_key", name=op.f("pk_refusal_budgets")),
    )


def downgrade() -> None:
    op.drop_table("refusal_budgets")
    op.drop_table("sign_in_counts")
