"""The checkpoint API's request and response bodies (the OpenAPI schema is built from these).

Request bodies refuse unknown fields. Response bodies carry no secret except the one a
caller asked for (a login returns its own session token, once).
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema

from airlock.api import RECEIPTS_MAX

__all__ = [
    "PROPOSED_ACTION_SCHEMA",
    "RECEIPT_ENVELOPE_SCHEMA",
    "STORABLE_PATTERN",
    "ApprovalOut",
    "ApproveIn",
    "ArgumentChangeOut",
    "AuditHeadOut",
    "AuditOut",
    "EditIn",
    "EditOut",
    "ErrorBody",
    "ErrorDetail",
    "ExecutorRefusalOut",
    "FeedItem",
    "FeedOut",
    "LoginIn",
    "LoginOut",
    "MeOut",
    "OutcomeIn",
    "OutcomeOut",
    "PolicyOut",
    "ProposalList",
    "ProposalOut",
    "ReceiptIn",
    "ReceiptOut",
    "ReceiptsIn",
    "ReceiptsOut",
    "RefusalIn",
    "RejectIn",
    "RejectionOut",
    "ResolveIn",
    "RevokeIn",
    "RouteOut",
    "VoteOut",
    "WithdrawIn",
]

ProposalState = Literal[
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
]
#: A built-in reason (not_idle, protected, wrong_target, needs_more_info, other) or one
#: the policy file names for the proposal's tool (``[tools.<tool>] reject_reasons``);
#: the service checks which the proposal admits.
RejectReason = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,39}$")]


def _storable(text: str) -> str:
    # A lone surrogate cannot be encoded for the database or the audit chain, and
    # PostgreSQL refuses NUL in text: refuse both here, as a 422, not later as a 500.
    if "\x00" in text or any("\ud800" <= ch <= "\udfff" for ch in text):
        raise ValueError("holds a NUL or a lone surrogate character")
    return text


#: What ``_storable`` (and the strict JSON parser before it) lets through, as a JSON
#: Schema pattern: no NUL, no UTF-16 surrogate. Only in the document: pydantic's regex
#: engine cannot name surrogates, so the check is ``_storable``.
STORABLE_PATTERN: Final = r"^[^\u0000\ud800-\udfff]*$"
Text = Annotated[
    str, AfterValidator(_storable), Field(json_schema_extra={"pattern": STORABLE_PATTERN})
]
Note = Annotated[Text, Field(max_length=2000)]

#: Standard base64 with padding, canonical (the unused bits of the last quantum zero),
#: as ``airlock.protocol``'s strict decoder takes it.
_BASE64: Final = (
    r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$"
)
#: The executor's receipt as a DSSE envelope (``airlock.protocol.Envelope.from_value``):
#: exactly these three fields, 1 to 4 signatures, a payload of at most 64 KiB.
RECEIPT_ENVELOPE_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": "A DSSE envelope of an airlock.receipt/v1 payload, signed by the "
    "executor's receipt key",
    "required": ["payloadType", "payload", "signatures"],
    "additionalProperties": False,
    "properties": {
        "payloadType": {"type": "string", "enum": ["application/vnd.airlock.receipt.v1+json"]},
        "payload": {"type": "string", "pattern": _BASE64, "maxLength": 87384},
        "signatures": {
            "type": "array",
            "minItems": 1,
            "maxItems": 4,
            "items": {
                "type": "object",
                "required": ["keyid", "sig"],
                "additionalProperties": False,
                "properties": {
                    "keyid": {"type": "string", "maxLength": 128, "pattern": STORABLE_PATTERN},
                    "sig": {"type": "string", "pattern": _BASE64, "maxLength": 172},
                },
            },
        },
    },
}
Receipt = Annotated[dict[str, Any], WithJsonSchema(RECEIPT_ENVELOPE_SCHEMA)]


def _evidence_schema(text: str, integer: dict[str, Any]) -> dict[str, Any]:
    """The action's ``evidence`` as JSON Schema: flat, bounded, ``tags`` a string map."""
    return {
        "type": "object",
        "description": "What the agent observed (open-ended, signed with the action)",
        "maxProperties": 8,
        "properties": {
            "tags": {
                "type": "object",
                "description": "The resource's tags as the agent read them",
                "maxProperties": 8,
                "additionalProperties": {"type": "string", "maxLength": 64, "pattern": text},
                "propertyNames": {"maxLength": 32, "pattern": text},
            }
        },
        "propertyNames": {"maxLength": 32, "pattern": r"^[A-Za-z0-9_]+$"},
        "additionalProperties": {
            "anyOf": [
                {"type": "string", "maxLength": 64, "pattern": text},
                integer,
                {"type": "boolean"},
                {"type": "null"},
                {"type": "array", "maxItems": 14, "items": integer},
            ]
        },
    }


# provider -> (account pattern, region pattern), as airlock.protocol.check_target.
_TARGETS: Final = {
    "alibaba": (r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$", r"^[a-z0-9]+(-[a-z0-9]+){0,5}$"),
    "aws": (r"^[0-9]{12}$", r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]{1,2}$"),
}
_EC2_ID: Final = r"^i-([0-9a-f]{8}|[0-9a-f]{17})$"
_CALLS: Final = [
    (
        "alibaba",
        "ecs.instance",
        r"^i-[0-9a-z]{4,64}$",
        "stop",
        {"stopped_mode": ["StopCharging", "KeepCharging"]},
    ),
    ("alibaba", "ecs.instance", r"^i-[0-9a-z]{4,64}$", "delete", {}),
    ("alibaba", "rds.instance", r"^(rm|pgm|pc)-[0-9a-z]{4,64}$", "stop", {}),
    ("aws", "ec2.instance", _EC2_ID, "stop", {}),
    ("aws", "ec2.instance", _EC2_ID, "delete", {}),
    # At most 63, no "--", no trailing "-": said by the server, not by this pattern.
    ("aws", "rds.instance", r"^[a-z][a-z0-9-]{0,62}$", "stop", {}),
]


def _action_schema() -> dict[str, Any]:
    """A ProposedAction v1 (docs/protocol.md#action; ``airlock.protocol.ProposedAction``) as JSON
    Schema: one schema per allowlisted call (resource type, operation, params).

    Where the server's rule cannot be said in JSON Schema, the schema says less than the
    server takes, never more: text is printable ASCII or Latin-1 (always NFC), a date's
    day at most 28, evidence flat and bounded so that the action stays under 16 KiB."""
    # Printable ASCII and Latin-1: NFC whatever follows, no control character.
    text = r"^[ -~\u00a0-\u00ff]*$"
    time = (
        r"^[1-9][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])"
        r"T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]Z$"
    )
    safe = 2**53 - 1
    integer = {"type": "integer", "minimum": -safe, "maximum": safe}
    evidence = _evidence_schema(text, integer)
    common: dict[str, Any] = {
        "type": {"type": "string", "enum": ["airlock.action/v1"]},
        "proposal_id": {"type": "string", "pattern": r"^prop_[A-Za-z0-9_-]{8,80}$"},
        "precondition": {
            "type": "object",
            "required": ["status", "absent_tags", "observed_at"],
            "additionalProperties": False,
            "properties": {
                "status": {"type": "string", "pattern": r"^[A-Za-z]{1,32}$"},
                "absent_tags": {
                    "type": "array",
                    "maxItems": 8,
                    "items": {"type": "string", "maxLength": 64, "pattern": text},
                },
                "observed_at": {"type": "string", "pattern": time},
            },
        },
        "evidence": evidence,
        "reason": {"type": "string", "minLength": 1, "maxLength": 2000, "pattern": text},
        "proposed_by": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$"},
        "created_at": {"type": "string", "pattern": time},
    }
    variants = []
    for provider, resource_type, id_pattern, operation, params in _CALLS:
        account, region = _TARGETS[provider]
        variants.append(
            {
                "type": "object",
                "title": f"{provider} {resource_type} {operation}",
                "required": [
                    *common,
                    "provider",
                    "account",
                    "region",
                    "resource",
                    "operation",
                    "params",
                ],
                "additionalProperties": False,
                "properties": {
                    **common,
                    "provider": {"type": "string", "enum": [provider]},
                    "account": {"type": "string", "pattern": account},
                    "region": {"type": "string", "pattern": region, "maxLength": 40},
                    "resource": {
                        "type": "object",
                        "required": ["type", "id"],
                        "additionalProperties": False,
                        "properties": {
                            "type": {"type": "string", "enum": [resource_type]},
                            "id": {"type": "string", "pattern": id_pattern, "maxLength": 80},
                        },
                    },
                    "operation": {"type": "string", "enum": [operation]},
                    "params": {
                        "type": "object",
                        "required": sorted(params),
                        "additionalProperties": False,
                        "properties": {
                            name: {"type": "string", "enum": values}
                            for name, values in params.items()
                        },
                    },
                },
            }
        )
    return {"oneOf": variants}


#: The submit body (``POST /v1/proposals``), parsed strictly by the server (duplicate
#: keys, floats, non-NFC text are refused).
PROPOSED_ACTION_SCHEMA: Final = _action_schema()


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class ErrorDetail(_Out):
    code: str
    message: str


class ErrorBody(_Out):
    """Every refusal: ``{"error": {"code": "E_…", "message": "…"}}``."""

    error: ErrorDetail


class ApproveIn(_In):
    #: The hash of the action the person was shown; a different one is E_STALE_VIEW.
    action_hash: Annotated[Text, Field(max_length=80)]
    #: The typed resource id; required when the proposal's policy asks for confirmation.
    confirm: Annotated[Text | None, Field(max_length=128)] = None
    note: Note = ""


def _edit_values_schema() -> dict[str, Any]:
    """``EditIn.set`` as JSON Schema. The server takes any JSON value but a float (NFC
    text); the schema says less, never more: printable ASCII or Latin-1 text (always
    NFC), safe integers, booleans, null, and flat lists of those."""
    scalars: list[dict[str, Any]] = [
        {"type": "string", "maxLength": 2000, "pattern": r"^[ -~\u00a0-\u00ff]*$"},
        {"type": "integer", "minimum": -(2**53 - 1), "maximum": 2**53 - 1},
        {"type": "boolean"},
        {"type": "null"},
    ]
    return {
        "type": "object",
        "description": "Argument name → its new value, of the same JSON type as the old",
        "minProperties": 1,
        "maxProperties": 64,
        "propertyNames": {"maxLength": 64, "pattern": STORABLE_PATTERN},
        "additionalProperties": {
            "anyOf": [*scalars, {"type": "array", "maxItems": 16, "items": {"anyOf": scalars}}]
        },
    }


class EditIn(_In):
    """An approver's edit of a pending tool call's arguments
    (docs/protocol.md#editing-a-tool-call)."""

    #: The hash of the tool call the person was shown; a different one is E_STALE_VIEW.
    action_hash: Annotated[Text, Field(max_length=80)]
    #: Argument name → its new value: only existing top-level arguments, each keeping its
    #: JSON type, at least one changed (else E_INVALID).
    set: Annotated[
        dict[str, Any],
        Field(min_length=1, max_length=64),
        WithJsonSchema(_edit_values_schema()),
    ]
    note: Note = ""
    #: The typed target, when the new proposal's policy asks for it.
    confirm: Annotated[Text | None, Field(max_length=128)] = None


class RejectIn(_In):
    reason_code: RejectReason
    note: Note = ""


class RevokeIn(_In):
    note: Note = ""


class WithdrawIn(_In):
    note: Note = ""


class ResolveIn(_In):
    decision: Literal["happened", "did_not_happen"]
    note: Note = ""


class OutcomeIn(_In):
    #: The executor's DSSE receipt (payload type application/vnd.airlock.receipt.v1+json);
    #: approval id, action hash, outcome and refusal code are read from its signed payload.
    receipt: Receipt


class RefusalIn(_In):
    #: The executor's DSSE receipt of a refusal before consuming (verify steps 1-12):
    #: outcome ``refused``, its approval id and refusal code read from the signed payload.
    receipt: Receipt


class ReceiptIn(_In):
    #: Which endpoint takes it alone: ``outcome`` (/v1/outcomes) or ``refusal`` (/v1/refusals).
    kind: Literal["outcome", "refusal"]
    receipt: Receipt


class ReceiptsIn(_In):
    #: Each is recorded or refused on its own, in this order.
    receipts: Annotated[list[ReceiptIn], Field(min_length=1, max_length=RECEIPTS_MAX)]


class ReceiptOut(_Out):
    #: The status its own endpoint would have answered; ``error`` for a refusal.
    status: int
    error: ErrorDetail | None = None


class ReceiptsOut(_Out):
    #: One per receipt sent, in the same order.
    results: list[ReceiptOut]


class LoginIn(_In):
    username: Annotated[Text, Field(min_length=1, max_length=64)]
    password: Annotated[Text, Field(min_length=1, max_length=1024)]


class LoginOut(_Out):
    token: str
    expires_at: int
    username: str
    role: str


class MeOut(_Out):
    name: str
    kind: Literal["user", "service"]
    role: str


class VoteOut(_Out):
    voter: str
    at: int
    note: str
    #: Whether the vote counts toward quorum now: false once the voter was disabled or
    #: lost the approver role (the vote stays on record).
    counts: bool


class PolicyOut(_Out):
    rule: str
    effect: Literal["deny", "approve", "auto"]
    quorum: int
    confirm: bool
    hash: str


class ApprovalOut(_Out):
    approval_id: str
    keyid: str
    issued_at: int
    expires_at: int
    revoked_at: int | None
    revoked_by: str | None
    envelope: dict[str, Any]


class RejectionOut(_Out):
    reason_code: RejectReason
    note: str
    by: str
    at: int


class ExecutorResolutionOut(_Out):
    """The executor's signed resolution of an in_doubt that a person had already resolved
    here. ``conflict``: the two decisions differ. The proposal keeps the state the person
    here gave it; the executor's ledger is the record of what the executor did, so a
    conflict needs a person to check the resource in the cloud and both records."""

    decision: str  # happened | did_not_happen, as the executor's ledger records it
    by: str  # who decided at the executor (the receipt's)
    at: int  # when, by the executor's clock
    note: str
    #: The resolution recorded here before the receipt came, and who recorded it.
    checkpoint_decision: str
    checkpoint_resolved_by: str | None
    conflict: bool
    reported_at: int
    receipt_keyid: str
    receipt: dict[str, Any]


class OutcomeOut(_Out):
    approval_id: str
    outcome: str
    refusal_code: str | None
    receipt_verified: bool
    receipt_keyid: str | None
    receipt: dict[str, Any]
    late: bool
    #: Set when a late ``in_doubt`` outcome landed while this other (approved or in_doubt)
    #: proposal held the same target: this proposal then keeps its closed state, and the
    #: in_doubt still needs a person (``resolve``) or the executor's resolution.
    target_held_by: str | None
    reported_at: int
    resolution: str | None
    resolved_by: str | None
    resolved_at: int | None
    resolution_note: str | None
    #: Set when the executor's resolution receipt came after a person resolved the
    #: in_doubt here (``resolution``): agreeing, or in conflict with it.
    executor_resolution: ExecutorResolutionOut | None = None


class ExecutorRefusalOut(_Out):
    """An executor's signed word that it refused the approval before using it. A note:
    the proposal's state is unchanged (another executor may still run the approval)."""

    approval_id: str
    refusal_code: str
    #: The executor's text, with anything not printable escaped, at most 2000 characters.
    detail: str
    #: The executor's audience as its receipt names it (may differ from the checkpoint's:
    #: a misconfigured executor is what ``E_AUDIENCE`` reports).
    executor: str
    #: When the executor refused (its clock), and when the checkpoint recorded it (ours).
    at: int
    reported_at: int


class ArgumentChangeOut(_Out):
    argument: str
    was: Any
    now: Any


class EditOut(_Out):
    """How this proposal came to be: a person's edit of another one's arguments."""

    #: The proposal it was edited from (now withdrawn, its ``superseded_by`` this one).
    supersedes: str
    by: str
    note: str
    at: int
    #: The arguments whose values changed, in the call's order.
    changes: list[ArgumentChangeOut]


class RouteOut(_Out):
    """Who a routed proposal is asked of (docs/notifications.md#routing-slas-and-escalation)."""

    #: The groups in the order they are asked.
    groups: list[str]
    #: How far it was escalated: ``groups[: level + 1]`` have been asked so far.
    level: int
    #: Seconds each group has before the next is asked; null when the rule sets none.
    sla: int | None
    #: When the next group is asked if nobody answers; null when no group is left to ask.
    due_at: int | None
    #: Whether the caller is a member of a group asked so far, now: a routed proposal's
    #: vote or edit by anyone else is refused ``E_FORBIDDEN`` (the role still applies).
    may_vote: bool


class ProposalOut(_Out):
    id: str
    state: ProposalState
    action_hash: str
    #: The canonical (RFC 8785) action text exactly as hashed and signed.
    action_jcs: str
    action: dict[str, Any]
    provider: str
    account: str
    region: str
    resource_type: str
    resource_id: str
    operation: str
    risk: Literal["low", "medium", "high"]
    proposed_by: str
    submitted_by: str
    policy: PolicyOut
    deny_reason: str | None
    #: ``airlock.action/v1`` or ``airlock.tool-call/v1``. For a tool call the cloud
    #: fields read: provider "", account = audience, region "", resource_type
    #: "tool-call", resource_id = target, operation = tool.
    action_type: Literal["airlock.action/v1", "airlock.tool-call/v1"] = "airlock.action/v1"
    #: A tool call's tool, target, effect key, audience and summary (null for a cloud action).
    tool: str | None = None
    target: str | None = None
    effect_key: str | None = None
    audience: str | None = None
    summary: str | None = None
    votes: list[VoteOut]
    votes_needed: int
    approval_deadline: int
    created_at: int
    updated_at: int
    approval: ApprovalOut | None
    rejection: RejectionOut | None
    outcome: OutcomeOut | None
    #: Refusals before use that executors reported (``POST /v1/refusals``), oldest first.
    executor_refusals: list[ExecutorRefusalOut]
    #: On a tool call withdrawn by an edit: the proposal the edit made.
    superseded_by: str | None = None
    #: On the proposal an edit made: who edited what, from which proposal.
    edit: EditOut | None = None
    #: On a proposal routed to groups of people: who may approve it; null when it is not.
    route: RouteOut | None = None


class ProposalList(_Out):
    items: list[ProposalOut]
    #: Pass as ``before`` to get the next (older) page; null when there is none.
    next_before: str | None
    #: The ``state`` filter this answer applied, sorted, each once; null when none was.
    #: A client that asked for several states checks it: a checkpoint older than the
    #: repeatable ``state`` keeps only the last one given, and sends no ``states``.
    states: list[ProposalState] | None


class FeedItem(_Out):
    seq: int
    kind: Literal["approval", "revocation"]
    approval_id: str
    #: For ``approval``: ``{"action": b64(JCS(action)), "envelope": {...}}``.
    bundle: dict[str, Any] | None


class AuditHeadOut(_Out):
    """The last row of the checkpoint's audit chain: its ``seq`` and ``row_hash``."""

    seq: int
    hash: str


class ExecutorHeadOut(_Out):
    """The latest executor audit chain head a receipt brought the checkpoint (by the
    receipt's time, then seq), and that receipt's time (``at``, the executor's clock)."""

    seq: int
    hash: str
    at: int


class FeedOut(_Out):
    items: list[FeedItem]
    cursor: int
    #: The checkpoint chain's head, read in the snapshot the items were read in, so it
    #: covers the issue and revocation events of every item. The executor records it in
    #: its own chain (``executor.checkpoint_head``), which anchors this chain there for
    #: ``airlock audit reconcile``. Added after version 1's first feed: executors must
    #: not require it.
    audit_head: AuditHeadOut
    #: The feed's last ``seq`` in the same snapshot. Below the ``after`` asked for, it
    #: tells the executor that this feed went back (the database was restored from a
    #: backup or reset), so its cursor must follow or new approvals would be skipped.
    #: Added after version 1's first feed: executors must not require it.
    feed_head: int
    #: The latest executor chain head a receipt named (by receipt time, then seq; none
    #: before the first): an executor whose own chain does not hold it has a ledger that
    #: went back (restored from a backup, or replaced) and may have forgotten approvals
    #: it used.
    #: Added after version 1's first feed: executors must not require it.
    executor_head: ExecutorHeadOut | None = None


class AuditOut(_Out):
    ok: bool
    rows: int
    head_seq: int | None
    head_hash: str | None
    fault: str | None
