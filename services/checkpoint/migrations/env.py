"""Alembic environment of the checkpoint database (run through airlock.store.upgrade)."""

from airlock.store import run_migrations
from services.checkpoint.models import metadata

run_migrations(target_metadata=metadata)
