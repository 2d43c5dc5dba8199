"""Deterministic builders for actions, statements and bundles.

Used by the vector generator (``eval/make_vectors.py``), the protocol tests, the
benchmarks and the attack suite.
Everything is derived from fixed inputs (RFC 8032 seeds, fixed times), so two runs give
the same bytes. Never use these seeds for anything but tests and vectors.
"""

from __future__ import annotations

import copy
from typing import Any, Final

from airlock.protocol import (
    APPROVAL_PAYLOAD_TYPE,
    ApprovalStatement,
    Binding,
    Envelope,
    KeySet,
    ProposedAction,
    ToolApprovalStatement,
    ToolBinding,
    ToolCall,
    action_hash,
    canonical_bytes,
    make_bundle,
)
from services.checkpoint.signer import Signer

__all__ = [
    "AUDIENCE",
    "BINDING",
    "NOW",
    "RFC8032_SEEDS",
    "action_value",
    "bundle_for",
    "keyset",
    "signer",
    "statement_value",
]
__all__ += [
    "AWS_ACCOUNT",
    "AWS_AUDIENCE",
    "AWS_BINDING",
    "AWS_REGION",
    "aws_action_value",
]
__all__ += [
    "GATE_AUDIENCE",
    "TOOL_BINDING",
    "sign_tool_value",
    "tool_bundle_for",
    "tool_call_value",
    "tool_statement_value",
]

#: RFC 8032 §7.1, TEST 1 / TEST 2 / TEST 3 secret keys (public test vectors).
RFC8032_SEEDS: Final = {
    "rfc8032-test1": "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
    "rfc8032-test2": "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
    "rfc8032-test3": "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
}

AUDIENCE: Final = "airlock-executor/prod-ap-southeast-1"
ACCOUNT: Final = "5123456789012345"
REGION: Final = "ap-southeast-1"
#: 2025-11-29T07:06:40Z: a fixed "now" inside every default statement's window.
NOW: Final = 1764400000 + 100
BINDING: Final = Binding(AUDIENCE, "alibaba", ACCOUNT, REGION)
#: The AWS executor of the AWS vectors and tests: a 12-digit account, an AWS region.
AWS_AUDIENCE: Final = "airlock-executor/prod-us-east-1"
AWS_ACCOUNT: Final = "123456789012"
AWS_REGION: Final = "us-east-1"
AWS_BINDING: Final = Binding(AWS_AUDIENCE, "aws", AWS_ACCOUNT, AWS_REGION)
#: The gate of the payments service in the tool-call vectors.
GATE_AUDIENCE: Final = "airlock-gate/payments-prod"
TOOL_BINDING: Final = ToolBinding(GATE_AUDIENCE)


def signer(name: str = "rfc8032-test1") -> Signer:
    return Signer.from_seed(bytes.fromhex(RFC8032_SEEDS[name]))


def keyset(*names: str) -> KeySet:
    return KeySet([signer(n).trusted_key() for n in (names or ("rfc8032-test1",))])


def action_value(**overrides: Any) -> dict[str, Any]:
    """A realistic ~1 KiB ECS stop action, as a plain JSON value."""
    value: dict[str, Any] = {
        "type": "airlock.action/v1",
        "proposal_id": "prop_4f1c2a9e7b3d5a60",
        "provider": "alibaba",
        "account": ACCOUNT,
        "region": REGION,
        "resource": {"type": "ecs.instance", "id": "i-t4n0example"},
        "operation": "stop",
        "params": {"stopped_mode": "StopCharging"},
        "precondition": {
            "status": "Running",
            "absent_tags": ["airlock:protect"],
            "observed_at": "2025-11-29T06:00:00Z",
        },
        "evidence": {
            "policy": "idle/v1",
            "window_days": 14,
            "samples": 336,
            "cpu_avg_bp": 120,
            "cpu_p95_bp": 340,
            "net_bytes_per_day": 2100000,
            "daily_cpu_p95_bp": [
                310,
                322,
                340,
                298,
                301,
                333,
                340,
                329,
                317,
                305,
                300,
                311,
                338,
                326,
            ],
            "daily_net_bytes": [2100000] * 14,
            "tags": {"team": "data", "owner": "ana"},
        },
        "reason": "Idle 14 days: CPU p95 3.40% < 10.00%, network 2.1 MB/day",
        "proposed_by": "agent:scanner-1",
        "created_at": "2025-11-29T06:00:05Z",
    }
    value.update(copy.deepcopy(overrides))
    return value


def aws_action_value(**overrides: Any) -> dict[str, Any]:
    """:func:`action_value` for an EC2 stop at AWS (no params: hibernate is always off)."""
    value = action_value(
        provider="aws",
        account=AWS_ACCOUNT,
        region=AWS_REGION,
        resource={"type": "ec2.instance", "id": "i-0abc1234def567890"},
        params={},
    )
    value["evidence"]["policy"] = "idle-aws/v1"
    value["reason"] = "Idle 14 days: CPU p95 3.40% < 10.00%, network 2.1 MB/day (EC2)"
    value.update(copy.deepcopy(overrides))
    return value


def statement_value(action: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """An approval statement for ``action`` valid at :data:`NOW` for :data:`BINDING`."""
    parsed = ProposedAction.model_validate(action)
    value: dict[str, Any] = {
        "type": "airlock.approval/v1",
        "approval_id": "apv_8c7e1f0a2b3c4d5e",
        "proposal_id": parsed.proposal_id,
        "action_hash": action_hash(parsed.canonical_bytes()),
        "provider": parsed.provider,
        "account": parsed.account,
        "region": parsed.region,
        "resource": parsed.resource.model_dump(mode="json"),
        "operation": parsed.operation,
        "audience": AUDIENCE,
        "nonce": "3f2a9c1d8e7b6a5f4e3d2c1b0a998877",
        "issued_at": 1764400000,
        "not_before": 1764400000,
        "expires_at": 1764400900,
        "approvers": [{"id": "alice", "at": 1764399950}],
        "quorum": 1,
        "policy": {"rule": "stop-default", "hash": "sha256:" + "5e" * 32},
        "risk": "medium",
    }
    value.update(copy.deepcopy(overrides))
    return value


def sign_value(statement: dict[str, Any], key: str = "rfc8032-test1") -> Envelope:
    """Sign an arbitrary statement value (validated first: the signer signs models only)."""
    return signer(key).sign_statement(ApprovalStatement.model_validate(statement))


def bundle_for(
    action: dict[str, Any] | None = None,
    statement: dict[str, Any] | None = None,
    *,
    key: str = "rfc8032-test1",
    action_bytes: bytes | None = None,
) -> bytes:
    """A bundle over ``action`` (or raw ``action_bytes``) approved by ``statement``."""
    action = action if action is not None else action_value()
    if action_bytes is None:
        action_bytes = canonical_bytes(action)
    statement = statement if statement is not None else statement_value(action)
    return make_bundle(action_bytes, sign_value(statement, key))


def tool_call_value(**overrides: Any) -> dict[str, Any]:
    """A refund of 125.00 EUR (12500 minor units) on order 881, as a plain JSON value."""
    value: dict[str, Any] = {
        "type": "airlock.tool-call/v1",
        "proposal_id": "prop_7a1d3e5c9b2f4a60",
        "tool": "refund",
        "arguments": {"order": "order-881", "amount": 12500, "currency": "EUR"},
        "target": "order-881",
        "effect_key": "refund:order-881",
        "premises": {"refunded_total": 0, "order_status": "paid"},
        "risk": "high",
        "summary": "Refund 125.00 EUR on order-881",
        "audience": GATE_AUDIENCE,
        "proposed_by": "agent:support-bot",
        "created_at": "2025-11-29T06:00:05Z",
    }
    value.update(copy.deepcopy(overrides))
    return value


def tool_statement_value(tool_call: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """A tool-call approval for ``tool_call`` valid at :data:`NOW` for :data:`TOOL_BINDING`."""
    parsed = ToolCall.model_validate(tool_call)
    value: dict[str, Any] = {
        "type": "airlock.tool-call-approval/v1",
        "approval_id": "apv_5d4c3b2a1f0e9d8c",
        "proposal_id": parsed.proposal_id,
        "action_hash": parsed.action_hash(),
        "tool": parsed.tool,
        "target": parsed.target,
        "effect_key": parsed.effect_key,
        "audience": GATE_AUDIENCE,
        "nonce": "0a1b2c3d4e5f60718293a4b5c6d7e8f9",
        "issued_at": 1764400000,
        "not_before": 1764400000,
        "expires_at": 1764400900,
        "approvers": [{"id": "alice", "at": 1764399950}, {"id": "bob", "at": 1764399990}],
        "quorum": 2,
        "policy": {"rule": "refund-large", "hash": "sha256:" + "7a" * 32},
        "risk": parsed.risk,
    }
    value.update(copy.deepcopy(overrides))
    return value


def sign_tool_value(statement: dict[str, Any], key: str = "rfc8032-test1") -> Envelope:
    """Sign a tool-call statement value (validated first), as the checkpoint would."""
    payload = ToolApprovalStatement.model_validate(statement).canonical_bytes()
    return signer(key).sign_payload(APPROVAL_PAYLOAD_TYPE, payload)


def tool_bundle_for(
    tool_call: dict[str, Any] | None = None,
    statement: dict[str, Any] | None = None,
    *,
    key: str = "rfc8032-test1",
    action_bytes: bytes | None = None,
) -> bytes:
    """A bundle over ``tool_call`` (or raw ``action_bytes``) approved by ``statement``."""
    tool_call = tool_call if tool_call is not None else tool_call_value()
    if action_bytes is None:
        action_bytes = canonical_bytes(tool_call)
    statement = statement if statement is not None else tool_statement_value(tool_call)
    return make_bundle(action_bytes, sign_tool_value(statement, key))
