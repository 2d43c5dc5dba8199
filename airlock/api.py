"""The checkpoint's answers as its clients read them (the CLI, the web app): a login, and
the proposal records.

One set of shapes for every client, so that a field the checkpoint adds is added here once.
An answer only one client reads (``/v1/me``, ``/v1/audit``, ``/v1/keys`` for the web app)
stays with that client until a second one needs it.
The checkpoint's own models (``services/checkpoint/schemas.py``) stay the strict ones
(``extra="forbid"``): they say what it sends. These say what a client needs, and are
lenient on purpose: an unknown field is ignored, so a newer checkpoint does not break an
older client; a missing field is an error, except the few given a default below, each of
which names the older checkpoint that does not send it. Every model is frozen.

Parsing only: this module must never do I/O, import a client (``airlock.cli``,
``webapp``) or a service, or decide what an answer is worth — a client turns a
:class:`pydantic.ValidationError` into its own "the checkpoint is not speaking its API"
error, and checks the signed action itself. It imports pydantic, so the CLI imports it
only inside the commands that run (``airlock --help`` must not pay for it).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = [
    "Approval",
    "ExecutorRefusal",
    "ExecutorResolution",
    "LoginAnswer",
    "Outcome",
    "Policy",
    "Proposal",
    "ProposalPage",
    "Rejection",
    "Vote",
]


class _Answer(BaseModel):
    # Unknown fields are ignored so a newer checkpoint does not break a client; missing
    # ones are an error.
    model_config = ConfigDict(frozen=True, extra="ignore")


class LoginAnswer(_Answer):
    """``POST /v1/sessions``: a person's session token. The CLI keeps it in its session
    file; the web app in the person's cookie."""

    token: str
    expires_at: int
    username: str
    role: str


class Policy(_Answer):
    rule: str
    effect: str
    quorum: int
    confirm: bool
    hash: str


class Vote(_Answer):
    voter: str
    at: int
    note: str
    #: False once the voter was disabled or lost the approver role: kept on record,
    #: no longer part of the quorum.
    counts: bool = True


class Approval(_Answer):
    approval_id: str
    keyid: str
    issued_at: int
    expires_at: int
    revoked_at: int | None
    revoked_by: str | None
    envelope: dict[str, Any]


class Rejection(_Answer):
    reason_code: str
    note: str
    by: str
    at: int


class ExecutorResolution(_Answer):
    """The executor's signed resolution of an in_doubt that arrived after a person had
    resolved it at the checkpoint. The proposal keeps the state the checkpoint gave it; the
    executor's ledger is the record of what the executor did. ``conflict``: the two
    decisions differ."""

    decision: str  # as the executor's ledger records it
    by: str  # who decided at the executor: outside text, shown escaped
    at: int  # by the executor's clock
    note: str
    checkpoint_decision: str
    checkpoint_resolved_by: str | None
    conflict: bool
    reported_at: int
    receipt: dict[str, Any]


class Outcome(_Answer):
    approval_id: str
    outcome: str
    refusal_code: str | None
    receipt_verified: bool
    receipt_keyid: str | None
    receipt: dict[str, Any]
    late: bool
    #: A newer open proposal for the same target, when a late in_doubt outcome could not
    #: reopen this one (the target was taken again). Absent from an older checkpoint.
    target_held_by: str | None = None
    reported_at: int
    resolution: str | None
    resolved_by: str | None
    resolved_at: int | None
    resolution_note: str | None
    #: Absent from a checkpoint before migration 0006 (``executor_resolutions``).
    executor_resolution: ExecutorResolution | None = None


class ExecutorRefusal(_Answer):
    """An executor refused the approval before using it (its signed receipt says so).
    A note: the proposal's state is the checkpoint's, unchanged by it."""

    approval_id: str
    refusal_code: str
    detail: str  # the executor's text: shown escaped like every other value
    executor: str
    at: int
    reported_at: int


class Proposal(_Answer):
    """One proposal record. ``action_jcs`` is the exact text that was hashed; the
    convenience fields (``action``, ``provider``, ``account``, …) are the checkpoint's word
    only, which a client checks against that text before showing them as what will
    happen."""

    id: str
    state: str
    action_hash: str
    action_jcs: str
    action: dict[str, Any]
    provider: str
    account: str
    region: str
    resource_type: str
    resource_id: str
    operation: str
    risk: str
    proposed_by: str
    submitted_by: str
    policy: Policy
    deny_reason: str | None
    votes: list[Vote]
    votes_needed: int
    approval_deadline: int
    created_at: int
    updated_at: int
    approval: Approval | None
    rejection: Rejection | None
    outcome: Outcome | None
    #: Oldest first. Absent from a checkpoint older than ``POST /v1/refusals``.
    executor_refusals: list[ExecutorRefusal] = []


class ProposalPage(_Answer):
    """``GET /v1/proposals``: one page, newest first."""

    items: list[Proposal]
    next_before: str | None
    #: The state filter the checkpoint applied, sorted (null: none). Absent from a
    #: checkpoint older than the repeatable ``state``, which keeps only the last one.
    states: list[str] | None = None
