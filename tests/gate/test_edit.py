"""A person's edit of a guarded call: a new proposal supersedes the one the gate made;
the gate follows it, and runs the edited arguments only when the guard takes edits and
the edit keeps the call's tool, target and effect key.

Against the fake checkpoint (tests/gate/support.py), on SQLite and PostgreSQL ledgers
(the ``gate`` fixture). The function's own list of calls is the judge.
"""

from __future__ import annotations

from typing import Any

import pytest

from airlock import ledger
from airlock.gate import Gate, Pending, Refused, Rejected
from airlock.protocol import ToolCall

from .support import FakeCheckpoint


class Refunds:
    """A refunds service whose guarded function records every call it receives."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def guard(self, gate: Gate, **options: Any) -> Any:
        @gate.guard(
            risk="high",
            target=lambda order, amount: order,
            effect_key=lambda order, amount: f"refund:{order}",
            premises=lambda order, amount: {"refunded": 0},
            **options,
        )
        def refund(order: str, amount: int) -> str:
            self.calls.append((order, amount))
            return f"refunded {amount} on {order}"

        return refund


def _pending(refund: Any) -> str:
    with pytest.raises(Pending) as pending:
        refund("order-881", 2500)
    return pending.value.proposal_id


def test_an_edited_call_runs_once_with_the_edited_arguments(
    gate: Gate, fake: FakeCheckpoint
) -> None:
    refunds = Refunds()
    refund = refunds.guard(gate, editable=True)
    first = _pending(refund)
    edited = fake.edit(first, amount=1500)
    # Waiting again follows the edit: the pending proposal is the new one.
    assert _pending(refund) == edited
    fake.approve(edited)
    assert refund("order-881", 2500) == "refunded 1500 on order-881"
    assert refunds.calls == [("order-881", 1500)]
    with gate.engine.connect() as conn:
        assert ledger.of_proposal(conn, first) == []
        (row,) = ledger.of_proposal(conn, edited)
    assert (row.state, row.effect_key) == (ledger.State.SUCCEEDED, "refund:order-881")
    # The same call again is a replay of the used effect: nothing runs twice.
    with pytest.raises(Refused) as again:
        refund("order-881", 2500)
    assert again.value.code == "E_REPLAY"
    assert refunds.calls == [("order-881", 1500)]


def test_two_edits_in_a_row_are_followed_to_the_last(gate: Gate, fake: FakeCheckpoint) -> None:
    refunds = Refunds()
    refund = refunds.guard(gate, editable=True)
    last = fake.edit(fake.edit(_pending(refund), amount=2000), amount=1000)
    fake.approve(last)
    refund("order-881", 2500)
    assert refunds.calls == [("order-881", 1000)]


def test_an_edit_is_refused_by_a_guard_that_takes_none(gate: Gate, fake: FakeCheckpoint) -> None:
    refunds = Refunds()
    refund = refunds.guard(gate)
    fake.approve(fake.edit(_pending(refund), amount=1500))
    with pytest.raises(Refused) as refused:
        refund("order-881", 2500)
    assert refused.value.code == "E_ARGUMENTS"
    assert "takes no edits" in refused.value.detail
    assert refunds.calls == []


def test_an_edit_that_moves_the_effect_key_is_refused(gate: Gate, fake: FakeCheckpoint) -> None:
    refunds = Refunds()
    refund = refunds.guard(gate, editable=True)
    # The checkpoint keeps effect_key and target; the edited order would name another.
    fake.approve(fake.edit(_pending(refund), order="order-999"))
    with pytest.raises(Refused) as refused:
        refund("order-881", 2500)
    assert refused.value.code == "E_ARGUMENTS"
    assert "target" in refused.value.detail or "effect key" in refused.value.detail
    assert refunds.calls == []


def test_an_edit_the_function_cannot_take_is_refused(gate: Gate, fake: FakeCheckpoint) -> None:
    refunds = Refunds()
    refund = refunds.guard(gate, editable=True)
    fake.approve(fake.edit(_pending(refund), note="a key the function has no parameter for"))
    with pytest.raises(Refused) as refused:
        refund("order-881", 2500)
    assert refused.value.code == "E_ARGUMENTS"
    assert refunds.calls == []


def test_other_arguments_approved_at_the_calls_own_id_are_refused_even_when_editable(
    gate: Gate, fake: FakeCheckpoint
) -> None:
    # Only a superseding proposal is an edit: a checkpoint that signs other arguments
    # under the call's own proposal id gets nothing run.
    refunds = Refunds()
    refund = refunds.guard(gate, editable=True)
    pid = _pending(refund)
    record = fake.proposals[pid]
    value = record.call.model_dump(mode="json")
    value["arguments"]["amount"] = 1
    other = ToolCall.model_validate(value)
    record.call = other
    fake.approve(pid, action_jcs=other.canonical_bytes().decode())
    with pytest.raises(Refused) as refused:
        refund("order-881", 2500)
    assert refused.value.code == "E_ARGUMENTS"
    assert refunds.calls == []


def test_an_edited_then_rejected_call_is_rejected(gate: Gate, fake: FakeCheckpoint) -> None:
    refunds = Refunds()
    refund = refunds.guard(gate, editable=True)
    edited = fake.edit(_pending(refund), amount=1500)
    fake.reject(edited, "too_much", "ask the customer", "bob")
    with pytest.raises(Rejected) as rejected:
        refund("order-881", 2500)
    assert (rejected.value.proposal_id, rejected.value.by) == (edited, "bob")
    assert refunds.calls == []
