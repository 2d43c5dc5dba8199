"""A routed proposal's page, through the real checkpoint: it says whom the proposal is
routed to and when the next group is asked; a person in none of the groups asked so far
is offered no Approve (nor a bulk checkbox) but told who may approve, and may still
reject. The checkpoint stays the judge: its refusal is tested in tests/notify."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from airlock.settings import WebappSettings
from tests.checkpoint.harness import make_world
from tests.notify.support import ROUTED_TAGS, SLA_S, routed_policy
from webapp import create_app
from webapp.present import timestamp

from .conftest import ToCheckpoint, WebStack

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

PID = "prop_routepage0001"
CHECKBOX = f'name="id" value="{PID}"'


class Stack(WebStack):
    def page(self) -> str:
        answer = self.web.get(f"/proposals/{PID}")
        assert answer.status_code == 200, answer.text
        return answer.text


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    world = make_world(f"sqlite:///{tmp_path / 'cp.db'}", tmp_path, routed_policy(""))
    settings = WebappSettings(
        checkpoint_url="http://checkpoint.invalid", secure_cookies=False, allowed_hosts="testserver"
    )
    app = create_app(settings, transport=ToCheckpoint(world.client), now=world.clock)
    submitted = world.submit(proposal_id=PID, resource_id="i-routed1", tags=ROUTED_TAGS)
    assert submitted.status_code == 201, submitted.text
    try:
        with TestClient(app) as web:
            yield Stack(world, web)
    finally:
        world.client.close()
        world.checkpoint.db.dispose()


def test_a_person_outside_the_routed_groups_sees_who_may_approve_not_approve(
    stack: Stack,
) -> None:
    stack.sign_in("carol")
    page = stack.page()
    due = timestamp(stack.world.clock() + SLA_S)
    assert f"payments (asked), leads (next, at {due} if unanswered)" in page
    assert 'id="route" data-may-vote="no"' in page
    assert 'id="approve-form"' not in page
    assert 'id="route-only"' in page and "Only a member of payments may approve" in page
    assert 'id="reject-form"' in page  # rejecting is not routed
    assert CHECKBOX not in stack.web.get("/").text  # nor offered in a bulk approval


def test_a_member_of_the_routed_group_sees_the_approve_form(stack: Stack) -> None:
    stack.sign_in("alice")
    page = stack.page()
    assert 'id="route" data-may-vote="yes"' in page
    assert 'id="approve-form"' in page and 'id="route-only"' not in page
    assert CHECKBOX in stack.web.get("/").text


def test_once_escalated_the_next_group_is_offered_approve(stack: Stack) -> None:
    stack.world.clock.advance(SLA_S)
    assert stack.world.checkpoint.sweep()["escalated"] == 1
    stack.sign_in("carol")
    page = stack.page()
    assert "payments (asked), leads (asked)" in page
    assert 'id="approve-form"' in page and 'id="route-only"' not in page
