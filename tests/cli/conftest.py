"""A real checkpoint served over HTTP on loopback for the CLI to talk to.

The checkpoint is the test harness's (tests/checkpoint/harness.py: real database, fixed
clock, users alice/bob/carol approvers, admin, viewer, an agent token) served by uvicorn
in a thread of this process on a socket bound before the server starts, so there is no
free-port race. The CLI runs in-process through typer's runner with a clean environment:
only what a test passes is set, so nothing from the developer's shell leaks in.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from airlock.cli import app
from devstack.ports import free_port
from tests.checkpoint.harness import PASSWORD, World, make_world
from tests.checkpoint.harness import served as serving

__all__ = ["PASSWORD", "Served", "airlock", "dead_url", "in_terminal"]

_REPO = Path(__file__).resolve().parents[2]

_AIRLOCK_VARS = (
    "AIRLOCK_TOKEN",
    "AIRLOCK_CHECKPOINT_URL",
    "AIRLOCK_HOME",
    "AIRLOCK_UP_HOME",
    "AIRLOCK_ENV",
    "XDG_CONFIG_HOME",
)


@dataclass
class Served:
    world: World
    url: str
    home: Path

    def run(self, *args: str, stdin: str = "", env: Mapping[str, str] | None = None) -> Result:
        return airlock(*args, stdin=stdin, env={"AIRLOCK_HOME": str(self.home), **(env or {})})

    def login(self, who: str) -> None:
        result = self.run(
            "login", "--url", self.url, "--username", who, "--password-stdin", stdin=PASSWORD + "\n"
        )
        assert result.exit_code == 0, result.output

    def proposal(self, proposal_id: str) -> dict[str, Any]:
        response = self.world.client.get(
            f"/v1/proposals/{proposal_id}", headers=self.world.auth("admin")
        )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def submit(self, **kwargs: Any) -> dict[str, Any]:
        response = self.world.submit(**kwargs)
        assert response.status_code == 201, response.text
        body: dict[str, Any] = response.json()
        return body


def airlock(*args: str, stdin: str = "", env: Mapping[str, str] | None = None) -> Result:
    """Run ``airlock ARGS`` in-process with only the given AIRLOCK_* variables set."""
    clean: dict[str, str | None] = dict.fromkeys(_AIRLOCK_VARS)
    clean.update(env or {})
    return CliRunner().invoke(app, list(args), input=stdin, env=clean)


def in_terminal(home: Path, args: list[str], typed: str = "") -> tuple[int, str]:
    """Run ``airlock ARGS`` as a process on a pty with ``typed`` already waiting on its
    input, ``home`` its home and working directory: its exit code and what it wrote
    (with the terminal's CR LF line ends)."""
    home.mkdir(parents=True, exist_ok=True)
    master, slave = os.openpty()
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(_REPO),
        "HOME": str(home),
        "AIRLOCK_HOME": str(home),
        "TERM": "dumb",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "airlock.cli", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=home,
        start_new_session=True,
    )
    os.close(slave)
    os.write(master, typed.encode() + b"\n")  # the line discipline holds it for the prompt
    output = bytearray()
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                output += chunk
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return code, output.decode(errors="replace")


def dead_url() -> str:
    """A loopback URL where nothing listens (the port was bound, then released)."""
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture
def served(sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    monkeypatch.chdir(tmp_path)  # settings read ./.env; never the developer's
    world = make_world(sqlite_url, tmp_path)
    home = tmp_path / "home"
    try:
        with serving(world.app) as (_server, port, _thread):
            yield Served(world, f"http://127.0.0.1:{port}", home)
    finally:
        world.client.close()
        world.checkpoint.db.dispose()
