"""The executor ledger, its refusals and resolutions, and the executor audit chain.

Revision ID: 0001_ledger
Revises:
Create Date: 2026-11-29

The triggers are the ledger's last line of defence (docs/protocol.md#ledger): terminal rows never
change, rows are never deleted, only the allowed transitions happen, the identity of a
consumed approval cannot be rewritten and an epoch never goes backwards — whatever the
code above them does.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from alembic import op

from airlock.store import create_audit_log

revision: Final = "0001_ledger"
down_revision: Final = None
branch_labels: Final = None
depends_on: Final = None

_TERMINAL = "('succeeded','failed','in_doubt','refused')"
_ALLOWED = (
    "NEW.state = OLD.state"
    " OR (OLD.state = 'claimed' AND NEW.state IN ('executing','refused'))"
    " OR (OLD.state = 'executing' AND NEW.state IN ('succeeded','failed','in_doubt'))"
)
_IDENTITY_CHANGED = (
    "NEW.approval_id IS DISTINCT FROM OLD.approval_id"
    " OR NEW.nonce IS DISTINCT FROM OLD.nonce"
    " OR NEW.action_hash IS DISTINCT FROM OLD.action_hash"
    " OR NEW.action IS DISTINCT FROM OLD.action"
    " OR NEW.bundle IS DISTINCT FROM OLD.bundle"
    " OR NEW.expires_at IS DISTINCT FROM OLD.expires_at"
    " OR NEW.claimed_at IS DISTINCT FROM OLD.claimed_at"
    " OR NEW.lease_epoch < OLD.lease_epoch"
)

_SQLITE: Final = (
    f"""
    CREATE TRIGGER executor_ledger_guard BEFORE UPDATE ON executor_ledger
    BEGIN
      SELECT RAISE(ABORT, 'executor_ledger: a terminal row is immutable')
        WHERE OLD.state IN {_TERMINAL};
      SELECT RAISE(ABORT, 'executor_ledger: transition not allowed')
        WHERE NOT ({_ALLOWED});
      SELECT RAISE(ABORT, 'executor_ledger: identity columns are immutable')
        WHERE {_IDENTITY_CHANGED.replace("IS DISTINCT FROM", "IS NOT")};
    END
    """,
    """
    CREATE TRIGGER executor_ledger_no_delete BEFORE DELETE ON executor_ledger
    BEGIN SELECT RAISE(ABORT, 'executor_ledger: rows are never deleted'); END
    """,
    """
    CREATE TRIGGER executor_refusals_no_update BEFORE UPDATE ON executor_refusals
    BEGIN SELECT RAISE(ABORT, 'executor_refusals is insert-only'); END
    """,
    """
    CREATE TRIGGER executor_refusals_no_delete BEFORE DELETE ON executor_refusals
    BEGIN SELECT RAISE(ABORT, 'executor_refusals is insert-only'); END
    """,
    """
    CREATE TRIGGER executor_resolutions_no_update BEFORE UPDATE ON executor_resolutions
    BEGIN SELECT RAISE(ABORT, 'executor_resolutions is insert-only'); END
    """,
    """
    CREATE TRIGGER executor_resolutions_no_delete BEFORE DELETE ON executor_resolutions
    BEGIN SELECT RAISE(ABORT, 'executor_resolutions is insert-only'); END
    """,
)

_PG: Final = (
    f"""
    CREATE OR REPLACE FUNCTION executor_ledger_guard() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP <> 'UPDATE' THEN
        RAISE EXCEPTION 'executor_ledger: % refused, rows are never deleted', TG_OP
          USING ERRCODE = 'insufficient_privilege';
      END IF;
      IF OLD.state IN {_TERMINAL} THEN
        RAISE EXCEPTION 'executor_ledger: a terminal row is immutable (%)', OLD.approval_id
          USING ERRCODE = 'insufficient_privilege';
      END IF;
      IF NOT ({_ALLOWED}) THEN
        RAISE EXCEPTION 'executor_ledger: transition % -> % not allowed', OLD.state, NEW.state
          USING ERRCODE = 'integrity_constraint_violation';
      END IF;
      IF {_IDENTITY_CHANGED} THEN
        RAISE EXCEPTION 'executor_ledger: identity columns are immutable'
          USING ERRCODE = 'integrity_constraint_violation';
      END IF;
      RETURN NEW;
    END $$
    """,
    """
    CREATE OR REPLACE FUNCTION executor_insert_only() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
      RAISE EXCEPTION '%: % refused, the table is insert-only', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
    END $$
    """,
    """
    CREATE TRIGGER executor_ledger_guard BEFORE UPDATE OR DELETE ON executor_ledger
    FOR EACH ROW EXECUTE FUNCTION executor_ledger_guard()
    """,
    """
    CREATE TRIGGER executor_ledger_no_truncate BEFORE TRUNCATE ON executor_ledger
    FOR EACH STATEMENT EXECUTE FUNCTION executor_insert_only()
    """,
    """
    CREATE TRIGGER executor_refusals_insert_only BEFORE UPDATE OR DELETE ON executor_refusals
    FOR EACH ROW EXECUTE FUNCTION executor_insert_only()
    """,
    """
    CREATE TRIGGER executor_refusals_no_truncate BEFORE TRUNCATE ON executor_refusals
    FOR EACH STATEMENT EXECUTE FUNCTION executor_insert_only()
    """,
    """
    CREATE TRIGGER executor_resolutions_insert_only
    BEFORE UPDATE OR DELETE ON executor_resolutions
    FOR EACH ROW EXECUTE FUNCTION executor_insert_only()
    """,
    """
    CREATE TRIGGER executor_resolutions_no_truncate BEFORE TRUNCATE ON executor_resolutions
    FOR EACH STATEMENT EXECUTE FUNCTION executor_insert_only()
    """,
)


def upgrade() -> None:
    op.create_table(
        "executor_ledger",
        sa.Column("approval_id", sa.String(100), primary_key=True),
        sa.Column("nonce", sa.String(64), nullable=False),
        sa.Column("action_hash", sa.String(80), nullable=False),
        sa.Column("proposal_id", sa.String(100), nullable=False),
        sa.Column("resource_type", sa.String(32), nullable=False),
        sa.Column("resource_id", sa.String(100), nullable=False),
        sa.Column("region", sa.String(48), nullable=False),
        sa.Column("operation", sa.String(32), nullable=False),
        sa.Column("action", sa.LargeBinary, nullable=False),
        sa.Column("bundle", sa.LargeBinary, nullable=False),
        sa.Column("keyid", sa.String(80), nullable=False),
        sa.Column("expires_at", sa.BigInteger, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("lease_owner", sa.String(128), nullable=False),
        sa.Column("lease_epoch", sa.Integer, nullable=False),
        sa.Column("lease_expires", sa.BigInteger, nullable=False),
        sa.Column("claimed_at", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
        sa.Column("refusal_code", sa.String(32), nullable=True),
        sa.Column("cloud_request_id", sa.String(128), nullable=True),
        sa.Column("verified", sa.Boolean, nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("receipt", sa.Text, nullable=True),
        sa.UniqueConstraint("nonce", name="uq_executor_ledger_nonce"),
        sa.UniqueConstraint("action_hash", name="uq_executor_ledger_action_hash"),
        sa.CheckConstraint(
            "state IN ('claimed','executing','succeeded','failed','in_doubt','refused')",
            name="ck_executor_ledger_state",
        ),
        sa.CheckConstraint("lease_epoch >= 1", name="ck_executor_ledger_epoch"),
    )
    op.create_index("ix_executor_ledger_active", "executor_ledger", ["state", "lease_expires"])
    op.create_table(
        "executor_refusals",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.BigInteger, nullable=False),
        sa.Column("code", sa.String(32), nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("approval_id", sa.String(100), nullable=True),
        sa.Column("action_hash", sa.String(80), nullable=True),
        sa.Column("bundle_sha256", sa.String(80), nullable=False),
        sa.Column("receipt", sa.Text, nullable=False),
    )
    op.create_index("ix_executor_refusals_approval", "executor_refusals", ["approval_id"])
    op.create_table(
        "executor_resolutions",
        sa.Column(
            "approval_id",
            sa.String(100),
            sa.ForeignKey("executor_ledger.approval_id"),
            primary_key=True,
        ),
        sa.Column("decision", sa.String(16), nullable=False),
        sa.Column("decided_by", sa.String(128), nullable=False),
        sa.Column("decided_at", sa.BigInteger, nullable=False),
        sa.Column("note", sa.Text, nullable=False),
        sa.Column("receipt", sa.Text, nullable=False),
        sa.CheckConstraint(
            "decision IN ('happened','did_not_happen')",
            name="ck_executor_resolutions_decision",
        ),
    )
    dialect = op.get_context().dialect.name
    for ddl in _SQLITE if dialect == "sqlite" else _PG:
        op.execute(ddl)
    create_audit_log(op, "executor")


def downgrade() -> None:
    # The ledger is the memory of which approvals were used; dropping it would let every
    # one of them be replayed. Never.
    raise RuntimeError("the executor ledger is never downgraded")
