"""The checkpoint SIGKILLed while a notification is on the wire sends it again after a
restart, with the same event id: nothing is lost, and a hanging receiver never held the
approval back. Real processes: ``airlock checkpoint`` on a SQLite file, a webhook
receiver in this process, and the real clock (the claim on a delivery is 6 s)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from standardwebhooks import Webhook

from airlock.store import make_engine, upgrade
from devstack.ports import free_port
from services.checkpoint._db import Database
from services.checkpoint.app import DEFAULT_POLICY, MIGRATIONS
from services.checkpoint.auth import Accounts
from services.checkpoint.keys import KeyDirectory
from services.checkpoint.models import notify_deliveries
from tests.checkpoint.builders import action_value
from tests.checkpoint.harness import AUDIENCE, PASSWORD, CountingHasher
from tests.executor.support import receipt_keyset
from tests.support.polling import wait_for

from .support import receiver, webhook_secret, write_secret

pytestmark = pytest.mark.slow


@contextmanager
def _checkpoint(env: dict[str, str], port: int) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "airlock.cli", "checkpoint", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:

        def up() -> bool:
            if process.poll() is not None:
                return True
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for("the checkpoint to answer", up, 120.0, every=0.05)
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        if process.stderr is not None:
            process.stderr.close()


def _delivery_states(url: str) -> list[str]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return [str(s) for s in conn.execute(sa.select(notify_deliveries.c.state)).scalars()]
    finally:
        engine.dispose()


def test_a_checkpoint_killed_mid_delivery_delivers_after_restart(tmp_path: Path) -> None:
    now = int(time.time())
    url = f"sqlite:///{tmp_path / 'cp.db'}"
    keys_dir = tmp_path / "keys"
    KeyDirectory(keys_dir).generate(now)
    receipt_keys = tmp_path / "receipt-keys.json"
    receipt_keys.write_text(json.dumps(receipt_keyset().to_value()))
    db = Database(url)
    upgrade(db.engine, MIGRATIONS)
    accounts = Accounts(
        db,
        lambda: int(time.time()),
        session_ttl=3600,
        session_idle=3600,
        lockout_threshold=10,
        lockout_seconds=60,
        hasher=CountingHasher(),
    )
    accounts.add_user("alice", PASSWORD, "approver")
    alice = accounts.login("alice", PASSWORD)[0]
    agent = accounts.create_service_token("scanner-1", "agent")
    db.dispose()
    secret = webhook_secret()
    with receiver(["hang"]) as rx:
        policy = tmp_path / "policy.toml"
        policy.write_bytes(
            DEFAULT_POLICY.read_bytes()
            + f"""
[notify]
timeout = 2
retry_delays = [1]
[notify.channels.ops]
type = "webhook"
url = "{rx.url}"
secret_file = "{write_secret(tmp_path, "hook", secret)}"
events = ["proposal.approved"]
""".encode()
        )
        port = free_port()
        env = {
            **os.environ,
            "AIRLOCK_ENV": "prod",
            "AIRLOCK_CHECKPOINT_DATABASE_URL": url,
            "AIRLOCK_CHECKPOINT_KEYS_DIR": str(keys_dir),
            "AIRLOCK_CHECKPOINT_POLICY_PATH": str(policy),
            "AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH": str(receipt_keys),
            "AIRLOCK_CHECKPOINT_AUDIENCE": AUDIENCE,
        }
        base = f"http://127.0.0.1:{port}"
        with _checkpoint(env, port) as first:
            proposal = httpx.post(
                f"{base}/v1/proposals",
                json=action_value(),
                headers={"Authorization": f"Bearer {agent}"},
            ).json()
            approved = httpx.post(
                f"{base}/v1/proposals/{proposal['id']}/approve",
                json={"action_hash": proposal["action_hash"]},
                headers={"Authorization": f"Bearer {alice}"},
            )
            assert approved.status_code == 200 and approved.json()["state"] == "approved"
            # Answered before its notification left: the receiver holds that one now.
            assert rx.hanging.wait(20), "the approval's notification never left"
            first.send_signal(signal.SIGKILL)
            first.wait(10)
        assert _delivery_states(url) == ["pending"]  # claimed, never settled
        rx.release.set()  # the old request's thread answers a dead socket
        with _checkpoint(env, port):
            wait_for(
                "the notification to be sent again",
                lambda: len(rx.got()) >= 2 and _delivery_states(url) == ["delivered"],
                20.0,
                every=0.1,
            )
        got = rx.got()
        assert len(got) == 2
        assert got[0].headers["webhook-id"] == got[1].headers["webhook-id"]
        for request in got:
            body = Webhook(secret).verify(request.body, request.headers)
            assert body["type"] == "proposal.approved"
            assert body["data"]["proposal_id"] == proposal["id"]
