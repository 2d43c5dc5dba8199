"""Fixtures of the gate's tests: a fake checkpoint and a gate in front of it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from airlock.gate import Gate

from .support import FakeCheckpoint, gate_files


@pytest.fixture
def fake() -> FakeCheckpoint:
    return FakeCheckpoint()


@pytest.fixture
def gate(fake: FakeCheckpoint, tmp_path: Path, db_url: str) -> Iterator[Gate]:
    """A gate on SQLite and on PostgreSQL, its receipts verified by the fake checkpoint."""
    config = gate_files(tmp_path, checkpoint_url="http://checkpoint.test", ledger_url=db_url)
    gate = Gate(config, http=fake.client())
    fake.receipt_keys = gate.receipt_keys
    yield gate
    gate.close()
