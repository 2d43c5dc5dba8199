"""The last checkpoint audit head the feed source recorded, per feed.

Revision ID: 0004_checkpoint_head
Revises: 0003_outbox
Create Date: 2026-11-30

``executor_checkpoint_head``
    one row per feed (the key of ``executor_feed_cursor``): the checkpoint chain's head
    (``seq``, ``hash``) that the last ``executor.checkpoint_head`` audit event recorded.
    The audit chain is the record; this row only lets the source append an event when a
    page's head differs from it, so redelivered pages, restarts and several executors
    on one ledger do not grow the chain with copies. Losing or editing the row costs at
    most a repeated event, never a missed write or a skipped item.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from alembic import op

revision: Final = "0004_checkpoint_head"
down_revision: Final = "0003_outbox"
branch_labels: Final = None
depends_on: Final = None


def upgrade() -> None:
    op.create_table(
        "executor_checkpoint_head",
        sa.Column("feed", sa.String(300), primary_key=True),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("recorded_at", sa.BigInteger, nullable=False),
        sa.CheckConstraint("seq >= 0", name="ck_executor_checkpoint_head_seq"),
    )


def downgrade() -> None:
    op.drop_table("executor_checkpoint_head")
