"""A tool call at the checkpoint gets everything a cloud action has: quorum, no
self-approval, the typed target for high risk, reject reasons (a tool's own too), revoke,
withdraw and both windows; its approval is a signed ToolApprovalStatement for its gate."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DataError, IntegrityError

from airlock.protocol import (
    Binding,
    KeySet,
    RefusalCode,
    Refused,
    ToolBinding,
    canonical_bytes,
    verify_bundle,
)
from services.checkpoint.policy import Policy

from .builders import tool_call_value
from .harness import AUDIENCE, World, audit_events, make_world
from .tools import approved_tool, code, submit_tool

GATE = "airlock-gate/payments"
REASONS = b'version = 1\n[tools.refund]\nreject_reasons = ["fraud_suspected"]\n'


def bundle_of(record: dict[str, Any]) -> bytes:
    """The bundle exactly as the gate contract builds it from a proposal record."""
    action = base64.b64encode(record["action_jcs"].encode()).decode()
    return canonical_bytes({"action": action, "envelope": record["approval"]["envelope"]})


def test_approval_is_a_tool_call_statement_for_its_gate(world: World) -> None:
    record = approved_tool(world)
    keys = KeySet.from_value(world.client.get("/v1/keys").json())
    verified = verify_bundle(bundle_of(record), keys, ToolBinding(GATE), world.clock())
    statement = verified.statement
    assert (statement.tool, statement.target, statement.effect_key, statement.audience) == (
        "refund",
        "order-881",
        "refund:order-881",
        GATE,
    )
    assert statement.risk == "medium"
    assert statement.expires_at - statement.issued_at == 900
    assert [a.id for a in statement.approvers] == ["alice"]


def test_tool_call_approval_is_refused_by_an_executor_and_another_gate(world: World) -> None:
    record = approved_tool(world)
    keys = KeySet.from_value(world.client.get("/v1/keys").json())
    executor = Binding(AUDIENCE, "alibaba", GATE, "")
    with pytest.raises(Refused) as info:
        verify_bundle(bundle_of(record), keys, executor, world.clock())
    assert info.value.code is RefusalCode.E_STATEMENT
    with pytest.raises(Refused) as info:
        verify_bundle(bundle_of(record), keys, ToolBinding("gate/other"), world.clock())
    assert info.value.code is RefusalCode.E_AUDIENCE


def test_self_approval_of_tool_call_is_refused(world: World) -> None:
    p = submit_tool(world, proposed_by="alice").json()
    r = world.approve("alice", p["id"], p["action_hash"])
    assert (r.status_code, code(r)) == (403, "E_SELF_APPROVAL")
    assert world.approve("bob", p["id"], p["action_hash"]).json()["state"] == "approved"


def test_high_risk_tool_call_needs_typed_target(world: World) -> None:
    p = submit_tool(world, risk="high").json()
    assert p["policy"]["confirm"] is True
    missing = world.approve("alice", p["id"], p["action_hash"])
    assert (missing.status_code, code(missing)) == (422, "E_CONFIRM_REQUIRED")
    wrong = world.approve("alice", p["id"], p["action_hash"], confirm="order-882")
    assert (wrong.status_code, code(wrong)) == (422, "E_CONFIRM_MISMATCH")
    assert "target" in wrong.json()["error"]["message"]
    ok = world.approve("alice", p["id"], p["action_hash"], confirm="order-881")
    assert ok.json()["state"] == "approved"


def test_stale_view_of_a_tool_call_is_refused(world: World) -> None:
    p = submit_tool(world).json()
    r = world.approve("alice", p["id"], "sha256:" + "0" * 64)
    assert (r.status_code, code(r)) == (409, "E_STALE_VIEW")


@pytest.fixture
def reasons_world(db_url: str, tmp_path: Path) -> Any:
    w = make_world(db_url, tmp_path, Policy.from_bytes(REASONS, "<test>"))
    try:
        yield w
    finally:
        w.client.close()
        w.checkpoint.db.dispose()


def _reject(world: World, proposal_id: str, reason: str, note: str = "") -> Any:
    return world.client.post(
        f"/v1/proposals/{proposal_id}/reject",
        json={"reason_code": reason, "note": note},
        headers=world.auth("bob"),
    )


def test_tool_reject_reason_is_accepted_for_its_tool(reasons_world: World) -> None:
    w = reasons_world
    p = submit_tool(w).json()
    r = _reject(w, p["id"], "fraud_suspected", "chargeback history")
    assert r.json()["state"] == "rejected", r.text
    assert r.json()["rejection"]["reason_code"] == "fraud_suspected"
    assert audit_events(w, "checkpoint.proposal.rejected")[-1]["reason_code"] == "fraud_suspected"


def test_tool_reject_reason_is_refused_for_another_tool_and_cloud_action(
    reasons_world: World,
) -> None:
    w = reasons_world
    email = submit_tool(w, tool="send_email", effect_key="email:1").json()
    cloud = w.submit().json()
    for proposal in (email, cloud):
        r = _reject(w, proposal["id"], "fraud_suspected")
        assert (r.status_code, code(r)) == (422, "E_INVALID")
        assert (
            w.client.get(f"/v1/proposals/{proposal['id']}", headers=w.auth("bob")).json()["state"]
            == "pending"
        )
    assert _reject(w, email["id"], "wrong_target").json()["state"] == "rejected"


def test_database_refuses_a_malformed_reason_code(world: World) -> None:
    """The CHECK keeps the shape even if the service's own check were bypassed."""
    p = submit_tool(world).json()
    for reason in ("Fraud", "fraud suspected", "", "9lives", "x" * 41, "drop'--"):
        with pytest.raises((IntegrityError, DataError)), world.checkpoint.engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO rejections (proposal_id, reason_code, note, by, at) "
                    "VALUES (:p, :r, '', 'bob', 1)"
                ),
                {"p": p["id"], "r": reason},
            )


def test_revoked_tool_call_approval_is_revoked(world: World) -> None:
    record = approved_tool(world)
    r = world.client.post(
        f"/v1/proposals/{record['id']}/revoke", json={"note": "wrong"}, headers=world.auth("bob")
    )
    assert r.json()["state"] == "revoked"
    assert r.json()["approval"]["revoked_at"] == world.clock()


def test_agent_withdraws_its_tool_call_and_frees_the_effect_key(world: World) -> None:
    p = submit_tool(world).json()
    r = world.client.post(
        f"/v1/proposals/{p['id']}/withdraw",
        json={"note": "customer cancelled"},
        headers=world.auth("agent"),
    )
    assert r.json()["state"] == "withdrawn"
    assert submit_tool(world, proposal_id="prop_tool0000002").status_code == 201


def test_tool_call_expires_after_the_approval_window(world: World) -> None:
    p = submit_tool(world).json()
    world.clock.advance(24 * 3600)
    r = world.approve("alice", p["id"], p["action_hash"])
    assert (r.status_code, code(r)) == (409, "E_EXPIRED")
    assert world.checkpoint.sweep()["expired"] == 1


def test_unused_tool_call_approval_lapses_after_the_execution_window(world: World) -> None:
    record = approved_tool(world)
    world.clock.advance(900)
    assert world.checkpoint.sweep()["lapsed"] == 1
    state = world.client.get(f"/v1/proposals/{record['id']}", headers=world.auth("bob"))
    assert state.json()["state"] == "lapsed"


def test_tool_call_value_round_trips(world: World) -> None:
    record = approved_tool(world)
    assert json.loads(record["action_jcs"]) == tool_call_value()
