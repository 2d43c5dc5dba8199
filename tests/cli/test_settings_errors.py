"""Every command that loads a service's settings says why they do not load the same
way: one line per error, ``error: <service> settings: …``, exit 2; never pydantic's
rendering, which named every input it was given, secrets included."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[2]

#: (command, the service whose settings it loads), each run with nothing set.
_COMMANDS = [
    (["checkpoint"], "checkpoint"),
    (["users", "list"], "checkpoint"),
    (["tokens", "list"], "checkpoint"),
    (["executor", "--once"], "executor"),
    (["executor", "migrate"], "executor"),
    (["agent", "--once"], "agent"),
    (["webapp"], "webapp"),
    (["devcloud", "serve"], "devcloud"),
]


def _run(cwd: Path, args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    clean["PYTHONPATH"] = str(_REPO)
    return subprocess.run(
        [sys.executable, "-m", "airlock.cli", *args],
        cwd=cwd,  # no .env here
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(("args", "service"), _COMMANDS, ids=[" ".join(a) for a, _ in _COMMANDS])
def test_settings_that_do_not_load_are_one_clean_line_and_exit_2(
    tmp_path: Path, args: list[str], service: str
) -> None:
    result = _run(tmp_path, args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert lines, result.stdout
    assert all(line.startswith(f"error: {service} settings: ") for line in lines), lines
    assert "pydantic" not in result.stderr and "validation error" not in result.stderr
    assert "Value error, " not in result.stderr


def test_each_error_is_its_own_line_naming_its_variable(tmp_path: Path) -> None:
    result = _run(
        tmp_path,
        ["users", "list"],
        AIRLOCK_ENV="dev",
        AIRLOCK_CHECKPOINT_PORT="0",
        AIRLOCK_CHECKPOINT_LOCKOUT_THRESHOLD="many",
    )
    assert result.returncode == 2
    assert sorted(result.stderr.splitlines()) == [
        "error: checkpoint settings: AIRLOCK_CHECKPOINT_LOCKOUT_THRESHOLD: "
        "Input should be a valid integer, unable to parse string as an integer",
        "error: checkpoint settings: AIRLOCK_CHECKPOINT_PORT: Input should be greater than 0",
    ]


@pytest.mark.parametrize(
    ("args", "secret_variable"),
    [
        (["agent", "--once"], "AIRLOCK_AGENT_CHECKPOINT_TOKEN"),
        (["executor", "--once"], "AIRLOCK_EXECUTOR_CLOUD_ACCESS_KEY_SECRET"),
    ],
)
def test_a_settings_error_never_echoes_a_secret(
    tmp_path: Path, args: list[str], secret_variable: str
) -> None:
    """pydantic's rendering of a model error lists every input (``input_value={…}``)."""
    result = _run(tmp_path, args, **{secret_variable: "Hunter2-settings-secret"})
    assert result.returncode == 2, result.stderr
    assert "Hunter2" not in result.stderr + result.stdout
