"""The Notifications page, against the real checkpoint (tests/checkpoint/harness.py): a
person sees their preference, saves a new one with the form (CSRF checked first), sees
it saved, and a personal Slack URL is never put back into the page."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from airlock.settings import WebappSettings
from tests.checkpoint.harness import make_world
from tests.notify.support import routed_policy
from webapp import create_app

from .conftest import ToCheckpoint, WebStack, csrf_of

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

SLACK = "https://hooks.slack.com/services/T0000/B0000/PERSONALSECRET"


class Stack(WebStack):
    def prefs(self, who: str) -> dict[str, object]:
        answer = self.world.client.get("/v1/me/notifications", headers=self.world.auth(who))
        body: dict[str, object] = answer.json()
        return body


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    policy = routed_policy("[notify.people]\n")
    world = make_world(f"sqlite:///{tmp_path / 'cp.db'}", tmp_path, policy)
    settings = WebappSettings(
        checkpoint_url="http://checkpoint.invalid", secure_cookies=False, allowed_hosts="testserver"
    )
    app = create_app(settings, transport=ToCheckpoint(world.client), now=world.clock)
    try:
        with TestClient(app) as web:
            yield Stack(world, web)
    finally:
        world.client.close()
        world.checkpoint.db.dispose()


def test_a_person_saves_their_preference_and_sees_it_saved(stack: Stack) -> None:
    stack.sign_in("alice")
    page = stack.web.get("/notifications")
    assert page.status_code == 200
    assert 'aria-current="page">Notifications' in page.text
    assert "You have set no preference" in page.text and "(payments)" in page.text
    form = {
        "csrf_token": csrf_of(page.text),
        "event": ["proposal.needs_vote", "proposal.escalated"],
        "email": "",
        "slack_url": SLACK,
        "action": "save",
    }
    saved = stack.web.post("/notifications", data=form, follow_redirects=False)
    assert saved.status_code == 303 and saved.headers["location"] == "/notifications"
    shown = stack.web.get("/notifications")
    assert "Your notification preferences were saved." in shown.text
    assert 'value="proposal.needs_vote" checked' in shown.text
    assert 'value="proposal.approved" checked' not in shown.text
    assert "PERSONALSECRET" not in shown.text and "hooks.slack.com …CRET" in shown.text
    assert stack.prefs("alice")["events"] == ["proposal.needs_vote", "proposal.escalated"]
    # Saved again with the URL field empty: the URL is kept.
    form = {"csrf_token": csrf_of(shown.text), "event": ["proposal.approved"], "action": "save"}
    stack.web.post("/notifications", data=form, follow_redirects=False)
    assert stack.prefs("alice")["slack"] == "hooks.slack.com …CRET"
    assert stack.prefs("alice")["events"] == ["proposal.approved"]
    # Back to the groups' default.
    page = stack.web.get("/notifications")
    form = {"csrf_token": csrf_of(page.text), "action": "default"}
    stack.web.post("/notifications", data=form, follow_redirects=False)
    assert stack.prefs("alice")["set"] is False


def test_a_form_without_the_csrf_token_changes_nothing(stack: Stack) -> None:
    stack.sign_in("alice")
    refused = stack.web.post(
        "/notifications", data={"event": ["proposal.approved"], "action": "save"}
    )
    assert refused.status_code == 403 and "Nothing was sent" in refused.text
    assert stack.prefs("alice")["set"] is False


def test_a_refused_preference_is_shown_with_the_checkpoints_reason(stack: Stack) -> None:
    stack.sign_in("bob")
    page = stack.web.get("/notifications")
    form = {
        "csrf_token": csrf_of(page.text),
        "slack_url": "https://evil.example/hook",
        "action": "save",
    }
    refused = stack.web.post("/notifications", data=form)
    assert refused.status_code == 403 and 'id="refusal"' in refused.text
    assert "E_FORBIDDEN" in refused.text
    assert stack.prefs("bob")["set"] is False
