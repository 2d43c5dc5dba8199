"""The checkpoint's decisions: submit, vote, sign, reject, revoke, withdraw, resolve, feed,
and what executors report back (outcomes; refusals before use, kept as notes).

Every state change, the envelope it may issue, its feed entry and its audit event are one
database transaction. Concurrency is the database's job:

* voting locks the proposal row first (``SELECT … FOR UPDATE`` on PostgreSQL; SQLite's
  ``BEGIN IMMEDIATE`` serializes writers), so two approvers voting at the same instant
  see each other and exactly one of them issues the envelope; UNIQUE(proposal_id) on
  approvals backs it;
* one vote per person is UNIQUE(proposal_id, voter); one open proposal per target is a
  partial UNIQUE index; a unique violation is a refusal, never a retry of the same write.

Time comes only from the injected ``now`` (Unix seconds), so tests never sleep. This
module must never sign anything but a statement built here from a stored proposal, never
sign for a proposal that is not ``pending`` with its quorum met, and never log a token,
a password or key material.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, Row
from sqlalchemy.exc import IntegrityError

from airlock.events import CheckpointEvent
from airlock.protocol import (
    APPROVAL_PAYLOAD_TYPE,
    APPROVAL_TYPE,
    RECEIPT_PAYLOAD_TYPE,
    ApprovalStatement,
    AuditHead,
    Envelope,
    InvalidReceipt,
    KeySet,
    ProposedAction,
    Receipt,
    RefusalCode,
    Refused,
    VerifiedReceipt,
    action_hash,
    b64encode,
    make_bundle,
    verify_receipt,
)
from airlock.store import AuditLog, read_transaction, verify_chain
from airlock.text import inert

from ._db import Database
from .auth import Principal
from .errors import ConfigError, ErrorCode, Refusal, no_signing_key
from .keys import KeyRing
from .models import (
    OPEN_STATES,
    approvals,
    executor_head,
    executor_resolutions,
    feed_events,
    feed_head,
    outcomes,
    proposals,
    refusal_notes,
    rejections,
    signing_keys,
    users,
    votes,
)
from .policy import AUTO_APPROVER_PREFIX, Decision, Policy, action_tags
from .schemas import (
    ApprovalOut,
    AuditHeadOut,
    AuditOut,
    ExecutorHeadOut,
    ExecutorRefusalOut,
    ExecutorResolutionOut,
    FeedItem,
    FeedOut,
    OutcomeOut,
    PolicyOut,
    ProposalList,
    ProposalOut,
    RejectionOut,
    VoteOut,
)

__all__ = ["RECEIPT_PAYLOAD_TYPE", "REFUSAL_NOTES_MAX", "Checkpoint", "CheckpointConfig"]

_log = logging.getLogger("airlock.checkpoint")

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
#: The refusals an executor reports before the consume (the kernel's verify steps 6–8
#: and 12, which name the authenticated approval): the only codes a note may carry, so
#: nothing else (a signature refusal, a code made up) is ever shown on a proposal.
_NOTE_CODES: Final = frozenset(
    c.value
    for c in (
        RefusalCode.E_AUDIENCE,
        RefusalCode.E_ACCOUNT,
        RefusalCode.E_NOT_YET_VALID,
        RefusalCode.E_EXPIRED,
        RefusalCode.E_TTL,
        RefusalCode.E_REVOKED,
    )
)
#: The last second ``datetime`` can show (9999-12-31T23:59:59Z): a note's time past it
#: would make every page that shows the note fail.
_AT_MAX: Final = 253402300799
_EXECUTOR_MAX: Final = 256
_DETAIL_MAX: Final = 2000
#: Closed states an outcome may still land on (docs/protocol.md#proposals: the ledger is the truth).
_LATE_STATES: Final = ("lapsed", "revoked", "withdrawn")
_APPROVER_ROLES: Final = frozenset({"approver", "admin"})
_READER_ROLES: Final = frozenset({"viewer", "approver", "admin", "agent"})
_MAX_PAGE: Final = 200
#: Feed seqs per second of the clock: a feed seq is at least ``now × this`` (see
#: ``_feed``). Up to a million items a second keep to the clock; more just count on.
#: In 2026 a seq is about 1.8e15, and stays under JSON's 2**53 for two centuries.
FEED_SEQ_PER_SECOND: Final = 1_000_000
#: The largest feed seq: JSON's largest exact integer (the feed's ``after`` takes no more).
_FEED_SEQ_MAX: Final = 2**53 - 1
#: How far past this clock an executor's cursor may raise the feed counter, seconds.
_FEED_AHEAD_MAX_S: Final = 24 * 3600
#: How far past this clock a receipt's time is kept as the time of the executor head it
#: names, seconds (``_advance_executor_head``): clocks differ, but not by more.
_RECEIPT_AHEAD_MAX_S: Final = 300


@dataclass(frozen=True, slots=True)
class CheckpointConfig:
    audience: str
    approval_window: int = 24 * 3600
    execution_window: int = 15 * 60


def _require(principal: Principal, roles: frozenset[str] | set[str], what: str) -> None:
    if principal.role not in roles:
        raise Refusal(ErrorCode.E_FORBIDDEN, f"role {principal.role} may not {what}", 403)


def _not_found(proposal_id: str) -> Refusal:
    return Refusal(ErrorCode.E_NOT_FOUND, f"no proposal {proposal_id[:100]!r}", 404)


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
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.db = db
        self.policy = policy
        self.keys = keys
        self.config = config
        self.now = now
        self.receipt_keys = receipt_keys
        self.on_change = on_change or (lambda: None)

    @property
    def engine(self) -> Engine:
        return self.db.engine

    # -- submit ---------------------------------------------------------------------

    def submit(self, principal: Principal, body: bytes) -> tuple[ProposalOut, bool]:
        """Record a proposal; return ``(record, created)``. Idempotent on (id, hash)."""
        _require(principal, {"agent"}, "submit proposals")
        try:
            action = ProposedAction.from_json_bytes(body)
            canonical = action.canonical_bytes()
            action_tags(action)  # malformed evidence.tags is refused, never ignored
        except Refused as exc:
            raise Refusal(ErrorCode.E_INVALID, f"{exc.code.value}: {exc.detail}", 422) from None
        except ValueError as exc:
            raise Refusal(ErrorCode.E_INVALID, str(exc), 422) from None
        digest = action_hash(canonical)
        decision = self.policy.decide(action)
        now = self.now()
        try:
            with self.engine.begin() as conn:
                existing = self._existing(conn, action.proposal_id, digest)
                if existing is not None:
                    return existing, False
                self._insert_proposal(
                    conn,
                    principal=principal,
                    action=action,
                    canonical=canonical,
                    digest=digest,
                    decision=decision,
                    now=now,
                )
                if decision.effect == "auto":
                    self._issue(conn, action.proposal_id, now)
        except IntegrityError:
            # Lost a race: either the same id was inserted concurrently (idempotent
            # answer) or another open proposal holds this target.
            with self.engine.begin() as conn:
                existing = self._existing(conn, action.proposal_id, digest)
                if existing is not None:
                    return existing, False
            raise Refusal(
                ErrorCode.E_DUPLICATE_OPEN,
                "another open proposal exists for this account, resource and operation",
                409,
            ) from None
        if decision.effect == "auto":
            self.on_change()
        if decision.effect == "deny":
            raise Refusal(ErrorCode.E_POLICY_DENIED, _deny_message(decision), 403)
        return self.get(principal, action.proposal_id), True

    def _existing(self, conn: Connection, proposal_id: str, digest: str) -> ProposalOut | None:
        row = conn.execute(sa.select(proposals).where(proposals.c.id == proposal_id)).first()
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
        return self._view(conn, row)

    def _insert_proposal(
        self,
        conn: Connection,
        *,
        principal: Principal,
        action: ProposedAction,
        canonical: bytes,
        digest: str,
        decision: Decision,
        now: int,
    ) -> None:
        state = "denied" if decision.effect == "deny" else "pending"
        conn.execute(
            proposals.insert().values(
                id=action.proposal_id,
                action=canonical,
                action_hash=digest,
                provider=action.provider,
                account=action.account,
                region=action.region,
                resource_type=action.resource.type,
                resource_id=action.resource.id,
                operation=action.operation,
                proposed_by=action.proposed_by,
                submitted_by=principal.name,
                state=state,
                risk=decision.risk,
                rule=decision.rule,
                effect=decision.effect,
                quorum=decision.quorum,
                confirm=decision.confirm,
                policy_hash=self.policy.hash,
                deny_reason=_deny_message(decision) if state == "denied" else None,
                approval_deadline=now + self.config.approval_window,
                created_at=now,
                updated_at=now,
            )
        )
        self._audit(
            conn,
            now,
            CheckpointEvent.PROPOSAL_SUBMITTED,
            proposal_id=action.proposal_id,
            action_hash=digest,
            by=principal.name,
            rule=decision.rule,
            effect=decision.effect,
            state=state,
            policy_hash=self.policy.hash,
        )

    # -- votes and signing -----------------------------------------------------------

    def approve(
        self,
        principal: Principal,
        proposal_id: str,
        seen_hash: str,
        confirm: str | None,
        note: str,
    ) -> ProposalOut:
        _require(principal, _APPROVER_ROLES, "approve")
        if principal.kind != "user":
            raise Refusal(ErrorCode.E_FORBIDDEN, "only people approve", 403)
        now = self.now()
        issued = False
        with self.engine.begin() as conn:
            row = self._lock(conn, proposal_id)
            self._check_pending(row, now)
            # (1) the person saw exactly this action
            if seen_hash != row.action_hash:
                raise Refusal(
                    ErrorCode.E_STALE_VIEW,
                    f"the action hash approved ({str(seen_hash)[:80]}) is not this proposal's "
                    f"({row.action_hash}): nothing was approved; reload it and review again",
                    409,
                )
            # (2) a dangerous action needs its resource id typed
            if row.confirm:
                if not confirm:
                    raise Refusal(
                        ErrorCode.E_CONFIRM_REQUIRED,
                        "type the resource id to confirm this high-risk action",
                        422,
                    )
                if not secrets.compare_digest(confirm.encode(), row.resource_id.encode()):
                    raise Refusal(
                        ErrorCode.E_CONFIRM_MISMATCH,
                        "the typed resource id does not match the resource",
                        422,
                    )
            # (3) never the proposer
            if principal.name in (row.proposed_by, row.submitted_by):
                raise Refusal(
                    ErrorCode.E_SELF_APPROVAL, "you may not approve your own proposal", 403
                )
            # (4) one vote per person (the UNIQUE constraint is the judge)
            already = conn.execute(
                sa.select(votes.c.id).where(
                    votes.c.proposal_id == proposal_id, votes.c.voter == principal.name
                )
            ).first()
            if already is not None:
                raise Refusal(ErrorCode.E_ALREADY_VOTED, "you have already approved this", 409)
            conn.execute(
                votes.insert().values(
                    proposal_id=proposal_id, voter=principal.name, at=now, note=note
                )
            )
            self._audit(
                conn,
                now,
                CheckpointEvent.VOTE_APPROVE,
                proposal_id=proposal_id,
                action_hash=row.action_hash,
                by=principal.name,
                note=note,
            )
            # (5) quorum reached → state change, envelope and audit event, together
            count = len(self._counted_votes(conn, proposal_id))
            if count >= row.quorum:
                self._issue(conn, proposal_id, now)
                issued = True
            else:
                conn.execute(
                    proposals.update().where(proposals.c.id == proposal_id).values(updated_at=now)
                )
            # The record as this vote left it (another vote may follow right after commit).
            result = self._view(
                conn, conn.execute(sa.select(proposals).where(proposals.c.id == proposal_id)).one()
            )
        if issued:
            self.on_change()
        return result

    def _issue(self, conn: Connection, proposal_id: str, now: int) -> None:
        """Sign the approval for a pending proposal whose quorum is met, in ``conn``."""
        row = conn.execute(sa.select(proposals).where(proposals.c.id == proposal_id)).one()
        if row.state != "pending":
            raise Refusal(ErrorCode.E_STATE, f"proposal is {row.state}", 409)
        voters = self._counted_votes(conn, proposal_id)
        approvers = [{"id": voter, "at": at} for voter, at in voters]
        if row.effect == "auto":
            # policy.py refused, at load, any auto rule name that is not a valid id here.
            approvers = [{"id": AUTO_APPROVER_PREFIX + row.rule, "at": now}]
        if len(approvers) < row.quorum:
            raise Refusal(ErrorCode.E_STATE, "quorum not met", 409)
        try:
            signer = self.keys.signer()
        except ConfigError as exc:
            raise no_signing_key(exc) from None
        approval_id = "apv_" + secrets.token_hex(16)
        statement = ApprovalStatement.model_validate(
            {
                "type": APPROVAL_TYPE,
                "approval_id": approval_id,
                "proposal_id": row.id,
                "action_hash": row.action_hash,
                "provider": row.provider,
                "account": row.account,
                "region": row.region,
                "resource": {"type": row.resource_type, "id": row.resource_id},
                "operation": row.operation,
                "audience": self.config.audience,
                "nonce": secrets.token_hex(16),
                "issued_at": now,
                "not_before": now,
                "expires_at": now + self.config.execution_window,
                "approvers": approvers,
                "quorum": row.quorum,
                "policy": {"rule": row.rule, "hash": row.policy_hash},
                "risk": row.risk,
            }
        )
        envelope = signer.sign_statement(statement)
        conn.execute(
            approvals.insert().values(
                approval_id=approval_id,
                proposal_id=row.id,
                nonce=statement.nonce,
                statement=envelope.payload,
                envelope=json.dumps(envelope.to_value(), sort_keys=True),
                keyid=signer.keyid,
                issued_at=now,
                expires_at=statement.expires_at,
            )
        )
        known = conn.execute(
            sa.select(signing_keys.c.kid).where(signing_keys.c.kid == signer.keyid)
        ).first()
        if known is None:
            conn.execute(
                signing_keys.insert().values(
                    kid=signer.keyid, public_key=b64encode(signer.public_raw), first_used_at=now
                )
            )
        conn.execute(
            proposals.update()
            .where(proposals.c.id == row.id, proposals.c.state == "pending")
            .values(state="approved", updated_at=now)
        )
        self._audit(
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
        self._feed(conn, "approval", approval_id, now)

    def _counted_votes(self, conn: Connection, proposal_id: str) -> list[tuple[str, int]]:
        """``(voter, at)`` of the votes that count toward quorum, oldest first: only those
        of people who are enabled *now* and whose role still allows approving. A vote of
        someone disabled (say, a compromised account) or demoted since stays on record but
        counts for nothing, and never appears among a statement's approvers."""
        rows = conn.execute(
            sa.select(votes.c.voter, votes.c.at)
            .select_from(votes.join(users, users.c.username == votes.c.voter))
            .where(
                votes.c.proposal_id == proposal_id,
                users.c.disabled.is_(False),
                users.c.role.in_(sorted(_APPROVER_ROLES)),
            )
            .order_by(votes.c.at, votes.c.id)
        ).all()
        return [(str(r.voter), int(r.at)) for r in rows]

    def reject(
        self, principal: Principal, proposal_id: str, reason_code: str, note: str
    ) -> ProposalOut:
        _require(principal, _APPROVER_ROLES, "reject")
        if reason_code == "other" and not note.strip():
            # "other" tells the agent and the record nothing by itself.
            raise Refusal(ErrorCode.E_NOTE_REQUIRED, "reason 'other' needs a note saying why", 422)
        now = self.now()
        with self.engine.begin() as conn:
            row = self._lock(conn, proposal_id)
            self._check_pending(row, now)
            conn.execute(
                rejections.insert().values(
                    proposal_id=proposal_id,
                    reason_code=reason_code,
                    note=note,
                    by=principal.name,
                    at=now,
                )
            )
            self._set_state(conn, proposal_id, "pending", "rejected", now)
            self._audit(
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
        _require(principal, _APPROVER_ROLES, "revoke approvals")
        now = self.now()
        with self.engine.begin() as conn:
            row = self._lock(conn, proposal_id)
            if row.state != "approved":
                raise Refusal(
                    ErrorCode.E_STATE,
                    f"only an approved proposal can be revoked (is {row.state})",
                    409,
                )
            self._revoke_approval(conn, proposal_id, principal.name, note, now)
            self._set_state(conn, proposal_id, "approved", "revoked", now)
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
        self._audit(
            conn,
            now,
            CheckpointEvent.APPROVAL_REVOKED,
            proposal_id=proposal_id,
            approval_id=approval.approval_id,
            by=by,
            note=note,
        )
        self._feed(conn, "revocation", approval.approval_id, now)

    def withdraw(self, principal: Principal, proposal_id: str, note: str) -> ProposalOut:
        """The agent takes back an open proposal; an issued approval is revoked with it."""
        _require(principal, {"agent"}, "withdraw proposals")
        now = self.now()
        revoked = False
        with self.engine.begin() as conn:
            row = self._lock(conn, proposal_id)
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
            self._set_state(conn, proposal_id, row.state, "withdrawn", now)
            self._audit(
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
        _require(principal, {"admin"}, "resolve in_doubt executions")
        now = self.now()
        with self.engine.begin() as conn:
            row = self._lock(conn, proposal_id)
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
            self._set_state(conn, proposal_id, row.state, target, now)
            self._audit(
                conn,
                now,
                CheckpointEvent.EXECUTION_RESOLVED,
                proposal_id=proposal_id,
                by=principal.name,
                decision=decision,
                note=note,
            )
        return self.get(principal, proposal_id)

    # -- the executor side -----------------------------------------------------------

    def feed(self, principal: Principal, after: int, limit: int = 100) -> FeedOut:
        """Issued, unrevoked, unexpired bundles and every revocation after ``after``, and
        the audit chain's head and the feed's last seq as of the same snapshot."""
        _require(principal, {"executor"}, "read the feed")
        now = self.now()
        # One snapshot for the items and the head: a feed row commits with its audit event
        # (issued, revoked) and appends commit in seq order (the chain lock), so the head
        # read here is at or after the event of every item in the page.
        with read_transaction(self.engine) as conn:
            rows = conn.execute(
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
                    feed_events.join(
                        approvals, approvals.c.approval_id == feed_events.c.approval_id
                    ).join(proposals, proposals.c.id == approvals.c.proposal_id)
                )
                .where(feed_events.c.seq > after)
                .order_by(feed_events.c.seq)
                .limit(limit)
            ).all()
            head = AuditLog.head(conn)
            last = int(conn.execute(sa.select(feed_head.c.seq)).scalar_one())
            executor = conn.execute(sa.select(executor_head)).first()
        items: list[FeedItem] = []
        cursor = after
        for row in rows:
            cursor = row.seq
            if row.kind == "revocation":
                # Sent however late: an executor whose clock runs behind ours may still
                # take the approval for unexpired, and a revocation costs nothing.
                items.append(
                    FeedItem(
                        seq=row.seq, kind="revocation", approval_id=row.approval_id, bundle=None
                    )
                )
            elif row.expires_at <= now:
                continue  # the executor refuses it anyway (E_EXPIRED); nothing to say
            elif row.revoked_at is None and row.state == "approved":
                envelope = Envelope.from_value(
                    json.loads(row.envelope), payload_type=APPROVAL_PAYLOAD_TYPE
                )
                bundle = json.loads(make_bundle(bytes(row.action), envelope))
                items.append(
                    FeedItem(
                        seq=row.seq, kind="approval", approval_id=row.approval_id, bundle=bundle
                    )
                )
        if last < after:
            self._follow_cursor(principal, last, after, now)
        return FeedOut(
            items=items,
            cursor=cursor,
            audit_head=AuditHeadOut(seq=head.seq, hash=head.row_hash),
            feed_head=last,
            executor_head=None
            if executor is None or executor.seq is None
            else ExecutorHeadOut(seq=executor.seq, hash=executor.hash, at=executor.at),
        )

    def _follow_cursor(self, principal: Principal, last: int, after: int, now: int) -> None:
        """An executor has read past the end of this feed: the database went back
        (restored from a backup, or reset). Raise the counter to its cursor, so the next
        seq comes after it even when this clock is behind the one that issued the seqs it
        read; the feed's clock floor alone covers only a clock that is not. Audited.
        Bounded by a day ahead of this clock (and JSON's 2**53), so an executor token
        cannot push the feed out of reach."""
        bound = min((now + _FEED_AHEAD_MAX_S) * FEED_SEQ_PER_SECOND, _FEED_SEQ_MAX)
        if after > bound:
            _log.warning(
                "the feed ends at %d and %s has read up to %d, more than a day past this "
                "clock: the counter is not raised to it",
                last,
                principal.name,
                after,
            )
            return
        with self.engine.begin() as conn:
            AuditLog.lock(conn)  # the chain lock before the counter's row, as issuing does
            raised = conn.execute(
                feed_head.update()
                .where(feed_head.c.id == 1, feed_head.c.seq < after)
                .values(seq=after)
            ).rowcount
            if raised:
                self._audit(
                    conn,
                    now,
                    CheckpointEvent.FEED_RAISED,
                    by=principal.name,
                    feed_head=last,
                    to=after,
                    reason="an executor has read past the end of the feed",
                )
        if raised:
            _log.warning(
                "the feed ended at %d but %s has read up to %d: this database went back "
                "(restored from a backup, or reset); the feed counter is raised to %d so "
                "that new approvals come after it",
                last,
                principal.name,
                after,
                after,
            )

    def feed_head(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(feed_head.c.seq)).scalar_one())

    def report_outcome(self, principal: Principal, receipt: Mapping[str, Any]) -> ProposalOut:
        """Record the executor's outcome from its signed receipt (the ledger is the truth)."""
        try:
            return self._report_outcome(principal, receipt)
        except _ResolvedHere:
            # Nothing was written: the transaction that found the person's resolution
            # rolled back. Kept apart (its own transaction) so that a conflict is
            # committed before it is answered 409.
            return self._executor_resolution_after_person(receipt)

    def _report_outcome(self, principal: Principal, receipt: Mapping[str, Any]) -> ProposalOut:
        _require(principal, {"executor"}, "report outcomes")
        now = self.now()
        payload, keyid, approval_id = self._check_receipt(receipt, now)
        outcome = payload.outcome
        with self.engine.begin() as conn:
            approval = conn.execute(
                sa.select(approvals).where(approvals.c.approval_id == approval_id)
            ).first()
            if approval is None:
                raise Refusal(ErrorCode.E_NOT_FOUND, "no such approval", 404)
            # The approval row is the proposal's only one (UNIQUE proposal_id), so these two
            # checks bind the receipt to the issued approval and the action it signed.
            row = self._lock(conn, approval.proposal_id)
            if payload.action_hash != row.action_hash:
                raise Refusal(ErrorCode.E_RECEIPT, "receipt names another action hash", 422)
            target = _OUTCOME_STATE.get(outcome)
            if outcome == "resolved":
                decision = payload.resolution.decision if payload.resolution else None
                target = "executed" if decision == "happened" else "failed"
            if target is None:
                raise Refusal(ErrorCode.E_RECEIPT, f"unknown outcome {outcome!r}", 422)
            receipt_text = json.dumps(dict(receipt), sort_keys=True)
            previous = conn.execute(
                sa.select(outcomes).where(outcomes.c.approval_id == approval_id)
            ).first()
            if previous is not None:
                if previous.receipt == receipt_text:
                    return self._view(conn, row)  # the executor retried: same answer
                if (
                    outcome == "resolved"
                    and previous.outcome == "in_doubt"
                    and previous.resolution is not None
                ):
                    raise _ResolvedHere  # a person resolved it here first: see report_outcome
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
            state, held_by = self._land_state(conn, row, target, approval_id, now)
            values = {
                "outcome": outcome,
                "refusal_code": payload.refusal_code,
                "receipt": receipt_text,
                "receipt_verified": True,  # _check_receipt refuses anything else
                "receipt_keyid": keyid,
                "reported_at": now,
                "target_held_by": held_by,
            }
            if previous is not None:
                # The executor resolved its own in_doubt row: the newer receipt replaces
                # the in_doubt one here; both stay in the audit chain and its ledger.
                conn.execute(
                    outcomes.update().where(outcomes.c.approval_id == approval_id).values(**values)
                )
            else:
                conn.execute(
                    outcomes.insert().values(
                        approval_id=approval_id, proposal_id=row.id, late=late, **values
                    )
                )
            executor = _receipt_head(payload)
            self._audit(
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
                # The executor's chain head the receipt names: kept in this chain so a
                # later `airlock audit reconcile` can hold the executor's chain to it.
                executor_head=executor,
            )
            if payload.at <= _FEED_SEQ_MAX:
                self._advance_executor_head(conn, executor, payload.at, now)
            return self._view(
                conn, conn.execute(sa.select(proposals).where(proposals.c.id == row.id)).one()
            )

    def _advance_executor_head(
        self, conn: Connection, head: Mapping[str, Any], at: int, now: int
    ) -> None:
        """Move the record of the executor's chain head to ``head`` if it is newer.

        After the audit append (the chain lock before this row, as everywhere). Receipts
        are accepted out of order (one backs off alone, a resend comes late), and a head
        that went back would hide a ledger restored to between the two; one that stays
        behind hides a ledger restored to after it. So never by the receipt's time first
        (an executor clock that jumped ahead once pinned the record there: no later
        receipt moved it, seen in review):

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
        newer = sa.or_(
            executor_head.c.seq.is_(None),
            executor_head.c.seq < head["seq"],
            sa.and_(executor_head.c.hash != head["hash"], executor_head.c.at < at),
        )
        conn.execute(
            executor_head.update()
            .where(executor_head.c.id == 1, newer)
            .values(**head, at=at, recorded_at=now)
        )

    def _executor_resolution_after_person(self, receipt: Mapping[str, Any]) -> ProposalOut:
        """The executor's resolution of an in_doubt that a person already resolved here.

        The in_doubt can be resolved in two places (``airlock approvals resolve`` here,
        ``airlock executor resolve`` in the ledger), and the second one to arrive cannot
        replace the first: the proposal has moved on. It used to be refused ``E_STATE``
        like any outcome over another, and the executor listed it as one to send again,
        for ever, while the two records disagreed and nothing said so. Now it is kept
        (``executor_resolutions``, audited ``checkpoint.executor_resolution`` with the
        receipt's digest and head, so ``airlock audit reconcile`` can anchor it) and shown
        on the proposal, and the proposal keeps the state the person here gave it:

        * the same decision: 200, the proposal as it is (the ledger now agrees);
        * the other decision: committed, then answered 409 ``E_RESOLUTION_CONFLICT``, a
          code of its own so that the executor records it for good and says what it means
          rather than "send it again" (a 200 would read as "landed" to every executor,
          older ones included, and the conflict would be silent on the side where the
          person who resolved it looks). The same receipt again: the same answer.

        The caller (``_report_outcome``) verified the receipt and found the person's
        resolution; this transaction locks the proposal and reads it all again.
        """
        now = self.now()
        payload, keyid, signed = self._verified_receipt(receipt, now)
        resolution = payload.resolution
        if resolution is None or payload.approval_id is None:
            raise Refusal(ErrorCode.E_RECEIPT, "a resolution receipt names no decision", 422)
        decision = resolution.decision
        digest = hashlib.sha256(signed).hexdigest()
        approval_id = payload.approval_id
        with self.engine.begin() as conn:
            approval = conn.execute(
                sa.select(approvals.c.proposal_id).where(approvals.c.approval_id == approval_id)
            ).one()  # found by the caller; approvals are never deleted
            row = self._lock(conn, approval.proposal_id)
            outcome = conn.execute(
                sa.select(outcomes).where(outcomes.c.approval_id == approval_id)
            ).one()  # resolved here: a resolution is never undone
            known = conn.execute(
                sa.select(executor_resolutions).where(
                    executor_resolutions.c.approval_id == approval_id
                )
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
                        note=inert(resolution.note)[:_DETAIL_MAX],
                        checkpoint_decision=outcome.resolution,
                        checkpoint_resolved_by=outcome.resolved_by,
                        agrees=agrees,
                        reported_at=now,
                        receipt=json.dumps(dict(receipt), sort_keys=True),
                        receipt_keyid=keyid,
                        receipt_sha256=digest,
                    )
                )
                self._audit(
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
                    executor_head=_receipt_head(payload),
                )
                if payload.at <= _FEED_SEQ_MAX:
                    # A verified receipt of the executor's chain, as an outcome's is.
                    self._advance_executor_head(conn, _receipt_head(payload), payload.at, now)
            elif known.receipt_sha256 != digest:
                # A ledger resolves a row once; another receipt is from another ledger.
                raise Refusal(
                    ErrorCode.E_STATE,
                    "an executor resolution of this approval is recorded already",
                    409,
                )
            else:
                agrees = bool(known.agrees)  # the executor retried: the same answer
            view = self._view(conn, row)
        if agrees:
            return view
        message = (
            f"recorded, in conflict: a person at the checkpoint ({outcome.resolved_by}) "
            f"resolved {row.id} as {outcome.resolution!r} and it is {row.state}; the "
            f"executor's ledger, the record of what the executor did, says {decision!r} "
            f"(resolved by {inert(resolution.by)[:128]}). The checkpoint "
            "keeps its state and shows the conflict on the proposal; sending this receipt "
            "again changes nothing. Check the resource in the cloud (its state, the "
            "provider's own record of the call) and this receipt, then tell whoever "
            "recorded the wrong one"
        )
        _log.warning("executor resolution of %s: %s", approval_id, message)
        raise Refusal(ErrorCode.E_RESOLUTION_CONFLICT, message, 409)

    def report_refusal(self, principal: Principal, receipt: Mapping[str, Any]) -> ProposalOut:
        """Record an executor's signed refusal of an approval it did not consume.

        A note on the proposal, never a state change: one executor refusing (another
        audience, a clock behind) does not mean another sharing the ledger will not run
        the approval, so the proposal still lapses or gets its outcome as ever. The same
        receipt posted again is the same note (the executor retries a lost answer).
        """
        _require(principal, {"executor"}, "report executor refusals")
        now = self.now()
        payload, keyid, signed = self._verified_receipt(receipt, now)
        note = _refusal_note(payload)
        digest = hashlib.sha256(signed).hexdigest()
        receipt_text = json.dumps(dict(receipt), sort_keys=True)
        try:
            with self.engine.begin() as conn:
                # The chain lock first: every note is written under it, so the count
                # below and the insert are one step. No proposal row is locked here (a
                # vote holds its row, then waits for this lock): no deadlock between them.
                AuditLog.lock(conn)
                row = self._approved_proposal(conn, note.approval_id)
                # Null for a refusal before the action was hashed (verify steps 1-8).
                if note.action_hash is not None and note.action_hash != row.action_hash:
                    raise Refusal(ErrorCode.E_RECEIPT, "receipt names another action hash", 422)
                known = conn.execute(
                    sa.select(refusal_notes.c.id).where(refusal_notes.c.receipt_sha256 == digest)
                ).first()
                if known is not None:
                    return self._view(conn, row)  # the executor retried: same answer
                count = conn.execute(
                    sa.select(sa.func.count())
                    .select_from(refusal_notes)
                    .where(refusal_notes.c.approval_id == note.approval_id)
                ).scalar_one()
                if count >= REFUSAL_NOTES_MAX:
                    raise Refusal(
                        ErrorCode.E_STATE,
                        f"{REFUSAL_NOTES_MAX} executor refusals are recorded for this "
                        "approval already; no more are kept",
                        409,
                    )
                conn.execute(
                    refusal_notes.insert().values(
                        approval_id=note.approval_id,
                        proposal_id=row.id,
                        refusal_code=note.refusal_code,
                        detail=note.detail,
                        executor=note.executor,
                        at=note.at,
                        reported_at=now,
                        receipt=receipt_text,
                        receipt_keyid=keyid,
                        receipt_sha256=digest,
                    )
                )
                self._audit(
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
                    executor_head=_receipt_head(payload),
                )
                return self._view(conn, row)
        except IntegrityError:
            # Not reachable under the chain lock; the UNIQUE digest is the judge if it is.
            with self.engine.connect() as conn:
                known = conn.execute(
                    sa.select(refusal_notes.c.id).where(refusal_notes.c.receipt_sha256 == digest)
                ).first()
                if known is None:
                    raise
                return self._view(conn, self._approved_proposal(conn, note.approval_id))

    def _approved_proposal(self, conn: Connection, approval_id: str) -> Row[Any]:
        """The proposal an issued approval is for (read, not locked), or 404."""
        approval = conn.execute(
            sa.select(approvals.c.proposal_id).where(approvals.c.approval_id == approval_id)
        ).first()
        if approval is None:
            raise Refusal(ErrorCode.E_NOT_FOUND, "no such approval", 404)
        return conn.execute(
            sa.select(proposals).where(proposals.c.id == approval.proposal_id)
        ).one()

    def _land_state(
        self, conn: Connection, row: Row[Any], target: str, approval_id: str, now: int
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
            self._move(conn, row.id, target, now)  # no slot changes hands
            return target, None
        holder = self._slot_holder(conn, row)
        if holder is not None and holder.state == "pending":
            self._set_state(conn, holder.id, "pending", "withdrawn", now)
            self._audit(
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
                    self._move(conn, row.id, target, now)
                return target, None
            except IntegrityError:
                # A proposal for the target was submitted concurrently (PostgreSQL; SQLite
                # writers are serialized): it holds the slot now, so rule (3) applies.
                holder = self._slot_holder(conn, row)
                if holder is None:  # fail closed: the index refused for another reason
                    raise
        self._move(conn, row.id, row.state, now)
        return row.state, str(holder.id)

    def _slot_holder(self, conn: Connection, row: Row[Any]) -> Row[Any] | None:
        return conn.execute(
            sa.select(proposals)
            .where(
                proposals.c.account == row.account,
                proposals.c.resource_type == row.resource_type,
                proposals.c.resource_id == row.resource_id,
                proposals.c.operation == row.operation,
                proposals.c.state.in_(OPEN_STATES),
                proposals.c.id != row.id,
            )
            .with_for_update()
        ).first()

    def _move(self, conn: Connection, proposal_id: str, state: str, now: int) -> None:
        conn.execute(
            proposals.update()
            .where(proposals.c.id == proposal_id)
            .values(state=state, updated_at=now)
        )

    def _verified_receipt(self, receipt: Mapping[str, Any], now: int) -> VerifiedReceipt:
        """A receipt signed by a trusted executor receipt key (the kernel's
        :func:`~airlock.protocol.verify_receipt`), or refuse it (E_RECEIPT)."""
        # Fail closed: without the executor's receipt key set nothing can be verified, and
        # an unverified receipt would let any executor-token holder close a proposal (and
        # block the revocation of its still-valid approval). build() refuses to start
        # without one; this guards every other way of constructing the service.
        if self.receipt_keys is None:
            raise Refusal(
                ErrorCode.E_RECEIPT,
                "no receipt key set is configured (AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH); "
                "receipts cannot be verified",
                422,
            )
        try:
            return verify_receipt(receipt, self.receipt_keys, now)
        except InvalidReceipt as exc:
            raise Refusal(ErrorCode.E_RECEIPT, str(exc), 422) from None

    def _check_receipt(self, receipt: Mapping[str, Any], now: int) -> tuple[Receipt, str, str]:
        """An outcome's verified receipt, the key id that signed it and the approval id
        it names, or refuse."""
        payload, keyid, _ = self._verified_receipt(receipt, now)
        if payload.approval_id is None or payload.action_hash is None:
            raise Refusal(
                ErrorCode.E_RECEIPT,
                "an outcome's receipt must name its approval and action hash",
                422,
            )
        # A receipt speaks for the executor that signed it: one bound to another audience
        # (another environment sharing a receipt key) says nothing about our approvals.
        if payload.executor != self.config.audience:
            raise Refusal(
                ErrorCode.E_RECEIPT,
                f"receipt is from executor {payload.executor[:128]!r}, "
                f"not this checkpoint's audience {self.config.audience!r}",
                422,
            )
        return payload, keyid, payload.approval_id

    # -- the sweeper -----------------------------------------------------------------

    def sweep(self) -> dict[str, int]:
        """Expire pending proposals past their approval window; lapse unused approvals."""
        now = self.now()
        counts = {"expired": 0, "lapsed": 0}
        with self.engine.begin() as conn:
            # Every row this pass changes is locked before its first audit append: votes,
            # revokes, withdrawals and outcomes lock their proposal, then the chain, and
            # a sweeper holding the chain while it waited for a row they hold deadlocked
            # with them on PostgreSQL (seen in review). In id order, so two sweepers
            # take the rows in one order too.
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
            for (pid,) in stale:
                self._set_state(conn, pid, "pending", "expired", now)
                self._audit(conn, now, CheckpointEvent.PROPOSAL_EXPIRED, proposal_id=pid)
                counts["expired"] += 1
            for pid, aid in lapsing:
                self._set_state(conn, pid, "approved", "lapsed", now)
                self._audit(
                    conn, now, CheckpointEvent.APPROVAL_LAPSED, proposal_id=pid, approval_id=aid
                )
                counts["lapsed"] += 1
        return counts

    # -- reading ---------------------------------------------------------------------

    def get(self, principal: Principal, proposal_id: str) -> ProposalOut:
        _require(principal, _READER_ROLES, "read proposals")
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(proposals).where(proposals.c.id == proposal_id)).first()
            if row is None:
                raise _not_found(proposal_id)
            return self._view(conn, row)

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
        """Newest first; pending proposals sort like any other (filter by state for a queue).
        ``state``: one, or several (a proposal in any of them)."""
        _require(principal, _READER_ROLES, "read proposals")
        limit = max(1, min(limit, _MAX_PAGE))
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
        with self.engine.connect() as conn:
            if before is not None:
                anchor = conn.execute(
                    sa.select(proposals.c.created_at).where(proposals.c.id == before)
                ).first()
                if anchor is None:
                    raise _not_found(before)
                query = query.where(
                    sa.or_(
                        proposals.c.created_at < anchor.created_at,
                        sa.and_(
                            proposals.c.created_at == anchor.created_at, proposals.c.id < before
                        ),
                    )
                )
            rows = conn.execute(
                query.order_by(proposals.c.created_at.desc(), proposals.c.id.desc()).limit(
                    limit + 1
                )
            ).all()
            items = [self._view(conn, row) for row in rows[:limit]]
        return ProposalList(
            items=items,
            next_before=items[-1].id if len(rows) > limit and items else None,
            states=applied,
        )

    def audit_refusals(self, events: Sequence[Mapping[str, object]]) -> None:
        """Append ``checkpoint.refused`` events (built by ``refusals.RefusalRecorder``) in
        one transaction of their own, which writes nothing else."""
        now = self.now()
        with self.engine.begin() as conn:
            for event in events:
                self._audit(conn, now, CheckpointEvent.REFUSED, **event)

    def audit_status(self, principal: Principal) -> AuditOut:
        _require(principal, {"viewer", "approver", "admin"}, "read the audit status")
        report = verify_chain(self.engine)
        return AuditOut(
            ok=report.ok,
            rows=report.rows,
            head_seq=report.head_seq,
            head_hash=report.head_hash,
            fault=str(report.fault) if report.fault is not None else None,
        )

    def _view(self, conn: Connection, row: Row[Any]) -> ProposalOut:
        vote_rows = conn.execute(
            sa.select(votes.c.voter, votes.c.at, votes.c.note)
            .where(votes.c.proposal_id == row.id)
            .order_by(votes.c.at, votes.c.id)
        ).all()
        counted = {voter for voter, _ in self._counted_votes(conn, row.id)}
        approval = conn.execute(
            sa.select(approvals).where(approvals.c.proposal_id == row.id)
        ).first()
        rejection = conn.execute(
            sa.select(rejections).where(rejections.c.proposal_id == row.id)
        ).first()
        outcome = conn.execute(sa.select(outcomes).where(outcomes.c.proposal_id == row.id)).first()
        notes = conn.execute(
            sa.select(  # what is shown; not the receipts, read on every list page
                refusal_notes.c.approval_id,
                refusal_notes.c.refusal_code,
                refusal_notes.c.detail,
                refusal_notes.c.executor,
                refusal_notes.c.at,
                refusal_notes.c.reported_at,
            )
            .where(refusal_notes.c.proposal_id == row.id)
            .order_by(refusal_notes.c.id)
        ).all()
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
            outcome=None
            if outcome is None
            else OutcomeOut(
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
                executor_resolution=self._executor_resolution_out(conn, outcome.approval_id),
            ),
            executor_refusals=[
                ExecutorRefusalOut(
                    approval_id=n.approval_id,
                    refusal_code=n.refusal_code,
                    detail=n.detail,
                    executor=n.executor,
                    at=n.at,
                    reported_at=n.reported_at,
                )
                for n in notes
            ],
        )

    # -- helpers ---------------------------------------------------------------------

    def _executor_resolution_out(
        self, conn: Connection, approval_id: str
    ) -> ExecutorResolutionOut | None:
        known = conn.execute(
            sa.select(executor_resolutions).where(executor_resolutions.c.approval_id == approval_id)
        ).first()
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

    def _lock(self, conn: Connection, proposal_id: str) -> Row[Any]:
        row = conn.execute(
            sa.select(proposals).where(proposals.c.id == proposal_id).with_for_update()
        ).first()
        if row is None:
            raise _not_found(proposal_id)
        return row

    def _check_pending(self, row: Row[Any], now: int) -> None:
        if row.state != "pending":
            raise Refusal(ErrorCode.E_STATE, f"the proposal is {row.state}, not pending", 409)
        if now >= row.approval_deadline:
            raise Refusal(ErrorCode.E_EXPIRED, "the approval window has passed", 409)

    def _set_state(
        self, conn: Connection, proposal_id: str, expected: str, state: str, now: int
    ) -> None:
        done = conn.execute(
            proposals.update()
            .where(proposals.c.id == proposal_id, proposals.c.state == expected)
            .values(state=state, updated_at=now)
        ).rowcount
        if done != 1:  # the row lock makes this unreachable; fail closed if it is not
            raise Refusal(ErrorCode.E_STATE, "the proposal changed concurrently", 409)

    def _feed(self, conn: Connection, kind: str, approval_id: str, now: int) -> None:
        # The UPDATE locks the single counter row until commit: sequence numbers become
        # visible in the order they were taken, so a reader's cursor never skips one.
        # A seq is also at least the time in microseconds (FEED_SEQ_PER_SECOND): after
        # the database is restored from a backup, or reset, the counter restarts below
        # the seqs executors have already read past, and numbers taken from it alone
        # would be skipped by every executor's cursor without a word. Taken from the
        # clock they come after anything issued before the restore.
        after_last = feed_head.c.seq + 1
        floor = now * FEED_SEQ_PER_SECOND
        conn.execute(
            feed_head.update()
            .where(feed_head.c.id == 1)
            .values(seq=sa.case((after_last > floor, after_last), else_=floor))
        )
        seq = conn.execute(sa.select(feed_head.c.seq).where(feed_head.c.id == 1)).scalar_one()
        if seq > _FEED_SEQ_MAX:  # past JSON's exact integers: no executor could ask after it
            raise RuntimeError(f"feed seq {seq} is past 2**53 - 1; nothing is issued")
        conn.execute(
            feed_events.insert().values(seq=seq, kind=kind, approval_id=approval_id, at=now)
        )

    def _audit(self, conn: Connection, now: int, kind: str, **fields: Any) -> None:
        AuditLog.append(conn, {"type": kind, **fields}, at=datetime.fromtimestamp(now, UTC))


class _ResolvedHere(Exception):
    """An executor resolution receipt for an in_doubt a person already resolved here
    (``_report_outcome`` raises it before writing; ``report_outcome`` handles it)."""


def _int_or_zero(value: int) -> int:
    return value if 0 <= value <= _AT_MAX else 0


def _receipt_head(payload: Receipt) -> dict[str, int | str]:
    """The ``audit_head`` a verified receipt names, as the audit event and the
    ``executor_head`` row keep it."""
    head: AuditHead = payload.audit_head
    return {"seq": head.seq, "hash": head.hash}


@dataclass(frozen=True, slots=True)
class _RefusalNote:
    """What a refusal receipt says, checked: exists only for a receipt fit to be a note."""

    approval_id: str
    action_hash: str | None
    refusal_code: str
    detail: str
    executor: str
    at: int


def _refusal_note(payload: Receipt) -> _RefusalNote:
    """The note a verified receipt makes, or refuse it (E_RECEIPT): what a note may say,
    beyond what a valid receipt says."""

    def refuse(why: str) -> Refusal:
        return Refusal(ErrorCode.E_RECEIPT, f"not a refusal receipt: {why}", 422)

    if payload.outcome != "refused":
        raise refuse("its outcome must be 'refused' (other outcomes go to /v1/outcomes)")
    code = payload.refusal_code
    if code is None or code not in _NOTE_CODES:
        raise refuse(
            "refusal_code must be one an executor reports before the consume: "
            + ", ".join(sorted(_NOTE_CODES))
        )
    if payload.approval_id is None:
        raise refuse("approval_id must name the approval (its signature verified)")
    executor = payload.executor
    # Not held to this checkpoint's audience, unlike an outcome: an executor configured
    # for another audience is what E_AUDIENCE reports, and the note changes nothing.
    if not 1 <= len(executor) <= _EXECUTOR_MAX:
        raise refuse(f"executor must name the executor (1 to {_EXECUTOR_MAX} characters)")
    if not executor.isprintable():
        raise refuse("executor must be printable text")
    if payload.at > _AT_MAX:
        raise refuse("at must be the time of the refusal (Unix seconds, before the year 10000)")
    return _RefusalNote(
        payload.approval_id, payload.action_hash, code, _shown(payload.detail), executor, payload.at
    )


def _shown(text: str) -> str:
    """Executor text as stored and shown: every character that is not printable (NUL,
    an escape sequence, a bidi override) escaped as everything shown to a person is
    (airlock.text), clipped to ``_DETAIL_MAX`` between escapes. Only a copy for showing:
    the receipt it came from is stored as received, so rows stored in the older
    ``\\x1b`` style lose nothing and are left as they are."""
    return inert(text, limit=_DETAIL_MAX)


def _deny_message(decision: Decision) -> str:
    return f"denied by policy rule {decision.rule}" + (
        f": {decision.reason}" if decision.reason else ""
    )
