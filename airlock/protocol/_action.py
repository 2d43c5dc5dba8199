"""The proposed action, v1 (docs/protocol.md#action): one operation on one resource.

An action that exists is valid: its resource id matches the provider's id format, its
operation is on the allowlist for its resource type, and its params match that
operation's schema. Nothing here reads a clock or does I/O.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal
from typing import Annotated, Any, Final, Literal, get_args

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
    "CURRENCY_EXPONENTS",
    "HIGH_RISK_OPERATIONS",
    "HOURS_PER_MONTH",
    "MAX_HOURLY_MICROS",
    "PROVIDER_RESOURCE_TYPES",
    "VALID_CALLS",
    "Precondition",
    "ProposedAction",
    "Provider",
    "Resource",
    "ResourceType",
    "Saving",
    "action_hash",
    "check_operation",
    "check_target",
    "monthly_minor",
]

ACTION_TYPE: Final = "airlock.action/v1"
#: docs/protocol.md#strict-json: an action is at most 16 KiB canonical.
ACTION_MAX_BYTES: Final = 16 * 1024

ResourceType = Literal["ecs.instance", "ec2.instance", "rds.instance"]
Provider = Literal["alibaba", "aws"]

#: Which resource types each provider has. ``rds.instance`` names a database instance at
#: either; its id format is the provider's own.
PROVIDER_RESOURCE_TYPES: Final[dict[str, frozenset[str]]] = {
    "alibaba": frozenset({"ecs.instance", "rds.instance"}),
    "aws": frozenset({"ec2.instance", "rds.instance"}),
}

# Provider id formats. ASCII only: a Cyrillic "і" can never stand in for "i".
_RESOURCE_ID_PATTERNS: Final[dict[tuple[str, str], re.Pattern[str]]] = {
    ("alibaba", "ecs.instance"): re.compile(r"i-[0-9a-z]{4,64}"),
    ("alibaba", "rds.instance"): re.compile(r"(rm|pgm|pc)-[0-9a-z]{4,64}"),
    # EC2: "i-" and 8 (older) or 17 lower-case hex digits.
    ("aws", "ec2.instance"): re.compile(r"i-([0-9a-f]{8}|[0-9a-f]{17})"),
    # RDS DBInstanceIdentifier: 1-63 letters, digits or hyphens, a letter first, no two
    # hyphens together, none last; AWS stores it lower case, so only lower case is valid.
    ("aws", "rds.instance"): re.compile(r"(?=.{1,63}\Z)[a-z](-?[a-z0-9])*"),
}
#: The id formats of each resource type, whichever provider's (a Resource alone).
_ID_PATTERNS_BY_TYPE: Final[dict[str, tuple[re.Pattern[str], ...]]] = {
    rtype: tuple(p for (_, t), p in _RESOURCE_ID_PATTERNS.items() if t == rtype)
    for rtype in get_args(ResourceType)
}
#: Account and region formats per provider (the shared field patterns bound them first).
_ACCOUNT_PATTERNS: Final[dict[str, re.Pattern[str]]] = {
    "alibaba": re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}"),
    "aws": re.compile(r"[0-9]{12}"),
}
_REGION_PATTERNS: Final[dict[str, re.Pattern[str]]] = {
    "alibaba": re.compile(r"[a-z0-9]+(-[a-z0-9]+){0,5}"),
    # us-east-1, ap-southeast-2, us-gov-west-1, cn-north-1, us-isob-east-1.
    "aws": re.compile(r"[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]{1,2}"),
}


def check_target(
    provider: str, account: str, region: str, resource_type: str, resource_id: str
) -> None:
    """Raise ValueError unless the account, region, resource type and id are all in
    ``provider``'s formats: an ECS type at AWS, an RDS id of one provider at the other,
    a 10-digit AWS account are each refused."""
    types = PROVIDER_RESOURCE_TYPES.get(provider)
    if types is None:
        raise ValueError(f"provider {provider!r} is unknown")
    if _ACCOUNT_PATTERNS[provider].fullmatch(account) is None:
        raise ValueError(f"{account!r} is not a valid {provider} account")
    if _REGION_PATTERNS[provider].fullmatch(region) is None:
        raise ValueError(f"{region!r} is not a valid {provider} region")
    if resource_type not in types:
        raise ValueError(f"resource type {resource_type!r} does not exist at {provider}")
    if _RESOURCE_ID_PATTERNS[provider, resource_type].fullmatch(resource_id) is None:
        raise ValueError(f"{resource_id!r} is not a valid {provider} {resource_type} id")


class _EcsStopParams(WireModel):
    stopped_mode: Literal["StopCharging", "KeepCharging"]


class _NoParams(WireModel):
    pass


#: The allowlist: resource type -> operation -> params schema. Anything else is refused
#: everywhere (agent, checkpoint and executor all check it).
ALLOWED_OPERATIONS: Final[dict[str, dict[str, type[WireModel]]]] = {
    "ecs.instance": {"stop": _EcsStopParams, "delete": _NoParams},
    # EC2 stop has no params: the writer always stops with Hibernate and Force off.
    "ec2.instance": {"stop": _NoParams, "delete": _NoParams},
    "rds.instance": {"stop": _NoParams},
}

#: Operations that destroy data; policy treats them as high risk (quorum 2 + typed id).
HIGH_RISK_OPERATIONS: Final[frozenset[tuple[str, str]]] = frozenset(
    {("ecs.instance", "delete"), ("ec2.instance", "delete")}
)


#: Every valid (type, operation, params) call, enumerated. The params schemas are closed
#: (enums, or empty), so membership is the whole check on the hot path; the schemas stay
#: the documented shape and give the error messages. A test keeps the two in step.
VALID_CALLS: Final[frozenset[tuple[str, str, tuple[tuple[str, Any], ...]]]] = frozenset(
    {
        ("ecs.instance", "stop", (("stopped_mode", "StopCharging"),)),
        ("ecs.instance", "stop", (("stopped_mode", "KeepCharging"),)),
        ("ecs.instance", "delete", ()),
        ("ec2.instance", "stop", ()),
        ("ec2.instance", "delete", ()),
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
        # The id in some provider's format for the type; the action and the statement
        # check it against their own provider (check_target).
        for pattern in _ID_PATTERNS_BY_TYPE[self.type]:
            if pattern.fullmatch(self.id) is not None:
                return self
        raise ValueError(f"{self.id!r} is not a valid {self.type} id")


class Precondition(WireModel):
    """What must still hold at execution time; the executor re-reads and compares."""

    status: Annotated[str, Field(pattern=r"^[A-Za-z]{1,32}$")]
    absent_tags: Annotated[tuple[Text, ...], Field(strict=False, max_length=32)]
    observed_at: Rfc3339Utc


#: ISO 4217 currencies a saving may be stated in, with their minor-unit exponents.
CURRENCY_EXPONENTS: Final[dict[str, int]] = {"USD": 2, "CNY": 2, "EUR": 2, "JPY": 0}
#: Hours in the estimate's month: 8760 / 12.
HOURS_PER_MONTH: Final = 730
#: The largest hourly price a saving may state, in millionths (a million a hour).
MAX_HOURLY_MICROS: Final = 10**12
_MICROS: Final = 1_000_000


class Saving(WireModel):
    """``evidence["saving"]``: the estimated monthly saving, signed with the action.

    Integers only (docs/protocol.md#strict-json): ``hourly_price_micros`` is the
    pay-as-you-go price per hour of the instance type's compute as the provider quoted it,
    in millionths of the currency unit; ``monthly_minor`` is what the action saves per month, in the
    currency's minor units (cents). ``basis`` says what is saved: ``compute`` (the price
    stops: a stop that stops billing) or ``none`` (nothing Airlock prices stops: a stop
    that keeps charging, a delete whose compute the stop before it saved already). The
    figure must follow from the price: ``monthly_minor`` is ``hourly_price_micros`` ×
    ``hours_per_month`` in minor units, rounded half up, for ``compute``, and 0 for
    ``none``; anything else is refused, so the number a person reads is the price signed.
    """

    currency: Annotated[str, Field(pattern=r"^[A-Z]{3}$")]
    monthly_minor: Annotated[int, Field(ge=0, le=MAX_SAFE_INTEGER)]
    hourly_price_micros: Annotated[int, Field(ge=0, le=MAX_HOURLY_MICROS)]
    hours_per_month: Literal[730]
    basis: Literal["compute", "none"]
    #: Where the price was read, e.g. ``ecs:DescribePrice``.
    source: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}$")]

    @model_validator(mode="after")
    def _consistent(self) -> Saving:
        exponent = CURRENCY_EXPONENTS.get(self.currency)
        if exponent is None:
            raise ValueError(
                f"currency {self.currency!r} is not one of {sorted(CURRENCY_EXPONENTS)}"
            )
        if self.monthly_minor != monthly_minor(
            self.hourly_price_micros if self.basis == "compute" else 0, self.currency
        ):
            raise ValueError("monthly_minor does not follow from hourly_price_micros and basis")
        return self


def monthly_minor(hourly_price_micros: int, currency: str) -> int:
    """A month (:data:`HOURS_PER_MONTH`) of an hourly price, in minor units, half up."""
    exponent = CURRENCY_EXPONENTS[currency]
    exact = Decimal(hourly_price_micros * HOURS_PER_MONTH * 10**exponent) / _MICROS
    return int(exact.to_integral_value(ROUND_HALF_UP))


class ProposedAction(WireModel):
    type: Literal["airlock.action/v1"]
    proposal_id: Annotated[str, Field(pattern=r"^prop_[A-Za-z0-9_-]{8,80}$")]
    provider: Provider
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
        check_target(self.provider, self.account, self.region, self.resource.type, self.resource.id)
        if info.context is not PARSED_STRICTLY:
            for name, value in (("params", self.params), ("evidence", self.evidence)):
                try:
                    check_no_floats(value)
                    check_tree(value, nfc=True)
                except ValueError as exc:
                    raise ValueError(f"{name}: {exc}") from None
        check_operation(self.resource.type, self.operation, self.params)
        if "saving" in self.evidence:
            self._saving()
        return self

    def _saving(self) -> Saving:
        try:
            return Saving.model_validate(self.evidence["saving"])
        except ValidationError as exc:
            raise ValueError(f"evidence.saving: {_first_error(exc)}") from None

    @property
    def saving(self) -> Saving | None:
        """The signed saving estimate (``evidence["saving"]``), or None when there is none."""
        return self._saving() if "saving" in self.evidence else None

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
