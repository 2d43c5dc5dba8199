"""The checkpoint database: proposals, votes, approvals, outcomes, people, tokens, feed.

Times are integer Unix seconds (the statement's unit). The rules that must hold under
concurrency are the database's to enforce, never check-then-act:

* at most one open proposal per (account, resource, operation) for a cloud action, and
  per (audience, effect key) for a tool call: two partial UNIQUE indexes over the open
  states, on SQLite and PostgreSQL alike (migration 0008);
* one vote per person per proposal: UNIQUE (proposal_id, voter);
* at most one approval per proposal, each nonce once: UNIQUE proposal_id, UNIQUE nonce;
* one outcome per approval: UNIQUE approval_id;
* an executor's refusal receipt is one note, however often it is posted: UNIQUE
  receipt_sha256 (migration 0004; the table is insert-only);
* one notification per (proposal, kind), and one delivery of it per channel: UNIQUE
  (proposal_id, kind), UNIQUE (event_id, channel) (migration 0010);
* the feed's sequence is commit-ordered: it is taken from a single counter row that the
  issuing transaction locks, so a reader never skips a row committed later with a lower
  number.

Secrets are never stored: passwords as argon2 hashes, session and service tokens as
SHA-256 digests of random tokens. The audit chain (``audit_log``) is created by the
migration through :func:`airlock.store.create_audit_log`.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa

__all__ = [
    "CLOUD_ACTION",
    "DELIVERY_STATES",
    "NOTIFY_KINDS",
    "OPEN_STATES",
    "PROPOSAL_STATES",
    "REASON_CODE_SHAPE",
    "REJECT_REASONS",
    "TOOL_CALL",
    "approvals",
    "executor_head",
    "executor_resolutions",
    "feed_events",
    "feed_head",
    "metadata",
    "notify_deliveries",
    "notify_events",
    "notify_prefs",
    "outcomes",
    "proposal_routes",
    "proposals",
    "refusal_budgets",
    "refusal_notes",
    "rejections",
    "service_tokens",
    "sessions",
    "sign_in_counts",
    "sign_in_key",
    "signing_keys",
    "users",
    "votes",
]

#: docs/protocol.md#proposals, plus ``denied`` (a deny rule refused it at submit; recorded, never
#: open).
PROPOSAL_STATES: Final = (
    "pending",
    "approved",
    "executed",
    "refused",
    "failed",
    "in_doubt",
    "rejected",
    "expired",
    "withdrawn",
    "revoked",
    "lapsed",
    "denied",
)
#: States that hold the (account, resource, operation) slot. ``in_doubt`` stays open: a
#: write may have happened, so nobody may propose the same thing until a human resolves it.
OPEN_STATES: Final = ("pending", "approved", "in_doubt")
#: The built-in reject reasons; a policy adds its own per tool (migration 0008).
REJECT_REASONS: Final = ("not_idle", "protected", "wrong_target", "needs_more_info", "other")
#: What the database admits as a reason code: 1 to 40 of a-z, 0-9, _, a letter first.
#: ``trim`` reads alike on SQLite and PostgreSQL (migration 0008 writes the same text).
REASON_CODE_SHAPE: Final = (
    "length(reason_code) BETWEEN 1 AND 40"
    " AND trim(reason_code, 'abcdefghijklmnopqrstuvwxyz0123456789_') = ''"
    " AND trim(substr(reason_code, 1, 1), 'abcdefghijklmnopqrstuvwxyz') = ''"
)
#: ``proposals.action_type`` of a cloud action and of a tool call.
CLOUD_ACTION: Final = "airlock.action/v1"
TOOL_CALL: Final = "airlock.tool-call/v1"
ROLES: Final = ("viewer", "approver", "admin")
SERVICE_ROLES: Final = ("agent", "executor")

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


_CLOUD_OPEN_WHERE = sa.text(_in("state", OPEN_STATES) + " AND effect_key IS NULL")
_TOOL_OPEN_WHERE = sa.text(_in("state", OPEN_STATES) + " AND effect_key IS NOT NULL")

proposals = sa.Table(
    "proposals",
    metadata,
    sa.Column("id", sa.String(96), primary_key=True),
    sa.Column("action", sa.LargeBinary, nullable=False),  # JCS bytes: what is hashed
    sa.Column("action_hash", sa.String(71), nullable=False),
    sa.Column("provider", sa.String(32), nullable=False),
    sa.Column("account", sa.String(128), nullable=False),  # a tool call's: its audience
    sa.Column("region", sa.String(40), nullable=False),
    sa.Column("resource_type", sa.String(32), nullable=False),  # a tool call's: tool-call
    sa.Column("resource_id", sa.String(100), nullable=False),  # a tool call's: its target
    sa.Column("operation", sa.String(64), nullable=False),  # a tool call's: its tool
    sa.Column("proposed_by", sa.String(128), nullable=False),  # the action's proposed_by
    sa.Column("submitted_by", sa.String(128), nullable=False),  # the agent token's name
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("risk", sa.String(8), nullable=False),
    sa.Column("rule", sa.String(128), nullable=False),
    sa.Column("effect", sa.String(8), nullable=False),
    sa.Column("quorum", sa.Integer, nullable=False),
    sa.Column("confirm", sa.Boolean, nullable=False),
    sa.Column("policy_hash", sa.String(71), nullable=False),
    sa.Column("deny_reason", sa.Text, nullable=True),
    sa.Column("approval_deadline", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    # Migration 0008: the action type; a tool call's effect key, audience and summary
    # (NULL for a cloud action).
    sa.Column(
        "action_type", sa.String(32), nullable=False, server_default=sa.text(f"'{CLOUD_ACTION}'")
    ),
    sa.Column("effect_key", sa.String(200), nullable=True),
    sa.Column("audience", sa.String(128), nullable=True),
    sa.Column("summary", sa.Text, nullable=True),
    # Migration 0009: an edited tool call. On the withdrawn original, the id of the
    # proposal its edit made; on that new proposal, JSON of the edit (``edits.Edit``).
    sa.Column("superseded_by", sa.String(96), nullable=True),
    sa.Column("edit", sa.Text, nullable=True),
    sa.CheckConstraint(_in("state", PROPOSAL_STATES), name="state"),
    sa.CheckConstraint(_in("risk", ("low", "medium", "high")), name="risk"),
    sa.CheckConstraint("quorum >= 1", name="quorum"),
    sa.Index(
        "uq_proposals_open_target",
        "account",
        "resource_type",
        "resource_id",
        "operation",
        unique=True,
        sqlite_where=_CLOUD_OPEN_WHERE,
        postgresql_where=_CLOUD_OPEN_WHERE,
    ),
    sa.Index(
        "uq_proposals_open_effect",
        "audience",
        "effect_key",
        unique=True,
        sqlite_where=_TOOL_OPEN_WHERE,
        postgresql_where=_TOOL_OPEN_WHERE,
    ),
    sa.Index("ix_proposals_state_created", "state", "created_at"),
)

votes = sa.Table(
    "votes",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("proposal_id", sa.ForeignKey("proposals.id"), nullable=False),
    sa.Column("voter", sa.String(64), nullable=False),
    sa.Column("at", sa.BigInteger, nullable=False),
    sa.Column("note", sa.Text, nullable=False),
    sa.UniqueConstraint("proposal_id", "voter"),
)

approvals = sa.Table(
    "approvals",
    metadata,
    sa.Column("approval_id", sa.String(96), primary_key=True),
    sa.Column("proposal_id", sa.ForeignKey("proposals.id"), nullable=False, unique=True),
    sa.Column("nonce", sa.String(32), nullable=False, unique=True),
    sa.Column("statement", sa.LargeBinary, nullable=False),  # JCS bytes: the DSSE payload
    sa.Column("envelope", sa.Text, nullable=False),  # JSON of the DSSE envelope
    sa.Column("keyid", sa.String(64), nullable=False),
    sa.Column("issued_at", sa.BigInteger, nullable=False),
    sa.Column("expires_at", sa.BigInteger, nullable=False),
    sa.Column("revoked_at", sa.BigInteger, nullable=True),
    sa.Column("revoked_by", sa.String(64), nullable=True),
    sa.Column("revoke_note", sa.Text, nullable=True),
)

rejections = sa.Table(
    "rejections",
    metadata,
    sa.Column("proposal_id", sa.ForeignKey("proposals.id"), primary_key=True),
    sa.Column("reason_code", sa.String(40), nullable=False),
    sa.Column("note", sa.Text, nullable=False),
    sa.Column("by", sa.String(64), nullable=False),
    sa.Column("at", sa.BigInteger, nullable=False),
    sa.CheckConstraint(REASON_CODE_SHAPE, name="reason_code"),
)

outcomes = sa.Table(
    "outcomes",
    metadata,
    sa.Column("approval_id", sa.ForeignKey("approvals.approval_id"), primary_key=True),
    sa.Column("proposal_id", sa.ForeignKey("proposals.id"), nullable=False),
    sa.Column("outcome", sa.String(16), nullable=False),
    sa.Column("refusal_code", sa.String(32), nullable=True),
    sa.Column("receipt", sa.Text, nullable=False),  # JSON of the executor's DSSE receipt
    sa.Column("receipt_verified", sa.Boolean, nullable=False),
    sa.Column("receipt_keyid", sa.String(64), nullable=True),
    sa.Column("late", sa.Boolean, nullable=False),  # landed after the proposal lapsed
    # A late in_doubt outcome while another open proposal held the same target: the id of
    # that proposal. This proposal then kept its closed state (see reports._land_state).
    sa.Column("target_held_by", sa.String(96), nullable=True),
    sa.Column("reported_at", sa.BigInteger, nullable=False),
    sa.Column("resolution", sa.String(16), nullable=True),  # happened | did_not_happen
    sa.Column("resolved_by", sa.String(64), nullable=True),
    sa.Column("resolved_at", sa.BigInteger, nullable=True),
    sa.Column("resolution_note", sa.Text, nullable=True),
)

#: An executor's signed receipt that it refused an approval before consuming it (verify
#: steps 1-12): a note shown with the proposal, never a state change (migration 0004,
#: insert-only). ``proposal_id`` has no foreign key: see the migration for the deadlock
#: one would bring. ``at`` is the receipt's (the executor's clock), ``reported_at`` ours.
refusal_notes = sa.Table(
    "refusal_notes",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("approval_id", sa.ForeignKey("approvals.approval_id"), nullable=False, index=True),
    sa.Column("proposal_id", sa.String(96), nullable=False, index=True),
    sa.Column("refusal_code", sa.String(32), nullable=False),
    sa.Column("detail", sa.Text, nullable=False),  # printable, clipped (views.shown)
    sa.Column("executor", sa.String(256), nullable=False),  # the receipt's audience
    sa.Column("at", sa.BigInteger, nullable=False),
    sa.Column("reported_at", sa.BigInteger, nullable=False),
    sa.Column("receipt", sa.Text, nullable=False),  # JSON of the executor's DSSE receipt
    sa.Column("receipt_keyid", sa.String(64), nullable=False),
    sa.Column("receipt_sha256", sa.String(64), nullable=False, unique=True),  # of the payload
)

#: An executor's signed resolution of an in_doubt outcome that a person had already
#: resolved here (migration 0006, insert-only, one per approval): kept whether it agrees
#: with that person or contradicts them (``agrees``), shown with the outcome, never a
#: state change. ``decided_*`` and ``note`` are the receipt's (the executor's person and
#: clock), ``checkpoint_*`` the resolution recorded here, ``reported_at`` ours.
executor_resolutions = sa.Table(
    "executor_resolutions",
    metadata,
    sa.Column("approval_id", sa.ForeignKey("approvals.approval_id"), primary_key=True),
    sa.Column("proposal_id", sa.String(96), nullable=False, index=True),
    sa.Column("decision", sa.String(16), nullable=False),  # happened | did_not_happen
    sa.Column("decided_by", sa.String(128), nullable=False),
    sa.Column("decided_at", sa.BigInteger, nullable=False),
    sa.Column("note", sa.Text, nullable=False),
    sa.Column("checkpoint_decision", sa.String(16), nullable=False),
    sa.Column("checkpoint_resolved_by", sa.String(64), nullable=True),
    sa.Column("agrees", sa.Boolean, nullable=False),
    sa.Column("reported_at", sa.BigInteger, nullable=False),
    sa.Column("receipt", sa.Text, nullable=False),  # JSON of the executor's DSSE receipt
    sa.Column("receipt_keyid", sa.String(64), nullable=False),
    sa.Column("receipt_sha256", sa.String(64), nullable=False),  # of the signed payload
)

users = sa.Table(
    "users",
    metadata,
    sa.Column("username", sa.String(64), primary_key=True),
    sa.Column("password_hash", sa.Text, nullable=False),  # argon2id, never the password
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("disabled", sa.Boolean, nullable=False),
    sa.Column("failed_logins", sa.Integer, nullable=False),
    sa.Column("locked_until", sa.BigInteger, nullable=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.CheckConstraint(_in("role", ROLES), name="role"),
)

sessions = sa.Table(
    "sessions",
    metadata,
    sa.Column("token_hash", sa.String(64), primary_key=True),  # SHA-256 hex of the token
    sa.Column("username", sa.ForeignKey("users.username"), nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("expires_at", sa.BigInteger, nullable=False),
    sa.Column("revoked_at", sa.BigInteger, nullable=True),
    #: When the session was last used (migration 0007): it ends ``session_idle`` after.
    sa.Column("last_seen_at", sa.BigInteger, nullable=True),
)

#: The HMAC key of user names from refused sign-ins (migration 0007): one row, made by
#: the migration, never changed.
sign_in_key = sa.Table(
    "sign_in_key",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("key", sa.String(64), nullable=False),
    sa.CheckConstraint("id = 1", name="single_row"),
)

service_tokens = sa.Table(
    "service_tokens",
    metadata,
    sa.Column("token_hash", sa.String(64), primary_key=True),
    sa.Column("name", sa.String(64), nullable=False, unique=True),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("revoked_at", sa.BigInteger, nullable=True),
    sa.CheckConstraint(_in("role", SERVICE_ROLES), name="role"),
)

signing_keys = sa.Table(
    "signing_keys",
    metadata,
    sa.Column("kid", sa.String(64), primary_key=True),
    sa.Column("public_key", sa.String(64), nullable=False),  # base64 raw
    sa.Column("first_used_at", sa.BigInteger, nullable=False),
)

feed_head = sa.Table(
    "feed_head",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.CheckConstraint("id = 1", name="single_row"),
)

#: The latest executor audit chain head a receipt named (by chain seq, or by receipt
#: time for another chain: ``reports._advance_executor_head``), and that receipt's
#: time, bounded by the checkpoint's clock (migration 0003): one row, NULLs until the
#: first receipt. The feed hands it back to executors, so one whose chain lacks it
#: knows its ledger went back.
executor_head = sa.Table(
    "executor_head",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("seq", sa.BigInteger, nullable=True),
    sa.Column("hash", sa.String(100), nullable=True),
    sa.Column("at", sa.BigInteger, nullable=True),
    sa.Column("recorded_at", sa.BigInteger, nullable=True),
    sa.CheckConstraint("id = 1", name="single_row"),
)

feed_events = sa.Table(
    "feed_events",
    metadata,
    sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("approval_id", sa.ForeignKey("approvals.approval_id"), nullable=False),
    sa.Column("at", sa.BigInteger, nullable=False),
    sa.CheckConstraint(_in("kind", ("approval", "revocation")), name="kind"),
    sa.UniqueConstraint("kind", "approval_id"),
)

#: docs/notifications.md: what a notification may be about (migration 0010).
NOTIFY_KINDS: Final = (
    "proposal.needs_vote",
    "proposal.approved",
    "proposal.executed",
    "proposal.failed",
    "proposal.in_doubt",
    "proposal.refused",
    "proposal.expiring",
    "proposal.expired",
    "approval.lapsed",
    "proposal.escalated",
)
#: A delivery is waiting (or being sent), delivered, or dead (retried for the channel's
#: whole retry window, then kept for an admin to see and re-send).
DELIVERY_STATES: Final = ("pending", "delivered", "dead")

#: The notification outbox (migration 0010): one event per (proposal, kind, step), written
#: in the transaction of the state change it tells of; ``body`` is the event's JSON, built
#: then, and never changed (a receiver dedupes on ``id``). ``step`` (migration 0011) is 0
#: but for ``proposal.escalated``: the level escalated to.
notify_events = sa.Table(
    "notify_events",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),  # msg_<32 hex>: Standard Webhooks' id
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("proposal_id", sa.String(96), nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("step", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.CheckConstraint(_in("kind", NOTIFY_KINDS), name="kind"),
    sa.UniqueConstraint("proposal_id", "kind", "step"),
)

#: One row per (event, channel): claimed by moving ``next_at`` past the send's deadline
#: (a conditional update, never check-then-act), so a checkpoint killed mid-send sends
#: it again once the claim runs out: at least once.
notify_deliveries = sa.Table(
    "notify_deliveries",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("event_id", sa.ForeignKey("notify_events.id"), nullable=False),
    # A channel's name, or ``person:<username>`` (migration 0011: 64 → 80).
    sa.Column("channel", sa.String(80), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("next_at", sa.BigInteger, nullable=False),
    sa.Column("last_error", sa.Text, nullable=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("delivered_at", sa.BigInteger, nullable=True),
    sa.CheckConstraint(_in("state", DELIVERY_STATES), name="state"),
    sa.UniqueConstraint("event_id", "channel"),
    sa.Index("ix_notify_deliveries_state_next_at", "state", "next_at"),
)

#: Sign-in throttle counts shared by the replicas on one PostgreSQL database (migration
#: 0012; ``limits.SharedSignInThrottle``): one row per client address (``a|ADDRESS``) and
#: per (address, keyed name hash) pair (``p|ADDRESS|NAME_HMAC``), never a name as typed.
sign_in_counts = sa.Table(
    "sign_in_counts",
    metadata,
    sa.Column("key", sa.String(200), primary_key=True),
    sa.Column("failures", sa.Integer, nullable=False),
    sa.Column("next_at", sa.BigInteger, nullable=False),
    sa.Column("last_at", sa.BigInteger, nullable=False),
)

#: Refusal budgets per bearer token (its SHA-256), shared by the replicas (migration
#: 0012; ``limits.RefusalBudgets``): ``tokens`` left at ``at`` (Unix seconds, fractional).
refusal_budgets = sa.Table(
    "refusal_budgets",
    metadata,
    sa.Column("token_key", sa.String(64), primary_key=True),
    sa.Column("name", sa.String(64), nullable=False),
    sa.Column("kind", sa.String(8), nullable=False),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("tokens", sa.Float, nullable=False),
    sa.Column("at", sa.Float, nullable=False),
)

#: A routed proposal's route (migration 0011): the groups its rule named when it was
#: submitted, in order; ``level`` the index of the last group asked so far; ``due_at``
#: when that group's SLA passes (NULL: no SLA, or no group left to escalate to). The
#: sweeper escalates by a conditional update of ``level`` (claim, then act).
proposal_routes = sa.Table(
    "proposal_routes",
    metadata,
    sa.Column("proposal_id", sa.ForeignKey("proposals.id"), primary_key=True),
    sa.Column("rule", sa.String(128), nullable=False),
    sa.Column("groups", sa.Text, nullable=False),  # JSON list of group names
    sa.Column("notify", sa.Text, nullable=False),  # JSON list of the rule's channels
    sa.Column("sla", sa.BigInteger, nullable=True),
    sa.Column("level", sa.Integer, nullable=False),
    sa.Column("due_at", sa.BigInteger, nullable=True),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.CheckConstraint("level >= 0", name="level"),
    sa.Index("ix_proposal_routes_due_at", "due_at"),
)

#: A person's notification preference (migration 0011): the events they want
#: (JSON list; empty: none), and where: an email address, a personal Slack incoming
#: webhook URL (a secret: never shown back in full, never in an event). No row: the
#: person takes their routed groups' default.
notify_prefs = sa.Table(
    "notify_prefs",
    metadata,
    sa.Column("username", sa.ForeignKey("users.username"), primary_key=True),
    sa.Column("events", sa.Text, nullable=False),
    sa.Column("email", sa.String(254), nullable=True),
    sa.Column("slack_url", sa.Text, nullable=True),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
)
