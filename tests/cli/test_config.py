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


def test_config_markdown_is_the_table_in_docs_configuration(runner: CliRunner) -> None:
    from airlock.cli._config import markdown_table

    result = runner.invoke(app, ["config", "--markdown"])
    assert result.exit_code == 0
    assert result.output == markdown_table()


@pytest.mark.parametrize(
    ("service", "variable"),
    [
        ("checkpoint", "AIRLOCK_CHECKPOINT_DATABASE_URL"),
        ("executor", "AIRLOCK_EXECUTOR_DATABASE_URL"),
    ],
)
def test_config_never_prints_a_database_password(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, service: str, variable: str
) -> None:
    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    monkeypatch.setenv(variable, "postgresql+psycopg://airlock:Hunter2-db-secret@db.internal/x")
    result = runner.invoke(app, ["config", service])
    assert result.exit_code == 0, result.output
    assert "Hunter2-db-secret" not in result.output
    line = next(x for x in result.output.splitlines() if variable in x)
    assert line.split()[-1] == "postgresql+psycopg://airlock:***@db.internal/x"


def test_config_does_not_print_a_database_url_it_cannot_parse(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    monkeypatch.setenv("AIRLOCK_CHECKPOINT_DATABASE_URL", "not a url but Hunter2-db-secret")
    result = runner.invoke(app, ["config", "checkpoint"])
    assert "Hunter2-db-secret" not in result.output


def test_config_markdown_masks_a_database_password_in_a_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airlock.cli._config import markdown_table
    from airlock.settings import CheckpointSettings

    url = "postgresql+psycopg://airlock:Hunter2-db-secret@db.internal/x"
    monkeypatch.setattr(CheckpointSettings.model_fields["database_url"], "default", url)
    table = markdown_table()
    assert "Hunter2-db-secret" not in table
    assert "`postgresql+psycopg://airlock:***@db.internal/x`" in table


def test_the_receipt_key_set_defaults_to_the_one_up_writes_in_dev_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Outside dev it stays required (unset, the checkpoint refuses to start); in dev it
    is where `airlock up` writes it, like every other path the checkpoint needs."""
    from pathlib import Path

    from airlock.cli._config import markdown_table
    from airlock.settings import CheckpointSettings

    monkeypatch.delenv("AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH", raising=False)
    monkeypatch.setenv("AIRLOCK_CHECKPOINT_DATABASE_URL", "sqlite:///checkpoint.db")
    monkeypatch.setenv("AIRLOCK_CHECKPOINT_AUDIENCE", "airlock-executor/prod-test")
    monkeypatch.setenv("AIRLOCK_ENV", "prod")
    assert CheckpointSettings().receipt_keys_path is None
    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    assert CheckpointSettings().receipt_keys_path == Path(".airlock/receipt-keys.json")
    monkeypatch.setenv("AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH", "/etc/airlock/receipts.json")
    assert CheckpointSettings().receipt_keys_path == Path("/etc/airlock/receipts.json")
    assert (
        "| `AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH` | unset (dev: `.airlock/receipt-keys.json`) |"
        in markdown_table()
    )


@pytest.mark.parametrize("url", ["127.0.0.1:8787", "ftp://checkpoint", "file:///etc/passwd"])
def test_the_executor_refuses_a_checkpoint_url_that_is_not_http(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    # As the agent and the web app do: the bearer token goes only to an http(s) URL.
    from airlock.settings import ExecutorSettings

    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    monkeypatch.setenv("AIRLOCK_EXECUTOR_CHECKPOINT_URL", url)
    with pytest.raises(ValueError, match="AIRLOCK_EXECUTOR_CHECKPOINT_URL must be an http"):
        ExecutorSettings()
    monkeypatch.setenv("AIRLOCK_EXECUTOR_CHECKPOINT_URL", "https://checkpoint.example:8787")
    assert ExecutorSettings().checkpoint_url == "https://checkpoint.example:8787"
    monkeypatch.setenv("AIRLOCK_EXECUTOR_CHECKPOINT_URL", "")  # empty: unset, as the CLI reads it
    assert ExecutorSettings().checkpoint_url == ""


def test_config_shows_the_dev_defaults_a_service_fills_in_as_it_will_use_them(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The executor binds devcloud's account and uses its write key in dev when none is
    set (``account_or_default``, ``cloud_credentials``, after validation); config showed
    both empty."""
    from airlock.settings import DEVCLOUD_READ_KEY, DEVCLOUD_WRITE_KEY, ExecutorSettings

    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    for name in ("AIRLOCK_EXECUTOR_ACCOUNT", "AIRLOCK_EXECUTOR_CLOUD_ACCESS_KEY_ID"):
        monkeypatch.delenv(name, raising=False)
    result = runner.invoke(app, ["config", "executor"])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split(maxsplit=1)[1] for line in result.output.splitlines()[1:]}
    used = ExecutorSettings()
    assert rows["AIRLOCK_EXECUTOR_ACCOUNT"] == f"{used.account_or_default()} (dev default)"
    assert rows["AIRLOCK_EXECUTOR_CLOUD_ACCESS_KEY_ID"] == f"{DEVCLOUD_WRITE_KEY[0]} (dev default)"
    assert rows["AIRLOCK_EXECUTOR_CLOUD_ACCESS_KEY_SECRET"] == "•••• (dev default)"
    assert rows["AIRLOCK_EXECUTOR_CLOUD_ENDPOINT"] == "127.0.0.1:8788 (dev default)"
    assert DEVCLOUD_WRITE_KEY[1] not in result.output

    agent = runner.invoke(app, ["config", "agent"]).output
    assert f"{DEVCLOUD_READ_KEY[0]} (dev default)" in agent
    assert DEVCLOUD_READ_KEY[1] not in agent


def test_config_shows_a_value_that_is_set_as_it_is(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    monkeypatch.setenv("AIRLOCK_EXECUTOR_ACCOUNT", "1111222233334444")
    result = runner.invoke(app, ["config", "executor"])
    line = next(x for x in result.output.splitlines() if "AIRLOCK_EXECUTOR_ACCOUNT" in x)
    assert line.split()[1:] == ["1111222233334444"]
