"""The executor daemon on the checkpoint feed, end to end, with real processes.

Each test runs the checkpoint (uvicorn), devcloud and the ``airlock executor`` daemon as
subprocesses (devstack.stack). devcloud's write log is the judge of exactly-once;
the checkpoint's proposal record (outcome, ``receipt_verified``) is what people see; the
executor's own database (ledger, refusals, revocations, cursor, deliveries) is read
directly. Crashes are real SIGKILLs at named failpoints; every wait is a bounded poll
of an observable state, never a sleep.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import sqlalchemy as sa

from airlock.protocol import KeySet, canonical_bytes
from airlock.store import make_engine, verify_chain
from devstack.stack import ACCOUNT, PASSWORD, REGION, Stack, running_stack
from services.executor import FEED_FAILPOINTS, feed_name, generate_receipt_key
from services.executor.models import (
    deliveries,
    feed_cursor,
    ledger,
    refusals,
    resends,
    resolutions,
    revocations,
)

pytestmark = pytest.mark.slow

_CLI = [sys.executable, "-c", "from airlock.cli import main; main()"]
T = TypeVar("T")


def _until(what: str, probe: Callable[[], T | None], timeout: float = 30.0) -> T:
    """Poll ``probe`` until it returns something truthy, under a deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)  # polling an observable condition under a deadline


def _action(n: int, tag: str) -> dict[str, Any]:
    rid = f"i-t4nfeed{tag}{n:04d}"
    return {
        "type": "airlock.action/v1",
        "proposal_id": f"prop_feed{tag}{n:04d}",
        "provider": "alibaba",
        "account": ACCOUNT,
        "region": REGION,
        "resource": {"type": "ecs.instance", "id": rid},
        "operation": "stop",
        "params": {"stopped_mode": "StopCharging"},
        "precondition": {
            "status": "Running",
            "absent_tags": ["airlock:protect"],
            "observed_at": "2026-11-29T06:00:00Z",
        },
        "evidence": {"policy": "idle/v1", "window_days": 14, "cpu_p95_bp": 340},
        "reason": "Idle 14 days",
        "proposed_by": "agent:scanner-1",
        "created_at": "2026-11-29T06:00:05Z",
    }


class World:
    """The stack plus the test's view of the executor's database."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.http = httpx.Client(base_url=stack.checkpoint_url, timeout=30.0, trust_env=False)
        self.engine = make_engine(stack.ledger_url)
        self._sessions: dict[str, str] = {}

    def close(self) -> None:
        self.http.close()
        self.engine.dispose()

    def person(self, name: str) -> dict[str, str]:
        if name not in self._sessions:
            r = self.http.post("/v1/sessions", json={"username": name, "password": PASSWORD})
            assert r.status_code == 201, r.text
            self._sessions[name] = r.json()["token"]
        return {"Authorization": f"Bearer {self._sessions[name]}"}

    def propose(self, n: int, tag: str) -> dict[str, Any]:
        action = _action(n, tag)
        self.stack.devcloud.admin.create_instance(action["resource"]["id"], status="Running")
        return self.stack.submit(action)

    def approve(self, proposal: dict[str, Any]) -> dict[str, Any]:
        r = self.http.post(
            f"/v1/proposals/{proposal['id']}/approve",
            json={"action_hash": proposal["action_hash"]},
            headers=self.person("alice"),
        )
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        assert body["state"] == "approved"
        return body

    def revoke(self, proposal: dict[str, Any]) -> None:
        r = self.http.post(
            f"/v1/proposals/{proposal['id']}/revoke",
            json={"note": "changed our mind"},
            headers=self.person("admin"),
        )
        assert r.status_code == 200, r.text

    def rows(self, table: sa.Table, *where: Any) -> list[sa.Row[Any]]:
        with self.engine.connect() as conn:
            return list(conn.execute(sa.select(table).where(*where)))

    def ledger_state(self, approval_id: str) -> str | None:
        found = self.rows(ledger, ledger.c.approval_id == approval_id)
        return found[0].state if found else None

    def cursor(self) -> int:
        found = self.rows(feed_cursor, feed_cursor.c.feed == feed_name(self.stack.checkpoint_url))
        return int(found[0].seq) if found else 0

    def replays(self, approval_id: str) -> int:
        return len(self.rows(refusals, refusals.c.approval_id == approval_id))

    def delivered(self, approval_id: str) -> list[sa.Row[Any]]:
        found = self.rows(deliveries, deliveries.c.approval_id == approval_id)
        return sorted(found, key=lambda d: (d.kind, d.attempt))

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``airlock ARGS`` as the executor's operator (its environment, its directory)."""
        return subprocess.run(
            [*_CLI, *args],
            env={**self.stack.executor.env},
            cwd=self.stack.workdir,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def audit_events(self, kind: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT event FROM audit_log ORDER BY seq")).scalars()
            return [e for e in map(json.loads, rows) if e["type"] == kind]

    def executed(self, proposal: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        return self.stack.wait_state(proposal["id"], {"executed"}, timeout=timeout)


@contextlib.contextmanager
def _world(tmp_path: Path, **kwargs: Any) -> Iterator[World]:
    with running_stack(tmp_path / "stack", webapp=False, **kwargs) as stack:
        world = World(stack)
        try:
            yield world
        finally:
            world.close()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with _world(tmp_path) as world:
        yield world


@pytest.fixture
def idle_world(tmp_path: Path) -> Iterator[World]:
    """The stack with the executor configured but not started."""
    with _world(tmp_path, start_executor=False) as world:
        yield world


def _writes_for(world: World, proposal: dict[str, Any]) -> int:
    record = world.stack.agent_view(proposal["id"])
    rid = record["action"]["resource"]["id"]
    return len(world.stack.devcloud.admin.writes(resource_id=rid))


def _assert_executed_once(world: World, proposal: dict[str, Any]) -> dict[str, Any]:
    record = world.executed(proposal)
    assert record["outcome"]["outcome"] == "succeeded"
    assert record["outcome"]["receipt_verified"] is True
    assert _writes_for(world, proposal) == 1
    return record


# -- the happy path, SQLite and PostgreSQL ledgers ------------------------------------------


@pytest.mark.parametrize(
    "ledger_db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_approval_on_the_feed_is_executed_once_with_a_verified_receipt(
    tmp_path: Path, request: pytest.FixtureRequest, ledger_db: str
) -> None:
    url = request.getfixturevalue("pg_url") if ledger_db == "postgres" else None
    with _world(tmp_path, ledger_url=url) as world:
        proposal = world.propose(1, "ok")
        approval_id = world.approve(proposal)["approval"]["approval_id"]
        _assert_executed_once(world, proposal)
        assert world.ledger_state(approval_id) == "succeeded"
        delivered = _until("the delivery record", lambda: world.delivered(approval_id))
        assert [(d.kind, d.status) for d in delivered] == [("outcome", "delivered")]
        assert world.cursor() >= 1
        assert verify_chain(world.engine).ok
        # The daemon's heartbeat is what the deployment's health check reads.
        health = subprocess.run(
            [*_CLI, "executor", "health", "--max-age", "60"],
            env={**world.stack.executor.env},
            cwd=world.stack.workdir,
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert health.returncode == 0, health.stdout + health.stderr
        # SIGTERM while the daemon waits on the long-poll: it stops at once, cleanly. At
        # once is the log line; the interpreter's exit after it takes a while under load.
        sent = time.time()
        assert world.stack.executor.stop(signal.SIGTERM, timeout=20.0) == 0
        [stopped] = [
            line for line in world.stack.executor.log().splitlines() if " stopped " in line
        ]
        at = datetime.strptime(stopped[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        assert at - sent < 2.0, stopped


def test_feed_polls_are_quiet_and_an_in_doubt_is_logged_as_an_error(world: World) -> None:
    """Each feed poll was an httpx line at INFO (140 lines in 10 minutes of idling) and no
    line named its level: a person reading the log could not find the in_doubt."""
    world.stack.devcloud.admin.set_faults(fail_next_writes=1, fail_kind="internal")
    proposal = world.propose(1, "doubt")
    approval_id = world.approve(proposal)["approval"]["approval_id"]
    world.stack.wait_state(proposal["id"], {"in_doubt"}, timeout=30.0)
    log = _until(
        "the in_doubt log line",
        lambda: [line for line in world.stack.executor.log().splitlines() if approval_id in line],
    )
    lines = world.stack.executor.log().splitlines()
    doubt = [line for line in log if "in_doubt" in line]
    assert doubt and all(" ERROR airlock.executor " in line for line in doubt), log
    assert world.cursor() >= 1  # the feed was polled, and answered
    assert not [line for line in lines if "/v1/feed" in line], lines
    assert all(
        any(f" {level} " in line for level in ("DEBUG", "INFO", "WARNING", "ERROR"))
        for line in lines
        if line[:4].isdigit()
    ), lines


def _sqlite_copy(source: Path, target: Path) -> None:
    """A consistent copy of a live SQLite database (its online backup API)."""
    with (
        contextlib.closing(sqlite3.connect(source)) as src,
        contextlib.closing(sqlite3.connect(target)) as dst,
    ):
        src.backup(dst)


@pytest.mark.parametrize(
    "ledger_db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_checkpoint_restored_from_a_backup_does_not_make_the_executor_skip_new_approvals(
    tmp_path: Path, request: pytest.FixtureRequest, ledger_db: str
) -> None:
    """The restored checkpoint's feed counter is back below the executor's cursor; the
    seq of its next approval still comes after the cursor (seqs follow the clock), so
    the executor takes it instead of skipping it without a word."""
    url = request.getfixturevalue("pg_url") if ledger_db == "postgres" else None
    with _world(tmp_path, ledger_url=url) as world:
        stack = world.stack
        database, backup = stack.workdir / "checkpoint.db", tmp_path / "backup.db"
        _sqlite_copy(database, backup)  # the operator's backup, before any approval
        for n in (1, 2):
            proposal = world.propose(n, "bak")
            world.approve(proposal)
            _assert_executed_once(world, proposal)
        with contextlib.closing(sqlite3.connect(database)) as conn:
            [(last,)] = conn.execute("SELECT seq FROM feed_head").fetchall()
        cursor = _until("the cursor past both", lambda: world.cursor() >= last and world.cursor())

        stack.checkpoint.stop()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{database}{suffix}").unlink(missing_ok=True)
        _sqlite_copy(backup, database)
        stack.checkpoint.start()
        world._sessions.clear()  # the sessions were opened after the backup

        proposal = world.propose(3, "bak")
        world.approve(proposal)
        _assert_executed_once(world, proposal)
        assert _until("the cursor past it", lambda: world.cursor() > cursor)
        assert verify_chain(world.engine).ok


# -- revocations -----------------------------------------------------------------------------


def test_revocation_before_the_approval_reaches_the_executor_means_zero_writes(
    idle_world: World,
) -> None:
    world = idle_world
    proposal = world.propose(1, "rev")
    approval_id = world.approve(proposal)["approval"]["approval_id"]
    # Keep the bundle as it was on the feed, to present it again after the revocation.
    page = world.http.get(
        "/v1/feed", params={"after": 0}, headers=world.stack.auth("executor")
    ).json()
    [bundle] = [i["bundle"] for i in page["items"] if i["approval_id"] == approval_id]
    world.revoke(proposal)

    world.stack.executor.start()
    _until("the revocation recorded", lambda: world.rows(revocations))
    assert [r.approval_id for r in world.rows(revocations)] == [approval_id]
    assert world.stack.agent_view(proposal["id"])["state"] == "revoked"

    # The approval bundle arrives after its revocation (here: from a file, into the same
    # ledger): refused E_REVOKED at step 12, across processes, nothing written.
    path = world.stack.workdir / "late-bundle.json"
    path.write_bytes(canonical_bytes(bundle))
    late = subprocess.run(
        [*_CLI, "executor", "run-bundle", str(path)],
        env={**world.stack.executor.env, "AIRLOCK_EXECUTOR_CHECKPOINT_URL": ""},
        cwd=world.stack.workdir,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert late.returncode == 1, late.stderr
    assert b"refused E_REVOKED" in late.stdout
    assert _writes_for(world, proposal) == 0
    assert world.ledger_state(approval_id) is None
    assert verify_chain(world.engine).ok


# -- crashes, restarts, redelivery ---------------------------------------------------------------


def test_sigkill_mid_write_then_restart_resumes_from_the_cursor_without_a_second_write(
    tmp_path: Path,
) -> None:
    # A short lease, so recovery takes over the killed row within the test.
    fast = {
        "AIRLOCK_EXECUTOR_LEASE_SECONDS": "4",
        "AIRLOCK_EXECUTOR_RECOVER_EVERY": "1",
        "AIRLOCK_EXECUTOR_CLOUD_CONNECT_TIMEOUT_MS": "500",
        "AIRLOCK_EXECUTOR_CLOUD_READ_TIMEOUT_MS": "1000",
    }
    with _world(tmp_path, executor_env=fast) as world:
        first = world.propose(1, "kill")
        first_id = world.approve(first)["approval"]["approval_id"]
        _assert_executed_once(world, first)
        cursor_after_first = _until("the cursor past the first", world.cursor)
        world.stack.executor.kill()

        # Armed: SIGKILL right after the cloud call returned, before the outcome commit.
        world.stack.executor.start(
            AIRLOCK_EXECUTOR_FAILPOINTS="after_cloud_call",
        )
        second = world.propose(2, "kill")
        second_id = world.approve(second)["approval"]["approval_id"]
        assert world.stack.executor.wait_exit(timeout=30) == -signal.SIGKILL
        assert world.ledger_state(second_id) == "executing"
        # The cursor moved past it in the consume's own transaction, before the write.
        assert world.cursor() > cursor_after_first
        assert _writes_for(world, second) == 1

        world.stack.executor.start()
        record = _assert_executed_once(world, second)  # recovery: effect visible, verified
        assert world.rows(ledger, ledger.c.approval_id == second_id)[0].verified is True
        assert record["outcome"]["receipt_verified"] is True
        # Resumed from the persisted cursor, and no second write either way: the feed sends
        # the second approval again and the ledger refuses it as a replay, unless recovery
        # at start (the lease already expired, on a slow restart) reported the outcome
        # first, after which the checkpoint no longer sends an executed approval at all.
        assert _until("the cursor past the second", lambda: world.cursor() > cursor_after_first)
        assert world.replays(second_id) in (0, 1)
        assert _writes_for(world, second) == 1
        assert world.replays(first_id) == 0
        assert _writes_for(world, first) == 1
        assert verify_chain(world.engine).ok


@pytest.mark.parametrize(
    "ledger_db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_sigkill_with_a_page_in_hand_side_by_side_loses_none_and_writes_none_twice(
    tmp_path: Path, request: pytest.FixtureRequest, ledger_db: str
) -> None:
    """Twelve approvals waiting on the feed, an executor running four at once killed when
    the first write returns: the others are anywhere from verified to written. After a
    restart each is written at most once, none is skipped, and the chain holds."""
    url = request.getfixturevalue("pg_url") if ledger_db == "postgres" else None
    fast = {
        "AIRLOCK_EXECUTOR_LEASE_SECONDS": "4",
        "AIRLOCK_EXECUTOR_RECOVER_EVERY": "1",
        "AIRLOCK_EXECUTOR_CLOUD_CONNECT_TIMEOUT_MS": "500",
        "AIRLOCK_EXECUTOR_CLOUD_READ_TIMEOUT_MS": "1000",
        "AIRLOCK_EXECUTOR_PARALLEL": "4",
    }
    with _world(tmp_path, ledger_url=url, start_executor=False, executor_env=fast) as world:
        proposals = [world.propose(n, "par") for n in range(1, 13)]
        for p in proposals:
            world.approve(p)
        world.stack.executor.spawn(AIRLOCK_EXECUTOR_FAILPOINTS="after_cloud_call")
        assert world.stack.executor.wait_exit(timeout=60) == -signal.SIGKILL
        world.stack.executor.start()
        for p in proposals:
            record = world.stack.wait_state(p["id"], {"executed", "in_doubt"}, timeout=60)
            # in doubt only when killed between its consume and its write: never written
            assert _writes_for(world, p) == (1 if record["state"] == "executed" else 0)
        # None skipped: an approval the cursor passed unconsumed would stay approved.
        assert verify_chain(world.engine).ok


def test_crash_before_the_cursor_moved_and_a_down_checkpoint_lose_no_outcome(
    world: World,
) -> None:
    stack = world.stack
    stack.executor.kill()
    stack.executor.start(AIRLOCK_EXECUTOR_FAILPOINTS="before_cursor_commit")
    proposal = world.propose(1, "down")
    approval_id = world.approve(proposal)["approval"]["approval_id"]
    # Killed with the consume and the cursor past it written, not committed: neither is.
    assert stack.executor.wait_exit(timeout=30) == -signal.SIGKILL
    assert world.ledger_state(approval_id) is None
    assert world.cursor() == 0
    assert world.delivered(approval_id) == []

    # The checkpoint goes down; the executor comes back and keeps going without it. No
    # receipt goes out before the feed has answered (the ledger is checked against it).
    stack.checkpoint.stop()
    stack.executor.start()
    _until(
        "the executor backing off",
        lambda: (
            "feed unavailable" in stack.executor.log()
            and "receipts wait until the checkpoint's feed has answered once"
            in stack.executor.log()
        ),
    )
    assert stack.executor.running
    assert world.delivered(approval_id) == []

    stack.checkpoint.start()
    record = _assert_executed_once(world, proposal)
    assert record["outcome"]["late"] is False
    _until("the cursor moved past it", world.cursor)
    # Delivered again (the cursor never moved) and written once, from the feed.
    assert [r.code for r in world.rows(refusals)] == []
    assert world.ledger_state(approval_id) == "succeeded"
    assert _writes_for(world, proposal) == 1
    # The replay's receipt is the executor's own record, not the approval's outcome.
    assert [(d.kind, d.status) for d in world.delivered(approval_id)] == [("outcome", "delivered")]
    assert verify_chain(world.engine).ok


def test_crash_between_posting_a_receipt_and_recording_it_posts_it_again_harmlessly(
    world: World,
) -> None:
    stack = world.stack
    stack.executor.kill()
    stack.executor.start(AIRLOCK_EXECUTOR_FAILPOINTS="after_outcome_post")
    proposal = world.propose(1, "post")
    approval_id = world.approve(proposal)["approval"]["approval_id"]
    assert stack.executor.wait_exit(timeout=30) == -signal.SIGKILL
    first = _assert_executed_once(world, proposal)
    assert world.delivered(approval_id) == []

    stack.executor.start()
    # The checkpoint answers the repeated receipt 200 (the same answer): recorded delivered.
    delivered = _until("the delivery record", lambda: world.delivered(approval_id))
    assert [(d.status, d.http_status) for d in delivered] == [("delivered", 200)]
    again = world.stack.agent_view(proposal["id"])
    assert again["outcome"] == first["outcome"]
    assert _writes_for(world, proposal) == 1


def test_every_feed_failpoint_is_covered() -> None:
    covered = {"before_cursor_commit", "after_outcome_post"}
    assert covered == set(FEED_FAILPOINTS)


# -- a receipt the checkpoint refused for good, sent again ---------------------------------------


@pytest.mark.parametrize(
    "ledger_db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_receipt_rejected_for_an_untrusted_key_is_delivered_after_the_key_is_trusted_and_resent(
    tmp_path: Path, request: pytest.FixtureRequest, ledger_db: str
) -> None:
    url = request.getfixturevalue("pg_url") if ledger_db == "postgres" else None
    fast = {"AIRLOCK_EXECUTOR_RECOVER_EVERY": "1"}  # the outbox sweeps its queue each second
    with _world(tmp_path, ledger_url=url, executor_env=fast) as world:
        stack = world.stack
        # The checkpoint trusts another receipt key than the executor's (not installed yet).
        installed = stack.receipt_keys_path.read_bytes()
        other = generate_receipt_key(stack.workdir / "another-receipt-key.pem")
        stack.checkpoint.stop()
        stack.receipt_keys_path.write_bytes(
            canonical_bytes(KeySet([other.trusted_key()]).to_value())
        )
        stack.checkpoint.start()

        proposal = world.propose(1, "resend")
        approval_id = world.approve(proposal)["approval"]["approval_id"]
        rejected = _until("the receipt refused", lambda: world.delivered(approval_id))
        assert [(d.attempt, d.status, d.http_status, d.error_code) for d in rejected] == [
            (1, "rejected", 422, "E_RECEIPT")
        ]
        assert world.ledger_state(approval_id) == "succeeded"
        assert stack.agent_view(proposal["id"])["state"] == "approved"  # it never learned
        [before] = world.rows(ledger, ledger.c.approval_id == approval_id)

        # The operator installs the key at the checkpoint and asks for the receipt again.
        stack.checkpoint.stop()
        stack.receipt_keys_path.write_bytes(installed)
        stack.checkpoint.start()
        resend = world.cli(
            "executor",
            "receipts",
            "resend",
            approval_id,
            "--by",
            "alice",
            "--note",
            "key installed",
        )
        assert resend.returncode == 0, resend.stderr
        assert f"queued the outcome receipt of {approval_id} as attempt 2" in resend.stdout

        record = _assert_executed_once(world, proposal)
        assert record["outcome"]["late"] is False
        _until("the second attempt recorded", lambda: world.delivered(approval_id)[1:])
        assert [(d.attempt, d.status, d.http_status) for d in world.delivered(approval_id)] == [
            (1, "rejected", 422),
            (2, "delivered", 200),
        ]
        # The ledger and its receipt are as they were; the history shows both attempts.
        assert world.rows(ledger, ledger.c.approval_id == approval_id) == [before]
        listed = world.cli("executor", "receipts", "list", approval_id)
        assert listed.returncode == 0, listed.stderr
        assert f"{approval_id} outcome: delivered" in listed.stdout
        assert "attempt 1  rejected  422 E_RECEIPT" in listed.stdout
        assert "attempt 2  requested by alice" in listed.stdout
        assert "attempt 2  delivered 200" in listed.stdout
        # The request is in the audit chain, which verifies.
        [event] = world.audit_events("executor.receipt_resend_requested")
        assert (event["approval_id"], event["attempt"], event["by"], event["note"]) == (
            approval_id,
            2,
            "alice",
            "key installed",
        )
        assert event["rejected"] == {"attempt": 1, "http_status": 422, "error_code": "E_RECEIPT"}
        assert verify_chain(world.engine).ok
        # The receipt delivered late names the executor row it was signed over, as ever.
        reconcile = world.cli(
            "audit",
            "reconcile",
            "--checkpoint-db",
            f"sqlite:///{stack.workdir / 'checkpoint.db'}",
            "--executor-db",
            stack.ledger_url,
        )
        assert reconcile.returncode == 0, reconcile.stdout + reconcile.stderr

        # Delivered now: never sent again. An unknown id: refused. Nothing queued either way.
        again = world.cli("executor", "receipts", "resend", approval_id, "--by", "alice")
        assert again.returncode == 1
        assert "a delivered receipt is never sent again" in again.stderr
        assert "nothing queued" in again.stderr
        unknown = world.cli("executor", "receipts", "resend", "apv_nosuchapproval1", "--by", "a")
        assert unknown.returncode == 1 and "no ledger row" in unknown.stderr
        assert [r.attempt for r in world.rows(resends)] == [2]
        assert len(world.audit_events("executor.receipt_resend_requested")) == 1
        assert _writes_for(world, proposal) == 1


# -- configuration -------------------------------------------------------------------------------


def test_executor_resolve_reports_to_the_checkpoint_at_once_and_once(world: World) -> None:
    """The resolution showed at the checkpoint only at the daemon's next sweep (~17 s)."""
    proposal = world.propose(1, "rs")
    world.stack.devcloud.admin.set_faults(fail_next_writes=1, fail_kind="internal")
    try:
        world.approve(proposal)
        world.stack.wait_state(proposal["id"], {"in_doubt"})
    finally:
        world.stack.devcloud.admin.reset_faults()
    # The daemon is stopped: only the command itself can deliver the receipt now.
    world.stack.executor.stop(signal.SIGTERM, timeout=30.0)

    result = world.cli(
        "executor", "resolve", proposal["id"], "--by", "admin", "--did-not-happen",
        "--note", "still Running in the console",
    )  # fmt: skip

    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("resolved apv_") and "it did not happen (by admin)" in lines[0]
    assert lines[1] == "receipt delivered: the checkpoint shows the decision now"
    record = world.stack.agent_view(proposal["id"])
    assert record["state"] == "failed"
    assert record["outcome"]["outcome"] == "resolved"  # the executor's signed resolution
    approval_id = record["approval"]["approval_id"]
    assert [(d.kind, d.status) for d in world.delivered(approval_id)] == [
        ("outcome", "delivered"),
        ("resolution", "delivered"),
    ]
    # Posted again (a daemon delivering it too): the same answer, nothing changes.
    (resolution,) = world.rows(resolutions, resolutions.c.approval_id == approval_id)
    again = world.http.post(
        "/v1/outcomes",
        content=b'{"receipt":' + resolution.receipt.encode() + b"}",
        headers={**world.stack.auth("executor"), "Content-Type": "application/json"},
    )
    assert again.status_code == 200, again.text
    assert world.stack.agent_view(proposal["id"]) == record


def test_executor_resolve_on_up_state_reports_to_ups_checkpoint_at_once(world: World) -> None:
    """`AIRLOCK_ENV=dev airlock executor resolve` in up's directory, as docs/operations.md
    says, with no checkpoint settings: it delivers to the checkpoint up recorded."""
    proposal = world.propose(1, "ru")
    world.stack.devcloud.admin.set_faults(fail_next_writes=1, fail_kind="internal")
    try:
        world.approve(proposal)
        world.stack.wait_state(proposal["id"], {"in_doubt"})
    finally:
        world.stack.devcloud.admin.reset_faults()
    world.stack.executor.stop(signal.SIGTERM, timeout=30.0)
    env = dict(world.stack.executor.env)
    url = env.pop("AIRLOCK_EXECUTOR_CHECKPOINT_URL")
    token = env.pop("AIRLOCK_EXECUTOR_CHECKPOINT_TOKEN")
    state = world.stack.workdir / ".airlock"
    state.mkdir(mode=0o700)
    port = int(url.rsplit(":", 1)[1])
    (state / "up.json").write_text(
        json.dumps({"status": "running", "pid": os.getpid(), "ports": {"checkpoint": port}})
    )
    (state / "service-tokens.json").write_text(json.dumps({"executor": token}))

    result = subprocess.run(
        [*_CLI, "executor", "resolve", proposal["id"], "--by", "admin", "--did-not-happen"],
        env=env,
        cwd=world.stack.workdir,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    delivered = "receipt delivered: the checkpoint shows the decision now"
    assert result.stdout.splitlines()[1] == delivered
    assert world.stack.agent_view(proposal["id"])["state"] == "failed"


def test_a_wrong_executor_token_stops_the_daemon_with_a_clear_error(idle_world: World) -> None:
    env = {**idle_world.stack.executor.env, "AIRLOCK_EXECUTOR_CHECKPOINT_TOKEN": "not-a-token"}
    proc = subprocess.run(
        [*_CLI, "executor"],
        env=env,
        cwd=idle_world.stack.workdir,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert b"AIRLOCK_EXECUTOR_CHECKPOINT_TOKEN" in proc.stderr
    assert b"401" in proc.stderr
    assert b"not-a-token" not in proc.stderr + proc.stdout


def test_health_fails_without_a_fresh_heartbeat(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    beat = tmp_path / "beat"
    missing = subprocess.run(
        [*_CLI, "executor", "health", "--path", str(beat)],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 1 and b"no heartbeat" in missing.stdout
    beat.touch()
    old = time.time() - 600
    os.utime(beat, (old, old))
    stale = subprocess.run(
        [*_CLI, "executor", "health", "--path", str(beat), "--max-age", "60"],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert stale.returncode == 1 and b"unhealthy" in stale.stdout
