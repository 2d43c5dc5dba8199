"""``airlock agent`` as a user runs it: a real process, settings from the environment."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from devstack.devcloud import running_devcloud


def _airlock(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from airlock.cli import main; main()", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _dry_run_env(dc: Any) -> dict[str, str]:
    """``airlock agent --dry-run`` against devcloud, with nothing from the shell's AIRLOCK_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    env.update(dc.env("AGENT", write=False))
    env["AIRLOCK_ENV"] = "dev"
    # A checkpoint URL where nothing listens: a dry run without a token never calls it.
    env["AIRLOCK_AGENT_CHECKPOINT_URL"] = "http://127.0.0.1:9"
    return env


def test_dry_run_prints_the_idle_set_as_a_table_and_submits_nothing(tmp_path: Path) -> None:
    # The CLI reads the real clock, so this fleet is seeded at the real time.
    with running_devcloud(tmp_path / "dc", instances=30, rds=4, seed=9, now=int(time.time())) as dc:
        idle = {i for i, c in dc.admin.truth().items() if c == "idle"}
        result = _airlock(["agent", "--once", "--dry-run"], _dry_run_env(dc), tmp_path)

        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert lines[0].split()[:6] == [
            "ACTION",
            "OPERATION",
            "REGION",
            "RESOURCE",
            "PROPOSAL",
            "RESULT",
        ]
        proposed = {line.split()[3] for line in lines[1:] if line.startswith("propose ")}
        assert proposed == idle
        assert all("dry-run" in line for line in lines[1:] if line.startswith("propose "))
        assert f"would propose {len(idle)} " in lines[-1]
        assert "checkpoint not read" in lines[-1]
        assert dc.admin.writes() == []


def test_submitting_without_a_token_is_a_configuration_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    env["AIRLOCK_ENV"] = "dev"
    result = _airlock(["agent", "--once"], env, tmp_path)
    assert result.returncode == 2
    assert "AIRLOCK_AGENT_CHECKPOINT_TOKEN" in result.stderr


def test_agent_refuses_to_start_outside_dev_without_its_settings(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    result = _airlock(["agent", "--once", "--dry-run"], env, tmp_path)
    assert result.returncode == 2
    assert "must be set outside AIRLOCK_ENV=dev" in result.stderr


def test_a_cloud_instance_id_cannot_forge_a_line_in_the_agent_log(tmp_path: Path) -> None:
    # An id the protocol refuses is logged as a warning, the id quoted; the cloud chose
    # it, so it carries a CR LF and a forged line, ESC, a CSI and a bidi override.
    forged = "2026-01-01 00:00:00 WARNING services.agent all clear"
    hostile = f"i-bad\r\n{forged}\x1b[2J\x9b31m\u202e"
    with running_devcloud(tmp_path / "dc", instances=0, now=int(time.time())) as dc:
        dc.admin.create_instance(hostile)
        result = _airlock(["agent", "--once", "--dry-run"], _dry_run_env(dc), tmp_path)

    assert result.returncode == 0, result.stderr
    log = result.stderr
    assert "i-bad\\u000d\\u000a" + forged + "\\u001b[2J\\u009b31m\\u202e" in log
    assert not [c for c in log if not (c.isprintable() or c == "\n")]
    assert not [line for line in log.splitlines() if line.startswith(forged)]
