"""`airlock up`'s life and its children's: whatever ends `up` (a closed terminal, a
SIGKILL, Ctrl-C before the banner) ends every service it started, and what it leaves on
disk is its user's alone.

Real processes on loopback, each wait bounded and polled; the children a test saw start
are killed by pid at the end whatever happened, so a failing test leaks none.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from devstack.ports import free_port
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow

DEADLINE = 120.0
#: How long the children may take to go once `up` is gone: SIGTERM, then their own
#: graceful stop (the executor finishes the item in hand), well inside up's 10 s grace.
GONE_WITHIN = 30.0


def _wait(what: str, check: Callable[[], Any], timeout: float = DEADLINE) -> Any:
    return wait_for(what, check, timeout, every=0.1)


def _gone(pid: int) -> bool:
    """No such process, or a zombie nobody reaped (PID 1 in a container may not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    return state in ("Z", "X")


def _port_free(port: int) -> bool:
    from airlock.cli._stack import port_free

    return port_free(port)


class _Up:
    def __init__(self, home: Path, ports: dict[str, int]) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
        self.ports = ports
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "airlock.cli",
                "up",
                "--home",
                str(home),
                *("--webapp-port", str(ports["webapp"])),
                *("--checkpoint-port", str(ports["checkpoint"])),
                *("--devcloud-port", str(ports["devcloud"])),
                *("--instances", "8", "--agent-interval", "3600"),
            ],
            cwd=home.parent,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def pids(self) -> list[int]:
        return [int(line.split("pid")[1].split()[0]) for line in self.lines if " pid " in line]

    def wait_ready(self) -> None:
        _wait(
            "airlock up to be ready",
            lambda: "Ctrl-C stops everything." in self.text or self.proc.poll() is not None,
        )
        assert self.proc.poll() is None, self.text
        assert len(self.pids()) == 5, self.text


@contextmanager
def _up(tmp_path: Path, home: Path | None = None) -> Iterator[_Up]:
    ports = {name: free_port() for name in ("webapp", "checkpoint", "devcloud")}
    up = _Up(home or tmp_path / ".airlock", ports)
    try:
        yield up
    finally:
        if up.proc.poll() is None:
            up.proc.kill()
            up.proc.wait()
        for pid in up.pids():  # only the children this test saw `up` start
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
        up._reader.join(10)
        if up.proc.stdout is not None:
            up.proc.stdout.close()


def test_a_closed_terminal_stops_every_service_and_frees_its_ports(tmp_path: Path) -> None:
    """SIGHUP (the terminal closed) stopped `up` at once and left all five services,
    the executor with the write key among them, running and listening."""
    with _up(tmp_path) as up:
        up.wait_ready()
        children = up.pids()
        up.proc.send_signal(signal.SIGHUP)
        up.proc.wait(60)
        assert [pid for pid in children if not _gone(pid)] == [], up.text
        assert "stopped" in up.text
        assert [port for port in up.ports.values() if not _port_free(port)] == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_every_service_dies_with_up_even_when_up_is_killed(tmp_path: Path) -> None:
    with _up(tmp_path) as up:
        up.wait_ready()
        children = up.pids()
        up.proc.kill()
        up.proc.wait(10)
        _wait(
            "every service to die with up",
            lambda: all(_gone(pid) for pid in children),
            timeout=GONE_WITHIN,
        )
        _wait(
            "their ports to be free",
            lambda: all(_port_free(port) for port in up.ports.values()),
            timeout=GONE_WITHIN,
        )


def test_ctrl_c_while_starting_stops_what_started_and_exits_at_once(tmp_path: Path) -> None:
    """A signal before the banner used to wait for all five services (~20 s) first."""
    with _up(tmp_path) as up:
        _wait("the first service to start", lambda: up.pids() or up.proc.poll() is not None)
        assert up.proc.poll() is None, up.text
        started = up.pids()
        sent = time.monotonic()
        up.proc.send_signal(signal.SIGINT)
        # One more service may be starting (it is stopped too) and stops take a moment,
        # but nobody waits for the rest of the system to come up first.
        assert up.proc.wait(30) == 128 + signal.SIGINT, up.text
        took = time.monotonic() - sent
        assert "Airlock is running" not in up.text
        assert "stopping..." in up.text and up.lines[-1] == "stopped", up.text
        assert [pid for pid in up.pids() if not _gone(pid)] == []
        assert len(up.pids()) < 5, f"all five had started before the stop ({took:.1f}s)"
        assert set(started) <= set(up.pids())


def _loose(home: Path) -> list[str]:
    """Every path under ``home`` (itself included) that group or others can reach, but
    the signing keys' public manifest, which the key store writes 0644 on purpose."""
    found = []
    for path in [home, *home.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if path.relative_to(home).as_posix() == "keys/keyset.json":
            assert mode & 0o022 == 0, mode  # readable, never writable by others
            continue
        if not path.is_symlink() and mode & 0o077:
            found.append(f"{path.relative_to(home.parent)} {mode:04o}")
    return found


def test_every_file_in_a_pre_existing_home_is_private_after_startup(tmp_path: Path) -> None:
    """A --home made beforehand (0755, as mkdir makes it) got checkpoint.db, with its
    password, session and token hashes, and devcloud.db 0644."""
    home = tmp_path / "state"
    home.mkdir()
    home.chmod(0o755)
    with _up(tmp_path, home) as up:
        up.wait_ready()
        files = sorted(p.name for p in home.rglob("*") if p.is_file())
        # the databases and their WAL files exist while the services run
        assert {"checkpoint.db", "checkpoint.db-wal", "checkpoint.db-shm"} <= set(files), files
        assert {"executor.db", "devcloud.db", "executor.heartbeat"} <= set(files), files
        assert _loose(home) == []
        assert "made the state directory" in up.text


def test_a_home_others_can_write_to_is_refused(tmp_path: Path) -> None:
    from airlock.cli._stack import Stack, UpError

    home = tmp_path / "shared"
    home.mkdir()
    home.chmod(0o775)
    with pytest.raises(UpError, match="writable by others"):
        Stack(home, {"webapp": 1, "checkpoint": 2, "devcloud": 3}, 4, 5).prepare(print)
    assert list(home.iterdir()) == []


def test_a_readable_directory_up_did_not_make_is_refused_not_changed(tmp_path: Path) -> None:
    from airlock.cli._stack import Stack, UpError

    home = tmp_path / "projects"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    home.chmod(0o755)
    with pytest.raises(UpError, match="files up did not make"):
        Stack(home, {"webapp": 1, "checkpoint": 2, "devcloud": 3}, 4, 5).prepare(print)
    assert stat.S_IMODE(home.stat().st_mode) == 0o755
    assert [p.name for p in home.iterdir()] == ["notes.txt"]


def test_a_state_from_before_the_umask_is_made_private(tmp_path: Path) -> None:
    """A state an older `up` made has its databases 0644 inside a 0700 directory."""
    from airlock.cli._stack import private_home

    home = tmp_path / ".airlock"
    (home / "logs").mkdir(parents=True, mode=0o755)
    for name in ("checkpoint.db", "checkpoint.db-wal", "devcloud.db", "logs/agent.log"):
        (home / name).write_text("")
        (home / name).chmod(0o644)
    home.chmod(0o700)
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("")
    outside.chmod(0o644)
    (home / "link").symlink_to(outside)
    assert private_home(home) is not None
    assert _loose(home) == []
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644  # a link's target is left alone


def _airlock(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    return subprocess.run(
        [sys.executable, "-m", "airlock.cli", *args],
        cwd=cwd,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_second_up_on_the_same_state_is_refused_at_once_naming_the_first(
    tmp_path: Path,
) -> None:
    """A second `up` with other ports on one state used to start a second stack on the
    same databases and logs."""
    with _up(tmp_path) as first:
        first.wait_ready()
        other = {name: free_port() for name in ("webapp", "checkpoint", "devcloud")}
        second = _airlock(
            tmp_path,
            "up",
            *("--home", str(tmp_path / ".airlock")),
            *("--webapp-port", str(other["webapp"])),
            *("--checkpoint-port", str(other["checkpoint"])),
            *("--devcloud-port", str(other["devcloud"])),
        )
        assert second.returncode == 2, second.stdout + second.stderr
        (line,) = second.stderr.strip().splitlines()
        assert f"pid {first.proc.pid}" in line, line
        assert f"checkpoint {first.ports['checkpoint']}" in line, line
        assert f"webapp {first.ports['webapp']}" in line, line
        assert second.stdout == ""  # nothing prepared, nothing started
        assert all(_port_free(port) for port in other.values())
        assert first.proc.poll() is None
        assert all(not _gone(pid) for pid in first.pids())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_state_of_a_killed_up_is_taken_over_by_the_next(tmp_path: Path) -> None:
    with _up(tmp_path) as killed:
        killed.wait_ready()
        children = killed.pids()
        killed.proc.kill()
        killed.proc.wait(10)
        _wait("the services to die with up", lambda: all(_gone(p) for p in children))
        _wait("their ports", lambda: all(_port_free(p) for p in killed.ports.values()))
    with _up(tmp_path) as next_up:
        next_up.wait_ready()
        assert f"(pid {killed.proc.pid}) ended without stopping" in next_up.text


def test_dev_defaults_follow_the_ports_up_serves_and_forget_them_after(tmp_path: Path) -> None:
    """After `up --checkpoint-port P`, `AIRLOCK_ENV=dev airlock doctor` checked 8787."""
    with _up(tmp_path) as up:
        up.wait_ready()
        recorded = json.loads((tmp_path / ".airlock" / "up.json").read_text())
        assert (recorded["status"], recorded["pid"]) == ("running", up.proc.pid)
        assert recorded["ports"] == up.ports
        checkpoint = f"http://127.0.0.1:{up.ports['checkpoint']}"
        doctor = _airlock(tmp_path, "doctor", AIRLOCK_ENV="dev")
        assert f"{checkpoint} is up" in doctor.stdout, doctor.stdout + doctor.stderr
        config = _airlock(tmp_path, "config", "agent", AIRLOCK_ENV="dev").stdout
        assert checkpoint in config and f"127.0.0.1:{up.ports['devcloud']}" in config, config
        webapp = _airlock(tmp_path, "config", "webapp", AIRLOCK_ENV="dev").stdout
        assert re.search(rf"AIRLOCK_WEBAPP_PORT\s+{up.ports['webapp']}\n", webapp), webapp
        up.proc.send_signal(signal.SIGINT)
        up.proc.wait(60)
    assert json.loads((tmp_path / ".airlock" / "up.json").read_text())["status"] == "stopped"
    after = _airlock(tmp_path, "config", "agent", AIRLOCK_ENV="dev").stdout
    assert "http://127.0.0.1:8787" in after, after
