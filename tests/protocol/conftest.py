"""Fixtures for the protocol kernel tests: fixed keys, a fixed clock, honest bundles."""

from __future__ import annotations

from typing import Any

import pytest

from airlock.protocol import KeySet
from devstack import factory


@pytest.fixture
def keys() -> KeySet:
    return factory.keyset()


@pytest.fixture
def action() -> dict[str, Any]:
    return factory.action_value()


@pytest.fixture
def statement(action: dict[str, Any]) -> dict[str, Any]:
    return factory.statement_value(action)
