"""Child processes that vote, or report executor refusals, through the service layer with
their own database connections.

Imported by name in spawned processes (multiprocessing "spawn"), so nothing here may
depend on the parent's state except the arguments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from services.checkpoint._db import Database
from services.checkpoint.app import DEFAULT_POLICY
from services.checkpoint.auth import Principal
from services.checkpoint.errors import Refusal
from services.checkpoint.keys import KeyDirectory, KeyRing
from services.checkpoint.policy import load_policy
from services.checkpoint.service import Checkpoint, CheckpointConfig
from tests.executor.support import receipt_keyset


def vote_all(  # noqa: PLR0917 - multiprocessing passes args positionally
    url: str,
    keys_dir: str,
    now: int,
    voter: str,
    work: list[tuple[str, str, str]],
    barrier: Any,
    results: Any,
) -> None:
    """For each (proposal id, action hash, resource id): wait for the others, then approve."""
    db = Database(url)
    checkpoint = Checkpoint(
        db,
        load_policy(DEFAULT_POLICY),
        KeyRing(KeyDirectory(Path(keys_dir))),
        CheckpointConfig(audience="airlock-executor/test"),
        now=lambda: now,
    )
    me = Principal(voter, "user", "approver")
    outcome: list[tuple[str, str, str]] = []
    for proposal_id, digest, resource_id in work:
        barrier.wait(timeout=60)
        try:
            record = checkpoint.approve(me, proposal_id, digest, resource_id, "race")
            outcome.append((proposal_id, voter, f"ok:{record.state}"))
        except Refusal as exc:
            outcome.append((proposal_id, voter, exc.code.value))
    db.dispose()
    results.put(outcome)


def report_refusals(  # noqa: PLR0917 - multiprocessing passes args positionally
    url: str,
    keys_dir: str,
    now: int,
    receipts: list[dict[str, Any]],
    barrier: Any,
    results: Any,
) -> None:
    """For each receipt: wait for the others, then report it as an executor refusal."""
    db = Database(url)
    checkpoint = Checkpoint(
        db,
        load_policy(DEFAULT_POLICY),
        KeyRing(KeyDirectory(Path(keys_dir))),
        CheckpointConfig(audience="airlock-executor/test"),
        now=lambda: now,
        receipt_keys=receipt_keyset(),
    )
    me = Principal("executor-1", "service", "executor")
    outcome: list[str] = []
    for receipt in receipts:
        barrier.wait(timeout=60)
        try:
            checkpoint.report_refusal(me, receipt)
            outcome.append("ok")
        except Refusal as exc:
            outcome.append(exc.code.value)
    db.dispose()
    results.put(outcome)


def rotate_waiting_inside_the_lock(keys_dir: str, url: str, inside: Any, go: Any) -> None:
    """``keys rotate --now`` as the CLI does it, stopping inside the key directory's lock (at
    its audit record, after it read the manifest) until ``go`` is set."""
    import time

    from services.checkpoint.keyaudit import ChainKeyAudit

    db = Database(url)
    chain = ChainKeyAudit(db, lambda: int(time.time()))

    class Waiting:
        def record(self, event: Any) -> None:
            inside.set()
            if not go.wait(60):
                raise RuntimeError("never told to go on")
            chain.record(event)

    try:
        KeyDirectory(Path(keys_dir)).rotate(
            int(time.time()), execution_window=900, audit=Waiting(), immediate=True
        )
    finally:
        db.dispose()
