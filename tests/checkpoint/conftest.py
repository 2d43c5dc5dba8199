"""Fixtures for checkpoint tests: a checkpoint World on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from airlock.store import make_engine
from services.executor import migrate

from .harness import World, opened_world


@pytest.fixture
def world(db_url: str, tmp_path: Path) -> Iterator[World]:
    with opened_world(db_url, tmp_path) as w:
        yield w


@pytest.fixture
def untrusting_world(db_url: str, tmp_path: Path) -> Iterator[World]:
    """A checkpoint built without any receipt key set (build() refuses this; the service
    must still fail closed)."""
    with opened_world(db_url, tmp_path, trust_receipts=False) as w:
        yield w


@pytest.fixture
def sqlite_world(sqlite_url: str, tmp_path: Path) -> Iterator[World]:
    with opened_world(sqlite_url, tmp_path) as w:
        yield w


@pytest.fixture
def ledger_url(tmp_path: Path) -> str:
    """An executor ledger (SQLite, migrated) beside the checkpoint under test."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = make_engine(url)
    migrate(engine)
    engine.dispose()
    return url
