"""What executors and gates report back: outcomes from signed receipts (the ledger is
the truth), and refusals of approvals they did not consume, kept as notes.

Every report is verified before anything is read or written: an executor's (executor
token) against the executor's receipt key set, and only for a cloud action; a gate's
(the agent token that submitted the tool call) against the gate key set of the tool
call's audience (:mod:`.gatekeys`), and only for a tool call. A gate's audit head is
kept in the chain as ``gate_head`` and never moves the executor head. Each report lands
in one transaction in :mod:`services.checkpoint._tx`'s order.
This module must never record an unverified receipt, never let an outcome take a slot
from an approved proposal, and never undo a person's resolution.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row
from sqlalchemy.exc import IntegrityError

from airlock.events import CheckpointEvent
from airlock.protocol import (
    AuditHead,
    InvalidReceipt,
    Receipt,
    VerifiedReceipt,
    verify_receipt,
)
from airlock.store import AuditLog, Prepared
from airlock.text import inert

from . import _tx, notify, routing, views
from ._notes import RefusalNote, refusal_note
from .auth import Principal
from .errors import ErrorCode, Refusal
from .gatekeys import verify_gate_receipt
from .models import (
    CLOUD_ACTION,
    OPEN_STATES,
    TOOL_CALL,
    approvals,
    executor_head,
    executor_resolutions,
    outcomes,
    proposals,
    refusal_notes,
)
from .schemas import ProposalOut

__all__ = [
    "REFUSAL_NOTES_MAX",
    "REPORTERS",
    "CheckedOutcome",
    "CheckedRefusal",
    "ResolvedHere",
    "check_outcome",
    "check_refusal",
    "keep_refusal",
    "land_outcome",
    "refusal_kept",
    "report_outcome",
    "report_refusal",
    "resolution_after_person",
    "slot_holder",
]

#: Executor outcome → proposal state. ``resolved`` is mapped from its resolution.
_OUTCOME_STATE: Final = {
    "succeeded": "executed",
    "failed": "failed",
    "refused": "refused",
    "in_doubt": "in_doubt",
}
#: Refusal notes kept per approval (``report_refusal``): enough for every executor
#: sharing a ledger to say why, a bound on what one executor token can pile up.
REFUSAL_NOTES_MAX: Final = 20
#: Who reports: the executor for cloud actions, a gate (its agent token) for tool calls.
REPORTERS: Final = frozenset({"executor", "agent"})
#: Closed states an outcome may still land on (docs/protocol.md#proposals: the ledger is the truth).
_LATE_STATES: Final = ("lapsed", "revoked", "withdrawn")
#: How far past this clock a receipt's time is kept as the time of the executor head it
#: names, seconds (``_advance_executor_head``): clocks differ, but not by more.
_RECEIPT_AHEAD_MAX_S: Final = 300


# The hot statements, built once: building a statement costs more than executing it.
#: The proposal an approval is for; no row: no such approval.
_BY_APPROVAL: Final = sa.select(proposals).where(
    proposals.c.id
    == sa.select(approvals.c.proposal_id)
    .where(approvals.c.approval_id == sa.bindparam("approval_id"))
    .scalar_subquery()
)
#: The same, locked (``_tx``'s step 2).
_LOCK_BY_APPROVAL: Final = _BY_APPROVAL.with_for_update()
_APPROVAL: Final = sa.select(approvals).where(
    approvals.c.approval_id == sa.bindparam("approval_id")
)
_OUTCOME: Final = sa.select(outcomes).where(outcomes.c.approval_id == sa.bindparam("approval_id"))
_OUTCOME_VALUES: Final = (
    "outcome",
    "refusal_code",
    "receipt",
    "receipt_verified",
    "receipt_keyid",
    "reported_at",
    "target_held_by",
)


def _bound(table: sa.Table, *columns: str) -> dict[str, sa.BindParameter[Any]]:
    return {c: sa.bindparam(c, type_=table.c[c].type) for c in columns}


_INSERT_OUTCOME: Final = Prepared(
    outcomes.insert().values(
        _bound(outcomes, "approval_id", "proposal_id", "late", *_OUTCOME_VALUES)
    )
)
_REPLACE_OUTCOME: Final = Prepared(
    outcomes.update()
    # Not a column's name: SQLAlchemy keeps those for the SET clause's own parameters.
    .where(outcomes.c.approval_id == sa.bindparam("approval", type_=outcomes.c.approval_id.type))
    .values(_bound(outcomes, *_OUTCOME_VALUES))
)


def _advance_head() -> Prepared:
    seq = sa.bindparam("seq", type_=sa.BigInteger)
    at = sa.bindparam("at", type_=sa.BigInteger)
    hash_ = sa.bindparam("hash", type_=executor_head.c.hash.type)
    newer = sa.or_(
        executor_head.c.seq.is_(None),
        executor_head.c.seq < seq,
        sa.and_(executor_head.c.hash != hash_, executor_head.c.at < at),
    )
    return Prepared(
        executor_head.update()
        .where(executor_head.c.id == 1, newer)
        .values(seq=seq, hash=hash_, at=at, recorded_at=sa.bindparam("now", type_=sa.BigInteger))
    )


_ADVANCE_HEAD: Final = _advance_head()
_NOTE_BY_DIGEST: Final = sa.select(refusal_notes.c.id).where(
    refusal_notes.c.receipt_sha256 == sa.bindparam("digest")
)
_NOTES_OF: Final = (
    sa.select(sa.func.count())
    .select_from(refusal_notes)
    .where(refusal_notes.c.approval_id == sa.bindparam("approval_id"))
)
_INSERT_NOTE: Final = Prepared(
    refusal_notes.insert().values(
        _bound(
            refusal_notes,
            "approval_id",
            "proposal_id",
            "refusal_code",
            "detail",
            "executor",
            "at",
            "reported_at",
            "receipt",
            "receipt_keyid",
            "receipt_sha256",
        )
    )
)


def report_outcome(cp: _tx.Parts, principal: Principal, receipt: Mapping[str, Any]) -> ProposalOut:
    """Record the executor's outcome from its signed receipt (the ledger is the truth)."""
    _tx.require(principal, REPORTERS, "report outcomes")
    now = cp.now()
    checked = check_outcome(cp, principal, receipt, now)
    try:
        with cp.engine.begin() as conn:
            row, known = land_outcome(conn, cp, principal, checked, now)
            if known is None:  # the executor retried: the same answer
                return views.view(conn, row, cp.notify, principal.name)
            routes = {row.id: routing.route_of(conn, row.id)}
            return views.view(conn, row, cp.notify, principal.name, routes=routes, known=known)
    except ResolvedHere:
        # Nothing was written: the transaction that found the person's resolution
        # rolled back. Kept apart (its own transaction) so that a conflict is
        # committed before it is answered 409.
        with cp.engine.begin() as conn:
            row, conflict = resolution_after_person(conn, cp, principal, receipt, cp.now())
            view = views.view(conn, row, cp.notify, principal.name)
        if conflict is not None:
            raise conflict from None
        return view


@dataclass(frozen=True, slots=True)
class CheckedOutcome:
    """An outcome's receipt, verified (:func:`check_outcome`)."""

    receipt: Mapping[str, Any]
    payload: Receipt
    keyid: str
    approval_id: str
    gate: str | None  # the gate's audience; None for the executor's


def check_outcome(
    cp: _tx.Parts, principal: Principal, receipt: Mapping[str, Any], now: int
) -> CheckedOutcome:
    """Verify an outcome's receipt (no I/O), or refuse it (``E_RECEIPT``)."""
    payload, keyid, approval_id, gate = _check_receipt(cp, principal, receipt, now)
    return CheckedOutcome(receipt, payload, keyid, approval_id, gate)


def land_outcome(
    conn: Connection, cp: _tx.Parts, principal: Principal, checked: CheckedOutcome, now: int
) -> tuple[Any, views.Known | None]:
    """Record a verified outcome in ``conn``'s open transaction (a caller's role is
    checked already); the proposal as left and what the view needs of what was written
    (None: nothing was, the same receipt is recorded already). Raises :class:`Refusal`,
    or :class:`ResolvedHere` (before writing) for a resolution a person made here first."""
    payload, receipt, approval_id, gate = (
        checked.payload,
        checked.receipt,
        checked.approval_id,
        checked.gate,
    )
    outcome = payload.outcome
    key = {"approval_id": approval_id}
    # The approval row is the proposal's only one (UNIQUE proposal_id), so the row
    # locked is the one it was issued for, and the two checks below bind the
    # receipt to the issued approval and the action it signed.
    row = conn.execute(_LOCK_BY_APPROVAL, key).first()
    if row is None:
        raise Refusal(ErrorCode.E_NOT_FOUND, "no such approval", 404)
    _check_reporter(row, principal, gate)
    if payload.action_hash != row.action_hash:
        raise Refusal(ErrorCode.E_RECEIPT, "receipt names another action hash", 422)
    target = _OUTCOME_STATE.get(outcome)
    if outcome == "resolved":
        decision = payload.resolution.decision if payload.resolution else None
        target = "executed" if decision == "happened" else "failed"
    if target is None:
        raise Refusal(ErrorCode.E_RECEIPT, f"unknown outcome {outcome!r}", 422)
    receipt_text = json.dumps(dict(receipt), sort_keys=True)
    previous = conn.execute(_OUTCOME, key).first()
    if previous is not None:
        if previous.receipt == receipt_text:
            return row, None  # the executor retried: the same answer
        if (
            outcome == "resolved"
            and previous.outcome == "in_doubt"
            and previous.resolution is not None
        ):
            raise ResolvedHere  # a person resolved it here first: see report_outcome
        # Only the executor's resolution of an unresolved in_doubt replaces an
        # outcome; the proposal is in_doubt, or kept closed because the target
        # was held when the in_doubt landed (see _land_state).
        if (
            previous.outcome != "in_doubt"
            or previous.resolution is not None
            or (row.state != "in_doubt" and previous.target_held_by is None)
        ):
            raise Refusal(ErrorCode.E_STATE, "an outcome is already recorded", 409)
    late = row.state in _LATE_STATES
    state, held_by = _land_state(conn, row, target, approval_id, now)
    written = _write_outcome(
        conn,
        row,
        previous,
        approval_id=approval_id,
        outcome=outcome,
        refusal_code=payload.refusal_code,
        receipt=receipt_text,
        receipt_verified=True,  # check_outcome refuses anything else
        receipt_keyid=checked.keyid,
        late=late,
        reported_at=now,
        target_held_by=held_by,
    )
    head = _receipt_head(payload)
    _tx.audit(
        conn,
        now,
        CheckpointEvent.OUTCOME_REPORTED,
        proposal_id=row.id,
        approval_id=approval_id,
        outcome=outcome,
        refusal_code=payload.refusal_code,
        receipt_verified=True,
        late=late,
        from_state=row.state,
        state=state,
        target_held_by=held_by,
        # The executor's (or gate's) chain head the receipt names: kept in this
        # chain so a later `airlock audit reconcile` can hold that chain to it.
        **_heads(head, gate),
    )
    if gate is None and payload.at <= _tx.FEED_SEQ_MAX:
        _advance_executor_head(conn, head, payload.at, now)
    # The proposal as this transaction left it: the locked row with what it wrote.
    landed = SimpleNamespace(**{**row._mapping, "state": state, "updated_at": now})
    notify.record(conn, cp.notify, row.id, f"proposal.{target}", now, row=landed)
    # Read after the lock: as the proposal's last writer (a revocation) left it.
    approval = conn.execute(_APPROVAL, key).one()
    # No rejection (the proposal left pending when its approval was issued) and no
    # executor resolution (one is kept only beside an outcome a person resolved,
    # which no outcome replaces): only the executor refusals are read.
    return landed, views.Known(approval=approval, outcome=written, refusals=None)


def _write_outcome(
    conn: Connection, row: Row[Any], previous: Row[Any] | None, **values: Any
) -> SimpleNamespace:
    """Write the outcome row of the locked proposal ``row`` (``values``: its columns,
    ``late`` kept from ``previous`` when it replaces that row); the row as written.

    The executor resolved its own in_doubt ``previous`` row: the newer receipt replaces
    the in_doubt one here; both stay in the audit chain and its ledger."""
    if previous is None:
        _INSERT_OUTCOME.rowcount(conn, {"proposal_id": row.id, **values})
        return SimpleNamespace(
            proposal_id=row.id,
            resolution=None,
            resolved_by=None,
            resolved_at=None,
            resolution_note=None,
            **values,
        )
    values["late"] = previous.late
    _REPLACE_OUTCOME.rowcount(conn, {"approval": values["approval_id"], **values})
    return SimpleNamespace(**{**previous._mapping, **values})


def _advance_executor_head(conn: Connection, head: Mapping[str, Any], at: int, now: int) -> None:
    """Move the record of the executor's chain head to ``head`` if it is newer.

    After the audit append (``_tx``'s order: the chain lock before this row). Receipts
    are accepted out of order (one backs off alone, a resend comes late), and a head
    that went back would hide a ledger restored to between the two; one that stays
    behind hides a ledger restored to after it. So never by the receipt's time first
    (an executor clock that jumped ahead would pin the record there):

    1. a higher seq is newer: a chain's seq only grows;
    2. a lower (or equal) seq with another hash is newer only if the receipt's time is
       later than the one recorded: a late receipt of the same chain was signed
       before the one recorded, so this one comes from another chain, one restored
       from a backup or replaced. The executor held for the head recorded (it reads
       the feed before it sends a receipt), and following the new chain keeps a
       second restore in sight. Otherwise it is a late receipt: the head stays.

    The time kept (compared in step 2, handed back on the feed, where a hold starts
    at the earliest) is at most ``_RECEIPT_AHEAD_MAX_S`` past this clock, so a time
    far ahead holds step 2 off for that long at most; the receipt itself is recorded
    as signed.
    """
    at = min(at, now + _RECEIPT_AHEAD_MAX_S)
    _ADVANCE_HEAD.rowcount(conn, {"seq": head["seq"], "hash": head["hash"], "at": at, "now": now})


def resolution_after_person(
    conn: Connection, cp: _tx.Parts, principal: Principal, receipt: Mapping[str, Any], now: int
) -> tuple[Any, Refusal | None]:
    """The executor's resolution of an in_doubt that a person already resolved here.

    The in_doubt can be resolved in two places (``airlock approvals resolve`` here,
    ``airlock executor resolve`` in the ledger), and the second one to arrive cannot
    replace the first: the proposal has moved on. It is kept
    (``executor_resolutions``, audited ``checkpoint.executor_resolution`` with the
    receipt's digest and head, so ``airlock audit reconcile`` can anchor it) and shown
    on the proposal, and the proposal keeps the state the person here gave it:

    * the same decision: 200, the proposal as it is (the ledger now agrees);
    * the other decision: committed, then answered 409 ``E_RESOLUTION_CONFLICT``, a
      code of its own so that the executor records it for good and says what it means
      rather than "send it again" (a 200 would read as "landed" to every executor,
      older ones included, and the conflict would be silent on the side where the
      person who resolved it looks). The same receipt again: the same answer.

    The caller verified the receipt and found the person's resolution
    (:class:`ResolvedHere`); this, in ``conn``'s open transaction, locks the proposal and
    reads it all again. Returns the proposal and the 409 to answer once committed (None:
    200), or raises :class:`Refusal` (nothing to commit).
    """
    (payload, keyid, signed), gate = _verified_receipt(cp, principal, receipt, now)
    resolution = payload.resolution
    if resolution is None or payload.approval_id is None:
        raise Refusal(ErrorCode.E_RECEIPT, "a resolution receipt names no decision", 422)
    decision = resolution.decision
    digest = hashlib.sha256(signed).hexdigest()
    approval_id = payload.approval_id
    approval = conn.execute(
        sa.select(approvals.c.proposal_id).where(approvals.c.approval_id == approval_id)
    ).one()  # found by the caller; approvals are never deleted
    row = _tx.lock(conn, approval.proposal_id)
    outcome = conn.execute(
        sa.select(outcomes).where(outcomes.c.approval_id == approval_id)
    ).one()  # resolved here: a resolution is never undone
    known = conn.execute(
        sa.select(executor_resolutions).where(executor_resolutions.c.approval_id == approval_id)
    ).first()
    if known is None:
        agrees = decision == outcome.resolution
        conn.execute(
            executor_resolutions.insert().values(
                approval_id=approval_id,
                proposal_id=row.id,
                decision=decision,
                decided_by=inert(resolution.by)[:128],
                decided_at=_int_or_zero(resolution.at),
                note=inert(resolution.note)[: _tx.DETAIL_MAX],
                checkpoint_decision=outcome.resolution,
                checkpoint_resolved_by=outcome.resolved_by,
                agrees=agrees,
                reported_at=now,
                receipt=json.dumps(dict(receipt), sort_keys=True),
                receipt_keyid=keyid,
                receipt_sha256=digest,
            )
        )
        _tx.audit(
            conn,
            now,
            CheckpointEvent.EXECUTOR_RESOLUTION,
            proposal_id=row.id,
            approval_id=approval_id,
            decision=decision,
            by=inert(resolution.by)[:128],
            checkpoint_decision=outcome.resolution,
            checkpoint_resolved_by=outcome.resolved_by,
            agrees=agrees,
            state=row.state,  # unchanged
            receipt_verified=True,
            receipt_sha256=digest,
            **_heads(_receipt_head(payload), gate),
        )
        if gate is None and payload.at <= _tx.FEED_SEQ_MAX:
            # A verified receipt of the executor's chain, as an outcome's is.
            _advance_executor_head(conn, _receipt_head(payload), payload.at, now)
    elif known.receipt_sha256 != digest:
        # A ledger resolves a row once; another receipt is from another ledger.
        raise Refusal(
            ErrorCode.E_STATE,
            "an executor resolution of this approval is recorded already",
            409,
        )
    else:
        agrees = bool(known.agrees)  # the executor retried: the same answer
    if agrees:
        return row, None
    message = _conflict_message(outcome, row, decision, resolution.by)
    _tx.log.warning("executor resolution of %s: %s", approval_id, message)
    return row, Refusal(ErrorCode.E_RESOLUTION_CONFLICT, message, 409)


def _conflict_message(outcome: Row[Any], row: Row[Any], decision: str, by: str) -> str:
    """The 409 ``E_RESOLUTION_CONFLICT`` answer: the two decisions and who made each."""
    return (
        f"recorded, in conflict: a person at the checkpoint ({outcome.resolved_by}) "
        f"resolved {row.id} as {outcome.resolution!r} and it is {row.state}; the "
        f"executor's ledger, the record of what the executor did, says {decision!r} "
        f"(resolved by {inert(by)[:128]}). The checkpoint "
        "keeps its state and shows the conflict on the proposal; sending this receipt "
        "again changes nothing. Check the resource in the cloud (its state, the "
        "provider's own record of the call) and this receipt, then tell whoever "
        "recorded the wrong one"
    )


def report_refusal(cp: _tx.Parts, principal: Principal, receipt: Mapping[str, Any]) -> ProposalOut:
    """Record an executor's signed refusal of an approval it did not consume.

    A note on the proposal, never a state change: one executor refusing (another
    audience, a clock behind) does not mean another sharing the ledger will not run
    the approval, so the proposal still lapses or gets its outcome as ever. The same
    receipt posted again is the same note (the executor retries a lost answer).
    """
    _tx.require(principal, REPORTERS, "report executor refusals")
    now = cp.now()
    checked = check_refusal(cp, principal, receipt, now)
    try:
        with cp.engine.begin() as conn:
            # No proposal row (_tx's order): the chain lock first, and every note is
            # written under it, so the count in keep_refusal and the insert are one step.
            AuditLog.lock(conn)
            row = keep_refusal(conn, cp, principal, checked, now)
            return views.view(conn, row, cp.notify, principal.name)
    except IntegrityError:
        # Not reachable under the chain lock; the UNIQUE digest is the judge if it is.
        with cp.engine.connect() as conn:
            row = refusal_kept(conn, checked)
            if row is None:
                raise
            return views.view(conn, row, cp.notify, principal.name)


@dataclass(frozen=True, slots=True)
class CheckedRefusal:
    """A refusal receipt, verified and fit to be a note (:func:`check_refusal`)."""

    note: RefusalNote
    payload: Receipt
    keyid: str
    digest: str  # of the signed payload: the same receipt is the same note
    receipt_text: str
    gate: str | None


def check_refusal(
    cp: _tx.Parts, principal: Principal, receipt: Mapping[str, Any], now: int
) -> CheckedRefusal:
    """Verify a refusal receipt (no I/O), or refuse it (``E_RECEIPT``)."""
    (payload, keyid, signed), gate = _verified_receipt(cp, principal, receipt, now)
    return CheckedRefusal(
        refusal_note(payload),
        payload,
        keyid,
        hashlib.sha256(signed).hexdigest(),
        json.dumps(dict(receipt), sort_keys=True),
        gate,
    )


def keep_refusal(
    conn: Connection, cp: _tx.Parts, principal: Principal, checked: CheckedRefusal, now: int
) -> Any:
    """Keep a verified refusal as a note in ``conn``'s open transaction, which holds the
    chain lock (``AuditLog.lock``, taken before any row lock); the proposal it is on
    (read, not locked). The same receipt again writes nothing. Raises :class:`Refusal`."""
    note, digest = checked.note, checked.digest
    row = _approved_proposal(conn, note.approval_id)
    _check_reporter(row, principal, checked.gate)
    # Null for a refusal before the action was hashed (verify steps 1-8).
    if note.action_hash is not None and note.action_hash != row.action_hash:
        raise Refusal(ErrorCode.E_RECEIPT, "receipt names another action hash", 422)
    if conn.execute(_NOTE_BY_DIGEST, {"digest": digest}).first() is not None:
        return row  # the executor retried: the same answer
    count = conn.execute(_NOTES_OF, {"approval_id": note.approval_id}).scalar_one()
    if count >= REFUSAL_NOTES_MAX:
        raise Refusal(
            ErrorCode.E_STATE,
            f"{REFUSAL_NOTES_MAX} executor refusals are recorded for this "
            "approval already; no more are kept",
            409,
        )
    _INSERT_NOTE.rowcount(
        conn,
        {
            "approval_id": note.approval_id,
            "proposal_id": row.id,
            "refusal_code": note.refusal_code,
            "detail": note.detail,
            "executor": note.executor,
            "at": note.at,
            "reported_at": now,
            "receipt": checked.receipt_text,
            "receipt_keyid": checked.keyid,
            "receipt_sha256": digest,
        },
    )
    _tx.audit(
        conn,
        now,
        CheckpointEvent.EXECUTOR_REFUSAL,
        proposal_id=row.id,
        approval_id=note.approval_id,
        refusal_code=note.refusal_code,
        executor=note.executor,
        refused_at=note.at,  # the executor's clock ("at" is this event's own)
        receipt_sha256=digest,
        # Kept in the chain as the outcome path keeps it; the executor_head
        # row (what the feed hands back) moves with outcomes only.
        **_heads(_receipt_head(checked.payload), checked.gate),
    )
    return row


def refusal_kept(conn: Connection, checked: CheckedRefusal) -> Any:
    """The proposal a refusal's note is on if that note is kept already, else None."""
    if conn.execute(_NOTE_BY_DIGEST, {"digest": checked.digest}).first() is None:
        return None
    return _approved_proposal(conn, checked.note.approval_id)


def _approved_proposal(conn: Connection, approval_id: str) -> Row[Any]:
    """The proposal an issued approval is for (read, not locked), or 404."""
    row = conn.execute(_BY_APPROVAL, {"approval_id": approval_id}).first()
    if row is None:
        raise Refusal(ErrorCode.E_NOT_FOUND, "no such approval", 404)
    return row


def _land_state(
    conn: Connection, row: Row[Any], target: str, approval_id: str, now: int
) -> tuple[str, str | None]:
    """Move the proposal to the outcome's state; return ``(state, target_held_by)``.

    An outcome always lands (docs/protocol.md#proposals: the executor's ledger is the truth),
    but ``in_doubt`` is an open state: a late in_doubt on a lapsed, revoked or withdrawn
    proposal takes its (account, resource, operation) slot again, which a newer
    proposal may hold by now. The rule, in one transaction with the outcome row:

    (1) nobody else holds the slot: the proposal becomes in_doubt and holds it until
        a person or the executor resolves it (nobody may propose the same write);
    (2) a newer *pending* proposal holds it: nothing was signed for that one yet, so
        it is withdrawn (audited, with the reason) and this proposal becomes in_doubt;
    (3) a newer *approved* or in_doubt proposal holds it: its approval is a human
        decision, never touched here. This proposal keeps its closed state, and the
        outcome row, its audit event and the API name the holder
        (``target_held_by``); the in_doubt still needs resolving.
    """
    if target not in OPEN_STATES or row.state in OPEN_STATES:
        _tx.move(conn, row.id, target, now)  # no slot changes hands
        return target, None
    holder = slot_holder(conn, row)
    if holder is not None and holder.state == "pending":
        _tx.set_state(conn, holder.id, "pending", "withdrawn", now)
        _tx.audit(
            conn,
            now,
            CheckpointEvent.PROPOSAL_WITHDRAWN,
            proposal_id=holder.id,
            by="checkpoint",
            reason="in_doubt",
            note=f"a late in_doubt outcome of {row.id} (approval {approval_id}) means "
            "the same write may have happened; resolve it before proposing again",
        )
        holder = None
    if holder is None:
        try:
            with conn.begin_nested():
                _tx.move(conn, row.id, target, now)
            return target, None
        except IntegrityError:
            # A proposal for the target was submitted concurrently (PostgreSQL; SQLite
            # writers are serialized): it holds the slot now, so rule (3) applies.
            holder = slot_holder(conn, row)
            if holder is None:  # fail closed: the index refused for another reason
                raise
    _tx.move(conn, row.id, row.state, now)
    return row.state, str(holder.id)


def slot_holder(conn: Connection, row: Row[Any]) -> Row[Any] | None:
    """The other open proposal holding ``row``'s slot, locked: (audience, effect key) for
    a tool call, (account, resource, operation) for a cloud action."""
    if row.effect_key is not None:
        same = sa.and_(
            proposals.c.audience == row.audience, proposals.c.effect_key == row.effect_key
        )
    else:
        same = sa.and_(
            proposals.c.account == row.account,
            proposals.c.resource_type == row.resource_type,
            proposals.c.resource_id == row.resource_id,
            proposals.c.operation == row.operation,
            proposals.c.effect_key.is_(None),
        )
    return conn.execute(
        sa.select(proposals)
        .where(same, proposals.c.state.in_(OPEN_STATES), proposals.c.id != row.id)
        .with_for_update()
    ).first()


def _verified_receipt(
    cp: _tx.Parts, principal: Principal, receipt: Mapping[str, Any], now: int
) -> tuple[VerifiedReceipt, str | None]:
    """The verified receipt and, for a gate's (agent token), the audience whose gate key
    signed it; or refuse (E_RECEIPT). An executor's receipt verifies against the
    executor's receipt key set only, a gate's against the gate key sets only."""
    if principal.role == "agent":
        try:
            verified, audience = verify_gate_receipt(cp.gate_keys, receipt, now)
        except ValueError as exc:
            raise Refusal(ErrorCode.E_RECEIPT, str(exc), 422) from None
        return verified, audience
    # Fail closed: without the executor's receipt key set nothing can be verified, and
    # an unverified receipt would let any executor-token holder close a proposal (and
    # block the revocation of its still-valid approval). build() refuses to start
    # without one; this guards every other way of constructing the service.
    if cp.receipt_keys is None:
        raise Refusal(
            ErrorCode.E_RECEIPT,
            "no receipt key set is configured (AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH); "
            "receipts cannot be verified",
            422,
        )
    try:
        return verify_receipt(receipt, cp.receipt_keys, now), None
    except InvalidReceipt as exc:
        raise Refusal(ErrorCode.E_RECEIPT, str(exc), 422) from None


def _check_receipt(
    cp: _tx.Parts, principal: Principal, receipt: Mapping[str, Any], now: int
) -> tuple[Receipt, str, str, str | None]:
    """An outcome's verified receipt, the key id that signed it, the approval id it
    names and the gate's audience (None for the executor's), or refuse."""
    (payload, keyid, _), gate = _verified_receipt(cp, principal, receipt, now)
    if payload.approval_id is None or payload.action_hash is None:
        raise Refusal(
            ErrorCode.E_RECEIPT,
            "an outcome's receipt must name its approval and action hash",
            422,
        )
    # A receipt speaks for the executor that signed it: one bound to another audience
    # (another environment sharing a receipt key) says nothing about our approvals. A
    # gate's names its own audience (verify_gate_receipt held it to its key).
    if gate is None and payload.executor != cp.config.audience:
        raise Refusal(
            ErrorCode.E_RECEIPT,
            f"receipt is from executor {payload.executor[:128]!r}, "
            f"not this checkpoint's audience {cp.config.audience!r}",
            422,
        )
    return payload, keyid, payload.approval_id, gate


def _check_reporter(row: Row[Any], principal: Principal, gate: str | None) -> None:
    """Refuse a report about ``row`` (a locked or read proposal) from the wrong side: a
    cloud action's comes from the executor, a tool call's from the agent token that
    submitted it, signed by its audience's gate key."""
    if gate is None:
        if row.action_type != CLOUD_ACTION:
            raise Refusal(ErrorCode.E_RECEIPT, "a tool call's outcome is reported by its gate", 422)
        return
    if row.action_type != TOOL_CALL or row.audience != gate:
        raise Refusal(
            ErrorCode.E_RECEIPT,
            f"the gate key of {gate[:128]!r} speaks only for tool calls to that audience",
            422,
        )
    if row.submitted_by != principal.name:
        raise Refusal(
            ErrorCode.E_FORBIDDEN,
            "only the agent token that submitted a tool call reports its outcome",
            403,
        )


def _heads(head: dict[str, int | str], gate: str | None) -> dict[str, Any]:
    """The audit event's chain-head fields: the executor's, or a gate's and its audience."""
    if gate is None:
        return {"executor_head": head}
    return {"gate_head": head, "gate": gate}


class ResolvedHere(Exception):
    """An executor resolution receipt for an in_doubt a person already resolved here
    (:func:`land_outcome` raises it before writing; :func:`resolution_after_person`
    records it, in a transaction of its own)."""


def _int_or_zero(value: int) -> int:
    return value if 0 <= value <= _tx.AT_MAX else 0


def _receipt_head(payload: Receipt) -> dict[str, int | str]:
    """The ``audit_head`` a verified receipt names, as the audit event and the
    ``executor_head`` row keep it."""
    head: AuditHead = payload.audit_head
    return {"seq": head.seq, "hash": head.hash}
