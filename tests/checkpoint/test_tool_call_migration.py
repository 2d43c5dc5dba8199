"""Migration 0008 upgrades a checkpoint that already holds proposals: cloud rows read as
cloud actions, their rejections keep their reasons, and the slot rules hold after it."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from airlock.store import make_engine, upgrade
from services.checkpoint.app import MIGRATIONS

_ROW = {
    "action": b"{}",
    "action_hash": "sha256:" + "0" * 64,
    "provider": "alibaba",
    "account": "5123456789012345",
    "region": "ap-southeast-1",
    "resource_type": "ecs.instance",
    "resource_id": "i-t4n0example",
    "operation": "stop",
    "proposed_by": "agent:scanner-1",
    "submitted_by": "scanner-1",
    "risk": "medium",
    "rule": "stop-one-person",
    "effect": "approve",
    "quorum": 1,
    "confirm": False,
    "policy_hash": "sha256:" + "0" * 64,
    "approval_deadline": 2,
    "created_at": 1,
    "updated_at": 1,
}
_INSERT = sa.text(
    "INSERT INTO proposals (id, state, "
    + ", ".join(_ROW)
    + ") VALUES (:id, :state, "
    + ", ".join(f":{k}" for k in _ROW)
    + ")"
)


def test_upgrade_from_0007_keeps_rows_and_the_slot_rules(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        upgrade(engine, MIGRATIONS, revision="0007")
        with engine.begin() as conn:
            conn.execute(_INSERT, {"id": "prop_old00000001", "state": "rejected", **_ROW})
            conn.execute(
                sa.text(
                    "INSERT INTO rejections (proposal_id, reason_code, note, by, at) "
                    "VALUES ('prop_old00000001', 'not_idle', 'busy', 'bob', 1)"
                )
            )
            conn.execute(_INSERT, {"id": "prop_old00000002", "state": "pending", **_ROW})
        upgrade(engine, MIGRATIONS)
        with engine.begin() as conn:
            kinds = conn.execute(
                sa.text("SELECT action_type, effect_key FROM proposals ORDER BY id")
            ).all()
            assert [tuple(k) for k in kinds] == [("airlock.action/v1", None)] * 2
            reason = conn.execute(sa.text("SELECT reason_code FROM rejections")).scalar_one()
            assert reason == "not_idle"
        # The open cloud slot is still held: a second open proposal for it is refused.
        with pytest.raises(IntegrityError), engine.begin() as conn:
            conn.execute(_INSERT, {"id": "prop_old00000003", "state": "pending", **_ROW})
    finally:
        engine.dispose()
