"""The checkpoint's answers as its clients read them (the CLI, the web app, the agent,
the executor): a login, the proposal records and the executor's feed page; and the one
request body the executor sends (a receipt report).

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

from collections.abc import Sequence
from typing import Annotated, Any, Final

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)

from airlock.protocol import RECEIPT_MAX_BYTES, Refused, canonical_bytes, loads_strict

__all__ = [
    "BODY_MAX_BYTES",
    "OUTCOMES_PATH",
    "RECEIPTS_MAX",
    "RECEIPTS_PATH",
    "REFUSALS_PATH",
    "Approval",
    "ApproveRequest",
    "ArgumentChange",
    "ChainHead",
    "Edit",
    "EditRequest",
    "ExecutorHead",
    "ExecutorRefusal",
    "ExecutorResolution",
    "FeedItem",
    "FeedPage",
    "LoginAnswer",
    "NoteRequest",
    "Outcome",
    "Policy",
    "Proposal",
    "ProposalPage",
    "ReceiptAnswer",
    "ReceiptAnswers",
    "ReceiptEnvelope",
    "ReceiptError",
    "ReceiptReport",
    "ReceiptSignature",
    "RejectRequest",
    "Rejection",
    "ResolveRequest",
    "Route",
    "Vote",
    "receipts_body",
    "request_body",
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


class ArgumentChange(_Answer):
    """One argument an edit changed: its value before and after."""

    argument: str
    was: Any
    now: Any


class Edit(_Answer):
    """How a proposal came to be: a person edited a tool call's arguments, which made
    this new proposal and withdrew the one it ``supersedes``."""

    supersedes: str
    by: str
    note: str
    at: int
    changes: list[ArgumentChange]


class Route(_Answer):
    """Who a routed proposal is asked of (docs/notifications.md#routing-slas-and-escalation):
    the checkpoint's word, shown to a person; the checkpoint still judges each vote."""

    groups: list[str]
    #: ``groups[: level + 1]`` have been asked so far.
    level: int
    sla: int | None
    #: When the next group is asked if nobody answers; None when no group is left.
    due_at: int | None
    #: Whether the caller is, now, in a group asked so far (their role still applies).
    may_vote: bool

    @property
    def asked(self) -> list[str]:
        return self.groups[: self.level + 1]


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
    #: ``airlock.action/v1`` or ``airlock.tool-call/v1`` (absent before tool calls). For a
    #: tool call the cloud fields read: provider "", account = audience, region "",
    #: resource_type "tool-call", resource_id = target, operation = tool.
    action_type: str = "airlock.action/v1"
    #: A tool call's own fields, the checkpoint's word like the cloud ones (None for a
    #: cloud action, and from a checkpoint before tool calls).
    tool: str | None = None
    target: str | None = None
    effect_key: str | None = None
    audience: str | None = None
    summary: str | None = None
    #: On a tool call withdrawn by an edit: the proposal the edit made, which a gate
    #: waiting on this one follows. Absent from a checkpoint before edits (migration 0009).
    superseded_by: str | None = None
    #: On the proposal an edit made: who edited what. Absent before edits.
    edit: Edit | None = None
    #: Routed to groups of people: who may approve it. None when it is not routed, and
    #: from a checkpoint before routes were shown.
    route: Route | None = None

    @property
    def is_tool_call(self) -> bool:
        return self.action_type == "airlock.tool-call/v1"


class ProposalPage(_Answer):
    """``GET /v1/proposals``: one page, newest first."""

    items: list[Proposal]
    next_before: str | None
    #: The state filter the checkpoint applied, sorted (null: none). Absent from a
    #: checkpoint older than the repeatable ``state``, which keeps only the last one.
    states: list[str] | None = None


# -- the executor's feed (GET /v1/feed) ---------------------------------------------------


def _absent_if_malformed(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """A field that is evidence, never a condition: malformed, it reads as absent."""
    try:
        return handler(value)
    except ValidationError:
        return None


#: A field added after version 1's first feed, or an item the reader judges in order:
#: read as None when malformed rather than refusing the page.
_Lenient = WrapValidator(_absent_if_malformed)
_Hex64 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
_Seq = Annotated[StrictInt, Field(ge=0)]


class ChainHead(_Answer):
    """A feed page's ``audit_head``: the checkpoint chain's last row (its ``row_hash``)."""

    seq: _Seq
    hash: _Hex64


class ExecutorHead(_Answer):
    """A feed page's ``executor_head``: the executor chain's head as the receipt the
    checkpoint accepted last named it, and that receipt's time (None if malformed)."""

    seq: _Seq
    hash: _Hex64
    at: Annotated[_Seq | None, _Lenient] = None


class FeedItem(_Answer):
    """One feed item. Only ``seq`` is required here: the reader skips an item of a kind
    it does not know, or a revocation naming no approval id, and hands an approval's
    ``bundle`` (whatever it is) to the verifier, which judges it; the feed is not
    authenticated, only what a bundle carries is."""

    seq: StrictInt
    kind: Any = None
    approval_id: Any = None
    #: For ``approval``: ``{"action": b64(JCS(action)), "envelope": {...}}``; present or
    #: not is ``"bundle" in item.model_fields_set``.
    bundle: Any = None

    @property
    def has_bundle(self) -> bool:
        return "bundle" in self.model_fields_set


class FeedPage(_Answer):
    """``GET /v1/feed``: the items after the cursor asked for, and where the feed is.

    An item that is not an object with an integer ``seq`` reads as None: the reader cuts
    the page before it. ``audit_head``, ``feed_head`` and ``executor_head`` came after
    version 1's first feed: absent or malformed, each is None (evidence, never a
    condition of executing)."""

    items: list[Annotated[FeedItem | None, _Lenient]]
    cursor: StrictInt
    audit_head: Annotated[ChainHead | None, _Lenient] = None
    feed_head: Annotated[_Seq | None, _Lenient] = None
    executor_head: Annotated[ExecutorHead | None, _Lenient] = None

    @property
    def has_approval(self) -> bool:
        return any(item is not None and item.kind == "approval" for item in self.items)


# -- what the executor reports (POST /v1/outcomes, POST /v1/refusals) ----------------------

#: Where an outcome's receipt goes; a refusal before the consume goes to REFUSALS_PATH.
OUTCOMES_PATH: Final = "/v1/outcomes"
REFUSALS_PATH: Final = "/v1/refusals"
#: Where a batch of both goes, one request for up to RECEIPTS_MAX of them.
RECEIPTS_PATH: Final = "/v1/receipts"
RECEIPTS_MAX: Final = 50
#: The largest request body the checkpoint reads: a batch is cut to fit it.
BODY_MAX_BYTES: Final = 128 * 1024


class _Request(BaseModel):
    # What this side sends: exactly the fields the checkpoint takes.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, populate_by_name=True)


class ReceiptSignature(_Request):
    keyid: str
    sig: str


class ReceiptEnvelope(_Request):
    """A receipt's DSSE envelope as it travels (base64 payload); the checkpoint verifies
    it (:func:`airlock.protocol.verify_receipt`)."""

    payload_type: str = Field(alias="payloadType")
    payload: str
    signatures: list[ReceiptSignature]


class ReceiptReport(_Request):
    """The body of ``POST /v1/outcomes`` and ``POST /v1/refusals``: one signed receipt."""

    receipt: ReceiptEnvelope

    @classmethod
    def of(cls, envelope_json: str) -> ReceiptReport:
        """The report of a receipt envelope stored as JSON text, or raise ValueError
        (not strict JSON, or not an envelope's shape)."""
        try:
            value = loads_strict(envelope_json.encode("utf-8"), max_bytes=2 * RECEIPT_MAX_BYTES)
        except Refused as exc:
            raise ValueError(f"not strict JSON: {exc.code.value}") from None
        try:
            return cls.model_validate({"receipt": value})
        except ValidationError as exc:
            raise ValueError(f"not a receipt envelope: {exc.error_count()} problems") from None

    def to_json_bytes(self) -> bytes:
        """The request body: RFC 8785 bytes."""
        return canonical_bytes(self.model_dump(mode="json", by_alias=True))

    def to_batch_item(self, kind: str) -> bytes:
        """One item of ``POST /v1/receipts`` (``kind``: ``outcome`` or ``refusal``), as
        RFC 8785 bytes; :func:`receipts_body` joins them."""
        return canonical_bytes({"kind": kind, **self.model_dump(mode="json", by_alias=True)})


def receipts_body(items: Sequence[bytes]) -> bytes:
    """The body of ``POST /v1/receipts`` from its items (:meth:`ReceiptReport.to_batch_item`):
    RFC 8785 bytes too, as ``receipts`` is its only key."""
    return b'{"receipts":[' + b",".join(items) + b"]}"


class ReceiptError(_Answer):
    code: str
    message: str


class ReceiptAnswer(_Answer):
    """One receipt's answer in ``POST /v1/receipts``: the status and, for a refusal, the
    ``error`` its own endpoint would have answered."""

    status: int
    error: ReceiptError | None = None


class ReceiptAnswers(_Answer):
    """``POST /v1/receipts``: an answer per receipt, in the order they were sent."""

    results: list[ReceiptAnswer]


# -- what a person's client sends (POST /v1/proposals/{id}/approve|edit|reject|…) ----------


class ApproveRequest(_Request):
    """``approve``: the hash of the action the person was shown, and for a high-risk
    operation the resource id they typed."""

    action_hash: str
    confirm: str | None = None
    note: str = ""


class EditRequest(_Request):
    """``edit``: the hash of the tool call the person was shown, the new values of some
    of its arguments (sent as ``set``), and the typed target when the policy asks."""

    action_hash: str
    set: dict[str, Any]
    note: str = ""
    confirm: str | None = None


class RejectRequest(_Request):
    reason_code: str
    note: str = ""


class NoteRequest(_Request):
    """``revoke`` and ``withdraw``: a note only."""

    note: str = ""


class ResolveRequest(_Request):
    decision: str
    note: str = ""


def request_body(request: _Request) -> dict[str, object]:
    """What a client sends as JSON for ``request`` (a field left None is not sent)."""
    return request.model_dump(mode="json", by_alias=True, exclude_none=True)
