"""``airlock`` itself: the options that need no command."""

from __future__ import annotations

from typer.testing import CliRunner

from airlock import __version__
from airlock.cli import app


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
