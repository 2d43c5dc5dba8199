"""The web app over a FakeCheckpoint: the page's own defences and what a person reads.

Fast tests (no browser, no network): headers, cookie flags, CSRF refusals, escaping of
attacker-controlled names and tags, the server-side SVG chart, and the human message
for each refusal the checkpoint returns.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airlock.protocol import KeyStatus
from services.checkpoint.errors import ErrorCode
from tests.support.asgi import raw_get
from webapp.charts import evidence_charts, human_bytes, series
from webapp.errors import SIGN_IN_REFUSED, human_message

from .conftest import Site, csrf_of, make_site
from .fakes import action_value

WEBAPP = Path(__file__).resolve().parents[2] / "webapp"


def test_every_response_carries_the_security_headers(site: Site) -> None:
    site.sign_in()
    site.fake.add(action_value())
    for path in ("/login", "/", "/proposals/prop_fake000001", "/static/app.css", "/keys"):
        headers = site.client.get(path).headers
        csp = headers["content-security-policy"]
        assert "default-src 'self'" in csp
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert "frame-ancestors 'none'" in csp
        assert headers["x-frame-options"] == "DENY"
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"


def _set_cookies(response: object) -> list[str]:
    return list(response.headers.get_list("set-cookie"))  # type: ignore[attr-defined]


def test_session_cookie_is_httponly_and_samesite_strict_and_holds_only_the_token(
    site: Site,
) -> None:
    page = site.client.get("/login")
    response = site.client.post(
        "/login",
        data={
            "username": "alice",
            "password": "correct horse battery staple",
            "csrf_token": csrf_of(page.text),
        },
        follow_redirects=False,
    )
    cookie = next(c for c in _set_cookies(response) if c.startswith("airlock_session="))
    flags = cookie.lower()
    assert "httponly" in flags and "samesite=strict" in flags and "path=/" in flags
    token = cookie.split(";")[0].split("=", 1)[1]
    assert site.fake.sessions[token] == "alice"  # the checkpoint's own session, nothing else


def test_cookies_are_secure_with_host_prefix_over_https() -> None:
    s = make_site(base_url="https://testserver")
    with s.client:
        response = s.client.get("/login")
        cookie = _set_cookies(response)[0]
        assert cookie.startswith("__Host-airlock_csrf=")
        # Lax, so a link from another site does not replace it (see test_cookies.py).
        assert "secure" in cookie.lower() and "samesite=lax" in cookie.lower()
        assert "max-age=31536000" in response.headers["strict-transport-security"]


def test_post_without_csrf_token_is_refused(site: Site) -> None:
    site.sign_in()
    record = site.fake.add(action_value())
    response = site.client.post(
        "/proposals/prop_fake000001/approve", data={"action_hash": record["action_hash"]}
    )
    assert response.status_code == 403
    assert "no security token" in response.text
    assert site.fake.calls == []


def test_post_with_a_wrong_csrf_token_is_refused(site: Site) -> None:
    site.sign_in()
    record = site.fake.add(action_value())
    response = site.client.post(
        "/proposals/prop_fake000001/approve",
        data={"action_hash": record["action_hash"], "csrf_token": "0" * 64},
    )
    assert response.status_code == 403
    assert site.fake.calls == []


def test_csrf_token_from_before_sign_in_is_refused_after(site: Site) -> None:
    stale = site.csrf("/login")
    site.sign_in()
    record = site.fake.add(action_value())
    response = site.client.post(
        "/proposals/prop_fake000001/approve",
        data={"action_hash": record["action_hash"], "csrf_token": stale},
    )
    assert response.status_code == 403
    assert site.fake.calls == []


@pytest.mark.parametrize(
    "headers",
    [{"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}],
    ids=["origin", "sec-fetch-site"],
)
def test_post_from_another_origin_is_refused_even_with_the_token(
    site: Site, headers: dict[str, str]
) -> None:
    site.sign_in()
    record = site.fake.add(action_value())
    token = site.csrf("/proposals/prop_fake000001")
    response = site.client.post(
        "/proposals/prop_fake000001/approve",
        data={"action_hash": record["action_hash"], "csrf_token": token},
        headers=headers,
    )
    assert response.status_code == 403
    assert "another site" in response.text
    assert site.fake.calls == []


def test_same_origin_post_with_the_token_reaches_the_checkpoint(site: Site) -> None:
    site.sign_in()
    record = site.fake.add(action_value())
    token = site.csrf("/proposals/prop_fake000001")
    response = site.client.post(
        "/proposals/prop_fake000001/approve",
        data={"action_hash": record["action_hash"], "csrf_token": token, "note": "ok"},
        headers={"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"},
        follow_redirects=False,
    )
    assert response.status_code == 303
    assert site.fake.calls == [
        ("approve", "alice", {"action_hash": record["action_hash"], "note": "ok"})
    ]


def test_script_instance_name_and_tag_render_as_text(site: Site) -> None:
    site.sign_in()
    name = "<script>alert(1)</script>\u00e9\u6f22'\""
    site.fake.add(
        action_value(
            name=name,
            tags={"owner": '"><script>alert(2)</script>', "x<img src=x onerror=alert(3)>": "v"},
            reason="Idle <b>really</b> & quiet",
        )
    )
    for path in ("/", "/proposals/prop_fake000001", "/queue/rows"):
        html = site.client.get(path).text
        assert "<script>alert" not in html
        assert "<img src=x" not in html
        assert "<b>really" not in html
    html = site.client.get("/proposals/prop_fake000001").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;\u00e9\u6f22&#39;&#34;" in html
    assert "&#34;&gt;&lt;script&gt;alert(2)&lt;/script&gt;" in html
    assert "Idle &lt;b&gt;really&lt;/b&gt; &amp; quiet" in html
    # The only <script> on the page is the local file.
    assert re.findall(r"<script[^>]*>", html) == ['<script src="/static/app.js" defer>']


def test_templates_have_no_inline_script_style_or_handlers_and_no_remote_assets() -> None:
    for path in [*WEBAPP.glob("templates/*.html"), *WEBAPP.glob("static/*")]:
        text = path.read_text()
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", text), path
        assert not re.search(r"\sstyle\s*=", text), path
        assert not re.search(r"<style", text), path
        assert not re.search(r"\son[a-z]+\s*=", text), path
        remote = re.findall(r"https?://[^\s\"')]+", text)
        assert all(u == "http://www.w3.org/2000/svg" for u in remote), (path, remote)


def test_evidence_chart_is_inline_svg_drawn_from_the_daily_series(site: Site) -> None:
    site.sign_in()
    cpu = [310, 322, 340, 298, 301, 333, 340, 329, 317, 305, 300, 311, 338, 326]
    site.fake.add(action_value(cpu=cpu, net=[1_000_000 * (i + 1) for i in range(14)]))
    html = site.client.get("/proposals/prop_fake000001").text
    assert html.count("<svg") == 2
    polylines = re.findall(r'<polyline class="series" points="([^"]+)"', html)
    assert [len(p.split()) for p in polylines] == [14, 14]
    assert "day 1: 3.10%" in html and "day 14: 14.0 MB" in html


def test_chart_geometry_follows_the_values() -> None:
    (cpu,) = evidence_charts(
        {"daily_cpu_p95_bp": [0, 500, 1000], "thresholds": {"cpu_p95_max_bp": 1000}}
    )
    ys = [p.y for p in cpu.points]
    assert ys[0] == cpu.plot_bottom  # zero sits on the axis
    assert ys[0] > ys[1] > ys[2]  # higher values are drawn higher
    assert cpu.threshold_y == ys[2]
    xs = [p.x for p in cpu.points]
    assert xs[0] == cpu.plot_left and xs[-1] == cpu.plot_right


@pytest.mark.parametrize(
    "value",
    [[], [1.5, 2], [True, 1], [-1, 3], ["1", "2"], "123", [1] * 401, {"a": 1}, [None, None]],
    ids=[
        "empty",
        "floats",
        "bools",
        "negative",
        "strings",
        "string",
        "too-long",
        "mapping",
        "all-missing",
    ],
)
def test_malformed_series_is_not_drawn(value: object) -> None:
    assert series({"daily_cpu_p95_bp": value}, "daily_cpu_p95_bp") is None
    assert evidence_charts({"daily_cpu_p95_bp": value}) == []


def test_a_missing_day_breaks_the_line_and_is_listed() -> None:
    (cpu,) = evidence_charts({"daily_cpu_p95_bp": [300, None, 320, 330]})
    assert len(cpu.segments) == 2 and len(cpu.points) == 3
    assert cpu.missing == (2,)
    assert "1 day without data" in cpu.description


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (0, 999, 2_100_000, 3 * 10**9)] == [
        "0 B",
        "999 B",
        "2.1 MB",
        "3.0 GB",
    ]


def _approve(site: Site, proposal_id: str, **fields: str) -> str:
    token = site.csrf(f"/proposals/{proposal_id}")
    response = site.client.post(
        f"/proposals/{proposal_id}/approve", data={"csrf_token": token, **fields}
    )
    return str(response.text)


def test_stale_view_is_explained_and_nothing_is_approved(site: Site) -> None:
    site.sign_in()
    site.fake.add(action_value())
    html = _approve(site, "prop_fake000001", action_hash="sha256:" + "00" * 32)
    assert human_message("E_STALE_VIEW").split(",")[0] in html
    assert "E_STALE_VIEW" in html
    assert site.fake.proposals["prop_fake000001"]["state"] == "pending"


def test_wrong_typed_id_is_explained_and_keeps_what_was_typed(site: Site) -> None:
    site.sign_in()
    record = site.fake.add(action_value(operation="delete", proposal_id="prop_fakedel001"))
    html = _approve(
        site, "prop_fakedel001", action_hash=record["action_hash"], confirm="i-t4n0exampl"
    )
    assert "E_CONFIRM_MISMATCH" in html and "does not match this resource" in html
    assert 'value="i-t4n0exampl"' in html
    assert record["votes"] == []


def test_delete_shows_one_of_two_after_the_first_vote_and_a_repeat_is_explained(
    site: Site,
) -> None:
    site.sign_in()
    record = site.fake.add(action_value(operation="delete", proposal_id="prop_fakedel001"))
    page = site.client.get("/proposals/prop_fakedel001").text
    assert 'id="approve-button" disabled' in page  # until the id is typed (app.js)
    assert "Permanently delete" in page
    fields = {"action_hash": record["action_hash"], "confirm": "i-t4n0example"}
    _approve(site, "prop_fakedel001", **fields)
    page = site.client.get("/proposals/prop_fakedel001").text
    assert re.search(r'id="votes">1 of 2', page)
    html = _approve(site, "prop_fakedel001", **fields)
    assert "You have already approved this" in html


def test_every_refusal_code_has_its_own_message() -> None:
    # Every code the checkpoint can answer with, so a new one cannot go unexplained.
    codes = [c.value for c in ErrorCode]
    messages = [human_message(c) for c in codes]
    assert len(set(messages)) == len(codes)
    assert all(c not in m for c, m in zip(codes, messages, strict=True))
    assert "E_NEW_THING" in human_message("E_NEW_THING")


def test_reject_sends_the_reason_code(site: Site) -> None:
    site.sign_in("bob")
    site.fake.add(action_value())
    token = site.csrf("/proposals/prop_fake000001")
    site.client.post(
        "/proposals/prop_fake000001/reject",
        data={"csrf_token": token, "reason_code": "not_idle", "note": "batch job at night"},
    )
    assert site.fake.proposals["prop_fake000001"]["rejection"]["reason_code"] == "not_idle"
    page = site.client.get("/proposals/prop_fake000001").text
    assert 'data-reason="not_idle"' in page


def test_queue_lists_pending_first_with_votes_and_time_left(site: Site) -> None:
    site.sign_in()
    site.fake.add(action_value(proposal_id="prop_fakeold001"))
    newer = site.fake.add(action_value(proposal_id="prop_fakenew001", resource_id="i-t4n0other"))
    newer["created_at"] += 60
    newer["state"] = "rejected"
    html = site.client.get("/").text
    assert html.index("prop_fakeold001") < html.index("prop_fakenew001")
    assert "0 of 1" in html and "to approve" in html
    fragment = site.client.get("/queue/rows?operation=stop")
    assert fragment.text.startswith('<tbody id="queue-rows"')


def test_pages_need_a_session_and_never_redirect_off_site(site: Site) -> None:
    response = site.client.get("/proposals/prop_fake000001", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/login?next=%2Fproposals%2Fprop_fake000001"
    assert site.client.get("/queue/rows").status_code == 401
    page = site.client.get("/login")
    for target in ("//evil.example/x", "https://evil.example", "/\\evil.example"):
        response = site.client.post(
            "/login",
            data={
                "username": "alice",
                "password": "correct horse battery staple",
                "csrf_token": csrf_of(page.text),
                "next": target,
            },
            follow_redirects=False,
        )
        assert response.headers["location"] == "/"
        page = site.client.get("/login")


def test_wrong_password_is_a_plain_message(site: Site) -> None:
    # The checkpoint answers an unknown name, a wrong password and a locked account
    # alike (E_UNAUTHENTICATED), so the one message must also tell a locked-out person why.
    token = site.csrf("/login")
    response = site.client.post(
        "/login", data={"username": "alice", "password": "nope", "csrf_token": token}
    )
    assert response.status_code == 401
    assert SIGN_IN_REFUSED.startswith("Wrong username or password")
    assert "locked" in SIGN_IN_REFUSED and "administrator" in SIGN_IN_REFUSED
    assert SIGN_IN_REFUSED in response.text
    assert "set-cookie" not in response.headers or "airlock_session=" not in str(
        response.headers.get_list("set-cookie")
    )


def test_audit_page_says_whether_the_chain_verifies(site: Site) -> None:
    site.sign_in()
    assert 'data-ok="yes"' in site.client.get("/audit").text
    site.fake.audit_ok = False
    html = site.client.get("/audit").text
    assert 'data-ok="no"' in html and "row 7: hash mismatch" in html


def test_keys_page_lists_the_key_set(site: Site) -> None:
    site.sign_in()
    html = site.client.get("/keys").text
    assert "ed25519:" + "0f" * 16 in html and "active" in html


def test_every_key_status_has_its_own_badge_style() -> None:
    """The keys page shows a status as class ``key-<status>``: a status without a rule
    (the staged ``next`` had none) is an unstyled word among coloured badges."""
    css = (Path(__file__).parents[2] / "webapp" / "static" / "app.css").read_text()
    assert [s.value for s in KeyStatus if f".key-{s.value} " not in css] == []


def _post(site: Site, path: str, **fields: str) -> object:
    token = site.csrf(path.rsplit("/", 1)[0])
    return site.client.post(path, data={"csrf_token": token, **fields}, follow_redirects=False)


def test_an_issued_approval_can_be_revoked_from_its_page(site: Site) -> None:
    site.sign_in()
    site.fake.add(action_value())
    site.fake.approve_now("prop_fake000001")
    page = site.client.get("/proposals/prop_fake000001").text
    assert 'id="revoke-form"' in page and 'id="approve-form"' not in page
    assert "to execute" in site.client.get("/").text
    response = _post(site, "/proposals/prop_fake000001/revoke", note="wrong instance")
    assert response.headers["location"] == "/proposals/prop_fake000001"  # type: ignore[attr-defined]
    page = site.client.get("/proposals/prop_fake000001").text
    assert "The approval was revoked" in page and 'data-state="revoked"' in page
    assert 'id="revoke-form"' not in page


def test_an_in_doubt_execution_is_resolved_by_an_admin_only(site: Site) -> None:
    site.sign_in("alice")
    site.fake.add(action_value())
    site.fake.in_doubt("prop_fake000001")
    page = site.client.get("/proposals/prop_fake000001").text
    assert "Only an administrator can resolve it." in page and 'id="resolve-form"' not in page
    site.sign_in("admin")
    page = site.client.get("/proposals/prop_fake000001").text
    assert 'id="resolve-form"' in page
    _post(site, "/proposals/prop_fake000001/resolve", decision="did_not_happen", note="checked")
    page = site.client.get("/proposals/prop_fake000001").text
    assert 'data-state="failed"' in page and "it did not happen — by admin" in page


def test_a_viewer_sees_no_decision_forms(site: Site) -> None:
    site.sign_in("viewer")
    site.fake.add(action_value())
    page = site.client.get("/proposals/prop_fake000001").text
    assert "approve-form" not in page and "reject-form" not in page


def test_an_unexpected_error_still_carries_the_security_headers(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    site.sign_in()

    def broken(request: object) -> object:
        raise RuntimeError("boom")

    site.fake.handle = broken  # type: ignore[assignment,method-assign]
    with caplog.at_level("ERROR", logger="airlock.webapp"):
        response = site.client.get("/")
    assert response.status_code == 500
    assert response.text == "Internal error: nothing was changed."
    assert response.headers["x-frame-options"] == "DENY"
    assert "content-security-policy" in response.headers
    # The path arrives decoded (uvicorn turns %1b into ESC; Starlette drops only tab, CR
    # and LF) and is logged quoted, so no terminal escape reaches a log reader raw. The
    # request goes to the app as uvicorn would hand it over (the test client re-encodes).
    caplog.clear()
    cookie = "; ".join(f"{k}={v}" for k, v in site.client.cookies.items())
    with caplog.at_level("ERROR", logger="airlock.webapp"):
        status = raw_get(
            site.client.app,
            "/proposals/x\x1b[2J\x1b[31mforged",
            headers=[(b"cookie", cookie.encode())],
        )
    assert status == 500
    [record] = caplog.records
    assert "\x1b" not in record.getMessage()
    assert "'/proposals/x\\x1b[2J\\x1b[31mforged'" in record.getMessage()


def test_an_unreachable_checkpoint_is_a_plain_502_page(site: Site) -> None:
    site.sign_in()

    def down(request: object) -> object:
        import httpx

        raise httpx.ConnectError("refused")

    site.fake.handle = down  # type: ignore[assignment,method-assign]
    response = site.client.get("/")
    assert response.status_code == 502
    assert "The checkpoint is not reachable" in response.text
