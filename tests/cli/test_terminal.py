"""In a real terminal (a pty): a high-risk approve asks for the typed resource id, and a
wrong one is refused before anything is sent."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

from .conftest import Served

_REPO = Path(__file__).resolve().parents[2]


def _in_terminal(served: Served, args: list[str], typed: str) -> tuple[int, str]:
    """Run ``airlock ARGS`` on a pty with ``typed`` already waiting on its input."""
    master, slave = os.openpty()
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(_REPO),
        "HOME": str(served.home),
        "AIRLOCK_HOME": str(served.home),
        "TERM": "dumb",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "airlock.cli", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=served.home,
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


def test_typed_resource_id_approves_a_delete_in_a_terminal(served: Served) -> None:
    record = served.submit(
        proposal_id="prop_typed000001", resource_id="i-t4n0typed01", operation="delete"
    )
    served.login("alice")
    code, output = _in_terminal(served, ["approvals", "approve", record["id"]], "i-t4n0typed01")
    assert code == 0, output
    assert "Type the resource id to confirm" in output
    assert [v["voter"] for v in served.proposal(record["id"])["votes"]] == ["alice"]


def test_mistyped_resource_id_is_refused_before_sending(served: Served) -> None:
    record = served.submit(
        proposal_id="prop_typed000002", resource_id="i-t4n0typed02", operation="delete"
    )
    served.login("alice")
    code, output = _in_terminal(served, ["approvals", "approve", record["id"]], "i-t4n0typed0")
    assert code == 1, output
    assert "refused locally, nothing sent: E_CONFIRM_MISMATCH" in output
    assert served.proposal(record["id"])["votes"] == []


def test_answering_no_sends_nothing(served: Served) -> None:
    record = served.submit(proposal_id="prop_typed000003")
    served.login("alice")
    code, output = _in_terminal(served, ["approvals", "approve", record["id"]], "n")
    assert code == 1, output
    assert "nothing was sent" in output
    assert served.proposal(record["id"])["votes"] == []
