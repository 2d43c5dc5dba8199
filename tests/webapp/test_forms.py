"""A form the app cannot accept is answered with a page a person can act on.

Never FastAPI's raw 422 JSON: that echoes what was typed (a password) and loses the note
the person wrote. Nothing is sent to the checkpoint for such a form.
"""

from __future__ import annotations

import pytest

from tests.support.asgi import stream_body

from .conftest import Site
from .fakes import action_value

# A <textarea maxlength=2000> counts a line break as one character, but browsers submit
# it as CRLF (HTML's form-submission line-break normalisation).
TYPED = ("line of careful reasoning\n" * 77)[:2000]
SUBMITTED = TYPED.replace("\n", "\r\n")


def test_overlong_password_shows_the_sign_in_page_and_never_echoes_it(site: Site) -> None:
    secret = "S3cr3t-" + "x" * 1020
    response = site.client.post(
        "/login",
        data={"username": "alice", "password": secret, "csrf_token": site.csrf("/login")},
    )
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("text/html")
    assert 'id="login-error"' in response.text and "password" in response.text.lower()
    assert "S3cr3t-" not in response.text
    assert 'value="alice"' in response.text  # the username is kept
    assert response.headers["x-frame-options"] == "DENY"


def test_missing_password_shows_the_sign_in_page(site: Site) -> None:
    response = site.client.post(
        "/login", data={"username": "alice", "csrf_token": site.csrf("/login")}
    )
    assert response.status_code == 422
    assert 'id="login-error"' in response.text


def test_note_at_the_textarea_limit_with_crlf_is_accepted_as_typed(site: Site) -> None:
    assert len(TYPED) == 2000 and len(SUBMITTED) > 2000
    site.sign_in()
    record = site.fake.add(action_value())
    token = site.csrf("/proposals/prop_fake000001")
    response = site.client.post(
        "/proposals/prop_fake000001/approve",
        data={"csrf_token": token, "action_hash": record["action_hash"], "note": SUBMITTED},
        follow_redirects=False,
    )
    assert response.status_code == 303
    assert site.fake.calls == [
        ("approve", "alice", {"action_hash": record["action_hash"], "note": TYPED})
    ]


@pytest.mark.parametrize(
    ("verb", "extra", "textarea"),
    [
        ("approve", {}, "approve-note"),
        ("reject", {"reason_code": "not_idle"}, "reject-note"),
    ],
)
def test_overlong_note_keeps_what_was_typed_and_sends_nothing(
    site: Site, verb: str, extra: dict[str, str], textarea: str
) -> None:
    site.sign_in()
    record = site.fake.add(action_value())
    token = site.csrf("/proposals/prop_fake000001")
    note = "careful <reason> & more\r\n" * 100  # 2400 characters even as typed
    response = site.client.post(
        f"/proposals/prop_fake000001/{verb}",
        data={"csrf_token": token, "action_hash": record["action_hash"], "note": note, **extra},
    )
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("text/html")
    assert 'id="refusal"' in response.text
    assert "Nothing was sent" in response.text and "2000 characters" in response.text
    kept = note.replace("\r\n", "\n").replace("&", "&amp;").replace("<", "&lt;")
    kept = kept.replace(">", "&gt;")
    assert f'id="{textarea}" name="note" maxlength="2000" rows="2">{kept}</textarea>' in (
        response.text
    )
    assert site.fake.calls == []


def test_invalid_decision_form_still_needs_the_csrf_token(site: Site) -> None:
    site.sign_in()
    site.fake.add(action_value())
    response = site.client.post(
        "/proposals/prop_fake000001/approve",
        data={"csrf_token": "0" * 64, "note": "x" * 3000},
    )
    assert response.status_code == 403
    assert "Form refused" in response.text
    assert "x" * 3000 not in response.text
    assert site.fake.calls == []


def test_invalid_decision_form_without_a_session_asks_to_sign_in(site: Site) -> None:
    site.fake.add(action_value())
    token = site.csrf("/login")
    response = site.client.post(
        "/proposals/prop_fake000001/approve",
        data={"csrf_token": token, "note": "x" * 3000},
        follow_redirects=False,
    )
    assert response.status_code == 303
    assert response.headers["location"].startswith("/login?next=")


def test_other_invalid_requests_are_an_html_page_without_the_input(site: Site) -> None:
    site.sign_in()
    probe = "zz-" + "q" * 200
    response = site.client.get(f"/history?before={probe}")
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("text/html")
    assert probe not in response.text
    assert "Nothing was changed" in response.text


def test_invalid_query_is_answered_before_the_session_is_looked_at(site: Site) -> None:
    """The history's ``before`` is validated before anyone is asked to sign in: the
    route signs in inside its body, not through a dependency (deps.Session), which
    FastAPI would run first."""
    probe = "zz-" + "q" * 200
    response = site.client.get(f"/history?before={probe}", follow_redirects=False)
    assert response.status_code == 422
    assert probe not in response.text
    assert "Nothing was changed" in response.text


CAP = 64 * 1024  # webapp/app.py: _FORM_MAX_BYTES


def test_a_huge_multipart_upload_to_sign_in_is_refused_unread(site: Site) -> None:
    # Starlette spools multipart file parts to disk with no total bound, and the form is
    # parsed before its CSRF token is looked at: anyone could fill the disk through here.
    response = site.client.post(
        "/login",
        data={"username": "alice", "password": "x", "csrf_token": site.csrf("/login")},
        files={"upload": ("a.bin", b"x" * (CAP + 1))},
    )
    assert response.status_code == 413
    assert response.headers["x-frame-options"] == "DENY"
    assert "text/html" in response.headers["content-type"]  # a page, not the framework's JSON
    assert f"the request body is over {CAP} bytes" in response.text
    assert site.fake.sessions == {} and site.fake.calls == []  # nothing reached the checkpoint


def test_an_endless_form_body_is_read_no_further_than_the_cap(site: Site) -> None:
    chunk = 16 * 1024
    forms = {
        b"application/x-www-form-urlencoded": b"username=",
        b"multipart/form-data; boundary=b": b'--b\r\nContent-Disposition: form-data; name="f"; '
        b'filename="a"\r\n\r\n',
    }
    for content_type, prefix in forms.items():
        status, read = stream_body(
            site.client.app,
            "/login",
            total=8 * 1024 * 1024,
            chunk=chunk,
            headers=[(b"content-type", content_type)],
            prefix=prefix,
        )
        assert status == 413, content_type
        assert read <= CAP + chunk, (content_type, read)
