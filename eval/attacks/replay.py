"""Replay attacks: one approval, more than one attempt (docs/protocol.md#executor-checks step 13).

The approved write happens exactly once (``approved_writes=1``); every further attempt —
the same bytes again, re-encoded bytes, a restarted executor, a second executor on the
same ledger, the feed redelivering it, a checkpoint database edited to make it look
fresh, a second approval of the same action — must be refused ``E_REPLAY`` by the
executor's own ledger and add no write.
"""

from __future__ import annotations

import json
import time
from typing import Any

from .common import approved, approved_bundle, executor_refusal, stop_action
from .registry import Observation, Target, attack
from .rig import Checkpoint, Rig, bundle_of, deadline_poll

__all__: list[str] = []


def _executed_by_e1(rig: Rig, t: Target) -> dict[str, Any]:
    """A stop approved at the main checkpoint, executed by the stack's executor via the
    feed, with its outcome recorded at the checkpoint."""
    record = approved(rig, rig.cp, stop_action(t))
    rig.wait_executed_by_e1(record["approval"]["approval_id"], {"succeeded"})
    return rig.cp.wait_state(record["id"], {"executed"})


def _replay_refused(rig: Rig, approval_id: str, before: int) -> Observation | None:
    rows = rig.refusals(approval_id=approval_id, code="E_REPLAY")
    if len(rows) <= before:
        return None
    events = rig.executor_audit("executor.refused", code="E_REPLAY", approval_id=approval_id)
    ok = len(events) >= len(rows)
    audit = (
        "executor: refusals row + audit executor.refused E_REPLAY (approval id)"
        if ok
        else "executor: MISSING audit executor.refused E_REPLAY"
    )
    return Observation("E_REPLAY", audit, ok)


def _requeue(cp: Checkpoint, approval_id: str, extra: list[tuple[str, tuple[Any, ...]]]) -> None:
    """Move the approval's feed event past the head (the feed allows one event per
    approval; an attacker with the database moves it instead of adding one)."""
    cp.sql(
        [
            *extra,
            ("UPDATE feed_head SET seq = seq + 1 WHERE id = 1", ()),
            (
                "UPDATE feed_events SET seq = (SELECT seq FROM feed_head WHERE id = 1), at = ?"
                " WHERE kind = 'approval' AND approval_id = ?",
                (int(time.time()), approval_id),
            ),
        ]
    )


def _feed_replay(rig: Rig, t: Target, extra_sql: list[tuple[str, tuple[Any, ...]]]) -> Observation:
    record = _executed_by_e1(rig, t)
    approval_id = record["approval"]["approval_id"]
    before = len(rig.refusals(approval_id=approval_id, code="E_REPLAY"))
    _requeue(
        rig.cp,
        approval_id,
        [("UPDATE proposals SET state = 'approved' WHERE id = ?", (record["id"],)), *extra_sql],
    )
    obs = deadline_poll(
        "E_REPLAY from the stack's executor", lambda: _replay_refused(rig, approval_id, before)
    )
    return Observation(obs.code, obs.audit, obs.audit_ok, (t.instance(0),), approved_writes=1)


@attack(
    "replay_same_bundle_twice",
    surface="executor",
    expect="E_REPLAY",
    does="One approved bundle is presented to the executor, then presented again.",
)
def _twice(rig: Rig, t: Target) -> Observation:
    raw = approved_bundle(rig, rig.hold, stop_action(t))
    first = rig.present(raw, "replay-first")
    if first.code != "succeeded":
        return Observation(first.code, "the first presentation did not succeed", False)
    res = rig.present(raw, "replay-second")
    return executor_refusal(rig, res, (t.instance(0),), approved_writes=1)


@attack(
    "replay_reencoded_bundle",
    surface="executor",
    expect="E_REPLAY",
    does="An executed approval is presented again as differently encoded JSON (indentation, "
    "member order): new bundle bytes, same approval.",
)
def _reencoded(rig: Rig, t: Target) -> Observation:
    record = _executed_by_e1(rig, t)
    value = json.loads(bundle_of(record))
    raw = json.dumps({"envelope": value["envelope"], "action": value["action"]}, indent=2)
    res = rig.present(raw.encode(), "replay-reencoded")
    return executor_refusal(rig, res, (t.instance(0),), approved_writes=1)


@attack(
    "replay_after_executor_restart",
    surface="executor",
    expect="E_REPLAY",
    does="The executor runs an approval, is stopped and started again (fresh process, same "
    "ledger), and is handed the same bundle.",
)
def _after_restart(rig: Rig, t: Target) -> Observation:
    raw = approved_bundle(rig, rig.hold, stop_action(t))
    first = rig.present(raw, "restart-first")
    if first.code != "succeeded":
        return Observation(first.code, "the first presentation did not succeed", False)
    rig.restart_e2()
    res = rig.present(raw, "restart-second")
    return executor_refusal(rig, res, (t.instance(0),), approved_writes=1)


@attack(
    "replay_by_second_executor_sharing_ledger",
    surface="executor",
    expect="E_REPLAY",
    does="The stack's executor runs an approval from the feed; the same bundle is handed to "
    "a second executor process on the same ledger.",
)
def _second_executor(rig: Rig, t: Target) -> Observation:
    record = _executed_by_e1(rig, t)
    res = rig.present(bundle_of(record), "second-executor")
    return executor_refusal(rig, res, (t.instance(0),), approved_writes=1)


@attack(
    "replay_redelivered_by_feed",
    surface="feed",
    expect="E_REPLAY",
    does="After the executor ran an approval, the checkpoint's feed delivers it again (its "
    "database restored to before the outcome: state approved, feed event re-queued).",
)
def _redelivered(rig: Rig, t: Target) -> Observation:
    return _feed_replay(rig, t, [])


@attack(
    "checkpoint_db_marks_executed_approval_fresh",
    surface="feed",
    expect="E_REPLAY",
    does="sqlite3 edits of the checkpoint database mark an executed approval fresh: outcome "
    "deleted, state approved, expiry pushed out, re-queued on the feed; the executor's own "
    "ledger must still refuse it.",
)
def _db_fresh(rig: Rig, t: Target) -> Observation:
    now = int(time.time())
    return _feed_replay(
        rig,
        t,
        [
            ("DELETE FROM outcomes WHERE proposal_id = ?", (t.proposal(0),)),
            (
                "UPDATE approvals SET issued_at = ?, expires_at = ?, revoked_at = NULL,"
                " revoked_by = NULL WHERE proposal_id = ?",
                (now, now + 900, t.proposal(0)),
            ),
        ],
    )


@attack(
    "same_action_approved_twice",
    surface="feed",
    expect="E_REPLAY",
    does="The same action bytes are approved by a second checkpoint database and executed; "
    "the main checkpoint then approves the identical action (new approval id and nonce) "
    "and its feed delivers it.",
)
def _same_action(rig: Rig, t: Target) -> Observation:
    action = stop_action(t)
    first = rig.present(approved_bundle(rig, rig.hold, action), "same-action-first")
    if first.code != "succeeded":
        return Observation(first.code, "the first approval did not execute", False)
    record = approved(rig, rig.cp, action, create=False)
    approval_id = record["approval"]["approval_id"]
    obs = deadline_poll(
        "E_REPLAY for the second approval", lambda: _replay_refused(rig, approval_id, 0)
    )
    return Observation(obs.code, obs.audit, obs.audit_ok, (t.instance(0),), approved_writes=1)
