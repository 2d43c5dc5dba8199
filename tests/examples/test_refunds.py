"""examples/refunds, run as its README says: ``airlock up``, the setup script, the agent.

Real processes on loopback: the whole stack (``airlock up``), the agent as a process that
waits for people, a person approving over the checkpoint's API, a refund issued by hand
meanwhile. The judge of "exactly once" is the payments database, not the gate.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from devstack.ports import free_port
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow

_REPO = Path(__file__).resolve().parents[2]
_DEADLINE = 120.0


@dataclass
class _Stack:
    root: Path
    home: Path
    url: str
    proc: subprocess.Popen[str]
    lines: list[str]

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
        env["PYTHONPATH"] = str(_REPO)
        for line in (self.home / "refunds-gate.env").read_text().splitlines():
            name, _, value = line.partition("=")
            env[name] = value
        return env

    def python(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", *args],
            cwd=self.root,
            env=env or self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def person(self, name: str) -> httpx.Client:
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


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[_Stack]:
    home = tmp_path / ".airlock"
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
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
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
            _DEADLINE,
            every=0.1,
        )
        assert proc.poll() is None, "\n".join(lines)
        yield _Stack(tmp_path, home, f"http://127.0.0.1:{ports['checkpoint']}", proc, lines)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=_DEADLINE)
    return proc.returncode, out


def _pending_refund(person: httpx.Client, target: str) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        page = person.get("/v1/proposals", params={"state": "pending"}).json()
        for item in page["items"]:
            if item.get("tool") == "refund" and item.get("target") == target:
                return dict(item)
        return None

    return wait_for(f"the refund on {target} to be proposed", found, _DEADLINE, every=0.2)


def _approve(person: httpx.Client, proposal: dict[str, Any], target: str) -> None:
    answer = person.post(
        f"/v1/proposals/{proposal['id']}/approve",
        json={"action_hash": proposal["action_hash"], "confirm": target},
    )
    assert answer.status_code == 200, answer.text


def _refunds(stack: _Stack) -> list[str]:
    done = stack.python("examples.refunds.payments", "list")
    code, out = _finish(done)
    assert code == 0, out
    return out.splitlines()


def test_the_refunds_example_runs_once_and_refuses_a_moved_premise(stack: _Stack) -> None:
    setup = stack.python("examples.refunds.setup", "--home", str(stack.home), env={
        **{k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")},
        "PYTHONPATH": str(_REPO),
    })  # fmt: skip
    code, out = _finish(setup)
    assert code == 0, out
    with contextlib.closing(stack.person("alice")) as alice:
        _walk_through(stack, alice)


def _walk_through(stack: _Stack, alice: httpx.Client) -> None:

    # Approved in the checkpoint (as in the web app), run once.
    agent = stack.python("examples.refunds.agent", "order-881", "2500", "--wait", "100")
    proposal = _pending_refund(alice, "order-881")
    assert proposal["effect_key"] == "refund:order-881"
    assert json.loads(proposal["action_jcs"])["premises"] == {"refunded": 0}
    _approve(alice, proposal, "order-881")
    code, out = _finish(agent)
    assert code == 0, out
    assert "refunded 2500 on order-881" in out
    (refund,) = _refunds(stack)
    assert "order-881" in refund and "refund:order-881" in refund
    executed = wait_for(
        "the gate's receipt to reach the checkpoint",
        lambda: (
            (r := alice.get(f"/v1/proposals/{proposal['id']}").json())["state"] == "executed" and r
        ),
        _DEADLINE,
    )
    assert executed["outcome"]["outcome"] == "succeeded"
    assert executed["outcome"]["receipt_verified"] is True
    receipt = stack.root / "receipt.json"
    receipt.write_text(json.dumps(executed["outcome"]["receipt"]))
    public = stack.root / "gate-public.json"
    keyset = json.loads((stack.home / "gate-keys.json").read_text())["refunds"]
    public.write_text(json.dumps(keyset))
    verify = stack.python("airlock.cli", "receipts", "verify", str(receipt), "--keys", str(public))
    code, out = _finish(verify)
    assert code == 0, out
    assert out.startswith("OK: succeeded")

    # Called again: the same proposal, used already.
    again = stack.python("examples.refunds.agent", "order-881", "2500", "--wait", "5")
    code, out = _finish(again)
    assert code == 4, out
    assert "E_REPLAY" in out
    assert len(_refunds(stack)) == 1

    # A refund by hand while the agent waits: the premise moved, nothing is called.
    waiting = stack.python("examples.refunds.agent", "order-882", "1000", "--wait", "100")
    proposal = _pending_refund(alice, "order-882")
    by_hand = stack.python("examples.refunds.payments", "refund", "order-882", "500")
    code, out = _finish(by_hand)
    assert code == 0, out
    _approve(alice, proposal, "order-882")
    code, out = _finish(waiting)
    assert code == 4, out
    assert "E_PREMISES" in out
    assert "refunded: was 0, now 500" in out
    rows = _refunds(stack)
    assert len(rows) == 2
    assert [row for row in rows if "order-882" in row and "by-hand" in row]
