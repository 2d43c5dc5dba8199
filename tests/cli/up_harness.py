"""`airlock up` as a child process, and the CLI a person types beside it, for the end to
end tests of `up` on devcloud (test_up.py) and on moto (test_up_aws.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.polling import wait_for

__all__ = ["Up", "alive", "cli", "demo_people", "executed", "log_in", "pending", "running_up"]

_SERVICE_LINE = re.compile(r"\s+(?P<name>\S+)\s+pid (?P<pid>\d+)\s+log .*")


class Up:
    """A running `airlock up`: its output, read as it comes by a thread."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def close(self) -> None:
        self._reader.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def services(self) -> dict[str, int]:
        """Each service up started (its banner's ``name pid N log …`` lines): name → pid."""
        found = (_SERVICE_LINE.fullmatch(line) for line in self.lines)
        return {m["name"]: int(m["pid"]) for m in found if m}

    def pids(self) -> list[int]:
        return list(self.services().values())


@contextmanager
def running_up(
    cwd: Path, ports: dict[str, int], *extra: str, deadline: float = 120.0
) -> Iterator[Up]:
    """`airlock up` on ``ports`` with its state in ``cwd/.airlock`` (and ``extra``
    arguments), from ready — the banner's last line — to a SIGINT after the block."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    args = ["--home", str(cwd / ".airlock"), "--agent-interval", "5", *extra]
    for name, port in ports.items():
        args += [f"--{name}-port", str(port)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "airlock.cli", "up", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    up = Up(proc)
    try:
        # The banner's last line, not its first: the passwords come after "Airlock is
        # running", and the reader thread may not have them yet (a flake seen once).
        try:
            wait_for("up", lambda: "Ctrl-C stops everything." in up.text or proc.poll(), deadline)
        except AssertionError:
            raise AssertionError(up.text) from None
        assert proc.poll() is None, up.text
        yield up
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        up.close()


def cli(args: list[str], home: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The airlock CLI as a person runs it, its session in ``home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    env["AIRLOCK_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "airlock.cli", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def demo_people(state: Path) -> dict[str, str]:
    """The people up made, from its demo-credentials (``name role password`` a line):
    name → password."""
    lines = (state / "demo-credentials").read_text().splitlines()
    return {line.split()[0]: line.split()[2] for line in lines}


def log_in(state: Path, checkpoint: str, home: Path, who: str = "alice") -> None:
    """Sign ``who`` in to ``checkpoint`` with the password up gave them, the session in
    ``home``."""
    login = cli(
        ["login", "--url", checkpoint, "--username", who, "--password-stdin"],
        home,
        stdin=demo_people(state)[who] + "\n",
    )
    assert login.returncode == 0, login.stderr


def pending(home: Path, **match: str) -> dict[str, Any] | None:
    """The first pending proposal whose fields have the values in ``match``, or None."""
    out = cli(["approvals", "list", "--state", "pending", "--json"], home)
    assert out.returncode == 0, out.stderr
    items = [p for p in json.loads(out.stdout)["items"] if match.items() <= p.items()]
    return items[0] if items else None


def executed(home: Path, proposal_id: str) -> bool:
    out = cli(["approvals", "show", proposal_id, "--json"], home)
    return out.returncode == 0 and json.loads(out.stdout)["state"] == "executed"
