"""A checkpoint on a real database with a fixed clock, users and tokens, for tests."""

from __future__ import annotations

import json
import secrets
import socket
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import sqlalchemy as sa
import uvicorn
from argon2 import PasswordHasher, Type
from fastapi import FastAPI

from airlock.cli._serve import ServerAnsweringOnStop
from airlock.store import upgrade
from services.checkpoint._db import Database
from services.checkpoint.app import DEFAULT_POLICY, MIGRATIONS, RefusalLimits, create_app
from services.checkpoint.auth import Accounts
from services.checkpoint.keyaudit import ChainKeyAudit
from services.checkpoint.keys import KeyDirectory, KeyRing
from services.checkpoint.models import users
from services.checkpoint.policy import Policy, load_policy
from services.checkpoint.service import Checkpoint, CheckpointConfig
from services.executor import Receipt, ReceiptSigner
from tests.executor.support import receipt_keyset, receipt_signer
from tests.support.migrated import sqlite_copy
from tests.support.polling import wait_for

from .builders import action_value

with warnings.catch_warnings():
    # starlette 1.x warns at import that it would prefer httpx2 for its test client; the
    # client works with httpx 0.28, which is what the project pins.
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

START = 1_764_400_000
AUDIENCE = "airlock-executor/test"
PASSWORD = "correct horse battery staple"
APPROVERS = ("alice", "bob", "carol")
SESSION_TTL = 48 * 3600
#: The names the tests' clients send in Host (TestClient's, and 127.0.0.1).
TEST_HOSTS = ("testserver", "checkpoint.test", "127.0.0.1")
#: Two client addresses' worth of counted failures (throttle.PAIR_FREE each).
LOCKOUT_THRESHOLD = 6
LOCKOUT_SECONDS = 600


@dataclass
class Clock:
    t: int = START

    def __call__(self) -> int:
        return self.t

    def advance(self, seconds: int) -> None:
        self.t += seconds


class CountingHasher(PasswordHasher):
    """Test double of the password hasher: cheap parameters (the production ones cost
    ~100 ms per hash), and a record of the stored hash each verify checked a password
    against (never the password), so a test can count real argon2 verifies of one
    user's hash apart from the dummy verifies of refused sign-ins."""

    def __init__(self) -> None:
        super().__init__(time_cost=1, memory_cost=8, parallelism=1, type=Type.ID)
        self._record = threading.Lock()
        self.verified: list[str] = []

    # ``hash`` shadows the builtin: the parameter names are PasswordHasher.verify's.
    def verify(self, hash: str | bytes, password: str | bytes) -> Literal[True]:
        with self._record:
            self.verified.append(hash if isinstance(hash, str) else hash.decode())
        return super().verify(hash, password)

    def verifies_of(self, encoded: str) -> int:
        with self._record:
            return self.verified.count(encoded)


@dataclass
class World:
    url: str
    keys_dir: Path
    clock: Clock
    checkpoint: Checkpoint
    accounts: Accounts
    hasher: CountingHasher
    app: FastAPI
    client: TestClient
    tokens: dict[str, str] = field(default_factory=dict)

    def password_hash(self, username: str) -> str:
        """The argon2 hash stored for ``username``, to count its verifies."""
        with self.checkpoint.engine.connect() as conn:
            return str(
                conn.execute(
                    sa.select(users.c.password_hash).where(users.c.username == username)
                ).scalar_one()
            )

    def client_from(self, address: str) -> TestClient:
        """A client of the app whose requests come from the socket address ``address``."""
        return TestClient(self.app, client=(address, 50000))

    def key_audit(self) -> ChainKeyAudit:
        """What ``airlock keys rotate|revoke`` record key changes in: this chain."""
        return ChainKeyAudit(self.checkpoint.db, self.clock)

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def submit(self, who: str = "agent", **kwargs: Any) -> Any:
        body = json.dumps(action_value(**kwargs)).encode()
        return self.client.post(
            "/v1/proposals",
            content=body,
            headers={**self.auth(who), "Content-Type": "application/json"},
        )

    def approve(self, who: str, proposal_id: str, action_hash: str, **extra: Any) -> Any:
        return self.client.post(
            f"/v1/proposals/{proposal_id}/approve",
            json={"action_hash": action_hash, **extra},
            headers=self.auth(who),
        )


def approved(world: World, **kwargs: Any) -> tuple[dict[str, Any], str]:
    """A proposal submitted and approved by alice: (the proposal, its approval id)."""
    proposal = world.submit(**kwargs).json()
    record = world.approve("alice", proposal["id"], proposal["action_hash"]).json()
    assert record["state"] == "approved", record
    return proposal, record["approval"]["approval_id"]


def checkpoint_app(
    db: Database,
    keys_dir: Path,
    clock: Clock,
    hasher: CountingHasher,
    policy: Policy | None = None,
    *,
    trust_receipts: bool = True,
    session_idle: int = SESSION_TTL,
    trusted_proxies: tuple[str, ...] = (),
    refusal_limits: RefusalLimits | None = None,
) -> tuple[Checkpoint, Accounts, FastAPI]:
    """The checkpoint service, its accounts and its app on a migrated ``db`` (see
    :func:`make_world` for the settings); a second call on the same database, keys and
    clock is a replica of the first."""
    checkpoint = Checkpoint(
        db,
        policy or load_policy(DEFAULT_POLICY),
        KeyRing(KeyDirectory(keys_dir)),
        CheckpointConfig(audience=AUDIENCE, approval_window=24 * 3600, execution_window=900),
        now=clock,
        receipt_keys=receipt_keyset() if trust_receipts else None,
    )
    accounts = Accounts(
        db,
        clock,
        session_ttl=SESSION_TTL,
        session_idle=session_idle,
        lockout_threshold=LOCKOUT_THRESHOLD,
        lockout_seconds=LOCKOUT_SECONDS,
        hasher=hasher,
    )
    app = create_app(
        checkpoint,
        accounts,
        feed_max_wait=5,
        allowed_hosts=TEST_HOSTS,
        trusted_proxies=trusted_proxies,
        refusal_limits=refusal_limits,
    )
    return checkpoint, accounts, app


def make_world(
    url: str,
    tmp_path: Path,
    policy: Policy | None = None,
    *,
    trust_receipts: bool = True,
    session_idle: int = SESSION_TTL,
    trusted_proxies: tuple[str, ...] = (),
) -> World:
    """A checkpoint trusting the test executor's receipt key (``tests.executor.support``);
    with ``trust_receipts=False`` it has no receipt key set at all. Sessions end only
    ``SESSION_TTL`` after sign-in unless ``session_idle`` is shorter. An account locks
    after ``LOCKOUT_THRESHOLD`` failures (each client address counts at most
    ``throttle.PAIR_FREE`` of them) for ``LOCKOUT_SECONDS``. :func:`opened_world` closes
    it after use."""
    clock = Clock()
    keys_dir = tmp_path / "keys"
    KeyDirectory(keys_dir).generate(clock())
    db = migrated(url)
    hasher = CountingHasher()
    checkpoint, accounts, app = checkpoint_app(
        db,
        keys_dir,
        clock,
        hasher,
        policy,
        trust_receipts=trust_receipts,
        session_idle=session_idle,
        trusted_proxies=trusted_proxies,
    )
    world = World(url, keys_dir, clock, checkpoint, accounts, hasher, app, TestClient(app))
    for name in APPROVERS:
        accounts.add_user(name, PASSWORD, "approver")
    accounts.add_user("admin", PASSWORD, "admin")
    accounts.add_user("viewer", PASSWORD, "viewer")
    for name in (*APPROVERS, "admin", "viewer"):
        world.tokens[name] = accounts.login(name, PASSWORD)[0]
    world.tokens["agent"] = accounts.create_service_token("scanner-1", "agent")
    world.tokens["executor"] = accounts.create_service_token("executor-1", "executor")
    return world


def migrated(url: str) -> Database:
    """The checkpoint database at ``url``, at the migrations' head. A new SQLite file is
    a copy (``tests.support.migrated``) with a sign-in key of its own, as migration 0007
    makes one."""
    copied = sqlite_copy(url, "checkpoint", _migrate)
    db = Database(url)
    if copied:
        with db.engine.begin() as conn:
            conn.execute(
                sa.text("UPDATE sign_in_key SET key = :key"), {"key": secrets.token_hex(32)}
            )
    upgrade(db.engine, MIGRATIONS)
    return db


def _migrate(url: str) -> None:
    db = Database(url)
    try:
        upgrade(db.engine, MIGRATIONS)
    finally:
        db.dispose()


@contextmanager
def opened_world(url: str, tmp_path: Path, **options: Any) -> Iterator[World]:
    """:func:`make_world` (``options`` are its keywords) for the block; its client and
    database closed after."""
    world = make_world(url, tmp_path, **options)
    try:
        yield world
    finally:
        world.client.close()
        world.checkpoint.db.dispose()


def signed_receipt(
    approval_id: str | None,
    action_hash: str | None,
    outcome: str,
    *,
    executor: str = AUDIENCE,
    signer: ReceiptSigner | None = None,
    refusal_code: str | None = None,
    resolution: dict[str, Any] | None = None,
    at: int = START,
    detail: str = "",
    audit_head: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A receipt as the executor writes it (services/executor/receipts), as JSON."""
    receipt = Receipt.model_validate(
        {
            "type": "airlock.receipt/v1",
            "executor": executor,
            "approval_id": approval_id,
            "action_hash": action_hash,
            "outcome": outcome,
            "verified": outcome == "succeeded",
            "refusal_code": refusal_code,
            "cloud_request_id": None,
            "resolution": resolution,
            "at": at,
            "audit_head": audit_head or {"seq": 1, "hash": "sha256:" + "0" * 64},
            "detail": detail,
        }
    )
    value: dict[str, Any] = (signer or receipt_signer()).sign(receipt).to_value()
    return value


def audit_events(world: World, kind: str) -> list[dict[str, Any]]:
    """The checkpoint audit chain's events of one type, oldest first."""
    with world.checkpoint.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT event FROM audit_log ORDER BY seq")).scalars()
        events = [json.loads(e) for e in rows]
    return [e for e in events if e.get("type") == kind]


@contextmanager
def served(
    app: FastAPI, *, graceful: int = 60
) -> Iterator[tuple[ServerAnsweringOnStop, int, threading.Thread]]:
    """``app`` served by uvicorn on a loopback socket bound first, in a thread of this
    process, as ``airlock checkpoint`` serves it: (the server, its port, its thread). Stopped as a
    signal would stop it when the block ends, if the test has not stopped it already."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, log_level="warning", lifespan="on", timeout_graceful_shutdown=graceful
    )
    server = ServerAnsweringOnStop(config, on_exit=app.state.feed_signal.close)
    serving = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    serving.start()

    def up_or_dead() -> bool:
        return bool(server.started) or not serving.is_alive()

    try:
        wait_for("the server to start", up_or_dead, 20.0, every=0.01)
        assert server.started, "the server did not start"
        yield server, port, serving
    finally:
        server.should_exit = True
        serving.join(20.0)
        sock.close()


def long_poll(
    world: World, port: int, *, wait: int, timeout: float = 20.0
) -> tuple[threading.Thread, dict[str, Any]]:
    """The executor's feed long-poll to the served ``world`` from a thread of its own,
    returned once it waits on the feed signal: (the thread, the dict its answer's
    ``status`` and ``body`` land in, or the ``error`` it met)."""
    feed = world.app.state.feed_signal
    answer: dict[str, Any] = {}

    def poll() -> None:
        try:
            response = httpx.get(
                f"http://127.0.0.1:{port}/v1/feed",
                params={"after": 0, "wait": wait},
                headers=world.auth("executor"),
                timeout=timeout,
            )
            answer["status"], answer["body"] = response.status_code, response.json()
        except httpx.HTTPError as exc:
            answer["error"] = exc

    polling = threading.Thread(target=poll, daemon=True)
    polling.start()
    wait_for(
        "the long-poll to wait on the feed signal",
        lambda: len(feed._waiters) == 1,
        timeout,
        every=0.01,
    )
    return polling, answer
