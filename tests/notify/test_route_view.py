"""A routed proposal's route as the API shows it: the groups, the level asked so far, the
SLA and when it passes, and whether the caller may vote; null on an unrouted proposal.
A page of proposals reads the routes in one query, not one per proposal."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.checkpoint.harness import World, make_world

from .support import ROUTED_TAGS, SLA_S, routed_policy

PID = "prop_routeview0001"
PLAIN = "prop_routeplain001"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = make_world(f"sqlite:///{tmp_path / 'cp.db'}", tmp_path, routed_policy(""))
    try:
        yield w
    finally:
        w.client.close()
        w.checkpoint.db.dispose()


def _route(world: World, who: str, proposal_id: str = PID) -> Any:
    answer = world.client.get(f"/v1/proposals/{proposal_id}", headers=world.auth(who))
    assert answer.status_code == 200, answer.text
    return answer.json()["route"]


def test_a_routed_proposal_shows_its_route_and_who_may_vote(world: World) -> None:
    submitted = world.submit(proposal_id=PID, resource_id="i-routed1", tags=ROUTED_TAGS)
    assert submitted.status_code == 201, submitted.text
    start = world.clock()
    assert _route(world, "alice") == {
        "groups": ["payments", "leads"],
        "level": 0,
        "sla": SLA_S,
        "due_at": start + SLA_S,
        "may_vote": True,
    }
    assert _route(world, "carol")["may_vote"] is False  # in leads, not asked yet
    assert _route(world, "admin")["may_vote"] is False
    # The agent's own answer: the agent may not vote.
    assert submitted.json()["route"]["may_vote"] is False
    world.clock.advance(SLA_S)
    assert world.checkpoint.sweep()["escalated"] == 1
    escalated = _route(world, "carol")
    assert (escalated["level"], escalated["due_at"], escalated["may_vote"]) == (1, None, True)
    assert _route(world, "bob")["may_vote"] is True  # the group asked first keeps its part


def test_an_unrouted_proposal_has_no_route(world: World) -> None:
    assert world.submit(proposal_id=PLAIN).status_code == 201
    assert _route(world, "alice", PLAIN) is None


def test_a_page_reads_every_route_in_one_query(world: World) -> None:
    for n in range(3):
        routed = world.submit(
            proposal_id=f"prop_routeview000{n + 2}", resource_id=f"i-routed{n}", tags=ROUTED_TAGS
        )
        assert routed.status_code == 201, routed.text
    assert world.submit(proposal_id=PLAIN).status_code == 201
    seen: list[str] = []

    def record(*args: Any) -> None:
        statement = str(args[2])
        if "proposal_routes" in statement:
            seen.append(statement)

    engine = world.checkpoint.engine
    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        page = world.client.get("/v1/proposals", headers=world.auth("carol")).json()
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    routes = {item["id"]: item["route"] for item in page["items"]}
    assert routes[PLAIN] is None
    assert [r["may_vote"] for key, r in routes.items() if key != PLAIN] == [False] * 3
    assert len(seen) == 1
