"""The feed per audience (gate contract §3): a gate's agent token reads only the
tool-call approvals for its audience that it submitted; the executor's feed never carries
a tool call, and an approval for one audience never reaches another."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airlock.protocol import KeySet, ToolBinding, verify_bundle

from .harness import World, approved
from .test_tool_call_decisions import GATE
from .tools import approved_tool, code, submit_tool


def gate_feed(world: World, audience: str = GATE, who: str = "agent", after: int = 0) -> Any:
    return world.client.get(
        "/v1/feed", params={"audience": audience, "after": after}, headers=world.auth(who)
    )


def test_gate_feed_carries_its_approval_and_it_verifies(world: World) -> None:
    record = approved_tool(world)
    page = gate_feed(world).json()
    (item,) = page["items"]
    assert (item["kind"], item["approval_id"]) == ("approval", record["approval"]["approval_id"])
    keys = KeySet.from_value(world.client.get("/v1/keys").json())
    verified = verify_bundle(
        json.dumps(item["bundle"]).encode(), keys, ToolBinding(GATE), world.clock()
    )
    assert verified.action.effect_key == "refund:order-881"
    assert page["executor_head"] is None


def test_executor_feed_never_carries_tool_calls(world: World) -> None:
    record = approved_tool(world)
    world.client.post(
        f"/v1/proposals/{record['id']}/revoke", json={"note": "n"}, headers=world.auth("bob")
    )
    _, cloud_approval = approved(world)
    page = world.client.get("/v1/feed", headers=world.auth("executor")).json()
    assert [i["approval_id"] for i in page["items"]] == [cloud_approval]


def test_gate_feed_never_carries_cloud_approvals(world: World) -> None:
    approved(world)
    assert gate_feed(world).json()["items"] == []
    assert gate_feed(world, audience="airlock-executor/test").json()["items"] == []


def test_other_audience_feed_never_carries_approval(world: World) -> None:
    approved_tool(world)
    assert gate_feed(world, audience="airlock-gate/other").json()["items"] == []


def test_another_agent_token_never_reads_this_agents_approvals(world: World) -> None:
    world.tokens["agent2"] = world.accounts.create_service_token("support-2", "agent")
    approved_tool(world)
    assert gate_feed(world, who="agent2").json()["items"] == []


def test_gate_feed_carries_the_revocation(world: World) -> None:
    record = approved_tool(world)
    first = gate_feed(world).json()
    world.client.post(
        f"/v1/proposals/{record['id']}/revoke", json={"note": "n"}, headers=world.auth("bob")
    )
    page = gate_feed(world, after=first["cursor"]).json()
    assert [(i["kind"], i["approval_id"]) for i in page["items"]] == [
        ("revocation", record["approval"]["approval_id"])
    ]


@pytest.mark.parametrize(
    ("who", "params", "status", "error"),
    [
        ("agent", {}, 403, "E_FORBIDDEN"),
        ("executor", {"audience": GATE}, 403, "E_FORBIDDEN"),
        ("alice", {"audience": GATE}, 403, "E_FORBIDDEN"),
        ("agent", {"audience": "bad audience"}, 422, "E_INVALID"),
    ],
)
def test_feed_refuses_a_caller_without_its_audience(
    world: World, who: str, params: dict[str, str], status: int, error: str
) -> None:
    submit_tool(world)
    r = world.client.get("/v1/feed", params=params, headers=world.auth(who))
    assert (r.status_code, code(r)) == (status, error)
