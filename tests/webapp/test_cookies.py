"""Cookies across sites: a link from elsewhere must not sign a person out or break forms.

Both cookies are HttpOnly. The session cookie is SameSite=Strict, so a top-level
navigation from another site (a link in chat or e-mail) arrives without it; the CSRF-key
cookie is SameSite=Lax, so that navigation still carries it. Any Set-Cookie on such a
response is applied by the browser, so the app must not send one that deletes the
session or replaces the CSRF key.
"""

from __future__ import annotations

from .conftest import Site, csrf_of
from .fakes import action_value


def _set_cookies(response: object) -> list[str]:
    return list(response.headers.get_list("set-cookie"))  # type: ignore[attr-defined]


def test_cross_site_link_without_cookies_does_not_delete_the_session(site: Site) -> None:
    site.sign_in()
    site.fake.add(action_value())
    signed_in = dict(site.client.cookies)
    site.client.cookies.clear()  # SameSite=Strict: the browser sends neither cookie
    response = site.client.get(
        "/proposals/prop_fake000001",
        headers={"Sec-Fetch-Site": "cross-site"},
        follow_redirects=False,
    )
    assert response.status_code == 303
    assert response.headers["location"] == "/login?next=%2Fproposals%2Fprop_fake000001"
    assert not any(c.startswith("airlock_session=") for c in _set_cookies(response))
    # The browser keeps the session, so the person is still signed in everywhere.
    site.client.cookies.update(signed_in)
    assert site.client.get("/proposals/prop_fake000001", follow_redirects=False).status_code == 200


def test_cross_site_link_with_only_the_csrf_cookie_keeps_the_key(site: Site) -> None:
    site.sign_in()
    site.fake.add(action_value())
    token = site.csrf("/proposals/prop_fake000001")
    session = site.client.cookies["airlock_session"]
    del site.client.cookies["airlock_session"]  # Lax CSRF key sent, Strict session not
    response = site.client.get(
        "/proposals/prop_fake000001",
        headers={"Sec-Fetch-Site": "cross-site"},
        follow_redirects=False,
    )
    assert response.status_code == 303
    assert _set_cookies(response) == []  # neither deleted nor replaced
    # A form opened before the link still works afterwards.
    site.client.cookies["airlock_session"] = session
    posted = site.client.post(
        "/proposals/prop_fake000001/approve",
        data={
            "csrf_token": token,
            "action_hash": site.fake.proposals["prop_fake000001"]["action_hash"],
        },
        follow_redirects=False,
    )
    assert posted.status_code == 303
    assert [c[0] for c in site.fake.calls] == ["approve"]


def test_expired_session_cookie_is_still_cleared(site: Site) -> None:
    site.sign_in()
    site.fake.sessions.clear()  # ended at the checkpoint
    response = site.client.get("/", follow_redirects=False)
    assert response.status_code == 303
    assert any(
        c.startswith('airlock_session=""') and "Max-Age=0" in c for c in _set_cookies(response)
    )


def test_csrf_key_cookie_is_lax_and_the_session_cookie_stays_strict(site: Site) -> None:
    page = site.client.get("/login")
    (key_cookie,) = _set_cookies(page)
    assert key_cookie.startswith("airlock_csrf=")
    assert "samesite=lax" in key_cookie.lower() and "httponly" in key_cookie.lower()
    response = site.client.post(
        "/login",
        data={
            "username": "alice",
            "password": "correct horse battery staple",
            "csrf_token": csrf_of(page.text),
        },
        follow_redirects=False,
    )
    (session_cookie,) = _set_cookies(response)
    assert session_cookie.startswith("airlock_session=")
    assert "samesite=strict" in session_cookie.lower()


def test_cross_site_post_without_the_key_does_not_replace_it(site: Site) -> None:
    site.sign_in()
    site.fake.add(action_value())
    token = site.csrf("/proposals/prop_fake000001")
    saved = dict(site.client.cookies)
    site.client.cookies.clear()  # a cross-site form POST carries neither cookie
    response = site.client.post(
        "/proposals/prop_fake000001/approve",
        data={"csrf_token": token, "action_hash": "sha256:" + "00" * 32},
        headers={"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
    )
    assert response.status_code == 403
    assert _set_cookies(response) == []
    site.client.cookies.update(saved)
    assert site.fake.calls == []


def test_csrf_is_still_enforced_with_the_lax_key(site: Site) -> None:
    site.sign_in()
    record = site.fake.add(action_value())
    for data in (
        {"action_hash": record["action_hash"]},
        {"action_hash": record["action_hash"], "csrf_token": "0" * 64},
    ):
        response = site.client.post("/proposals/prop_fake000001/approve", data=data)
        assert response.status_code == 403
    assert site.fake.calls == []
