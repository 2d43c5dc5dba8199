"""The web app's answers outside its routes: the response headers and the error pages.

Every answer carries the security headers and, when the browser has none, a CSRF key;
an unhandled error is a plain 500 that says nothing was changed. A refusal, an
unreachable checkpoint, an invalid form, a missing page or an ended session is a page
with the navigation, never the framework's JSON, which would echo the input.

This module must never log a cookie, a token, a password or a submitted value.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException as StarletteHTTPException

from .deps import DECISION_PATH, SignInRequired, Web, checked_id, here, lf, not_sent, safe_next
from .errors import CheckpointRefused, CheckpointUnavailable, human_message
from .proposals import NOTE_FIELD, proposal_page
from .security import CSRF_FIELD, SECURITY_HEADERS, new_csrf_key, same_origin

__all__ = ["install"]

_FIELDS: Final = {
    "username": "the username",
    "password": "the password",
    "note": "the note",
    "confirm": "the typed resource id",
    "reason_code": "the reason",
    "decision": "the decision",
    "action_hash": "the action hash",
    "next": "the page to return to",
    "before": "the page position",
}
_log = logging.getLogger("airlock.webapp")


def install(app: FastAPI) -> None:
    """Add the headers middleware and the error pages to ``app`` (its ``state.web`` set)."""
    app.middleware("http")(_headers)
    app.add_exception_handler(SignInRequired, _to_sign_in)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _invalid)  # type: ignore[arg-type]
    app.add_exception_handler(CheckpointUnavailable, _unavailable)  # type: ignore[arg-type]
    app.add_exception_handler(CheckpointRefused, _refused)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _no_page)  # type: ignore[arg-type]


def _web(request: Request) -> Web:
    web: Web = request.app.state.web
    return web


async def _headers(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    jar = _web(request).cookies(request)
    key = jar.csrf_key(request)
    # A cross-site form POST carries no Lax cookie; answering it with a new key would
    # replace the person's own and break the forms they have open.
    fresh = key is None and (request.method in ("GET", "HEAD") or same_origin(request))
    request.state.csrf_key = key or new_csrf_key()
    try:
        response = await call_next(request)
    except Exception:
        # Caught here, inside this middleware, so even this answer carries the headers.
        # %r: the path is decoded, and a control character in it (ESC) must not reach
        # a log reader's terminal raw.
        _log.exception("unhandled error on %s %r", request.method, request.url.path)
        response = PlainTextResponse("Internal error: nothing was changed.", 500)
    if fresh:
        jar.set_csrf_key(response, request.state.csrf_key)
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    if jar.secure:
        response.headers.setdefault(
            "Strict-Transport-Security", "max-age=31536000; includeSubDomains"
        )
    return response


async def _to_sign_in(request: Request, exc: SignInRequired) -> Response:
    response = RedirectResponse("/login?" + urlencode({"next": exc.next_path}), 303)
    jar = _web(request).cookies(request)
    if exc.verb is not None:
        # A decision was sent on a page whose session had ended (signed out in
        # another tab, or ended at the checkpoint): say so, not "form refused".
        jar.set_flash(response, f"ended:{exc.verb}:{exc.next_path.rsplit('/', 1)[-1]}")
    elif jar.carries_session(request):
        jar.set_flash(response, "ended")
    # Only a cookie the request carried is cleared: a link from another site arrives
    # without the Strict session cookie, and deleting it would sign the person out.
    if jar.carries_session(request):
        jar.clear_session(response)
    return response


async def _invalid(request: Request, exc: RequestValidationError) -> Response:
    # Never FastAPI's JSON answer: it echoes the input (a password) and loses the note.
    try:
        return await run_in_threadpool(_invalid_request, request, exc)
    except SignInRequired as signin:
        return await _to_sign_in(request, signin)
    except CheckpointRefused as refused:
        return await _refused(request, refused)
    except CheckpointUnavailable as unavailable:
        return await _unavailable(request, unavailable)


def _invalid_fields(exc: RequestValidationError) -> str:
    """What was wrong with a request, in words, without a byte of what was submitted."""
    out: list[str] = []
    for error in exc.errors():
        loc = error.get("loc") or ()
        name = str(loc[-1]) if loc else ""
        label = _FIELDS.get(name, "a field")
        kind = str(error.get("type", ""))
        limit = (error.get("ctx") or {}).get("max_length")
        if kind == "missing":
            text = f"{label} is missing"
        elif "too_long" in kind and isinstance(limit, int):
            text = f"{label} is longer than {limit} characters"
        else:
            text = f"{label} is not valid"
        if text not in out:
            out.append(text)
    return "; ".join(out) or "the request is not valid"


def _form_text(exc: RequestValidationError, name: str) -> str:
    body = exc.body
    value = body.get(name) if isinstance(body, FormData) else None
    return value if isinstance(value, str) else ""


def _invalid_request(request: Request, exc: RequestValidationError) -> Response:
    web = _web(request)
    problem = _invalid_fields(exc)
    path = request.url.path
    if request.method == "POST" and path == "/login":
        username = _form_text(exc, "username")
        return web.render(
            request,
            "login.html",
            {
                "next": safe_next(_form_text(exc, "next")),
                "error": f"Not signed in: {problem}.",
                # Kept only when it could be a username; the password never comes back.
                "username": username if 0 < len(username) <= 64 else "",
            },
            status=422,
        )
    decision = DECISION_PATH.fullmatch(path) if request.method == "POST" else None
    if decision is not None:
        verb = decision.group(2)
        refused = web.refuse_decision_csrf(
            request, _form_text(exc, CSRF_FIELD), decision.group(1), verb
        )
        if refused is not None:
            return refused
        proposal_id = checked_id(decision.group(1))
        token, me = web.signed_in_to_decide(request, proposal_id, verb)
        note = lf(_form_text(exc, "note"))
        form = {
            NOTE_FIELD[verb]: note if isinstance(note, str) else "",
            "confirm": _form_text(exc, "confirm"),
            "reason_code": _form_text(exc, "reason_code"),
        }
        return proposal_page(
            web,
            request,
            token,
            me,
            proposal_id,
            error=not_sent(f"Nothing was sent: {problem}. Correct it and send again."),
            status=422,
            form=form,
        )
    return web.render(
        request,
        "error.html",
        {
            "title": "The request was not understood",
            "message": f"Nothing was changed: {problem}.",
            "code": None,
        },
        status=422,
    )


async def _unavailable(request: Request, exc: CheckpointUnavailable) -> Response:
    return _web(request).render(
        request,
        "error.html",
        {"title": "The checkpoint is not reachable", "message": str(exc), "code": None},
        status=502,
    )


async def _refused(request: Request, exc: CheckpointRefused) -> Response:
    if exc.code == "E_UNAUTHENTICATED":
        return await _to_sign_in(request, SignInRequired(here(request)))
    web = _web(request)
    title = "Not found" if exc.code == "E_NOT_FOUND" else "Refused"
    return web.render(
        request,
        "error.html",
        {
            "title": title,
            "message": human_message(exc.code),
            "code": exc.code,
            "me": await run_in_threadpool(web.signed_in_or_none, request),
        },
        status=exc.status if 400 <= exc.status < 600 else 400,
    )


async def _no_page(request: Request, exc: StarletteHTTPException) -> Response:
    # A page, with the navigation, never the framework's JSON ({"detail": "Not Found"}).
    if exc.status_code == 404:
        title, message = "Page not found", "There is no page at this address."
    elif exc.status_code == 405:
        title, message = "Not a page", "This address does not take that kind of request."
    elif exc.status_code == 413:  # BodyLimit's own words: the cap, never the body
        title, message = "The request was too large", f"Nothing was changed: {exc.detail}."
    else:
        title, message = "The request was not understood", "Nothing was changed."
    web = _web(request)
    return web.render(
        request,
        "error.html",
        {
            "title": title,
            "message": message,
            "code": None,
            "me": await run_in_threadpool(web.signed_in_or_none, request),
        },
        status=exc.status_code,
        headers=exc.headers,
    )
