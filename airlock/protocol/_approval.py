"""The approval statement, v1 (docs/protocol.md#approval): what the checkpoint signs.

A statement binds one approval to one action hash, one target, one executor audience and
one short validity window. It carries no secrets and is safe to log.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import Field, ValidationError, model_validator

from ._action import Provider, Resource, check_target
from ._common import ID, AccountId, Hash, RegionId, Text, UnixTime, WireModel
from ._json import PARSED_STRICTLY, canonical_bytes, loads_strict, plain_text
from .errors import RefusalCode, Refused

__all__ = [
    "APPROVAL_ID_PATTERN",
    "APPROVAL_PAYLOAD_TYPE",
    "APPROVAL_TYPE",
    "STATEMENT_MAX_BYTES",
    "ApprovalStatement",
    "Approver",
    "PolicyRef",
]

APPROVAL_TYPE: Final = "airlock.approval/v1"
APPROVAL_PAYLOAD_TYPE: Final = "application/vnd.airlock.approval.v1+json"
STATEMENT_MAX_BYTES: Final = 16 * 1024
#: What an approval id looks like (anchored; match it with ``re.fullmatch``). Anything
#: else can name no approval: a statement carrying it fails to parse (E_STATEMENT).
APPROVAL_ID_PATTERN: Final = r"^apv_[A-Za-z0-9_-]{8,80}$"


class Approver(WireModel):
    id: ID
    at: UnixTime


class PolicyRef(WireModel):
    rule: Annotated[Text, Field(min_length=1, max_length=128)]
    hash: Hash


class ApprovalStatement(WireModel):
    type: Literal["airlock.approval/v1"]
    approval_id: Annotated[str, Field(pattern=APPROVAL_ID_PATTERN)]
    proposal_id: Annotated[str, Field(pattern=r"^prop_[A-Za-z0-9_-]{8,80}$")]
    action_hash: Hash
    provider: Provider
    account: AccountId
    region: RegionId
    resource: Resource
    operation: Annotated[str, Field(pattern=r"^[a-z_]{1,32}$")]
    audience: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")]
    nonce: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]
    issued_at: UnixTime
    not_before: UnixTime
    expires_at: UnixTime
    approvers: Annotated[tuple[Approver, ...], Field(strict=False, min_length=1, max_length=16)]
    quorum: Annotated[int, Field(ge=1, le=16)]
    policy: PolicyRef
    risk: Literal["low", "medium", "high"]

    @model_validator(mode="after")
    def _consistent(self) -> ApprovalStatement:
        check_target(self.provider, self.account, self.region, self.resource.type, self.resource.id)
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
    def from_json_bytes(cls, data: bytes) -> ApprovalStatement:
        """Strictly parse a statement payload, or raise :class:`Refused` (E_STATEMENT)."""
        plain = _from_plain_text(data)
        if plain is not None:
            return plain
        try:
            value: Any = loads_strict(data, max_bytes=STATEMENT_MAX_BYTES)
        except Refused as exc:
            raise Refused(RefusalCode.E_STATEMENT, exc.detail) from None
        try:
            return cls.model_validate(value, context=PARSED_STRICTLY)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "statement"
            raise Refused(RefusalCode.E_STATEMENT, f"{where}: {err['msg']}") from None


#: Keys in a valid statement besides two per approver: 18 at the top, 2 in resource and 2
#: in policy. Every field is required and unknown fields are refused.
_FIXED_KEYS: Final = len(ApprovalStatement.model_fields) + 2 + 2


def _from_plain_text(data: bytes) -> ApprovalStatement | None:
    """A valid statement in plain text (as the checkpoint signs it), else None.

    Parses and validates in one pass with pydantic's JSON parser, which keeps the last of
    duplicate keys, and so only where this can be proven to give what the strict path
    gives: the text is printable ASCII with no backslash and no space (so no escapes,
    no control characters, no whitespace between tokens, every string NFC, every `"`
    a string delimiter), and it holds exactly as many keys (`":`) as the validated
    statement has, so none is repeated. Every statement field is typed, strict and
    bounded, so a float, NaN or an integer beyond 2^53 fails validation here as it
    fails loads_strict there. None sends the text to the strict path, which decides.
    """
    text = plain_text(data, max_bytes=STATEMENT_MAX_BYTES)
    if text is None or " " in text:
        return None
    try:
        statement = ApprovalStatement.model_validate_json(data, context=PARSED_STRICTLY)
    except ValidationError:
        return None
    if text.count('":') != _FIXED_KEYS + 2 * len(statement.approvers):
        return None
    return statement
