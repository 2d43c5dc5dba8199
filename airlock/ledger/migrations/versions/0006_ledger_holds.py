"""Holds of the feed while this ledger may have forgotten approvals it used.

Revision ID: 0006_ledger_holds
Revises: 0005_resends
Create Date: 2026-11-30

``executor_ledger_holds``
    one row per executor audit head that the checkpoint's last receipt named and this
    ledger's chain does not hold (the ledger was restored from a backup, or replaced):
    from ``since`` until ``until`` (the approval lifetime and clock skew later) nothing
    is taken from the feed, so every approval the lost rows could have used has expired
    first. UNIQUE per (feed, head): a head seen again, by a restart or another executor
    on this ledger, starts no second hold, and a hold is never shortened — it ends by
    time only. Insert-only. The audit chain records each (``executor.ledger_behind``).
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from alembic import op

revision: Final = "0006_ledger_holds"
down_revision: Final = "0005_resends"
branch_labels: Final = None
depends_on: Final = None

_TABLE: Final = "executor_ledger_holds"


def upgrade() -> None:
    op.create_table(
        _TABLE,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("feed", sa.String(300), nullable=False),
        sa.Column("head_seq", sa.BigInteger, nullable=False),
        sa.Column("head_hash", sa.String(64), nullable=False),
        sa.Column("since", sa.BigInteger, nullable=False),
        sa.Column("until", sa.BigInteger, nullable=False),
        sa.UniqueConstraint("feed", "head_seq", "head_hash", name="uq_executor_ledger_holds_head"),
        sa.CheckConstraint("since <= until", name="ck_executor_ledger_holds_span"),
    )
    if op.get_context().dialect.name == "sqlite":
        ddl = [
            f"""
            CREATE TRIGGER {_TABLE}_no_update BEFORE UPDATE ON {_TABLE}
            BEGIN SELECT RAISE(ABORT, '{_TABLE} is insert-only'); END
            """,
            f"""
            CREATE TRIGGER {_TABLE}_no_delete BEFORE DELETE ON {_TABLE}
            BEGIN SELECT RAISE(ABORT, '{_TABLE} is insert-only'); END
            """,
        ]
    else:  # executor_insert_only() comes from 0001_ledger
        ddl = [
            f"""
            CREATE TRIGGER {_TABLE}_insert_only BEFORE UPDATE OR DELETE ON {_TABLE}
            FOR EACH ROW EXECUTE FUNCTION executor_insert_only()
            """,
            f"""
            CREATE TRIGGER {_TABLE}_no_truncate BEFORE TRUNCATE ON {_TABLE}
            FOR EACH STATEMENT EXECUTE FUNCTION executor_insert_only()
            """,
        ]
    for statement in ddl:
        op.execute(statement)


def downgrade() -> None:
    # A hold in force would end with its row: an approval the ledger forgot could run.
    raise RuntimeError("the executor's ledger holds are never downgraded")
