"""A guarded call: proposed, awaited, verified, consumed, premises re-read, called once,
reported with a receipt the gate's key signs — and every refusal with zero calls.

Each test runs on a SQLite and on a PostgreSQL ledger (the ``gate`` fixture), against the
fake checkpoint (tests/gate/support.py). The function's own counter, not the gate's word,
says how often it ran.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from airlock import ledger
from airlock.gate import (
    Change,
    EffectKeyConflict,
    Gate,
    Pending,
    Refused,
    Rejected,
)
from airlock.protocol import ToolCall, canonical_bytes, verify_receipt
from airlock.store import AuditLog, verify_chain

from .support import AUDIENCE, FakeCheckpoint, other_seed


class Refunds:
    """A payments service's refunds: what the guarded function does, counted."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str]] = []
        self.refunded: dict[str, int] = {}

    def guard(self, gate: Gate, **options: Any) -> Any:
        @gate.guard(
            risk="high",
            target=lambda order, amount: order,
            effect_key=lambda order, amount: f"refund:{order}",
            premises=lambda order, amount: {"refunded": self.refunded.get(order, 0)},
            **options,
        )
        def refund(order: str, amount: int, *, idempotency_key: str) -> str:
            self.calls.append((order, amount, idempotency_key))
            self.refunded[order] = self.refunded.get(order, 0) + amount
            return f"re_{order}"

        return refund


def _approved(gate: Gate, fake: FakeCheckpoint, refunds: Refunds, **approval: Any) -> Any:
    """A guarded refund whose proposal for order-881 is pending, then approved."""
    refund = refunds.guard(gate)
    with pytest.raises(Pending) as pending:
        refund("order-881", 12500)
    fake.approve(pending.value.proposal_id, **approval)
    return refund


def _events(gate: Gate, kind: str) -> list[str]:
    with gate.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT event FROM audit_log ORDER BY seq")).scalars()
        return [e for e in rows if f'"type":"{kind}"' in e]


def test_an_approved_call_runs_once_and_returns_its_value(gate: Gate, fake: FakeCheckpoint) -> None:
    refunds = Refunds()
    refund = _approved(gate, fake, refunds)
    assert refund("order-881", 12500) == "re_order-881"
    assert refunds.calls == [("order-881", 12500, "refund:order-881")]
    with gate.engine.connect() as conn:
        (row,) = ledger.of_proposal(conn, fake.only())
    assert (row.state, row.effect_key, row.operation, row.resource_id) == (
        ledger.State.SUCCEEDED,
        "refund:order-881",
        "refund",
        "order-881",
    )
    assert gate.status().states == {"succeeded": 1}
    assert gate.status().undelivered == 0
    assert verify_chain(gate.engine).ok


def test_the_receipt_verifies_against_the_gates_key_and_names_its_audit_head(
    gate: Gate, fake: FakeCheckpoint
) -> None:
    refunds = Refunds()
    _approved(gate, fake, refunds)("order-881", 12500)
    ((path, envelope),) = fake.receipts
    assert path == "/v1/outcomes"
    receipt = verify_receipt(envelope, gate.receipt_keys, int(time.time())).receipt
    assert (receipt.executor, receipt.outcome, receipt.cloud_request_id) == (
        AUDIENCE,
        "succeeded",
        None,
    )
    with gate.engine.connect() as conn:
        head = AuditLog.head(conn)
    assert (receipt.audit_head.seq, receipt.audit_head.hash) == (head.seq, head.row_hash)


def test_calling_again_picks_up_the_same_proposal(gate: Gate, fake: FakeCheckpoint) -> None:
    refund = Refunds().guard(gate)
    with pytest.raises(Pending) as first:
        refund("order-881", 12500)
    with pytest.raises(Pending) as second:
        refund("order-881", 12500)
    assert first.value.proposal_id == second.value.proposal_id == fake.only()
    assert first.value.url.endswith(f"/v1/proposals/{fake.only()}")


def test_a_call_waits_for_the_decision_when_asked(gate: Gate, fake: FakeCheckpoint) -> None:
    refunds = Refunds()
    refund = refunds.guard(gate, wait=30.0)
    fake.auto_approve = True
    assert refund("order-881", 12500) == "re_order-881"
    assert len(refunds.calls) == 1


def test_a_replayed_approval_is_refused_with_zero_calls(gate: Gate, fake: FakeCheckpoint) -> None:
    refunds = Refunds()
    refund = _approved(gate, fake, refunds)
    refund("order-881", 12500)
    with pytest.raises(Refused) as refused:
        refund("order-881", 12500)
    assert refused.value.code == "E_REPLAY"
    assert len(refunds.calls) == 1
    assert any('"code":"E_REPLAY"' in e for e in _events(gate, "executor.refused"))


def test_moved_premises_are_refused_with_what_changed(gate: Gate, fake: FakeCheckpoint) -> None:
    refunds = Refunds()
    refund = _approved(gate, fake, refunds)
    refunds.refunded["order-881"] = 500  # a refund by hand, after the approval
    with pytest.raises(Refused) as refused:
        refund("order-881", 12500)
    assert refused.value.code == "E_PREMISES"
    assert refused.value.changes == (Change("refunded", 0, 500),)
    assert refunds.calls == []
    with gate.engine.connect() as conn:
        (row,) = ledger.of_proposal(conn, fake.only())
    assert (row.state, row.refusal_code) == (ledger.State.REFUSED, "E_PREMISES")
    ((_, envelope),) = fake.receipts
    receipt = verify_receipt(envelope, gate.receipt_keys, int(time.time())).receipt
    assert (receipt.outcome, receipt.refusal_code) == ("refused", "E_PREMISES")


def test_an_approval_for_another_audience_is_refused(gate: Gate, fake: FakeCheckpoint) -> None:
    refunds = Refunds()
    refund = _approved(gate, fake, refunds, audience="airlock-gate/elsewhere")
    with pytest.raises(Refused) as refused:
        refund("order-881", 12500)
    assert refused.value.code == "E_AUDIENCE"
    assert refunds.calls == []
    assert gate.status().states == {}
    assert any('"code":"E_AUDIENCE"' in e for e in _events(gate, "executor.refused"))
    assert [path for path, _ in fake.receipts] == ["/v1/refusals"]


def test_tampered_arguments_are_refused(gate: Gate, fake: FakeCheckpoint) -> None:
    """The checkpoint serves other bytes than the ones approved: the hash says so."""
    refunds = Refunds()
    refund = refunds.guard(gate)
    with pytest.raises(Pending):
        refund("order-881", 12500)
    text = fake.proposals[fake.only()].jcs.replace("12500", "99999")
    fake.approve(fake.only(), action_jcs=text)
    with pytest.raises(Refused) as refused:
        refund("order-881", 12500)
    assert refused.value.code == "E_ACTION_HASH"
    assert refunds.calls == []


def test_an_approval_of_other_arguments_is_refused(gate: Gate, fake: FakeCheckpoint) -> None:
    """A validly signed approval of another call under this effect key runs nothing."""
    refunds = Refunds()
    refund = refunds.guard(gate)
    with pytest.raises(Pending):
        refund("order-881", 12500)
    value = ToolCall.from_json_bytes(fake.proposals[fake.only()].jcs.encode()).model_dump(
        mode="json"
    )
    value["arguments"]["amount"] = 99999
    other = ToolCall.model_validate(value)
    fake.approve(
        fake.only(),
        action_jcs=other.canonical_bytes().decode(),
        action_hash=other.action_hash(),
    )
    with pytest.raises(Refused) as refused:
        refund("order-881", 12500)
    assert refused.value.code == "E_ARGUMENTS"
    assert refunds.calls == []


def test_an_expired_approval_is_refused(gate: Gate, fake: FakeCheckpoint) -> None:
    refunds = Refunds()
    refund = _approved(gate, fake, refunds, now=int(time.time()) - 2000)
    with pytest.raises(Refused) as refused:
        refund("order-881", 12500)
    assert refused.value.code == "E_EXPIRED"
    assert refunds.calls == []


def test_an_approval_signed_by_an_untrusted_key_is_refused(
    gate: Gate, fake: FakeCheckpoint
) -> None:
    refunds = Refunds()
    refund = _approved(gate, fake, refunds, seed=other_seed())
    with pytest.raises(Refused) as refused:
        refund("order-881", 12500)
    assert refused.value.code == "E_UNKNOWN_KEY"
    assert refunds.calls == []


def test_a_revoked_approval_is_refused(gate: Gate, fake: FakeCheckpoint) -> None:
    refunds = Refunds()
    refund = _approved(gate, fake, refunds)
    record = fake.proposals[fake.only()]
    assert record.approval is not None
    record.approval["revoked_at"] = int(time.time())
    with pytest.raises(Refused) as refused:
        refund("order-881", 12500)
    assert refused.value.code == "E_REVOKED"
    assert refunds.calls == []


def test_a_rejection_carries_its_reason_and_note(gate: Gate, fake: FakeCheckpoint) -> None:
    refunds = Refunds()
    refund = refunds.guard(gate)
    with pytest.raises(Pending):
        refund("order-881", 12500)
    fake.reject(fake.only(), "needs_more_info", "which ticket?", "alice")
    with pytest.raises(Rejected) as rejected:
        refund("order-881", 12500)
    assert (rejected.value.reason_code, rejected.value.note, rejected.value.by) == (
        "needs_more_info",
        "which ticket?",
        "alice",
    )
    assert refunds.calls == []


def test_a_withdrawn_proposal_is_refused(gate: Gate, fake: FakeCheckpoint) -> None:
    refund = Refunds().guard(gate)
    with pytest.raises(Pending):
        refund("order-881", 12500)
    fake.set_state(fake.only(), "withdrawn")
    with pytest.raises(Refused) as refused:
        refund("order-881", 12500)
    assert refused.value.code == "E_WITHDRAWN"
    assert any('"code":"E_WITHDRAWN"' in e for e in _events(gate, "executor.refused"))


def test_a_float_argument_is_a_type_error_before_anything_is_sent(
    gate: Gate, fake: FakeCheckpoint
) -> None:
    refund = Refunds().guard(gate)
    with pytest.raises(TypeError, match="float"):
        refund("order-881", 125.0)
    assert fake.requests == []


def test_another_call_under_the_same_effect_key_conflicts(gate: Gate, fake: FakeCheckpoint) -> None:
    refunds = Refunds()
    refund = refunds.guard(gate)
    with pytest.raises(Pending):
        refund("order-881", 12500)
    with pytest.raises(EffectKeyConflict):
        refund("order-881", 99999)
    assert len(fake.proposals) == 1


def test_an_async_function_runs_once(gate: Gate, fake: FakeCheckpoint) -> None:
    calls: list[str] = []
    fake.auto_approve = True

    @gate.guard(risk="low", target="mailbox", effect_key=lambda to: f"mail:{to}", wait=10.0)
    async def send_mail(to: str, *, idempotency_key: str) -> str:
        await asyncio.sleep(0)
        calls.append(idempotency_key)
        return "sent"

    assert asyncio.run(send_mail("ana@example.com")) == "sent"
    with pytest.raises(Refused) as refused:
        asyncio.run(send_mail("ana@example.com"))
    assert refused.value.code == "E_REPLAY"
    assert calls == ["mail:ana@example.com"]


def test_a_function_that_raises_is_failed_without_a_lookup(
    gate: Gate, fake: FakeCheckpoint
) -> None:
    fake.auto_approve = True

    @gate.guard(risk="low", target="x", effect_key="boom:1", wait=10.0)
    def boom() -> None:
        raise ConnectionError("the payments API hung up")

    with pytest.raises(ConnectionError):
        boom()
    assert gate.status().states == {"failed": 1}


def test_a_function_that_raises_is_settled_by_its_lookup(gate: Gate, fake: FakeCheckpoint) -> None:
    fake.auto_approve = True
    done: set[str] = set()

    @gate.guard(
        risk="low", target="x", effect_key="charge:1", wait=10.0, lookup=lambda k: k in done
    )
    def charge(*, idempotency_key: str) -> None:
        done.add(idempotency_key)
        raise TimeoutError("the answer was lost, the charge was made")

    with pytest.raises(TimeoutError):
        charge()
    assert gate.status().states == {"succeeded": 1}


def test_the_ledger_row_is_the_one_the_bytes_name(gate: Gate, fake: FakeCheckpoint) -> None:
    refunds = Refunds()
    _approved(gate, fake, refunds)("order-881", 12500)
    with gate.engine.connect() as conn:
        (row,) = ledger.of_proposal(conn, fake.only())
    call = ToolCall.from_json_bytes(row.action)
    assert canonical_bytes(call.arguments) == canonical_bytes(
        {"order": "order-881", "amount": 12500}
    )


def test_a_receipt_the_checkpoint_could_not_take_stays_queued_until_delivered(
    gate: Gate, fake: FakeCheckpoint
) -> None:
    refunds = Refunds()
    refund = _approved(gate, fake, refunds)
    down = fake.handle
    fake.handle = lambda method, path, auth, body: (  # type: ignore[method-assign]
        (503, {"error": {"code": "E_DOWN", "message": "down"}})
        if path == "/v1/outcomes"
        else down(method, path, auth, body)
    )
    assert refund("order-881", 12500) == "re_order-881"
    assert gate.status().undelivered == 1
    fake.handle = down  # type: ignore[method-assign]
    assert gate.deliver() == 1
    assert gate.status().undelivered == 0
    assert [path for path, _ in fake.receipts] == ["/v1/outcomes"]


def test_airlock_receipts_verify_verifies_a_gates_receipt(
    gate: Gate, fake: FakeCheckpoint, tmp_path: Path
) -> None:
    """An auditor holding the gate's public key set checks its receipt with the CLI."""
    from typer.testing import CliRunner

    from airlock.cli import app

    _approved(gate, fake, Refunds())("order-881", 12500)
    ((_, envelope),) = fake.receipts
    receipt = tmp_path / "receipt.json"
    receipt.write_bytes(canonical_bytes(envelope))
    keys = tmp_path / "gate-receipt-keys.json"
    keys.write_bytes(canonical_bytes(gate.receipt_keys.to_value()))
    result = CliRunner().invoke(app, ["receipts", "verify", str(receipt), "--keys", str(keys)])
    assert result.exit_code == 0 and "OK: succeeded" in result.output, result.output


def test_a_tool_guarded_twice_on_one_gate_is_refused(gate: Gate) -> None:
    Refunds().guard(gate)
    with pytest.raises(ValueError, match="guarded twice"):
        Refunds().guard(gate)


def test_a_second_approval_of_a_used_effect_is_refused(gate: Gate, fake: FakeCheckpoint) -> None:
    """Another approval (another id and nonce) of an effect already run runs nothing."""
    refunds = Refunds()
    refund = _approved(gate, fake, refunds)
    refund("order-881", 12500)
    fake.approve(fake.only())  # the checkpoint signs the same call again
    with pytest.raises(Refused) as refused:
        refund("order-881", 12500)
    assert refused.value.code == "E_REPLAY"
    assert len(refunds.calls) == 1


def test_a_new_call_never_reads_an_id_the_checkpoint_does_not_know(
    gate: Gate, fake: FakeCheckpoint
) -> None:
    # A read of an unknown id is a refusal at the checkpoint, charged to the token's rate
    # limit: a gate proposing many new effects must not be throttled for it.
    @gate.guard(risk="low", target=lambda order: order, effect_key=lambda order: f"k:{order}")
    def touch(order: str) -> str:
        return order

    for n in range(3):
        with pytest.raises(Pending):
            touch(f"order-{n}")
    assert [m for m, _ in fake.requests] == ["POST"] * 3
