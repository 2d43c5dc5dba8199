"""ProposedAction v1 (docs/protocol.md#action): an action that exists is valid and allowlisted."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from airlock.protocol import (
    ALLOWED_OPERATIONS,
    HIGH_RISK_OPERATIONS,
    PROVIDER_RESOURCE_TYPES,
    ApprovalStatement,
    ProposedAction,
    RefusalCode,
    Refused,
    canonical_bytes,
)
from devstack import factory


def _refused_code(value: dict[str, Any]) -> RefusalCode:
    with pytest.raises(Refused) as err:
        ProposedAction.from_json_bytes(canonical_bytes(value))
    return err.value.code


def test_allowlist_is_exactly_the_documented_one() -> None:
    assert {t: set(ops) for t, ops in ALLOWED_OPERATIONS.items()} == {
        "ecs.instance": {"stop", "delete"},
        "ec2.instance": {"stop", "delete"},
        "rds.instance": {"stop"},
    }
    assert set(HIGH_RISK_OPERATIONS) == {("ecs.instance", "delete"), ("ec2.instance", "delete")}
    assert {p: set(t) for p, t in PROVIDER_RESOURCE_TYPES.items()} == {
        "alibaba": {"ecs.instance", "rds.instance"},
        "aws": {"ec2.instance", "rds.instance"},
    }


@pytest.mark.parametrize(
    ("resource", "operation", "params"),
    [
        ({"type": "ecs.instance", "id": "i-abcd1234"}, "stop", {"stopped_mode": "StopCharging"}),
        ({"type": "ecs.instance", "id": "i-abcd1234"}, "stop", {"stopped_mode": "KeepCharging"}),
        ({"type": "ecs.instance", "id": "i-abcd1234"}, "delete", {}),
        ({"type": "rds.instance", "id": "rm-abcd1234"}, "stop", {}),
    ],
)
def test_every_allowlisted_operation_is_accepted(
    resource: dict[str, str], operation: str, params: dict[str, Any]
) -> None:
    value = factory.action_value(resource=resource, operation=operation, params=params)
    assert ProposedAction.from_json_bytes(canonical_bytes(value)).operation == operation


@pytest.mark.parametrize(
    ("resource", "operation", "params"),
    [
        ({"type": "ecs.instance", "id": "i-abcd1234"}, "reboot", {}),
        ({"type": "ecs.instance", "id": "i-abcd1234"}, "stop", {}),
        ({"type": "ecs.instance", "id": "i-abcd1234"}, "stop", {"stopped_mode": "Hibernate"}),
        ({"type": "ecs.instance", "id": "i-abcd1234"}, "delete", {"force": True}),
        ({"type": "rds.instance", "id": "rm-abcd1234"}, "delete", {}),
        ({"type": "rds.instance", "id": "rm-abcd1234"}, "stop", {"stopped_mode": "StopCharging"}),
    ],
)
def test_operation_outside_the_allowlist_is_refused(
    resource: dict[str, str], operation: str, params: dict[str, Any]
) -> None:
    value = factory.action_value(resource=resource, operation=operation, params=params)
    assert _refused_code(value) is RefusalCode.E_OPERATION


def test_float_in_params_is_refused() -> None:
    raw = canonical_bytes(factory.action_value()).replace(
        b'"params":{"stopped_mode":"StopCharging"}', b'"params":{"stopped_mode":1.5}'
    )
    with pytest.raises(Refused) as err:
        ProposedAction.from_json_bytes(raw)
    assert err.value.code is RefusalCode.E_PARSE
    with pytest.raises(ValidationError, match="float"):
        ProposedAction.model_validate(factory.action_value(params={"stopped_mode": 1.5}))


def test_float_in_evidence_is_refused_even_from_python() -> None:
    with pytest.raises(ValidationError, match="float"):
        ProposedAction.model_validate(factory.action_value(evidence={"cpu": 3.4}))


def test_non_nfc_text_is_refused_not_rewritten() -> None:
    composed = "Café idle"
    decomposed = "Cafe\u0301 idle"
    ProposedAction.model_validate(factory.action_value(reason=composed))
    with pytest.raises(ValidationError, match="NFC"):
        ProposedAction.model_validate(factory.action_value(reason=decomposed))
    with pytest.raises(ValidationError, match="NFC"):
        ProposedAction.model_validate(factory.action_value(evidence={"note": decomposed}))


@pytest.mark.parametrize(
    "resource_id",
    [
        "і-abcd1234",  # Cyrillic і (U+0456)
        "i-abcd1234\u200b",  # zero-width space
        "i-ABCD1234",  # the provider's ids are lower case
        "i-abcd 1234",
        "i-abcd1234/../rm-x",
        "rm-abcd1234",  # an RDS id presented as an ECS instance
    ],
)
def test_homoglyph_and_malformed_resource_ids_are_refused(resource_id: str) -> None:
    value = factory.action_value(resource={"type": "ecs.instance", "id": resource_id})
    assert _refused_code(value) is RefusalCode.E_PARSE


@pytest.mark.parametrize(
    "field", ["type", "proposal_id", "provider", "precondition", "evidence", "created_at"]
)
def test_missing_field_is_refused(field: str) -> None:
    value = factory.action_value()
    del value[field]
    assert _refused_code(value) is RefusalCode.E_PARSE


def test_unknown_field_is_refused() -> None:
    assert _refused_code(factory.action_value(extra="x")) is RefusalCode.E_PARSE


@pytest.mark.parametrize(
    "stamp",
    [
        "2025-11-29T06:00:00+00:00",
        "2025-11-29 06:00:00Z",
        "2025-02-30T06:00:00Z",
        "2025-02-29T06:00:00Z",  # not a leap year
        "2025-13-01T06:00:00Z",
        "0000-01-01T00:00:00Z",
        "2024-01-01T24:00:00Z",  # Python >= 3.14's fromisoformat reads this as next midnight
        "2024-01-01T23:60:00Z",
        "2024-01-01T23:59:60Z",  # no leap seconds
    ],
)
def test_times_are_rfc3339_utc_with_z(stamp: str) -> None:
    assert _refused_code(factory.action_value(created_at=stamp)) is RefusalCode.E_PARSE


@pytest.mark.parametrize("stamp", ["2024-02-29T23:59:59Z", "0001-01-01T00:00:00Z"])
def test_valid_edge_times_are_accepted(stamp: str) -> None:
    ProposedAction.model_validate(factory.action_value(created_at=stamp))


def test_booleans_are_not_integers() -> None:
    value = factory.action_value()
    value["evidence"] = {"samples": True}
    ProposedAction.model_validate(value)  # a bool is a fine evidence value...
    statement = factory.statement_value(factory.action_value())
    statement["issued_at"] = True  # ...but never a time
    from airlock.protocol import ApprovalStatement

    with pytest.raises(ValidationError):
        ApprovalStatement.model_validate(statement)


def test_action_is_frozen() -> None:
    action = ProposedAction.model_validate(factory.action_value())
    with pytest.raises(ValidationError):
        action.operation = "delete"  # type: ignore[misc]


def test_oversize_action_is_refused() -> None:
    value = factory.action_value(evidence={"pad": "x" * 17000})
    with pytest.raises(Refused) as err:
        ProposedAction.from_json_bytes(canonical_bytes(value))
    assert err.value.code is RefusalCode.E_SIZE


def test_enumerated_calls_are_exactly_what_the_params_schemas_accept() -> None:
    import itertools
    import typing

    from airlock.protocol._action import VALID_CALLS

    derived = set()
    for resource_type, operations in ALLOWED_OPERATIONS.items():
        for operation, schema in operations.items():
            fields = schema.model_fields
            choices = [typing.get_args(f.annotation) for f in fields.values()]
            for values in itertools.product(*choices):
                derived.add(
                    (resource_type, operation, tuple(sorted(zip(fields, values, strict=True))))
                )
    assert derived == set(VALID_CALLS)


_EC2 = {"type": "ec2.instance", "id": "i-0abc1234def567890"}
_AWS_RDS = {"type": "rds.instance", "id": "orders-db-2"}


@pytest.mark.parametrize(
    ("resource", "operation"),
    [
        (_EC2, "stop"),
        (_EC2, "delete"),
        ({"type": "ec2.instance", "id": "i-0abc1234"}, "stop"),
        (_AWS_RDS, "stop"),
        ({"type": "rds.instance", "id": "a"}, "stop"),
    ],
)
def test_every_aws_call_is_accepted(resource: dict[str, str], operation: str) -> None:
    value = factory.aws_action_value(resource=resource, operation=operation)
    action = ProposedAction.from_json_bytes(canonical_bytes(value))
    assert (action.provider, action.operation) == ("aws", operation)
    assert action.is_high_risk is (resource["type"] == "ec2.instance" and operation == "delete")


@pytest.mark.parametrize(
    ("resource", "operation", "params"),
    [
        (_EC2, "stop", {"stopped_mode": "StopCharging"}),
        (_EC2, "stop", {"hibernate": True}),
        (_EC2, "delete", {"force": True}),
        (_EC2, "reboot", {}),
        (_AWS_RDS, "delete", {}),
    ],
)
def test_aws_call_outside_the_allowlist_is_refused(
    resource: dict[str, str], operation: str, params: dict[str, Any]
) -> None:
    value = factory.aws_action_value(resource=resource, operation=operation, params=params)
    assert _refused_code(value) is RefusalCode.E_OPERATION


@pytest.mark.parametrize(
    "overrides",
    [
        {"account": "12345678901"},  # 11 digits
        {"account": "1234567890123"},  # 13 digits
        {"account": "12345678901a"},
        {"region": "ap-southeast-1a"},  # a zone, not a region
        {"region": "useast1"},
        {"resource": {"type": "ecs.instance", "id": "i-0abc1234def567890"}},  # Alibaba's type
        {"resource": {"type": "rds.instance", "id": "rm_t4n0example"}},
        {"resource": {"type": "ec2.instance", "id": "i-0ABC1234DEF567890"}},
        {"resource": {"type": "ec2.instance", "id": "i-0abc1234def56789"}},  # 16 digits
        {"resource": {"type": "ec2.instance", "id": "i-t4n0example"}},  # not hex
        {"resource": {"type": "rds.instance", "id": "Orders-db"}},  # AWS ids are lower case
        {"resource": {"type": "rds.instance", "id": "orders--db"}},
        {"resource": {"type": "rds.instance", "id": "orders-db-"}},
        {"resource": {"type": "rds.instance", "id": "1orders"}},
        {"resource": {"type": "rds.instance", "id": "a" * 64}},
    ],
)
def test_aws_target_outside_the_provider_formats_is_refused(overrides: dict[str, Any]) -> None:
    operation = "stop"
    assert _refused_code(factory.aws_action_value(operation=operation, **overrides)) is (
        RefusalCode.E_PARSE
    )


@pytest.mark.parametrize(
    "resource",
    [
        {"type": "ec2.instance", "id": "i-0abc1234def567890"},  # an AWS type at Alibaba
        {"type": "rds.instance", "id": "orders-db-2"},  # an AWS RDS id at Alibaba
    ],
)
def test_alibaba_action_with_an_aws_target_is_refused(resource: dict[str, str]) -> None:
    value = factory.action_value(resource=resource, params={})
    assert _refused_code(value) is RefusalCode.E_PARSE


def test_statement_for_an_aws_type_at_alibaba_is_refused() -> None:
    action = factory.aws_action_value()
    statement = factory.statement_value(action, audience=factory.AWS_AUDIENCE)
    ApprovalStatement.model_validate(statement)
    with pytest.raises(Refused) as err:
        ApprovalStatement.from_json_bytes(canonical_bytes({**statement, "provider": "alibaba"}))
    assert err.value.code is RefusalCode.E_STATEMENT
