"""The tool call, v1 (docs/protocol.md#tool-call), and the statement that approves one.

A tool call is one call of a named function, in the caller's own process, on one
target, for one business effect. It is hashed, signed and carried exactly as a cloud
action is (docs/protocol.md#action): the same strict JSON, the same RFC 8785 bytes, the
same ``action_hash`` and the same DSSE payload type. What differs is what the approval
binds: the tool, its target and its effect key, for one gate's audience, in place of
the provider, account, region, resource and operation of a cloud action.

A tool call that exists is valid: its arguments are a float-free JSON object of NFC
text within the size and depth caps, its premises are scalars, its summary is one
printable line. Nothing here reads a clock or does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, NamedTuple

from pydantic import AfterValidator, Field, ValidationError, ValidationInfo, model_validator

from ._approval import APPROVAL_ID_PATTERN, Approver, PolicyRef
from ._common import (
    DEFAULT_MAX_TTL,
    DEFAULT_SKEW,
    ID,
    Hash,
    Rfc3339Utc,
    Text,
    UnixTime,
    WireModel,
    sha256_tag,
)
from ._json import (
    MAX_SAFE_INTEGER,
    PARSED_STRICTLY,
    canonical_bytes,
    check_no_floats,
    check_tree,
    loads_strict,
)
from .errors import RefusalCode, Refused

__all__ = [
    "ARGUMENTS_MAX_BYTES",
    "ARGUMENTS_MAX_DEPTH",
    "TOOL_APPROVAL_TYPE",
    "TOOL_CALL_MAX_BYTES",
    "TOOL_CALL_TYPE",
    "ToolApprovalStatement",
    "ToolBinding",
    "ToolCall",
    "VerifiedToolCall",
    "parse_tool_call_value",
]

TOOL_CALL_TYPE: Final = "airlock.tool-call/v1"
TOOL_APPROVAL_TYPE: Final = "airlock.tool-call-approval/v1"
#: A tool call is at most 16 KiB canonical, as a cloud action is.
TOOL_CALL_MAX_BYTES: Final = 16 * 1024
#: The arguments object alone is at most 8 KiB canonical ...
ARGUMENTS_MAX_BYTES: Final = 8 * 1024
#: ... and nests at most 8 containers deep, the object itself counted as 1.
ARGUMENTS_MAX_DEPTH: Final = 8
_PREMISES_MAX: Final = 32
_STATEMENT_MAX_BYTES: Final = 16 * 1024

#: The risks a statement names; a tool call declares its own from the same three.
Risk = Literal["low", "medium", "high"]


def _printable_line(text: str) -> str:
    # str.isprintable is False for every control (C0, C1), format (bidi overrides and
    # isolates), line or paragraph separator and non-space blank: none of them may
    # redraw, reorder or split the line a person approves (airlock/text.py says how).
    if not text.isprintable():
        raise ValueError("must be one line of printable characters")
    return text


#: MCP's tool name alphabet, ASCII only, at most 64 characters.
ToolName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")]
#: What a person reads and, for high risk, types: printable ASCII (no homoglyphs), no
#: space at either end, at most 100 characters.
Target = Annotated[str, Field(pattern=r"^[!-~]([ -~]{0,98}[!-~])?$")]
#: The business identity of the effect: printable ASCII without spaces.
EffectKey = Annotated[str, Field(pattern=r"^[!-~]{1,200}$")]
Audience = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")]
ProposalId = Annotated[str, Field(pattern=r"^prop_[A-Za-z0-9_-]{8,80}$")]
PremiseName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")]
PremiseValue = (
    Annotated[int, Field(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)]
    | bool
    | Annotated[Text, Field(max_length=1000)]
    | None
)
Summary = Annotated[Text, Field(min_length=1, max_length=200), AfterValidator(_printable_line)]


def _depth(value: Any) -> int:
    """Containers on the deepest path through ``value`` (a scalar is 0)."""
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


class ToolCall(WireModel):
    """``airlock.tool-call/v1``: one call of ``tool`` on ``target``, for ``effect_key``."""

    type: Literal["airlock.tool-call/v1"]
    proposal_id: ProposalId
    tool: ToolName
    arguments: dict[str, Any]
    target: Target
    effect_key: EffectKey
    premises: Annotated[dict[PremiseName, PremiseValue], Field(max_length=_PREMISES_MAX)]
    risk: Risk
    summary: Summary
    audience: Audience
    proposed_by: ID
    created_at: Rfc3339Utc

    @model_validator(mode="after")
    def _arguments(self, info: ValidationInfo) -> ToolCall:
        # Open-ended but signed: float-free, NFC, no surrogates (values that came out of
        # loads_strict were checked there), then the tool call's own caps on top.
        if info.context is not PARSED_STRICTLY:
            try:
                check_no_floats(self.arguments)
                check_tree(self.arguments, nfc=True)
            except ValueError as exc:
                raise ValueError(f"arguments: {exc}") from None
        if _depth(self.arguments) > ARGUMENTS_MAX_DEPTH:
            raise ValueError(f"arguments nest deeper than {ARGUMENTS_MAX_DEPTH}")
        size = len(canonical_bytes(self.arguments))
        if size > ARGUMENTS_MAX_BYTES:
            raise ValueError(f"arguments are {size} bytes canonical, cap {ARGUMENTS_MAX_BYTES}")
        return self

    @property
    def is_high_risk(self) -> bool:
        return self.risk == "high"

    def canonical_bytes(self) -> bytes:
        """RFC 8785 bytes: what is hashed, signed over, and carried in the bundle."""
        data = canonical_bytes(self.model_dump(mode="json"))
        if len(data) > TOOL_CALL_MAX_BYTES:
            raise Refused(RefusalCode.E_SIZE, f"tool call is {len(data)} bytes canonical")
        return data

    def action_hash(self) -> str:
        """``"sha256:" + hex(SHA-256(JCS(tool call)))``, as for a cloud action."""
        return sha256_tag(self.canonical_bytes())

    @classmethod
    def from_json_bytes(cls, data: bytes) -> ToolCall:
        """Strictly parse untrusted bytes into a tool call, or raise :class:`Refused`.

        E_SIZE/E_PARSE for the bytes, E_OPERATION when only the tool or its arguments
        are wrong, E_PARSE for any other invalid field.
        """
        return parse_tool_call_value(loads_strict(data, max_bytes=TOOL_CALL_MAX_BYTES))


def parse_tool_call_value(value: Any) -> ToolCall:
    """Validate a value that :func:`loads_strict` returned (and nothing else)."""
    try:
        return ToolCall.model_validate(value, context=PARSED_STRICTLY)
    except ValidationError as exc:
        # E_OPERATION when every error is the tool's or its arguments' (the arguments'
        # caps are checked in the model validator, whose errors have no location).
        if all(
            (err["loc"] and err["loc"][0] in ("tool", "arguments"))
            or (not err["loc"] and "arguments" in err["msg"])
            for err in exc.errors()
        ):
            raise Refused(RefusalCode.E_OPERATION, _first_error(exc)) from None
        raise Refused(RefusalCode.E_PARSE, f"not a valid tool call: {_first_error(exc)}") from None


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(part) for part in err["loc"]) or "tool call"
    return f"{where}: {err['msg']}"


class ToolApprovalStatement(WireModel):
    """``airlock.tool-call-approval/v1``: what the checkpoint signs for a tool call.

    The fields of ``airlock.approval/v1`` with the cloud binding (provider, account,
    region, resource, operation) replaced by the tool call's: ``tool``, ``target`` and
    ``effect_key``. Carried in the same DSSE payload type; its ``type`` says which.
    """

    type: Literal["airlock.tool-call-approval/v1"]
    approval_id: Annotated[str, Field(pattern=APPROVAL_ID_PATTERN)]
    proposal_id: ProposalId
    action_hash: Hash
    tool: ToolName
    target: Target
    effect_key: EffectKey
    audience: Audience
    nonce: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]
    issued_at: UnixTime
    not_before: UnixTime
    expires_at: UnixTime
    approvers: Annotated[tuple[Approver, ...], Field(strict=False, min_length=1, max_length=16)]
    quorum: Annotated[int, Field(ge=1, le=16)]
    policy: PolicyRef
    risk: Risk

    @model_validator(mode="after")
    def _consistent(self) -> ToolApprovalStatement:
        ids = [a.id for a in self.approvers]
        if len(set(ids)) != len(ids):
            raise ValueError("an approver appears twice")
        if len(ids) < self.quorum:
            raise ValueError(f"{len(ids)} approvers do not meet quorum {self.quorum}")
        return self

    def canonical_bytes(self) -> bytes:
        """RFC 8785 bytes: the DSSE payload."""
        return canonical_bytes(self.model_dump(mode="json"))

    @classmethod
    def from_json_bytes(cls, data: bytes) -> ToolApprovalStatement:
        """Strictly parse a statement payload, or raise :class:`Refused` (E_STATEMENT)."""
        try:
            value: Any = loads_strict(data, max_bytes=_STATEMENT_MAX_BYTES)
        except Refused as exc:
            raise Refused(RefusalCode.E_STATEMENT, exc.detail) from None
        try:
            return cls.model_validate(value, context=PARSED_STRICTLY)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "statement"
            raise Refused(RefusalCode.E_STATEMENT, f"{where}: {err['msg']}") from None


@dataclass(frozen=True, slots=True)
class ToolBinding:
    """Who this gate is: a tool-call approval must name exactly this audience.

    A tool call runs in the caller's process, not in a cloud account: the audience is
    the whole binding (docs/protocol.md#tool-call-checks: step 7 has nothing to check).
    """

    audience: str
    max_ttl: int = DEFAULT_MAX_TTL
    skew: int = DEFAULT_SKEW

    def __post_init__(self) -> None:
        if self.max_ttl <= 0 or self.skew < 0:
            raise ValueError("max_ttl must be positive and skew not negative")


class VerifiedToolCall(NamedTuple):
    """A tool-call approval that passed steps 1–12; only ``verify_bundle`` builds one."""

    statement: ToolApprovalStatement
    action: ToolCall
    action_bytes: bytes
    action_hash: str
    keyid: str
    payload: bytes
