"""What a notification says: the event body, built from a proposal row. Pure.

The body is made by naming each field it carries, never by copying a row or a record:
so it never holds an approval (its envelope, statement, signature or nonce), a receipt,
a token, a password or a channel's secret (SECURITY.md, notifications). Agent-written
text (a summary, a reason) is clipped; each channel escapes it for its own medium.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

from airlock.protocol import TOOL_CALL_TYPE

__all__ = ["SUMMARY_MAX", "build_body", "iso", "link", "sample_body"]

#: Characters of agent-written summary a notification carries at most.
SUMMARY_MAX: Final = 500


def iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def link(proposal_url: str | None, proposal_id: str) -> str | None:
    """The web app's page of the proposal, when ``[notify] proposal_url`` names it."""
    return None if proposal_url is None else proposal_url.replace("{proposal_id}", proposal_id)


def build_body(
    row: Any,
    *,
    kind: str,
    event_id: str,
    voters: Sequence[str],
    now: int,
    proposal_url: str | None,
    groups: Sequence[str] = (),
) -> dict[str, Any]:
    """The event as Standard Webhooks shapes a payload: ``type``, ``timestamp``, ``data``
    (plus ``id``, the ``webhook-id`` a receiver dedupes on).

    ``row`` is a ``proposals`` row as the state change left it; ``voters`` the people
    who approved it so far; ``groups`` the groups a routed proposal was asked of so far,
    in order (the last is the one escalated to).
    """
    tool_call = row.action_type == TOOL_CALL_TYPE
    if tool_call:
        summary = row.summary or ""
        target = f"{row.resource_id} ({row.operation} on {row.account})"
    else:
        summary = _reason(row.action)
        target = f"{row.resource_type} {row.resource_id} in {row.account} {row.region}"
    return {
        "id": event_id,
        "type": kind,
        "timestamp": iso(now),
        "data": {
            "proposal_id": row.id,
            "action_type": row.action_type,
            "state": row.state,
            "summary": summary[:SUMMARY_MAX],
            "operation": row.operation,
            "target": target,
            "risk": row.risk,
            "rule": row.rule,
            "votes": {"count": len(voters), "quorum": row.quorum, "by": list(voters)},
            "approval_deadline": iso(row.approval_deadline),
            "url": link(proposal_url, row.id),
            "groups": list(groups),
        },
    }


def sample_body(event_id: str, channel: str, now: int) -> dict[str, Any]:
    """What ``airlock notify test`` sends: the same shape, about no proposal."""
    return {
        "id": event_id,
        "type": "notify.test",
        "timestamp": iso(now),
        "data": {
            "proposal_id": None,
            "action_type": None,
            "state": None,
            "summary": f"A test message from Airlock to channel {channel}",
            "operation": None,
            "target": None,
            "risk": None,
            "rule": None,
            "votes": {"count": 0, "quorum": 0, "by": []},
            "approval_deadline": None,
            "url": None,
            "groups": [],
        },
    }


def _reason(action: bytes) -> str:
    try:
        reason = json.loads(action).get("reason", "")
    except (ValueError, AttributeError):  # stored JCS bytes; unreachable, fail quiet
        return ""
    return reason if isinstance(reason, str) else ""
