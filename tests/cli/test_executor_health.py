"""``airlock executor health``: in dev it finds the heartbeat ``airlock up`` has its
executor write, as every other file setting finds what ``up`` put in ``.airlock/``."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import airlock


def test_in_dev_health_reads_the_heartbeat_up_writes_with_nothing_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AIRLOCK_EXECUTOR_HEARTBEAT_PATH", raising=False)
    missing = airlock("executor", "health", env={"AIRLOCK_ENV": "dev"})
    assert missing.exit_code == 1, missing.output
    assert "unhealthy: no heartbeat at .airlock/executor.heartbeat" in missing.output

    (tmp_path / ".airlock").mkdir()
    (tmp_path / ".airlock" / "executor.heartbeat").touch()
    fresh = airlock("executor", "health", env={"AIRLOCK_ENV": "dev"})
    assert fresh.exit_code == 0, fresh.output
    assert "healthy: last heartbeat" in fresh.output


def test_outside_dev_health_still_needs_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AIRLOCK_EXECUTOR_HEARTBEAT_PATH", raising=False)
    (tmp_path / ".airlock").mkdir()
    (tmp_path / ".airlock" / "executor.heartbeat").touch()
    result = airlock("executor", "health", env={"AIRLOCK_ENV": "prod"})
    assert result.exit_code == 2
    assert "no heartbeat file: pass --path" in result.stderr


def test_a_configured_heartbeat_path_wins_over_the_dev_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    beat = tmp_path / "elsewhere.heartbeat"
    beat.touch()
    result = airlock(
        "executor",
        "health",
        env={"AIRLOCK_ENV": "dev", "AIRLOCK_EXECUTOR_HEARTBEAT_PATH": str(beat)},
    )
    assert result.exit_code == 0, result.output
