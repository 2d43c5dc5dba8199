"""Edits: an approver's edit of a tool call makes a new proposal that supersedes the old.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07 05:00:00

``superseded_by`` is set on the withdrawn original: the id of the proposal its edit made.
``edit`` is set on that new proposal: JSON of who edited which arguments from what, when,
with what note, and which proposal it supersedes (``services.checkpoint.edits``). Both are
NULL on every proposal that was never edited, so rows from before read as before.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable ADD COLUMN: no table rebuild on SQLite, no rewrite on PostgreSQL.
    op.add_column("proposals", sa.Column("superseded_by", sa.String(length=96), nullable=True))
    op.add_column("proposals", sa.Column("edit", sa.Text(), nullable=True))


def downgrade() -> None:
    for column in ("edit", "superseded_by"):
        with op.batch_alter_table("proposals") as batch:
            batch.drop_column(column)
