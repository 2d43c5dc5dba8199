"""The notification outbox: events and their deliveries (docs/notifications.md).

Revision ID: 0010
Revises: 0008
Create Date: 2026-12-07 05:00:00

``notify_events`` holds one event per (proposal, kind), written in the transaction of
the state change it tells of; ``notify_deliveries`` one row per (event, channel), which
the checkpoint's delivery worker claims, sends and marks delivered, or dead after the
channel's retry window. Numbered 0010 so that a 0009 written beside it can land first;
``down_revision`` names whichever revision is the head when it lands.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KINDS = (
    "proposal.needs_vote",
    "proposal.approved",
    "proposal.executed",
    "proposal.failed",
    "proposal.in_doubt",
    "proposal.refused",
    "proposal.expiring",
    "proposal.expired",
    "approval.lapsed",
)
_STATES = ("pending", "delivered", "dead")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def upgrade() -> None:
    op.create_table(
        "notify_events",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("proposal_id", sa.String(length=96), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(_in("kind", _KINDS), name=op.f("ck_notify_events_kind")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notify_events")),
        sa.UniqueConstraint("proposal_id", "kind", name=op.f("uq_notify_events_proposal_id_kind")),
    )
    op.create_table(
        "notify_deliveries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("event_id", sa.String(length=40), nullable=False),
        sa.Column("channel", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_at", sa.BigInteger(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("delivered_at", sa.BigInteger(), nullable=True),
        sa.CheckConstraint(_in("state", _STATES), name=op.f("ck_notify_deliveries_state")),
        sa.ForeignKeyConstraint(
            ["event_id"],
            ["notify_events.id"],
            name=op.f("fk_notify_deliveries_event_id_notify_events"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notify_deliveries")),
        sa.UniqueConstraint(
            "event_id", "channel", name=op.f("uq_notify_deliveries_event_id_channel")
        ),
    )
    op.create_index("ix_notify_deliveries_state_next_at", "notify_deliveries", ["state", "next_at"])


def downgrade() -> None:
    op.drop_index("ix_notify_deliveries_state_next_at", table_name="notify_deliveries")
    op.drop_table("notify_deliveries")
    op.drop_table("notify_events")
