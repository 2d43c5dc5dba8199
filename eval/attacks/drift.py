"""The world changes between the human's look and the write (docs/protocol.md#executor-checks
step 14).

Each attack submits a proposal observed in one state, changes the instance out of band
as a person with the cloud's console would (devcloud's admin API, moto's admin user:
never counted as a write by the executors), and then has it approved at the
main checkpoint: the stack's executor picks the approval from the feed, consumes it,
re-reads live state with its own credential, and must refuse ``E_PRECONDITION`` with no
write. The checkpoint never reads the cloud, so only the executor's re-read stands here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .common import delete_action, stop_action
from .registry import Observation, Target, attack
from .rig import Rig

__all__: list[str] = []


def _drift(
    rig: Rig,
    t: Target,
    action: dict[str, Any],
    status: str,
    change: Callable[[str], object],
) -> Observation:
    iid = action["resource"]["id"]
    rig.instance(iid, status=status)
    record = rig.cp.submit(action)
    change(iid)
    if action["operation"] == "delete":
        rig.cp.approve(record, "alice", "bob", confirm=True)
    else:
        rig.cp.approve(record, "alice")
    approval_id = rig.cp.view(record["id"])["approval"]["approval_id"]
    row = rig.wait_executed_by_e1(approval_id, {"refused", "succeeded", "failed", "in_doubt"})
    code = str(row["refusal_code"] or row["state"])
    final = rig.cp.wait_state(record["id"], {"refused", "executed", "failed", "in_doubt"})
    ledger_events = rig.executor_audit(
        "executor.outcome", approval_id=approval_id, state="refused", refusal_code=code
    )
    cp_events = rig.cp.audit(
        "checkpoint.outcome.reported", approval_id=approval_id, refusal_code=code
    )
    ok = bool(ledger_events) and bool(cp_events) and final["state"] == "refused"
    audit = (
        f"executor: ledger row refused + audit executor.outcome {code}; "
        f"checkpoint: outcome.reported {code}, state refused"
        if ok
        else f"MISSING: ledger events {len(ledger_events)}, checkpoint events {len(cp_events)},"
        f" state {final['state']}"
    )
    return Observation(code, audit, ok, (iid,))


@attack(
    "precondition_drift_instance_restarted",
    surface="feed",
    expect="E_PRECONDITION",
    does="A delete is proposed for a stopped instance; someone starts it again out of band "
    "before the two approvals (with the typed id) are given.",
)
def _restarted(rig: Rig, t: Target) -> Observation:
    return _drift(
        rig,
        t,
        delete_action(t),
        "Stopped",
        lambda iid: rig.cloud.set_status(iid, "Running"),
    )


@attack(
    "precondition_drift_protect_tag_added",
    surface="feed",
    expect="E_PRECONDITION",
    does="A stop is proposed; the owner tags the instance airlock:protect out of band before "
    "it is approved.",
)
def _protect_tag(rig: Rig, t: Target) -> Observation:
    return _drift(
        rig,
        t,
        stop_action(t),
        "Running",
        lambda iid: rig.cloud.add_tags(iid, [("airlock:protect", "yes")]),
    )


@attack(
    "precondition_drift_deleted_out_of_band",
    surface="feed",
    expect="E_PRECONDITION",
    does="A stop is proposed; the instance is deleted out of band before it is approved.",
)
def _deleted(rig: Rig, t: Target) -> Observation:
    return _drift(rig, t, stop_action(t), "Running", rig.cloud.delete)


@attack(
    "precondition_drift_stopped_out_of_band",
    surface="feed",
    expect="E_PRECONDITION",
    does="A stop is proposed; someone stops the instance by hand before it is approved (the "
    "signed precondition says Running).",
)
def _stopped(rig: Rig, t: Target) -> Observation:
    return _drift(
        rig,
        t,
        stop_action(t),
        "Running",
        lambda iid: rig.cloud.set_status(iid, "Stopped"),
    )


def _restart_then_stop(rig: Rig, iid: str) -> None:
    rig.cloud.set_status(iid, "Running")  # its last start is now
    rig.cloud.set_status(iid, "Stopped")


@attack(
    "precondition_drift_restarted_then_stopped_again",
    surface="feed",
    expect="E_PRECONDITION",
    does="A delete is proposed for a stopped instance; someone starts it and stops it again "
    "out of band before the approvals, so it is Stopped as signed but was in use since.",
)
def _restarted_then_stopped(rig: Rig, t: Target) -> Observation:
    return _drift(rig, t, delete_action(t), "Stopped", lambda iid: _restart_then_stop(rig, iid))


@attack(
    "precondition_drift_protect_tag_in_another_case",
    surface="feed",
    expect="E_PRECONDITION",
    does="A stop is proposed; the owner tags the instance Airlock:Protect=true (another "
    "letter case than the signed absent_tags) out of band before it is approved.",
)
def _protect_tag_case(rig: Rig, t: Target) -> Observation:
    return _drift(
        rig,
        t,
        stop_action(t),
        "Running",
        lambda iid: rig.cloud.add_tags(iid, [("Airlock:Protect", "true")]),
    )


@attack(
    "precondition_drift_production_tag_added",
    surface="feed",
    expect="E_PRECONDITION",
    does="A stop is proposed; someone tags the instance Environment=Production-EU out of band "
    "before it is approved (the signed precondition names no production tags; the agent "
    "would never have proposed it).",
)
def _production_tag(rig: Rig, t: Target) -> Observation:
    return _drift(
        rig,
        t,
        stop_action(t),
        "Running",
        lambda iid: rig.cloud.add_tags(iid, [("Environment", "Production-EU")]),
    )
