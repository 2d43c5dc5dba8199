"""The store tests' chain: audit_log, its triggers and genesis.

Revision ID: 0001
Revises:
"""

from alembic import op

from airlock.store import create_audit_log

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_audit_log(op, "store-tests")


def downgrade() -> None:
    raise RuntimeError("an audit log is evidence: no downgrade")
