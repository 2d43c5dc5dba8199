"""Attacks on the web app: cross-site request forgery and stored script injection.

A signed-in approver's browser is played by an HTTP client with a cookie jar; the
attacker's page is played by the same client sending what a cross-site form would (no
token, a foreign token, or the browser's ``Sec-Fetch-Site: cross-site``). The judge is
the checkpoint: no vote may reach it, so nothing is approved and nothing is written.
"""

from __future__ import annotations

import contextlib
import html
import re

import httpx

from .common import stop_action
from .injection import SQLI
from .registry import Observation, Target, attack
from .rig import PASSWORD, Rig

__all__: list[str] = []

_TOKEN = re.compile(r'name="csrf_token" value="([0-9a-f]{64})"')
_CODE = re.compile(r"<code>([A-Z_]+)</code>")


def _browser(rig: Rig, user: str) -> httpx.Client:
    """An HTTP client signed in to the web app as ``user`` through its own login form."""
    client = httpx.Client(base_url=rig.webapp_url, timeout=30.0, trust_env=False)
    page = client.get("/login")
    token = _TOKEN.search(page.text)
    if token is None:
        raise RuntimeError("no CSRF token on the sign-in page")
    r = client.post(
        "/login",
        data={"username": user, "password": PASSWORD, "csrf_token": token.group(1), "next": "/"},
    )
    if r.status_code != 303:
        raise RuntimeError(f"web app sign-in as {user}: {r.status_code}")
    return client


def _form_token(client: httpx.Client, proposal_id: str) -> str:
    page = client.get(f"/proposals/{proposal_id}")
    token = _TOKEN.search(page.text)
    if token is None:
        raise RuntimeError("no CSRF token on the proposal page")
    return token.group(1)


def _page_code(response: httpx.Response) -> str:
    m = _CODE.search(response.text)
    return f"{m.group(1) if m else 'NO_CODE'} ({response.status_code})"


def _csrf(rig: Rig, t: Target, data: dict[str, str], headers: dict[str, str]) -> Observation:
    rig.instance(t.instance(0))
    record = rig.cp.submit(stop_action(t))
    with contextlib.closing(_browser(rig, "alice")) as alice:
        real = _form_token(alice, record["id"])
        form = {"action_hash": record["action_hash"], **data}
        if form.get("csrf_token") == "<own>":
            form["csrf_token"] = real
        r = alice.post(f"/proposals/{record['id']}/approve", data=form, headers=headers)
    votes = rig.cp.audit("checkpoint.vote.approve", proposal_id=record["id"])
    state = rig.cp.view(record["id"])["state"]
    ok = not votes and state == "pending"
    audit = (
        "checkpoint: no vote in audit, still pending"
        if ok
        else f"checkpoint: {len(votes)} vote(s), state {state}"
    )
    return Observation(_page_code(r), audit, ok, (t.instance(0),))


@attack(
    "csrf_approve_without_token",
    surface="web app",
    expect="CSRF (403)",
    does="A cross-site form posts an approve to the web app with the victim's cookies and no "
    "CSRF token.",
)
def _no_token(rig: Rig, t: Target) -> Observation:
    return _csrf(rig, t, {}, {})


@attack(
    "csrf_approve_cross_site",
    surface="web app",
    expect="CSRF (403)",
    does="The approve carries a valid token but the browser marks it Sec-Fetch-Site: "
    "cross-site with Origin http://evil.example.",
)
def _cross_site(rig: Rig, t: Target) -> Observation:
    return _csrf(
        rig,
        t,
        {"csrf_token": "<own>"},
        {"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"},
    )


@attack(
    "csrf_token_from_another_session",
    surface="web app",
    expect="CSRF (403)",
    does="The attacker signs in as bob, takes the token from his own page, and has alice's "
    "browser post it.",
)
def _foreign_token(rig: Rig, t: Target) -> Observation:
    rig.instance(t.instance(1))
    other = rig.cp.submit(stop_action(t, 1))
    with contextlib.closing(_browser(rig, "bob")) as bob:
        foreign = _form_token(bob, other["id"])
    return _csrf(rig, t, {"csrf_token": foreign}, {})


_XSS = (
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "<svg onload=alert(1)>",
)


@attack(
    "stored_xss_in_proposal",
    surface="web app",
    expect="ESCAPED (200)",
    does="The agent submits a proposal whose reason and evidence tags hold script, img-onerror "
    "and svg-onload markup; an approver opens the queue and the proposal page.",
)
def _xss(rig: Rig, t: Target) -> Observation:
    rig.instance(t.instance(0))
    action = stop_action(t, reason=" ".join(_XSS))
    action["evidence"]["tags"] = {"owner": _XSS[1], "team": _XSS[2]}
    record = rig.cp.submit(action)
    with contextlib.closing(_browser(rig, "alice")) as alice:
        pages = [alice.get(f"/proposals/{record['id']}"), alice.get("/")]
    raw_found = [p for p in _XSS for page in pages if p in page.text]
    escaped = all(html.escape(_XSS[0], quote=True) in page.text for page in pages[:1])
    csp = pages[0].headers.get("content-security-policy", "")
    strict = "script-src 'self'" in csp and "unsafe-inline" not in csp
    status = pages[0].status_code
    code = f"ESCAPED ({status})" if not raw_found and escaped else f"RAW ({status})"
    stored = rig.cp.view(record["id"])["action"]["reason"] == action["reason"]
    ok = strict and stored
    audit = (
        "checkpoint: stored verbatim; web app: strict CSP, no inline script"
        if ok
        else f"stored verbatim {stored}, strict CSP {strict}"
    )
    return Observation(code, audit, ok, (t.instance(0),))


@attack(
    "sqli_in_webapp_login",
    surface="web app",
    expect="HTTP 401",
    does="The web app's sign-in form with username admin' OR '1'='1' -- and an injection password.",
)
def _webapp_login(rig: Rig, t: Target) -> Observation:
    with httpx.Client(base_url=rig.webapp_url, timeout=30.0, trust_env=False) as client:
        page = client.get("/login")
        token = _TOKEN.search(page.text)
        r = client.post(
            "/login",
            data={
                "username": "admin' OR '1'='1' --",
                "password": SQLI,
                "csrf_token": token.group(1) if token else "",
                "next": "/",
            },
        )
        session = any("airlock_session" in c for c in client.cookies)
    ok = not session and "Wrong username or password" in r.text
    audit = (
        "web app: no session cookie, generic sign-in error" if ok else f"session cookie {session}"
    )
    return Observation(f"HTTP {r.status_code}", audit, ok)
