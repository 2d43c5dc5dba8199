"""Fixtures of the loop's tests: the world of tests/agents/support.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gate.support import FakeCheckpoint

from .support import Payments, World


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path, FakeCheckpoint(), Payments())
    yield w
    for gate in w.gates:
        gate.close()
