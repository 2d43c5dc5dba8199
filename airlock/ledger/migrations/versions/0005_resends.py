"""Delivery attempts: a receipt the checkpoint refused for good can be sent again.

Revision ID: 0005_resends
Revises: 0004_checkpoint_head
Create Date: 2026-11-29

Before this revision a receipt had at most one delivery record (UNIQUE(kind,
approval_id)), so one the checkpoint refused for good (its receipt key not trusted yet,
say) could never be delivered, even after the cause was fixed. Now:

``executor_deliveries``
    gains ``attempt`` (1 for every existing row, which was each receipt's only attempt)
    and is UNIQUE(kind, approval_id, attempt) instead: one row per attempt, so a
    rejected attempt and a later accepted one are both kept. Still insert-only.
``executor_resends``
    one row per operator request to send a rejected receipt again
    (``airlock executor receipts resend``): which receipt, the attempt it queues
    (the last recorded attempt + 1), who asked, when, why. Insert-only;
    UNIQUE(kind, approval_id, attempt), so two requests (or two executors) cannot
    queue the same attempt twice. A resend whose attempt has no delivery row yet is
    undelivered: the reporter re-queues it at start like any other.
``executor_outbox``
    gains ``attempt``: the attempt a queued receipt is (1 unless resent), so its
    delivery is recorded under that attempt and removes that attempt's queue row only.

Receipts themselves are untouched: they stay where the outcome committed them (ledger,
resolutions). Nothing is queued by the upgrade: no resend was requested before it.

On SQLite a UNIQUE constraint cannot be dropped in place, so ``executor_deliveries`` is
rebuilt (SQLite's documented procedure, lang_altertable.html §7: new table, copy every
row with its id, drop, rename) and its insert-only triggers are created again; dropping
a table fires no DELETE trigger. PostgreSQL alters it in place.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from alembic import op

revision: Final = "0005_resends"
down_revision: Final = "0004_checkpoint_head"
branch_labels: Final = None
depends_on: Final = None

_INSERT_ONLY: Final = ("executor_deliveries", "executor_resends")
_COLUMNS: Final = "id, kind, approval_id, status, http_status, error_code, detail, at"


def _sqlite_rebuild_deliveries() -> None:
    op.create_table(
        "executor_deliveries_0005",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("approval_id", sa.String(100), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("http_status", sa.Integer, nullable=True),
        sa.Column("error_code", sa.String(64), nullable=True),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("at", sa.BigInteger, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False, server_default="1"),
        sa.UniqueConstraint(
            "kind", "approval_id", "attempt", name="uq_executor_deliveries_attempt"
        ),
        sa.CheckConstraint("kind IN ('outcome','resolution')", name="ck_executor_deliveries_kind"),
        sa.CheckConstraint(
            "status IN ('delivered','rejected')", name="ck_executor_deliveries_status"
        ),
        sa.CheckConstraint("attempt >= 1", name="ck_executor_deliveries_attempt"),
    )
    # Every existing row was its receipt's first and only attempt; ids are kept, so the
    # history reads in the same order.
    op.execute(
        f"INSERT INTO executor_deliveries_0005 ({_COLUMNS}, attempt) "  # noqa: S608 - constants
        f"SELECT {_COLUMNS}, 1 FROM executor_deliveries"
    )
    op.execute("DROP TABLE executor_deliveries")  # its triggers go with it
    op.execute("ALTER TABLE executor_deliveries_0005 RENAME TO executor_deliveries")


def _pg_alter_deliveries() -> None:
    op.execute(
        "ALTER TABLE executor_deliveries ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1 "
        "CONSTRAINT ck_executor_deliveries_attempt CHECK (attempt >= 1)"
    )
    op.execute("ALTER TABLE executor_deliveries DROP CONSTRAINT uq_executor_deliveries_receipt")
    op.execute(
        "ALTER TABLE executor_deliveries ADD CONSTRAINT uq_executor_deliveries_attempt "
        "UNIQUE (kind, approval_id, attempt)"
    )


def _sqlite_insert_only(table: str) -> list[str]:
    return [
        f"""
        CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table}
        BEGIN SELECT RAISE(ABORT, '{table} is insert-only'); END
        """,
        f"""
        CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table}
        BEGIN SELECT RAISE(ABORT, '{table} is insert-only'); END
        """,
    ]


def _pg_insert_only(table: str) -> list[str]:
    # executor_insert_only() comes from 0001_ledger.
    return [
        f"""
        CREATE TRIGGER {table}_insert_only BEFORE UPDATE OR DELETE ON {table}
        FOR EACH ROW EXECUTE FUNCTION executor_insert_only()
        """,
        f"""
        CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table}
        FOR EACH STATEMENT EXECUTE FUNCTION executor_insert_only()
        """,
    ]


def upgrade() -> None:
    sqlite = op.get_context().dialect.name == "sqlite"
    if sqlite:
        _sqlite_rebuild_deliveries()
    else:
        _pg_alter_deliveries()  # its triggers stay
    op.create_table(
        "executor_resends",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("approval_id", sa.String(100), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("requested_by", sa.String(128), nullable=False),
        sa.Column("requested_at", sa.BigInteger, nullable=False),
        sa.Column("note", sa.Text, nullable=False),
        sa.UniqueConstraint("kind", "approval_id", "attempt", name="uq_executor_resends_attempt"),
        sa.CheckConstraint("kind IN ('outcome','resolution')", name="ck_executor_resends_kind"),
        # Attempt 1 is the receipt's own delivery; a resend is always a later one.
        sa.CheckConstraint("attempt >= 2", name="ck_executor_resends_attempt"),
    )
    # The same statement on both: a column with a constant default and a CHECK can be
    # added in place (SQLite checks the existing rows against it).
    op.execute(
        "ALTER TABLE executor_outbox ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1 "
        "CONSTRAINT ck_executor_outbox_attempt CHECK (attempt >= 1)"
    )
    # SQLite: the rebuilt deliveries table needs 0002's triggers again. PostgreSQL
    # altered it in place, so only the new table needs them.
    tables = _INSERT_ONLY if sqlite else ("executor_resends",)
    for table in tables:
        for ddl in _sqlite_insert_only(table) if sqlite else _pg_insert_only(table):
            op.execute(ddl)


def downgrade() -> None:
    # A downgrade would have to drop every attempt after the first, and the resend
    # requests: delivery history is a record, never thrown away.
    raise RuntimeError("the executor's delivery history is never downgraded")
