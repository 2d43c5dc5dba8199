"""Alembic environment whose second revision fails: upgrades must be all or nothing."""

from airlock.store import run_migrations

run_migrations(target_metadata=None)
