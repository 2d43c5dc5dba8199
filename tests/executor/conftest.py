"""Fixtures for the executor tests: a migrated ledger, an in-memory cloud, a fake clock."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from airlock.store import make_engine
from services.executor import Executor, migrate
from tests.support.migrated import sqlite_copy

from .support import FakeClock, InMemoryCloud, make_executor


@dataclass
class Env:
    url: str
    engine: Engine
    cloud: InMemoryCloud
    clock: FakeClock
    executor: Executor
    others: list[Executor] = field(default_factory=list)

    def another_worker(self, worker_id: str, **kwargs: Any) -> Executor:
        other = make_executor(self.url, self.cloud, self.clock, worker_id=worker_id, **kwargs)
        self.others.append(other)
        return other


@pytest.fixture
def migrated_url(db_url: str) -> str:
    """``db_url``'s ledger at the migrations' head; a new SQLite file is a copy of one
    migrated once per process (``tests.support.migrated``)."""
    sqlite_copy(db_url, "ledger", _migrate)
    _migrate(db_url)
    return db_url


def _migrate(url: str) -> None:
    engine = make_engine(url)
    try:
        migrate(engine)
    finally:
        engine.dispose()


@pytest.fixture
def env(migrated_url: str) -> Iterator[Env]:
    cloud = InMemoryCloud()
    clock = FakeClock()
    executor = make_executor(migrated_url, cloud, clock, worker_id="worker-a")
    env = Env(migrated_url, executor.engine, cloud, clock, executor)
    yield env
    for other in env.others:
        other.engine.dispose()
    executor.engine.dispose()
