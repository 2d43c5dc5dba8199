"""The proposed action, v1 (docs/protocol.md#action): one operation on one resource.

An action that exists is valid: its resource id matches the provider's id format, its
operation is on the allowlist for its resource type, and its params match that
operation's schema. Nothing here reads a clock or does I/O.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal

from pydantic import Field, ValidationError, ValidationInfo, model_validator

from ._common import (
    ID,
    AccountId,
    RegionId,
    Rfc3339Utc,
    Text,
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
    plain_text,
)
from .errors import RefusalCode, Refused

__all__ = [
    "ACTION_MAX_BYTES",
    "ACTION_TYPE",
    "ALLOWED_OPERATIONS",
    "HIGH_RISK_OPERATIONS",
    "VALID_CALLS",
    "Precondition",
    "ProposedAction",
    "Resource",
    "action_hash",
    "check_operation",
]

ACTION_TYPE: Final = "airlock.action/v1"
#: docs/protocol.md#strict-json: an action is at most 16 KiB canonical.
ACTION_MAX_BYTES: Final = 16 * 1024

ResourceType = Literal["ecs.instance", "rds.instance"]

# Provider id formats. ASCII only: a Cyrillic "і" can never stand in for "i".
_RESOURCE_ID_PATTERNS: Final[dict[str, re.Pattern[str]]] = {
    "ecs.instance": re.compile(r"i-[0-9a-z]{4,64}"),
    "rds.instance": re.compile(r"(rm|pgm|pc)-[0-9a-z]{4,64}"),
}


class _EcsStopParams(WireModel):
    stopped_mode: Literal["StopCharging", "KeepCharging"]


class _NoParams(WireModel):
    pass


#: The allowlist: resource type -> operation -> params schema. Anything else is refused
#: everywhere (agent, checkpoint and executor all check it).
ALLOWED_OPERATIONS: Final[dict[str, dict[str, type[WireModel]]]] = {
    "ecs.instance": {"stop": _EcsStopParams, "delete": _NoParams},
    "rds.instance": {"stop": _NoParams},
}

#: Operations that destroy data; policy treats them as high risk (quorum 2 + typed id).
HIGH_RISK_OPERATIONS: Final[frozenset[tuple[str, str]]] = frozenset({("ecs.instance", "delete")})


#: Every valid (type, operation, params) call, enumerated. The params schemas are closed
#: (enums, or empty), so membership is the whole check on the hot path; the schemas stay
#: the documented shape and give the error messages. A test keeps the two in step.
VALID_CALLS: Final[frozenset[tuple[str, str, tuple[tuple[str, Any], ...]]]] = frozenset(
    {
        ("ecs.instance", "stop", (("stopped_mode", "StopCharging"),)),
        ("ecs.instance", "stop", (("stopped_mode", "KeepCharging"),)),
        ("ecs.instance", "delete", ()),
        ("rds.instance", "stop", ()),
    }
)


def check_operation(resource_type: str, operation: str, params: dict[str, Any]) -> None:
    """Raise ValueError unless ``operation`` is allowlisted for the type and params fit."""
    try:
        if (resource_type, operation, tuple(sorted(params.items()))) in VALID_CALLS:
            return
    except TypeError:  # an unhashable or unorderable value: certainly not valid
        pass
    allowed = ALLOWED_OPERATIONS.get(resource_type)
    if allowed is None:
        raise ValueError(f"resource type {resource_type!r} is not supported")
    schema = allowed.get(operation)
    if schema is None:
        raise ValueError(f"operation {operation!r} is not allowed on {resource_type}")
    try:
        schema.model_validate(params)
    except ValidationError as exc:
        raise ValueError(f"params for {resource_type} {operation}: {_first_error(exc)}") from None
    # Valid for the schema but not enumerated: the two disagree, so fail closed.
    raise ValueError(f"params for {resource_type} {operation} are not an enumerated call")


class Resource(WireModel):
    type: ResourceType
    id: Annotated[str, Field(max_length=80)]

    @model_validator(mode="after")
    def _id_format(self) -> Resource:
        if _RESOURCE_ID_PATTERNS[self.type].fullmatch(self.id) is None:
            raise ValueError(f"{self.id!r} is not a valid {self.type} id")
        return self


class Precondition(WireModel):
    """What must still hold at execution time; the executor re-reads and compares."""

    status: Annotated[str, Field(pattern=r"^[A-Za-z]{1,32}$")]
    absent_tags: Annotated[tuple[Text, ...], Field(strict=False, max_length=32)]
    observed_at: Rfc3339Utc


class ProposedAction(WireModel):
    type: Literal["airlock.action/v1"]
    proposal_id: Annotated[str, Field(pattern=r"^prop_[A-Za-z0-9_-]{8,80}$")]
    provider: Literal["alibaba"]
    account: AccountId
    region: RegionId
    resource: Resource
    operation: Annotated[str, Field(pattern=r"^[a-z_]{1,32}$")]
    params: dict[str, Any]
    precondition: Precondition
    evidence: dict[str, Any]
    reason: Annotated[Text, Field(min_length=1, max_length=2000)]
    proposed_by: ID
    created_at: Rfc3339Utc

    @model_validator(mode="after")
    def _checked(self, info: ValidationInfo) -> ProposedAction:
        # params and evidence are open-ended but signed: float-free, NFC, no surrogates.
        # Values that came out of loads_strict were checked there already (one walk, not
        # two). One validator for both and the allowlist: each is a call out of the core.
        if info.context is not PARSED_STRICTLY:
            for name, value in (("params", self.params), ("evidence", self.evidence)):
                try:
                    check_no_floats(value)
                    check_tree(value, nfc=True)
                except ValueError as exc:
                    raise ValueError(f"{name}: {exc}") from None
        check_operation(self.resource.type, self.operation, self.params)
        return self

    @property
    def is_high_risk(self) -> bool:
        return (self.resource.type, self.operation) in HIGH_RISK_OPERATIONS

    def canonical_bytes(self) -> bytes:
        """RFC 8785 bytes: what is hashed, signed over, and carried in the bundle."""
        data = canonical_bytes(self.model_dump(mode="json"))
        if len(data) > ACTION_MAX_BYTES:
            raise Refused(RefusalCode.E_SIZE, f"action is {len(data)} bytes canonical")
        return data

    def action_hash(self) -> str:
        return action_hash(self.canonical_bytes())

    @classmethod
    def from_json_bytes(cls, data: bytes) -> ProposedAction:
        """Strictly parse untrusted bytes into an action, or raise :class:`Refused`.

        E_SIZE/E_PARSE for the bytes, E_OPERATION when only the operation or its params
        are wrong, E_PARSE for any other invalid field.
        """
        return parse_action_value(loads_strict(data, max_bytes=ACTION_MAX_BYTES))


def parse_action_value(value: Any) -> ProposedAction:
    """Validate a value that :func:`loads_strict` returned (and nothing else)."""
    try:
        return ProposedAction.model_validate(value, context=PARSED_STRICTLY)
    except ValidationError as exc:
        locs = {err["loc"][0] if err["loc"] else "" for err in exc.errors()}
        if locs <= {"operation", "params", ""} and _is_operation_error(exc):
            raise Refused(RefusalCode.E_OPERATION, _first_error(exc)) from None
        raise Refused(RefusalCode.E_PARSE, f"not a valid action: {_first_error(exc)}") from None


def _is_operation_error(exc: ValidationError) -> bool:
    return all(
        (err["loc"] and err["loc"][0] in ("operation", "params"))
        or "not allowed" in err["msg"]
        or "params for" in err["msg"]
        for err in exc.errors()
    )


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(part) for part in err["loc"]) or "action"
    return f"{where}: {err['msg']}"


def action_hash(action_bytes: bytes) -> str:
    """``action_hash = "sha256:" + hex(SHA-256(JCS(action)))`` over the bytes as given."""
    return sha256_tag(action_bytes)


#: Keys of a valid action outside params and evidence: 13 at the top, 2 in resource and 3
#: in precondition. Every field is required and unknown fields are refused.
_FIXED_KEYS: Final = len(ProposedAction.model_fields) + 2 + 3
#: Deepest container a plain action may hold, counting the action itself as 0: below
#: loads_strict's limit, so nothing accepted here is refused for depth there.
_PLAIN_MAX_DEPTH: Final = 30


def _plain_keys(value: Any, depth: int) -> int | None:
    """Keys in a float-free value of safe integers nested within the limit, else None."""
    if depth > _PLAIN_MAX_DEPTH:
        return None
    kind = type(value)
    if kind is dict:
        total = len(value)
        items = value.values()
    elif kind is list:
        total = 0
        items = value
    else:
        return None
    for item in items:
        kind = type(item)
        if kind is int:
            if not -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                return None
        elif kind is dict or kind is list:
            keys = _plain_keys(item, depth + 1)
            if keys is None:
                return None
            total += keys
        elif not (kind is str or kind is bool or item is None):
            return None
    return total


def parse_plain_action(data: bytes) -> ProposedAction | None:
    """A valid action in plain text (as the agent's checkpoint writes it), else None.

    Steps (11) of verify_bundle in one pass with pydantic's JSON parser, which keeps the
    last of duplicate keys, and so only where this provably gives what loads_strict and
    :func:`parse_action_value` give: the text is printable ASCII with no backslash (so
    no escapes or control characters, every string NFC, every `"` a string delimiter)
    and no space between tokens; params and evidence hold no float, no integer beyond
    2^53 and nothing nested too deep; and the text holds exactly as many keys (a `:`
    outside strings) as the validated action has, so none is repeated. None sends the
    bytes to the strict path, which decides.
    """
    text = plain_text(data, max_bytes=ACTION_MAX_BYTES)
    if text is None:
        return None
    # With no backslash, the text alternates between what is outside strings and what is
    # inside them at every '"'.
    outside = "".join(text.split('"')[0::2])
    if " " in outside:
        return None
    try:
        action = ProposedAction.model_validate_json(data, context=PARSED_STRICTLY)
    except ValidationError:
        return None
    params = _plain_keys(action.params, 1)
    evidence = _plain_keys(action.evidence, 1)
    if params is None or evidence is None:
        return None
    if outside.count(":") != _FIXED_KEYS + params + evidence:
        return None
    return action
