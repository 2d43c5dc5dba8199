"""The checkpoint's proposal record as ``airlock approvals`` reads it, and its signed action.

Kept apart from the commands (:mod:`airlock.cli._approvals`) so that registering them,
and ``--help``, loads neither pydantic nor the protocol kernel; the commands import this
module when they run.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from airlock.protocol import ProposedAction, Refused, action_hash

from ._client import CheckpointUnavailable

__all__ = ["Page", "Proposal", "parse", "signed_action"]


# -- the API's shapes, as read here ------------------------------------------------------


class _View(BaseModel):
    # Unknown fields are ignored so a newer checkpoint does not break the CLI; missing
    # ones are an error (exit 3).
    model_config = ConfigDict(frozen=True, extra="ignore")


class _Policy(_View):
    rule: str
    effect: str
    quorum: int
    confirm: bool
    hash: str


class _Vote(_View):
    voter: str
    at: int
    note: str
    counts: bool = True  # false once the voter was disabled or lost the approver role


class _Approval(_View):
    approval_id: str
    keyid: str
    issued_at: int
    expires_at: int
    revoked_at: int | None
    revoked_by: str | None


class _Rejection(_View):
    reason_code: str
    note: str
    by: str
    at: int


class _ExecutorResolution(_View):
    decision: str
    by: str
    at: int
    note: str
    checkpoint_decision: str
    checkpoint_resolved_by: str | None
    conflict: bool
    reported_at: int


class _Outcome(_View):
    approval_id: str
    outcome: str
    refusal_code: str | None
    receipt_verified: bool
    late: bool
    reported_at: int
    resolution: str | None
    resolved_by: str | None
    resolved_at: int | None
    resolution_note: str | None
    # Absent from a checkpoint before migration 0006 (executor_resolutions).
    executor_resolution: _ExecutorResolution | None = None


class _ExecutorRefusal(_View):
    approval_id: str
    refusal_code: str
    detail: str
    executor: str
    at: int
    reported_at: int


class Proposal(_View):
    id: str
    state: str
    action_hash: str
    action_jcs: str
    account: str
    region: str
    resource_type: str
    resource_id: str
    operation: str
    risk: str
    proposed_by: str
    policy: _Policy
    deny_reason: str | None
    votes: list[_Vote]
    votes_needed: int
    approval_deadline: int
    created_at: int
    approval: _Approval | None
    rejection: _Rejection | None
    outcome: _Outcome | None
    # Absent from a checkpoint older than POST /v1/refusals.
    executor_refusals: list[_ExecutorRefusal] = []


class Page(_View):
    items: list[Proposal]
    next_before: str | None
    #: The states the checkpoint filtered on; absent from a checkpoint that predates it.
    states: list[str] | None = None


def parse(model: type[_View], body: Any) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CheckpointUnavailable(
            f"the checkpoint's answer is not what this CLI understands ({where}: {first['msg']})"
        ) from None


def signed_action(p: Proposal) -> ProposedAction:
    """The action parsed from the exact bytes the checkpoint hashed, checked against it.

    Everything a person is shown about *what will happen* comes from here, not from the
    record's convenience fields, and those fields must agree with it.
    """
    data = p.action_jcs.encode("utf-8", errors="surrogatepass")
    if action_hash(data) != p.action_hash:
        raise CheckpointUnavailable(
            f"{p.id}: the action text does not hash to the stated {p.action_hash}; "
            "not trusting this answer"
        )
    try:
        action = ProposedAction.from_json_bytes(data)
    except Refused as exc:
        raise CheckpointUnavailable(f"{p.id}: the signed action does not parse: {exc}") from None
    if action.canonical_bytes() != data:
        raise CheckpointUnavailable(f"{p.id}: the action text is not canonical (RFC 8785)")
    fields = (action.proposal_id, action.resource.id, action.operation, action.account)
    if fields != (p.id, p.resource_id, p.operation, p.account):
        raise CheckpointUnavailable(f"{p.id}: the record does not match its own signed action")
    return action
