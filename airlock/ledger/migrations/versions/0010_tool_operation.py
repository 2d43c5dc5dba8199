"""A ledger row's ``operation`` holds a tool's name: up to 64 characters.

Revision ID: 0010_tool_operation
Revises: 0009_ledger_columns
Create Date: 2026-12-04

A tool call's row (docs/protocol.md#ledger) keeps its tool in ``operation``, and a tool's
name is up to 64 characters (docs/protocol.md#tool-call), where a cloud operation's is
up to 32. PostgreSQL enforces a VARCHAR's length, so the column is widened there; a
wider VARCHAR rewrites no row and leaves the guard trigger, which names no type, as it
is. SQLite enforces no VARCHAR length: nothing to do.
"""

from __future__ import annotations

from typing import Final

from alembic import op

revision: Final = "0010_tool_operation"
down_revision: Final = "0009_ledger_columns"
branch_labels: Final = None
depends_on: Final = None


def upgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute("ALTER TABLE executor_ledger ALTER COLUMN operation TYPE VARCHAR(64)")


def downgrade() -> None:
    # A narrower column would refuse the rows of tool calls already consumed.
    raise RuntimeError("the executor ledger's operation column is never narrowed")
