"""Signing out of the web app always signs the person out of this browser."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from .conftest import Site, csrf_of


def _set_cookies(response: object) -> list[str]:
    return list(response.headers.get_list("set-cookie"))  # type: ignore[attr-defined]


def test_sign_out_ends_the_session_at_the_checkpoint(site: Site) -> None:
    site.sign_in()
    response = site.client.post(
        "/logout", data={"csrf_token": site.csrf("/")}, follow_redirects=False
    )
    assert response.status_code == 303 and response.headers["location"] == "/login"
    assert any(c.startswith('airlock_session=""') for c in _set_cookies(response))
    assert site.fake.sessions == {}


def _sign_out_unreachable(site: Site) -> Callable[[httpx.Request], httpx.Response]:
    """Make the checkpoint unreachable for ending a session; return its real handler."""
    real = site.fake.handle

    def down(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/sessions/current":
            raise httpx.ConnectError("refused")
        return real(request)

    site.fake.handle = down  # type: ignore[method-assign]
    return real


def test_sign_out_while_the_checkpoint_is_down_still_clears_the_cookie(site: Site) -> None:
    site.sign_in()
    token = site.csrf("/")
    real = _sign_out_unreachable(site)
    response = site.client.post("/logout", data={"csrf_token": token}, follow_redirects=False)
    assert response.status_code == 200
    assert any(
        c.startswith('airlock_session=""') and "Max-Age=0" in c for c in _set_cookies(response)
    )
    assert "could not be told" in response.text
    assert 'id="username"' in response.text  # the sign-in form, ready to use
    # Signed out here: the next page asks to sign in.
    site.fake.handle = real  # type: ignore[method-assign]
    assert site.client.get("/", follow_redirects=False).status_code == 303
    # The sign-in form on that page works: its token is not bound to the ended session.
    signed_in = site.client.post(
        "/login",
        data={
            "username": "alice",
            "password": "correct horse battery staple",
            "csrf_token": csrf_of(response.text),
        },
        follow_redirects=False,
    )
    assert signed_in.status_code == 303


def test_signing_in_over_a_session_ends_the_one_it_replaces(site: Site) -> None:
    site.sign_in("alice")
    [alice] = site.fake.sessions
    site.sign_in("bob")  # the same browser, someone else
    assert list(site.fake.sessions.values()) == ["bob"]
    [bob] = site.fake.sessions
    site.sign_in("bob")  # and again
    assert list(site.fake.sessions.values()) == ["bob"] and alice not in site.fake.sessions
    assert bob not in site.fake.sessions
    assert site.client.get("/").status_code == 200


def test_a_sign_in_succeeds_when_the_replaced_session_cannot_be_ended(site: Site) -> None:
    site.sign_in("alice")
    _sign_out_unreachable(site)
    site.sign_in("bob")
    assert sorted(site.fake.sessions.values()) == ["alice", "bob"]  # alice's expires on its own
    assert site.client.get("/").status_code == 200
