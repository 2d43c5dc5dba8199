"""The ``stack`` fixture: ``make up``'s whole stack (``airlock up``) on loopback ports.

One stack per test process (session scope): starting it is most of an example test's
time, and each example keeps its own audience and files in it, so a test reads only
what its own commands made.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from devstack.ports import free_port
from tests.support.polling import wait_for

from .support import Stack

#: A bound, not an expectation: ``airlock up`` starts in seconds on an idle machine, and
#: took over two minutes on two cores shared by a dozen test processes.
_UP_DEADLINE = 300.0


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("examples")
    home = root / ".airlock"
    ports = {name: free_port() for name in ("webapp", "checkpoint", "devcloud")}
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "airlock.cli", "up", "--home", str(home),
            "--webapp-port", str(ports["webapp"]),
            "--checkpoint-port", str(ports["checkpoint"]),
            "--devcloud-port", str(ports["devcloud"]),
            "--instances", "4", "--agent-interval", "3600",
        ],
        cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        lines.extend(line.rstrip("\n") for line in proc.stdout)

    threading.Thread(target=read, daemon=True).start()
    try:
        wait_for(
            "airlock up to be ready",
            lambda: any("Ctrl-C stops everything." in x for x in lines) or proc.poll() is not None,
            _UP_DEADLINE,
            every=0.1,
        )
        assert proc.poll() is None, "\n".join(lines)
        yield Stack(root, home, f"http://127.0.0.1:{ports['checkpoint']}", proc, lines)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
