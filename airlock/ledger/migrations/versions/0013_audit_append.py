"""The executor's audit append becomes one call on PostgreSQL, its head read by the index.

Revision ID: 0013_audit_append
Revises: 0012_audit_lanes
Create Date: 2026-12-07

``airlock.store.add_audit_append``: ``airlock_audit_append(lane, event, event_bytes)``
appends a row as the append statement did, and with no lane given takes one first, so an
outcome's transaction takes its lane and appends in one round trip. The head reads (this
function's and the insert trigger's) are planned with sorting off: a plan made while the
table held one page (a new database) scanned and sorted the whole table on every append
for as long as the connection lived. The rows and their hashes are the same as before.

SQLite has no round trips and plans each statement itself: nothing changes there.
"""

from __future__ import annotations

from typing import Final

from alembic import op

from airlock.store import add_audit_append

revision: Final = "0013_audit_append"
down_revision: Final = "0012_audit_lanes"
branch_labels: Final = None
depends_on: Final = None


def upgrade() -> None:
    add_audit_append(op)


def downgrade() -> None:
    # No row depends on it: appends go back to their statements.
    if op.get_context().dialect.name == "postgresql":
        op.execute("DROP FUNCTION airlock_audit_append(integer, text, bytea)")
        op.execute("ALTER FUNCTION airlock_audit_log_extends_head() RESET enable_sort")
