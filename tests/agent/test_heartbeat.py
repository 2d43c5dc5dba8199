"""The agent's heartbeat: ``--loop`` touches it, ``airlock agent health`` reads it.

docker-compose.yml's agent health check runs ``airlock agent health``; a loop that waits
an hour between scans must still beat while it waits, and one that is stuck must not.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from airlock.heartbeat import Heartbeat
from devstack.devcloud import running_devcloud
from tests.support.polling import wait_for

from .conftest import Harness


class _Recorder(Heartbeat):
    """Records each beat in ``events``; ``after`` is set once ``want`` beats followed a report."""

    def __init__(self, events: list[str], want: int) -> None:
        super().__init__(None)
        self.events = events
        self.want = want
        self.after = threading.Event()

    def beat(self) -> None:
        self.events.append("beat")
        if "report" in self.events:
            since = len(self.events) - 1 - self.events.index("report")
            if since >= self.want:
                self.after.set()


def test_the_loop_beats_around_a_scan_and_while_it_waits_for_the_next(harness: Harness) -> None:
    events: list[str] = []
    beat = _Recorder(events, want=3)
    stop = threading.Event()
    agent = harness.agent()
    loop = threading.Thread(
        target=agent.run_loop,
        kwargs={
            "interval": 3600,  # the next scan is an hour away: only the wait can beat
            "stop": stop,
            "on_report": lambda _: events.append("report"),
            "heartbeat": beat,
            "beat_every": 0.01,
        },
    )
    loop.start()
    try:
        assert beat.after.wait(timeout=60), events
    finally:
        stop.set()
        loop.join(timeout=60)
    assert not loop.is_alive()
    assert events[:3] == ["beat", "report", "beat"]  # as the scan starts, as it ends
    assert events.count("report") == 1 and events.count("beat") >= 4


def _airlock(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from airlock.cli import main; main()", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_real_agent_loop_writes_the_heartbeat_that_health_reads(tmp_path: Path) -> None:
    beat = tmp_path / "agent.heartbeat"
    with running_devcloud(tmp_path / "dc", instances=10, rds=1, seed=3, now=int(time.time())) as dc:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
        env.update(dc.env("AGENT", write=False))
        env.update(
            AIRLOCK_ENV="dev",
            # A dry run without a token never calls the checkpoint.
            AIRLOCK_AGENT_CHECKPOINT_URL="http://127.0.0.1:9",
            AIRLOCK_AGENT_HEARTBEAT_PATH=str(beat),
        )
        agent = subprocess.Popen(
            [
                *(sys.executable, "-c", "from airlock.cli import main; main()"),
                *("agent", "--loop", "--dry-run", "--interval", "3600"),
            ],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for("the agent's heartbeat", beat.exists, timeout=60)
            healthy = _airlock("agent", "health", env=env)  # the path from the setting
            assert healthy.returncode == 0, healthy.stderr
            assert healthy.stdout.startswith("healthy: last heartbeat ")
        finally:
            agent.send_signal(signal.SIGTERM)
            out, err = agent.communicate(timeout=60)
        assert agent.returncode == 0, err
        assert "would propose" in out  # the scan ran and reported

    # A loop that stopped beating (stuck, or gone as here) fails the check.
    old = time.time() - 1000
    os.utime(beat, (old, old))
    asked = time.time()
    stale = _airlock("agent", "health", "--max-age", "300", "--path", str(beat), env=env)
    answered = time.time()
    assert stale.returncode == 1
    said = re.fullmatch(r"unhealthy: last heartbeat (\d+)s ago \(max 300s\)\n", stale.stdout)
    assert said is not None, stale.stdout
    # The age when the command looked, rounded: 1000 s and what its start took (over 2 s
    # under load), never less, never more than the call lasted.
    assert int(asked - old) <= int(said[1]) <= int(answered - old) + 1, stale.stdout
    beat.unlink()
    gone = _airlock("agent", "health", "--path", str(beat), env=env)
    assert (gone.returncode, gone.stdout) == (1, f"unhealthy: no heartbeat at {beat}\n")


def test_health_without_a_heartbeat_file_is_a_usage_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    result = subprocess.run(
        [sys.executable, "-c", "from airlock.cli import main; main()", "agent", "health"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "set AIRLOCK_AGENT_HEARTBEAT_PATH" in result.stderr
