"""One proposal's page and the decisions on it: approve, edit (a tool call's arguments),
reject, revoke, resolve.

Every decision's form is checked for this session's CSRF token before anything is sent,
and every decision goes to the checkpoint, which is the only judge: a button hidden or
disabled here is a convenience, never the control. A refused decision shows the page
again with the reason and what the person typed; a recorded one redirects to the page,
whose banner comes from a cookie the POST set, never from the URL.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Final

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from airlock.api import Proposal
from airlock.protocol import canonical_bytes

from . import present
from .charts import evidence_charts
from .client import Me
from .deps import (
    ClientDep,
    Csrf,
    Note,
    NotSent,
    Session,
    ShownRefusal,
    SignInRequired,
    Web,
    WebDep,
    checked_id,
    not_sent,
    refusal,
    rows_signature,
)
from .errors import CheckpointRefused, human_message

__all__ = ["NOTE_FIELD", "proposal_page", "router"]

router = APIRouter()

_DONE: Final = {
    "approve": "Your approval was recorded.",
    "reject": "The proposal was rejected; the agent will read your reason.",
    "revoke": "The approval was revoked; the executor will refuse it.",
    "resolve": "Your decision on the in-doubt execution was recorded.",
    "edit": "Your edit was recorded as this new proposal, with your approval of it.",
}
#: The form field that keeps what was typed in each decision form, as the page reads it.
NOTE_FIELD: Final = {
    "approve": "note",
    "reject": "reject_note",
    "revoke": "revoke_note",
    "resolve": "resolve_note",
    "edit": "edit_note",
}
#: The most arguments an edit form sends, and the longest value typed for one.
_EDIT_MAX_ARGS: Final = 64
_EDIT_MAX_VALUE: Final = 4000


def proposal_page(
    web: Web,
    request: Request,
    token: str,
    me: Me,
    proposal_id: str,
    *,
    error: ShownRefusal | None = None,
    status: int = 200,
    done: str | None = None,
    form: dict[str, str] | None = None,
) -> Response:
    """The proposal's page as the checkpoint answers now.

    Args:
        error: a refusal to show (``deps.refusal`` or ``deps.not_sent``).
        done: the decision whose banner to show.
        form: what the person typed, to keep in the forms.

    Raises:
        CheckpointRefused, CheckpointUnavailable: from reading the proposal.
    """
    p = web.client.proposal(token, proposal_id)
    evidence = p.action.get("evidence") or {}
    return web.render(
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
            "poll_ms": web.settings.queue_poll_seconds * 1000,
        },
        status=status,
    )


@router.get("/proposals/{proposal_id}", response_class=HTMLResponse)
def proposal(request: Request, proposal_id: str, web: WebDep, session: Session) -> Response:
    token, me = session
    proposal_id = checked_id(proposal_id)
    # The banner comes from the cookie the decision's POST set, never from the URL: a
    # link must not make this page claim a decision nobody made.
    jar = web.cookies(request)
    flash = jar.flash(request)
    recorded, _, verb = (flash or "").partition(":")
    done = verb if recorded == proposal_id else None
    response = proposal_page(web, request, token, me, proposal_id, done=done)
    if request.cookies.get(jar.flash_name) is not None:
        jar.clear_flash(response)  # shown once
    return response


@router.get("/proposals/{proposal_id}/signature", response_class=PlainTextResponse)
def proposal_signature(request: Request, proposal_id: str, web: WebDep) -> Response:
    """What an open proposal's page polls: it reloads when this changes (app.js)."""
    token = web.cookies(request).session(request)
    if token is None:
        return PlainTextResponse("sign in again", 401)
    try:
        p = web.client.proposal(token, checked_id(proposal_id))
    except CheckpointRefused as exc:
        return PlainTextResponse(human_message(exc.code), exc.status)
    return PlainTextResponse(rows_signature([p]))


def _decide(
    web: Web,
    request: Request,
    proposal_id: str,
    *,
    csrf: str,
    verb: str,
    call: Callable[[str], object],
    form: dict[str, str],
) -> Response:
    refused = web.refuse_decision_csrf(request, csrf, proposal_id, verb)
    if refused is not None:
        return refused
    proposal_id = checked_id(proposal_id)
    token, me = web.signed_in_to_decide(request, proposal_id, verb)
    try:
        result = call(token)
    except CheckpointRefused as exc:
        if exc.code == "E_UNAUTHENTICATED":  # the session ended at the checkpoint
            raise SignInRequired(f"/proposals/{proposal_id}", verb) from None
        # Show the current proposal with the reason, and keep what the person typed.
        return proposal_page(
            web, request, token, me, proposal_id, error=refusal(exc), status=exc.status, form=form
        )
    except NotSent as exc:
        return proposal_page(
            web,
            request,
            token,
            me,
            proposal_id,
            error=not_sent(exc.message),
            status=exc.status,
            form=form,
        )
    # An edit's answer is the new proposal: the person is taken there.
    shown = result.id if verb == "edit" and isinstance(result, Proposal) else proposal_id
    response = RedirectResponse(f"/proposals/{checked_id(shown)}", 303)
    web.cookies(request).set_flash(response, f"{shown}:{verb}")
    return response


@router.post("/proposals/{proposal_id}/approve")
def approve(
    request: Request,
    proposal_id: str,
    web: WebDep,
    client: ClientDep,
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
            raise NotSent(
                f"Nothing was sent: this page cannot show what you would approve, because "
                f"{problem}.",
                409,
            )
        return client.approve(
            token, proposal_id, action_hash=action_hash, confirm=confirm, note=note
        )

    return _decide(
        web,
        request,
        proposal_id,
        csrf=csrf,
        verb="approve",
        call=call,
        form={"note": note, "confirm": confirm or ""},
    )


@router.post("/proposals/{proposal_id}/reject")
def reject(
    request: Request,
    proposal_id: str,
    *,
    web: WebDep,
    client: ClientDep,
    reason_code: Annotated[str, Form(max_length=32)],
    csrf: Csrf = "",
    note: Note = "",
    # A tool call's own reason (its policy's ``[tools.<tool>] reject_reasons``), typed:
    # the web app does not read the policy; the checkpoint judges the code.
    tool_reason: Annotated[str, Form(max_length=40)] = "",
) -> Response:
    code = tool_reason.strip() or reason_code
    return _decide(
        web,
        request,
        proposal_id,
        csrf=csrf,
        verb="reject",
        call=lambda token: client.reject(token, proposal_id, reason_code=code, note=note),
        form={"reject_note": note, "reason_code": reason_code, "tool_reason": tool_reason},
    )


@router.post("/proposals/{proposal_id}/revoke")
def revoke(
    request: Request,
    proposal_id: str,
    *,
    web: WebDep,
    client: ClientDep,
    csrf: Csrf = "",
    note: Note = "",
) -> Response:
    return _decide(
        web,
        request,
        proposal_id,
        csrf=csrf,
        verb="revoke",
        call=lambda token: client.revoke(token, proposal_id, note=note),
        form={"revoke_note": note},
    )


@router.post("/proposals/{proposal_id}/resolve")
def resolve(
    request: Request,
    proposal_id: str,
    *,
    web: WebDep,
    client: ClientDep,
    decision: Annotated[str, Form(max_length=32)],
    csrf: Csrf = "",
    note: Note = "",
) -> Response:
    return _decide(
        web,
        request,
        proposal_id,
        csrf=csrf,
        verb="resolve",
        call=lambda token: client.resolve(token, proposal_id, decision=decision, note=note),
        form={"resolve_note": note},
    )


def _typed_value(name: str, was: Any, text: str) -> Any:
    """What a person typed for argument ``name`` (shown as JSON): JSON when it parses;
    for a text argument, the words as typed when they are not a JSON string."""
    try:
        value = json.loads(text, parse_float=_no_float, parse_constant=_no_float)
    except ValueError:
        if isinstance(was, str):
            return text
        raise NotSent(
            f"Nothing was sent: the value of {name} is not JSON (a number such as 15, "
            "true, null, or text in double quotes).",
            422,
        ) from None
    return text if isinstance(was, str) and not isinstance(value, str) else value


def _no_float(text: str) -> Any:
    raise ValueError(f"{text} is not an integer")


def edited_values(
    arguments: Mapping[str, Any], names: list[str], texts: list[str]
) -> dict[str, Any]:
    """The arguments whose typed value differs from the signed one: name → new value.

    Raises:
        NotSent: a name the call does not have, a value that is not JSON, or no change.
    """
    if len(names) != len(texts) or len(names) > _EDIT_MAX_ARGS:
        raise NotSent("Nothing was sent: the edit form was not complete.", 422)
    values: dict[str, Any] = {}
    for name, text in zip(names, texts, strict=True):
        if name not in arguments or len(text) > _EDIT_MAX_VALUE:
            raise NotSent("Nothing was sent: the edit form was not complete.", 422)
        value = _typed_value(name, arguments[name], text.strip())
        if canonical_bytes(value) != canonical_bytes(arguments[name]):
            values[name] = value
    if not values:
        raise NotSent("Nothing was sent: you changed no argument's value.", 422)
    return values


@router.post("/proposals/{proposal_id}/edit")
def edit(
    request: Request,
    proposal_id: str,
    web: WebDep,
    client: ClientDep,
    *,
    action_hash: Annotated[str, Form(max_length=80)],
    arg_name: Annotated[list[str], Form()],
    arg_value: Annotated[list[str], Form()],
    csrf: Csrf = "",
    note: Note = "",
    confirm: Annotated[str | None, Form(max_length=128)] = None,
) -> Response:
    def call(token: str) -> object:
        # As approve: only what this page can show is edited, and only from its signed text.
        current = client.proposal(token, proposal_id)
        problem = present.signed_action_problem(current)
        if problem is not None:
            raise NotSent(
                f"Nothing was sent: this page cannot show what you would edit, because {problem}.",
                409,
            )
        arguments = current.action.get("arguments")
        values = edited_values(
            arguments if isinstance(arguments, dict) else {}, arg_name, arg_value
        )
        return client.edit(
            token,
            proposal_id,
            action_hash=action_hash,
            values=values,
            confirm=confirm,
            note=note,
        )

    return _decide(
        web,
        request,
        proposal_id,
        csrf=csrf,
        verb="edit",
        call=call,
        form={
            "edit_note": note,
            "edit_confirm": confirm or "",
            **{f"arg:{n}": v for n, v in zip(arg_name, arg_value, strict=False)},
        },
    )
