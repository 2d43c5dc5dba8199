"""Routing, SLAs and escalation; people's notification preferences.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07 08:00:00

``proposal_routes`` holds a routed proposal's groups, its SLA and the level it was
escalated to; ``notify_prefs`` a person's own notification preference. The outbox takes
``proposal.escalated`` (one per level: ``notify_events.step``), and a delivery's channel
may be ``person:<username>`` (80 characters).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
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


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def upgrade() -> None:
    with op.batch_alter_table("notify_events") as batch:
        batch.add_column(sa.Column("step", sa.Integer(), nullable=False, server_default="0"))
        batch.drop_constraint(op.f("uq_notify_events_proposal_id_kind"), type_="unique")
        batch.create_unique_constraint(
            op.f("uq_notify_events_proposal_id_kind_step"), ["proposal_id", "kind", "step"]
        )
        batch.drop_constraint(op.f("ck_notify_events_kind"), type_="check")
        batch.create_check_constraint(
            op.f("ck_notify_events_kind"), sa.text(_in("kind", (*_KINDS, "proposal.escalated")))
        )
    if op.get_context().dialect.name == "postgresql":
        op.alter_column("notify_deliveries", "channel", type_=sa.String(length=80))
    op.create_table(
        "proposal_routes",
        sa.Column("proposal_id", sa.String(length=96), nullable=False),
        sa.Column("rule", sa.String(length=128), nullable=False),
        sa.Column("groups", sa.Text(), nullable=False),
        sa.Column("notify", sa.Text(), nullable=False),
        sa.Column("sla", sa.BigInteger(), nullable=True),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("due_at", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("level >= 0", name=op.f("ck_proposal_routes_level")),
        sa.ForeignKeyConstraint(
            ["proposal_id"],
            ["proposals.id"],
            name=op.f("fk_proposal_routes_proposal_id_proposals"),
        ),
        sa.PrimaryKeyConstraint("proposal_id", name=op.f("pk_proposal_routes")),
    )
    op.create_index("ix_proposal_routes_due_at", "proposal_routes", ["due_at"])
    op.create_table(
        "notify_prefs",
        sa.Column("username", sa.String(length=64), nullable=False),
        sa.Column("events", sa.Text(), nullable=False),
        sa.Column("email", sa.String(length=254), nullable=True),
        sa.Column("slack_url", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["username"], ["users.username"], name=op.f("fk_notify_prefs_username_users")
        ),
        sa.PrimaryKeyConstraint("username", name=op.f("pk_notify_prefs")),
    )


def downgrade() -> None:
    op.drop_table("notify_prefs")
    op.drop_index("ix_proposal_routes_due_at", table_name="proposal_routes")
    op.drop_table("proposal_routes")
    op.execute(
        "DELETE FROM notify_deliveries WHERE event_id IN "
        "(SELECT id FROM notify_events WHERE kind = 'proposal.escalated')"
    )
    op.execute("DELETE FROM notify_events WHERE kind = 'proposal.escalated'")
    with op.batch_alter_table("notify_events") as batch:
        batch.drop_constraint(op.f("ck_notify_events_kind"), type_="check")
        batch.create_check_constraint(op.f("ck_notify_events_kind"), sa.text(_in("kind", _KINDS)))
        batch.drop_constraint(op.f("uq_notify_events_proposal_id_kind_step"), type_="unique")
        batch.create_unique_constraint(
            op.f("uq_notify_events_proposal_id_kind"), ["proposal_id", "kind"]
        )
        batch.drop_column("step")
