"""``airlock audit reconcile`` holds the two places an in_doubt is resolved to each other.

Found by a walkthrough: an admin resolved an in_doubt at the checkpoint as happened, a
person at the executor resolved it in the ledger as did not happen, and reconcile said
"OK: the two chains agree". The real checkpoint and executor write the chains here.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from airlock.reconcile import ReconcileCode, reconcile
from services.executor import Executor
from tests.cli.conftest import airlock
from tests.executor.support import InMemoryCloud

from .harness import World
from .test_reconcile import (
    _chain,
    _consumed,
    _executing,
    _executor,
    _feed_source,
    _head,
    _issued,
    _lines,
    _outcome,
)


def _in_doubt(world: World, ledger_url: str) -> tuple[Executor, str, str]:
    """One approval the real executor left in_doubt, reported: (executor, proposal, aid)."""
    cloud = InMemoryCloud()
    proposal = world.submit(proposal_id="prop_doubt0000001", resource_id="i-doubt0001").json()
    assert world.approve("alice", proposal["id"], proposal["action_hash"]).status_code == 200
    cloud.add("ecs.instance", "i-doubt0001", "Running")
    executor = _executor(world, ledger_url, cloud)
    source = _feed_source(world, executor)
    [delivery] = source.receive(wait_s=0)
    cloud.next_fault = "timeout_before"  # the answer is lost, and no effect is visible
    outcome = executor.execute(delivery.raw, revoked=source.revoked())
    source.ack(delivery)
    assert outcome.state.value == "in_doubt" and outcome.receipt is not None
    assert _post(world, outcome.receipt).status_code == 200
    return executor, proposal["id"], outcome.approval_id


def _post(world: World, receipt: Any) -> Any:
    return world.client.post(
        "/v1/outcomes", json={"receipt": receipt.to_value()}, headers=world.auth("executor")
    )


def _resolve_here(world: World, proposal_id: str, decision: str) -> None:
    done = world.client.post(
        f"/v1/proposals/{proposal_id}/resolve",
        json={"decision": decision, "note": ""},
        headers=world.auth("admin"),
    )
    assert done.status_code == 200, done.text


def test_an_in_doubt_resolved_differently_at_the_checkpoint_and_the_executor_is_a_finding(
    world: World, ledger_url: str
) -> None:
    executor, proposal_id, aid = _in_doubt(world, ledger_url)
    _resolve_here(world, proposal_id, "happened")
    resolved = executor.resolve(aid, happened=False, by="ops", note="nothing in the console")
    answer = _post(world, resolved.receipt)
    assert answer.json()["error"]["code"] == "E_RESOLUTION_CONFLICT"

    report = reconcile(_lines(world.url), _lines(ledger_url))

    assert [(f.code, f.approval_id) for f in report.findings] == [
        (ReconcileCode.R_RESOLUTION_CONFLICT, aid)
    ]
    detail = report.findings[0].detail
    assert "'happened'" in detail and "'did_not_happen'" in detail and "admin" in detail
    # the receipt the checkpoint kept is anchored in the executor's chain like any other
    assert (report.resolution_receipts, report.resolution_receipts_anchored) == (1, 1)
    assert report.to_value()["resolutions"]["conflict"] == 1

    result = airlock(
        "audit", "reconcile", "--checkpoint-db", world.url, "--executor-db", ledger_url
    )
    assert result.exit_code == 1, result.output
    assert f"R_RESOLUTION_CONFLICT {aid}" in result.output
    assert "OK: the two chains agree" not in result.output
    as_json = airlock(
        "audit", "reconcile", "--checkpoint-db", world.url, "--executor-db", ledger_url, "--json"
    )
    assert as_json.exit_code == 1
    codes = [f["code"] for f in json.loads(as_json.output)["findings"]]
    assert codes == ["R_RESOLUTION_CONFLICT"]


def test_an_in_doubt_resolved_alike_in_both_places_reconciles(
    world: World, ledger_url: str
) -> None:
    executor, proposal_id, aid = _in_doubt(world, ledger_url)
    _resolve_here(world, proposal_id, "did_not_happen")
    resolved = executor.resolve(aid, happened=False, by="ops", note="")
    assert _post(world, resolved.receipt).status_code == 200

    report = reconcile(_lines(world.url), _lines(ledger_url))

    assert report.ok, report.findings
    assert (report.resolutions_agree, report.resolution_receipts_anchored) == (1, 1)
    assert report.resolved_at_executor_only == report.resolved_at_checkpoint_only == []


@pytest.mark.parametrize("side", ["executor", "checkpoint"])
def test_an_in_doubt_resolved_on_one_side_only_is_a_note_not_a_finding(
    world: World, ledger_url: str, side: str
) -> None:
    """At the executor only: its receipt may just not be delivered yet. At the
    checkpoint only: the ledger still says in_doubt (nothing tells the executor)."""
    executor, proposal_id, aid = _in_doubt(world, ledger_url)
    if side == "executor":
        executor.resolve(aid, happened=True, by="ops", note="")  # receipt not posted yet
    else:
        _resolve_here(world, proposal_id, "happened")

    report = reconcile(_lines(world.url), _lines(ledger_url))

    assert report.ok, report.findings
    only = report.to_value()["resolutions"][f"{side}_only"]
    assert only == [aid]
    result = airlock(
        "audit", "reconcile", "--checkpoint-db", world.url, "--executor-db", ledger_url
    )
    assert result.exit_code == 0, result.output
    [note] = [line for line in result.output.splitlines() if line.startswith("note: ")]
    assert aid in note
    if side == "executor":
        assert "not (yet) at the checkpoint" in note and "receipts list" in note
    else:
        assert "still says in_doubt" in note and "airlock executor resolve" in note


def _resolved(aid: str, decision: str) -> dict[str, Any]:
    return {"type": "executor.resolved", "approval_id": aid, "decision": decision, "by": "ops"}


def test_a_conflict_the_checkpoint_refused_to_record_is_found_from_the_chains_alone() -> None:
    """A checkpoint before migration 0006 refused the receipt (E_STATE) and kept no trace:
    the person's resolution there and the ledger's still disagree."""
    ex = _chain(
        "executor",
        [
            _consumed("a1"),
            _executing("a1"),
            _outcome("a1", "in_doubt"),
            _resolved("a1", "happened"),
        ],
    )
    cp = _chain(
        "checkpoint",
        [
            {**_issued("a1"), "proposal_id": "p1"},
            {
                "type": "checkpoint.execution.resolved",
                "proposal_id": "p1",
                "by": "admin",
                "decision": "did_not_happen",
                "note": "",
            },
        ],
    )
    report = reconcile(cp, ex)
    assert [(f.code, f.approval_id) for f in report.findings] == [
        (ReconcileCode.R_RESOLUTION_CONFLICT, "a1")
    ]


def test_a_kept_executor_resolution_naming_another_decision_is_an_outcome_mismatch() -> None:
    ex = _chain(
        "executor",
        [
            _consumed("a1"),
            _executing("a1"),
            _outcome("a1", "in_doubt"),
            _resolved("a1", "happened"),
        ],
    )
    cp = _chain(
        "checkpoint",
        [
            {**_issued("a1"), "proposal_id": "p1"},
            {
                "type": "checkpoint.execution.resolved",
                "proposal_id": "p1",
                "by": "admin",
                "decision": "happened",
                "note": "",
            },
            {
                "type": "checkpoint.executor_resolution",
                "approval_id": "a1",
                "decision": "did_not_happen",
                "agrees": False,
                "executor_head": _head(ex, 4),
            },
        ],
    )
    report = reconcile(cp, ex)
    assert [(f.code, f.approval_id) for f in report.findings] == [
        (ReconcileCode.R_OUTCOME_MISMATCH, "a1")
    ]
