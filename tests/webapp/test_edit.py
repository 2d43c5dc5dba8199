"""Editing a tool call's arguments in the web app, against the real checkpoint
(tests/checkpoint/harness.py) through the web app's own API client: an approver sees the
Edit form on a pending tool call, its POST (CSRF-checked like approve) lands on the new
proposal's page, which says who edited it from which proposal and what changed, and the
old page says it is superseded; what cannot be sent is refused before anything is."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airlock.settings import WebappSettings
from services.checkpoint.policy import Policy
from tests.checkpoint.harness import PASSWORD, World, make_world
from tests.checkpoint.tools import submit_tool
from webapp import create_app

from .conftest import ToCheckpoint, csrf_of

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

PID = "prop_tool0000001"
#: A refund over 200.00 needs two people, each typing the target.
TWO_FOR_BIG = b"""version = 1
[[rule]]
name = "big-refund-two-people"
effect = "approve"
quorum = 2
confirm = true
match.tool = "refund"
match.arguments = [{name = "amount", op = ">", value = 20000}]
"""


@dataclass
class Stack:
    world: World
    web: TestClient
    transport: ToCheckpoint

    def sign_in(self, username: str) -> None:
        page = self.web.get("/login")
        response = self.web.post(
            "/login",
            data={"username": username, "password": PASSWORD, "csrf_token": csrf_of(page.text)},
            follow_redirects=False,
        )
        assert response.status_code == 303, response.text

    def record(self, proposal_id: str) -> dict[str, Any]:
        response = self.world.client.get(
            f"/v1/proposals/{proposal_id}", headers=self.world.auth("admin")
        )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def edit_form(self, proposal_id: str = PID, **changes: str) -> dict[str, Any]:
        """The Edit form's fields as the page fills them, with ``changes`` typed in."""
        html = self.web.get(f"/proposals/{proposal_id}").text
        form = html[
            html.index('id="edit-form"') : html.index("</form>", html.index('id="edit-form"'))
        ]
        names = re.findall(r'name="arg_name" value="([^"]*)"', form)
        shown = re.findall(r'name="arg_value" class="edit-arg" [^>]* value="([^"]*)"', form)
        values = [
            changes.get(n, v.replace("&#34;", '"')) for n, v in zip(names, shown, strict=True)
        ]
        action_hash = re.search(r'name="action_hash" value="([^"]+)"', form)
        assert action_hash is not None
        return {
            "csrf_token": csrf_of(html),
            "action_hash": action_hash.group(1),
            "arg_name": names,
            "arg_value": values,
            "note": "",
        }


def _stack(url: str, tmp_path: Path, policy: Policy | None = None) -> Iterator[Stack]:
    world = make_world(url, tmp_path, policy)
    settings = WebappSettings(
        checkpoint_url="http://checkpoint.invalid", secure_cookies=False, allowed_hosts="testserver"
    )
    transport = ToCheckpoint(world.client)
    app = create_app(settings, transport=transport, now=world.clock)
    try:
        with TestClient(app) as web:
            yield Stack(world, web, transport)
    finally:
        world.client.close()
        world.checkpoint.db.dispose()


@pytest.fixture
def stack(sqlite_url: str, tmp_path: Path) -> Iterator[Stack]:
    yield from _stack(sqlite_url, tmp_path)


@pytest.fixture
def big_stack(sqlite_url: str, tmp_path: Path) -> Iterator[Stack]:
    yield from _stack(sqlite_url, tmp_path, Policy.from_bytes(TWO_FOR_BIG, "<test>"))


def test_an_approver_edits_and_lands_on_the_new_proposal(stack: Stack) -> None:
    old = submit_tool(stack.world).json()
    stack.sign_in("alice")
    html = stack.web.get(f"/proposals/{PID}").text
    assert 'id="edit-form"' in html
    assert re.search(r'data-argument="amount" [^>]* value="12500"', html)
    assert 'value="&#34;EUR&#34;"' in html  # prefilled with its JSON value
    form = stack.edit_form(amount="1500")
    form["note"] = "shipping only"
    response = stack.web.post(f"/proposals/{PID}/edit", data=form, follow_redirects=False)
    assert response.status_code == 303, response.text
    new_id = stack.record(PID)["superseded_by"]
    assert response.headers["location"] == f"/proposals/{new_id}"
    new = stack.record(new_id)
    assert new["action"]["arguments"] == {"order": "order-881", "amount": 1500, "currency": "EUR"}
    assert new["action_hash"] != old["action_hash"]
    assert new["edit"]["note"] == "shipping only"
    assert (new["state"], [v["voter"] for v in new["votes"]]) == ("approved", ["alice"])
    page = stack.web.get(f"/proposals/{new_id}").text
    assert "Your edit was recorded as this new proposal" in page
    assert (
        f'Edited by alice from <a href="/proposals/{PID}" id="edited-from"><code>{PID}</code></a>'
        in page
    )
    changes = page[page.index('id="changes"') : page.index("</table>", page.index('id="changes"'))]
    assert (
        "<td><code>amount</code></td><td><code>12500</code></td><td><code>1500</code></td>"
        in changes
    )
    assert "currency" not in changes  # only what changed
    assert 'id="state" data-state="approved"' in page
    old_page = stack.web.get(f"/proposals/{PID}").text
    assert f'Superseded by <a href="/proposals/{new_id}" id="superseded-link">' in old_page
    assert 'id="state" data-state="withdrawn"' in old_page
    assert 'id="edit-form"' not in old_page  # withdrawn: nothing to decide


def test_only_an_approver_sees_the_edit_form_and_only_on_a_tool_call(stack: Stack) -> None:
    submit_tool(stack.world)
    cloud = stack.world.submit().json()
    stack.sign_in("viewer")
    assert 'id="edit-form"' not in stack.web.get(f"/proposals/{PID}").text
    stack.sign_in("alice")
    assert 'id="edit-form"' not in stack.web.get(f"/proposals/{cloud['id']}").text
    bare = submit_tool(
        stack.world, proposal_id="prop_tool0000002", effect_key="ping:1", arguments={}
    ).json()
    assert 'id="edit-form"' not in stack.web.get(f"/proposals/{bare['id']}").text  # nothing to edit
    assert 'id="edit-form"' in stack.web.get(f"/proposals/{PID}").text


def test_an_edit_without_the_forms_token_is_refused_and_sends_nothing(stack: Stack) -> None:
    submit_tool(stack.world)
    stack.sign_in("alice")
    form = stack.edit_form(amount="1500")
    sent = len(stack.transport.requests)
    for token in ("", "0" * 64):
        response = stack.web.post(
            f"/proposals/{PID}/edit", data={**form, "csrf_token": token}, follow_redirects=False
        )
        assert response.status_code == 403, response.text
    assert not any("/edit" in r for r in stack.transport.requests[sent:])
    assert stack.record(PID)["state"] == "pending"


def test_what_cannot_be_an_edit_is_refused_and_the_typed_values_kept(stack: Stack) -> None:
    submit_tool(stack.world)
    stack.sign_in("alice")
    # Nothing changed, or not JSON for a number: the web app sends nothing.
    sent = len(stack.transport.requests)
    for changes, words in (({}, "you changed no argument"), ({"amount": "lots"}, "is not JSON")):
        response = stack.web.post(f"/proposals/{PID}/edit", data=stack.edit_form(**changes))
        assert response.status_code == 422 and words in response.text
    assert not any(r.startswith("POST") for r in stack.transport.requests[sent:])
    # Text where a number was: the checkpoint refuses the change of type; kept typed.
    response = stack.web.post(f"/proposals/{PID}/edit", data=stack.edit_form(amount='"1500"'))
    assert response.status_code == 422 and "E_INVALID" in response.text
    assert 'value="&#34;1500&#34;"' in response.text and 'id="edit-details" open' in response.text
    assert stack.record(PID)["state"] == "pending"
    # Text typed without quotes for a text argument is that text.
    response = stack.web.post(
        f"/proposals/{PID}/edit", data=stack.edit_form(currency="USD"), follow_redirects=False
    )
    assert response.status_code == 303, response.text
    new = stack.record(stack.record(PID)["superseded_by"])
    assert new["action"]["arguments"]["currency"] == "USD"


def test_an_edit_into_two_person_territory_needs_the_target_and_a_second_vote(
    big_stack: Stack,
) -> None:
    stack = big_stack
    submit_tool(stack.world)
    stack.sign_in("alice")
    untyped = stack.web.post(f"/proposals/{PID}/edit", data=stack.edit_form(amount="50000"))
    assert untyped.status_code == 422 and "E_CONFIRM_REQUIRED" in untyped.text
    assert stack.record(PID)["state"] == "pending"
    form = {**stack.edit_form(amount="50000"), "confirm": "order-881"}
    response = stack.web.post(f"/proposals/{PID}/edit", data=form, follow_redirects=False)
    assert response.status_code == 303, response.text
    new = stack.record(stack.record(PID)["superseded_by"])
    assert (new["state"], new["votes_needed"], new["policy"]["quorum"]) == ("pending", 1, 2)
    page = stack.web.get(response.headers["location"]).text
    assert 'id="my-vote"' in page  # alice's vote stands; someone else must approve
