"""Fixtures for checkpoint tests: a checkpoint World on SQLite and on PostgreSQL."""

from __future__ import annotations

import tempfile
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
def tmpfs_world(tmp_path: Path) -> Iterator[World]:
    """A checkpoint World on SQLite in /dev/shm (tmp_path where there is none): on tmpfs
    a commit's fsync returns at once. For a test of thousands of commits that proves no
    durability; the engine, its pragmas and every statement are those of ``sqlite_world``.
    """
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() else tmp_path
    with (
        tempfile.TemporaryDirectory(dir=base, prefix="airlock-test-") as tmp,
        opened_world(f"sqlite:///{Path(tmp) / 'airlock.db'}", Path(tmp)) as w,
    ):
        yield w


@pytest.fixture
def ledger_url(tmp_path: Path) -> str:
    """An executor ledger (SQLite, migrated) beside the checkpoint under test."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = make_engine(url)
    migrate(engine)
    engine.dispose()
    return url
