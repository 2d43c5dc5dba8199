"""The queue of proposals, its background refresh, and the history of decided ones.

The queue lists pending proposals first (the work to do), then everything else newest
first; its page polls ``/queue/rows`` and reloads the rows when their signature changes.
The history pages through every decided proposal, most recently proposed first.
"""

from __future__ import annotations

import re
from typing import Annotated, Final
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response

from airlock.api import Proposal

from . import present
from .client import CheckpointClient
from .deps import PROPOSAL_ID, Session, WebDep, rows_signature
from .errors import CheckpointRefused, human_message

__all__ = ["router"]

router = APIRouter()

_STATES: Final = tuple(present.STATE_LABELS)
#: Every state but pending: what the history lists, in one call to a checkpoint that
#: echoes the states it filtered on, else one call per state, merged (``_decided_page``).
_DECIDED: Final = tuple(s for s in _STATES if s != "pending")
_HISTORY_PAGE: Final = 50
_OPERATIONS: Final = ("stop", "delete")
_FILTERS: Final = {
    "state": re.compile(r"^[a-z_]{1,32}$"),
    "operation": re.compile(r"^[a-z_]{1,32}$"),
    "account": re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$"),
    "region": re.compile(r"^[a-z0-9-]{1,40}$"),
}
_PAGE: Final = 200


def _queue_filters(request: Request) -> dict[str, str]:
    out = {}
    for name, pattern in _FILTERS.items():
        value = request.query_params.get(name, "")
        if value and pattern.fullmatch(value):
            out[name] = value
    return out


def _queue_items(
    client: CheckpointClient, token: str, filters: dict[str, str], *, background: bool = False
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


@router.get("/", response_class=HTMLResponse)
def queue(request: Request, web: WebDep, session: Session) -> Response:
    filters = _queue_filters(request)
    items = _queue_items(web.client, session.token, filters)
    return web.render(
        request,
        "queue.html",
        {
            "me": session.me,
            "nav": "queue",
            "items": items,
            "filters": filters,
            "states": _STATES,
            "operations": _OPERATIONS,
            "signature": rows_signature(items),
            "poll_url": "/queue/rows" + ("?" + urlencode(filters) if filters else ""),
            "poll_ms": web.settings.queue_poll_seconds * 1000,
        },
    )


@router.get("/queue/rows", response_class=HTMLResponse)
def queue_rows(request: Request, web: WebDep) -> Response:
    token = web.cookies(request).session(request)
    if token is None:
        return PlainTextResponse("sign in again", 401)
    try:
        items = _queue_items(web.client, token, _queue_filters(request), background=True)
    except CheckpointRefused as exc:
        return PlainTextResponse(human_message(exc.code), exc.status)
    return web.render(
        request, "_queue_rows.html", {"items": items, "signature": rows_signature(items)}
    )


@router.get("/history", response_class=HTMLResponse)
def history(
    request: Request,
    web: WebDep,
    before: Annotated[str | None, Query(max_length=90)] = None,
) -> Response:
    # Signed in here, not through ``Session``: an invalid ``before`` is answered by the
    # invalid-request page before anything reaches the checkpoint.
    token, me = web.signed_in(request)
    if before is not None and not PROPOSAL_ID.fullmatch(before):
        before = None
    items, next_before = _decided_page(web.client, token, before)
    return web.render(
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


def _decided_page(
    client: CheckpointClient, token: str, before: str | None
) -> tuple[list[Proposal], str | None]:
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
    return _decided_page_state_by_state(client, token, before)


def _decided_page_state_by_state(
    client: CheckpointClient, token: str, before: str | None
) -> tuple[list[Proposal], str | None]:
    """``_decided_page`` from a checkpoint that filters by one state at a time.

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
