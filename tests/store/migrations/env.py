"""Alembic environment of the store tests' own migrations: the three-line form services use."""

from airlock.store import run_migrations

run_migrations(target_metadata=None)
