"""sign_in_key and sessions.last_seen_at: keyed name hashes and the idle timeout.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04 17:00:00

``sign_in_key`` holds one random 32-byte key (hex), made here: the HMAC key of every
user name the checkpoint logs or records from a refused sign-in (``auth.name_key``), so
a name typed at the sign-in (which may be a password typed into the wrong field) is
never written as typed, and its hash cannot be looked up in a table of common names or
passwords without the database. One row (``id = 1``).

``sessions.last_seen_at`` is when a session was last used; a session unused for
``session_idle`` seconds ends (``Accounts.authenticate``). Sessions open at the upgrade
count as used at their creation.
"""

import secrets
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    key_table = op.create_table(
        "sign_in_key",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_sign_in_key_single_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sign_in_key")),
    )
    op.bulk_insert(key_table, [{"id": 1, "key": secrets.token_hex(32)}])
    op.add_column("sessions", sa.Column("last_seen_at", sa.BigInteger(), nullable=True))
    op.execute("UPDATE sessions SET last_seen_at = created_at")


def downgrade() -> None:
    op.drop_column("sessions", "last_seen_at")
    op.drop_table("sign_in_key")
