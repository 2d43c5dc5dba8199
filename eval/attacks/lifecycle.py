"""Approvals that were real once: expired, lapsed, revoked, or signed by a revoked key.

The approvals are genuine (a checkpoint issued them after a human vote); what changed is
time, a human's revocation, or the trust in the key. Expired and lapsed approvals come
from the ``short`` checkpoint (2-second execution window), issued in the attack's setup
so the window passes while other attacks run. A revoked approval must never reach the
executor before its revocation, so it is issued while the stack's executor is busy with
a slow write (the cloud holds the write: devcloud's write latency, moto's) and revoked
at once; the ledger is then checked to
make sure the executor really never ran it.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Mapping
from typing import Any

from airlock.protocol import KeySet, canonical_bytes
from services.checkpoint.keys import KeyDirectory

from .common import approved, executor_refusal, stop_action
from .registry import Observation, Target, attack
from .rig import CLI, Rig, bundle_of, deadline_poll, restart_checkpoint

__all__: list[str] = []

#: How long the cloud holds the blocker's write; the approve + revoke take milliseconds.
_BLOCK_MS = 2500


def _issue_short(rig: Rig, t: Target) -> None:
    rig.scratch[t.name] = approved(rig, rig.short, stop_action(t))


class _ScratchCopyUnaudited:
    """Records nothing: for key changes to a scratch copy of a key directory only."""

    def record(self, event: Mapping[str, Any]) -> None:
        pass


def _wait_expired(record: dict[str, Any]) -> None:
    expires = int(record["approval"]["expires_at"])
    deadline_poll("the approval's expiry", lambda: True if time.time() >= expires else None)


@attack(
    "expired_approval",
    surface="executor",
    expect="E_EXPIRED",
    does="A genuine approval (2-second execution window) is presented after its expires_at.",
    setup=_issue_short,
)
def _expired(rig: Rig, t: Target) -> Observation:
    record = rig.scratch[t.name]
    _wait_expired(record)
    res = rig.present(bundle_of(record), "expired")
    return executor_refusal(rig, res, (t.instance(0),))


@attack(
    "lapsed_approval",
    surface="checkpoint+executor",
    expect="E_EXPIRED",
    does="A genuine approval's execution window passes with no executor report; the "
    "restarted checkpoint's sweeper marks it lapsed, its feed withholds it, and the bundle "
    "is then presented to the executor anyway.",
    setup=_issue_short,
)
def _lapsed(rig: Rig, t: Target) -> Observation:
    record = rig.scratch[t.name]
    _wait_expired(record)
    restart_checkpoint(rig.short)  # the sweeper runs once at start
    rig.short.wait_state(record["id"], {"lapsed"})
    approval_id = record["approval"]["approval_id"]
    lapsed = rig.short.audit("checkpoint.approval.lapsed", approval_id=approval_id)
    page = rig.short.http.get(
        "/v1/feed", params={"after": 0, "limit": 500}, headers=rig.short.bearer("executor")
    ).json()
    offered = [i for i in page["items"] if i["approval_id"] == approval_id]
    res = rig.present(bundle_of(record), "lapsed")
    obs = executor_refusal(rig, res, (t.instance(0),))
    ok = obs.audit_ok and bool(lapsed) and not offered
    audit = (
        "checkpoint: state lapsed + audit checkpoint.approval.lapsed, not on the feed; " + obs.audit
        if ok
        else f"lapsed events {len(lapsed)}, feed items {len(offered)}; {obs.audit}"
    )
    return Observation(obs.code, audit, ok, obs.targets)


def _issue_and_revoke_while_busy(rig: Rig, t: Target) -> dict[str, Any]:
    """Approve and revoke instance 0's stop at the main checkpoint while the stack's
    executor is inside a slow write for instance 9; return the revoked record."""
    blocker = stop_action(t, 9)
    rig.instance(t.instance(9))
    rig.instance(t.instance(0))
    target = rig.cp.submit(stop_action(t))
    rig.cloud.slow_writes(_BLOCK_MS)
    try:
        b = rig.cp.submit(blocker)
        rig.cp.approve(b, "alice")
        b_approval = rig.cp.view(b["id"])["approval"]["approval_id"]
        rig.wait_executed_by_e1(b_approval, {"executing"})
        rig.cp.approve(target, "alice")
        r = rig.cp.http.post(
            f"/v1/proposals/{target['id']}/revoke",
            json={"note": "wrong instance"},
            headers=rig.cp.bearer("alice"),
        )
        r.raise_for_status()
    finally:
        rig.cloud.slow_writes(0)
    rig.wait_executed_by_e1(b_approval, {"succeeded", "failed", "in_doubt"})
    record = rig.cp.view(target["id"])
    approval_id = record["approval"]["approval_id"]

    def revocation_recorded() -> bool | None:
        with contextlib.closing(sqlite3.connect(f"file:{rig.ledger_path}?mode=ro", uri=True)) as c:
            row = c.execute(
                "SELECT 1 FROM executor_revocations WHERE approval_id = ?", (approval_id,)
            ).fetchone()
        return True if row else None

    deadline_poll("the revocation in the executor's ledger", revocation_recorded)
    return record


def _revoked_audit(rig: Rig, record: dict[str, Any], obs: Observation) -> Observation:
    approval_id = record["approval"]["approval_id"]
    cp_events = rig.cp.audit("checkpoint.approval.revoked", approval_id=approval_id)
    received = rig.executor_audit("executor.revocation_received", approval_id=approval_id)
    consumed = rig.ledger_row(approval_id)
    ok = obs.audit_ok and bool(cp_events) and bool(received) and consumed is None
    audit = (
        "checkpoint: audit approval.revoked; executor: audit revocation_received; " + obs.audit
        if ok
        else f"revoked events {len(cp_events)}, received {len(received)}, ledger row "
        f"{None if consumed is None else consumed['state']}; {obs.audit}"
    )
    return Observation(obs.code, audit, ok, obs.targets, detail=obs.detail)


@attack(
    "revoked_approval_presented_to_executor",
    surface="executor",
    expect="E_REVOKED",
    does="An approval is revoked before any executor ran it (the revocation reaches the "
    "shared ledger through the feed); a copy of its bundle is handed to a second executor.",
)
def _revoked_e2(rig: Rig, t: Target) -> Observation:
    record = _issue_and_revoke_while_busy(rig, t)
    res = rig.present(bundle_of(record), "revoked")
    return _revoked_audit(rig, record, executor_refusal(rig, res, (t.instance(0),)))


@attack(
    "revoked_approval_resurrected_in_checkpoint_db",
    surface="feed",
    expect="E_REVOKED",
    does="An approval is revoked before it ran; sqlite3 edits of the checkpoint database "
    "clear the revocation and put the approval back on the feed.",
)
def _revoked_feed(rig: Rig, t: Target) -> Observation:
    record = _issue_and_revoke_while_busy(rig, t)
    approval_id = record["approval"]["approval_id"]
    rig.cp.sql(
        [
            (
                "UPDATE approvals SET revoked_at = NULL, revoked_by = NULL WHERE approval_id = ?",
                (approval_id,),
            ),
            ("UPDATE proposals SET state = 'approved' WHERE id = ?", (record["id"],)),
            ("UPDATE feed_head SET seq = seq + 1 WHERE id = 1", ()),
            (
                "UPDATE feed_events SET seq = (SELECT seq FROM feed_head WHERE id = 1)"
                " WHERE kind = 'approval' AND approval_id = ?",
                (approval_id,),
            ),
        ]
    )
    raw = bundle_of(record)
    res = deadline_poll(
        "the feed's redelivery refused",
        lambda: r if (r := rig.result_of(raw)).code != "NOT_RECORDED" else None,
    )
    return _revoked_audit(rig, record, executor_refusal(rig, res, (t.instance(0),)))


@attack(
    "revoked_signing_key",
    surface="executor",
    expect="E_KEY_REVOKED",
    does="A genuine approval signed by a key that the operator then rotated out and revoked "
    "(airlock keys rotate --now + revoke); an executor started with the updated key set is "
    "handed the bundle.",
)
def _revoked_key(rig: Rig, t: Target) -> Observation:
    raw = bundle_of(approved(rig, rig.hold, stop_action(t)))
    keys = rig.workdir / "revoked-keys"
    shutil.copytree(rig.aux_keys_dir, keys)
    directory = KeyDirectory(keys)
    old = next(r.kid for r in directory.records() if r.status.value == "active")
    # A scratch copy of the aux checkpoint's keys: nothing here is a checkpoint's record.
    directory.rotate(
        int(time.time()), execution_window=900, audit=_ScratchCopyUnaudited(), immediate=True
    )
    directory.revoke(old, audit=_ScratchCopyUnaudited())
    main = KeySet.from_json_bytes(rig.trusted_keys.read_bytes())
    merged = [k for k in main.values() if k.kid != old] + list(directory.public_keyset().values())
    trusted = rig.workdir / "revoked-trusted-keys.json"
    trusted.write_bytes(canonical_bytes(KeySet(merged).to_value()))
    bundle_file = rig.workdir / "revoked-key-bundle.json"
    bundle_file.write_bytes(raw)
    done = subprocess.run(
        [*CLI, "executor", "run-bundle", str(bundle_file)],
        cwd=rig.workdir,
        env=rig.executor_env(trusted),
        capture_output=True,
        timeout=60,
        check=False,
    )
    res = rig.result_of(raw)
    obs = executor_refusal(rig, res, (t.instance(0),))
    if done.returncode != 1:
        return Observation(obs.code, f"run-bundle exit {done.returncode}; " + obs.audit, False)
    return Observation(obs.code, obs.audit + "; run-bundle exit 1", obs.audit_ok, obs.targets)
