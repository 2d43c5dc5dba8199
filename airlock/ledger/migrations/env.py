"""Alembic environment for a ledger database, an executor's or a gate's (see
airlock.store._migrate)."""

from airlock.store import run_migrations

# DDL is written by hand in versions/ (triggers, named constraints); no autogenerate.
run_migrations(target_metadata=None)
