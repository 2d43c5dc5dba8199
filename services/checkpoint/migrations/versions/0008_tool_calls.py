"""Tool calls: the action type, effect key, audience and summary of a proposal, one open
proposal per (audience, effect key), and reject reasons a policy names per tool.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-07 02:00:00

A tool call (``airlock.tool-call/v1``) is stored in the cloud columns as
docs/protocol.md#tool-call-at-the-checkpoint says: provider ``""``, account = its
audience, region ``""``, resource type ``tool-call``, resource id = its target,
operation = its tool. ``account``, ``resource_id`` and ``operation`` are widened to
what an audience, a target and a tool may be (128, 100, 64); SQLite never enforces a
VARCHAR length, so only PostgreSQL is altered.

The open-slot rule splits in two partial UNIQUE indexes: a cloud action (no effect
key) holds (account, resource type, resource id, operation) as before; a tool call
holds (audience, effect key), so two refunds on one order with two effect keys may be
open at once, and one effect key never twice.

``rejections.reason_code`` took only the five built-in reasons; a policy may now add
its own per tool (``[tools.<tool>] reject_reasons``). The service admits only the
built-in ones and the tool's own; the database keeps the shape: 1 to 40 characters of
``a-z``, ``0-9`` and ``_``, starting with a letter (written with ``trim``, which
SQLite and PostgreSQL read alike). SQLite rebuilds the table to change a CHECK.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OPEN = "state IN ('pending', 'approved', 'in_doubt')"
_CLOUD_OPEN = f"{_OPEN} AND effect_key IS NULL"
_TOOL_OPEN = f"{_OPEN} AND effect_key IS NOT NULL"
_OLD_REASONS = (
    "reason_code IN ('not_idle', 'protected', 'wrong_target', 'needs_more_info', 'other')"
)
#: Kept equal to ``models.REASON_CODE_SHAPE``.
_REASON_SHAPE = (
    "length(reason_code) BETWEEN 1 AND 40"
    " AND trim(reason_code, 'abcdefghijklmnopqrstuvwxyz0123456789_') = ''"
    " AND trim(substr(reason_code, 1, 1), 'abcdefghijklmnopqrstuvwxyz') = ''"
)


def upgrade() -> None:
    # Nullable or defaulted ADD COLUMN: no table rebuild on SQLite.
    op.add_column(
        "proposals",
        sa.Column(
            "action_type",
            sa.String(length=32),
            nullable=False,
            server_default="airlock.action/v1",
        ),
    )
    op.add_column("proposals", sa.Column("effect_key", sa.String(length=200), nullable=True))
    op.add_column("proposals", sa.Column("audience", sa.String(length=128), nullable=True))
    op.add_column("proposals", sa.Column("summary", sa.Text(), nullable=True))
    if op.get_context().dialect.name == "postgresql":
        op.alter_column("proposals", "account", type_=sa.String(length=128))
        op.alter_column("proposals", "resource_id", type_=sa.String(length=100))
        op.alter_column("proposals", "operation", type_=sa.String(length=64))
    op.drop_index("uq_proposals_open_target", table_name="proposals")
    op.create_index(
        "uq_proposals_open_target",
        "proposals",
        ["account", "resource_type", "resource_id", "operation"],
        unique=True,
        sqlite_where=sa.text(_CLOUD_OPEN),
        postgresql_where=sa.text(_CLOUD_OPEN),
    )
    op.create_index(
        "uq_proposals_open_effect",
        "proposals",
        ["audience", "effect_key"],
        unique=True,
        sqlite_where=sa.text(_TOOL_OPEN),
        postgresql_where=sa.text(_TOOL_OPEN),
    )
    with op.batch_alter_table("rejections") as batch:
        batch.drop_constraint(op.f("ck_rejections_reason_code"), type_="check")
        batch.alter_column(
            "reason_code", type_=sa.String(length=40), existing_type=sa.String(length=24)
        )
        batch.create_check_constraint(op.f("ck_rejections_reason_code"), sa.text(_REASON_SHAPE))


def downgrade() -> None:
    # Refused by the old CHECK if a tool's own reason was recorded: nothing is lost.
    with op.batch_alter_table("rejections") as batch:
        batch.drop_constraint(op.f("ck_rejections_reason_code"), type_="check")
        batch.alter_column(
            "reason_code", type_=sa.String(length=24), existing_type=sa.String(length=40)
        )
        batch.create_check_constraint(op.f("ck_rejections_reason_code"), sa.text(_OLD_REASONS))
    op.drop_index("uq_proposals_open_effect", table_name="proposals")
    op.drop_index("uq_proposals_open_target", table_name="proposals")
    op.create_index(
        "uq_proposals_open_target",
        "proposals",
        ["account", "resource_type", "resource_id", "operation"],
        unique=True,
        sqlite_where=sa.text(_OPEN),
        postgresql_where=sa.text(_OPEN),
    )
    for column in ("summary", "audience", "effect_key", "action_type"):
        with op.batch_alter_table("proposals") as batch:
            batch.drop_column(column)
