"""The checkpoint's read views: a proposal as the API shows it, one or a page of them,
and the audit chain's status.

Reads only: nothing here opens a write transaction or appends to the audit chain.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from airlock.protocol import ToolCall
from airlock.store import Prepared, verify_chain
from airlock.text import inert

from . import _tx, edits, routing
from .auth import Principal
from .errors import Refusal
from .models import (
    TOOL_CALL,
    approvals,
    executor_resolutions,
    outcomes,
    proposals,
    refusal_notes,
    rejections,
    users,
    votes,
)
from .notify.config import NotifyConfig
from .notify.routed import route
from .schemas import (
    ApprovalOut,
    AuditOut,
    EditOut,
    ExecutorRefusalOut,
    ExecutorResolutionOut,
    OutcomeOut,
    PolicyOut,
    ProposalList,
    ProposalOut,
    RejectionOut,
    VoteOut,
)

__all__ = [
    "Known",
    "audit_status",
    "executor_resolution_out",
    "get",
    "list_proposals",
    "shown",
    "view",
    "view_by_id",
]


# The statements of a view, built once: building a statement costs more than executing it.
_BY_ID = sa.select(proposals).where(proposals.c.id == sa.bindparam("id"))
#: Read in the vote's own transaction (``counted`` given): run on the driver's cursor.
_VOTES = Prepared(
    sa.select(votes.c.voter, votes.c.at, votes.c.note)
    .where(votes.c.proposal_id == sa.bindparam("id"))
    .order_by(votes.c.at, votes.c.id)
)
#: The votes with whether each counts, in one read: :func:`._tx.counted_votes`'s rule (the
#: voter enabled now, their role still one that approves) as a column.
_VOTES_COUNTED = (
    sa.select(
        votes.c.voter,
        votes.c.at,
        votes.c.note,
        sa.case(
            (
                sa.and_(users.c.disabled.is_(False), users.c.role.in_(sorted(_tx.APPROVER_ROLES))),
                sa.true(),
            ),
            else_=sa.false(),
        ).label("counts"),
    )
    .select_from(votes.outerjoin(users, users.c.username == votes.c.voter))
    .where(votes.c.proposal_id == sa.bindparam("id"))
    .order_by(votes.c.at, votes.c.id)
)
_APPROVAL = sa.select(approvals).where(approvals.c.proposal_id == sa.bindparam("id"))
_REJECTION = sa.select(rejections).where(rejections.c.proposal_id == sa.bindparam("id"))
_OUTCOME = sa.select(outcomes).where(outcomes.c.proposal_id == sa.bindparam("id"))
_REFUSAL_NOTES = (
    sa.select(  # what is shown; not the receipts, read on every list page
        refusal_notes.c.approval_id,
        refusal_notes.c.refusal_code,
        refusal_notes.c.detail,
        refusal_notes.c.executor,
        refusal_notes.c.at,
        refusal_notes.c.reported_at,
    )
    .where(refusal_notes.c.proposal_id == sa.bindparam("id"))
    .order_by(refusal_notes.c.id)
)
_RESOLUTION = sa.select(executor_resolutions).where(
    executor_resolutions.c.approval_id == sa.bindparam("id")
)


@dataclass(frozen=True, slots=True)
class Known:
    """A proposal's records that the caller's transaction holds, so :func:`view` reads
    none of them: each as its row, or an object with the row's columns as attributes.

    Attributes:
        approval: its ``approvals`` row; None: it has none.
        outcome: its ``outcomes`` row; None: none. Its executor resolution is not
            read: one exists only beside an outcome that a person resolved.
        refusals: its executor refusals as shown; None: read them.

    A proposal with a known approval has no rejection (it left ``pending`` when the
    approval was issued, and nothing moves one back).
    """

    approval: Any
    outcome: Any = None
    refusals: list[ExecutorRefusalOut] | None = field(default_factory=list)


def get(cp: _tx.Parts, principal: Principal, proposal_id: str) -> ProposalOut:
    _tx.require(principal, _tx.READER_ROLES, "read proposals")
    with cp.engine.connect() as conn:
        row = conn.execute(_BY_ID, {"id": proposal_id}).first()
        if row is None:
            raise _tx.not_found(proposal_id)
        return view(conn, row, cp.notify, principal.name)


def list_proposals(
    cp: _tx.Parts,
    principal: Principal,
    *,
    state: str | Sequence[str] | None = None,
    operation: str | None = None,
    account: str | None = None,
    region: str | None = None,
    resource_id: str | None = None,
    proposed_by: str | None = None,
    before: str | None = None,
    limit: int = 50,
) -> ProposalList:
    """Newest first; pending proposals sort like any other (filter by state for a queue).
    ``state``: one, or several (a proposal in any of them)."""
    _tx.require(principal, _tx.READER_ROLES, "read proposals")
    limit = max(1, min(limit, _tx.MAX_PAGE))
    query = sa.select(proposals)
    # The filter applied is the one echoed (``ProposalList.states``): both from here.
    applied: list[str] | None = None
    if state is not None:
        applied = sorted({state} if isinstance(state, str) else set(state))
        if not applied:
            raise ValueError("state: an empty sequence lists nothing; pass None for all")
        query = query.where(proposals.c.state.in_(applied))
    for column, value in (
        (proposals.c.operation, operation),
        (proposals.c.account, account),
        (proposals.c.region, region),
        (proposals.c.resource_id, resource_id),
        (proposals.c.proposed_by, proposed_by),
    ):
        if value is not None:
            query = query.where(column == value)
    with cp.engine.connect() as conn:
        if before is not None:
            anchor = conn.execute(
                sa.select(proposals.c.created_at).where(proposals.c.id == before)
            ).first()
            if anchor is None:
                raise _tx.not_found(before)
            query = query.where(
                sa.or_(
                    proposals.c.created_at < anchor.created_at,
                    sa.and_(proposals.c.created_at == anchor.created_at, proposals.c.id < before),
                )
            )
        rows = conn.execute(
            query.order_by(proposals.c.created_at.desc(), proposals.c.id.desc()).limit(limit + 1)
        ).all()
        page = rows[:limit]
        routes = routing.read(conn, [row.id for row in page])  # one query for the page
        items = [view(conn, row, cp.notify, principal.name, routes=routes) for row in page]
    return ProposalList(
        items=items,
        next_before=items[-1].id if len(rows) > limit and items else None,
        states=applied,
    )


def audit_status(cp: _tx.Parts, principal: Principal) -> AuditOut:
    _tx.require(principal, {"viewer", "approver", "admin"}, "read the audit status")
    report = verify_chain(cp.engine)
    return AuditOut(
        ok=report.ok,
        rows=report.rows,
        head_seq=report.head_seq,
        head_hash=report.head_hash,
        fault=str(report.fault) if report.fault is not None else None,
    )


def view_by_id(
    conn: Connection, proposal_id: str, notify: NotifyConfig, viewer: str | None
) -> ProposalOut:
    """:func:`view` of the proposal ``proposal_id`` as ``conn`` sees it now (after a
    change in that transaction)."""
    row = conn.execute(_BY_ID, {"id": proposal_id}).one()
    return view(conn, row, notify, viewer, routes={proposal_id: route(conn, proposal_id)})


def view(
    conn: Connection,
    row: Any,
    notify: NotifyConfig,
    viewer: str | None,
    *,
    routes: Mapping[str, Any] | None = None,
    counted: Collection[str] | None = None,
    known: Known | None = None,
) -> ProposalOut:
    """The proposal ``row`` (a ``proposals`` row, or one with its columns as attributes)
    as the API shows it to ``viewer`` (a principal's name; None: to no one who may vote),
    its route's members read from ``notify``'s groups.

    Args:
        routes: the page's ``proposal_routes`` rows by proposal id, read already
            (:func:`.routing.read`); None reads this proposal's.
        counted: the voters whose votes count (:func:`._tx.counted_votes`), read in
            this transaction (open: the votes are read in it) after its last vote;
            None reads them.
        known: the records this transaction holds (:class:`Known`); None: read them
            all. For a proposal it found ``pending`` (and locked): the approval it
            issued, if any, and nothing else (a proposal with a rejection, an outcome
            or an executor refusal has left ``pending``, and nothing moves one back).
    """
    key = {"id": row.id}
    if routes is None:
        routes = routing.read(conn, [row.id])
    vote_rows, counted = _votes(conn, row.id, counted)
    if known is None:
        approval = conn.execute(_APPROVAL, key).first()
        rejection = conn.execute(_REJECTION, key).first()
        outcome = conn.execute(_OUTCOME, key).first()
        refusals = _executor_refusals(conn, row.id)
        resolution = None if outcome is None else executor_resolution_out(conn, outcome.approval_id)
    else:
        approval, rejection, outcome, resolution = known.approval, None, known.outcome, None
        read = known.refusals is None
        refusals = _executor_refusals(conn, row.id) if read else list(known.refusals or ())
    action_bytes = bytes(row.action)
    return ProposalOut(
        id=row.id,
        state=row.state,
        action_hash=row.action_hash,
        action_jcs=action_bytes.decode("utf-8"),
        action=json.loads(action_bytes),
        provider=row.provider,
        account=row.account,
        region=row.region,
        resource_type=row.resource_type,
        resource_id=row.resource_id,
        operation=row.operation,
        risk=row.risk,
        proposed_by=row.proposed_by,
        submitted_by=row.submitted_by,
        policy=PolicyOut(
            rule=row.rule,
            effect=row.effect,
            quorum=row.quorum,
            confirm=row.confirm,
            hash=row.policy_hash,
        ),
        deny_reason=row.deny_reason,
        **_tool_fields(row),
        votes=[
            VoteOut(voter=v.voter, at=v.at, note=v.note, counts=v.voter in counted)
            for v in vote_rows
        ],
        votes_needed=max(0, row.quorum - len(counted)) if row.state == "pending" else 0,
        approval_deadline=row.approval_deadline,
        created_at=row.created_at,
        updated_at=row.updated_at,
        approval=None
        if approval is None
        else ApprovalOut(
            approval_id=approval.approval_id,
            keyid=approval.keyid,
            issued_at=approval.issued_at,
            expires_at=approval.expires_at,
            revoked_at=approval.revoked_at,
            revoked_by=approval.revoked_by,
            envelope=json.loads(approval.envelope),
        ),
        rejection=None
        if rejection is None
        else RejectionOut(
            reason_code=rejection.reason_code,
            note=rejection.note,
            by=rejection.by,
            at=rejection.at,
        ),
        outcome=None if outcome is None else _outcome_out(outcome, resolution),
        executor_refusals=refusals,
        superseded_by=row.superseded_by,
        edit=None if row.edit is None else EditOut.model_validate(json.loads(row.edit)),
        route=routing.shown(notify, routes.get(row.id), viewer),
    )


def _votes(
    conn: Connection, proposal_id: str, counted: Collection[str] | None
) -> tuple[Sequence[Any], Collection[str]]:
    """The proposal's votes, oldest first, and the voters whose votes count: ``counted``,
    or read with the votes."""
    if counted is not None:
        return _VOTES.rows(conn, {"id": proposal_id}), counted
    rows = conn.execute(_VOTES_COUNTED, {"id": proposal_id}).all()
    return rows, {v.voter for v in rows if v.counts}


def _executor_refusals(conn: Connection, proposal_id: str) -> list[ExecutorRefusalOut]:
    notes = conn.execute(_REFUSAL_NOTES, {"id": proposal_id}).all()
    return [
        ExecutorRefusalOut(
            approval_id=n.approval_id,
            refusal_code=n.refusal_code,
            detail=n.detail,
            executor=n.executor,
            at=n.at,
            reported_at=n.reported_at,
        )
        for n in notes
    ]


def _tool_fields(row: Row[Any]) -> dict[str, Any]:
    """A tool call's own fields of ``ProposalOut`` (none for a cloud action)."""
    if row.action_type != TOOL_CALL:
        return {}
    return {
        "action_type": TOOL_CALL,
        "tool": row.operation,
        "target": row.resource_id,
        "effect_key": row.effect_key,
        "audience": row.audience,
        "summary": row.summary,
    }


def _outcome_out(outcome: Any, resolution: ExecutorResolutionOut | None) -> OutcomeOut:
    return OutcomeOut(
        approval_id=outcome.approval_id,
        outcome=outcome.outcome,
        refusal_code=outcome.refusal_code,
        receipt_verified=outcome.receipt_verified,
        receipt_keyid=outcome.receipt_keyid,
        receipt=json.loads(outcome.receipt),
        late=outcome.late,
        target_held_by=outcome.target_held_by,
        reported_at=outcome.reported_at,
        resolution=outcome.resolution,
        resolved_by=outcome.resolved_by,
        resolved_at=outcome.resolved_at,
        resolution_note=outcome.resolution_note,
        executor_resolution=resolution,
    )


def executor_resolution_out(conn: Connection, approval_id: str) -> ExecutorResolutionOut | None:
    known = conn.execute(_RESOLUTION, {"id": approval_id}).first()
    if known is None:
        return None
    return ExecutorResolutionOut(
        decision=known.decision,
        by=known.decided_by,
        at=known.decided_at,
        note=known.note,
        checkpoint_decision=known.checkpoint_decision,
        checkpoint_resolved_by=known.checkpoint_resolved_by,
        conflict=not known.agrees,
        reported_at=known.reported_at,
        receipt_keyid=known.receipt_keyid,
        receipt=json.loads(known.receipt),
    )


def shown(text: str) -> str:
    """Executor text as stored and shown: every character that is not printable (NUL,
    an escape sequence, a bidi override) escaped as everything shown to a person is
    (airlock.text), clipped to ``_tx.DETAIL_MAX`` between escapes. Only a copy for showing:
    the receipt it came from is stored as received, so rows stored in the older
    ``\\x1b`` style lose nothing and are left as they are."""
    return inert(text, limit=_tx.DETAIL_MAX)


def edit_made(
    conn: Connection,
    row: Any,
    old: ToolCall,
    principal: Principal,
    notify: NotifyConfig,
    *,
    seen_hash: str,
    values: Mapping[str, Any],
    now: int,
) -> ProposalOut | None:
    """The proposal that this very edit (same person, hash and values) made of ``row``
    already, or None: a retried edit answers what the first one did."""
    if seen_hash != row.action_hash:
        return None
    try:
        new_id, _ = edits.edited_call(old, values, now=now)
    except Refusal:
        return None
    new = conn.execute(sa.select(proposals).where(proposals.c.id == new_id)).first()
    if new_id != row.superseded_by or new is None or new.edit is None:
        return None
    if json.loads(new.edit).get("by") != principal.name:
        return None
    return view(conn, new, notify, principal.name)
