"""Outcomes reported by the executor: only verified receipts for the right audience land.

Every receipt here is built the way the executor builds it (``harness.signed_receipt``)
unless the test is about a receipt nobody trusted signed.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from airlock.protocol import Envelope, Signature, canonical_bytes, pae
from services.checkpoint.models import outcomes
from services.checkpoint.service import RECEIPT_PAYLOAD_TYPE
from tests.executor.support import RECEIPT_SEED, receipt_signer

from .harness import World, make_world, signed_receipt


@pytest.fixture
def untrusting_world(db_url: str, tmp_path: Path) -> Iterator[World]:
    """A checkpoint built without any receipt key set (build() refuses this; the service
    must still fail closed)."""
    w = make_world(db_url, tmp_path, trust_receipts=False)
    try:
        yield w
    finally:
        w.client.close()
        w.checkpoint.db.dispose()


def _approved(world: World, **kwargs: Any) -> tuple[dict[str, Any], str]:
    proposal = world.submit(**kwargs).json()
    record = world.approve("alice", proposal["id"], proposal["action_hash"]).json()
    assert record["state"] == "approved", record
    return proposal, record["approval"]["approval_id"]


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
    proposal, approval_id = _approved(world)
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
    proposal, approval_id = _approved(world)
    response = _report(world, _unsigned(approval_id, proposal["action_hash"], "refused"))
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "E_RECEIPT"
    shown = world.client.get(f"/v1/proposals/{proposal['id']}", headers=world.auth("bob")).json()
    assert shown["state"] == "approved" and shown["outcome"] is None
    again = world.submit(proposal_id="prop_test0000002")
    assert again.status_code == 409 and again.json()["error"]["code"] == "E_DUPLICATE_OPEN"


def test_verified_receipt_lands_with_its_key_id(world: World) -> None:
    proposal, approval_id = _approved(world)
    response = _report(world, signed_receipt(approval_id, proposal["action_hash"], "succeeded"))
    assert response.status_code == 200, response.text
    outcome = response.json()["outcome"]
    assert response.json()["state"] == "executed"
    assert outcome["receipt_verified"] is True and outcome["receipt_keyid"].startswith("ed25519:")


def test_receipt_from_another_executor_audience_is_refused(world: World) -> None:
    proposal, approval_id = _approved(world)
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
    proposal, approval_id = _approved(world)
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
    first, first_approval = _approved(world)
    second, _ = _approved(world, proposal_id="prop_test0000002", resource_id="i-t4n0other00")
    response = _report(world, signed_receipt(first_approval, second["action_hash"], "succeeded"))
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "E_RECEIPT"
    unknown = _report(world, signed_receipt("apv_unknown00000", first["action_hash"], "failed"))
    assert unknown.status_code == 404
    assert _stored_outcomes(world) == 0
