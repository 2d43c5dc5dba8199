"""The checkpoint's schema and its audit chain.

Revision ID: 0001
Revises:
Create Date: 2026-11-29 07:14:19

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from airlock.store import create_audit_log

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    create_audit_log(op, "checkpoint")
    op.create_table(
        "feed_head",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_feed_head_single_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_feed_head")),
    )
    op.create_table(
        "proposals",
        sa.Column("id", sa.String(length=96), nullable=False),
        sa.Column("action", sa.LargeBinary(), nullable=False),
        sa.Column("action_hash", sa.String(length=71), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("account", sa.String(length=64), nullable=False),
        sa.Column("region", sa.String(length=40), nullable=False),
        sa.Column("resource_type", sa.String(length=32), nullable=False),
        sa.Column("resource_id", sa.String(length=80), nullable=False),
        sa.Column("operation", sa.String(length=32), nullable=False),
        sa.Column("proposed_by", sa.String(length=128), nullable=False),
        sa.Column("submitted_by", sa.String(length=128), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("risk", sa.String(length=8), nullable=False),
        sa.Column("rule", sa.String(length=128), nullable=False),
        sa.Column("effect", sa.String(length=8), nullable=False),
        sa.Column("quorum", sa.Integer(), nullable=False),
        sa.Column("confirm", sa.Boolean(), nullable=False),
        sa.Column("policy_hash", sa.String(length=71), nullable=False),
        sa.Column("deny_reason", sa.Text(), nullable=True),
        sa.Column("approval_deadline", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("risk IN ('low', 'medium', 'high')", name=op.f("ck_proposals_risk")),
        sa.CheckConstraint(
            "state IN ('pending', 'approved', 'executed', 'refused', 'failed', 'in_doubt', "
            "'rejected', 'expired', 'withdrawn', 'revoked', 'lapsed', 'denied')",
            name=op.f("ck_proposals_state"),
        ),
        sa.CheckConstraint("quorum >= 1", name=op.f("ck_proposals_quorum")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_proposals")),
    )
    op.create_index(
        "ix_proposals_state_created", "proposals", ["state", "created_at"], unique=False
    )
    op.create_index(
        "uq_proposals_open_target",
        "proposals",
        ["account", "resource_type", "resource_id", "operation"],
        unique=True,
        sqlite_where=sa.text("state IN ('pending', 'approved', 'in_doubt')"),
        postgresql_where=sa.text("state IN ('pending', 'approved', 'in_doubt')"),
    )
    op.create_table(
        "service_tokens",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("revoked_at", sa.BigInteger(), nullable=True),
        sa.CheckConstraint("role IN ('agent', 'executor')", name=op.f("ck_service_tokens_role")),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_service_tokens")),
        sa.UniqueConstraint("name", name=op.f("uq_service_tokens_name")),
    )
    op.create_table(
        "signing_keys",
        sa.Column("kid", sa.String(length=64), nullable=False),
        sa.Column("public_key", sa.String(length=64), nullable=False),
        sa.Column("first_used_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("kid", name=op.f("pk_signing_keys")),
    )
    op.create_table(
        "users",
        sa.Column("username", sa.String(length=64), nullable=False),
        sa.Column("password_hash", sa.Text(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("disabled", sa.Boolean(), nullable=False),
        sa.Column("failed_logins", sa.Integer(), nullable=False),
        sa.Column("locked_until", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("role IN ('viewer', 'approver', 'admin')", name=op.f("ck_users_role")),
        sa.PrimaryKeyConstraint("username", name=op.f("pk_users")),
    )
    op.create_table(
        "approvals",
        sa.Column("approval_id", sa.String(length=96), nullable=False),
        sa.Column("proposal_id", sa.String(length=96), nullable=False),
        sa.Column("nonce", sa.String(length=32), nullable=False),
        sa.Column("statement", sa.LargeBinary(), nullable=False),
        sa.Column("envelope", sa.Text(), nullable=False),
        sa.Column("keyid", sa.String(length=64), nullable=False),
        sa.Column("issued_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("revoked_at", sa.BigInteger(), nullable=True),
        sa.Column("revoked_by", sa.String(length=64), nullable=True),
        sa.Column("revoke_note", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["proposal_id"], ["proposals.id"], name=op.f("fk_approvals_proposal_id_proposals")
        ),
        sa.PrimaryKeyConstraint("approval_id", name=op.f("pk_approvals")),
        sa.UniqueConstraint("nonce", name=op.f("uq_approvals_nonce")),
        sa.UniqueConstraint("proposal_id", name=op.f("uq_approvals_proposal_id")),
    )
    op.create_table(
        "rejections",
        sa.Column("proposal_id", sa.String(length=96), nullable=False),
        sa.Column("reason_code", sa.String(length=24), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("by", sa.String(length=64), nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(
            "reason_code IN ('not_idle', 'protected', 'wrong_target', 'needs_more_info', 'other')",
            name=op.f("ck_rejections_reason_code"),
        ),
        sa.ForeignKeyConstraint(
            ["proposal_id"], ["proposals.id"], name=op.f("fk_rejections_proposal_id_proposals")
        ),
        sa.PrimaryKeyConstraint("proposal_id", name=op.f("pk_rejections")),
    )
    op.create_table(
        "sessions",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("username", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("revoked_at", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["username"], ["users.username"], name=op.f("fk_sessions_username_users")
        ),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_sessions")),
    )
    op.create_table(
        "votes",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("proposal_id", sa.String(length=96), nullable=False),
        sa.Column("voter", sa.String(length=64), nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["proposal_id"], ["proposals.id"], name=op.f("fk_votes_proposal_id_proposals")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_votes")),
        sa.UniqueConstraint("proposal_id", "voter", name=op.f("uq_votes_proposal_id_voter")),
    )
    op.create_table(
        "feed_events",
        sa.Column("seq", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("approval_id", sa.String(length=96), nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("kind IN ('approval', 'revocation')", name=op.f("ck_feed_events_kind")),
        sa.ForeignKeyConstraint(
            ["approval_id"],
            ["approvals.approval_id"],
            name=op.f("fk_feed_events_approval_id_approvals"),
        ),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_feed_events")),
        sa.UniqueConstraint("kind", "approval_id", name=op.f("uq_feed_events_kind_approval_id")),
    )
    op.create_table(
        "outcomes",
        sa.Column("approval_id", sa.String(length=96), nullable=False),
        sa.Column("proposal_id", sa.String(length=96), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("refusal_code", sa.String(length=32), nullable=True),
        sa.Column("receipt", sa.Text(), nullable=False),
        sa.Column("receipt_verified", sa.Boolean(), nullable=False),
        sa.Column("receipt_keyid", sa.String(length=64), nullable=True),
        sa.Column("late", sa.Boolean(), nullable=False),
        sa.Column("reported_at", sa.BigInteger(), nullable=False),
        sa.Column("resolution", sa.String(length=16), nullable=True),
        sa.Column("resolved_by", sa.String(length=64), nullable=True),
        sa.Column("resolved_at", sa.BigInteger(), nullable=True),
        sa.Column("resolution_note", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["approval_id"],
            ["approvals.approval_id"],
            name=op.f("fk_outcomes_approval_id_approvals"),
        ),
        sa.ForeignKeyConstraint(
            ["proposal_id"], ["proposals.id"], name=op.f("fk_outcomes_proposal_id_proposals")
        ),
        sa.PrimaryKeyConstraint("approval_id", name=op.f("pk_outcomes")),
    )
    # The feed counter row exists from the start, so issuing only ever UPDATEs it (and so
    # locks it): feed sequence numbers are handed out in commit order.
    op.execute(sa.text("INSERT INTO feed_head (id, seq) VALUES (1, 0)"))


def downgrade() -> None:
    raise RuntimeError(
        "the checkpoint database holds an audit log, which is evidence: no downgrade"
    )
