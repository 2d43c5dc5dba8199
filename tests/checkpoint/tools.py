"""Helpers for tool-call tests at the checkpoint: submit one, approve it, read it."""

from __future__ import annotations

import json
from typing import Any

from .builders import tool_call_value
from .harness import World


def submit_tool(world: World, who: str = "agent", **kwargs: Any) -> Any:
    """``POST /v1/proposals`` with a tool call built from ``kwargs``."""
    return world.client.post(
        "/v1/proposals",
        content=json.dumps(tool_call_value(**kwargs)).encode(),
        headers={**world.auth(who), "Content-Type": "application/json"},
    )


def approved_tool(world: World, **kwargs: Any) -> dict[str, Any]:
    """A tool call submitted and approved by alice (a medium one, so no typed target)."""
    proposal = submit_tool(world, **kwargs).json()
    record = world.approve("alice", proposal["id"], proposal["action_hash"]).json()
    assert record["state"] == "approved", record
    return dict(record)


def code(response: Any) -> str:
    return str(response.json()["error"]["code"])
