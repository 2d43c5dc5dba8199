"""The agent end to end: devcloud through the real SDK adapter, the real checkpoint API.

What it proves: exactly the ground-truth idle set is proposed; re-runs add nothing;
rejections are remembered for a window; deletes come only after an executed stop and the
grace period, for an instance nobody started since (its StartTime); an instance that comes
back (running again, or newly protected, or stopped by someone else) has its open proposal
withdrawn.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from airlock.protocol import ProposedAction
from services.agent.planner import APPROVAL_SLACK
from services.executor.receipts import Receipt, ReceiptSigner
from tests.checkpoint.harness import AUDIENCE

from .conftest import DAY, Harness


def _ids(proposals: list[dict[str, Any]], **where: str) -> set[str]:
    return {p["resource_id"] for p in proposals if all(p[k] == v for k, v in where.items())}


def _walk_no_floats(value: Any) -> None:
    assert not isinstance(value, float), value
    if isinstance(value, dict):
        for v in value.values():
            _walk_no_floats(v)
    elif isinstance(value, list):
        for v in value:
            _walk_no_floats(v)


def test_exactly_the_idle_set_is_proposed(harness: Harness) -> None:
    truth = harness.dc.admin.truth()
    expected = {iid for iid, cls in truth.items() if cls == "idle"}
    assert expected, "the fleet must have idle instances"
    assert {"busy", "bursty", "net_busy", "protected", "prod", "young", "stopped"} <= set(
        truth.values()
    )

    report = harness.agent().run_once()

    assert report.complete and report.problems == 0
    assert report.created == len(expected) == report.planned
    proposals = harness.proposals()
    assert _ids(proposals) == expected
    assert _ids(proposals, state="pending", operation="stop") == expected
    assert len(proposals) == len(expected)  # nothing denied, nothing twice
    for p in proposals:
        action = ProposedAction.model_validate(json.loads(p["action_jcs"]))
        assert action.action_hash() == p["action_hash"]
        _walk_no_floats(p["action"])
        ev = action.evidence
        assert ev["policy"] == "idle/v1" and ev["window_days"] == 14
        assert len(ev["daily_cpu_p95_bp"]) == 14 and len(ev["daily_net_bytes"]) == 14
        assert ev["cpu_avg_bp"] < 500 and ev["cpu_p95_bp"] < 1000
        assert ev["samples"] >= 303 and ev["net_quiet_days"] >= 12
        assert isinstance(ev["tags"], dict) and ev["tags"]
        assert action.precondition.status == "Running"
        assert "airlock:protect" in action.precondition.absent_tags
        assert action.created_at.endswith("Z") and action.precondition.observed_at.endswith("Z")
        if action.resource.type == "ecs.instance":
            assert action.params == {"stopped_mode": "StopCharging"}
        else:
            assert action.params == {}
    # RDS instances are covered, not just ECS
    assert any(p["resource_type"] == "rds.instance" for p in proposals)
    # the checkpoint shows the reason a person reads
    assert all(p["action"]["reason"].startswith("Idle 14 days: CPU avg") for p in proposals)


def test_second_run_proposes_nothing_new(harness: Harness) -> None:
    first = harness.agent().run_once()
    before = {p["id"]: p["action_hash"] for p in harness.proposals()}
    assert first.created == len(before) > 0

    harness.advance(3600)  # same day: same window, same ids
    second = harness.agent().run_once()
    harness.advance(DAY)  # next day: new window, but the open proposals stand
    third = harness.agent().run_once()

    assert second.created == third.created == 0
    assert second.planned == third.planned == 0
    assert {p["id"]: p["action_hash"] for p in harness.proposals()} == before


def test_rejected_resource_is_not_reproposed_inside_the_window(harness: Harness) -> None:
    harness.agent().run_once()
    proposals = harness.proposals()
    rejected = proposals[0]
    harness.reject(rejected, "not_idle")

    # Two days on, the other proposals have expired unanswered: they are proposed again
    # under new ids; the rejected resource is held back.
    harness.advance(2 * DAY)
    assert harness.world.checkpoint.sweep()["expired"] == len(proposals) - 1
    again = harness.agent().run_once()
    assert again.created == len(proposals) - 1
    assert rejected["resource_id"] not in _ids(harness.proposals(state="pending"))
    assert any(r.kind == "hold" and r.resource_id == rejected["resource_id"] for r in again.rows)

    # A window after the rejection it may be proposed again.
    harness.advance(13 * DAY)
    harness.world.checkpoint.sweep()
    later = harness.agent().run_once()
    pending = _ids(harness.proposals(state="pending"))
    assert rejected["resource_id"] in pending
    # (instances that were young 15 days ago have since come of age and join them)
    assert _ids(proposals) <= pending and later.created == len(pending)


def _stopped_by_airlock(
    harness: Harness, region: str, iid: str, signer: ReceiptSigner
) -> dict[str, Any]:
    report = harness.agent(regions=(region,)).run_once()
    assert report.created == 1
    (stop,) = harness.proposals(resource_id=iid)
    assert stop["operation"] == "stop"
    harness.execute_stop(stop, signer)
    return stop


@pytest.fixture
def signer() -> ReceiptSigner:
    # The receipt key the test checkpoint trusts (it verifies every outcome).
    from tests.executor.support import receipt_signer

    return receipt_signer()


def test_delete_is_proposed_only_after_the_grace_period(
    harness: Harness, own_region: str, create_idle: Callable[..., str], signer: ReceiptSigner
) -> None:
    iid = create_idle(own_region)
    # Stopped by someone else, never by Airlock: never a delete candidate.
    other = create_idle(own_region, 1)
    harness.dc.admin.set_instance(other, status="Stopped")
    stop = _stopped_by_airlock(harness, own_region, iid, signer)

    for days in (1, 6):
        harness.set_time(_days_after_stop(harness, stop, days))
        report = harness.agent(regions=(own_region,)).run_once()
        assert report.created == 0, f"day {days}"
        assert any(r.kind == "hold" and r.operation == "delete" for r in report.rows)

    harness.set_time(_days_after_stop(harness, stop, 7))
    report = harness.agent(regions=(own_region,)).run_once()
    assert report.created == 1
    deletes = harness.proposals(operation="delete")
    assert _ids(deletes) == {iid}
    (delete,) = deletes
    action = delete["action"]
    assert action["precondition"]["status"] == "Stopped"
    assert action["params"] == {}
    assert action["evidence"]["stop_proposal_id"] == stop["id"]
    assert action["evidence"]["stopped_seconds"] >= 7 * DAY
    assert delete["risk"] == "high" and delete["votes_needed"] == 2

    # and only once
    harness.advance(3600)
    assert harness.agent(regions=(own_region,)).run_once().created == 0


def _days_after_stop(harness: Harness, stop: dict[str, Any], days: int) -> int:
    executed = harness.proposals(resource_id=stop["resource_id"], operation="stop")[0]
    return int(executed["outcome"]["reported_at"]) + days * DAY


def test_restarted_instance_gets_its_delete_withdrawn_and_is_left_alone(
    harness: Harness, own_region: str, create_idle: Callable[..., str], signer: ReceiptSigner
) -> None:
    iid = create_idle(own_region)
    stop = _stopped_by_airlock(harness, own_region, iid, signer)
    harness.set_time(_days_after_stop(harness, stop, 8))
    harness.agent(regions=(own_region,)).run_once()
    (delete,) = harness.proposals(operation="delete", state="pending")

    harness.dc.admin.set_instance(iid, status="Running")  # someone started it again
    harness.advance(3600)
    report = harness.agent(regions=(own_region,)).run_once()

    assert report.withdrawn == 1
    assert harness.proposals(operation="delete")[0]["state"] == "withdrawn"
    assert report.created == 0  # running again after Airlock stopped it: left alone
    assert any(r.kind == "hold" and r.operation == "stop" for r in report.rows)
    assert harness.proposals(state="pending") == []
    assert delete["resource_id"] == iid


def test_restart_then_manual_stop_does_not_lead_to_a_delete_on_airlocks_old_stop(
    harness: Harness, own_region: str, create_idle: Callable[..., str], signer: ReceiptSigner
) -> None:
    """Stopped by Airlock, started by a person on day 1, stopped by hand on day 5: on day 8
    it is stopped, but it did not stay stopped for the grace period after Airlock's stop."""
    iid = create_idle(own_region)
    stop = _stopped_by_airlock(harness, own_region, iid, signer)

    harness.set_time(_days_after_stop(harness, stop, 1))
    harness.dc.admin.set_instance(iid, status="Running", started_at=harness.now)
    report = harness.agent(regions=(own_region,)).run_once()
    assert any(r.kind == "hold" and r.operation == "stop" for r in report.rows)

    harness.set_time(_days_after_stop(harness, stop, 5))
    harness.dc.admin.set_instance(iid, status="Stopped")

    for days in (8, 20):  # each run is a fresh agent: nothing is remembered in process
        harness.set_time(_days_after_stop(harness, stop, days))
        report = harness.agent(regions=(own_region,)).run_once()
        assert report.created == 0, f"day {days}"
        (hold,) = [r for r in report.rows if r.operation == "delete"]
        assert hold.kind == "hold" and hold.detail.startswith("started again at "), hold
    assert harness.proposals(operation="delete") == []


def test_start_and_stop_between_two_scans_does_not_lead_to_a_delete(
    harness: Harness, own_region: str, create_idle: Callable[..., str], signer: ReceiptSigner
) -> None:
    """The agent never sees it running (started and stopped again while it was not
    scanning); the provider's last start time still shows Airlock's stop was undone."""
    iid = create_idle(own_region)
    stop = _stopped_by_airlock(harness, own_region, iid, signer)
    started = _days_after_stop(harness, stop, 2)
    harness.dc.admin.set_instance(iid, status="Running", started_at=started)
    harness.dc.admin.set_instance(iid, status="Stopped")

    harness.set_time(_days_after_stop(harness, stop, 9))
    report = harness.agent(regions=(own_region,)).run_once()
    assert report.created == 0
    assert harness.proposals(operation="delete") == []


def test_a_later_airlock_stop_after_a_restart_can_lead_to_a_delete(
    harness: Harness, own_region: str, create_idle: Callable[..., str], signer: ReceiptSigner
) -> None:
    iid = create_idle(own_region)
    first = _stopped_by_airlock(harness, own_region, iid, signer)
    restarted = _days_after_stop(harness, first, 1)
    harness.dc.admin.set_instance(iid, status="Running", started_at=restarted)

    # Left alone for a window; then, still idle, it is stopped by Airlock again.
    harness.set_time(_days_after_stop(harness, first, 16))
    assert harness.agent(regions=(own_region,)).run_once().created == 1
    (second,) = harness.proposals(resource_id=iid, operation="stop", state="pending")
    harness.execute_stop(second, signer)

    harness.set_time(_days_after_stop(harness, second, 7))
    assert harness.agent(regions=(own_region,)).run_once().created == 1
    (delete,) = harness.proposals(operation="delete", resource_id=iid)
    evidence = delete["action"]["evidence"]
    assert evidence["stop_proposal_id"] == second["id"]
    assert evidence["last_started_at"] == time.strftime(
        "%Y-%m-%dT%H:%M:00Z", time.gmtime(restarted)
    )
    assert 7 * DAY <= evidence["stopped_seconds"] < 8 * DAY


def test_newly_protected_instance_gets_its_stop_withdrawn(
    harness: Harness, own_region: str, create_idle: Callable[..., str]
) -> None:
    iid = create_idle(own_region)
    assert harness.agent(regions=(own_region,)).run_once().created == 1

    harness.dc.admin.set_instance(iid, add_tags=[("Owner-Note", "AIRLOCK:PROTECT")])
    report = harness.agent(regions=(own_region,)).run_once()

    assert report.withdrawn == 1 and report.created == 0
    (p,) = harness.proposals(resource_id=iid)
    assert p["state"] == "withdrawn"


def test_instance_stopped_out_of_band_gets_its_pending_stop_withdrawn(
    harness: Harness, own_region: str, create_idle: Callable[..., str]
) -> None:
    iid = create_idle(own_region)
    gone = create_idle(own_region, 1)
    assert harness.agent(regions=(own_region,)).run_once().created == 2

    harness.dc.admin.set_instance(iid, status="Stopped")
    harness.dc.admin.delete_instance(gone)
    report = harness.agent(regions=(own_region,)).run_once()

    assert report.withdrawn == 2 and report.created == 0
    assert {p["state"] for p in harness.proposals(region=own_region)} == {"withdrawn"}


def test_loop_runs_scan_after_scan_until_stopped(harness: Harness) -> None:
    import threading

    stop = threading.Event()
    reports = []

    def on_report(report: object) -> None:
        reports.append(report)
        harness.advance(3600)
        if len(reports) == 2:
            stop.set()

    harness.agent().run_loop(interval=0, stop=stop, on_report=on_report)

    assert [r.created for r in reports] == [len(harness.proposals()), 0]


def _report_in_doubt(harness: Harness, proposal: dict[str, Any], signer: ReceiptSigner) -> str:
    """Approve, then report what an executor reports when it cannot tell: in_doubt."""
    approved = harness.approve(proposal)
    approval_id = str(approved["approval"]["approval_id"])
    receipt = Receipt(
        type="airlock.receipt/v1",
        executor=AUDIENCE,
        approval_id=approval_id,
        action_hash=proposal["action_hash"],
        outcome="in_doubt",
        verified=True,
        refusal_code=None,
        cloud_request_id=None,
        resolution=None,
        at=harness.now,
        audit_head={"seq": 1, "hash": "sha256:" + "0" * 64},
        detail="the call timed out",
    )
    r = harness.world.client.post(
        "/v1/outcomes",
        json={"receipt": signer.sign(receipt).to_value()},
        headers=harness.world.auth("executor"),
    )
    assert r.status_code == 200 and r.json()["state"] == "in_doubt", r.text
    return approval_id


def test_stop_resolved_did_not_happen_is_proposed_again_the_same_day(
    harness: Harness, own_region: str, create_idle: Callable[..., str], signer: ReceiptSigner
) -> None:
    iid = create_idle(own_region)
    assert harness.agent(regions=(own_region,)).run_once().created == 1
    (first,) = harness.proposals(resource_id=iid)
    old_approval = _report_in_doubt(harness, first, signer)
    r = harness.world.client.post(
        f"/v1/proposals/{first['id']}/resolve",
        json={"decision": "did_not_happen", "note": "still running in the console"},
        headers=harness.world.auth("admin"),
    )
    assert r.status_code == 200 and r.json()["state"] == "failed", r.text

    harness.advance(3600)  # the same UTC day: the same idle window
    report = harness.agent(regions=(own_region,)).run_once()

    assert (report.created, report.refused) == (1, 0), report.rows
    again = [p for p in harness.proposals(resource_id=iid) if p["id"] != first["id"]]
    (retry,) = again
    assert retry["state"] == "pending" and retry["approval"] is None
    assert retry["action_hash"] != first["action_hash"]
    # The retry needs its own approval, bound to its own hash; the old one stays spent.
    approved = harness.approve(retry)
    assert approved["approval"]["approval_id"] != old_approval
    assert approved["approval"]["envelope"] != first.get("approval")
    # Proposing again holds the new id while it is open: nothing more, nothing refused.
    harness.advance(60)
    later = harness.agent(regions=(own_region,)).run_once()
    assert (later.created, later.refused) == (0, 0)


def test_revoked_stop_is_not_proposed_again_while_its_approval_could_run(
    harness: Harness, own_region: str, create_idle: Callable[..., str]
) -> None:
    iid = create_idle(own_region)
    assert harness.agent(regions=(own_region,)).run_once().created == 1
    (first,) = harness.proposals(resource_id=iid)
    approved = harness.approve(first)
    r = harness.world.client.post(
        f"/v1/proposals/{first['id']}/revoke",
        json={"note": "wrong one"},
        headers=harness.world.auth("alice"),
    )
    assert r.status_code == 200 and r.json()["state"] == "revoked", r.text

    # An executor that fetched the approval before the revocation could still use it.
    harness.advance(60)
    held = harness.agent(regions=(own_region,)).run_once()
    assert (held.created, held.refused) == (0, 0)
    assert any(row.kind == "hold" and first["id"] in row.detail for row in held.rows)

    expires = int(approved["approval"]["expires_at"])
    harness.set_time(expires + APPROVAL_SLACK)
    retried = harness.agent(regions=(own_region,)).run_once()
    assert (retried.created, retried.refused) == (1, 0), retried.rows
