"""The proposal lifecycle: submit, vote, edit (a tool call), sign, reject, revoke,
withdraw, resolve and sweep; and :class:`Checkpoint`, the one face the routes, the app
and the CLI use.

Every state change, the envelope it may issue, its feed entry and its audit event are one
database transaction, its steps in the order :mod:`services.checkpoint._tx` sets out.
Concurrency is the database's job:

* voting locks the proposal row first, so two approvers voting at the same instant see
  each other and exactly one of them issues the envelope; UNIQUE(proposal_id) on
  approvals backs it;
* one vote per person is UNIQUE(proposal_id, voter); one open proposal per target is a
  partial UNIQUE index; a unique violation is a refusal, never a retry of the same write.

The feed (:mod:`.feed`), executor reports (:mod:`.reports`) and read views (:mod:`.views`)
live beside it; :class:`Checkpoint` hands those calls on. Time comes only from the
injected ``now`` (Unix seconds), so tests never sleep. This module must never sign
anything but a statement built here from a stored proposal, never sign for a proposal
that is not ``pending`` with its quorum met, and never log a token, a password or key
material.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from airlock.events import CheckpointEvent
from airlock.protocol import (
    RECEIPT_PAYLOAD_TYPE,
    TOOL_CALL_TYPE,
    KeySet,
    Refused,
    b64encode,
)
from airlock.store import Prepared

from . import _tx, batches, editing, feed, reports, routing, toolcalls, views
from ._db import Database
from ._tx import FEED_SEQ_PER_SECOND, CheckpointConfig
from .auth import Principal, touch_session
from .errors import ConfigError, ErrorCode, Refusal, no_signing_key
from .gatekeys import GateKeys
from .keys import KeyRing
from .models import (
    approvals,
    notify_events,
    outcomes,
    proposals,
    rejections,
    signing_keys,
    votes,
)
from .notify import NotifyConfig
from .notify import record as record_event
from .policy import AUTO_APPROVER_PREFIX, Decision, Policy
from .reports import REFUSAL_NOTES_MAX
from .schemas import AuditOut, FeedOut, ProposalList, ProposalOut

__all__ = [
    "FEED_SEQ_PER_SECOND",
    "RECEIPT_PAYLOAD_TYPE",
    "REFUSAL_NOTES_MAX",
    "Checkpoint",
    "CheckpointConfig",
]


# The vote path's statements, compiled once and run on the driver's cursor: SQLAlchemy's
# own execute costs several times the statement (airlock.store.Prepared).
_BY_ID = sa.select(proposals).where(proposals.c.id == sa.bindparam("id"))
_VOTED = Prepared(
    sa.select(votes.c.id).where(
        votes.c.proposal_id == sa.bindparam("id"), votes.c.voter == sa.bindparam("voter")
    )
)
_VOTE = Prepared(votes.insert().values(_tx.bound(votes, "proposal_id", "voter", "at", "note")))
# Not a column's name: SQLAlchemy keeps those for the SET clause's own parameters.
_PID = sa.bindparam("pid", type_=proposals.c.id.type)
_NOW = sa.bindparam("now", type_=proposals.c.updated_at.type)
_UPDATED = Prepared(proposals.update().where(proposals.c.id == _PID).values(updated_at=_NOW))
_APPROVED = Prepared(
    proposals.update()
    .where(proposals.c.id == _PID, proposals.c.state == "pending")
    .values(state="approved", updated_at=_NOW)
)
_APPROVAL = Prepared(
    approvals.insert().values(
        _tx.bound(
            approvals,
            "approval_id",
            "proposal_id",
            "nonce",
            "statement",
            "envelope",
            "keyid",
            "issued_at",
            "expires_at",
        )
    )
)
_PROPOSAL = Prepared(_BY_ID)
#: Every column a submission sets (``toolcalls.Submission.columns`` and the rest).
_INSERT_PROPOSAL = Prepared(
    proposals.insert().values(
        _tx.bound(
            proposals,
            *(c.name for c in proposals.columns if c.name != "superseded_by"),
        )
    )
)
_KEY_KNOWN = Prepared(
    sa.select(signing_keys.c.kid).where(signing_keys.c.kid == sa.bindparam("kid"))
)


def _may_approve(principal: Principal) -> None:
    _tx.require(principal, _tx.APPROVER_ROLES, "approve")
    if principal.kind != "user":
        raise Refusal(ErrorCode.E_FORBIDDEN, "only people approve", 403)


class Checkpoint:
    """The proposal lifecycle over one database, one policy and one key ring."""

    def __init__(
        self,
        db: Database,
        policy: Policy,
        keys: KeyRing,
        config: CheckpointConfig,
        *,
        now: Callable[[], int],
        # The executor's receipt public key set; None refuses every outcome (fail closed).
        receipt_keys: KeySet | None = None,
        # The gates' receipt key sets per audience; None: no gate may report.
        gate_keys: GateKeys | None = None,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.db = db
        self.policy = policy
        self.keys = keys
        self.config = config
        self.now = now
        self.receipt_keys = receipt_keys
        self.gate_keys = gate_keys or GateKeys(None)
        self.on_change = on_change or (lambda: None)

    @property
    def engine(self) -> Engine:
        return self.db.engine

    @property
    def notify(self) -> NotifyConfig:
        """Where notifications go: the policy's ``[notify]`` table."""
        return self.policy.notify

    def submit(self, principal: Principal, body: bytes) -> tuple[ProposalOut, bool]:
        """Record a proposal; return ``(record, created)``. Idempotent on (id, hash)."""
        _tx.require(principal, {"agent"}, "submit proposals")
        try:
            sub = toolcalls.parse_submission(body)
        except Refused as exc:
            raise Refusal(ErrorCode.E_INVALID, f"{exc.code.value}: {exc.detail}", 422) from None
        except ValueError as exc:
            raise Refusal(ErrorCode.E_INVALID, str(exc), 422) from None
        action, digest = sub.action, sub.digest
        decision = self.policy.decide(action)
        now = self.now()
        try:
            with self.engine.begin() as conn:
                existing = self._existing(conn, action.proposal_id, digest)
                if existing is not None:
                    return existing, False
                self._insert_proposal(
                    conn, submitted_by=principal.name, sub=sub, decision=decision, now=now
                )
                approval = None
                if decision.effect == "auto":
                    approval = self._issue(conn, action.proposal_id, now)
                if decision.effect != "deny":
                    record = self._submitted(conn, principal, action.proposal_id, approval)
        except IntegrityError:
            # Lost a race: either the same id was inserted concurrently (idempotent
            # answer) or another open proposal holds this target.
            with self.engine.begin() as conn:
                existing = self._existing(conn, action.proposal_id, digest)
                if existing is not None:
                    return existing, False
            raise Refusal(
                ErrorCode.E_DUPLICATE_OPEN,
                "another open proposal exists for this audience and effect key"
                if sub.is_tool_call
                else "another open proposal exists for this account, resource and operation",
                409,
            ) from None
        if decision.effect == "auto":
            self.on_change()
        if decision.effect == "deny":
            raise Refusal(ErrorCode.E_POLICY_DENIED, _tx.deny_message(decision), 403)
        return record, True

    def _submitted(
        self, conn: Connection, principal: Principal, proposal_id: str, approval: Any
    ) -> ProposalOut:
        """The record as this submission left it, in its transaction: the row as stored,
        with the approval it issued (auto), if any; a new proposal has no vote,
        rejection, outcome or executor refusal to read."""
        return views.view(
            conn,
            _PROPOSAL.row(conn, {"id": proposal_id}),
            self.notify,
            principal.name,
            routes={proposal_id: routing.route_of(conn, proposal_id)},
            counted=(),
            known=views.Known(approval),
        )

    def _existing(self, conn: Connection, proposal_id: str, digest: str) -> ProposalOut | None:
        row = _PROPOSAL.row(conn, {"id": proposal_id})
        if row is None:
            return None
        if row.action_hash != digest:
            raise Refusal(
                ErrorCode.E_CONFLICT,
                f"proposal {proposal_id} exists with a different action hash",
                409,
            )
        if row.state == "denied":
            raise Refusal(ErrorCode.E_POLICY_DENIED, row.deny_reason or "denied by policy", 403)
        return views.view(conn, row, self.notify, None)  # to the agent, who may not vote

    def _insert_proposal(
        self,
        conn: Connection,
        *,
        submitted_by: str,
        sub: toolcalls.Submission,
        decision: Decision,
        now: int,
        edit: str | None = None,
    ) -> None:
        """Insert a proposal; audit its submission unless it is an edit's (``edit``: the
        edit record, audited by the edit)."""
        state = "denied" if decision.effect == "deny" else "pending"
        action, digest = sub.action, sub.digest
        _INSERT_PROPOSAL.rowcount(
            conn,
            {
                "id": action.proposal_id,
                "action": sub.canonical,
                "action_hash": digest,
                **sub.columns,
                "proposed_by": action.proposed_by,
                "submitted_by": submitted_by,
                "state": state,
                "risk": decision.risk,
                "rule": decision.rule,
                "effect": decision.effect,
                "quorum": decision.quorum,
                "confirm": decision.confirm,
                "policy_hash": self.policy.hash,
                "deny_reason": _tx.deny_message(decision) if state == "denied" else None,
                "approval_deadline": now + self.config.approval_window,
                "created_at": now,
                "updated_at": now,
                "edit": edit,
            },
        )
        if state == "pending":
            routing.start(conn, self.policy.notify, action.proposal_id, decision, now)
        if edit is not None:
            return
        _tx.audit(
            conn,
            now,
            CheckpointEvent.PROPOSAL_SUBMITTED,
            proposal_id=action.proposal_id,
            action_hash=digest,
            by=submitted_by,
            rule=decision.rule,
            effect=decision.effect,
            state=state,
            policy_hash=self.policy.hash,
        )
        if state == "pending" and decision.effect == "approve":
            record_event(conn, self.policy.notify, action.proposal_id, "proposal.needs_vote", now)

    # -- votes and signing -----------------------------------------------------------

    def approve(
        self,
        principal: Principal | Callable[[Connection], Principal],
        proposal_id: str,
        seen_hash: str,
        confirm: str | None,
        note: str,
    ) -> ProposalOut:
        """Vote to approve; at quorum, sign and issue the approval, in one transaction.

        Args:
            principal: the voter, or what looks the voter up (a token's lookup,
                ``Accounts.look_up``) first in the vote's transaction: one transaction,
                not two; it raises its own refusal (401) before anything is read.

        Raises:
            Refusal: the vote is refused; nothing is written.
        """
        if isinstance(principal, Principal):
            _may_approve(principal)
        now = self.now()
        with self.engine.begin() as conn:
            if not isinstance(principal, Principal):
                principal = principal(conn)
                _may_approve(principal)
            row = _tx.lock(conn, proposal_id)
            touch_session(conn, principal)  # in this commit, not one of its own
            _tx.check_pending(row, now)
            # (1) the person saw exactly this action
            if seen_hash != row.action_hash:
                raise Refusal(
                    ErrorCode.E_STALE_VIEW,
                    f"the action hash approved ({str(seen_hash)[:80]}) is not this proposal's "
                    f"({row.action_hash}): nothing was approved; reload it and review again",
                    409,
                )
            # (2) a dangerous action needs its resource id (a tool call's target) typed
            _tx.check_confirm(row, row.confirm, confirm)
            # (3) never the proposer
            _tx.check_not_proposer(principal, row)
            # (3b) a routed proposal: only a member of a group asked so far. Its route
            # is read once: the row lock holds its level still until commit.
            route = routing.route_of(conn, proposal_id)
            routing.check_voter(conn, self.policy.notify, proposal_id, principal.name, route=route)
            # (4) one vote per person (the UNIQUE constraint is the judge)
            if _VOTED.rows(conn, {"id": proposal_id, "voter": principal.name}):
                raise Refusal(ErrorCode.E_ALREADY_VOTED, "you have already approved this", 409)
            _VOTE.rowcount(
                conn,
                {"proposal_id": proposal_id, "voter": principal.name, "at": now, "note": note},
            )
            _tx.audit(
                conn,
                now,
                CheckpointEvent.VOTE_APPROVE,
                proposal_id=proposal_id,
                action_hash=row.action_hash,
                by=principal.name,
                note=note,
            )
            # (5) quorum reached → state change, envelope and audit event, together
            voters = _tx.counted_votes(conn, proposal_id)
            approval = None
            if len(voters) >= row.quorum:
                approval = self._issue(conn, proposal_id, now, row=row, voters=voters, route=route)
                state = "approved"
            else:
                _UPDATED.rowcount(conn, {"pid": proposal_id, "now": now})
                state = row.state
            # The record as this vote left it (another vote may follow right after commit):
            # the locked row with what this transaction wrote to it.
            result = views.view(
                conn,
                SimpleNamespace(**{**row._mapping, "state": state, "updated_at": now}),
                self.notify,
                principal.name,
                routes={} if route is None else {proposal_id: route},
                counted={voter for voter, _ in voters},
                known=views.Known(approval),
            )
        if approval is not None:
            self.on_change()
        return result

    def edit(
        self,
        principal: Principal,
        proposal_id: str,
        seen_hash: str,
        values: Mapping[str, Any],
        *,
        confirm: str | None,
        note: str,
    ) -> ProposalOut:
        """Edit a pending tool call's arguments: see :func:`.editing.edit`."""
        return editing.edit(
            self, principal, proposal_id, seen_hash, values, confirm=confirm, note=note
        )

    def _issue(
        self,
        conn: Connection,
        proposal_id: str,
        now: int,
        *,
        row: Any = None,
        voters: list[tuple[str, int]] | None = None,
        route: Any = routing.UNREAD,
    ) -> SimpleNamespace:
        """Sign the approval for a pending proposal whose quorum is met, in ``conn``;
        return the ``approvals`` row written (its columns as attributes).

        ``row`` (the proposal's row, locked), ``voters`` (its counted votes) and
        ``route`` (:func:`.routing.route_of`): as read in this transaction after its
        last vote, or None (``route``: not given) to read them here.
        """
        if row is None:
            row = conn.execute(_BY_ID, {"id": proposal_id}).one()
        if row.state != "pending":
            raise Refusal(ErrorCode.E_STATE, f"proposal is {row.state}", 409)
        if voters is None:
            voters = _tx.counted_votes(conn, proposal_id)
        approvers = [{"id": voter, "at": at} for voter, at in voters]
        if row.effect == "auto":
            # policy.py refused, at load, any auto rule name that is not a valid id here.
            approvers = [{"id": AUTO_APPROVER_PREFIX + row.rule, "at": now}]
        if len(approvers) < row.quorum:
            raise Refusal(ErrorCode.E_STATE, "quorum not met", 409)
        if row.effect != "auto":
            routing.check_signers(
                conn, self.policy.notify, row.id, [v for v, _ in voters], route=route
            )
        try:
            signer = self.keys.signer()
        except ConfigError as exc:
            raise no_signing_key(exc) from None
        approval_id = "apv_" + secrets.token_hex(16)
        statement = toolcalls.statement(
            row,
            approval_id=approval_id,
            nonce=secrets.token_hex(16),
            approvers=approvers,
            now=now,
            expires_at=now + self.config.execution_window,
            executor_audience=self.config.audience,
        )
        envelope = signer.sign_statement(statement)
        written = SimpleNamespace(
            approval_id=approval_id,
            proposal_id=row.id,
            nonce=statement.nonce,
            statement=envelope.payload,
            envelope=json.dumps(envelope.to_value(), sort_keys=True),
            keyid=signer.keyid,
            issued_at=now,
            expires_at=statement.expires_at,
        )
        _APPROVAL.rowcount(conn, vars(written))
        written.revoked_at = written.revoked_by = None  # as inserted
        if not _KEY_KNOWN.rows(conn, {"kid": signer.keyid}):
            conn.execute(
                signing_keys.insert().values(
                    kid=signer.keyid, public_key=b64encode(signer.public_raw), first_used_at=now
                )
            )
        if _APPROVED.rowcount(conn, {"pid": row.id, "now": now}) != 1:
            # Unreachable under the row lock; if it ever were, nothing signed may commit.
            raise Refusal(ErrorCode.E_STATE, "proposal is no longer pending", 409)
        _tx.audit(
            conn,
            now,
            CheckpointEvent.APPROVAL_ISSUED,
            proposal_id=row.id,
            approval_id=approval_id,
            action_hash=row.action_hash,
            nonce=statement.nonce,
            keyid=signer.keyid,
            approvers=[a["id"] for a in approvers],
            quorum=row.quorum,
            rule=row.rule,
            policy_hash=row.policy_hash,
            expires_at=statement.expires_at,
        )
        _tx.feed_entry(conn, "approval", approval_id, now)
        record_event(
            conn,
            self.policy.notify,
            row.id,
            "proposal.approved",
            now,
            voters=[voter for voter, _ in voters],
            row=SimpleNamespace(**{**row._mapping, "state": "approved", "updated_at": now}),
        )
        return written

    def reject(
        self, principal: Principal, proposal_id: str, reason_code: str, note: str
    ) -> ProposalOut:
        _tx.require(principal, _tx.APPROVER_ROLES, "reject")
        if reason_code == "other" and not note.strip():
            # "other" tells the agent and the record nothing by itself.
            raise Refusal(ErrorCode.E_NOTE_REQUIRED, "reason 'other' needs a note saying why", 422)
        now = self.now()
        with self.engine.begin() as conn:
            row = _tx.lock(conn, proposal_id)
            # A reason is the built-in ones', or the policy's for this tool call's tool.
            tool = row.operation if row.action_type == TOOL_CALL_TYPE else None
            allowed = self.policy.reject_reasons(tool)
            if reason_code not in allowed:
                raise Refusal(
                    ErrorCode.E_INVALID,
                    # The code is not echoed: what was sent is the caller's to know.
                    "reason_code must be one of " + ", ".join(repr(r) for r in allowed),
                    422,
                )
            _tx.check_pending(row, now)
            conn.execute(
                rejections.insert().values(
                    proposal_id=proposal_id,
                    reason_code=reason_code,
                    note=note,
                    by=principal.name,
                    at=now,
                )
            )
            _tx.set_state(conn, proposal_id, "pending", "rejected", now)
            _tx.audit(
                conn,
                now,
                CheckpointEvent.PROPOSAL_REJECTED,
                proposal_id=proposal_id,
                by=principal.name,
                reason_code=reason_code,
                note=note,
            )
        return self.get(principal, proposal_id)

    def revoke(self, principal: Principal, proposal_id: str, note: str) -> ProposalOut:
        """Revoke an issued approval that has not been executed (one audited call)."""
        _tx.require(principal, _tx.APPROVER_ROLES, "revoke approvals")
        now = self.now()
        with self.engine.begin() as conn:
            row = _tx.lock(conn, proposal_id)
            if row.state != "approved":
                raise Refusal(
                    ErrorCode.E_STATE,
                    f"only an approved proposal can be revoked (is {row.state})",
                    409,
                )
            self._revoke_approval(conn, proposal_id, principal.name, note, now)
            _tx.set_state(conn, proposal_id, "approved", "revoked", now)
        self.on_change()
        return self.get(principal, proposal_id)

    def _revoke_approval(
        self, conn: Connection, proposal_id: str, by: str, note: str, now: int
    ) -> None:
        approval = conn.execute(
            sa.select(approvals).where(approvals.c.proposal_id == proposal_id)
        ).one()
        reported = conn.execute(
            sa.select(outcomes.c.approval_id).where(outcomes.c.approval_id == approval.approval_id)
        ).first()
        if reported is not None or approval.revoked_at is not None:
            raise Refusal(ErrorCode.E_STATE, "the approval was already used or revoked", 409)
        conn.execute(
            approvals.update()
            .where(approvals.c.approval_id == approval.approval_id)
            .values(revoked_at=now, revoked_by=by, revoke_note=note)
        )
        _tx.audit(
            conn,
            now,
            CheckpointEvent.APPROVAL_REVOKED,
            proposal_id=proposal_id,
            approval_id=approval.approval_id,
            by=by,
            note=note,
        )
        _tx.feed_entry(conn, "revocation", approval.approval_id, now)

    def withdraw(self, principal: Principal, proposal_id: str, note: str) -> ProposalOut:
        """The agent takes back an open proposal; an issued approval is revoked with it."""
        _tx.require(principal, {"agent"}, "withdraw proposals")
        now = self.now()
        revoked = False
        with self.engine.begin() as conn:
            row = _tx.lock(conn, proposal_id)
            # Only the agent that submitted it: another agent token must not be able to
            # cancel (and so revoke the approval of) a proposal that is not its own.
            if row.submitted_by != principal.name:
                raise Refusal(
                    ErrorCode.E_FORBIDDEN,
                    "only the agent that submitted a proposal may withdraw it",
                    403,
                )
            if row.state not in ("pending", "approved"):
                raise Refusal(ErrorCode.E_STATE, f"a {row.state} proposal cannot be withdrawn", 409)
            if row.state == "approved":
                self._revoke_approval(conn, proposal_id, principal.name, note, now)
                revoked = True
            _tx.set_state(conn, proposal_id, row.state, "withdrawn", now)
            _tx.audit(
                conn,
                now,
                CheckpointEvent.PROPOSAL_WITHDRAWN,
                proposal_id=proposal_id,
                by=principal.name,
                note=note,
            )
        if revoked:
            self.on_change()
        return self.get(principal, proposal_id)

    def resolve(
        self, principal: Principal, proposal_id: str, decision: str, note: str
    ) -> ProposalOut:
        """A human decides an in_doubt execution: it happened, or it did not."""
        _tx.require(principal, {"admin"}, "resolve in_doubt executions")
        now = self.now()
        with self.engine.begin() as conn:
            row = _tx.lock(conn, proposal_id)
            # Also an unresolved in_doubt that landed while another proposal held the
            # target (the proposal kept its closed state; see _land_state).
            held = conn.execute(
                sa.select(outcomes.c.approval_id).where(
                    outcomes.c.proposal_id == proposal_id,
                    outcomes.c.outcome == "in_doubt",
                    outcomes.c.resolution.is_(None),
                    outcomes.c.target_held_by.is_not(None),
                )
            ).first()
            if row.state != "in_doubt" and held is None:
                raise Refusal(ErrorCode.E_STATE, f"the proposal is {row.state}, not in_doubt", 409)
            conn.execute(
                outcomes.update()
                .where(outcomes.c.proposal_id == proposal_id)
                .values(
                    resolution=decision,
                    resolved_by=principal.name,
                    resolved_at=now,
                    resolution_note=note,
                )
            )
            target = "executed" if decision == "happened" else "failed"
            _tx.set_state(conn, proposal_id, row.state, target, now)
            _tx.audit(
                conn,
                now,
                CheckpointEvent.EXECUTION_RESOLVED,
                proposal_id=proposal_id,
                by=principal.name,
                decision=decision,
                note=note,
            )
            record_event(conn, self.policy.notify, proposal_id, f"proposal.{target}", now)
        return self.get(principal, proposal_id)

    # -- the sweeper -----------------------------------------------------------------

    def sweep(self) -> dict[str, int]:
        """Expire pending proposals past their approval window; lapse unused approvals;
        warn (``proposal.expiring``) of windows about to end, once each; escalate routed
        proposals past their SLA (:func:`.routing.escalate`)."""
        now = self.now()
        counts = {"expired": 0, "lapsed": 0, "escalated": 0}
        wanted = self.policy.notify
        with self.engine.begin() as conn:
            # Every row this pass changes is locked before its first audit append
            # (_tx's order): a sweeper holding the chain while it waited for a row that a
            # vote or an outcome holds would deadlock with it on PostgreSQL. In id
            # order, so two sweepers take the rows in one order too.
            stale = conn.execute(
                sa.select(proposals.c.id)
                .where(proposals.c.state == "pending", proposals.c.approval_deadline <= now)
                .order_by(proposals.c.id)
                .with_for_update()
            ).all()
            lapsing = conn.execute(
                sa.select(proposals.c.id, approvals.c.approval_id)
                .select_from(proposals.join(approvals, approvals.c.proposal_id == proposals.c.id))
                .where(proposals.c.state == "approved", approvals.c.expires_at <= now)
                .order_by(proposals.c.id)
                .with_for_update(of=proposals)
            ).all()
            expiring: Sequence[Any] = ()
            if wanted.active:
                told = sa.select(notify_events.c.id).where(
                    notify_events.c.proposal_id == proposals.c.id,
                    notify_events.c.kind == "proposal.expiring",
                )
                expiring = conn.execute(
                    sa.select(proposals.c.id)
                    .where(
                        proposals.c.state == "pending",
                        proposals.c.approval_deadline > now,
                        proposals.c.approval_deadline <= now + wanted.expiring_before,
                        ~told.exists(),
                    )
                    .order_by(proposals.c.id)
                    .with_for_update()
                ).all()
            counts["escalated"] = routing.escalate(conn, wanted, now)
            for (pid,) in stale:
                _tx.set_state(conn, pid, "pending", "expired", now)
                _tx.audit(conn, now, CheckpointEvent.PROPOSAL_EXPIRED, proposal_id=pid)
                record_event(conn, wanted, pid, "proposal.expired", now)
                counts["expired"] += 1
            for pid, aid in lapsing:
                _tx.set_state(conn, pid, "approved", "lapsed", now)
                _tx.audit(
                    conn, now, CheckpointEvent.APPROVAL_LAPSED, proposal_id=pid, approval_id=aid
                )
                record_event(conn, wanted, pid, "approval.lapsed", now)
                counts["lapsed"] += 1
            for (pid,) in expiring:
                record_event(conn, wanted, pid, "proposal.expiring", now)
        return counts

    def audit_refusals(self, events: Sequence[Mapping[str, object]]) -> None:
        """Append ``checkpoint.refused`` events (built by ``refusals.RefusalRecorder``) in
        one transaction of their own, which writes nothing else."""
        now = self.now()
        with self.engine.begin() as conn:
            for event in events:
                _tx.audit(conn, now, CheckpointEvent.REFUSED, **event)

    # -- the feed, executor reports and read views (their own modules) ----------------

    def feed(
        self, principal: Principal, after: int, limit: int = 100, audience: str | None = None
    ) -> FeedOut:
        """See :func:`services.checkpoint.feed.feed`."""
        return feed.feed(self, principal, after, limit, audience)

    def feed_head(self) -> int:
        return feed.head_seq(self)

    def report_outcome(self, principal: Principal, receipt: Mapping[str, Any]) -> ProposalOut:
        """See :func:`services.checkpoint.reports.report_outcome`."""
        return reports.report_outcome(self, principal, receipt)

    def report_refusal(self, principal: Principal, receipt: Mapping[str, Any]) -> ProposalOut:
        """See :func:`services.checkpoint.reports.report_refusal`."""
        return reports.report_refusal(self, principal, receipt)

    def report_receipts(
        self, principal: Principal, receipts: Sequence[tuple[str, Mapping[str, Any]]]
    ) -> list[batches.Answer]:
        """See :func:`services.checkpoint.batches.report_receipts`."""
        return batches.report_receipts(self, principal, receipts)

    def get(self, principal: Principal, proposal_id: str) -> ProposalOut:
        return views.get(self, principal, proposal_id)

    def list(
        self,
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
        """See :func:`services.checkpoint.views.list_proposals`."""
        return views.list_proposals(
            self,
            principal,
            state=state,
            operation=operation,
            account=account,
            region=region,
            resource_id=resource_id,
            proposed_by=proposed_by,
            before=before,
            limit=limit,
        )

    def audit_status(self, principal: Principal) -> AuditOut:
        return views.audit_status(self, principal)
