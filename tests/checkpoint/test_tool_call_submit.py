"""``POST /v1/proposals`` with a tool call: parsed strictly, stored in the cloud columns
as the gate contract says, hashed and answered like a cloud action, one open proposal per
(audience, effect key)."""

from __future__ import annotations

import json

from airlock.api import Proposal
from airlock.protocol import ToolCall

from .builders import tool_call_value
from .harness import World
from .tools import code, submit_tool


def test_tool_call_is_stored_with_its_fields_and_hash(world: World) -> None:
    r = submit_tool(world)
    assert r.status_code == 201, r.text
    body = r.json()
    call = ToolCall.model_validate(tool_call_value())
    assert body["action_jcs"] == call.canonical_bytes().decode()
    assert body["action_hash"] == call.action_hash()
    assert body["state"] == "pending"
    assert (body["provider"], body["account"], body["region"]) == ("", call.audience, "")
    assert (body["resource_type"], body["resource_id"], body["operation"]) == (
        "tool-call",
        "order-881",
        "refund",
    )
    read = Proposal.model_validate(body)
    assert read.is_tool_call
    assert (read.tool, read.target, read.effect_key, read.audience, read.summary) == (
        "refund",
        "order-881",
        "refund:order-881",
        "airlock-gate/payments",
        "Refund 125.00 EUR on order-881",
    )
    assert body["risk"] == "medium" and body["policy"]["rule"] == "default-one-human"


def test_same_tool_call_twice_is_idempotent(world: World) -> None:
    first = submit_tool(world)
    again = submit_tool(world)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]


def test_same_id_other_tool_call_is_a_conflict(world: World) -> None:
    assert submit_tool(world).status_code == 201
    r = submit_tool(world, arguments={"order": "order-881", "amount": 99999})
    assert (r.status_code, code(r)) == (409, "E_CONFLICT")


def test_second_open_proposal_for_one_effect_key_is_refused(world: World) -> None:
    assert submit_tool(world).status_code == 201
    r = submit_tool(world, proposal_id="prop_tool0000002")
    assert (r.status_code, code(r)) == (409, "E_DUPLICATE_OPEN")
    # Another audience has its own effect keys; another key on the same target too.
    assert (
        submit_tool(world, proposal_id="prop_tool0000003", audience="gate/other").status_code == 201
    )
    assert (
        submit_tool(
            world, proposal_id="prop_tool0000004", effect_key="refund:order-881:2"
        ).status_code
        == 201
    )


def test_tool_call_does_not_take_a_cloud_actions_slot(world: World) -> None:
    """A cloud action and a tool call never share the (account, resource, operation) slot."""
    assert world.submit().status_code == 201
    assert submit_tool(world, target="i-t4n0example", tool="stop").status_code == 201


def test_tampered_tool_call_is_refused(world: World) -> None:
    for value in (
        {**tool_call_value(), "arguments": {"amount": 1.5}},
        {**tool_call_value(), "extra": 1},
        {**tool_call_value(), "summary": "two\nlines"},
        {**tool_call_value(), "risk": "critical"},
    ):
        r = world.client.post(
            "/v1/proposals",
            content=json.dumps(value).encode(),
            headers={**world.auth("agent"), "Content-Type": "application/json"},
        )
        assert (r.status_code, code(r)) == (422, "E_INVALID"), value


def test_only_agents_submit_tool_calls(world: World) -> None:
    r = submit_tool(world, who="executor")
    assert (r.status_code, code(r)) == (403, "E_FORBIDDEN")
