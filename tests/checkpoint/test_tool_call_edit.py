"""An approver's edit of a tool call (docs/protocol.md#editing-a-tool-call): a new proposal
with a new hash supersedes the old one, which is withdrawn in the same transaction; the
editor's vote counts on the new one and the policy decides it anew; every refusal changes
nothing and is audited."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from airlock.protocol import KeySet, ToolBinding, ToolCall, action_hash, verify_bundle
from airlock.store import export, read_transaction
from airlock.trace import trace
from services.checkpoint.auth import Principal
from services.checkpoint.errors import Refusal
from services.checkpoint.policy import Policy

from .harness import World, audit_events, make_world
from .test_tool_call_decisions import bundle_of
from .tools import code, submit_tool

GATE = "airlock-gate/payments"
#: A refund over 200.00 needs two people, each typing the target.
TWO_FOR_BIG = b"""version = 1
[[rule]]
name = "big-refund-two-people"
effect = "approve"
quorum = 2
confirm = true
match.tool = "refund"
match.arguments = [{name = "amount", op = ">", value = 20000}]

[[rule]]
name = "no-refund-in-xxx"
effect = "deny"
reason = "no such currency"
match.tool = "refund"
match.arguments = [{name = "currency", op = "==", value = "XXX"}]
"""


@pytest.fixture
def big_world(db_url: str, tmp_path: Path) -> Iterator[World]:
    w = make_world(db_url, tmp_path, Policy.from_bytes(TWO_FOR_BIG, "<test>"))
    try:
        yield w
    finally:
        w.client.close()
        w.checkpoint.db.dispose()


def edit(world: World, who: str, proposal: dict[str, Any], values: Any, **extra: Any) -> Any:
    body = {"action_hash": proposal["action_hash"], "set": values, **extra}
    return world.client.post(
        f"/v1/proposals/{proposal['id']}/edit", json=body, headers=world.auth(who)
    )


def snapshot(world: World) -> dict[str, Any]:
    """Everything an edit could change: proposals, votes, approvals, the audit chain
    (but its refusal records)."""
    with world.checkpoint.engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT id, state, action_hash, superseded_by, edit FROM proposals ORDER BY id")
        ).all()
        counts = {
            t: conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one()
            for t in ("votes", "approvals", "feed_events")
        }
        events = [
            json.loads(e)["type"]
            for e in conn.execute(sa.text("SELECT event FROM audit_log ORDER BY seq")).scalars()
        ]
    return {
        "proposals": [tuple(r) for r in rows],
        **counts,
        "events": [e for e in events if e != "checkpoint.refused"],
    }


def refused_codes(world: World) -> list[str]:
    """Each refusal's code as the audit chain records it, sorted."""
    world.app.state.refusals.flush()  # a window's later refusals are counted in memory
    events = audit_events(world, "checkpoint.refused")
    return sorted(code for e in events for code in [e["code"]] * e.get("count", 1))


def test_edit_makes_a_new_proposal_that_supersedes_the_old(world: World) -> None:
    old = submit_tool(world).json()
    response = edit(world, "alice", old, {"amount": 1500}, note="only the shipping")
    assert response.status_code == 200, response.text
    new = response.json()
    # The new proposal: its own id (from the old id and the edited call), its own hash,
    # the edited argument, everything else the agent's.
    call = ToolCall.from_json_bytes(new["action_jcs"].encode())
    basis = ToolCall.model_validate(
        {**old["action"], "arguments": {**old["action"]["arguments"], "amount": 1500}}
    )
    expected_id = (
        "prop_"
        + hashlib.sha256(
            f"airlock.edit/v1\n{old['id']}\n{basis.action_hash()}".encode()
        ).hexdigest()[:40]
    )
    assert new["id"] == call.proposal_id == expected_id
    assert new["action_hash"] == action_hash(new["action_jcs"].encode()) != old["action_hash"]
    assert call.arguments == {"order": "order-881", "amount": 1500, "currency": "EUR"}
    kept = ("tool", "target", "effect_key", "premises", "risk", "summary", "audience")
    assert all(getattr(call, f) == old["action"][f] for f in kept)
    assert call.proposed_by == old["proposed_by"] == new["proposed_by"]
    assert new["submitted_by"] == old["submitted_by"] == "scanner-1"
    assert new["edit"] == {
        "supersedes": old["id"],
        "by": "alice",
        "note": "only the shipping",
        "at": world.clock(),
        "changes": [{"argument": "amount", "was": 12500, "now": 1500}],
    }
    assert new["superseded_by"] is None
    # The editor's vote counted: one person suffices for this call, so it is approved,
    # signed for the edited bytes.
    assert new["state"] == "approved"
    assert [v["voter"] for v in new["votes"]] == ["alice"]
    keys = KeySet.from_value(world.client.get("/v1/keys").json())
    verified = verify_bundle(bundle_of(new), keys, ToolBinding(GATE), world.clock())
    assert verified.statement.action_hash == new["action_hash"]
    assert [a.id for a in verified.statement.approvers] == ["alice"]
    # The old one: withdrawn, pointing at the new, as the agent reads it too.
    was = world.client.get(f"/v1/proposals/{old['id']}", headers=world.auth("agent")).json()
    assert (was["state"], was["superseded_by"], was["edit"]) == ("withdrawn", new["id"], None)
    assert was["approval"] is None and was["votes"] == []
    (event,) = audit_events(world, "checkpoint.proposal.edited")
    assert event["proposal_id"] == old["id"] and event["new_proposal_id"] == new["id"]
    assert (event["by"], event["note"]) == ("alice", "only the shipping")
    assert (event["old_action_hash"], event["new_action_hash"]) == (
        old["action_hash"],
        new["action_hash"],
    )
    assert event["changes"] == [{"argument": "amount", "was": 12500, "now": 1500}]
    vote = audit_events(world, "checkpoint.vote.approve")[-1]
    assert (vote["proposal_id"], vote["by"]) == (new["id"], "alice")
    # The trace of either proposal tells the whole story (airlock audit trace).
    with read_transaction(world.checkpoint.engine) as conn:
        lines = list(export(conn))
    for asked in (old["id"], new["id"]):
        told = trace(asked, {"checkpoint": lambda: iter(lines)})
        assert told.proposals == sorted([old["id"], new["id"]])
        assert [e.event["type"] for e in told.events] == [
            "checkpoint.proposal.submitted",
            "checkpoint.proposal.edited",
            "checkpoint.vote.approve",
            "checkpoint.approval.issued",
        ]


def test_high_risk_edit_needs_the_typed_target_and_a_second_person(big_world: World) -> None:
    world = big_world
    old = submit_tool(world).json()
    assert old["policy"]["quorum"] == 1  # 125.00: one person
    before = snapshot(world)
    for values, extra, expected in (
        ({"amount": 50000}, {}, (422, "E_CONFIRM_REQUIRED")),
        ({"amount": 50000}, {"confirm": "order-882"}, (422, "E_CONFIRM_MISMATCH")),
        ({"currency": "XXX"}, {}, (403, "E_POLICY_DENIED")),  # a deny rule matches the edit
    ):
        response = edit(world, "alice", old, values, **extra)
        assert (response.status_code, code(response)) == expected
    assert snapshot(world) == before
    response = edit(world, "alice", old, {"amount": 50000}, confirm="order-881")
    assert response.status_code == 200, response.text
    new = response.json()
    assert (new["policy"]["rule"], new["policy"]["quorum"]) == ("big-refund-two-people", 2)
    assert new["state"] == "pending" and new["votes_needed"] == 1
    assert [v["voter"] for v in new["votes"]] == ["alice"]
    again = world.approve("alice", new["id"], new["action_hash"], confirm="order-881")
    assert (again.status_code, code(again)) == (409, "E_ALREADY_VOTED")
    untyped = world.approve("bob", new["id"], new["action_hash"])
    assert (untyped.status_code, code(untyped)) == (422, "E_CONFIRM_REQUIRED")
    done = world.approve("bob", new["id"], new["action_hash"], confirm="order-881").json()
    assert done["state"] == "approved"
    assert [v["voter"] for v in done["votes"]] == ["alice", "bob"]
    # Another call edited up the same way: bob may instead edit it down again, and his
    # edit is the one vote it then needs (alice's was for other bytes: not carried over).
    other = submit_tool(
        world, proposal_id="prop_tool0000002", effect_key="refund:order-882",
        target="order-882", arguments={"order": "order-882", "amount": 100, "currency": "EUR"},
    ).json()  # fmt: skip
    up = edit(world, "alice", other, {"amount": 50000}, confirm="order-882").json()
    down = edit(world, "bob", up, {"amount": 20000})
    assert down.status_code == 200, down.text
    last = down.json()
    assert (last["state"], last["policy"]["quorum"]) == ("approved", 1)
    assert [v["voter"] for v in last["votes"]] == ["bob"]
    assert last["edit"]["supersedes"] == up["id"]
    assert last["edit"]["changes"] == [{"argument": "amount", "was": 50000, "now": 20000}]
    chain = world.client.get(f"/v1/proposals/{up['id']}", headers=world.auth("bob")).json()
    assert (chain["state"], chain["superseded_by"]) == ("withdrawn", last["id"])


#: Edits refused as malformed (E_INVALID), each changing nothing.
INVALID = [
    {"refund_all": True},  # an argument the call does not have
    {"amount": "15"},  # integer → string
    {"amount": True},  # integer → boolean (True is an int to Python, not to JSON)
    {"currency": None},  # string → null
    {"amount": 12500},  # no change
    {"amount": 12500, "currency": "EUR"},  # no change either
    {"currency": "e\u0301"},  # not NFC: not a valid tool call
    {},  # nothing at all
]


def test_every_refused_edit_changes_nothing_and_is_audited(world: World) -> None:
    old = submit_tool(world).json()
    mine = submit_tool(
        world, proposal_id="prop_tool0000002", effect_key="refund:order-882",
        target="order-882", proposed_by="alice",
        arguments={"order": "order-882", "amount": 100, "currency": "EUR"},
    ).json()  # fmt: skip
    cloud = world.submit().json()
    stale = {**old, "action_hash": "sha256:" + "0" * 64}
    before = snapshot(world)
    refusals = [
        ("agent", old, {"amount": 1}, (403, "E_FORBIDDEN")),  # the agent that proposed it
        ("executor", old, {"amount": 1}, (403, "E_FORBIDDEN")),
        ("viewer", old, {"amount": 1}, (403, "E_FORBIDDEN")),
        ("alice", mine, {"amount": 1}, (403, "E_SELF_APPROVAL")),  # alice proposed it
        ("alice", stale, {"amount": 1}, (409, "E_STALE_VIEW")),
        ("alice", cloud, {"stopped_mode": "KeepCharging"}, (409, "E_STATE")),
        ("alice", {**old, "id": "prop_nosuchthing"}, {"amount": 1}, (404, "E_NOT_FOUND")),
        *(("alice", old, values, (422, "E_INVALID")) for values in INVALID),
    ]
    for who, proposal, values, expected in refusals:
        response = edit(world, who, proposal, values)
        assert (response.status_code, code(response)) == expected, (who, values)
        assert "\n" not in response.json()["error"]["message"]
    assert snapshot(world) == before
    assert refused_codes(world) == sorted(e[-1][1] for e in refusals)
    # Only a pending one: approved, it is refused too.
    assert world.approve("bob", old["id"], old["action_hash"]).json()["state"] == "approved"
    before = snapshot(world)
    response = edit(world, "alice", old, {"amount": 1})
    assert (response.status_code, code(response)) == (409, "E_STATE")
    assert snapshot(world) == before


def test_the_edit_keeps_one_open_proposal_per_effect_key(world: World) -> None:
    old = submit_tool(world).json()
    new = edit(world, "alice", old, {"amount": 1500}).json()
    assert new["state"] == "approved"  # open: it holds the effect key now
    # The same edit sent again, a little later: the proposal it made, nothing new.
    world.clock.advance(5)
    again = edit(world, "alice", old, {"amount": 1500})
    assert (again.status_code, again.json()["id"]) == (200, new["id"])
    assert len(audit_events(world, "checkpoint.proposal.edited")) == 1
    other = edit(world, "alice", old, {"amount": 1600})
    assert (other.status_code, code(other)) == (409, "E_STATE")
    assert new["id"] in other.json()["error"]["message"]
    # The agent's retry of the original is the same proposal (withdrawn); another
    # proposal for the key is refused while the edited one holds it.
    same = submit_tool(world)
    assert (same.status_code, same.json()["state"]) == (200, "withdrawn")
    clash = submit_tool(world, proposal_id="prop_tool0000009")
    assert (clash.status_code, code(clash)) == (409, "E_DUPLICATE_OPEN")
    with world.checkpoint.engine.connect() as conn:
        open_rows = conn.execute(
            sa.text(
                "SELECT id FROM proposals WHERE effect_key = 'refund:order-881' "
                "AND state IN ('pending', 'approved', 'in_doubt')"
            )
        ).scalars()
        assert list(open_rows) == [new["id"]]


@pytest.mark.postgres
def test_two_people_editing_at_once_make_one_new_proposal(pg_url: str, tmp_path: Path) -> None:
    """On PostgreSQL, where two transactions really run at once: the row lock lets one
    edit through; the other finds the call superseded and writes nothing."""
    world = make_world(pg_url, tmp_path)
    try:
        old = submit_tool(world).json()
        barrier = threading.Barrier(2)
        answers: dict[str, Any] = {}

        def edit_as(name: str, amount: int) -> None:
            barrier.wait(10)
            try:
                answers[name] = world.checkpoint.edit(
                    Principal(name, "user", "approver"),
                    old["id"],
                    old["action_hash"],
                    {"amount": amount},
                    confirm=None,
                    note="",
                ).id
            except Refusal as exc:
                answers[name] = exc.code.value

        threads = [
            threading.Thread(target=edit_as, args=(name, amount))
            for name, amount in (("alice", 1500), ("bob", 1600))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(answers) == ["alice", "bob"]
        made = [v for v in answers.values() if v.startswith("prop_")]
        assert len(made) == 1 and "E_STATE" in answers.values(), answers
        with world.checkpoint.engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT id, state FROM proposals ORDER BY id")).all()
        assert sorted(tuple(r) for r in rows) == sorted(
            [(old["id"], "withdrawn"), (made[0], "approved")]
        )
        assert len(audit_events(world, "checkpoint.proposal.edited")) == 1
    finally:
        world.client.close()
        world.checkpoint.db.dispose()
