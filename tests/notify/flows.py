"""Drive a checkpoint through every notification kind (for the tests of what they carry)."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from services.checkpoint.models import notify_deliveries, notify_events
from tests.checkpoint.harness import World, approved, signed_receipt

from .support import ROUTED_TAGS, SLA_S


def report(
    world: World, proposal: dict[str, Any], approval_id: str, outcome: str, **kw: Any
) -> Any:
    receipt = signed_receipt(approval_id, proposal["action_hash"], outcome, **kw)
    response = world.client.post(
        "/v1/outcomes", json={"receipt": receipt}, headers=world.auth("executor")
    )
    assert response.status_code == 200, response.text
    return response.json()


def every_event(world: World) -> None:
    """One proposal per kind: needs_vote, escalated (rejected after), approved,
    executed, failed, refused, in_doubt, approval.lapsed, proposal.expiring and
    proposal.expired. The world's policy is ``support.routed_policy``'s."""
    routed = world.submit(
        proposal_id="prop_notify0000007", resource_id="i-notify7", tags=ROUTED_TAGS
    )
    assert routed.status_code == 201, routed.text
    world.clock.advance(SLA_S)
    assert world.checkpoint.sweep()["escalated"] == 1
    rejected = world.client.post(
        "/v1/proposals/prop_notify0000007/reject",
        json={"reason_code": "not_idle", "note": ""},
        headers=world.auth("carol"),
    )
    assert rejected.status_code == 200, rejected.text
    outcomes = {"succeeded": "1", "failed": "2", "refused": "3", "in_doubt": "4"}
    for outcome, n in outcomes.items():
        proposal, approval_id = approved(
            world, proposal_id=f"prop_notify000000{n}", resource_id=f"i-notify{n}"
        )
        extra = {"refusal_code": "E_PRECONDITION"} if outcome == "refused" else {}
        report(world, proposal, approval_id, outcome, **extra)
    approved(world, proposal_id="prop_notify0000005", resource_id="i-notify5")
    waiting = world.submit(proposal_id="prop_notify0000006", resource_id="i-notify6")
    assert waiting.status_code == 201, waiting.text
    world.clock.advance(901)  # past the approval's execution window
    assert world.checkpoint.sweep()["lapsed"] == 1
    world.clock.advance(24 * 3600 - 901 - 1200)  # 20 minutes before the window ends
    world.checkpoint.sweep()
    world.clock.advance(1200)
    assert world.checkpoint.sweep()["expired"] == 1


def kinds(world: World) -> list[str]:
    with world.checkpoint.engine.connect() as conn:
        return sorted(str(k) for k in conn.execute(sa.select(notify_events.c.kind)).scalars())


def delivery_states(world: World) -> dict[str, int]:
    with world.checkpoint.engine.connect() as conn:
        rows = conn.execute(
            sa.select(notify_deliveries.c.state, sa.func.count()).group_by(
                notify_deliveries.c.state
            )
        ).all()
    return {str(state): int(n) for state, n in rows}


def bodies(world: World) -> list[dict[str, Any]]:
    with world.checkpoint.engine.connect() as conn:
        return [json.loads(b) for b in conn.execute(sa.select(notify_events.c.body)).scalars()]
