"""Alembic environment for the executor's ledger database (see airlock.store._migrate)."""

from airlock.store import run_migrations

# DDL is written by hand in versions/ (triggers, named constraints); no autogenerate.
run_migrations(target_metadata=None)
