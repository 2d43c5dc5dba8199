"""The executor's audit chain gets 16 lanes on PostgreSQL, so executors commit in parallel.

Revision ID: 0012_audit_lanes
Revises: 0011_effect_key
Create Date: 2026-12-07

With one chain every transaction that appends waits for the previous appender's commit,
WAL flush included, so eight executor processes ran slower than one (issue 25). Each
lane is hash-linked on its own and appended by one transaction at a time; the rows of all
lanes are numbered by one sequence (docs/protocol.md#audit-chain). What this does is
``airlock.store.add_audit_lanes``: a lanes row on lane 0 declares 16, a genesis row
begins each other lane, and ``airlock_audit_lane()`` hands an appender a free lane. Rows
appended before stay where they are, in lane 0, and verify as before.

SQLite keeps one lane (``BEGIN IMMEDIATE`` admits one writer at a time anyway): the
``lane`` column only, where the database is older than it.
"""

from __future__ import annotations

from typing import Final

from alembic import op

from airlock.store import add_audit_lanes

revision: Final = "0012_audit_lanes"
down_revision: Final = "0011_effect_key"
branch_labels: Final = None
depends_on: Final = None

#: More than the executor processes one database serves; a lane nobody takes costs a row.
LANES: Final = 16


def upgrade() -> None:
    add_audit_lanes(op, "executor", LANES)


def downgrade() -> None:
    # Lanes hold rows of the chain: folding them back would rewrite evidence.
    raise RuntimeError("the executor's audit lanes are never downgraded")
