"""An outcome report answers the proposal as it stored it: the answer is built from the
row the report locked and what its transaction wrote, not read back, so each test here
holds it to a read of the record afterwards (a GET, and the view as the reporter sees it),
on every path an outcome lands by."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.checkpoint import views
from services.checkpoint.models import notify_events
from services.checkpoint.notify import Dispatcher
from tests.notify.support import (
    ROUTED_TAGS,
    receiver,
    routed_policy,
    webhook_secret,
    write_secret,
)

from .harness import START, World, approved, make_world, signed_receipt
from .test_outcomes import _close
from .test_tool_call_reports import gate_receipt, gated  # noqa: F401 - a fixture
from .tools import approved_tool


def _reported(world: World, receipt: dict[str, Any], who: str = "executor") -> dict[str, Any]:
    """Report ``receipt`` as ``who``; the answer, checked against the record read after."""
    answer = world.client.post("/v1/outcomes", json={"receipt": receipt}, headers=world.auth(who))
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    shown = world.client.get(f"/v1/proposals/{body['id']}", headers=world.auth("viewer"))
    assert body == shown.json()
    reporter = world.accounts.authenticate(world.tokens[who]).name
    with world.checkpoint.engine.connect() as conn:
        read = views.view_by_id(conn, body["id"], world.checkpoint.notify, reporter)
    assert body == read.model_dump(mode="json")
    return body


@pytest.mark.parametrize("outcome", ["succeeded", "failed", "refused", "in_doubt"])
def test_an_outcome_answers_the_record_as_stored(world: World, outcome: str) -> None:
    proposal, approval_id = approved(world)
    # A note from another executor first: the answer shows the proposal's notes too.
    note = signed_receipt(
        approval_id, None, "refused", executor="airlock-executor/staging", refusal_code="E_AUDIENCE"
    )
    noted = world.client.post(
        "/v1/refusals", json={"receipt": note}, headers=world.auth("executor")
    )
    assert noted.status_code == 200, noted.text
    world.clock.advance(3)
    code = "E_PRECONDITION" if outcome == "refused" else None
    body = _reported(
        world, signed_receipt(approval_id, proposal["action_hash"], outcome, refusal_code=code)
    )
    assert body["updated_at"] == world.clock() and len(body["executor_refusals"]) == 1


def test_the_executors_resolution_answers_the_record_as_stored(world: World) -> None:
    proposal, approval_id = approved(world)
    _reported(world, signed_receipt(approval_id, proposal["action_hash"], "in_doubt"))
    world.clock.advance(5)
    resolution = {"decision": "did_not_happen", "by": "ops", "at": START, "note": "checked"}
    body = _reported(
        world,
        signed_receipt(
            approval_id, proposal["action_hash"], "resolved", resolution=resolution, at=START + 5
        ),
    )
    assert (body["state"], body["outcome"]["outcome"]) == ("failed", "resolved")


@pytest.mark.parametrize("newer", ["pending", "approved"])
def test_a_late_in_doubt_answers_the_record_as_stored(world: World, newer: str) -> None:
    old, approval_id = approved(world)
    _close(world, old["id"], "revoked")
    if newer == "pending":
        assert world.submit(proposal_id="prop_test0000002").status_code == 201
    else:
        approved(world, proposal_id="prop_test0000002")
    body = _reported(world, signed_receipt(approval_id, old["action_hash"], "in_doubt"))
    assert body["outcome"]["late"] is True
    held = body["state"] == "revoked" and body["outcome"]["target_held_by"] == "prop_test0000002"
    assert held == (newer == "approved")


def test_a_gates_outcome_answers_the_record_as_stored(gated: World) -> None:  # noqa: F811
    record = approved_tool(gated)
    body = _reported(gated, gate_receipt(record), who="agent")
    assert body["state"] == "executed"


@pytest.fixture
def routed(tmp_path: Path) -> Iterator[World]:
    with receiver() as hook:
        secret = write_secret(tmp_path, "hook", webhook_secret())
        channel = f'[notify]\n[notify.channels.hook]\ntype = "webhook"\nurl = "{hook.url}"\n'
        policy = routed_policy(
            channel + f'secret_file = "{secret}"\n', payments='notify = ["hook"]'
        )
        w = make_world(f"sqlite:///{tmp_path / 'cp.db'}", tmp_path, policy)
        try:
            yield w
        finally:
            dispatcher: Dispatcher = w.app.state.notify
            dispatcher.stop()
            w.client.close()
            w.checkpoint.db.dispose()


def test_a_routed_proposals_outcome_answers_the_record_as_stored(routed: World) -> None:
    proposal, approval_id = approved(routed, resource_id="i-routed1", tags=ROUTED_TAGS)
    body = _reported(routed, signed_receipt(approval_id, proposal["action_hash"], "succeeded"))
    assert body["route"] is not None and body["state"] == "executed"
    # The event is told of the proposal as the report left it.
    with routed.checkpoint.engine.connect() as conn:
        told = conn.execute(
            notify_events.select().where(notify_events.c.kind == "proposal.executed")
        ).one()
    data = json.loads(told.body)["data"]
    assert (data["state"], data["votes"]["by"]) == ("executed", ["alice"])
