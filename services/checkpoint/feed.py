"""The feeds: issued approvals and revocations in seq order, with the heads of both audit
chains as of the same snapshot. The executor's (executor token, no audience) carries cloud
approvals only; a gate's (agent token, ``audience``) carries only the tool-call approvals
for that audience that the same token submitted.

Reads, except one audited write: raising the feed counter to an executor's cursor after
this database went back (:func:`_follow_cursor`). Seqs are taken only by
:func:`services.checkpoint._tx.feed_entry`, in the transaction that issues or revokes.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from airlock.events import CheckpointEvent
from airlock.protocol import APPROVAL_PAYLOAD_TYPE, Envelope, b64encode
from airlock.store import AuditLog, read_transaction

from . import _tx
from .auth import Principal
from .errors import ErrorCode, Refusal
from .models import (
    CLOUD_ACTION,
    TOOL_CALL,
    approvals,
    executor_head,
    feed_events,
    feed_head,
    proposals,
)
from .schemas import AuditHeadOut, ExecutorHeadOut, FeedItem, FeedOut

__all__ = ["bundle_value", "feed", "head_seq"]


def _page(which: sa.ColumnElement[bool]) -> sa.Select[tuple[object, ...]]:
    return (
        sa.select(
            feed_events.c.seq,
            feed_events.c.kind,
            feed_events.c.approval_id,
            approvals.c.envelope,
            approvals.c.expires_at,
            approvals.c.revoked_at,
            proposals.c.action,
            proposals.c.state,
        )
        .select_from(
            feed_events.join(approvals, approvals.c.approval_id == feed_events.c.approval_id).join(
                proposals, proposals.c.id == approvals.c.proposal_id
            )
        )
        .where(feed_events.c.seq > sa.bindparam("after"), which)
        .order_by(feed_events.c.seq)
        .limit(sa.bindparam("limit", type_=sa.Integer))
    )


# Built once: a long-poll reads a page on every wake, and building a statement costs more
# than running it.
_EXECUTOR_PAGE = _page(proposals.c.action_type == CLOUD_ACTION)
_GATE_PAGE = _page(
    sa.and_(
        proposals.c.action_type == TOOL_CALL,
        proposals.c.audience == sa.bindparam("audience"),
        proposals.c.submitted_by == sa.bindparam("submitted_by"),
    )
)
_FEED_HEAD = sa.select(feed_head.c.seq)
_EXECUTOR_HEAD = sa.select(executor_head)


def bundle_value(action_bytes: bytes, envelope: Envelope) -> dict[str, Any]:
    """``json.loads(make_bundle(action_bytes, envelope))`` without writing and parsing
    the JCS text: the same keys, in the order JCS sorts them, with the same strings (the
    round trip was a seventh of a feed page's cost)."""
    return {
        "action": b64encode(action_bytes),
        "envelope": {
            "payload": b64encode(envelope.payload),
            "payloadType": envelope.payload_type,
            "signatures": [
                {"keyid": s.keyid, "sig": b64encode(s.sig)} for s in envelope.signatures
            ],
        },
    }


def feed(
    cp: _tx.Parts, principal: Principal, after: int, limit: int = 100, audience: str | None = None
) -> FeedOut:
    """Issued, unrevoked, unexpired bundles and every revocation after ``after``, and
    the audit chain's head and the feed's last seq as of the same snapshot.

    An executor token reads cloud approvals and names no ``audience``; an agent token
    names the gate's ``audience`` and reads the tool-call approvals for it that it
    submitted. Anything else is refused (403 ``E_FORBIDDEN``).
    """
    _tx.require(principal, {"executor", "agent"}, "read the feed")
    gate = principal.role == "agent"
    if gate and audience is None:  # the executor's feed is the executor's alone
        raise Refusal(
            ErrorCode.E_FORBIDDEN, "an agent token reads a gate's feed: name its audience", 403
        )
    if not gate and audience is not None:  # a gate's feed is its agent token's alone
        raise Refusal(ErrorCode.E_FORBIDDEN, "an executor token reads no gate's feed", 403)
    params: dict[str, object] = {"after": after, "limit": limit}
    statement = _EXECUTOR_PAGE
    if gate:
        statement = _GATE_PAGE
        params |= {"audience": audience, "submitted_by": principal.name}
    now = cp.now()
    # One snapshot for the items and the head: a feed row commits with its audit event
    # (issued, revoked) and appends commit in seq order (the chain lock), so the head
    # read here is at or after the event of every item in the page.
    with read_transaction(cp.engine) as conn:
        rows = conn.execute(statement, params).all()
        head = AuditLog.head(conn)
        last = int(conn.execute(_FEED_HEAD).scalar_one())
        executor = conn.execute(_EXECUTOR_HEAD).first()
    items: list[FeedItem] = []
    cursor = after
    for row in rows:
        cursor = row.seq
        if row.kind == "revocation":
            # Sent however late: an executor whose clock runs behind ours may still
            # take the approval for unexpired, and a revocation costs nothing.
            items.append(
                FeedItem(seq=row.seq, kind="revocation", approval_id=row.approval_id, bundle=None)
            )
        elif row.expires_at <= now:
            continue  # the executor refuses it anyway (E_EXPIRED); nothing to say
        elif row.revoked_at is None and row.state == "approved":
            envelope = Envelope.from_value(
                json.loads(row.envelope), payload_type=APPROVAL_PAYLOAD_TYPE
            )
            bundle = bundle_value(bytes(row.action), envelope)
            items.append(
                FeedItem(seq=row.seq, kind="approval", approval_id=row.approval_id, bundle=bundle)
            )
    if last < after and not gate:  # only an executor's cursor may raise the counter
        _follow_cursor(cp, principal, last, after, now)
    return FeedOut(
        items=items,
        cursor=cursor,
        audit_head=AuditHeadOut(seq=head.seq, hash=head.row_hash),
        feed_head=last,
        executor_head=None
        if gate or executor is None or executor.seq is None
        else ExecutorHeadOut(seq=executor.seq, hash=executor.hash, at=executor.at),
    )


def _follow_cursor(cp: _tx.Parts, principal: Principal, last: int, after: int, now: int) -> None:
    """An executor has read past the end of this feed: the database went back
    (restored from a backup, or reset). Raise the counter to its cursor, so the next
    seq comes after it even when this clock is behind the one that issued the seqs it
    read; the feed's clock floor alone covers only a clock that is not. Audited.
    Bounded by a day ahead of this clock (and JSON's 2**53), so an executor token
    cannot push the feed out of reach."""
    bound = min((now + _tx.FEED_AHEAD_MAX_S) * _tx.FEED_SEQ_PER_SECOND, _tx.FEED_SEQ_MAX)
    if after > bound:
        _tx.log.warning(
            "the feed ends at %d and %s has read up to %d, more than a day past this "
            "clock: the counter is not raised to it",
            last,
            principal.name,
            after,
        )
        return
    with cp.engine.begin() as conn:
        AuditLog.lock(conn)  # no proposal row: the chain lock first (_tx)
        raised = conn.execute(
            feed_head.update().where(feed_head.c.id == 1, feed_head.c.seq < after).values(seq=after)
        ).rowcount
        if raised:
            _tx.audit(
                conn,
                now,
                CheckpointEvent.FEED_RAISED,
                by=principal.name,
                feed_head=last,
                to=after,
                reason="an executor has read past the end of the feed",
            )
    if raised:
        _tx.log.warning(
            "the feed ended at %d but %s has read up to %d: this database went back "
            "(restored from a backup, or reset); the feed counter is raised to %d so "
            "that new approvals come after it",
            last,
            principal.name,
            after,
            after,
        )


def head_seq(cp: _tx.Parts) -> int:
    """The feed's last seq."""
    with cp.engine.connect() as conn:
        return int(conn.execute(sa.select(feed_head.c.seq)).scalar_one())
