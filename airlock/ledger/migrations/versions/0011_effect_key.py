"""A tool call's row carries its effect key, UNIQUE: one effect per key, ever.

Revision ID: 0011_effect_key
Revises: 0010_tool_operation
Create Date: 2026-12-07

A gate consumes a tool-call approval into this ledger (docs/gate.md). Its
``effect_key`` is the business identity of the effect (``refund:order-881``): two
approvals of the same effect, from two proposals or two checkpoints, must not both run.
So the column is UNIQUE, and the consume's INSERT … ON CONFLICT DO NOTHING (which names
no conflict target, so every UNIQUE index is an arbiter on both engines) inserts nothing
for a second approval of the same key: a replay. A cloud action's row holds NULL, and
both engines let any number of rows hold NULL in a UNIQUE index.

SQLite: 0008's no-REPLACE guard on ``executor_ledger`` is made again with the effect
key as one more key (``INSERT OR REPLACE`` must not swap a row out by its key either),
and 0009's identity guard with the effect key among the columns no UPDATE may change.
PostgreSQL: the guard function is replaced; its trigger calls it by name.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from alembic import op

revision: Final = "0011_effect_key"
down_revision: Final = "0010_tool_operation"
branch_labels: Final = None
depends_on: Final = None

_TERMINAL = "('succeeded','failed','in_doubt','refused')"
_ALLOWED = (
    "NEW.state = OLD.state"
    " OR (OLD.state = 'claimed' AND NEW.state IN ('executing','refused'))"
    " OR (OLD.state = 'executing' AND NEW.state IN ('succeeded','failed','in_doubt'))"
)
#: 0009's list, then the effect key.
_IMMUTABLE: Final = (
    "approval_id",
    "nonce",
    "action_hash",
    "action",
    "bundle",
    "expires_at",
    "claimed_at",
    "proposal_id",
    "resource_type",
    "resource_id",
    "region",
    "operation",
    "keyid",
    "effect_key",
)


def _identity_changed(distinct: str) -> str:
    changed = [f"NEW.{c} {distinct} OLD.{c}" for c in _IMMUTABLE]
    return " OR ".join([*changed, "NEW.lease_epoch < OLD.lease_epoch"])


_SQLITE: Final = (
    "DROP TRIGGER executor_ledger_guard",
    f"""
    CREATE TRIGGER executor_ledger_guard BEFORE UPDATE ON executor_ledger
    BEGIN
      SELECT RAISE(ABORT, 'executor_ledger: a terminal row is immutable')
        WHERE OLD.state IN {_TERMINAL};
      SELECT RAISE(ABORT, 'executor_ledger: transition not allowed')
        WHERE NOT ({_ALLOWED});
      SELECT RAISE(ABORT, 'executor_ledger: identity columns are immutable')
        WHERE {_identity_changed("IS NOT")};
    END
    """,
    "DROP TRIGGER executor_ledger_no_replace",
    # 0008's guard with one more key. A NULL effect key (a cloud action) conflicts with
    # nothing: `=` with NULL is never true.
    """
    CREATE TRIGGER executor_ledger_no_replace BEFORE INSERT ON executor_ledger
    WHEN (NEW.rowid > 0 AND EXISTS (SELECT 1 FROM executor_ledger WHERE rowid = NEW.rowid))
      OR EXISTS (SELECT 1 FROM executor_ledger WHERE approval_id = NEW.approval_id)
      OR EXISTS (SELECT 1 FROM executor_ledger WHERE nonce = NEW.nonce)
      OR EXISTS (SELECT 1 FROM executor_ledger WHERE action_hash = NEW.action_hash)
      OR (NEW.effect_key IS NOT NULL
          AND EXISTS (SELECT 1 FROM executor_ledger WHERE effect_key = NEW.effect_key))
    BEGIN SELECT RAISE(IGNORE); END
    """,
)

_PG: Final = f"""
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
      IF {_identity_changed("IS DISTINCT FROM")} THEN
        RAISE EXCEPTION 'executor_ledger: identity columns are immutable'
          USING ERRCODE = 'integrity_constraint_violation';
      END IF;
      RETURN NEW;
    END $$
    """


def upgrade() -> None:
    op.add_column("executor_ledger", sa.Column("effect_key", sa.String(200), nullable=True))
    op.create_index("ux_executor_ledger_effect_key", "executor_ledger", ["effect_key"], unique=True)
    if op.get_context().dialect.name == "sqlite":
        for statement in _SQLITE:
            op.execute(statement)
    else:
        op.execute(_PG)


def downgrade() -> None:
    # Without the UNIQUE key, two approvals of one effect could both run.
    raise RuntimeError("the executor ledger's effect key is never dropped")
