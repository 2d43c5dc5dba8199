"""The examples' world: ``make up``'s whole stack (``airlock up``, started by the
``stack`` fixture in conftest.py) and the commands a README tells a person to run, as
processes in the directory above its state (``.airlock``), as from the repository root.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 120.0


def clean_env() -> dict[str, str]:
    """This environment without any ``AIRLOCK_`` setting, with the repository importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    env["PYTHONPATH"] = str(REPO)
    return env


@dataclass
class Stack:
    root: Path
    home: Path
    url: str
    proc: subprocess.Popen[str]
    lines: list[str]

    def env(self, gate_env: str) -> dict[str, str]:
        """:func:`clean_env` with the gate settings of the file ``gate_env`` in the home."""
        env = clean_env()
        for line in (self.home / gate_env).read_text().splitlines():
            name, _, value = line.partition("=")
            env[name] = value
        return env

    def python(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """``python -m ARGS`` in the root, stdout and stderr in one text pipe."""
        return subprocess.Popen(
            [sys.executable, "-m", *args],
            cwd=self.root,
            env=env or clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def person(self, name: str) -> httpx.Client:
        """A client of the checkpoint's API signed in as the demo person ``name``."""
        for line in (self.home / "demo-credentials").read_text().splitlines():
            who, _role, password = line.split()
            if who == name:
                break
        else:
            raise AssertionError(f"no demo person {name}")
        client = httpx.Client(base_url=self.url, timeout=30.0, trust_env=False)
        answer = client.post("/v1/sessions", json={"username": name, "password": password})
        assert answer.status_code in (200, 201), answer.text
        client.headers["Authorization"] = f"Bearer {answer.json()['token']}"
        return client


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    """Wait for ``proc``; its exit code and its output."""
    out, _ = proc.communicate(timeout=DEADLINE)
    return proc.returncode, out
