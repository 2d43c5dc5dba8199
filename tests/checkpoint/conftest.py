"""Fixtures for checkpoint tests: a checkpoint World on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .harness import World, make_world


@pytest.fixture
def world(db_url: str, tmp_path: Path) -> Iterator[World]:
    w = make_world(db_url, tmp_path)
    try:
        yield w
    finally:
        w.client.close()
        w.checkpoint.db.dispose()


@pytest.fixture
def sqlite_world(sqlite_url: str, tmp_path: Path) -> Iterator[World]:
    w = make_world(sqlite_url, tmp_path)
    try:
        yield w
    finally:
        w.client.close()
        w.checkpoint.db.dispose()
