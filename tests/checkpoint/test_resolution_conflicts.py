"""An in_doubt resolved in two places: by an admin here and by a person at the executor.

The executor's resolution receipt that comes after the admin's resolution is kept,
whether it agrees or not, and shown on the proposal; one that contradicts it is answered
with a code of its own (``E_RESOLUTION_CONFLICT``), the same every time it is posted, so
the executor's outbox records it for good and says what it means (found by a
walkthrough: it was refused ``E_STATE``, listed as one to send again, and lost).
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DatabaseError

from services.checkpoint.models import executor_resolutions

from .harness import START, World, approved, audit_events, signed_receipt


def _report(world: World, receipt: dict[str, Any]) -> Any:
    return world.client.post(
        "/v1/outcomes", json={"receipt": receipt}, headers=world.auth("executor")
    )


def _in_doubt_resolved_here(world: World, decision: str) -> tuple[dict[str, Any], str]:
    proposal, approval_id = approved(world)
    in_doubt = signed_receipt(approval_id, proposal["action_hash"], "in_doubt")
    assert _report(world, in_doubt).status_code == 200
    done = world.client.post(
        f"/v1/proposals/{proposal['id']}/resolve",
        json={"decision": decision, "note": "the console says so"},
        headers=world.auth("admin"),
    )
    assert done.status_code == 200, done.text
    return proposal, approval_id


def _executor_resolution(proposal: dict[str, Any], approval_id: str, decision: str) -> Any:
    resolution = {"decision": decision, "by": "ops", "at": START + 5, "note": "ledger check"}
    return signed_receipt(
        approval_id, proposal["action_hash"], "resolved", resolution=resolution, at=START + 5
    )


def _stored(world: World) -> list[Any]:
    with world.checkpoint.engine.connect() as conn:
        return list(conn.execute(executor_resolutions.select()).all())


def test_an_executor_resolution_contradicting_the_admins_is_kept_and_answered_as_a_conflict(
    world: World,
) -> None:
    proposal, approval_id = _in_doubt_resolved_here(world, "happened")
    receipt = _executor_resolution(proposal, approval_id, "did_not_happen")

    answer = _report(world, receipt)

    assert answer.status_code == 409, answer.text
    error = answer.json()["error"]
    assert error["code"] == "E_RESOLUTION_CONFLICT"
    # which record says what, and what a person should do
    assert "'happened'" in error["message"] and "'did_not_happen'" in error["message"]
    assert "ledger" in error["message"] and "cloud" in error["message"]
    shown = world.client.get(f"/v1/proposals/{proposal['id']}", headers=world.auth("bob"))
    body = shown.json()
    assert body["state"] == "executed"  # the admin's, kept
    assert body["outcome"]["resolution"] == "happened"
    seen = body["outcome"]["executor_resolution"]
    assert (seen["decision"], seen["by"], seen["conflict"]) == ("did_not_happen", "ops", True)
    assert (seen["checkpoint_decision"], seen["checkpoint_resolved_by"]) == ("happened", "admin")
    assert seen["receipt"] == receipt
    (event,) = audit_events(world, "checkpoint.executor_resolution")
    assert (event["approval_id"], event["decision"], event["agrees"]) == (
        approval_id,
        "did_not_happen",
        False,
    )
    assert event["receipt_verified"] is True and len(event["receipt_sha256"]) == 64
    assert event["executor_head"] == {"seq": 1, "hash": "sha256:" + "0" * 64}

    # posted again (a lost answer, an operator's resend): the same answer, kept once
    again = _report(world, receipt)
    assert (again.status_code, again.json()["error"]["code"]) == (409, "E_RESOLUTION_CONFLICT")
    assert len(_stored(world)) == 1
    assert len(audit_events(world, "checkpoint.executor_resolution")) == 1


@pytest.mark.parametrize("decision", ["happened", "did_not_happen"])
def test_an_executor_resolution_agreeing_with_the_admins_is_kept_and_accepted(
    world: World, decision: str
) -> None:
    proposal, approval_id = _in_doubt_resolved_here(world, decision)
    receipt = _executor_resolution(proposal, approval_id, decision)

    answer = _report(world, receipt)

    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["state"] == ("executed" if decision == "happened" else "failed")
    seen = body["outcome"]["executor_resolution"]
    assert (seen["decision"], seen["conflict"]) == (decision, False)
    assert _report(world, receipt).status_code == 200  # the same receipt: the same answer
    (event,) = audit_events(world, "checkpoint.executor_resolution")
    assert event["agrees"] is True


def test_a_second_executor_resolution_of_the_same_approval_is_refused(world: World) -> None:
    """A ledger resolves a row once: another resolution receipt is from another ledger
    on this audience, a conflict of its own that changes nothing."""
    proposal, approval_id = _in_doubt_resolved_here(world, "happened")
    agreeing = _executor_resolution(proposal, approval_id, "happened")
    assert _report(world, agreeing).status_code == 200
    other = signed_receipt(
        approval_id,
        proposal["action_hash"],
        "resolved",
        resolution={"decision": "did_not_happen", "by": "eve", "at": START + 9, "note": ""},
        at=START + 9,
    )
    refused = _report(world, other)
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "E_STATE")
    (kept,) = _stored(world)
    assert kept.decided_by == "ops"


def test_the_executor_resolution_table_is_insert_only(world: World) -> None:
    proposal, approval_id = _in_doubt_resolved_here(world, "happened")
    _report(world, _executor_resolution(proposal, approval_id, "did_not_happen"))
    statements = [
        "UPDATE executor_resolutions SET agrees = true",
        "DELETE FROM executor_resolutions",
    ]
    if world.checkpoint.engine.dialect.name == "sqlite":
        # REPLACE deletes the row it conflicts with: the guard refuses it first.
        statements.append(
            "INSERT OR REPLACE INTO executor_resolutions SELECT * FROM executor_resolutions"
        )
    for sql in statements:
        with pytest.raises(DatabaseError), world.checkpoint.engine.begin() as conn:
            conn.execute(sa.text(sql))
    assert len(_stored(world)) == 1
