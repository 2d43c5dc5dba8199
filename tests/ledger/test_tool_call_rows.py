"""A tool call's ledger row: the same table, states, lease and triggers as a cloud action's.

docs/protocol.md#ledger: ``resource_type`` is ``tool-call``, ``resource_id`` the target,
``operation`` the tool (up to 64 characters, migration 0010) and ``region`` empty. Run on
SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from airlock import ledger
from airlock.protocol import verify_bundle
from airlock.store import make_engine
from devstack import factory

NOW = factory.NOW
LONGEST_TOOL = "t" * 64


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    engine = make_engine(db_url)
    ledger.migrate(engine)
    yield engine
    engine.dispose()


def _claimed(tool: str = "refund", **statement: Any) -> tuple[dict[str, Any], str]:
    call = factory.tool_call_value(tool=tool)
    raw = factory.tool_bundle_for(call, factory.tool_statement_value(call, **statement))
    verified = verify_bundle(raw, factory.keyset(), factory.TOOL_BINDING, NOW)
    st = verified.statement
    row = {
        "approval_id": st.approval_id,
        "nonce": st.nonce,
        "action_hash": verified.action_hash,
        **ledger.target_columns(verified),
        "action": verified.action_bytes,
        "bundle": raw,
        "keyid": verified.keyid,
        "expires_at": st.expires_at,
        "state": ledger.State.CLAIMED.value,
        "lease_owner": "gate-1",
        "lease_epoch": 1,
        "lease_expires": NOW + 60,
        "claimed_at": NOW,
        "updated_at": NOW,
        "refusal_code": None,
        "cloud_request_id": None,
        "verified": False,
        "detail": "",
        "receipt": None,
        "effect_key": verified.statement.effect_key,
    }
    return row, st.approval_id


def test_a_tool_call_row_reads_as_tool_and_target(engine: Engine) -> None:
    row, approval_id = _claimed(tool=LONGEST_TOOL)
    with engine.begin() as conn:
        assert ledger.consume(conn, row, now=NOW)
        stored = ledger.get(conn, approval_id)
    assert stored is not None
    assert (stored.resource_type, stored.resource_id, stored.operation, stored.region) == (
        "tool-call",
        "order-881",
        LONGEST_TOOL,
        "",
    )


def test_a_replayed_tool_call_approval_is_not_consumed_twice(engine: Engine) -> None:
    row, _ = _claimed()
    with engine.begin() as conn:
        assert ledger.consume(conn, row, now=NOW)
    with engine.begin() as conn:
        assert not ledger.consume(conn, row, now=NOW)
        count = conn.execute(sa.select(sa.func.count()).select_from(ledger.ledger)).scalar()
    assert count == 1


def test_a_tool_call_row_moves_through_the_same_states_under_its_lease(engine: Engine) -> None:
    row, approval_id = _claimed()
    with engine.begin() as conn:
        assert ledger.consume(conn, row, now=NOW)
    with engine.begin() as conn:
        moved = ledger.begin_executing(
            conn, approval_id=approval_id, owner="gate-1", epoch=1, now=NOW, lease_expires=NOW + 60
        )
        assert moved is None
    with engine.begin() as conn, pytest.raises(ledger.Fenced):
        ledger.transition(
            conn,
            approval_id=approval_id,
            owner="gate-2",
            epoch=1,
            from_state=ledger.State.EXECUTING,
            to_state=ledger.State.SUCCEEDED,
            now=NOW,
        )
    with engine.begin() as conn:
        ledger.transition(
            conn,
            approval_id=approval_id,
            owner="gate-1",
            epoch=1,
            from_state=ledger.State.EXECUTING,
            to_state=ledger.State.SUCCEEDED,
            now=NOW,
        )
        stored = ledger.get(conn, approval_id)
    assert stored is not None and stored.state is ledger.State.SUCCEEDED


def test_a_tool_call_row_cannot_be_retargeted_to_another_tool(engine: Engine) -> None:
    row, approval_id = _claimed()
    with engine.begin() as conn:
        assert ledger.consume(conn, row, now=NOW)
    with pytest.raises(DBAPIError, match="identity columns are immutable"), engine.begin() as conn:
        conn.execute(
            sa.update(ledger.ledger)
            .where(ledger.ledger.c.approval_id == approval_id)
            .values(operation="refund_all")
        )


def test_target_columns_of_a_cloud_approval_are_its_resource_and_operation() -> None:
    raw = factory.bundle_for()
    verified = verify_bundle(raw, factory.keyset(), factory.BINDING, NOW)
    assert ledger.target_columns(verified) == {
        "proposal_id": "prop_4f1c2a9e7b3d5a60",
        "resource_type": "ecs.instance",
        "resource_id": "i-t4n0example",
        "region": "ap-southeast-1",
        "operation": "stop",
    }


def test_a_second_approval_of_the_same_effect_is_not_consumed(engine: Engine) -> None:
    """Migration 0011: the effect key is UNIQUE, whichever approval carries it."""
    row, _ = _claimed()
    other, other_id = _claimed(
        approval_id="apv_0f0e0d0c0b0a0908", nonce="ffeeddccbbaa99887766554433221100"
    )
    other.update(action_hash="sha256:" + "ab" * 32)  # another proposal's bytes, same effect
    with engine.begin() as conn:
        assert ledger.consume(conn, row, now=NOW)
    with engine.begin() as conn:
        assert not ledger.consume(conn, other, now=NOW)
        assert ledger.get(conn, other_id) is None


def test_a_rows_effect_key_never_changes(engine: Engine) -> None:
    row, approval_id = _claimed()
    with engine.begin() as conn:
        assert ledger.consume(conn, row, now=NOW)
    with pytest.raises(DBAPIError), engine.begin() as conn:
        conn.execute(
            sa.update(ledger.ledger)
            .where(ledger.ledger.c.approval_id == approval_id)
            .values(effect_key="refund:order-999")
        )


def test_a_fenced_transition_queues_no_receipt(engine: Engine) -> None:
    # The move and the receipt's place in the outbox are one statement on PostgreSQL: a
    # worker whose lease was taken over must queue nothing, even before its rollback.
    row, approval_id = _claimed()
    row["state"] = ledger.State.EXECUTING.value
    with engine.begin() as conn:
        assert ledger.consume(conn, row, now=NOW)
    queued = sa.select(ledger.outbox.c.kind, ledger.outbox.c.queued_at).where(
        ledger.outbox.c.approval_id == approval_id
    )
    move = {
        "approval_id": approval_id,
        "epoch": 1,
        "from_state": ledger.State.EXECUTING,
        "to_state": ledger.State.SUCCEEDED,
        "now": NOW + 5,
        "queue": True,
    }
    with engine.begin() as conn:
        with pytest.raises(ledger.Fenced):
            ledger.transition(conn, owner="gate-2", **move)
        assert conn.execute(queued).all() == []
    with engine.begin() as conn:
        ledger.transition(conn, owner="gate-1", **move)
    with engine.begin() as conn:
        assert [tuple(r) for r in conn.execute(queued)] == [("outcome", NOW + 5)]
        stored = ledger.get(conn, approval_id)
    assert stored is not None and stored.state is ledger.State.SUCCEEDED
