"""The outbox's queue of receipts still to deliver.

Revision ID: 0003_outbox
Revises: 0002_feed
Create Date: 2026-11-29

``executor_outbox``
    one row per receipt not yet accepted or refused for good by the checkpoint: queued
    in the transaction that commits the receipt (the outcome in the ledger, or the
    resolution), deleted in the one that records its delivery in
    ``executor_deliveries``. Before it, the outbox found pending receipts by scanning
    every terminal ledger row for a missing delivery on every flush, a cost that grew
    with the ledger (about 0.35 s per flush at 100,000 rows on SQLite). A work queue,
    not a record: rows are deleted, and nothing is lost with one, since the reporter
    re-queues at start whatever the ledger and deliveries show undelivered.

The upgrade queues every receipt that is undelivered now.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from alembic import op

revision: Final = "0003_outbox"
down_revision: Final = "0002_feed"
branch_labels: Final = None
depends_on: Final = None

#: The same statements the reporter runs at start (services/executor/outbox.py,
#: requeue_undelivered), spelled out here so the migration never depends on app code.
_QUEUE_OUTCOMES: Final = """
INSERT INTO executor_outbox (kind, approval_id, queued_at)
SELECT 'outcome', l.approval_id, l.updated_at FROM executor_ledger l
WHERE l.state IN ('succeeded', 'failed', 'in_doubt', 'refused')
  AND l.receipt IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM executor_deliveries d
                  WHERE d.kind = 'outcome' AND d.approval_id = l.approval_id)
"""
_QUEUE_RESOLUTIONS: Final = """
INSERT INTO executor_outbox (kind, approval_id, queued_at)
SELECT 'resolution', r.approval_id, r.decided_at FROM executor_resolutions r
WHERE NOT EXISTS (SELECT 1 FROM executor_deliveries d
                  WHERE d.kind = 'resolution' AND d.approval_id = r.approval_id)
"""


def upgrade() -> None:
    op.create_table(
        "executor_outbox",
        sa.Column("kind", sa.String(16), primary_key=True),
        sa.Column("approval_id", sa.String(100), primary_key=True),
        sa.Column("queued_at", sa.BigInteger, nullable=False),
        sa.CheckConstraint("kind IN ('outcome', 'resolution')", name="ck_executor_outbox_kind"),
    )
    op.execute(_QUEUE_OUTCOMES)
    op.execute(_QUEUE_RESOLUTIONS)


def downgrade() -> None:
    op.drop_table("executor_outbox")
