"""The approve route and the executor's reports look their caller's token up in the thread
that does the work (routes._deferred): the order of refusals and their audit records stay
those of every other route."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from .harness import World, approved, audit_events, signed_receipt


def _error(response: Any) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


def _refused(world: World) -> list[tuple[str, str, str]]:
    return [(e["code"], e["by"], e["request"]) for e in audit_events(world, "checkpoint.refused")]


def test_an_unknown_token_with_a_malformed_vote_is_refused_as_unauthenticated(
    world: World,
) -> None:
    p = world.submit().json()
    forged = {"Authorization": "Bearer " + "A" * 43}
    for path, body in (
        (f"/v1/proposals/{p['id']}/approve", {"action_hash": 1}),
        ("/v1/proposals/not-an-id/approve", {"action_hash": p["action_hash"]}),
        (f"/v1/proposals/{p['id']}/approve", {"action_hash": p["action_hash"]}),
    ):
        response = world.client.post(path, json=body, headers=forged)
        assert _error(response) == (401, "E_UNAUTHENTICATED")
        assert response.headers["WWW-Authenticate"] == "Bearer"
    assert _refused(world) == []  # anonymous: counted, never written to the chain
    assert not audit_events(world, "checkpoint.vote.approve")


def test_a_signed_out_session_cannot_vote_with_a_malformed_body(world: World) -> None:
    p = world.submit().json()
    signed_out = world.client.delete("/v1/sessions/current", headers=world.auth("alice"))
    assert signed_out.status_code == 204
    response = world.approve("alice", p["id"], p["action_hash"], note="x" * 3000)
    assert _error(response) == (401, "E_UNAUTHENTICATED")
    response = world.approve("alice", p["id"], p["action_hash"])
    assert _error(response) == (401, "E_UNAUTHENTICATED")
    assert _refused(world) == []
    shown = world.client.get(f"/v1/proposals/{p['id']}", headers=world.auth("viewer")).json()
    assert shown["votes"] == [] and shown["state"] == "pending"


def test_a_known_voter_naming_a_malformed_proposal_id_is_audited(world: World) -> None:
    p = world.submit().json()
    response = world.client.post(
        "/v1/proposals/not-an-id/approve",
        json={"action_hash": p["action_hash"]},
        headers=world.auth("alice"),
    )
    assert _error(response) == (422, "E_INVALID")
    assert _refused(world) == [("E_INVALID", "alice", "POST /v1/proposals/{proposal_id}/approve")]


def test_a_disabled_approver_cannot_vote(world: World) -> None:
    p = world.submit().json()
    world.accounts.disable_user("alice")
    response = world.approve("alice", p["id"], p["action_hash"])
    assert _error(response) == (401, "E_UNAUTHENTICATED")
    response = world.approve("bob", p["id"], p["action_hash"])
    assert response.status_code == 200 and response.json()["state"] == "approved"
    voters = [v["voter"] for v in response.json()["votes"]]
    assert voters == ["bob"]


def test_a_vote_answers_the_record_as_stored(world: World) -> None:
    # The answer is built from the row the vote locked and what it wrote, not read back:
    # it must be what a read of the record shows, vote short of quorum and vote that issues.
    single = world.submit().json()
    double = world.submit(  # quorum 2, the id typed
        proposal_id="prop_test0000002", operation="delete", resource_id="i-t4n0second"
    ).json()
    states = []
    for who, proposal, typed in (
        ("alice", single, None),
        ("alice", double, "i-t4n0second"),
        ("bob", double, "i-t4n0second"),
    ):
        world.clock.advance(7)
        answer = world.approve(who, proposal["id"], proposal["action_hash"], confirm=typed)
        assert answer.status_code == 200, answer.text
        shown = world.client.get(f"/v1/proposals/{proposal['id']}", headers=world.auth(who))
        assert answer.json() == shown.json()
        states.append((answer.json()["state"], answer.json()["updated_at"] == world.clock()))
    assert states == [("approved", True), ("pending", True), ("approved", True)]


def test_a_voters_token_is_never_in_its_repr() -> None:
    from services.checkpoint.routes import _Bearer

    token = "A" * 43
    assert token not in repr(_Bearer(token, activity=True))


@pytest.mark.parametrize("path", ["/v1/outcomes", "/v1/refusals"])
def test_an_unknown_token_with_a_malformed_report_is_refused_as_unauthenticated(
    world: World, path: str
) -> None:
    proposal, approval_id = approved(world)
    receipt = signed_receipt(approval_id, proposal["action_hash"], "succeeded")
    forged = {"Authorization": "Bearer " + "A" * 43}
    for body in ({"receipt": 1}, {"receipt": receipt}):
        response = world.client.post(path, json=body, headers=forged)
        assert _error(response) == (401, "E_UNAUTHENTICATED")
        assert response.headers["WWW-Authenticate"] == "Bearer"
    assert _refused(world) == []
    assert not audit_events(world, "checkpoint.outcome.reported")


@pytest.mark.parametrize("path", ["/v1/outcomes", "/v1/refusals"])
def test_a_known_executor_sending_a_malformed_report_is_audited(world: World, path: str) -> None:
    response = world.client.post(path, json={"receipt": 1}, headers=world.auth("executor"))
    assert _error(response) == (422, "E_INVALID")
    assert _refused(world) == [("E_INVALID", "executor-1", f"POST {path}")]


def test_a_viewer_reporting_an_outcome_is_forbidden_and_audited(world: World) -> None:
    proposal, approval_id = approved(world)
    receipt = signed_receipt(approval_id, proposal["action_hash"], "succeeded")
    response = world.client.post(
        "/v1/outcomes", json={"receipt": receipt}, headers=world.auth("viewer")
    )
    assert _error(response) == (403, "E_FORBIDDEN")
    assert _refused(world) == [("E_FORBIDDEN", "viewer", "POST /v1/outcomes")]


def test_a_service_token_is_looked_up_in_one_read(world: World) -> None:
    from services.checkpoint.errors import Refusal

    tables: list[str] = []

    def seen(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        tables.extend(t for t in ("sessions", "service_tokens") if f"FROM {t}" in statement)

    engine = world.checkpoint.engine
    sa.event.listen(engine, "before_cursor_execute", seen)
    try:
        assert world.accounts.authenticate(world.tokens["executor"]).name == "executor-1"
        assert tables == ["service_tokens"]
        del tables[:]
        assert world.accounts.authenticate(world.tokens["alice"]).name == "alice"
        assert tables == ["sessions"]
        world.accounts.revoke_service_token("executor-1")
        for token in (world.tokens["executor"], "als_" + "A" * 43):
            with pytest.raises(Refusal):
                world.accounts.authenticate(token)
    finally:
        sa.event.remove(engine, "before_cursor_execute", seen)
