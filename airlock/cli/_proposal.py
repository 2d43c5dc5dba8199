"""Reading the checkpoint's proposal records for ``airlock approvals``, and their signed action.

The shapes are the kernel's (:mod:`airlock.api`, shared with the web app); this module
turns an answer that does not fit them into this CLI's :class:`CheckpointUnavailable`
(exit 3). Kept apart from the commands (:mod:`airlock.cli._approvals`) so that registering
them, and ``--help``, loads neither pydantic nor the protocol kernel; the commands import
this module when they run.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError

from airlock.api import Proposal
from airlock.protocol import ProposedAction, Refused, ToolCall, action_hash

from ._client import CheckpointUnavailable

__all__ = ["parse", "signed_action"]

_M = TypeVar("_M", bound=BaseModel)


def parse(model: type[_M], body: object) -> _M:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CheckpointUnavailable(
            f"the checkpoint's answer is not what this CLI understands ({where}: {first['msg']})"
        ) from None


def signed_action(p: Proposal) -> ProposedAction | ToolCall:
    """The action (or tool call) parsed from the exact bytes the checkpoint hashed,
    checked against it.

    Everything a person is shown about *what will happen* comes from here, not from the
    record's convenience fields, and those fields must agree with it.
    """
    data = p.action_jcs.encode("utf-8", errors="surrogatepass")
    if action_hash(data) != p.action_hash:
        raise CheckpointUnavailable(
            f"{p.id}: the action text does not hash to the stated {p.action_hash}; "
            "not trusting this answer"
        )
    if p.is_tool_call:
        return _signed_tool_call(p, data)
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


def _signed_tool_call(p: Proposal, data: bytes) -> ToolCall:
    """:func:`signed_action` for a tool call (gate contract §2: the cloud fields of its
    record are its audience, target and tool)."""
    try:
        call = ToolCall.from_json_bytes(data)
    except Refused as exc:
        raise CheckpointUnavailable(f"{p.id}: the signed tool call does not parse: {exc}") from None
    if call.canonical_bytes() != data:
        raise CheckpointUnavailable(f"{p.id}: the tool call text is not canonical (RFC 8785)")
    signed = (call.proposal_id, call.target, call.tool, call.audience, call.target, call.tool)
    shown = (p.id, p.resource_id, p.operation, p.account, p.target, p.tool)
    extra = (call.effect_key, call.audience, call.summary)
    if signed != shown or extra != (p.effect_key, p.audience, p.summary):
        raise CheckpointUnavailable(f"{p.id}: the record does not match its own signed tool call")
    return call
