"""The executor's client to the checkpoint (services/executor/_http.py): bearer token only.

Over httpx's mock transport, which sits behind the client's cookie handling: what the
client keeps from an answer and sends with the next request is what it would on a socket.
"""

from __future__ import annotations

import urllib.request
from typing import Any

import httpx
import pytest

from airlock import apiclient
from services.executor import checkpoint_client

BASE = "http://checkpoint.test"


class _SettingCookies:
    """Answers every request with a ``Set-Cookie``; records each request's headers."""

    def __init__(self) -> None:
        self.seen: list[httpx.Headers] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request.headers)
        headers = [("Set-Cookie", "session=stolen; Path=/"), ("Set-Cookie", "b=2")]
        return httpx.Response(200, headers=headers, json={"items": [], "cursor": 0})


def test_a_cookie_set_by_the_checkpoint_is_not_sent_back_by_the_executor() -> None:
    server = _SettingCookies()
    transport = httpx.MockTransport(server.handler)
    with checkpoint_client(BASE, "t", poll_wait_s=1, transport=transport) as client:
        for _ in range(2):
            with client.stream("GET", f"{BASE}/v1/feed") as response:
                response.read()
        client.post(f"{BASE}/v1/receipts", json=[])
        assert not client.cookies and list(client.cookies.jar) == []
    assert [h.get("cookie") for h in server.seen] == [None, None, None]
    assert {h["authorization"] for h in server.seen} == {"Bearer t"}


def test_the_executor_s_client_refuses_cookies_set_by_hand() -> None:
    transport = httpx.MockTransport(_SettingCookies().handler)
    with checkpoint_client(BASE, "t", poll_wait_s=1, transport=transport) as client:
        client.cookies.set("session", "x")
        assert not client.cookies
        with pytest.raises(AttributeError):
            client.cookies = {"session": "x"}


def test_a_client_with_cookies_sends_them_back() -> None:
    """The control: httpx's default keeps the cookie, as the executor's client must not."""
    server = _SettingCookies()
    with apiclient.checkpoint_http(
        BASE, timeout=5.0, transport=httpx.MockTransport(server.handler)
    ) as client:
        client.get(f"{BASE}/v1/feed")
        client.get(f"{BASE}/v1/feed")
    assert server.seen[0].get("cookie") is None
    assert "session=stolen" in server.seen[1]["cookie"]


def test_the_executor_s_client_does_not_parse_answers_for_cookies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The point of the client for speed: no ``http.cookiejar`` work per answer (httpx
    wraps each request in a ``urllib`` one for the jar, and the jar parses the answer)."""
    parsed: list[object] = []
    wrap = urllib.request.Request.__init__

    def counting(self: urllib.request.Request, *args: Any, **kwargs: Any) -> None:
        parsed.append(self)
        wrap(self, *args, **kwargs)

    monkeypatch.setattr(urllib.request.Request, "__init__", counting)
    transport = httpx.MockTransport(_SettingCookies().handler)
    with checkpoint_client(BASE, "t", poll_wait_s=1, transport=transport) as client:
        client.get(f"{BASE}/v1/feed")
    assert parsed == []
    with apiclient.checkpoint_http(BASE, timeout=5.0, transport=transport) as client:
        client.get(f"{BASE}/v1/feed")
    assert len(parsed) == 1  # the control: httpx's default parses each answer
