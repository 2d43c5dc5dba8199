"""Fixtures for the store tests: an engine on a database migrated to this directory's head."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.engine import Engine

from airlock.store import make_engine, upgrade

from ._support import MIGRATIONS


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """A migrated database (audit_log with genesis, widgets), on SQLite and PostgreSQL."""
    eng = make_engine(db_url)
    upgrade(eng, MIGRATIONS)
    try:
        yield eng
    finally:
        eng.dispose()
