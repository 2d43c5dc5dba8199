"""Deciding several proposals in one action: review the selection, then approve or reject.

``GET /bulk?id=…`` shows the selected pending proposals, each with its full action hash
and its signed saving, and the total: that page is the one confirmation. Its forms carry
every ``(proposal id, action hash)`` pair shown, and ``POST /bulk/approve`` sends one vote
per pair to the checkpoint, each with its own hash (the checkpoint refuses a vote whose
hash is not the proposal's, ``E_STALE_VIEW``), so every vote is its own audited decision
and its own signed approval. ``POST /bulk/reject`` rejects each one whose hash is still the
one shown. One that is refused (decided, withdrawn or expired meanwhile) is named with the
reason and the others go through.

Only pending proposals of one operation and one risk are decided together, and never a
high-risk one (its resource id is typed, one proposal at a time); the server checks each
proposal again as the checkpoint answers now, whatever the form says. The checkpoint stays
the judge of every vote.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Final

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import Response

from airlock.api import Proposal

from . import present
from .client import Me
from .deps import ClientDep, Csrf, Note, Session, Web, WebDep
from .errors import CheckpointRefused, CheckpointUnavailable, human_message

__all__ = ["MAX_SELECTED", "router"]

router = APIRouter()

#: At most this many proposals in one action (the queue shows 200).
MAX_SELECTED: Final = 200
_ITEM: Final = re.compile(r"^(prop_[A-Za-z0-9_-]{8,80}) (sha256:[0-9a-f]{64})$")
_PROPOSAL_ID: Final = re.compile(r"^prop_[A-Za-z0-9_-]{8,80}$")


@dataclass(frozen=True, slots=True)
class _Result:
    proposal_id: str
    action_hash: str
    #: "approved", "voted" (quorum not reached yet), "rejected", "refused", "not_sent"
    outcome: str
    detail: str
    code: str | None = None


_Items = Annotated[list[str], Form(alias="item")]
_Kind = Annotated[str, Form(max_length=32)]


class _BadSelection(Exception):
    pass


def _selection(items: list[str]) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for item in items:
        match = _ITEM.fullmatch(item)
        if match is None:
            raise _BadSelection("an item of the selection is not a proposal id and hash")
        pair = (match.group(1), match.group(2))
        if pair not in pairs:
            pairs.append(pair)
    if not pairs:
        raise _BadSelection("nothing was selected")
    if len(pairs) > MAX_SELECTED:
        raise _BadSelection(f"more than {MAX_SELECTED} proposals were selected")
    return pairs


def _refused_page(web: Web, request: Request, me: Me, message: str, status: int = 422) -> Response:
    return web.render(
        request,
        "error.html",
        {"me": me, "title": "Nothing was sent", "message": message, "code": None},
        status=status,
    )


@router.get("/bulk")
def review(
    request: Request,
    web: WebDep,
    session: Session,
    id: Annotated[list[str] | None, Query()] = None,
) -> Response:
    token, me = session
    wanted: list[str] = []
    for proposal_id in id or ():
        if _PROPOSAL_ID.fullmatch(proposal_id) and proposal_id not in wanted:
            wanted.append(proposal_id)
    if not wanted:
        return _refused_page(web, request, me, "Nothing was selected: tick proposals in the queue.")
    if len(wanted) > MAX_SELECTED:
        return _refused_page(web, request, me, f"More than {MAX_SELECTED} proposals were selected.")
    chosen: list[Proposal] = []
    left_out: list[tuple[Proposal, str]] = []
    for proposal_id in wanted:
        p = web.client.proposal(token, proposal_id)
        problem = present.bulk_problem(p)
        if problem is None:
            chosen.append(p)
        else:
            left_out.append((p, problem))
    kinds = {(p.operation, p.risk) for p in chosen}
    if len(kinds) > 1:
        return _refused_page(
            web,
            request,
            me,
            "Select proposals of one operation and one risk to decide them together.",
        )
    return web.render(
        request,
        "bulk.html",
        {
            "me": me,
            "nav": "queue",
            "chosen": chosen,
            "left_out": left_out,
            "kind": next(iter(kinds), None),
            "total": present.savings(chosen),
        },
    )


def _decide_each(
    web: Web,
    request: Request,
    *,
    csrf: str,
    items: list[str],
    operation: str,
    risk: str,
    send: Callable[[str, Proposal, str], _Result],
    verb: str,
) -> Response:
    refused = web.refuse_csrf(request, csrf)
    if refused is not None:
        return refused
    token, me = web.signed_in(request)
    try:
        pairs = _selection(items)
    except _BadSelection as exc:
        return _refused_page(web, request, me, f"Nothing was sent: {exc}.")
    if not me.can_decide:
        return _refused_page(web, request, me, "Nothing was sent: you may not decide.", 403)
    results: list[_Result] = []
    stop: str | None = None
    for proposal_id, seen_hash in pairs:
        if stop is not None:
            results.append(_Result(proposal_id, seen_hash, "not_sent", stop))
            continue
        try:
            p = web.client.proposal(token, proposal_id)
            problem = present.bulk_problem(p)
            if problem is None and (p.operation, p.risk) != (operation, risk):
                problem = f"it is a {p.risk}-risk {p.operation}, not a {risk}-risk {operation}"
            if problem is not None:
                results.append(_Result(proposal_id, seen_hash, "refused", problem))
                continue
            results.append(send(token, p, seen_hash))
        except CheckpointRefused as exc:
            if exc.code == "E_UNAUTHENTICATED":
                stop = "your session ended before it was sent"
                results.append(_Result(proposal_id, seen_hash, "not_sent", stop))
                continue
            results.append(
                _Result(proposal_id, seen_hash, "refused", human_message(exc.code), exc.code)
            )
        except CheckpointUnavailable as exc:
            # The checkpoint may or may not have recorded this one: its page says.
            stop = "the checkpoint did not answer; nothing more was sent"
            results.append(
                _Result(
                    proposal_id,
                    seen_hash,
                    "unknown",
                    f"no answer ({exc}): open it to see whether it was recorded",
                )
            )
    return web.render(
        request,
        "bulk_done.html",
        {
            "me": me,
            "nav": "queue",
            "verb": verb,
            "results": results,
            "done": [r for r in results if r.outcome in ("approved", "voted", "rejected")],
            "not_done": [r for r in results if r.outcome not in ("approved", "voted", "rejected")],
        },
    )


@router.post("/bulk/approve")
def approve(
    request: Request,
    web: WebDep,
    client: ClientDep,
    *,
    items: _Items,
    operation: _Kind,
    risk: _Kind,
    csrf: Csrf = "",
    note: Note = "",
) -> Response:
    def send(token: str, p: Proposal, seen_hash: str) -> _Result:
        # The hash this person was shown goes with the vote: the checkpoint refuses it
        # (E_STALE_VIEW) unless it is this proposal's.
        after = client.approve(token, p.id, action_hash=seen_hash, confirm=None, note=note)
        if after.state == "approved":
            return _Result(p.id, seen_hash, "approved", "quorum reached: approval signed")
        return _Result(p.id, seen_hash, "voted", f"vote recorded; {after.votes_needed} more needed")

    return _decide_each(
        web,
        request,
        csrf=csrf,
        items=items,
        operation=operation,
        risk=risk,
        send=send,
        verb="approve",
    )


@router.post("/bulk/reject")
def reject(
    request: Request,
    web: WebDep,
    client: ClientDep,
    *,
    items: _Items,
    operation: _Kind,
    risk: _Kind,
    reason_code: _Kind,
    csrf: Csrf = "",
    note: Note = "",
) -> Response:
    def send(token: str, p: Proposal, seen_hash: str) -> _Result:
        if p.action_hash != seen_hash:
            return _Result(
                p.id, seen_hash, "refused", "its action is not the one you reviewed", None
            )
        client.reject(token, p.id, reason_code=reason_code, note=note)
        return _Result(p.id, seen_hash, "rejected", "rejected")

    return _decide_each(
        web,
        request,
        csrf=csrf,
        items=items,
        operation=operation,
        risk=risk,
        send=send,
        verb="reject",
    )
