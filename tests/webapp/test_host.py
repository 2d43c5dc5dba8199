"""The web app refuses a request whose Host names none of its names (DNS rebinding: a
page on evil.example resolving to 127.0.0.1 would read the pages of a signed-in person)."""

from __future__ import annotations

import pytest

from .conftest import make_site


@pytest.mark.parametrize("host", ["evil.example", "evil.example:3000", "testserver.evil.example"])
def test_dns_rebinding_host_is_refused_by_the_web_app(host: str) -> None:
    site = make_site()
    site.sign_in()
    response = site.client.get("/", headers={"Host": host})
    assert response.status_code == 400
    assert response.text == "E_HOST: unknown Host\n"
    assert "set-cookie" not in response.headers


def test_the_web_app_answers_its_own_name() -> None:
    site = make_site(base_url="http://airlock.example")
    assert site.client.get("/healthz").status_code == 200
    assert site.client.get("/healthz", headers={"Host": "testserver"}).status_code == 400
