"""`airlock up`'s setup batch (airlock.cli._steps): one child process runs every setup
command, each with its own environment, and stops at the first that fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airlock.cli._stack import Stack, UpError


def _clean_env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    return {**env, "AIRLOCK_ENV": "dev", **values}


def _run(steps: list[dict[str, object]]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airlock.cli._steps"],
        input=json.dumps(steps),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_each_step_sees_its_own_environment_and_no_other() -> None:
    first = _clean_env(AIRLOCK_AGENT_CHECKPOINT_URL="http://127.0.0.1:1111")
    second = _clean_env()
    done = _run([{"args": ["config", "agent"], "env": env} for env in (first, second)])
    assert done.returncode == 0, done.stdout + done.stderr
    one, two = json.loads(done.stdout)
    assert "http://127.0.0.1:1111" in one
    assert "http://127.0.0.1:1111" not in two and "http://127.0.0.1:8787" in two


def test_a_failing_step_stops_the_batch_and_is_named(tmp_path: Path) -> None:
    steps = [
        {"args": ["config", "agent"], "env": _clean_env()},
        {"args": ["users", "add", "x", "--role", "emperor"], "env": _clean_env()},
        {"args": ["executor", "keygen", "--out", str(tmp_path / "k.pem")], "env": _clean_env()},
    ]
    done = _run(steps)
    assert done.returncode == 1
    failure = json.loads(done.stdout)
    assert failure["failed"] == 1 and failure["code"] != 0
    assert "emperor" in failure["stderr"]
    assert not (tmp_path / "k.pem").exists()  # nothing after the failure ran


def test_up_names_the_setup_command_that_failed(tmp_path: Path) -> None:
    stack = Stack(tmp_path / "home", {"webapp": 1, "checkpoint": 2, "devcloud": 3}, 4, 5)
    steps = [(["users", "add", "x", "--role", "emperor"], _clean_env())]
    with pytest.raises(UpError, match=r"`airlock users add` failed:\n.*emperor"):
        stack._airlock(steps)
