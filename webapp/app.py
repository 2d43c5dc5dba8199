"""The web app's routes: sign-in, the queue, a proposal, the decisions, history, audit, keys.

Each request is made to the checkpoint with the token from the person's own session
cookie; the server keeps no session, no token and no secret of its own between
requests. Every POST is checked for a same-origin CSRF token before anything is sent to
the checkpoint, and every decision goes to the checkpoint, which is the only judge: a
button hidden or disabled here is a convenience, never the control.

This module must never log a cookie, a token or a password, must never render a value
without escaping (autoescape is on for every template), and must never import a service.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Final
from urllib.parse import urlencode

import jinja2
from fastapi import FastAPI, Form, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BeforeValidator
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException as StarletteHTTPException

from airlock.api import Proposal
from airlock.asgi import BodyLimit, HostAllowlist
from airlock.settings import WebappSettings, answered_hosts
from airlock.tls import checkpoint_verify

from . import bulk, present
from .charts import evidence_charts, human_bytes, percent
from .client import CheckpointClient, Me
from .errors import SIGN_IN_REFUSED, CheckpointRefused, CheckpointUnavailable, human_message
from .security import (
    CSRF_FIELD,
    SECURITY_HEADERS,
    Cookies,
    csrf_problem,
    csrf_token,
    new_csrf_key,
    same_origin,
)

__all__ = ["create_app"]

_HERE: Final = Path(__file__).parent
_PROPOSAL_ID: Final = re.compile(r"^prop_[A-Za-z0-9_-]{8,80}$")
_STATES: Final = tuple(present.STATE_LABELS)
#: Every state but pending: what the history lists, in one call to a checkpoint that
#: echoes the states it filtered on, else one call per state, merged (``decided_page``).
_DECIDED: Final = tuple(s for s in _STATES if s != "pending")
_HISTORY_PAGE: Final = 50
_OPERATIONS: Final = ("stop", "delete")
_FILTERS: Final = {
    "state": re.compile(r"^[a-z_]{1,32}$"),
    "operation": re.compile(r"^[a-z_]{1,32}$"),
    "account": re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$"),
    "region": re.compile(r"^[a-z0-9-]{1,40}$"),
}
_DONE: Final = {
    "approve": "Your approval was recorded.",
    "reject": "The proposal was rejected; the agent will read your reason.",
    "revoke": "The approval was revoked; the executor will refuse it.",
    "resolve": "Your decision on the in-doubt execution was recorded.",
}
# What a decision sent after the session ended did not do: it never reached the
# checkpoint as that person's, so nothing of it was recorded.
_NOT_DONE: Final = {
    "approve": "your approval was not recorded: nothing was approved",
    "reject": "your rejection was not recorded: the proposal was not rejected",
    "revoke": "your revocation was not recorded: the approval was not revoked",
    "resolve": "your decision on the in-doubt execution was not recorded",
}
_SESSION_ENDED: Final = "Your session has ended. Sign in again to continue where you were."
# The sign-in page's notice comes from a cookie the refused request set, never from the
# URL: a link must not make it claim anything about anyone's session or decision.
_ENDED_FLASH: Final = re.compile(
    r"^ended(?::(approve|reject|revoke|resolve):(prop_[A-Za-z0-9_-]{8,80}))?$"
)
_PAGE: Final = 200
#: Every request body. The largest form a person sends is a decision with a 2000-character
#: note, percent-encoded UTF-8: under 30 KiB.
_FORM_MAX_BYTES: Final = 64 * 1024
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
# The form field that keeps what was typed in each decision form, as the page reads it.
_NOTE_FIELD: Final = {
    "approve": "note",
    "reject": "reject_note",
    "revoke": "revoke_note",
    "resolve": "resolve_note",
}
_DECISION_PATH: Final = re.compile(r"^/proposals/([^/]+)/(approve|reject|revoke|resolve)$")
_log = logging.getLogger("airlock.webapp")


def _lf(value: object) -> object:
    # Browsers submit a <textarea>'s line breaks as CRLF, but its maxlength counts each as
    # one character: normalise before the length check so what fitted the box fits here.
    if isinstance(value, str):
        return value.replace("\r\n", "\n").replace("\r", "\n")
    return value


Note = Annotated[str, BeforeValidator(_lf), Form(max_length=2000)]
Csrf = Annotated[str, Form(alias=CSRF_FIELD)]


class _SignInRequired(Exception):
    """Sign in first. ``verb``: the decision a person sent when their session had ended
    (the sign-in page then says it was not recorded), with ``next_path`` its proposal."""

    def __init__(self, next_path: str, verb: str | None = None) -> None:
        self.next_path = next_path
        self.verb = verb


class _NotSent(Exception):
    """A decision the web app refuses itself, before anything reaches the checkpoint."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def _refusal(exc: CheckpointRefused) -> dict[str, Any]:
    return {"code": exc.code, "message": human_message(exc.code), "detail": exc.message}


def _not_sent(message: str) -> dict[str, Any]:
    return {"code": None, "message": message, "detail": None}


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


def _safe_next(value: str | None) -> str:
    # Only a local absolute path: "//evil.example" and "/\\evil" are other hosts to a browser.
    if not value or not value.startswith("/") or value.startswith(("//", "/\\")):
        return "/"
    if any(c in value for c in "\r\n\t") or len(value) > 512:
        return "/"
    return value


def create_app(
    settings: WebappSettings | None = None,
    *,
    transport: Any = None,
    now: Callable[[], float] = time.time,
) -> FastAPI:
    """The ASGI app. ``transport`` (an httpx transport) lets tests stand in a fake checkpoint."""
    settings = settings or WebappSettings()
    client = CheckpointClient(
        settings.checkpoint_url,
        timeout=settings.checkpoint_timeout,
        verify=checkpoint_verify(settings.checkpoint_ca_file),
        transport=transport,
    )
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_HERE / "templates"),
        autoescape=True,  # set explicitly: every value from the cloud or the agent is text
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=present.inert,  # no bidi override or control character reaches a page
    )
    env.globals.update(
        present=present,
        human_bytes=human_bytes,
        percent=percent,
        duration=present.duration,
        timestamp=present.timestamp,
        STATE_LABELS=present.STATE_LABELS,
        FOLLOWED_STATES=present.OPEN_STATES,
        REJECT_REASONS=present.REJECT_REASONS,
        CSRF_FIELD=CSRF_FIELD,
    )
    secure_setting = settings.cookies_secure()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            client.close()

    app = FastAPI(
        title="Airlock web app",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.client = client
    app.mount("/static", StaticFiles(directory=_HERE / "static"), name="static")
    # Forms are parsed before the CSRF token or the session is looked at: a body over
    # the cap is refused (413) at the first read, never held in memory or spooled to disk.
    app.add_middleware(BodyLimit, max_bytes=_FORM_MAX_BYTES)

    def cookies(request: Request) -> Cookies:
        return Cookies(request, secure_setting=secure_setting)

    @app.middleware("http")
    async def _headers(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        jar = cookies(request)
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

    @app.exception_handler(_SignInRequired)
    async def _to_sign_in(request: Request, exc: _SignInRequired) -> Response:
        response = RedirectResponse("/login?" + urlencode({"next": exc.next_path}), 303)
        jar = cookies(request)
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

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        # Never FastAPI's JSON answer: it echoes the input (a password) and loses the note.
        try:
            return await run_in_threadpool(invalid_request, request, exc)
        except _SignInRequired as signin:
            return await _to_sign_in(request, signin)
        except CheckpointRefused as refused:
            return await _refused(request, refused)
        except CheckpointUnavailable as unavailable:
            return await _unavailable(request, unavailable)

    def invalid_request(request: Request, exc: RequestValidationError) -> Response:
        problem = _invalid_fields(exc)
        path = request.url.path
        if request.method == "POST" and path == "/login":
            username = _form_text(exc, "username")
            return render(
                request,
                "login.html",
                {
                    "next": _safe_next(_form_text(exc, "next")),
                    "error": f"Not signed in: {problem}.",
                    # Kept only when it could be a username; the password never comes back.
                    "username": username if 0 < len(username) <= 64 else "",
                },
                status=422,
            )
        decision = _DECISION_PATH.fullmatch(path) if request.method == "POST" else None
        if decision is not None:
            verb = decision.group(2)
            refused = refuse_decision_csrf(
                request, _form_text(exc, CSRF_FIELD), decision.group(1), verb
            )
            if refused is not None:
                return refused
            proposal_id = checked_id(decision.group(1))
            token, me = signed_in_to_decide(request, proposal_id, verb)
            note = _lf(_form_text(exc, "note"))
            form = {
                _NOTE_FIELD[verb]: note if isinstance(note, str) else "",
                "confirm": _form_text(exc, "confirm"),
                "reason_code": _form_text(exc, "reason_code"),
            }
            return proposal_page(
                request,
                token,
                me,
                proposal_id,
                error=_not_sent(f"Nothing was sent: {problem}. Correct it and send again."),
                status=422,
                form=form,
            )
        return render(
            request,
            "error.html",
            {
                "title": "The request was not understood",
                "message": f"Nothing was changed: {problem}.",
                "code": None,
            },
            status=422,
        )

    @app.exception_handler(CheckpointUnavailable)
    async def _unavailable(request: Request, exc: CheckpointUnavailable) -> Response:
        return render(
            request,
            "error.html",
            {"title": "The checkpoint is not reachable", "message": str(exc), "code": None},
            status=502,
        )

    @app.exception_handler(CheckpointRefused)
    async def _refused(request: Request, exc: CheckpointRefused) -> Response:
        if exc.code == "E_UNAUTHENTICATED":
            return await _to_sign_in(request, _SignInRequired(_here(request)))
        title = "Not found" if exc.code == "E_NOT_FOUND" else "Refused"
        return render(
            request,
            "error.html",
            {
                "title": title,
                "message": human_message(exc.code),
                "code": exc.code,
                "me": await run_in_threadpool(signed_in_or_none, request),
            },
            status=exc.status if 400 <= exc.status < 600 else 400,
        )

    @app.exception_handler(StarletteHTTPException)
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
        return render(
            request,
            "error.html",
            {
                "title": title,
                "message": message,
                "code": None,
                "me": await run_in_threadpool(signed_in_or_none, request),
            },
            status=exc.status_code,
            headers=exc.headers,
        )

    def signed_in_or_none(request: Request) -> Me | None:
        """Who is signed in, for an error page's navigation; None when nobody is or the
        checkpoint cannot say (the error page is shown either way)."""
        token = cookies(request).session(request)
        if token is None:
            return None
        try:
            return client.me(token)
        except (CheckpointRefused, CheckpointUnavailable):
            return None

    def render(
        request: Request,
        name: str,
        context: dict[str, Any],
        *,
        status: int = 200,
        signed_out: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> HTMLResponse:
        # ``signed_out``: this answer clears the session cookie, so its forms' tokens must
        # be bound to no session, as the next request's will be.
        session = None if signed_out else cookies(request).session(request)
        context = {
            "me": None,
            "csrf_token": csrf_token(request.state.csrf_key, session),
            "nav": "",
            "now": int(now()),
            **context,
        }
        html = env.get_template(name).render(context)
        return HTMLResponse(html, status_code=status, headers=headers)

    def signed_in(request: Request) -> tuple[str, Me]:
        token = cookies(request).session(request)
        if token is None:
            raise _SignInRequired(_here(request))
        try:
            me = client.me(token)
        except CheckpointRefused as exc:
            if exc.code == "E_UNAUTHENTICATED":
                raise _SignInRequired(_here(request)) from None
            raise
        return token, me

    def refuse_csrf(request: Request, submitted: str | None) -> Response | None:
        problem = csrf_problem(request, cookies(request), submitted)
        if problem is None:
            return None
        return render(
            request,
            "error.html",
            {
                "title": "Form refused",
                "message": f"Nothing was sent: {problem}. Go back, reload the page and try again.",
                "code": "CSRF",
            },
            status=403,
        )

    def refuse_decision_csrf(
        request: Request, submitted: str | None, proposal_id: str, verb: str
    ) -> Response | None:
        """``refuse_csrf`` for a decision, telling a session that ended from a forgery.

        A form's token is bound to the session it was shown in, so once the person signed
        out (in another tab, say) it matches nothing: that is no attack, and "form
        refused" would mislead. When the request comes from this site with a token but
        carries no session, nothing could be sent in anyone's name either way; the
        person is told that their session ended and is brought back here after signing
        in. The check itself is unchanged: nothing is sent without a matching token.
        """
        jar = cookies(request)
        if (
            submitted
            and jar.session(request) is None
            and csrf_problem(request, jar, submitted) is not None
            and same_origin(request)
            and _PROPOSAL_ID.fullmatch(proposal_id)
        ):
            raise _SignInRequired(f"/proposals/{proposal_id}", verb)
        return refuse_csrf(request, submitted)

    def signed_in_to_decide(request: Request, proposal_id: str, verb: str) -> tuple[str, Me]:
        try:
            return signed_in(request)
        except _SignInRequired:
            raise _SignInRequired(f"/proposals/{proposal_id}", verb) from None

    # -- health and sign-in -----------------------------------------------------------

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> PlainTextResponse:
        return PlainTextResponse("ok")

    @app.get("/login", response_class=HTMLResponse)
    def login_page(request: Request, next: str | None = None) -> Response:
        jar = cookies(request)
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
        response = render(
            request, "login.html", {"next": _safe_next(next), "error": None, "notice": notice}
        )
        if request.cookies.get(jar.flash_name) is not None:
            jar.clear_flash(response)  # shown once
        return response

    @app.post("/login", response_class=HTMLResponse)
    def login(
        request: Request,
        username: Annotated[str, Form(max_length=64)],
        password: Annotated[str, Form(max_length=1024)],
        csrf: Csrf = "",
        next: Annotated[str, Form(max_length=512)] = "/",
    ) -> Response:
        refused = refuse_csrf(request, csrf)
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
            page = render(
                request,
                "login.html",
                {"next": _safe_next(next), "error": message, "username": username},
                status=401 if exc.status == 401 else exc.status,
            )
            if exc.retry_after is not None:
                page.headers["Retry-After"] = str(exc.retry_after)
            return page
        # A sign-in over a session this browser still holds replaces it: end that one at
        # the checkpoint too, or it would stay valid, unheld, until it expired.
        previous = cookies(request).session(request)
        if previous is not None and previous != session.token:
            with contextlib.suppress(CheckpointRefused, CheckpointUnavailable):
                client.logout(previous)
        response = RedirectResponse(_safe_next(next), 303)
        cookies(request).set_session(response, session.token, session.expires_at - int(now()))
        return response

    @app.post("/logout")
    def logout(request: Request, csrf: Csrf = "") -> Response:
        refused = refuse_csrf(request, csrf)
        if refused is not None:
            return refused
        token = cookies(request).session(request)
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
            response = render(
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
        cookies(request).clear_session(response)
        return response

    # -- the queue ----------------------------------------------------------------------

    def queue_filters(request: Request) -> dict[str, str]:
        out = {}
        for name, pattern in _FILTERS.items():
            value = request.query_params.get(name, "")
            if value and pattern.fullmatch(value):
                out[name] = value
        return out

    def queue_items(
        token: str, filters: dict[str, str], *, background: bool = False
    ) -> list[Proposal]:
        """``background``: the page's own refresh, which keeps no idle session alive."""
        if "state" in filters:
            return client.proposals(token, limit=_PAGE, background=background, **filters).items
        # Pending first (the work to do), then everything else newest first.
        pending = client.proposals(
            token, limit=_PAGE, state="pending", background=background, **filters
        ).items
        rest = [
            p
            for p in client.proposals(token, limit=100, background=background, **filters).items
            if p.state != "pending"
        ]
        return pending + rest

    def rows_signature(items: list[Proposal]) -> str:
        # A refusal note or the executor's late resolution changes no state: counted
        # here, so the poll shows its badge.
        text = "|".join(
            f"{p.id}:{p.state}:{len(p.votes)}:{len(p.executor_refusals)}"
            f":{present.executor_conflict(p)}"
            for p in items
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @app.get("/", response_class=HTMLResponse)
    def queue(request: Request) -> Response:
        token, me = signed_in(request)
        filters = queue_filters(request)
        items = queue_items(token, filters)
        return render(
            request,
            "queue.html",
            {
                "me": me,
                "nav": "queue",
                "items": items,
                "filters": filters,
                "states": _STATES,
                "operations": _OPERATIONS,
                "signature": rows_signature(items),
                "poll_url": "/queue/rows" + ("?" + urlencode(filters) if filters else ""),
                "poll_ms": settings.queue_poll_seconds * 1000,
            },
        )

    @app.get("/queue/rows", response_class=HTMLResponse)
    def queue_rows(request: Request) -> Response:
        token = cookies(request).session(request)
        if token is None:
            return PlainTextResponse("sign in again", 401)
        try:
            items = queue_items(token, queue_filters(request), background=True)
        except CheckpointRefused as exc:
            return PlainTextResponse(human_message(exc.code), exc.status)
        return render(
            request, "_queue_rows.html", {"items": items, "signature": rows_signature(items)}
        )

    bulk.install(app, client=client, render=render, signed_in=signed_in, refuse_csrf=refuse_csrf)

    # -- one proposal -------------------------------------------------------------------

    def proposal_page(
        request: Request,
        token: str,
        me: Me,
        proposal_id: str,
        *,
        error: dict[str, Any] | None = None,
        status: int = 200,
        done: str | None = None,
        form: dict[str, str] | None = None,
    ) -> Response:
        p = client.proposal(token, proposal_id)
        evidence = p.action.get("evidence") or {}
        return render(
            request,
            "proposal.html",
            {
                "me": me,
                "nav": "queue",
                "p": p,
                "evidence": evidence if isinstance(evidence, dict) else {},
                "charts": evidence_charts(evidence if isinstance(evidence, dict) else {}),
                "hash_ok": present.hash_matches(p),
                "signed_problem": present.signed_action_problem(p),
                "error": error,
                "done": _DONE.get(done or ""),
                "form": form or {},
                "signature": rows_signature([p]),
                "poll_ms": settings.queue_poll_seconds * 1000,
            },
            status=status,
        )

    def checked_id(proposal_id: str) -> str:
        if not _PROPOSAL_ID.fullmatch(proposal_id):
            raise CheckpointRefused("E_NOT_FOUND", "malformed proposal id", 404)
        return proposal_id

    @app.get("/proposals/{proposal_id}", response_class=HTMLResponse)
    def proposal(request: Request, proposal_id: str) -> Response:
        token, me = signed_in(request)
        proposal_id = checked_id(proposal_id)
        # The banner comes from the cookie the decision's POST set, never from the URL: a
        # link must not make this page claim a decision nobody made.
        jar = cookies(request)
        flash = jar.flash(request)
        recorded, _, verb = (flash or "").partition(":")
        done = verb if recorded == proposal_id else None
        response = proposal_page(request, token, me, proposal_id, done=done)
        if request.cookies.get(jar.flash_name) is not None:
            jar.clear_flash(response)  # shown once
        return response

    @app.get("/proposals/{proposal_id}/signature", response_class=PlainTextResponse)
    def proposal_signature(request: Request, proposal_id: str) -> Response:
        """What an open proposal's page polls: it reloads when this changes (app.js)."""
        token = cookies(request).session(request)
        if token is None:
            return PlainTextResponse("sign in again", 401)
        try:
            p = client.proposal(token, checked_id(proposal_id))
        except CheckpointRefused as exc:
            return PlainTextResponse(human_message(exc.code), exc.status)
        return PlainTextResponse(rows_signature([p]))

    def decide(
        request: Request,
        proposal_id: str,
        *,
        csrf: str,
        verb: str,
        call: Callable[[str], object],
        form: dict[str, str],
    ) -> Response:
        refused = refuse_decision_csrf(request, csrf, proposal_id, verb)
        if refused is not None:
            return refused
        proposal_id = checked_id(proposal_id)
        token, me = signed_in_to_decide(request, proposal_id, verb)
        try:
            call(token)
        except CheckpointRefused as exc:
            if exc.code == "E_UNAUTHENTICATED":  # the session ended at the checkpoint
                raise _SignInRequired(f"/proposals/{proposal_id}", verb) from None
            # Show the current proposal with the reason, and keep what the person typed.
            return proposal_page(
                request, token, me, proposal_id, error=_refusal(exc), status=exc.status, form=form
            )
        except _NotSent as exc:
            return proposal_page(
                request,
                token,
                me,
                proposal_id,
                error=_not_sent(exc.message),
                status=exc.status,
                form=form,
            )
        response = RedirectResponse(f"/proposals/{proposal_id}", 303)
        cookies(request).set_flash(response, f"{proposal_id}:{verb}")
        return response

    @app.post("/proposals/{proposal_id}/approve")
    def approve(
        request: Request,
        proposal_id: str,
        *,
        action_hash: Annotated[str, Form(max_length=80)],
        csrf: Csrf = "",
        note: Note = "",
        confirm: Annotated[str | None, Form(max_length=128)] = None,
    ) -> Response:
        def call(token: str) -> object:
            # The page withholds the form when the answer disagrees with itself; a vote
            # sent without that form (a stale page, a hand-made request) is held to the
            # same check, on the checkpoint's answer as it is now.
            problem = present.signed_action_problem(client.proposal(token, proposal_id))
            if problem is not None:
                raise _NotSent(
                    f"Nothing was sent: this page cannot show what you would approve, because "
                    f"{problem}.",
                    409,
                )
            return client.approve(
                token, proposal_id, action_hash=action_hash, confirm=confirm, note=note
            )

        return decide(
            request,
            proposal_id,
            csrf=csrf,
            verb="approve",
            call=call,
            form={"note": note, "confirm": confirm or ""},
        )

    @app.post("/proposals/{proposal_id}/reject")
    def reject(
        request: Request,
        proposal_id: str,
        reason_code: Annotated[str, Form(max_length=32)],
        csrf: Csrf = "",
        note: Note = "",
    ) -> Response:
        return decide(
            request,
            proposal_id,
            csrf=csrf,
            verb="reject",
            call=lambda token: client.reject(
                token, proposal_id, reason_code=reason_code, note=note
            ),
            form={"reject_note": note, "reason_code": reason_code},
        )

    @app.post("/proposals/{proposal_id}/revoke")
    def revoke(request: Request, proposal_id: str, csrf: Csrf = "", note: Note = "") -> Response:
        return decide(
            request,
            proposal_id,
            csrf=csrf,
            verb="revoke",
            call=lambda token: client.revoke(token, proposal_id, note=note),
            form={"revoke_note": note},
        )

    @app.post("/proposals/{proposal_id}/resolve")
    def resolve(
        request: Request,
        proposal_id: str,
        decision: Annotated[str, Form(max_length=32)],
        csrf: Csrf = "",
        note: Note = "",
    ) -> Response:
        return decide(
            request,
            proposal_id,
            csrf=csrf,
            verb="resolve",
            call=lambda token: client.resolve(token, proposal_id, decision=decision, note=note),
            form={"resolve_note": note},
        )

    # -- history, audit, keys -----------------------------------------------------------

    @app.get("/history", response_class=HTMLResponse)
    def history(
        request: Request,
        before: Annotated[str | None, Query(max_length=90)] = None,
    ) -> Response:
        token, me = signed_in(request)
        if before is not None and not _PROPOSAL_ID.fullmatch(before):
            before = None
        items, next_before = decided_page(token, before)
        return render(
            request,
            "history.html",
            {
                "me": me,
                "nav": "history",
                "items": items,
                "next_before": next_before,
                "older": before is not None,
            },
        )

    def decided_page(token: str, before: str | None) -> tuple[list[Proposal], str | None]:
        """One page of decided proposals, most recently proposed first, and the cursor
        of the next.

        The checkpoint lists newest first by creation (``created_at``, then id), however
        many pending proposals are newer, and cannot order by the last change. One call
        with every decided state is the page, and its ``next_before`` the cursor, when
        the answer's ``states`` echoes exactly the states asked for. A checkpoint older
        than the repeatable ``state`` keeps only the last one given and echoes nothing:
        its answer is dropped and the page is built from one call per state, below.
        """
        page = client.proposals(token, limit=_HISTORY_PAGE, state=_DECIDED, before=before)
        if page.states is not None and sorted(page.states) == sorted(_DECIDED):
            return page.items, page.next_before
        return decided_page_state_by_state(token, before)

    def decided_page_state_by_state(
        token: str, before: str | None
    ) -> tuple[list[Proposal], str | None]:
        """``decided_page`` from a checkpoint that filters by one state at a time.

        ``before`` names any proposal as the cursor, so each decided state's first page
        after the cursor, merged in the checkpoint's order, holds this page exactly.
        Asked again on every page, never remembered: the web app keeps no state, and
        the checkpoint may be upgraded (or rolled back) between two pages.
        """
        merged: list[Proposal] = []
        more = False
        for state in _DECIDED:
            page = client.proposals(token, limit=_HISTORY_PAGE, state=state, before=before)
            merged.extend(page.items)
            more = more or page.next_before is not None
        # The checkpoint's order: ids compared as bytes break ties within one second, as
        # SQLite does and as PostgreSQL does for the agent's ids (prop_ and lowercase hex).
        merged.sort(key=lambda p: (p.created_at, p.id), reverse=True)
        items = merged[:_HISTORY_PAGE]
        more = more or len(merged) > _HISTORY_PAGE
        return items, (items[-1].id if more and items else None)

    @app.get("/audit", response_class=HTMLResponse)
    def audit(request: Request) -> Response:
        token, me = signed_in(request)
        return render(
            request, "audit.html", {"me": me, "nav": "audit", "chain": client.audit(token)}
        )

    @app.get("/keys", response_class=HTMLResponse)
    def keys(request: Request) -> Response:
        _, me = signed_in(request)
        return render(request, "keys.html", {"me": me, "nav": "keys", "keys": client.keys()})

    # Outermost: a page from another name (DNS rebinding to a loopback web app) is
    # answered before anything reads its cookies.
    app.add_middleware(
        HostAllowlist,
        hosts=answered_hosts(settings.allowed_hosts, settings.host),
        body=b"E_HOST: unknown Host\n",
        content_type="text/plain; charset=utf-8",
    )
    return app


def _here(request: Request) -> str:
    path = request.url.path
    decision = _DECISION_PATH.fullmatch(path) if request.method == "POST" else None
    if decision is not None and _PROPOSAL_ID.fullmatch(decision.group(1)):
        return f"/proposals/{decision.group(1)}"  # back to the page the form was on
    if request.method != "GET" or path.startswith("/queue/rows"):
        return "/"
    query = request.url.query
    return _safe_next(path + ("?" + query if query else ""))
