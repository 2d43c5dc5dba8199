"""The audit event vocabulary: every event type a service appends to its audit chain,
and the fields each one carries (docs/protocol.md#audit-chain).

The services write these names and :mod:`airlock.reconcile` and :mod:`airlock.trace`
read them, from this one module, so that an event renamed in one place is renamed in
every place. An event is a JSON object: ``type`` (one of the names below) and the fields
:data:`FIELDS` lists for it, no others; ``tests/test_events.py`` holds every event the
services build to this table.

The events a service assembles from counts kept in memory, rather than write in one
call, are typed here as well (:class:`SignInRefused`, :class:`RefusedOnce`,
:class:`RefusedCounted`), so that the one who builds them and the one who reads them
back (``airlock users sign-ins``) agree on the values too; their keys are the
:data:`FIELDS` of their type.

Names and types only: this module must never import a service, storage or anything outside the
standard library, so that a verifier reading an exported chain needs nothing else.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final, NotRequired, TypedDict

__all__ = [
    "FIELDS",
    "AddressCount",
    "CheckpointEvent",
    "ExecutorEvent",
    "NameCount",
    "RefusedCounted",
    "RefusedOnce",
    "SignInRefused",
]


class CheckpointEvent(enum.StrEnum):
    """The checkpoint chain's event types."""

    PROPOSAL_SUBMITTED = "checkpoint.proposal.submitted"
    PROPOSAL_REJECTED = "checkpoint.proposal.rejected"
    PROPOSAL_WITHDRAWN = "checkpoint.proposal.withdrawn"
    PROPOSAL_EXPIRED = "checkpoint.proposal.expired"
    #: A person edited a pending tool call: the old proposal is withdrawn, superseded by
    #: the new one (``new_proposal_id``), whose own vote and approval events follow.
    PROPOSAL_EDITED = "checkpoint.proposal.edited"
    #: A routed proposal's SLA passed unanswered: the next group in its route was asked.
    PROPOSAL_ESCALATED = "checkpoint.proposal.escalated"
    VOTE_APPROVE = "checkpoint.vote.approve"
    APPROVAL_ISSUED = "checkpoint.approval.issued"
    APPROVAL_REVOKED = "checkpoint.approval.revoked"
    APPROVAL_LAPSED = "checkpoint.approval.lapsed"
    #: A person resolved an in_doubt at the checkpoint (names the proposal only).
    EXECUTION_RESOLVED = "checkpoint.execution.resolved"
    OUTCOME_REPORTED = "checkpoint.outcome.reported"
    EXECUTOR_REFUSAL = "checkpoint.executor_refusal"
    #: The executor's resolution receipt of an in_doubt a person resolved here first.
    EXECUTOR_RESOLUTION = "checkpoint.executor_resolution"
    FEED_RAISED = "checkpoint.feed.raised"
    REFUSED = "checkpoint.refused"
    #: Sign-ins refused before any account was involved (unknown names, throttled),
    #: tallied per interval.
    SIGN_IN_REFUSED = "checkpoint.sign_in.refused"
    KEY_STAGED = "checkpoint.key.staged"
    KEY_ROTATED = "checkpoint.key.rotated"
    KEY_REVOKED = "checkpoint.key.revoked"
    USER_ADDED = "checkpoint.user.added"
    USER_DISABLED = "checkpoint.user.disabled"
    USER_UNLOCKED = "checkpoint.user.unlocked"
    USER_LOCKED = "checkpoint.user.locked"
    USER_PASSWORD_SET = "checkpoint.user.password_set"  # noqa: S105 - a name, no secret
    TOKEN_CREATED = "checkpoint.token.created"  # noqa: S105 - a name, no secret
    TOKEN_REVOKED = "checkpoint.token.revoked"  # noqa: S105 - a name, no secret
    LOGIN_FAILED = "checkpoint.login.failed"
    SESSION_CREATED = "checkpoint.session.created"
    SESSION_REVOKED = "checkpoint.session.revoked"


class ExecutorEvent(enum.StrEnum):
    """The executor chain's event types."""

    TRUSTED_KEYS = "executor.trusted_keys"
    CONSUMED = "executor.consumed"
    EXECUTING = "executor.executing"
    OUTCOME = "executor.outcome"
    REFUSED = "executor.refused"
    RESOLVED = "executor.resolved"
    RESOLUTION_REFUSED = "executor.resolution_refused"
    LEASE_RELEASED = "executor.lease_released"
    LEASE_TAKEN_OVER = "executor.lease_taken_over"
    CHECKPOINT_HEAD = "executor.checkpoint_head"
    REVOCATION_RECEIVED = "executor.revocation_received"
    LEDGER_BEHIND = "executor.ledger_behind"
    RECEIPT_RESEND_REQUESTED = "executor.receipt_resend_requested"
    RECEIPT_RESEND_REFUSED = "executor.receipt_resend_refused"
    RECEIPT_REDELIVERY_REQUESTED = "executor.receipt_redelivery_requested"
    RECEIPT_REDELIVERY_REFUSED = "executor.receipt_redelivery_refused"


_C, _E = CheckpointEvent, ExecutorEvent

#: Each event type's fields besides ``type``: what an event of it may hold.
FIELDS: Final[Mapping[str, frozenset[str]]] = {
    name: frozenset(fields.split())
    for name, fields in {
        _C.PROPOSAL_SUBMITTED: "proposal_id action_hash by effect rule policy_hash state",
        _C.PROPOSAL_REJECTED: "proposal_id by reason_code note",
        _C.PROPOSAL_WITHDRAWN: "proposal_id by reason note",
        _C.PROPOSAL_EXPIRED: "proposal_id",
        _C.PROPOSAL_EDITED: "proposal_id new_proposal_id by note old_action_hash "
        "new_action_hash changes rule effect quorum policy_hash",
        _C.PROPOSAL_ESCALATED: "proposal_id rule from_group to_group level sla",
        _C.VOTE_APPROVE: "proposal_id action_hash by note",
        _C.APPROVAL_ISSUED: "proposal_id approval_id action_hash nonce keyid approvers "
        "quorum rule policy_hash expires_at",
        _C.APPROVAL_REVOKED: "proposal_id approval_id by note",
        _C.APPROVAL_LAPSED: "proposal_id approval_id",
        _C.EXECUTION_RESOLVED: "proposal_id decision by note",
        _C.OUTCOME_REPORTED: "proposal_id approval_id outcome refusal_code receipt_verified "
        "late from_state state target_held_by executor_head gate gate_head",
        _C.EXECUTOR_REFUSAL: "proposal_id approval_id refusal_code executor refused_at "
        "receipt_sha256 executor_head gate gate_head",
        _C.EXECUTOR_RESOLUTION: "proposal_id approval_id decision by checkpoint_decision "
        "checkpoint_resolved_by agrees state receipt_verified receipt_sha256 executor_head "
        "gate gate_head",
        _C.FEED_RAISED: "by feed_head to reason",
        _C.REFUSED: "by role code request proposal_id count first_at last_at interval requests",
        _C.SIGN_IN_REFUSED: "from to unknown_name throttled clients other_clients names "
        "other_names",
        _C.KEY_STAGED: "next keyset_before keyset_after",
        _C.KEY_ROTATED: "active retired staged not_after keyset_before keyset_after",
        _C.KEY_REVOKED: "kid was keyset_before keyset_after",
        _C.USER_ADDED: "user role",
        _C.USER_DISABLED: "user",
        _C.USER_UNLOCKED: "user",
        _C.USER_LOCKED: "user",
        _C.USER_PASSWORD_SET: "user",
        _C.TOKEN_CREATED: "name role",
        _C.TOKEN_REVOKED: "name",
        _C.LOGIN_FAILED: "user client",
        _C.SESSION_CREATED: "user client",
        _C.SESSION_REVOKED: "user",
        _E.TRUSTED_KEYS: "worker path sha256 keys",
        _E.CONSUMED: "approval_id proposal_id action_hash nonce keyid approvers resource "
        "operation region owner epoch state call checkpoint_head",
        _E.EXECUTING: "approval_id owner epoch call",
        _E.OUTCOME: "approval_id action_hash state verified refusal_code cloud_request_id "
        "detail owner epoch",
        _E.REFUSED: "approval_id action_hash code detail bundle_sha256 not_reported "
        "checkpoint_head",
        _E.RESOLVED: "approval_id action_hash decision by note",
        _E.RESOLUTION_REFUSED: "approval_id decision by code detail",
        _E.LEASE_RELEASED: "approval_id owner epoch detail",
        _E.LEASE_TAKEN_OVER: "approval_id state owner epoch from_owner from_epoch",
        _E.CHECKPOINT_HEAD: "feed seq hash",
        _E.REVOCATION_RECEIVED: "approval_id feed_seq",
        _E.LEDGER_BEHIND: "feed checkpoint_records own_head hold_until",
        _E.RECEIPT_RESEND_REQUESTED: "kind approval_id attempt by note rejected",
        _E.RECEIPT_RESEND_REFUSED: "code approval_ids by problems",
        _E.RECEIPT_REDELIVERY_REQUESTED: "kind approval_id attempt by note delivered_since "
        "delivered",
        _E.RECEIPT_REDELIVERY_REFUSED: "code approval_ids delivered_since by problems",
    }.items()
}


# -- typed fields (besides ``type``) of the events assembled from counts ---------------


class AddressCount(TypedDict):
    """A client address and how many refused sign-ins came from it."""

    address: str
    count: int


class NameCount(TypedDict):
    """A user name as its keyed hash (``hmac:`` and 32 hex digits), and how many refused
    sign-ins gave it: the name as typed is never recorded."""

    name_hmac: str
    count: int


#: ``checkpoint.sign_in.refused``: the sign-ins refused in one interval before any
#: account was involved. ``from`` and ``to`` (Unix seconds) bound the interval; ``clients``
#: and ``names`` are the most frequent, most first, and ``other_clients`` and
#: ``other_names`` count the distinct others. (Functional form: ``from`` is a keyword.)
SignInRefused = TypedDict(
    "SignInRefused",
    {
        "from": int,
        "to": int,
        "unknown_name": int,
        "throttled": int,
        "clients": list[AddressCount],
        "other_clients": int,
        "names": list[NameCount],
        "other_names": int,
    },
)


class RefusedOnce(TypedDict):
    """``checkpoint.refused``: one refused request of an authenticated caller, the first
    of its window (it counts one)."""

    by: str
    role: str
    code: str
    #: The route template refused (``POST /v1/proposals/{proposal_id}/approve``).
    request: str
    proposal_id: NotRequired[str]


class RefusedCounted(TypedDict):
    """``checkpoint.refused``: the refusals of one caller with one code counted in one
    window after its first, with the route templates they were for (sorted)."""

    by: str
    role: str
    code: str
    count: int
    #: Unix seconds of the first and the last refusal counted.
    first_at: int
    last_at: int
    #: Seconds between the checkpoint's flushes of counted refusals.
    interval: int
    requests: list[str]
