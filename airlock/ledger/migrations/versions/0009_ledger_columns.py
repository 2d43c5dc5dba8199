"""The ledger's copies of the action's target are as immutable as the action itself.

Revision ID: 0009_ledger_columns
Revises: 0008_no_replace
Create Date: 2026-12-05

0001's guard kept the row's identity (approval id, nonce, action hash, the action and
bundle bytes, expiry, claim time, and an epoch that only grows) from every UPDATE, but
not the columns copied out of the signed action when it was consumed: ``proposal_id``,
``resource_type``, ``resource_id``, ``region``, ``operation`` and the envelope's
``keyid``. The write never reads them (its arguments are rebuilt from the action bytes,
``Work.from_row``); people do: ``airlock executor ledger`` lists them, and whoever
resolves an ``in_doubt`` row checks the resource it names. One UPDATE of a claimed or
executing row could have pointed that reader at another instance than the one written.
Now they change in no row, as the rest of the identity.

SQLite: the trigger is dropped and made again with the longer list (a trigger cannot be
altered). PostgreSQL: the guard function is replaced; its trigger calls it by name.
"""

from __future__ import annotations

from typing import Final

from alembic import op

revision: Final = "0009_ledger_columns"
down_revision: Final = "0008_no_replace"
branch_labels: Final = None
depends_on: Final = None

_TERMINAL = "('succeeded','failed','in_doubt','refused')"
_ALLOWED = (
    "NEW.state = OLD.state"
    " OR (OLD.state = 'claimed' AND NEW.state IN ('executing','refused'))"
    " OR (OLD.state = 'executing' AND NEW.state IN ('succeeded','failed','in_doubt'))"
)
#: 0001's list, then the columns copied from the action and envelope at the consume.
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
    if op.get_context().dialect.name == "sqlite":
        for statement in _SQLITE:
            op.execute(statement)
    else:
        op.execute(_PG)


def downgrade() -> None:
    # The shorter guard would let an UPDATE retarget what people read of a row.
    raise RuntimeError("the executor ledger's guard is never downgraded")
