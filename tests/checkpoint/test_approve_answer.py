"""An approve answers the bytes FastAPI would write for its ``ProposalOut``.

The approve route serializes its answer itself, in its worker thread, instead of having
FastAPI validate the returned model in a second thread hop and serialize it. These tests
hold the bytes and headers to what the route's own response field (the one FastAPI uses
and openapi.json describes) makes of the same record, on an issued approval and on a
vote that leaves the proposal pending.
"""

from __future__ import annotations

from typing import Any

import httpx
from fastapi.routing import APIRoute

from services.checkpoint.schemas import ProposalOut

from .harness import World

_PATH = "/v1/proposals/{proposal_id}/approve"


def _as_fastapi_answers(world: World, answer: httpx.Response) -> None:
    routes = [r for r in world.app.routes if isinstance(r, APIRoute) and r.path == _PATH]
    assert len(routes) == 1
    field = routes[0].response_field
    assert field is not None and routes[0].response_model is ProposalOut
    record = ProposalOut.model_validate_json(answer.content)
    value, errors = field.validate(record, {}, loc=("response",))
    assert errors == []
    assert answer.content == field.serialize_json(value, by_alias=True)
    assert answer.headers["content-type"] == "application/json"
    assert answer.headers["content-length"] == str(len(answer.content))


def test_an_issued_approval_answers_as_fastapi_would(world: World) -> None:
    proposal: dict[str, Any] = world.submit().json()
    answer = world.approve("alice", proposal["id"], proposal["action_hash"])
    assert answer.status_code == 200 and answer.json()["state"] == "approved"
    _as_fastapi_answers(world, answer)
    shown = world.client.get(f"/v1/proposals/{proposal['id']}", headers=world.auth("viewer"))
    assert shown.content == answer.content


def test_a_vote_short_of_quorum_answers_as_fastapi_would(world: World) -> None:
    proposal: dict[str, Any] = world.submit(operation="delete").json()
    answer = world.approve(
        "alice", proposal["id"], proposal["action_hash"], confirm="i-t4n0example"
    )
    assert answer.status_code == 200
    assert (answer.json()["state"], answer.json()["votes_needed"]) == ("pending", 1)
    _as_fastapi_answers(world, answer)
