"""Refusal receipts: the checkpoint hears of an approval refused before it was used.

Revision ID: 0007_refusal_receipts
Revises: 0006_ledger_holds
Create Date: 2026-12-01

An approval refused before the consume (another audience or account, not yet valid,
expired...) is recorded in ``executor_refusals`` with a signed receipt, but nothing
reached the checkpoint: the proposal showed approved, then lapsed, with no reason. Now
the first such refusal of an approval whose statement authenticated (so it names the
approval) and which this ledger never consumed (so neither a replay nor an approval used
here and presented again once expired) is a third kind of receipt, ``refusal``, queued
when it is recorded and delivered by the outbox to ``POST /v1/refusals``, where it is a
note on the proposal, never its state.

The kind is widened in the three tables that name it: ``executor_outbox``,
``executor_deliveries`` and ``executor_resends`` (``kind IN ('outcome','resolution',
'refusal')``). Nothing else changes and no row is touched. The refusals recorded before
this revision are not reported: whether the ledger had consumed the approval when each
was made is not recorded, and a note must never say an approval went unused that was.

On SQLite a CHECK constraint cannot be changed in place, so each table is rebuilt
(SQLite's documented procedure, lang_altertable.html §7: new table, copy every row with
its id, drop, rename) and the insert-only triggers of deliveries and resends are created
again; dropping a table fires no DELETE trigger. PostgreSQL swaps the constraint in place.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from alembic import op

revision: Final = "0007_refusal_receipts"
down_revision: Final = "0006_ledger_holds"
branch_labels: Final = None
depends_on: Final = None

_KINDS: Final = "kind IN ('outcome','resolution','refusal')"
#: Table -> (its columns in order, whether it is insert-only).
_TABLES: Final = {
    "executor_outbox": ("kind, approval_id, queued_at, attempt", False),
    "executor_deliveries": (
        "id, kind, approval_id, status, http_status, error_code, detail, at, attempt",
        True,
    ),
    "executor_resends": (
        "id, kind, approval_id, attempt, requested_by, requested_at, note",
        True,
    ),
}


def _new_tables(suffix: str, kinds: str) -> None:
    """The three tables as 0005 left them, but for the kind constraint."""
    op.create_table(
        f"executor_outbox{suffix}",
        sa.Column("kind", sa.String(16), primary_key=True),
        sa.Column("approval_id", sa.String(100), primary_key=True),
        sa.Column("queued_at", sa.BigInteger, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False, server_default="1"),
        sa.CheckConstraint(kinds, name="ck_executor_outbox_kind"),
        sa.CheckConstraint("attempt >= 1", name="ck_executor_outbox_attempt"),
    )
    op.create_table(
        f"executor_deliveries{suffix}",
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
        sa.CheckConstraint(kinds, name="ck_executor_deliveries_kind"),
        sa.CheckConstraint(
            "status IN ('delivered','rejected')", name="ck_executor_deliveries_status"
        ),
        sa.CheckConstraint("attempt >= 1", name="ck_executor_deliveries_attempt"),
    )
    op.create_table(
        f"executor_resends{suffix}",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("approval_id", sa.String(100), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("requested_by", sa.String(128), nullable=False),
        sa.Column("requested_at", sa.BigInteger, nullable=False),
        sa.Column("note", sa.Text, nullable=False),
        sa.UniqueConstraint("kind", "approval_id", "attempt", name="uq_executor_resends_attempt"),
        sa.CheckConstraint(kinds, name="ck_executor_resends_kind"),
        sa.CheckConstraint("attempt >= 2", name="ck_executor_resends_attempt"),
    )


def _sqlite_insert_only(table: str) -> list[str]:
    # The same triggers 0002 and 0005 create.
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


def _sqlite_rebuild(kinds: str) -> None:
    suffix = "_0007"
    _new_tables(suffix, kinds)
    for table, (columns, insert_only) in _TABLES.items():
        op.execute(
            f"INSERT INTO {table}{suffix} ({columns}) "  # noqa: S608 - constants only
            f"SELECT {columns} FROM {table}"
        )
        op.execute(f"DROP TABLE {table}")  # its triggers go with it
        op.execute(f"ALTER TABLE {table}{suffix} RENAME TO {table}")
        if insert_only:
            for ddl in _sqlite_insert_only(table):
                op.execute(ddl)


def _pg_swap(kinds: str) -> None:
    # ALTER TABLE checks the existing rows against the new constraint and updates none,
    # so the insert-only triggers neither fire nor need to be touched.
    for table in _TABLES:
        constraint = f"ck_{table}_kind"
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {constraint}")
        op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {constraint} CHECK ({kinds})")


def upgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        _sqlite_rebuild(_KINDS)
    else:
        _pg_swap(_KINDS)


def downgrade() -> None:
    # A refusal receipt delivered (or asked to be sent again) is a record: a downgrade
    # would have to throw it away to fit the narrower constraint.
    raise RuntimeError("the executor's delivery history is never downgraded")
