"""Health, sign-in and sign-out.

Signing in hands the username and password to the checkpoint and keeps only the session
token it answers, in the person's own cookie; signing out ends that session at the
checkpoint and clears the cookie. The sign-in page's notice comes from a cookie the
refused request set, never from the URL: a link must not make it claim anything about
anyone's session or decision.

This module must never log or echo a password.
"""

from __future__ import annotations

import contextlib
import re
from typing import Annotated, Final

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from .deps import ClientDep, Csrf, WebDep, safe_next
from .errors import SIGN_IN_REFUSED, CheckpointRefused, CheckpointUnavailable, human_message

__all__ = ["router"]

router = APIRouter()

# What a decision sent after the session ended did not do: it never reached the
# checkpoint as that person's, so nothing of it was recorded.
_NOT_DONE: Final = {
    "approve": "your approval was not recorded: nothing was approved",
    "reject": "your rejection was not recorded: the proposal was not rejected",
    "revoke": "your revocation was not recorded: the approval was not revoked",
    "resolve": "your decision on the in-doubt execution was not recorded",
    "edit": "your edit was not recorded: nothing was changed or approved",
}
_SESSION_ENDED: Final = "Your session has ended. Sign in again to continue where you were."
_ENDED_FLASH: Final = re.compile(
    r"^ended(?::(approve|reject|revoke|resolve|edit):(prop_[A-Za-z0-9_-]{8,80}))?$"
)


@router.get("/healthz", include_in_schema=False)
def healthz() -> PlainTextResponse:
    return PlainTextResponse("ok")


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, web: WebDep, next: str | None = None) -> Response:
    jar = web.cookies(request)
    ended = _ENDED_FLASH.fullmatch(jar.flash(request) or "")
    notice = None
    if ended is not None:
        verb, proposal_id = ended.group(1), ended.group(2)
        notice = (
            f"Your session had ended, so {_NOT_DONE[verb]}. Sign in again to return to "
            f"proposal {proposal_id} and decide there."
            if verb is not None
            else _SESSION_ENDED
        )
    response = web.render(
        request, "login.html", {"next": safe_next(next), "error": None, "notice": notice}
    )
    if request.cookies.get(jar.flash_name) is not None:
        jar.clear_flash(response)  # shown once
    return response


@router.post("/login", response_class=HTMLResponse)
def login(
    request: Request,
    *,
    web: WebDep,
    client: ClientDep,
    username: Annotated[str, Form(max_length=64)],
    password: Annotated[str, Form(max_length=1024)],
    csrf: Csrf = "",
    next: Annotated[str, Form(max_length=512)] = "/",
) -> Response:
    refused = web.refuse_csrf(request, csrf)
    if refused is not None:
        return refused
    try:
        session = client.login(
            username,
            password,
            client_address=request.client.host if request.client is not None else None,
        )
    except CheckpointRefused as exc:
        message = (
            SIGN_IN_REFUSED
            if exc.code in ("E_UNAUTHENTICATED", "E_INVALID")
            else human_message(exc.code)
        )
        page = web.render(
            request,
            "login.html",
            {"next": safe_next(next), "error": message, "username": username},
            status=401 if exc.status == 401 else exc.status,
        )
        if exc.retry_after is not None:
            page.headers["Retry-After"] = str(exc.retry_after)
        return page
    # A sign-in over a session this browser still holds replaces it: end that one at
    # the checkpoint too, or it would stay valid, unheld, until it expired.
    previous = web.cookies(request).session(request)
    if previous is not None and previous != session.token:
        with contextlib.suppress(CheckpointRefused, CheckpointUnavailable):
            client.logout(previous)
    response = RedirectResponse(safe_next(next), 303)
    web.cookies(request).set_session(response, session.token, session.expires_at - int(web.now()))
    return response


@router.post("/logout")
def logout(request: Request, web: WebDep, client: ClientDep, csrf: Csrf = "") -> Response:
    refused = web.refuse_csrf(request, csrf)
    if refused is not None:
        return refused
    token = web.cookies(request).session(request)
    told = True
    if token is not None:
        try:
            client.logout(token)
        except CheckpointRefused:
            pass  # already ended at the checkpoint: clearing the cookie is all that is left
        except CheckpointUnavailable:
            told = False
    response: Response
    if told:
        response = RedirectResponse("/login", 303)
    else:
        # Signed out of this browser all the same; the checkpoint's session, which no
        # one here holds any more, ends on its own when it expires.
        response = web.render(
            request,
            "login.html",
            {
                "next": "/",
                "error": None,
                "notice": "You are signed out of this browser, but the checkpoint could "
                "not be told: your session there ends on its own when it expires.",
            },
            signed_out=True,
        )
    web.cookies(request).clear_session(response)
    return response
