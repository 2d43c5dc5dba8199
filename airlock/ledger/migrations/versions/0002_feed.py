"""The checkpoint feed's cursor, the revocations it delivered, and the outcome outbox.

Revision ID: 0002_feed
Revises: 0001_ledger
Create Date: 2026-11-30

``executor_feed_cursor``
    one row per feed (the checkpoint's base URL): the highest feed sequence whose items
    are all recorded. A trigger refuses moving it backwards and deleting it, so a bug
    can cause a redelivery (harmless: the ledger refuses E_REPLAY) but never a skip.
``executor_revocations``
    every revocation the feed delivered; step 12 reads it, so a revocation outlives
    a restart and is honoured even when it arrives before its approval. Insert-only.
``executor_deliveries``
    the outbox's memory: one row per receipt the checkpoint accepted (``delivered``) or
    refused for good (``rejected``). Receipts themselves stay where the outcome committed
    them (ledger, resolutions); a terminal row is never updated to say it was reported.
    Insert-only.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from alembic import op

revision: Final = "0002_feed"
down_revision: Final = "0001_ledger"
branch_labels: Final = None
depends_on: Final = None

_INSERT_ONLY: Final = ("executor_revocations", "executor_deliveries")


def _sqlite_ddl() -> list[str]:
    ddl = [
        """
        CREATE TRIGGER executor_feed_cursor_forward BEFORE UPDATE ON executor_feed_cursor
        BEGIN
          SELECT RAISE(ABORT, 'executor_feed_cursor: the cursor never moves backwards')
            WHERE NEW.seq < OLD.seq OR NEW.feed IS NOT OLD.feed;
        END
        """,
        """
        CREATE TRIGGER executor_feed_cursor_no_delete BEFORE DELETE ON executor_feed_cursor
        BEGIN SELECT RAISE(ABORT, 'executor_feed_cursor: rows are never deleted'); END
        """,
    ]
    for table in _INSERT_ONLY:
        ddl += [
            f"""
            CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table}
            BEGIN SELECT RAISE(ABORT, '{table} is insert-only'); END
            """,
            f"""
            CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table}
            BEGIN SELECT RAISE(ABORT, '{table} is insert-only'); END
            """,
        ]
    return ddl


def _pg_ddl() -> list[str]:
    # executor_insert_only() comes from 0001_ledger.
    ddl = [
        """
        CREATE OR REPLACE FUNCTION executor_feed_cursor_guard() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
          IF TG_OP <> 'UPDATE' THEN
            RAISE EXCEPTION 'executor_feed_cursor: % refused', TG_OP
              USING ERRCODE = 'insufficient_privilege';
          END IF;
          IF NEW.seq < OLD.seq OR NEW.feed IS DISTINCT FROM OLD.feed THEN
            RAISE EXCEPTION 'executor_feed_cursor: the cursor never moves backwards'
              USING ERRCODE = 'integrity_constraint_violation';
          END IF;
          RETURN NEW;
        END $$
        """,
        """
        CREATE TRIGGER executor_feed_cursor_guard BEFORE UPDATE OR DELETE ON executor_feed_cursor
        FOR EACH ROW EXECUTE FUNCTION executor_feed_cursor_guard()
        """,
        """
        CREATE TRIGGER executor_feed_cursor_no_truncate BEFORE TRUNCATE ON executor_feed_cursor
        FOR EACH STATEMENT EXECUTE FUNCTION executor_insert_only()
        """,
    ]
    for table in _INSERT_ONLY:
        ddl += [
            f"""
            CREATE TRIGGER {table}_insert_only BEFORE UPDATE OR DELETE ON {table}
            FOR EACH ROW EXECUTE FUNCTION executor_insert_only()
            """,
            f"""
            CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table}
            FOR EACH STATEMENT EXECUTE FUNCTION executor_insert_only()
            """,
        ]
    return ddl


def upgrade() -> None:
    op.create_table(
        "executor_feed_cursor",
        sa.Column("feed", sa.String(300), primary_key=True),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
        sa.CheckConstraint("seq >= 0", name="ck_executor_feed_cursor_seq"),
    )
    op.create_table(
        "executor_revocations",
        sa.Column("approval_id", sa.String(100), primary_key=True),
        sa.Column("feed", sa.String(300), nullable=False),
        sa.Column("feed_seq", sa.BigInteger, nullable=False),
        sa.Column("received_at", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "executor_deliveries",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("approval_id", sa.String(100), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("http_status", sa.Integer, nullable=True),
        sa.Column("error_code", sa.String(64), nullable=True),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("at", sa.BigInteger, nullable=False),
        sa.UniqueConstraint("kind", "approval_id", name="uq_executor_deliveries_receipt"),
        sa.CheckConstraint("kind IN ('outcome','resolution')", name="ck_executor_deliveries_kind"),
        sa.CheckConstraint(
            "status IN ('delivered','rejected')", name="ck_executor_deliveries_status"
        ),
    )
    dialect = op.get_context().dialect.name
    for ddl in _sqlite_ddl() if dialect == "sqlite" else _pg_ddl():
        op.execute(ddl)


def downgrade() -> None:
    # Dropping the revocations would let a revoked approval that is redelivered run.
    raise RuntimeError("the executor's feed tables are never downgraded")
