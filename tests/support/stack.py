"""Run the whole system on loopback for end-to-end tests: devcloud, checkpoint, executor, webapp.

Usage::

    from tests.support.stack import running_stack

    with running_stack(tmp_path) as stack:
        stack.devcloud.admin.create_instance("i-t4ne2e0001", status="Running")
        proposal = stack.submit(action)            # as the agent (service token)
        page.goto(stack.webapp_url + "/login")     # people use the browser
        stack.wait_state(proposal["id"], {"executed"})

Each service is its own process on a free 127.0.0.1 port, started the way an operator
starts it (``airlock checkpoint``, ``airlock webapp``, ``airlock devcloud serve``); the
executor is :mod:`tests.support.executor_feed` until the executor has a feed runner of
its own. Users are created with cheap Argon2 parameters (tests only; verification reads
the parameters from the stored hash). Everything is killed on exit; logs stay in
``workdir`` for a failing test to show.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from argon2 import PasswordHasher, Type

from airlock.protocol import KeySet
from airlock.store import upgrade
from services.checkpoint._db import Database
from services.checkpoint.app import MIGRATIONS
from services.checkpoint.auth import Accounts
from services.checkpoint.keys import KeyDirectory
from services.executor import generate_receipt_key

from .devcloud import DevcloudHandle, free_port, running_devcloud

__all__ = ["ACCOUNT", "AUDIENCE", "PASSWORD", "REGION", "Stack", "running_stack"]

PASSWORD = "correct horse battery staple"
AUDIENCE = "airlock-executor/e2e"
ACCOUNT = "5123456789012345"
REGION = "ap-southeast-1"
_READY_TIMEOUT = 30.0
_CLI = [sys.executable, "-c", "from airlock.cli import main; main()"]
_REPO = Path(__file__).resolve().parents[2]


@dataclass
class Stack:
    devcloud: DevcloudHandle
    checkpoint_url: str
    webapp_url: str
    tokens: dict[str, str]
    workdir: Path
    _http: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self._http = httpx.Client(base_url=self.checkpoint_url, timeout=30.0, trust_env=False)

    def close(self) -> None:
        self._http.close()

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def submit(self, action: Mapping[str, Any]) -> dict[str, Any]:
        """Submit as the agent (its service token); returns the proposal record."""
        response = self._http.post(
            "/v1/proposals",
            content=json.dumps(action).encode(),
            headers={**self.auth("agent"), "Content-Type": "application/json"},
        )
        assert response.status_code in (200, 201), response.text
        body: dict[str, Any] = response.json()
        return body

    def agent_view(self, proposal_id: str) -> dict[str, Any]:
        """The agent's read-back of a proposal (its own token), e.g. a rejection's code."""
        response = self._http.get(f"/v1/proposals/{proposal_id}", headers=self.auth("agent"))
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def wait_state(
        self, proposal_id: str, states: set[str], timeout: float = 20.0
    ) -> dict[str, Any]:
        """Poll the checkpoint until the proposal reaches one of ``states`` (bounded)."""
        deadline = time.monotonic() + timeout
        while True:
            record = self.agent_view(proposal_id)
            if record["state"] in states:
                return record
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{proposal_id} is {record['state']}, not {sorted(states)}, after {timeout}s;"
                    f" executor log:\n{(self.workdir / 'executor.log').read_text(errors='replace')}"
                )
            time.sleep(0.1)  # polling a condition under a deadline, not waiting out a race


def _cheap_hasher() -> PasswordHasher:
    return PasswordHasher(time_cost=1, memory_cost=8, parallelism=1, type=Type.ID)


def _prepare_checkpoint(workdir: Path, users: Mapping[str, str]) -> tuple[dict[str, str], str]:
    now = int(time.time())
    KeyDirectory(workdir / "keys").generate(now)
    receipt_signer = generate_receipt_key(workdir / "receipt-key.pem")
    (workdir / "receipt-keys.json").write_text(
        json.dumps(KeySet([receipt_signer.trusted_key()]).to_value())
    )
    url = f"sqlite:///{workdir / 'checkpoint.db'}"
    db = Database(url)
    try:
        upgrade(db.engine, MIGRATIONS)
        accounts = Accounts(
            db,
            lambda: int(time.time()),
            session_ttl=3600,
            lockout_threshold=5,
            lockout_seconds=60,
            hasher=_cheap_hasher(),
        )
        for name, role in users.items():
            accounts.add_user(name, PASSWORD, role)
        tokens = {
            "agent": accounts.create_service_token("scanner-1", "agent"),
            "executor": accounts.create_service_token("executor-1", "executor"),
        }
    finally:
        db.dispose()
    return tokens, url


def _clean_env(extra: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRLOCK_", "EXECFEED_"))}
    env["PYTHONPATH"] = str(_REPO)
    env.update(extra)
    return env


class _Processes:
    """Started together (each takes seconds to import on a small machine), awaited after."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[tuple[str, subprocess.Popen[bytes], str | None]] = []
        self._logs: list[Any] = []

    def spawn(
        self, name: str, cmd: list[str], env: Mapping[str, str], ready_url: str | None
    ) -> None:
        log = (self.workdir / f"{name}.log").open("wb")
        self._logs.append(log)
        # cwd=workdir: no stray .env of the checkout leaks into a service's settings.
        proc = subprocess.Popen(
            cmd, cwd=self.workdir, env=dict(env), stdout=log, stderr=subprocess.STDOUT
        )
        self.procs.append((name, proc, ready_url))

    def wait_ready(self) -> None:
        for name, proc, url in self.procs:
            _wait_ready(name, proc, url, self.workdir / f"{name}.log")

    def stop(self) -> None:
        # Reverse order, one at a time: the executor's open long-poll would otherwise hold
        # the checkpoint's graceful shutdown for the whole poll.
        for _, proc, _ in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        for log in self._logs:
            log.close()


def _wait_ready(name: str, proc: subprocess.Popen[bytes], url: str | None, log_path: Path) -> None:
    deadline = time.monotonic() + _READY_TIMEOUT
    with httpx.Client(timeout=1.0, trust_env=False) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited early:\n{log_path.read_text(errors='replace')}")
            if url is None:
                if b"ready" in log_path.read_bytes():
                    return
            else:
                with contextlib.suppress(httpx.TransportError):
                    if client.get(url).status_code == 200:
                        return
            time.sleep(0.05)  # readiness polling, bounded by the deadline
    proc.kill()
    raise RuntimeError(f"{name} not ready in {_READY_TIMEOUT}s:\n{log_path.read_text()}")


@contextlib.contextmanager
def running_stack(
    workdir: Path,
    *,
    users: Mapping[str, str] | None = None,
    queue_poll_seconds: int = 1,
) -> Iterator[Stack]:
    """Start devcloud, the checkpoint, the executor and the web app; yield; stop them all."""
    workdir.mkdir(parents=True, exist_ok=True)
    users = users or {"alice": "approver", "bob": "approver", "admin": "admin"}
    tokens, db_url = _prepare_checkpoint(workdir, users)
    cp_port, web_port = free_port(), free_port()
    checkpoint_url = f"http://127.0.0.1:{cp_port}"
    webapp_url = f"http://127.0.0.1:{web_port}"
    procs = _Processes(workdir)
    try:
        procs.spawn(
            "checkpoint",
            [*_CLI, "checkpoint", "--port", str(cp_port)],
            _clean_env(
                {
                    "AIRLOCK_ENV": "dev",
                    "AIRLOCK_CHECKPOINT_DATABASE_URL": db_url,
                    "AIRLOCK_CHECKPOINT_KEYS_DIR": str(workdir / "keys"),
                    "AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH": str(workdir / "receipt-keys.json"),
                    "AIRLOCK_CHECKPOINT_AUDIENCE": AUDIENCE,
                    "AIRLOCK_CHECKPOINT_FEED_MAX_WAIT": "5",
                }
            ),
            f"{checkpoint_url}/readyz",
        )
        procs.spawn(
            "webapp",
            [*_CLI, "webapp", "--port", str(web_port), "--checkpoint-url", checkpoint_url],
            _clean_env(
                {"AIRLOCK_ENV": "dev", "AIRLOCK_WEBAPP_QUEUE_POLL_SECONDS": str(queue_poll_seconds)}
            ),
            f"{webapp_url}/healthz",
        )
        with running_devcloud(workdir / "devcloud", transition_seconds=0.2) as devcloud:
            procs.spawn(
                "executor",
                [sys.executable, "-m", "tests.support.executor_feed"],
                _clean_env(
                    {
                        "EXECFEED_CHECKPOINT_URL": checkpoint_url,
                        "EXECFEED_TOKEN": tokens["executor"],
                        "EXECFEED_KEY_ID": devcloud.write_key[0],
                        "EXECFEED_KEY_SECRET": devcloud.write_key[1],
                        "EXECFEED_ENDPOINT": devcloud.endpoint,
                        "EXECFEED_LEDGER_URL": f"sqlite:///{workdir / 'ledger.db'}",
                        "EXECFEED_RECEIPT_KEY": str(workdir / "receipt-key.pem"),
                        "EXECFEED_AUDIENCE": AUDIENCE,
                        "EXECFEED_ACCOUNT": ACCOUNT,
                        "EXECFEED_REGION": REGION,
                    }
                ),
                None,
            )
            procs.wait_ready()
            handle = Stack(devcloud, checkpoint_url, webapp_url, tokens, workdir)
            try:
                yield handle
            finally:
                handle.close()
                procs.stop()
    finally:
        procs.stop()
