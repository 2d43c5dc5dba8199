"""What the checkpoint does differently for a tool call (``airlock.tool-call/v1``): how a
submitted body is told apart and parsed, the columns a tool call is stored in, and the
statement its approval signs. The lifecycle itself (:mod:`.service`) is one for both.

A tool call is stored in the cloud columns as docs/protocol.md#tool-call-at-the-checkpoint
says: provider ``""``, account = its audience, region ``""``, resource type
``tool-call``, resource id = its target, operation = its tool; its effect key, audience
and summary in their own columns. Pure: nothing here does I/O or reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from airlock.protocol import (
    ACTION_MAX_BYTES,
    APPROVAL_TYPE,
    TOOL_APPROVAL_TYPE,
    TOOL_CALL_MAX_BYTES,
    TOOL_CALL_TYPE,
    ApprovalStatement,
    ProposedAction,
    ToolApprovalStatement,
    ToolCall,
    action_hash,
    loads_strict,
)

from .models import CLOUD_ACTION
from .policy import action_tags

__all__ = [
    "TOOL_RESOURCE_TYPE",
    "Submission",
    "parse_submission",
    "statement",
    "tool_submission",
]

#: ``proposals.resource_type`` of a tool call (and the ledger's, docs/protocol.md#ledger).
TOOL_RESOURCE_TYPE: Final = "tool-call"


@dataclass(frozen=True, slots=True)
class Submission:
    """A submitted body, parsed: the action, its canonical bytes and hash, and the
    proposal columns it fills."""

    action: ProposedAction | ToolCall
    canonical: bytes
    digest: str
    columns: dict[str, Any]

    @property
    def is_tool_call(self) -> bool:
        return isinstance(self.action, ToolCall)


def parse_submission(body: bytes) -> Submission:
    """Parse ``POST /v1/proposals``'s body by its ``type``, strictly, or raise
    :class:`Refused` (or ValueError for an action's malformed ``evidence.tags``)."""
    # Both types share the strict parser and its cap, so peeking at "type" first costs
    # one parse more and decides nothing the model parse does not check again.
    value = loads_strict(body, max_bytes=max(ACTION_MAX_BYTES, TOOL_CALL_MAX_BYTES))
    if isinstance(value, dict) and value.get("type") == TOOL_CALL_TYPE:
        call = ToolCall.from_json_bytes(body)
        canonical = call.canonical_bytes()
        return Submission(call, canonical, action_hash(canonical), _tool_columns(call))
    action = ProposedAction.from_json_bytes(body)
    canonical = action.canonical_bytes()
    action_tags(action)  # malformed evidence.tags is refused, never ignored
    columns = {
        "action_type": CLOUD_ACTION,
        "provider": action.provider,
        "account": action.account,
        "region": action.region,
        "resource_type": action.resource.type,
        "resource_id": action.resource.id,
        "operation": action.operation,
        "effect_key": None,
        "audience": None,
        "summary": None,
    }
    return Submission(action, canonical, action_hash(canonical), columns)


def tool_submission(call: ToolCall, canonical: bytes, digest: str) -> Submission:
    """A tool call made here (an edit's), as a submission of its canonical bytes."""
    return Submission(call, canonical, digest, _tool_columns(call))


def _tool_columns(call: ToolCall) -> dict[str, Any]:
    return {
        "action_type": TOOL_CALL_TYPE,
        "provider": "",
        "account": call.audience,
        "region": "",
        "resource_type": TOOL_RESOURCE_TYPE,
        "resource_id": call.target,
        "operation": call.tool,
        "effect_key": call.effect_key,
        "audience": call.audience,
        "summary": call.summary,
    }


def statement(
    row: Any,
    *,
    approval_id: str,
    nonce: str,
    approvers: list[dict[str, Any]],
    now: int,
    expires_at: int,
    executor_audience: str,
) -> ApprovalStatement | ToolApprovalStatement:
    """The statement an approval of ``row`` (a proposals row) signs: a tool call's for a
    tool call, addressed to its own audience (its gate); a cloud approval addressed to
    ``executor_audience`` otherwise."""
    common = {
        "approval_id": approval_id,
        "proposal_id": row.id,
        "action_hash": row.action_hash,
        "nonce": nonce,
        "issued_at": now,
        "not_before": now,
        "expires_at": expires_at,
        "approvers": approvers,
        "quorum": row.quorum,
        "policy": {"rule": row.rule, "hash": row.policy_hash},
        "risk": row.risk,
    }
    if row.action_type == TOOL_CALL_TYPE:
        return ToolApprovalStatement.model_validate(
            {
                "type": TOOL_APPROVAL_TYPE,
                "tool": row.operation,
                "target": row.resource_id,
                "effect_key": row.effect_key,
                "audience": row.audience,
                **common,
            }
        )
    if row.action_type != CLOUD_ACTION:  # the column's only two values; fail closed
        raise ValueError(f"unknown action type {row.action_type!r}")
    return ApprovalStatement.model_validate(
        {
            "type": APPROVAL_TYPE,
            "provider": row.provider,
            "account": row.account,
            "region": row.region,
            "resource": {"type": row.resource_type, "id": row.resource_id},
            "operation": row.operation,
            "audience": executor_audience,
            **common,
        }
    )
