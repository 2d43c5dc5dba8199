"""The Notifications page: which events reach the signed-in person, and where.

The preference lives at the checkpoint (``/v1/me/notifications``); this page shows it
and sends the form, checked for this session's CSRF token first. A personal Slack URL
is a secret: the checkpoint shows it back masked, and the form never holds it, so
leaving the field empty keeps it and "remove" drops it.
"""

from __future__ import annotations

from typing import Annotated, Final

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from .client import NotifyPrefsView
from .deps import (
    ClientDep,
    Csrf,
    Session,
    ShownRefusal,
    SignedIn,
    SignInRequired,
    WebDep,
    refusal,
)
from .errors import CheckpointRefused

__all__ = ["router"]

router = APIRouter()

_PATH: Final = "/notifications"
_SAVED: Final = "notifications:saved"
_CLEARED: Final = "notifications:cleared"
_DONE: Final = {
    _SAVED: "Your notification preferences were saved.",
    _CLEARED: "Your preferences were removed: your groups' default applies again.",
}
#: What each event is, in the words the page shows.
_KIND_TEXT: Final = {
    "proposal.needs_vote": "A proposal waits for a vote",
    "proposal.escalated": "A proposal was escalated to a group I am in",
    "proposal.expiring": "A proposal's approval window is about to end",
    "proposal.expired": "A proposal's window ended with no decision",
    "proposal.approved": "A proposal was approved",
    "proposal.executed": "An approved action was executed",
    "proposal.failed": "An approved action failed",
    "proposal.refused": "The executor refused an approval",
    "proposal.in_doubt": "An execution is in doubt and needs a person",
    "approval.lapsed": "A signed approval expired unused",
}


def _page(
    request: Request,
    web: WebDep,
    session: SignedIn,
    prefs: NotifyPrefsView,
    *,
    done: str | None = None,
    error: ShownRefusal | None = None,
    status: int = 200,
) -> HTMLResponse:
    return web.render(
        request,
        "notifications.html",
        {
            "me": session.me,
            "nav": "notifications",
            "prefs": prefs,
            "kinds": [(k, _KIND_TEXT.get(k, k)) for k in prefs.kinds],
            "done": done,
            "error": error,
        },
        status=status,
    )


@router.get(_PATH, response_class=HTMLResponse)
def notifications(request: Request, web: WebDep, session: Session) -> Response:
    jar = web.cookies(request)
    flash = jar.flash(request)
    response = _page(
        request, web, session, web.client.notify_prefs(session.token), done=_DONE.get(flash or "")
    )
    if flash is not None:
        jar.clear_flash(response)  # shown once
    return response


@router.post(_PATH)
def save(
    request: Request,
    web: WebDep,
    client: ClientDep,
    *,
    csrf: Csrf = "",
    event: Annotated[list[str] | None, Form(max_length=32)] = None,
    email: Annotated[str, Form(max_length=254)] = "",
    slack_url: Annotated[str, Form(max_length=500)] = "",
    slack_remove: Annotated[str, Form(max_length=8)] = "",
    action: Annotated[str, Form(max_length=16)] = "save",
) -> Response:
    """Save the form, or (``action=default``) forget the preference."""
    refused = web.refuse_csrf(request, csrf)
    if refused is not None:
        return refused
    session = web.signed_in(request)
    try:
        if action == "default":
            client.clear_notify_prefs(session.token)
            done = _CLEARED
        else:
            client.set_notify_prefs(
                session.token,
                events=event or [],
                email=email.strip() or None,
                slack_url=slack_url.strip() or None,
                keep_slack_url=not slack_remove,
            )
            done = _SAVED
    except CheckpointRefused as exc:
        if exc.code == "E_UNAUTHENTICATED":
            raise SignInRequired(_PATH) from None
        prefs = client.notify_prefs(session.token)
        return _page(request, web, session, prefs, error=refusal(exc), status=exc.status)
    response = RedirectResponse(_PATH, 303)
    web.cookies(request).set_flash(response, done)
    return response
