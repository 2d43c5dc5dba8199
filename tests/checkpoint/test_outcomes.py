"""Outcomes reported by the executor: only verified receipts for the right audience land.

Every receipt here is built the way the executor builds it (``harness.signed_receipt``)
unless the test is about a receipt nobody trusted signed.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from airlock.protocol import Envelope, Signature, canonical_bytes, pae
from services.checkpoint import reports
from services.checkpoint.models import outcomes
from services.checkpoint.service import RECEIPT_PAYLOAD_TYPE
from tests.executor.support import RECEIPT_SEED, receipt_signer

from .harness import START, World, approved, audit_events, signed_receipt


def _unsigned(approval_id: str, action_hash: str, outcome: str) -> dict[str, Any]:
    payload = json.dumps(
        {
            "type": "airlock.receipt/v1",
            "approval_id": approval_id,
            "action_hash": action_hash,
            "outcome": outcome,
            "refusal_code": None,
        },
        separators=(",", ":"),
    ).encode()
    return {
        "payloadType": "application/vnd.airlock.receipt.v1+json",
        "payload": base64.b64encode(payload).decode(),
        "signatures": [
            {"keyid": "ed25519:" + "0" * 32, "sig": base64.b64encode(b"\0" * 64).decode()}
        ],
    }


def _report(world: World, receipt: dict[str, Any]) -> Any:
    return world.client.post(
        "/v1/outcomes", json={"receipt": receipt}, headers=world.auth("executor")
    )


def _stored_outcomes(world: World) -> int:
    with world.checkpoint.engine.connect() as conn:
        return len(conn.execute(outcomes.select()).all())


@pytest.mark.parametrize("how", ["unsigned", "signed by the real executor key"])
def test_receipt_without_a_receipt_key_set_is_refused(untrusting_world: World, how: str) -> None:
    world = untrusting_world
    proposal, approval_id = approved(world)
    receipt = (
        _unsigned(approval_id, proposal["action_hash"], "refused")
        if how == "unsigned"
        else signed_receipt(approval_id, proposal["action_hash"], "refused")
    )
    response = _report(world, receipt)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "E_RECEIPT"
    assert _stored_outcomes(world) == 0
    # the approval is still live, so a person can still revoke it
    revoked = world.client.post(
        f"/v1/proposals/{proposal['id']}/revoke", json={}, headers=world.auth("bob")
    )
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"


def test_forged_receipt_is_refused_and_the_target_stays_taken(world: World) -> None:
    proposal, approval_id = approved(world)
    response = _report(world, _unsigned(approval_id, proposal["action_hash"], "refused"))
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "E_RECEIPT"
    shown = world.client.get(f"/v1/proposals/{proposal['id']}", headers=world.auth("bob")).json()
    assert shown["state"] == "approved" and shown["outcome"] is None
    again = world.submit(proposal_id="prop_test0000002")
    assert again.status_code == 409 and again.json()["error"]["code"] == "E_DUPLICATE_OPEN"


def test_verified_receipt_lands_with_its_key_id(world: World) -> None:
    proposal, approval_id = approved(world)
    response = _report(world, signed_receipt(approval_id, proposal["action_hash"], "succeeded"))
    assert response.status_code == 200, response.text
    outcome = response.json()["outcome"]
    assert response.json()["state"] == "executed"
    assert outcome["receipt_verified"] is True and outcome["receipt_keyid"].startswith("ed25519:")


def test_receipt_from_another_executor_audience_is_refused(world: World) -> None:
    proposal, approval_id = approved(world)
    receipt = signed_receipt(
        approval_id,
        proposal["action_hash"],
        "refused",
        executor="airlock-executor/staging",
        refusal_code="E_AUDIENCE",
    )
    response = _report(world, receipt)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "E_RECEIPT"
    assert "airlock-executor/staging" in response.json()["error"]["message"]
    assert _stored_outcomes(world) == 0
    revoked = world.client.post(
        f"/v1/proposals/{proposal['id']}/revoke", json={}, headers=world.auth("bob")
    )
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"


def test_receipt_naming_no_executor_is_refused(world: World) -> None:
    proposal, approval_id = approved(world)
    payload = canonical_bytes(
        {
            "type": "airlock.receipt/v1",
            "approval_id": approval_id,
            "action_hash": proposal["action_hash"],
            "outcome": "succeeded",
            "refusal_code": None,
        }
    )
    key = Ed25519PrivateKey.from_private_bytes(RECEIPT_SEED)  # the trusted receipt key
    sig = key.sign(pae(RECEIPT_PAYLOAD_TYPE, payload))
    envelope = Envelope(RECEIPT_PAYLOAD_TYPE, payload, (Signature(receipt_signer().keyid, sig),))
    response = _report(world, envelope.to_value())
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "E_RECEIPT"
    assert "executor" in response.json()["error"]["message"]
    assert _stored_outcomes(world) == 0


def test_receipt_for_one_approval_naming_another_action_is_refused(world: World) -> None:
    first, first_approval = approved(world)
    second, _ = approved(world, proposal_id="prop_test0000002", resource_id="i-t4n0other00")
    response = _report(world, signed_receipt(first_approval, second["action_hash"], "succeeded"))
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "E_RECEIPT"
    unknown = _report(world, signed_receipt("apv_unknown00000", first["action_hash"], "failed"))
    assert unknown.status_code == 404
    assert _stored_outcomes(world) == 0


# -- a late in_doubt outcome when the target was proposed again -------------------------


def _close(world: World, proposal_id: str, how: str) -> None:
    if how == "revoked":
        r = world.client.post(
            f"/v1/proposals/{proposal_id}/revoke", json={}, headers=world.auth("bob")
        )
    elif how == "withdrawn":
        r = world.client.post(
            f"/v1/proposals/{proposal_id}/withdraw", json={}, headers=world.auth("agent")
        )
    else:
        world.clock.advance(901)
        world.checkpoint.sweep()
        r = world.client.get(f"/v1/proposals/{proposal_id}", headers=world.auth("bob"))
    assert r.status_code == 200 and r.json()["state"] == how, r.text


def _show(world: World, proposal_id: str) -> dict[str, Any]:
    body: dict[str, Any] = world.client.get(
        f"/v1/proposals/{proposal_id}", headers=world.auth("bob")
    ).json()
    return body


@pytest.mark.parametrize("how", ["revoked", "lapsed", "withdrawn"])
def test_late_in_doubt_lands_and_withdraws_the_newer_pending_proposal(
    world: World, how: str
) -> None:
    old, approval_id = approved(world)
    _close(world, old["id"], how)
    newer = world.submit(proposal_id="prop_test0000002")
    assert newer.status_code == 201 and newer.json()["state"] == "pending"

    response = _report(world, signed_receipt(approval_id, old["action_hash"], "in_doubt"))

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["state"] == "in_doubt"
    assert body["outcome"]["outcome"] == "in_doubt" and body["outcome"]["late"] is True
    assert body["outcome"]["target_held_by"] is None
    assert _show(world, "prop_test0000002")["state"] == "withdrawn"
    withdrawn = audit_events(world, "checkpoint.proposal.withdrawn")[-1]
    assert (withdrawn["proposal_id"], withdrawn["by"], withdrawn["reason"]) == (
        "prop_test0000002",
        "checkpoint",
        "in_doubt",
    )
    assert old["id"] in withdrawn["note"]
    reported = audit_events(world, "checkpoint.outcome.reported")[-1]
    assert reported["state"] == "in_doubt" and reported["from_state"] == how
    # the in_doubt proposal holds the target until someone resolves it
    again = world.submit(proposal_id="prop_test0000003")
    assert again.status_code == 409 and again.json()["error"]["code"] == "E_DUPLICATE_OPEN"


@pytest.mark.parametrize("resolved_by", ["a person", "the executor"])
def test_late_in_doubt_never_touches_a_newer_approved_proposal(
    world: World, resolved_by: str
) -> None:
    old, approval_id = approved(world)
    _close(world, old["id"], "revoked")
    newer, newer_approval = approved(world, proposal_id="prop_test0000002")

    response = _report(world, signed_receipt(approval_id, old["action_hash"], "in_doubt"))

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["state"] == "revoked"  # kept out of the open target index
    assert body["outcome"]["outcome"] == "in_doubt"
    assert body["outcome"]["target_held_by"] == newer["id"]
    reported = audit_events(world, "checkpoint.outcome.reported")[-1]
    assert reported["target_held_by"] == newer["id"] and reported["state"] == "revoked"
    shown = _show(world, newer["id"])
    assert shown["state"] == "approved"
    assert shown["approval"]["approval_id"] == newer_approval
    assert shown["approval"]["revoked_at"] is None

    # the in_doubt is still resolvable, and its resolution lands
    if resolved_by == "a person":
        done = world.client.post(
            f"/v1/proposals/{old['id']}/resolve",
            json={"decision": "happened", "note": "console shows it stopped"},
            headers=world.auth("admin"),
        )
    else:
        resolution = {"decision": "happened", "by": "ops", "at": START, "note": "checked"}
        done = _report(
            world,
            signed_receipt(
                approval_id, old["action_hash"], "resolved", resolution=resolution, at=START + 1
            ),
        )
    assert done.status_code == 200, done.text
    assert done.json()["state"] == "executed"
    assert _show(world, newer["id"])["state"] == "approved"


def test_target_taken_between_the_check_and_the_update_still_lands(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A proposal submitted concurrently (after the holder lookup) trips the open-target
    index inside the outcome's transaction: the outcome still lands, by rule (3)."""
    old, approval_id = approved(world)
    _close(world, old["id"], "revoked")
    newer, _ = approved(world, proposal_id="prop_test0000002")
    real = reports.slot_holder
    calls: list[str] = []

    def blind_once(conn: Any, row: Any) -> Any:
        calls.append(row.id)
        return None if len(calls) == 1 else real(conn, row)

    monkeypatch.setattr(reports, "slot_holder", blind_once)
    response = _report(world, signed_receipt(approval_id, old["action_hash"], "in_doubt"))
    assert response.status_code == 200, response.text
    assert len(calls) == 2
    assert response.json()["state"] == "revoked"
    assert response.json()["outcome"]["target_held_by"] == newer["id"]
    assert _show(world, newer["id"])["state"] == "approved"


def test_an_in_doubt_after_its_resolution_is_refused_and_stays_visible(world: World) -> None:
    """Once the executor's resolution replaced an in_doubt here, another in_doubt for the
    approval is a conflict to see (a second ledger on this audience, a ledger restored
    with the row still executing), never a silent 200; the executor's redelivery sends a
    settled in_doubt's resolution alone, so it never meets this (found in review)."""
    proposal, approval_id = approved(world)
    in_doubt = signed_receipt(approval_id, proposal["action_hash"], "in_doubt")
    assert _report(world, in_doubt).status_code == 200
    resolution = {"decision": "happened", "by": "ops", "at": START, "note": "checked"}
    resolved = signed_receipt(
        approval_id, proposal["action_hash"], "resolved", resolution=resolution, at=START + 1
    )
    assert _report(world, resolved).json()["state"] == "executed"
    assert _report(world, resolved).status_code == 200  # the same receipt: the same answer
    reported = len(audit_events(world, "checkpoint.outcome.reported"))
    another = signed_receipt(approval_id, proposal["action_hash"], "in_doubt", at=START + 9)
    for receipt in (in_doubt, another):
        refused = _report(world, receipt)
        assert refused.status_code == 409, refused.text
    assert _show(world, proposal["id"])["state"] == "executed"
    assert len(audit_events(world, "checkpoint.outcome.reported")) == reported
