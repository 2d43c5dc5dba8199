"""What every router of the web app shares: the page context and the dependencies.

:class:`Web` is the app's one context object (the checkpoint client, the templates, the
cookie settings and the clock), built once by ``create_app`` and kept on ``app.state``.
Routes receive it, the checkpoint client and the signed-in person through the FastAPI
dependencies :data:`WebDep`, :data:`ClientDep` and :data:`Session`.

The CSRF check of a form is a call (:meth:`Web.refuse_csrf`), never a dependency:
FastAPI runs dependencies before it validates the form, and an invalid form must be
answered by the invalid-form page (``handlers.py``) exactly as a valid one is checked.

This module must never log a cookie, a token or a password, and never keep one.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final, NamedTuple

import jinja2
from fastapi import Depends, Form, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import BeforeValidator

from airlock.api import Proposal
from airlock.settings import WebappSettings

from . import present
from .charts import human_bytes, percent
from .client import CheckpointClient, Me
from .errors import CheckpointRefused, CheckpointUnavailable, human_message
from .security import CSRF_FIELD, Cookies, csrf_problem, csrf_token, same_origin

__all__ = [
    "DECISION_PATH",
    "PROPOSAL_ID",
    "ClientDep",
    "Csrf",
    "NotSent",
    "Note",
    "Session",
    "ShownRefusal",
    "SignInRequired",
    "SignedIn",
    "Web",
    "WebDep",
    "checked_id",
    "here",
    "lf",
    "not_sent",
    "refusal",
    "rows_signature",
    "safe_next",
]

_HERE: Final = Path(__file__).parent
PROPOSAL_ID: Final = re.compile(r"^prop_[A-Za-z0-9_-]{8,80}$")
DECISION_PATH: Final = re.compile(r"^/proposals/([^/]+)/(approve|reject|revoke|resolve|edit)$")


def lf(value: object) -> object:
    """A form's text with CRLF and CR as LF.

    Browsers submit a <textarea>'s line breaks as CRLF, but its maxlength counts each as
    one character: normalised before the length check so what fitted the box fits here.
    """
    if isinstance(value, str):
        return value.replace("\r\n", "\n").replace("\r", "\n")
    return value


Note = Annotated[str, BeforeValidator(lf), Form(max_length=2000)]
Csrf = Annotated[str, Form(alias=CSRF_FIELD)]


class SignInRequired(Exception):
    """Sign in first. ``verb``: the decision a person sent when their session had ended
    (the sign-in page then says it was not recorded), with ``next_path`` its proposal."""

    def __init__(self, next_path: str, verb: str | None = None) -> None:
        self.next_path = next_path
        self.verb = verb


class NotSent(Exception):
    """A decision the web app refuses itself, before anything reaches the checkpoint."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class SignedIn(NamedTuple):
    """The person a request is made for: their checkpoint session token and who they are."""

    token: str
    me: Me


@dataclass(frozen=True, slots=True)
class ShownRefusal:
    """A refused decision as its page shows it (``proposal.html`` reads the fields)."""

    #: What the person reads first.
    message: str
    #: The checkpoint's code and its own words; both None when nothing reached it.
    code: str | None = None
    detail: str | None = None


def refusal(exc: CheckpointRefused) -> ShownRefusal:
    """The checkpoint's refusal as a page shows it: code, words, and its own detail."""
    return ShownRefusal(human_message(exc.code), exc.code, exc.message)


def not_sent(message: str) -> ShownRefusal:
    """The web app's own refusal, as a page shows it: nothing reached the checkpoint."""
    return ShownRefusal(message)


def safe_next(value: str | None) -> str:
    """``value`` when it is a local absolute path to return to, else ``/``."""
    # Only a local absolute path: "//evil.example" and "/\\evil" are other hosts to a browser.
    if not value or not value.startswith("/") or value.startswith(("//", "/\\")):
        return "/"
    if any(c in value for c in "\r\n\t") or len(value) > 512:
        return "/"
    return value


def here(request: Request) -> str:
    """Where to bring a person back after signing in: the page this request was for."""
    path = request.url.path
    decision = DECISION_PATH.fullmatch(path) if request.method == "POST" else None
    if decision is not None and PROPOSAL_ID.fullmatch(decision.group(1)):
        return f"/proposals/{decision.group(1)}"  # back to the page the form was on
    if request.method != "GET" or path.startswith("/queue/rows"):
        return "/"
    query = request.url.query
    return safe_next(path + ("?" + query if query else ""))


def checked_id(proposal_id: str) -> str:
    """``proposal_id`` when well formed. Raises :class:`CheckpointRefused` (E_NOT_FOUND)."""
    if not PROPOSAL_ID.fullmatch(proposal_id):
        raise CheckpointRefused("E_NOT_FOUND", "malformed proposal id", 404)
    return proposal_id


def rows_signature(items: list[Proposal]) -> str:
    """A short digest of what a polling page shows; the page reloads when it changes."""
    # A refusal note or the executor's late resolution changes no state: counted
    # here, so the poll shows its badge.
    text = "|".join(
        f"{p.id}:{p.state}:{len(p.votes)}:{len(p.executor_refusals)}:{present.executor_conflict(p)}"
        for p in items
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _environment() -> jinja2.Environment:
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
    return env


class Web:
    """The web app's context: the checkpoint client, the templates, cookies and the clock.

    Args:
        settings: the web app's settings (cookie security, poll interval).
        client: the checkpoint client every route calls.
        now: the clock, in seconds since the epoch.
    """

    def __init__(
        self, settings: WebappSettings, client: CheckpointClient, now: Callable[[], float]
    ) -> None:
        self.settings = settings
        self.client = client
        self.now = now
        self._env = _environment()
        self._secure_setting = settings.cookies_secure()

    def cookies(self, request: Request) -> Cookies:
        """The request's cookie jar, with this app's Secure setting."""
        return Cookies(request, secure_setting=self._secure_setting)

    def render(
        self,
        request: Request,
        name: str,
        context: Mapping[str, object],
        *,
        status: int = 200,
        signed_out: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> HTMLResponse:
        """Template ``name`` with ``context``, the CSRF token and the clock.

        ``signed_out``: this answer clears the session cookie, so its forms' tokens must
        be bound to no session, as the next request's will be.
        """
        session = None if signed_out else self.cookies(request).session(request)
        context = {
            "me": None,
            "csrf_token": csrf_token(request.state.csrf_key, session),
            "nav": "",
            "now": int(self.now()),
            **context,
        }
        html = self._env.get_template(name).render(context)
        return HTMLResponse(html, status_code=status, headers=headers)

    def signed_in(self, request: Request) -> SignedIn:
        """The person signed in. Raises :class:`SignInRequired` when nobody is or the
        session ended at the checkpoint, and any other refusal of the checkpoint's."""
        token = self.cookies(request).session(request)
        if token is None:
            raise SignInRequired(here(request))
        try:
            me = self.client.me(token)
        except CheckpointRefused as exc:
            if exc.code == "E_UNAUTHENTICATED":
                raise SignInRequired(here(request)) from None
            raise
        return SignedIn(token, me)

    def signed_in_or_none(self, request: Request) -> Me | None:
        """Who is signed in, for an error page's navigation; None when nobody is or the
        checkpoint cannot say (the error page is shown either way)."""
        token = self.cookies(request).session(request)
        if token is None:
            return None
        try:
            return self.client.me(token)
        except (CheckpointRefused, CheckpointUnavailable):
            return None

    def signed_in_to_decide(self, request: Request, proposal_id: str, verb: str) -> SignedIn:
        """:meth:`signed_in` for a decision: the sign-in page then says it was not sent."""
        try:
            return self.signed_in(request)
        except SignInRequired:
            raise SignInRequired(f"/proposals/{proposal_id}", verb) from None

    def refuse_csrf(self, request: Request, submitted: str | None) -> Response | None:
        """The 403 page when ``submitted`` is not this session's CSRF token, else None."""
        problem = csrf_problem(request, self.cookies(request), submitted)
        if problem is None:
            return None
        return self.render(
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
        self, request: Request, submitted: str | None, proposal_id: str, verb: str
    ) -> Response | None:
        """``refuse_csrf`` for a decision, telling a session that ended from a forgery.

        A form's token is bound to the session it was shown in, so once the person signed
        out (in another tab, say) it matches nothing: that is no attack, and "form
        refused" would mislead. When the request comes from this site with a token but
        carries no session, nothing could be sent in anyone's name either way; the
        person is told that their session ended and is brought back here after signing
        in. The check itself is unchanged: nothing is sent without a matching token.

        Raises:
            SignInRequired: in that case, naming the decision.
        """
        jar = self.cookies(request)
        if (
            submitted
            and jar.session(request) is None
            and csrf_problem(request, jar, submitted) is not None
            and same_origin(request)
            and PROPOSAL_ID.fullmatch(proposal_id)
        ):
            raise SignInRequired(f"/proposals/{proposal_id}", verb)
        return self.refuse_csrf(request, submitted)


async def _web(request: Request) -> Web:
    web: Web = request.app.state.web
    return web


async def _client(request: Request) -> CheckpointClient:
    client: CheckpointClient = request.app.state.client
    return client


def _session(request: Request, web: Annotated[Web, Depends(_web)]) -> SignedIn:
    # A plain def: FastAPI runs it in the thread pool, as the client's call blocks.
    return web.signed_in(request)


#: The app's :class:`Web`.
WebDep = Annotated[Web, Depends(_web)]
#: The checkpoint client.
ClientDep = Annotated[CheckpointClient, Depends(_client)]
#: The person signed in; a request without a live session is sent to sign in. Only for
#: routes whose parameters cannot be invalid: it runs before FastAPI validates them.
Session = Annotated[SignedIn, Depends(_session)]
