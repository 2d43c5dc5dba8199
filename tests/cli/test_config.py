"""`airlock config`: the settings each service resolves to, secrets masked."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from airlock.cli import app


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_config_shows_each_service_with_secrets_masked(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    monkeypatch.setenv("AIRLOCK_AGENT_CHECKPOINT_TOKEN", "very-secret-agent-token")
    result = runner.invoke(app, ["config", "agent"])
    assert result.exit_code == 0, result.output
    assert "[agent]" in result.output
    assert "AIRLOCK_AGENT_CHECKPOINT_TOKEN" in result.output
    assert "very-secret-agent-token" not in result.output
    assert "•••• (set)" in result.output


def test_config_reports_invalid_settings_outside_dev(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRLOCK_ENV", "prod")
    for name in ("AIRLOCK_CHECKPOINT_DATABASE_URL",):
        monkeypatch.delenv(name, raising=False)
    result = runner.invoke(app, ["config", "checkpoint"])
    assert result.exit_code == 1
    assert "invalid:" in result.output
    assert "AIRLOCK_CHECKPOINT_DATABASE_URL" in result.output


def test_config_refuses_an_unknown_service(runner: CliRunner) -> None:
    result = runner.invoke(app, ["config", "scheduler"])
    assert result.exit_code == 2
    assert "unknown service" in result.output


def test_config_markdown_is_the_readme_table(runner: CliRunner) -> None:
    from airlock.cli._config import markdown_table

    result = runner.invoke(app, ["config", "--markdown"])
    assert result.exit_code == 0
    assert result.output == markdown_table()
