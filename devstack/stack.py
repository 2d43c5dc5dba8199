"""Run the whole system on loopback: devcloud, checkpoint, executor, webapp.

Used by the end-to-end tests, the attack suite, the fault sweep and the benchmarks::

    from devstack.stack import running_stack

    with running_stack(tmp_path) as stack:
        stack.devcloud.admin.create_instance("i-t4ne2e0001", status="Running")
        proposal = stack.submit(action)            # as the agent (service token)
        page.goto(stack.webapp_url + "/login")     # people use the browser
        stack.wait_state(proposal["id"], {"executed"})

Each service is its own process on a free 127.0.0.1 port, started the way an operator
starts it: ``airlock checkpoint``, ``airlock webapp``, ``airlock devcloud serve`` and the
``airlock executor`` daemon on the checkpoint feed — with devcloud's write key, the
public key set exported from the checkpoint's key directory, its own receipt key, an
executor service token, and the checkpoint set to verify receipts against the
executor's receipt key. ``stack.executor`` and ``stack.checkpoint`` can be stopped,
SIGKILLed and started again (same port, same databases) by tests of the feed.
With ``devcloud=False`` the executor writes to the cloud its ``executor_env`` names (a
moto server) and no devcloud runs: no process, no port, no seeding.

Users are created with cheap Argon2 parameters (dev only; verification reads the
parameters from the stored hash). Everything is killed on exit; logs stay in
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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from argon2 import PasswordHasher, Type

from airlock.protocol import KeySet, canonical_bytes
from airlock.store import upgrade
from services.checkpoint import MIGRATIONS, Accounts, Database, KeyDirectory
from services.executor import generate_receipt_key

from .devcloud import DevcloudHandle, running_devcloud
from .ports import free_port

__all__ = ["ACCOUNT", "AUDIENCE", "PASSWORD", "REGION", "Service", "Stack", "running_stack"]

PASSWORD = "correct horse battery staple"
AUDIENCE = "airlock-executor/e2e"
ACCOUNT = "5123456789012345"
REGION = "ap-southeast-1"
_READY_TIMEOUT = 30.0
_CLI = [sys.executable, "-c", "from airlock.cli import main; main()"]
_REPO = Path(__file__).resolve().parents[1]


class Service:
    """One service process: started, awaited, stopped or killed, and started again.

    Its log (``<workdir>/<name>.log``) is appended to across restarts.
    """

    def __init__(
        self,
        name: str,
        cmd: list[str],
        env: Mapping[str, str],
        workdir: Path,
        ready: Callable[[Service], bool],
    ) -> None:
        self.name = name
        self.cmd = cmd
        self.env = dict(env)
        self.workdir = workdir
        self._ready = ready
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.log_path = workdir / f"{name}.log"

    def spawn(self, **extra_env: str) -> None:
        """Start the process (do not wait); ``extra_env`` applies to this start only."""
        if self.running:
            raise RuntimeError(f"{self.name} is already running")
        self.started_at = time.time()
        with self.log_path.open("ab") as log:
            # cwd=workdir: no stray .env of the checkout leaks into a service's settings.
            self.proc = subprocess.Popen(
                self.cmd,
                cwd=self.workdir,
                env={**self.env, **extra_env},
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self, timeout: float = _READY_TIMEOUT) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited early:\n{self.log()}")
            if self._ready(self):
                return
            time.sleep(0.05)  # readiness polling, bounded by the deadline
        self.proc.kill()
        raise RuntimeError(f"{self.name} not ready in {timeout}s:\n{self.log()}")

    def start(self, **extra_env: str) -> None:
        self.spawn(**extra_env)
        self.wait_ready()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def wait_exit(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 15.0) -> int | None:
        """Send ``sig`` and wait; SIGKILL if it does not exit in ``timeout``."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode

    def kill(self) -> int | None:
        return self.stop(signal.SIGKILL)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


@dataclass
class Stack:
    devcloud_handle: DevcloudHandle | None
    checkpoint_url: str
    webapp_url: str
    tokens: dict[str, str]
    workdir: Path
    checkpoint: Service
    executor: Service
    ledger_url: str
    receipt_keys_path: Path
    _http: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self._http = httpx.Client(base_url=self.checkpoint_url, timeout=30.0, trust_env=False)

    @property
    def devcloud(self) -> DevcloudHandle:
        """The stack's devcloud; a stack started with ``devcloud=False`` has none."""
        if self.devcloud_handle is None:
            raise RuntimeError("this stack runs no devcloud: its executor writes elsewhere")
        return self.devcloud_handle

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
                    f" executor log:\n{self.executor.log()}"
                )
            time.sleep(0.1)  # polling a condition under a deadline, not waiting out a race


def _cheap_hasher() -> PasswordHasher:
    return PasswordHasher(time_cost=1, memory_cost=8, parallelism=1, type=Type.ID)


def prepare_checkpoint_accounts(url: str, users: Mapping[str, str]) -> dict[str, str]:
    """Migrate a checkpoint database, add ``users`` (password :data:`PASSWORD`) and return
    fresh agent and executor service tokens."""
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
        return {
            # Named as `airlock up` names it, so the README's screenshots (taken by the
            # browser tests) say what the walkthrough shows: "submitted as agent-local".
            "agent": accounts.create_service_token("agent-local", "agent"),
            "executor": accounts.create_service_token("executor-1", "executor"),
        }
    finally:
        db.dispose()


def _prepare_checkpoint(workdir: Path, users: Mapping[str, str]) -> tuple[dict[str, str], str]:
    now = int(time.time())
    keys = KeyDirectory(workdir / "keys")
    keys.generate(now)
    # What `airlock keys export-public` writes: the key set the executor trusts.
    (workdir / "trusted-keys.json").write_bytes(canonical_bytes(keys.public_keyset().to_value()))
    receipt_signer = generate_receipt_key(workdir / "receipt-key.pem")
    (workdir / "receipt-keys.json").write_text(
        json.dumps(KeySet([receipt_signer.trusted_key()]).to_value())
    )
    url = f"sqlite:///{workdir / 'checkpoint.db'}"
    tokens = prepare_checkpoint_accounts(url, users)
    return tokens, url


def _clean_env(extra: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    env["PYTHONPATH"] = str(_REPO)
    env.update(extra)
    return env


def _http_ok(url: str) -> Callable[[Service], bool]:
    def check(service: Service) -> bool:
        del service
        with httpx.Client(timeout=1.0, trust_env=False) as client:
            try:
                return client.get(url).status_code == 200
            except httpx.TransportError:
                return False

    return check


def _beat_since_start(path: Path) -> Callable[[Service], bool]:
    """Ready once this start of the daemon touched its heartbeat (after recovery)."""

    def check(service: Service) -> bool:
        try:
            return path.stat().st_mtime >= service.started_at
        except FileNotFoundError:
            return False

    return check


def _checkpoint_service(workdir: Path, db_url: str, port: int) -> Service:
    """The checkpoint process of :func:`running_stack` (not started)."""
    checkpoint_url = f"http://127.0.0.1:{port}"
    return Service(
        "checkpoint",
        [*_CLI, "checkpoint", "--port", str(port)],
        _clean_env(
            {
                "AIRLOCK_ENV": "dev",
                "AIRLOCK_CHECKPOINT_DATABASE_URL": db_url,
                "AIRLOCK_CHECKPOINT_KEYS_DIR": str(workdir / "keys"),
                "AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH": str(workdir / "receipt-keys.json"),
                "AIRLOCK_CHECKPOINT_AUDIENCE": AUDIENCE,
                "AIRLOCK_CHECKPOINT_FEED_MAX_WAIT": "5",
                # The web app's address: its X-Forwarded-For names each browser.
                "AIRLOCK_CHECKPOINT_TRUSTED_PROXIES": "127.0.0.1",
            }
        ),
        workdir,
        _http_ok(f"{checkpoint_url}/readyz"),
    )


def _executor_service(
    workdir: Path,
    ledger: str,
    *,
    checkpoint_url: str,
    token: str,
    devcloud: DevcloudHandle | None,
    executor_env: Mapping[str, str] | None,
) -> Service:
    """The executor daemon of :func:`running_stack` (not started)."""
    heartbeat = workdir / "executor.heartbeat"
    return Service(
        "executor",
        [*_CLI, "executor"],
        _clean_env(
            {
                "AIRLOCK_ENV": "dev",
                "AIRLOCK_EXECUTOR_DATABASE_URL": ledger,
                "AIRLOCK_EXECUTOR_TRUSTED_KEYS_PATH": str(workdir / "trusted-keys.json"),
                "AIRLOCK_EXECUTOR_RECEIPT_KEY_PATH": str(workdir / "receipt-key.pem"),
                "AIRLOCK_EXECUTOR_AUDIENCE": AUDIENCE,
                "AIRLOCK_EXECUTOR_ACCOUNT": ACCOUNT,
                "AIRLOCK_EXECUTOR_REGION": REGION,
                "AIRLOCK_EXECUTOR_CHECKPOINT_URL": checkpoint_url,
                "AIRLOCK_EXECUTOR_CHECKPOINT_TOKEN": token,
                "AIRLOCK_EXECUTOR_POLL_WAIT": "5",
                "AIRLOCK_EXECUTOR_RETRY_MAX": "1",
                "AIRLOCK_EXECUTOR_HEARTBEAT_PATH": str(heartbeat),
                **({} if devcloud is None else devcloud.env("EXECUTOR", write=True)),
                **(executor_env or {}),
            }
        ),
        workdir,
        _beat_since_start(heartbeat),
    )


@contextlib.contextmanager
def running_stack(
    workdir: Path,
    *,
    users: Mapping[str, str] | None = None,
    queue_poll_seconds: int = 1,
    webapp: bool = True,
    start_executor: bool = True,
    ledger_url: str | None = None,
    executor_env: Mapping[str, str] | None = None,
    transition_seconds: float = 0.2,
    devcloud: bool = True,
) -> Iterator[Stack]:
    """Start devcloud, the checkpoint, the executor daemon and (unless ``webapp=False``)
    the web app; yield; stop them all. With ``start_executor=False`` the executor is
    configured but not started (``stack.executor.start()``).

    With ``devcloud=False`` no devcloud starts and ``stack.devcloud`` raises; the executor
    writes to the cloud ``executor_env`` configures, which must then name its access key
    (without one a dev executor would fall back to a devcloud that is not there).

    Raises:
        ValueError: ``devcloud=False`` and ``executor_env`` sets no cloud access key.
    """
    if not devcloud and not (executor_env or {}).get("AIRLOCK_EXECUTOR_CLOUD_ACCESS_KEY_ID"):
        raise ValueError("a stack without devcloud needs the executor's cloud in executor_env")
    workdir.mkdir(parents=True, exist_ok=True)
    users = users or {"alice": "approver", "bob": "approver", "admin": "admin"}
    tokens, db_url = _prepare_checkpoint(workdir, users)
    cp_port, web_port = free_port(), free_port()
    checkpoint_url = f"http://127.0.0.1:{cp_port}"
    webapp_url = f"http://127.0.0.1:{web_port}"
    ledger = ledger_url or f"sqlite:///{workdir / 'ledger.db'}"
    services: list[Service] = []
    try:
        with contextlib.ExitStack() as cloud:
            checkpoint = _checkpoint_service(workdir, db_url, cp_port)
            services.append(checkpoint)
            checkpoint.spawn()
            if webapp:
                web = Service(
                    "webapp",
                    [*_CLI, "webapp", "--port", str(web_port), "--checkpoint-url", checkpoint_url],
                    _clean_env(
                        {
                            "AIRLOCK_ENV": "dev",
                            "AIRLOCK_WEBAPP_QUEUE_POLL_SECONDS": str(queue_poll_seconds),
                        }
                    ),
                    workdir,
                    _http_ok(f"{webapp_url}/healthz"),
                )
                services.append(web)
                web.spawn()
            devcloud_handle = (
                cloud.enter_context(
                    running_devcloud(workdir / "devcloud", transition_seconds=transition_seconds)
                )
                if devcloud
                else None
            )
            executor = _executor_service(
                workdir,
                ledger,
                checkpoint_url=checkpoint_url,
                token=tokens["executor"],
                devcloud=devcloud_handle,
                executor_env=executor_env,
            )
            services.append(executor)
            if start_executor:
                executor.spawn()
            for service in services:
                if service.proc is not None:
                    service.wait_ready()
            handle = Stack(
                devcloud_handle,
                checkpoint_url,
                webapp_url,
                tokens,
                workdir,
                checkpoint,
                executor,
                ledger,
                workdir / "receipt-keys.json",
            )
            try:
                yield handle
            finally:
                handle.close()
                # Reverse order, one at a time: the executor's open long-poll would
                # otherwise hold the checkpoint's graceful shutdown for the whole poll.
                for service in reversed(services):
                    service.stop()
    finally:
        for service in reversed(services):
            service.stop()
