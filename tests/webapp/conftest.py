"""Fixtures for the web app tests: the app over a FakeCheckpoint (or the real checkpoint
through :class:`ToCheckpoint`), and a signed-in client."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from airlock.settings import WebappSettings
from tests.checkpoint.harness import World
from webapp import create_app

from .fakes import NOW, PASSWORD, FakeCheckpoint

with warnings.catch_warnings():
    # starlette warns at import that it would prefer a newer httpx for its test client.
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

_CSRF = re.compile(r'name="csrf_token" value="([0-9a-f]{64})"')


def csrf_of(html: str) -> str:
    match = _CSRF.search(html)
    assert match is not None, "the page has no CSRF field"
    return match.group(1)


@dataclass
class WebStack:
    """A checkpoint world (``tests/checkpoint/harness.py``) and a web app client on it."""

    world: World
    web: TestClient

    def sign_in(self, username: str) -> None:
        page = self.web.get("/login")
        response = self.web.post(
            "/login",
            data={"username": username, "password": PASSWORD, "csrf_token": csrf_of(page.text)},
            follow_redirects=False,
        )
        assert response.status_code == 303, response.text


class ToCheckpoint(httpx.BaseTransport):
    """The web app's calls, handed to the real checkpoint app in this process
    (``tests/checkpoint/harness.py``); ``requests`` records each as ``METHOD /path?query``."""

    def __init__(self, checkpoint: TestClient) -> None:
        self._checkpoint = checkpoint
        self.requests: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        target = request.url.raw_path.decode("ascii")
        self.requests.append(f"{request.method} {target}")
        headers = {k: v for k, v in request.headers.items() if k not in ("host", "content-length")}
        answer = self._checkpoint.request(
            request.method, target, headers=headers, content=request.read()
        )
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)


@dataclass
class Site:
    fake: FakeCheckpoint
    client: TestClient

    def sign_in(self, username: str = "alice") -> None:
        page = self.client.get("/login")
        response = self.client.post(
            "/login",
            data={"username": username, "password": PASSWORD, "csrf_token": csrf_of(page.text)},
            follow_redirects=False,
        )
        assert response.status_code == 303, response.text

    def csrf(self, path: str = "/") -> str:
        return csrf_of(self.client.get(path).text)


def make_site(*, base_url: str = "http://testserver", secure: bool = False) -> Site:
    fake = FakeCheckpoint()
    settings = WebappSettings(
        checkpoint_url="http://checkpoint.invalid",
        secure_cookies=secure,
        allowed_hosts=(httpx.URL(base_url).host,),
    )
    app = create_app(settings, transport=fake.transport(), now=lambda: NOW)
    return Site(fake, TestClient(app, base_url=base_url))


@pytest.fixture
def site() -> Iterator[Site]:
    s = make_site()
    with s.client:
        yield s
