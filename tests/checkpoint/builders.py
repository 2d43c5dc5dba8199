"""Builders for checkpoint tests: valid actions with chosen fields."""

from __future__ import annotations

from typing import Any

from airlock.protocol import ProposedAction


def action_value(
    *,
    proposal_id: str = "prop_test0000001",
    operation: str = "stop",
    resource_id: str = "i-t4n0example",
    resource_type: str = "ecs.instance",
    tags: dict[str, str] | None = None,
    account: str = "5123456789012345",
    region: str = "ap-southeast-1",
    proposed_by: str = "agent:scanner-1",
    reason: str = "Idle 14 days: CPU p95 3.40% < 10.00%, network 2.1 MB/day",
) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if resource_type == "ecs.instance" and operation == "stop":
        params = {"stopped_mode": "StopCharging"}
    evidence: dict[str, Any] = {"policy": "idle/v1", "window_days": 14, "cpu_p95_bp": 340}
    if tags is not None:
        evidence["tags"] = tags
    return {
        "type": "airlock.action/v1",
        "proposal_id": proposal_id,
        "provider": "alibaba",
        "account": account,
        "region": region,
        "resource": {"type": resource_type, "id": resource_id},
        "operation": operation,
        "params": params,
        "precondition": {
            "status": "Running" if operation == "stop" else "Stopped",
            "absent_tags": ["airlock:protect"],
            "observed_at": "2026-11-29T06:00:00Z",
        },
        "evidence": evidence,
        "reason": reason,
        "proposed_by": proposed_by,
        "created_at": "2026-11-29T06:00:05Z",
    }


def action(**kwargs: Any) -> ProposedAction:
    return ProposedAction.model_validate(action_value(**kwargs))


def tool_call_value(
    *,
    proposal_id: str = "prop_tool0000001",
    tool: str = "refund",
    arguments: dict[str, Any] | None = None,
    target: str = "order-881",
    effect_key: str = "refund:order-881",
    risk: str = "medium",
    audience: str = "airlock-gate/payments",
    summary: str = "Refund 125.00 EUR on order-881",
    proposed_by: str = "agent:support-bot",
) -> dict[str, Any]:
    """A valid ``airlock.tool-call/v1`` as a gate proposes one."""
    return {
        "type": "airlock.tool-call/v1",
        "proposal_id": proposal_id,
        "tool": tool,
        "arguments": {"order": target, "amount": 12500, "currency": "EUR"}
        if arguments is None
        else arguments,
        "target": target,
        "effect_key": effect_key,
        "premises": {"refunded_total": 0, "order_status": "paid"},
        "risk": risk,
        "summary": summary,
        "audience": audience,
        "proposed_by": proposed_by,
        "created_at": "2026-11-29T06:00:05Z",
    }
