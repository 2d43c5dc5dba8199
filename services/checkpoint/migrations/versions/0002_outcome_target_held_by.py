"""outcomes.target_held_by: a late in_doubt outcome whose target another proposal holds.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 10:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable ADD COLUMN: no table rebuild on SQLite, no rewrite on PostgreSQL.
    op.add_column("outcomes", sa.Column("target_held_by", sa.String(length=96), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("outcomes") as batch:
        batch.drop_column("target_held_by")
