"""The checkpoint's audit chain gets the ``lane`` column; it keeps one lane.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07

The audit code shared by every service reads a row's lane (docs/protocol.md#audit-chain).
The checkpoint appends under the whole chain's lock everywhere, so its chain stays one
lane, numbered without gaps; ``airlock.store.add_audit_lanes`` in a later migration would
give it more.
"""

from __future__ import annotations

from typing import Final

from alembic import op

from airlock.store import add_lane_column

revision: Final = "0013"
down_revision: Final = "0012"
branch_labels: Final = None
depends_on: Final = None


def upgrade() -> None:
    add_lane_column(op)


def downgrade() -> None:
    raise RuntimeError("the checkpoint's audit lane column is never dropped")
