"""The Origin check behind a TLS-terminating reverse proxy.

The documented deployment puts a TLS proxy in front of the web app: the browser speaks
https to the proxy, the app sees plain http with the same Host. A real same-origin POST
then says ``Origin: https://host`` and must be accepted; any other host is another site.
"""

from __future__ import annotations

import pytest

from .conftest import csrf_of, make_site
from .fakes import PASSWORD


def _login(origin: str) -> int:
    # Not secure=True: the test client, like a browser, would not send Secure cookies back
    # over the http it speaks here; the proxy's https leg is what the Origin shows.
    s = make_site(base_url="http://airlock.example")
    with s.client:
        page = s.client.get("/login")
        response = s.client.post(
            "/login",
            data={"username": "alice", "password": PASSWORD, "csrf_token": csrf_of(page.text)},
            headers={"Origin": origin},
            follow_redirects=False,
        )
        if response.status_code == 403:
            assert "sent from another site" in response.text
        return int(response.status_code)


@pytest.mark.parametrize("origin", ["https://airlock.example", "http://airlock.example", "null"])
def test_same_host_origin_is_accepted_behind_a_tls_proxy(origin: str) -> None:
    assert _login(origin) == 303


@pytest.mark.parametrize(
    "origin",
    [
        "https://evil.example",
        "http://evil.example",
        "https://airlock.example.evil.example",
        "https://airlock.example:8443",
        "ftp://airlock.example",
        "https://user@airlock.example",
    ],
)
def test_origin_of_another_site_is_refused(origin: str) -> None:
    assert _login(origin) == 403


def test_https_request_does_not_accept_an_http_origin() -> None:
    # Only the proxy case widens the check: an app reached over https sees no http origin.
    s = make_site(base_url="https://airlock.example")
    with s.client:
        page = s.client.get("/login")
        response = s.client.post(
            "/login",
            data={"username": "alice", "password": PASSWORD, "csrf_token": csrf_of(page.text)},
            headers={"Origin": "http://airlock.example"},
            follow_redirects=False,
        )
        assert response.status_code == 403
