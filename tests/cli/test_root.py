"""``airlock`` itself: the options that need no command."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from airlock import __version__
from airlock.cli import app

from .conftest import airlock


def test_version_prints_the_version_and_exits_0() -> None:
    runner = CliRunner()
    assert "--version" in runner.invoke(app, ["--help"]).output
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"{__version__}\n"


def test_version_wins_over_a_command() -> None:
    result = CliRunner().invoke(app, ["--version", "config", "--markdown"])
    assert result.exit_code == 0, result.output
    assert result.output == f"{__version__}\n"


def test_executor_health_needs_only_the_heartbeat_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A health check in a prod environment without the executor's cloud keys used to fail
    on their validation before it looked at the heartbeat (found in review)."""
    monkeypatch.chdir(tmp_path)  # no stray .env
    beat = tmp_path / "executor.heartbeat"
    beat.touch()
    env = {"AIRLOCK_ENV": "prod", "AIRLOCK_EXECUTOR_HEARTBEAT_PATH": str(beat)}
    result = airlock("executor", "health", env=env)
    assert result.exit_code == 0, result.output
    assert "healthy" in result.output
    missing = airlock("executor", "health", env={"AIRLOCK_ENV": "prod"})
    assert missing.exit_code == 2
    assert "--path" in missing.output and ".airlock/executor.heartbeat" in missing.output
