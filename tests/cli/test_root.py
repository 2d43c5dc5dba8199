"""``airlock`` itself: the options that need no command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from airlock import __version__
from airlock.cli import app

from .conftest import airlock, dead_url


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


@pytest.mark.parametrize(
    ("where", "variable", "command"),
    [
        ("postgresql", "AIRLOCK_CHECKPOINT_DATABASE_URL", ["users", "list"]),
        ("postgresql", "AIRLOCK_CHECKPOINT_DATABASE_URL", ["tokens", "list"]),
        ("postgresql", "AIRLOCK_EXECUTOR_DATABASE_URL", ["executor", "migrate"]),
        ("postgresql", "AIRLOCK_EXECUTOR_DATABASE_URL", ["executor", "receipts", "list"]),
        ("sqlite", "AIRLOCK_EXECUTOR_DATABASE_URL", ["executor", "receipts", "list"]),
    ],
)
def test_a_database_that_cannot_be_reached_is_one_line_not_a_traceback(
    tmp_path: Path, variable: str, command: list[str], where: str
) -> None:
    """The installed script (airlock.cli:main), in a process of its own."""
    port = dead_url().rsplit(":", 1)[1]
    url = (
        f"postgresql://airlock@127.0.0.1:{port}/airlock"
        if where == "postgresql"
        else f"sqlite:///{tmp_path / 'no-such-dir' / 'x.db'}"
    )
    env = {**os.environ, "AIRLOCK_ENV": "dev", variable: url}
    result = subprocess.run(
        [sys.executable, "-c", "from airlock.cli import main; main()", *command],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "╭" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    if where == "postgresql":
        assert line.startswith("error: the database cannot be reached: ")
        assert "Connection refused" in line
    else:  # make_engine names a missing directory itself
        assert "does not exist" in line


@pytest.mark.parametrize(
    ("message", "shown"),
    [
        ("", "error: the database cannot be reached: RuntimeError"),
        (
            "server says \x1b[2J\u009b\u202eno\nsecond line",
            "server says \\u001b[2J\\u009b\\u202eno",
        ),
    ],
    ids=["empty", "controls"],
)
def test_a_database_error_is_one_escaped_line_whatever_its_text(
    message: str, shown: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found in review: an empty driver message raised IndexError (a traceback), and the
    driver's text, which can quote a server's answer, was printed raw."""
    import sqlalchemy.exc

    from airlock import cli

    def unreachable() -> None:
        raise sqlalchemy.exc.OperationalError("SELECT 1", {}, RuntimeError(message))

    monkeypatch.setattr(cli, "app", unreachable)
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert shown in err and err.count("\n") == 1  # one line
    assert "\x1b" not in err and "\u009b" not in err and "\u202e" not in err
