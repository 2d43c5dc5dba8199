"""An approver's edit, end to end between the real checkpoint and a real gate: the gate
proposes its call, a person edits it at the checkpoint, and the gate follows the edit and
runs the edited arguments once (docs/gate.md#edits). The function's list of calls is the
judge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airlock.gate import Gate, GateConfig, Pending, Refused, generate_receipt_key

from .harness import World
from .test_tool_call_edit import GATE, edit


def _gate(world: World, tmp_path: Path) -> Gate:
    keys = tmp_path / "checkpoint-keys.json"
    keys.write_bytes(world.client.get("/v1/keys").content)
    receipt_key = tmp_path / "gate-receipt.pem"
    generate_receipt_key(receipt_key)
    config = GateConfig(
        checkpoint_url=str(world.client.base_url),
        token=world.tokens["agent"],
        keys=keys,
        audience=GATE,
        ledger_url=f"sqlite:///{tmp_path / 'gate.db'}",
        receipt_key=receipt_key,
    )
    return Gate(config, http=world.client, now=world.clock)


def _refund(gate: Gate, calls: list[tuple[str, int, str]], **options: Any) -> Any:
    @gate.guard(
        risk="medium",
        target=lambda order, amount, currency: order,
        effect_key=lambda order, amount, currency: f"refund:{order}",
        tool="refund",
        **options,
    )
    def refund(order: str, amount: int, currency: str) -> str:
        calls.append((order, amount, currency))
        return f"refunded {amount} {currency}"

    return refund


def test_a_gate_runs_a_persons_edit_of_its_call_once(world: World, tmp_path: Path) -> None:
    gate = _gate(world, tmp_path)
    calls: list[tuple[str, int, str]] = []
    refund = _refund(gate, calls, editable=True)
    with pytest.raises(Pending) as pending:
        refund("order-881", 12500, "EUR")
    old = world.client.get(
        f"/v1/proposals/{pending.value.proposal_id}", headers=world.auth("alice")
    ).json()
    new = edit(world, "alice", old, {"amount": 1500}, note="shipping only").json()
    assert new["state"] == "approved", new
    assert refund("order-881", 12500, "EUR") == "refunded 1500 EUR"
    assert calls == [("order-881", 1500, "EUR")]
    with pytest.raises(Refused) as again:
        refund("order-881", 12500, "EUR")
    assert again.value.code == "E_REPLAY"
    assert calls == [("order-881", 1500, "EUR")]
    gate.close()


def test_a_gate_that_takes_no_edits_refuses_an_edited_approval(
    world: World, tmp_path: Path
) -> None:
    gate = _gate(world, tmp_path)
    calls: list[tuple[str, int, str]] = []
    refund = _refund(gate, calls)
    with pytest.raises(Pending) as pending:
        refund("order-881", 12500, "EUR")
    old = world.client.get(
        f"/v1/proposals/{pending.value.proposal_id}", headers=world.auth("alice")
    ).json()
    assert edit(world, "alice", old, {"amount": 1500}).json()["state"] == "approved"
    with pytest.raises(Refused) as refused:
        refund("order-881", 12500, "EUR")
    assert refused.value.code == "E_ARGUMENTS"
    assert calls == []
    gate.close()
