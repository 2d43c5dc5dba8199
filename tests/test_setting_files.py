"""``AIRLOCK_<SERVICE>_<NAME>_FILE``: any setting read from the file a variable names.

How compose hands a container its secrets (docker-compose.yml ``secrets:``), so that none
is in the container's environment for ``docker inspect`` to show. Strict: no file, an
empty variable, or a setting given both ways stops the start with one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr
from pydantic_settings import SettingsConfigDict, SettingsError

from airlock.settings import (
    AgentSettings,
    CheckpointSettings,
    ExecutorSettings,
    ServiceSettings,
)

_REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no stray .env
    for name in list(os.environ):
        if name.startswith("AIRLOCK_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AIRLOCK_ENV", "dev")


def _file(tmp_path: Path, name: str, content: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


def test_a_secret_is_read_from_the_file_its_variable_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = _file(tmp_path, "token", b"tok-123\n")
    monkeypatch.setenv("AIRLOCK_AGENT_CHECKPOINT_TOKEN_FILE", str(token))
    settings = AgentSettings()
    assert settings.checkpoint_token.get_secret_value() == "tok-123"
    assert "checkpoint_token" in settings.model_fields_set


@pytest.mark.parametrize(
    ("content", "value"),
    [
        (b"s3cret", "s3cret"),
        (b"s3cret\n", "s3cret"),
        (b"s3cret\r\n", "s3cret"),  # `docker compose run` through a terminal
        (b"s3cret\n\n", "s3cret\n"),  # one line ending only: the rest is the value
        (b" s3cret \n", " s3cret "),
    ],
)
def test_exactly_one_trailing_line_ending_is_stripped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes, value: str
) -> None:
    monkeypatch.setenv(
        "AIRLOCK_EXECUTOR_CLOUD_ACCESS_KEY_SECRET_FILE", str(_file(tmp_path, "s", content))
    )
    assert ExecutorSettings().cloud_access_key_secret.get_secret_value() == value


def test_a_database_url_from_a_file_counts_as_set_outside_dev(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside dev a missing database URL stops the start: one from a file is not missing."""
    monkeypatch.setenv("AIRLOCK_ENV", "prod")
    monkeypatch.setenv("AIRLOCK_CHECKPOINT_AUDIENCE", "airlock-executor/prod")
    url = "postgresql://checkpoint:pw@postgres:5432/checkpoint"
    monkeypatch.setenv(
        "AIRLOCK_CHECKPOINT_DATABASE_URL_FILE", str(_file(tmp_path, "u", url.encode() + b"\n"))
    )
    assert CheckpointSettings().database_url == url


def test_a_list_setting_from_a_file_is_parsed_as_its_variable_would_be(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "AIRLOCK_AGENT_PROTECT_TAGS_FILE", str(_file(tmp_path, "t", b'["keep", "pinned"]\n'))
    )
    monkeypatch.setenv(
        "AIRLOCK_AGENT_CLOUD_REGIONS_FILE", str(_file(tmp_path, "r", b"eu-west-1\n"))
    )
    settings = AgentSettings()
    assert settings.protect_tags == ("keep", "pinned")
    assert settings.cloud_regions == ("eu-west-1",)


def test_a_file_variable_in_dotenv_is_read(tmp_path: Path) -> None:
    token = _file(tmp_path, "token", b"from-dotenv\n")
    (tmp_path / ".env").write_text(f"AIRLOCK_AGENT_CHECKPOINT_TOKEN_FILE={token}\n")
    assert AgentSettings().checkpoint_token.get_secret_value() == "from-dotenv"


def test_a_missing_file_is_refused_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "nowhere"
    monkeypatch.setenv("AIRLOCK_AGENT_CHECKPOINT_TOKEN_FILE", str(missing))
    with pytest.raises(SettingsError) as caught:
        AgentSettings()
    assert str(caught.value) == (
        f"AIRLOCK_AGENT_CHECKPOINT_TOKEN_FILE={missing}: No such file or directory"
    )


def test_a_directory_is_refused_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRLOCK_AGENT_CHECKPOINT_TOKEN_FILE", str(tmp_path))
    with pytest.raises(SettingsError, match=r"^AIRLOCK_AGENT_CHECKPOINT_TOKEN_FILE=.*: Is a dir"):
        AgentSettings()


def test_an_empty_file_variable_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRLOCK_AGENT_CHECKPOINT_TOKEN_FILE", "")
    with pytest.raises(SettingsError, match=r"^AIRLOCK_AGENT_CHECKPOINT_TOKEN_FILE is empty"):
        AgentSettings()


def test_a_file_that_is_not_utf8_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRLOCK_AGENT_CHECKPOINT_TOKEN_FILE", str(_file(tmp_path, "b", b"\xff\n")))
    with pytest.raises(SettingsError, match=r"not UTF-8 text$"):
        AgentSettings()


def test_a_secret_given_both_ways_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Which of two tokens is in use must never be a guess: neither wins."""
    monkeypatch.setenv("AIRLOCK_AGENT_CHECKPOINT_TOKEN", "from-env")
    monkeypatch.setenv("AIRLOCK_AGENT_CHECKPOINT_TOKEN_FILE", str(_file(tmp_path, "t", b"f\n")))
    with pytest.raises(SettingsError) as caught:
        AgentSettings()
    assert str(caught.value) == (
        "AIRLOCK_AGENT_CHECKPOINT_TOKEN and AIRLOCK_AGENT_CHECKPOINT_TOKEN_FILE are both set; "
        "set one"
    )


def test_a_secret_given_in_dotenv_and_as_a_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".env").write_text("AIRLOCK_AGENT_CHECKPOINT_TOKEN=stale-from-dotenv\n")
    monkeypatch.setenv("AIRLOCK_AGENT_CHECKPOINT_TOKEN_FILE", str(_file(tmp_path, "t", b"f\n")))
    with pytest.raises(SettingsError, match="are both set"):
        AgentSettings()


def test_an_aliased_setting_has_no_file_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``AIRLOCK_ENV`` is named by no prefix; ``AIRLOCK_ENV_FILE`` is commonly a dotenv path."""
    monkeypatch.setenv("AIRLOCK_ENV_FILE", str(_file(tmp_path, "e", b"prod\n")))
    assert AgentSettings().env == "dev"


def test_a_field_named_like_a_file_variable_keeps_its_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With fields ``x`` and ``x_file``, ``…_X_FILE`` is the second field's own variable."""

    class _Both(ServiceSettings):
        model_config = SettingsConfigDict(env_prefix="AIRLOCK_BOTH_", extra="ignore")
        token: SecretStr = SecretStr("")
        token_file: Path | None = None

    path = _file(tmp_path, "t", b"tok\n")
    monkeypatch.setenv("AIRLOCK_BOTH_TOKEN_FILE", str(path))
    both = _Both()
    assert both.token_file == path
    assert both.token.get_secret_value() == ""


def test_the_cli_says_it_in_one_line_and_exits_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    env.update(
        PYTHONPATH=str(_REPO),
        AIRLOCK_ENV="dev",
        AIRLOCK_AGENT_CHECKPOINT_TOKEN_FILE=str(tmp_path / "nowhere"),
    )
    result = subprocess.run(
        [sys.executable, "-m", "airlock.cli", "agent", "--once"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr == (
        f"error: agent settings: AIRLOCK_AGENT_CHECKPOINT_TOKEN_FILE={tmp_path / 'nowhere'}: "
        "No such file or directory\n"
    )
