"""Reports from gates (gate contract §4): the agent token that submitted a tool call
reports its outcome with a receipt signed by its audience's gate key. A gate key never
verifies a cloud receipt, the executor's key never a tool call's, and a gate's audit head
never moves the executor head."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from airlock.protocol import KeySet
from airlock.reconcile import reconcile
from airlock.settings import CheckpointSettings
from services.checkpoint.errors import ConfigError
from services.checkpoint.gatekeys import GateKeys
from services.executor import ReceiptSigner

from .harness import AUDIENCE, World, approved, audit_events, signed_receipt
from .test_reconcile import _lines
from .test_tool_call_decisions import GATE
from .tools import approved_tool, code

HEAD = {"seq": 7, "hash": "sha256:" + "7" * 64}


def gate_signer(seed: int = 7) -> ReceiptSigner:
    return ReceiptSigner(Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32))


@pytest.fixture
def gated(world: World) -> World:
    world.checkpoint.gate_keys = GateKeys.of(
        {
            GATE: KeySet([gate_signer().trusted_key()]),
            "gate/other": KeySet([gate_signer(8).trusted_key()]),
        }
    )
    return world


def report(world: World, who: str, receipt: dict[str, Any], path: str = "/v1/outcomes") -> Any:
    return world.client.post(path, json={"receipt": receipt}, headers=world.auth(who))


def gate_receipt(record: dict[str, Any], outcome: str = "succeeded", **kw: Any) -> dict[str, Any]:
    kw.setdefault("executor", GATE)
    kw.setdefault("signer", gate_signer())
    kw.setdefault("audit_head", HEAD)
    return signed_receipt(record["approval"]["approval_id"], record["action_hash"], outcome, **kw)


def test_gate_reports_its_tool_calls_outcome(gated: World) -> None:
    record = approved_tool(gated)
    r = report(gated, "agent", gate_receipt(record))
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "executed"
    assert r.json()["outcome"]["receipt_verified"] is True
    event = audit_events(gated, "checkpoint.outcome.reported")[-1]
    assert (event["gate"], event["gate_head"]) == (GATE, HEAD)
    assert "executor_head" not in event


@pytest.mark.parametrize(("outcome", "state"), [("failed", "failed"), ("in_doubt", "in_doubt")])
def test_gate_outcome_moves_the_state_as_for_a_cloud_action(
    gated: World, outcome: str, state: str
) -> None:
    record = approved_tool(gated)
    assert report(gated, "agent", gate_receipt(record, outcome)).json()["state"] == state


def test_gate_head_never_moves_the_executor_head(gated: World) -> None:
    record = approved_tool(gated)
    report(gated, "agent", gate_receipt(record))
    page = gated.client.get("/v1/feed", headers=gated.auth("executor")).json()
    assert page["executor_head"] is None


def test_gate_key_cannot_report_cloud_outcome(gated: World) -> None:
    proposal, approval_id = approved(gated)
    forged = signed_receipt(
        approval_id, proposal["action_hash"], "succeeded", executor=GATE, signer=gate_signer()
    )
    for who in ("agent", "executor"):
        r = report(gated, who, forged)
        assert (r.status_code, code(r)) == (422, "E_RECEIPT"), who
    # Naming the executor's audience does not make a gate key the executor's.
    as_executor = signed_receipt(
        approval_id, proposal["action_hash"], "succeeded", executor=AUDIENCE, signer=gate_signer()
    )
    for who in ("agent", "executor"):
        assert code(report(gated, who, as_executor)) == "E_RECEIPT", who
    shown = gated.client.get(f"/v1/proposals/{proposal['id']}", headers=gated.auth("bob"))
    assert shown.json()["state"] == "approved"


def test_executor_key_cannot_report_tool_call_outcome(gated: World) -> None:
    record = approved_tool(gated)
    for executor in (AUDIENCE, GATE):
        receipt = signed_receipt(
            record["approval"]["approval_id"], record["action_hash"], "succeeded", executor=executor
        )
        for who in ("agent", "executor"):
            r = report(gated, who, receipt)
            assert (r.status_code, code(r)) == (422, "E_RECEIPT"), (executor, who)
    shown = gated.client.get(f"/v1/proposals/{record['id']}", headers=gated.auth("bob"))
    assert shown.json()["state"] == "approved"


def test_another_audiences_gate_key_cannot_report(gated: World) -> None:
    record = approved_tool(gated)
    for executor in (GATE, "gate/other"):
        receipt = gate_receipt(record, executor=executor, signer=gate_signer(8))
        assert code(report(gated, "agent", receipt)) == "E_RECEIPT", executor


def test_another_agent_token_cannot_report_a_gates_outcome(gated: World) -> None:
    gated.tokens["agent2"] = gated.accounts.create_service_token("support-2", "agent")
    record = approved_tool(gated)
    r = report(gated, "agent2", gate_receipt(record))
    assert (r.status_code, code(r)) == (403, "E_FORBIDDEN")


def test_no_gate_keys_refuses_every_gate_report(world: World) -> None:
    record = approved_tool(world)
    assert code(report(world, "agent", gate_receipt(record))) == "E_RECEIPT"


def test_gate_refusal_is_a_note(gated: World) -> None:
    record = approved_tool(gated)
    receipt = gate_receipt(record, "refused", refusal_code="E_EXPIRED", detail="clock behind")
    r = report(gated, "agent", receipt, "/v1/refusals")
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "approved"
    assert r.json()["executor_refusals"][0]["executor"] == GATE
    event = audit_events(gated, "checkpoint.executor_refusal")[-1]
    assert event["gate"] == GATE


def test_gate_key_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "gate-keys.json"
    keys = GateKeys(path)
    assert keys.for_audience(GATE) is None
    path.write_text(json.dumps({GATE: KeySet([gate_signer().trusted_key()]).to_value()}))
    assert keys.for_audience(GATE) is not None
    path.write_text("{not json")
    os.utime(path, ns=(1, 1))
    assert keys.sets() == {}  # fails closed, never half-read


def test_named_gate_key_file_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="gate key set"):
        GateKeys(tmp_path / "absent.json", required=True)


def test_gate_keys_setting_and_its_dev_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    assert CheckpointSettings().gate_keys == Path(".airlock/gate-keys.json")
    monkeypatch.setenv("AIRLOCK_CHECKPOINT_GATE_KEYS", "/etc/airlock/gate-keys.json")
    assert CheckpointSettings().gate_keys == Path("/etc/airlock/gate-keys.json")


def test_gate_report_is_not_held_to_the_executors_chain(gated: World, ledger_url: str) -> None:
    """``airlock audit reconcile`` reads the checkpoint chain against the executor's: a
    gate's outcome names the gate's chain, never a finding against the executor's."""
    record = approved_tool(gated)
    assert report(gated, "agent", gate_receipt(record)).status_code == 200
    outcome = reconcile(_lines(gated.url), _lines(ledger_url))
    assert outcome.ok, outcome.findings
    assert outcome.reported == 0
