"""The "your decision was recorded" banner comes only from a decision just made.

A link cannot plant it: the POST handler sets a short-lived HttpOnly, SameSite=Strict
cookie naming the proposal and the decision, and the proposal page shows the banner
once and clears the cookie.
"""

from __future__ import annotations

from .conftest import Site
from .fakes import action_value


def _set_cookies(response: object) -> list[str]:
    return list(response.headers.get_list("set-cookie"))  # type: ignore[attr-defined]


def test_a_link_with_done_shows_no_success_banner(site: Site) -> None:
    site.sign_in()
    site.fake.add(action_value())
    for verb in ("approve", "reject", "revoke", "resolve"):
        html = site.client.get(f"/proposals/prop_fake000001?done={verb}").text
        assert 'id="done"' not in html
    assert "Your approval was recorded." not in html
    assert site.fake.calls == []


def test_the_banner_appears_once_after_a_real_approval(site: Site) -> None:
    site.sign_in()
    record = site.fake.add(action_value())
    token = site.csrf("/proposals/prop_fake000001")
    response = site.client.post(
        "/proposals/prop_fake000001/approve",
        data={"csrf_token": token, "action_hash": record["action_hash"]},
        follow_redirects=False,
    )
    assert response.status_code == 303
    assert response.headers["location"] == "/proposals/prop_fake000001"
    (flash,) = [c for c in _set_cookies(response) if c.startswith("airlock_done=")]
    flags = flash.lower()
    assert "httponly" in flags and "samesite=strict" in flags and "max-age=60" in flags
    first = site.client.get("/proposals/prop_fake000001")
    assert 'id="done"' in first.text and "Your approval was recorded." in first.text
    assert any(c.startswith('airlock_done=""') and "Max-Age=0" in c for c in _set_cookies(first))
    again = site.client.get("/proposals/prop_fake000001").text
    assert 'id="done"' not in again


def test_the_banner_of_one_proposal_is_not_shown_on_another(site: Site) -> None:
    site.sign_in()
    site.fake.add(action_value())
    site.fake.add(action_value(proposal_id="prop_fake000002", resource_id="i-t4n0other"))
    site.client.cookies["airlock_done"] = "prop_fake000002:approve"
    html = site.client.get("/proposals/prop_fake000001").text
    assert 'id="done"' not in html
