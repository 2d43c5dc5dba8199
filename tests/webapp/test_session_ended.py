"""A session that ends while a decision form is open: the person is told plainly.

Signed out in another tab, or the session ended at the checkpoint (revoked, expired):
a decision sent from the page still open is not recorded, and the sign-in page says so
("nothing was approved") instead of "form refused" or nothing, then brings the person
back to that proposal. The CSRF check is as strict as ever: nothing is sent without a
token bound to the session the request carries.
"""

from __future__ import annotations

import httpx
import pytest

from .conftest import Site, csrf_of
from .fakes import PASSWORD, action_value

PROPOSAL = "/proposals/prop_fake000001"


def _approve(site: Site, token: str, **headers: str) -> httpx.Response:
    record = site.fake.proposals["prop_fake000001"]
    return site.client.post(
        f"{PROPOSAL}/approve",
        data={"action_hash": record["action_hash"], "csrf_token": token, "note": "ok"},
        headers=headers,
        follow_redirects=False,
    )


def _sign_in_from(site: Site, login_html: str) -> httpx.Response:
    """Submit the sign-in form of ``login_html`` as it is (its ``next`` included)."""
    next_path = login_html.split('name="next" value="', 1)[1].split('"', 1)[0]
    return site.client.post(
        "/login",
        data={
            "username": "alice",
            "password": PASSWORD,
            "csrf_token": csrf_of(login_html),
            "next": next_path,
        },
        follow_redirects=False,
    )


def test_approving_after_signing_out_in_another_tab_says_the_session_ended(site: Site) -> None:
    site.sign_in()
    site.fake.add(action_value())
    token = site.csrf(PROPOSAL)  # the proposal page, left open
    site.client.post("/logout", data={"csrf_token": site.csrf("/")})  # "another tab"

    response = _approve(site, token)
    assert response.status_code == 303
    assert response.headers["location"] == "/login?next=%2Fproposals%2Fprop_fake000001"
    login = site.client.get(response.headers["location"]).text
    assert "Your session had ended, so your approval was not recorded" in login
    assert "nothing was approved" in login
    assert "Form refused" not in login and "CSRF" not in login
    assert site.fake.calls == []

    back = _sign_in_from(site, login)
    assert back.status_code == 303 and back.headers["location"] == PROPOSAL
    page = site.client.get(PROPOSAL).text
    assert 'id="approve-form"' in page and "session had ended" not in page
    assert site.fake.calls == []


@pytest.mark.parametrize("where", ["me", "decision"])
def test_approving_after_the_checkpoint_ended_the_session_says_so_and_returns(
    site: Site, where: str
) -> None:
    """Ended at the checkpoint (revoked, expired): the cookie is still there and the form's
    token matches it, so the checkpoint is the one that refuses it, when the page asks
    who is signed in or on the approve call itself."""
    site.sign_in()
    site.fake.add(action_value())
    token = site.csrf(PROPOSAL)
    if where == "me":
        site.fake.sessions.clear()
    else:
        real = site.fake.handle

        def ends_on_approve(request: httpx.Request) -> httpx.Response:
            if request.url.path.endswith("/approve"):
                site.fake.sessions.clear()
            return real(request)

        site.fake.handle = ends_on_approve  # type: ignore[method-assign]

    response = _approve(site, token)
    assert response.status_code == 303
    assert response.headers["location"] == "/login?next=%2Fproposals%2Fprop_fake000001"
    cleared = [c for c in response.headers.get_list("set-cookie") if "airlock_session=" in c]
    assert cleared and all("Max-Age=0" in c for c in cleared)
    login = site.client.get(response.headers["location"]).text
    assert "your approval was not recorded: nothing was approved" in login
    assert site.fake.proposals["prop_fake000001"]["votes"] == []

    back = _sign_in_from(site, login)
    assert back.headers["location"] == PROPOSAL


@pytest.mark.parametrize(
    ("verb", "fields", "said"),
    [
        ("reject", {"reason_code": "not_idle"}, "the proposal was not rejected"),
        ("revoke", {}, "the approval was not revoked"),
        ("resolve", {"decision": "happened"}, "decision on the in-doubt execution was not"),
    ],
)
def test_every_decision_after_the_session_ended_says_what_was_not_done(
    site: Site, verb: str, fields: dict[str, str], said: str
) -> None:
    site.sign_in()
    site.fake.add(action_value())
    token = site.csrf(PROPOSAL)
    site.client.post("/logout", data={"csrf_token": site.csrf("/")})
    response = site.client.post(
        f"{PROPOSAL}/{verb}", data={"csrf_token": token, **fields}, follow_redirects=False
    )
    assert response.headers["location"] == "/login?next=%2Fproposals%2Fprop_fake000001"
    assert said in site.client.get(response.headers["location"]).text
    assert site.fake.calls == []


def test_a_page_whose_session_ended_at_the_checkpoint_says_so_on_the_sign_in_page(
    site: Site,
) -> None:
    site.sign_in()
    site.fake.add(action_value())
    site.fake.sessions.clear()
    response = site.client.get(PROPOSAL, follow_redirects=False)
    assert response.headers["location"] == "/login?next=%2Fproposals%2Fprop_fake000001"
    login = site.client.get(response.headers["location"]).text
    assert "Your session has ended" in login
    # Shown once: the cookie that carried it is cleared.
    assert "Your session has ended" not in site.client.get("/login").text


def test_a_link_cannot_make_the_sign_in_page_claim_a_session_ended(site: Site) -> None:
    html = site.client.get("/login?next=/proposals/prop_fake000001&ended=approve").text
    assert 'id="login-notice"' not in html


def test_a_cross_site_form_without_a_session_is_still_refused_as_a_forgery(
    site: Site,
) -> None:
    site.sign_in()
    site.fake.add(action_value())
    token = site.csrf(PROPOSAL)
    site.client.post("/logout", data={"csrf_token": site.csrf("/")})
    response = _approve(site, token, **{"Sec-Fetch-Site": "cross-site"})
    assert response.status_code == 403
    assert "another site" in response.text
    response = _approve(site, "", Origin="https://evil.example")
    assert response.status_code == 403
    assert site.fake.calls == []


def test_a_form_without_a_token_and_no_session_is_still_refused(site: Site) -> None:
    site.fake.add(action_value())
    site.client.get("/login")  # the CSRF key cookie, no session
    response = _approve(site, "")
    assert response.status_code == 403
    assert "no security token" in response.text
    assert site.fake.calls == []


def test_a_stale_token_with_a_session_is_still_refused(site: Site) -> None:
    """Signed out and in again elsewhere: the old page's token matches the new session
    no better than a forged one, and nothing is sent."""
    site.sign_in()
    site.fake.add(action_value())
    token = site.csrf(PROPOSAL)
    site.sign_in("bob")
    response = _approve(site, token)
    assert response.status_code == 403
    assert site.fake.calls == []
