"""The web app's sign-in goes through the checkpoint's throttle per browser address: the
web app forwards each browser's socket address (X-Forwarded-For), which the checkpoint
trusts from the web app's address only. A guesser's browser is slowed (429, the
checkpoint's Retry-After, a one-line notice); another person behind the same web app
signs in at once. The web app's own queue refresh keeps no idle session alive."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from airlock.settings import WebappSettings
from services.checkpoint import throttle
from tests.checkpoint.harness import PASSWORD, World, audit_events, make_world
from webapp import create_app
from webapp.errors import SIGN_IN_REFUSED, human_message

from .conftest import ToCheckpoint, csrf_of

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

WEBAPP = "10.40.0.1"
IDLE = 600


@dataclass
class Stack:
    world: World
    settings: WebappSettings
    transport: ToCheckpoint

    def browser(self, address: str) -> TestClient:
        app = create_app(self.settings, transport=self.transport, now=self.world.clock)
        return TestClient(app, client=(address, 50000))


@pytest.fixture
def stack(sqlite_url: str, tmp_path: Path) -> Iterator[Stack]:
    world = make_world(sqlite_url, tmp_path, trusted_proxies=(WEBAPP,), session_idle=IDLE)
    settings = WebappSettings(
        checkpoint_url="http://checkpoint.invalid", secure_cookies=False, allowed_hosts="testserver"
    )
    try:
        yield Stack(world, settings, ToCheckpoint(world.client_from(WEBAPP)))
    finally:
        world.client.close()
        world.checkpoint.db.dispose()


def _sign_in(browser: TestClient, username: str, password: str) -> httpx.Response:
    page = browser.get("/login")
    return browser.post(
        "/login",
        data={"username": username, "password": password, "csrf_token": csrf_of(page.text)},
        follow_redirects=False,
    )


def test_a_guessing_browser_is_slowed_and_another_person_signs_in_at_once(stack: Stack) -> None:
    guesser = stack.browser("198.51.100.7")
    for _ in range(throttle.PAIR_FREE):
        refused = _sign_in(guesser, "alice", "a wrong guess")
        assert refused.status_code == 401
        assert SIGN_IN_REFUSED in refused.text
    slowed = _sign_in(guesser, "alice", PASSWORD)  # even the right password, from there
    assert slowed.status_code == 429
    assert slowed.headers["Retry-After"] == "1"
    assert human_message("E_THROTTLED") in slowed.text
    alice = stack.browser("203.0.113.9")
    assert _sign_in(alice, "alice", PASSWORD).status_code == 303
    failed = audit_events(stack.world, "checkpoint.login.failed")
    assert {e["client"] for e in failed} == {"198.51.100.7"}
    assert audit_events(stack.world, "checkpoint.session.created")[-1]["client"] == "203.0.113.9"


def test_the_queue_refresh_keeps_no_idle_session_alive(stack: Stack) -> None:
    browser = stack.browser("203.0.113.9")
    assert _sign_in(browser, "alice", PASSWORD).status_code == 303
    stack.world.clock.advance(IDLE - 100)
    assert browser.get("/queue/rows").status_code == 200  # the page's own refresh
    stack.world.clock.advance(100)
    assert browser.get("/queue/rows").status_code == 401
    ended = browser.get("/", follow_redirects=False)
    assert ended.status_code == 303 and ended.headers["location"].startswith("/login")


def test_a_page_a_person_opens_keeps_the_session_alive(stack: Stack) -> None:
    browser = stack.browser("203.0.113.9")
    assert _sign_in(browser, "alice", PASSWORD).status_code == 303
    stack.world.clock.advance(IDLE - 100)
    assert browser.get("/").status_code == 200  # a person's own request: used
    stack.world.clock.advance(IDLE - 100)
    assert browser.get("/queue/rows").status_code == 200
