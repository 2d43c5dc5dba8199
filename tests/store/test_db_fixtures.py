"""The shared database fixtures: PostgreSQL tests skip loudly, or fail when it is required."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Nothing listens on port 1: the fixture must find the server unreachable.
UNREACHABLE = "postgresql://postgres@127.0.0.1:1/test"


def _run_postgres_test(require: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AIRLOCK_REQUIRE_POSTGRES"}
    env["AIRLOCK_TEST_PG_URL"] = UNREACHABLE
    if require:
        env["AIRLOCK_REQUIRE_POSTGRES"] = "1"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "tests/store/test_engine.py::test_postgresql_read_transaction_cannot_write",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_unreachable_postgresql_is_skipped_loudly() -> None:
    result = _run_postgres_test(require=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 skipped" in result.stdout
    assert "PostgreSQL tests SKIPPED" in result.stdout


def test_unreachable_postgresql_fails_when_required() -> None:
    result = _run_postgres_test(require=True)
    assert result.returncode != 0, result.stdout
    assert "AIRLOCK_REQUIRE_POSTGRES=1" in result.stdout
    assert "1 error" in result.stdout


@pytest.mark.postgres
def test_each_pg_url_is_a_fresh_empty_database(pg_url: str, pg_server: str) -> None:
    assert pg_url != pg_server
    import psycopg

    with psycopg.connect(pg_url) as conn:
        tables = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone()
    assert tables == (0,)
