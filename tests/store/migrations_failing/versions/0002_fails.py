"""Creates a table, then fails: nothing of 0001 or 0002 may remain.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("half_done", sa.Column("id", sa.Integer, primary_key=True))
    raise RuntimeError("revision 0002 fails on purpose")


def downgrade() -> None:
    op.drop_table("half_done")
