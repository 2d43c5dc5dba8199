"""The ledger's tables: one schema for every process that consumes approvals.

The executor's ledger database, and a gate's, hold these tables (docs/protocol.md#ledger;
the table names keep their ``executor_`` prefix, which every existing database has).
The ledger is the only judge of whether an approval was used:

``executor_ledger``
    one row per consumed approval. ``approval_id``, ``nonce``, ``action_hash`` and a
    tool call's ``effect_key`` (migration 0011) are each UNIQUE, so consuming is one
    INSERT and a second consume of the same approval (or effect) conflicts
    (docs/protocol.md#executor-checks step 13). States (docs/protocol.md#ledger)::

        claimed ──> executing ──> succeeded | failed | in_doubt
           └──────> refused

    Terminal rows never change, rows are never deleted, and only those transitions
    are possible: triggers on SQLite and PostgreSQL refuse anything else (see the
    migrations). Each row carries a lease (owner, epoch, expiry); every transition is
    an UPDATE conditional on (approval_id, state, owner, epoch).
``executor_refusals``
    one row per refused bundle that never became a ledger row (steps 1–12) or that was
    a replay (13). Insert-only.
``executor_resolutions``
    a human's decision on an ``in_doubt`` row. Insert-only, at most one per row.

and the feed side's (migration 0002): ``executor_feed_cursor`` (how far the checkpoint
feed has been recorded; never moves backwards), ``executor_revocations`` (insert-only;
read by step 12) and ``executor_deliveries`` (insert-only; which receipts the checkpoint
accepted or refused for good — the outcome outbox's memory), and from migration 0003
``executor_outbox``: the receipts still to deliver, a work queue; and from migration
0004 ``executor_checkpoint_head``: per feed, the checkpoint audit head last recorded in
the chain (``executor.checkpoint_head``), so an unchanged head is not recorded again.
Migration 0005 numbers delivery attempts: ``executor_deliveries`` keeps one row per
attempt (a rejected one and a later accepted one both stay), the outbox says which
attempt a queued receipt is, and ``executor_resends`` (insert-only) records each
operator request to send a rejected receipt again. Migration 0006 adds
``executor_ledger_holds`` (insert-only): the feed held while this ledger lacks the audit
head the checkpoint's last receipt named.

Nothing in this module reads a clock or talks to the cloud.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

import sqlalchemy as sa

from airlock.protocol import VerifiedApproval, VerifiedToolCall

__all__ = [
    "ACTIVE_STATES",
    "TERMINAL_STATES",
    "TOOL_CALL_RESOURCE_TYPE",
    "LedgerRow",
    "State",
    "checkpoint_head",
    "deliveries",
    "feed_cursor",
    "ledger",
    "ledger_holds",
    "metadata",
    "outbox",
    "refusals",
    "resends",
    "resolutions",
    "revocations",
    "target_columns",
]


class State(enum.StrEnum):
    CLAIMED = "claimed"  # consumed; no write attempted yet
    EXECUTING = "executing"  # committed before the cloud call: a write may have happened
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # the provider definitely refused; nothing happened
    IN_DOUBT = "in_doubt"  # a write may have happened and the probe could not tell
    REFUSED = "refused"  # consumed, then refused before any write (expired, precondition)


TERMINAL_STATES: Final = frozenset({State.SUCCEEDED, State.FAILED, State.IN_DOUBT, State.REFUSED})
ACTIVE_STATES: Final = frozenset({State.CLAIMED, State.EXECUTING})

metadata = sa.MetaData()

ledger = sa.Table(
    "executor_ledger",
    metadata,
    sa.Column("approval_id", sa.String(100), primary_key=True),
    sa.Column("nonce", sa.String(64), nullable=False, unique=True),
    sa.Column("action_hash", sa.String(80), nullable=False, unique=True),
    sa.Column("proposal_id", sa.String(100), nullable=False),
    sa.Column("resource_type", sa.String(32), nullable=False),
    sa.Column("resource_id", sa.String(100), nullable=False),
    sa.Column("region", sa.String(48), nullable=False),
    # A cloud operation, or a tool call's tool (up to 64: migration 0010).
    sa.Column("operation", sa.String(64), nullable=False),
    # The authenticated action bytes (JCS) and the whole bundle, exactly as received.
    sa.Column("action", sa.LargeBinary, nullable=False),
    sa.Column("bundle", sa.LargeBinary, nullable=False),
    sa.Column("keyid", sa.String(80), nullable=False),
    sa.Column("expires_at", sa.BigInteger, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("lease_owner", sa.String(128), nullable=False),
    sa.Column("lease_epoch", sa.Integer, nullable=False),
    sa.Column("lease_expires", sa.BigInteger, nullable=False),
    sa.Column("claimed_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.Column("refusal_code", sa.String(32), nullable=True),
    sa.Column("cloud_request_id", sa.String(128), nullable=True),
    sa.Column("verified", sa.Boolean, nullable=False),
    sa.Column("detail", sa.Text, nullable=False),
    sa.Column("receipt", sa.Text, nullable=True),
    # A tool call's effect key (migration 0011): UNIQUE, so one effect runs once per
    # ledger whichever approval carries it; NULL for a cloud action.
    sa.Column("effect_key", sa.String(200), nullable=True),
    sa.CheckConstraint(
        "state IN ('claimed','executing','succeeded','failed','in_doubt','refused')",
        name="ck_executor_ledger_state",
    ),
    sa.Index("ix_executor_ledger_active", "state", "lease_expires"),
    sa.Index("ux_executor_ledger_effect_key", "effect_key", unique=True),
)

refusals = sa.Table(
    "executor_refusals",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("at", sa.BigInteger, nullable=False),
    sa.Column("code", sa.String(32), nullable=False),
    sa.Column("detail", sa.Text, nullable=False),
    # Known only when the statement authenticated and the refusal is about the approval
    # itself (replay, expired, revoked, another audience); never from unauthenticated bytes.
    sa.Column("approval_id", sa.String(100), nullable=True),
    sa.Column("action_hash", sa.String(80), nullable=True),
    sa.Column("bundle_sha256", sa.String(80), nullable=False),
    sa.Column("receipt", sa.Text, nullable=False),
    sa.Index("ix_executor_refusals_approval", "approval_id"),
)

resolutions = sa.Table(
    "executor_resolutions",
    metadata,
    sa.Column(
        "approval_id",
        sa.String(100),
        sa.ForeignKey("executor_ledger.approval_id"),
        primary_key=True,
    ),
    sa.Column("decision", sa.String(16), nullable=False),
    sa.Column("decided_by", sa.String(128), nullable=False),
    sa.Column("decided_at", sa.BigInteger, nullable=False),
    sa.Column("note", sa.Text, nullable=False),
    sa.Column("receipt", sa.Text, nullable=False),
    sa.CheckConstraint(
        "decision IN ('happened','did_not_happen')", name="ck_executor_resolutions_decision"
    ),
)

feed_cursor = sa.Table(
    "executor_feed_cursor",
    metadata,
    sa.Column("feed", sa.String(300), primary_key=True),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
)

#: Holds of the feed (migration 0006): per executor audit head that the checkpoint's
#: last receipt named and this chain lacks, nothing is taken from the feed from
#: ``since`` until ``until``. UNIQUE per (feed, head); insert-only; ends by time only.
ledger_holds = sa.Table(
    "executor_ledger_holds",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("feed", sa.String(300), nullable=False),
    sa.Column("head_seq", sa.BigInteger, nullable=False),
    sa.Column("head_hash", sa.String(64), nullable=False),
    sa.Column("since", sa.BigInteger, nullable=False),
    sa.Column("until", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("feed", "head_seq", "head_hash", name="uq_executor_ledger_holds_head"),
)

#: Per feed, the checkpoint chain head the last ``executor.checkpoint_head`` event
#: recorded. Not the record (the audit chain is): it keeps an unchanged head from being
#: appended again by a redelivered page, a restart or another executor on this ledger.
checkpoint_head = sa.Table(
    "executor_checkpoint_head",
    metadata,
    sa.Column("feed", sa.String(300), primary_key=True),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("hash", sa.String(64), nullable=False),
    sa.Column("recorded_at", sa.BigInteger, nullable=False),
)

revocations = sa.Table(
    "executor_revocations",
    metadata,
    sa.Column("approval_id", sa.String(100), primary_key=True),
    sa.Column("feed", sa.String(300), nullable=False),
    sa.Column("feed_seq", sa.BigInteger, nullable=False),
    sa.Column("received_at", sa.BigInteger, nullable=False),
)

#: One row per delivery attempt of a receipt that the checkpoint accepted (``delivered``)
#: or refused for good (``rejected``). Attempt 1 is the receipt's own; a later one
#: exists only after an operator asked for it (``executor_resends``). Insert-only.
deliveries = sa.Table(
    "executor_deliveries",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("kind", sa.String(16), nullable=False),  # outcome | resolution | refusal
    sa.Column("approval_id", sa.String(100), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),  # delivered | rejected
    sa.Column("http_status", sa.Integer, nullable=True),
    sa.Column("error_code", sa.String(64), nullable=True),
    sa.Column("detail", sa.Text, nullable=False),
    sa.Column("at", sa.BigInteger, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False, server_default="1"),
    sa.UniqueConstraint("kind", "approval_id", "attempt", name="uq_executor_deliveries_attempt"),
)

#: An operator's request to send a rejected receipt again: the attempt it queues is the
#: last recorded attempt + 1, and until a delivery row of that attempt exists the
#: receipt is undelivered. UNIQUE per attempt, so a race queues it once. Insert-only.
resends = sa.Table(
    "executor_resends",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("kind", sa.String(16), nullable=False),  # outcome | resolution | refusal
    sa.Column("approval_id", sa.String(100), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),  # >= 2
    sa.Column("requested_by", sa.String(128), nullable=False),
    sa.Column("requested_at", sa.BigInteger, nullable=False),
    sa.Column("note", sa.Text, nullable=False),
    sa.UniqueConstraint("kind", "approval_id", "attempt", name="uq_executor_resends_attempt"),
)

#: The receipts still to deliver: a row is queued in the transaction that commits the
#: receipt (outcome or resolution) and deleted in the one that records its delivery, so
#: the outbox reads what is pending without scanning every terminal row ever written. A
#: work queue, not a record: the ledger, resolutions and deliveries are the record, and
#: the reporter re-queues any receipt they show undelivered when it starts.
outbox = sa.Table(
    "executor_outbox",
    metadata,
    sa.Column("kind", sa.String(16), primary_key=True),  # outcome | resolution | refusal
    sa.Column("approval_id", sa.String(100), primary_key=True),
    sa.Column("queued_at", sa.BigInteger, nullable=False),
    # Which delivery attempt this is: 1, or the attempt a resend request queued.
    sa.Column("attempt", sa.Integer, nullable=False, server_default="1"),
)


#: ``resource_type`` of a tool call's row: no cloud resource type is spelled so.
TOOL_CALL_RESOURCE_TYPE: Final = "tool-call"


def target_columns(verified: VerifiedApproval | VerifiedToolCall) -> dict[str, str]:
    """A ledger row's copies of what a verified approval targets (docs/protocol.md#ledger).

    A cloud action's proposal, resource type and id, region and operation; a tool
    call's proposal, ``tool-call``, target, an empty region and tool. People read these
    columns (``airlock executor ledger``, an ``in_doubt`` resolution); nothing that runs
    the action does, so the action bytes stay the one authority.
    """
    if isinstance(verified, VerifiedToolCall):
        call = verified.statement
        return {
            "proposal_id": call.proposal_id,
            "resource_type": TOOL_CALL_RESOURCE_TYPE,
            "resource_id": call.target,
            "region": "",
            "operation": call.tool,
        }
    st = verified.statement
    return {
        "proposal_id": st.proposal_id,
        "resource_type": st.resource.type,
        "resource_id": st.resource.id,
        "region": st.region,
        "operation": st.operation,
    }


@dataclass(frozen=True, slots=True)
class LedgerRow:
    """One ``executor_ledger`` row. For a cloud action the target columns are the
    action's own; for a tool call (docs/protocol.md#ledger) ``resource_type`` is
    ``tool-call``, ``resource_id`` the target, ``operation`` the tool and ``region``
    empty. The action bytes are the authority either way; the columns are for people."""

    approval_id: str
    nonce: str
    action_hash: str
    proposal_id: str
    resource_type: str
    resource_id: str
    region: str
    operation: str
    action: bytes
    bundle: bytes
    keyid: str
    expires_at: int
    state: State
    lease_owner: str
    lease_epoch: int
    lease_expires: int
    claimed_at: int
    updated_at: int
    refusal_code: str | None
    cloud_request_id: str | None
    verified: bool
    detail: str
    receipt: str | None
    effect_key: str | None

    @classmethod
    def from_mapping(cls, row: sa.RowMapping) -> LedgerRow:
        values = dict(row)
        values["state"] = State(values["state"])
        values["action"] = bytes(values["action"])
        values["bundle"] = bytes(values["bundle"])
        values["verified"] = bool(values["verified"])
        return cls(**values)
