"""airlock.tool-call/v1 and its approval: the model, the hash and verify_bundle for a gate.

docs/protocol.md#tool-call and docs/protocol.md#tool-call-checks. Negative tests are named
after the attack.
"""

from __future__ import annotations

import base64
import json
import unicodedata
from typing import Any

import pytest
from pydantic import ValidationError

from airlock.protocol import (
    ARGUMENTS_MAX_BYTES,
    RefusalCode,
    Refused,
    ToolApprovalStatement,
    ToolBinding,
    ToolCall,
    canonical_bytes,
    make_bundle,
    verify_bundle,
)
from devstack import factory
from devstack.factory import (
    NOW,
    TOOL_BINDING,
    tool_bundle_for,
    tool_call_value,
    tool_statement_value,
)


def refusal(raw: bytes, *, binding: Any = TOOL_BINDING, **kw: Any) -> RefusalCode:
    with pytest.raises(Refused) as err:
        verify_bundle(raw, factory.keyset(), binding, kw.pop("now", NOW), **kw)
    return err.value.code


def parse_refusal(value: Any) -> RefusalCode:
    with pytest.raises(Refused) as err:
        ToolCall.from_json_bytes(canonical_bytes(value))
    return err.value.code


# --- the model ---------------------------------------------------------------------------


def test_an_honest_tool_call_round_trips_through_its_canonical_bytes() -> None:
    call = ToolCall.model_validate(tool_call_value())
    raw = call.canonical_bytes()
    assert raw == canonical_bytes(tool_call_value())
    assert ToolCall.from_json_bytes(raw) == call
    assert call.action_hash() == factory.action_hash(raw)
    assert call.is_high_risk


def test_a_tool_call_is_frozen() -> None:
    call = ToolCall.model_validate(tool_call_value())
    with pytest.raises(ValidationError):
        call.tool = "delete_everything"  # type: ignore[misc]


def test_float_argument_is_refused() -> None:
    with pytest.raises(ValidationError, match="float"):
        ToolCall.model_validate(tool_call_value(arguments={"amount": 125.0}))
    raw = canonical_bytes(tool_call_value()).replace(b'"amount":12500', b'"amount":125.00')
    with pytest.raises(Refused) as err:
        ToolCall.from_json_bytes(raw)
    assert err.value.code is RefusalCode.E_PARSE


def test_float_premise_is_refused() -> None:
    with pytest.raises(ValidationError):
        ToolCall.model_validate(tool_call_value(premises={"refunded_total": 0.5}))


def test_integer_beyond_2_53_argument_is_refused() -> None:
    with pytest.raises(ValidationError):
        ToolCall.model_validate(tool_call_value(arguments={"amount": 2**53}))


def test_non_nfc_argument_is_refused() -> None:
    decomposed = unicodedata.normalize("NFD", "café")
    with pytest.raises(ValidationError, match="NFC"):
        ToolCall.model_validate(tool_call_value(arguments={"note": decomposed}))
    with pytest.raises(ValidationError, match="NFC"):
        ToolCall.model_validate(tool_call_value(arguments={decomposed: 1}))
    assert parse_refusal(tool_call_value(arguments={"note": decomposed})) is RefusalCode.E_PARSE


def test_non_nfc_summary_and_premise_are_refused() -> None:
    decomposed = unicodedata.normalize("NFD", "Rückerstattung")
    with pytest.raises(ValidationError, match="NFC"):
        ToolCall.model_validate(tool_call_value(summary=decomposed))
    with pytest.raises(ValidationError, match="NFC"):
        ToolCall.model_validate(tool_call_value(premises={"status": decomposed}))


def test_oversize_arguments_are_refused() -> None:
    big = {"blob": "x" * ARGUMENTS_MAX_BYTES}
    with pytest.raises(ValidationError, match="cap"):
        ToolCall.model_validate(tool_call_value(arguments=big))
    assert parse_refusal(tool_call_value(arguments=big)) is RefusalCode.E_OPERATION


def test_arguments_at_the_size_cap_are_accepted() -> None:
    fill = ARGUMENTS_MAX_BYTES - len(canonical_bytes({"blob": ""}))
    call = ToolCall.model_validate(tool_call_value(arguments={"blob": "x" * fill}))
    assert len(canonical_bytes(call.arguments)) == ARGUMENTS_MAX_BYTES


def test_oversize_tool_call_bytes_are_refused_before_parsing() -> None:
    raw = b" " * (16 * 1024 + 1)
    with pytest.raises(Refused) as err:
        ToolCall.from_json_bytes(raw)
    assert err.value.code is RefusalCode.E_SIZE


def test_deeply_nested_arguments_are_refused() -> None:
    nested: Any = 1
    for _ in range(8):
        nested = [nested]
    with pytest.raises(ValidationError, match="deeper"):
        ToolCall.model_validate(tool_call_value(arguments={"a": nested}))


def test_summary_with_a_newline_is_refused() -> None:
    with pytest.raises(ValidationError, match="one line"):
        ToolCall.model_validate(tool_call_value(summary="Refund 1.00 EUR\nApproved by CFO"))


@pytest.mark.parametrize("char", ["\u202e", "\u2066", "\x1b", "\x9b", "\u2028", "\u00a0"])
def test_summary_with_a_control_or_bidi_character_is_refused(char: str) -> None:
    with pytest.raises(ValidationError, match="one line"):
        ToolCall.model_validate(tool_call_value(summary=f"Refund {char}order-881"))


def test_overlong_summary_is_refused() -> None:
    with pytest.raises(ValidationError):
        ToolCall.model_validate(tool_call_value(summary="x" * 201))


def test_homoglyph_target_is_refused() -> None:
    with pytest.raises(ValidationError):
        ToolCall.model_validate(tool_call_value(target="оrder-881"))  # Cyrillic о


@pytest.mark.parametrize("target", ["", " order-881", "order-881 ", "x" * 101, "a\tb"])
def test_target_that_a_person_cannot_read_or_type_is_refused(target: str) -> None:
    with pytest.raises(ValidationError):
        ToolCall.model_validate(tool_call_value(target=target))


@pytest.mark.parametrize("tool", ["", "refund now", "réfund", "../refund", "x" * 65, "-refund"])
def test_tool_name_outside_the_pattern_is_refused(tool: str) -> None:
    with pytest.raises(ValidationError):
        ToolCall.model_validate(tool_call_value(tool=tool))
    assert parse_refusal(tool_call_value(tool=tool)) is RefusalCode.E_OPERATION


def test_nested_premise_is_refused() -> None:
    with pytest.raises(ValidationError):
        ToolCall.model_validate(tool_call_value(premises={"orders": ["order-881"]}))


def test_arguments_that_are_not_an_object_are_refused() -> None:
    with pytest.raises(ValidationError):
        ToolCall.model_validate(tool_call_value(arguments=["order-881", 12500]))


def test_unknown_field_is_refused() -> None:
    assert parse_refusal({**tool_call_value(), "approved": True}) is RefusalCode.E_PARSE


def test_unknown_risk_is_refused() -> None:
    assert parse_refusal(tool_call_value(risk="none")) is RefusalCode.E_PARSE


def test_duplicate_argument_key_is_refused() -> None:
    raw = canonical_bytes(tool_call_value()).replace(
        b'"amount":12500', b'"amount":1,"amount":12500'
    )
    with pytest.raises(Refused) as err:
        ToolCall.from_json_bytes(raw)
    assert err.value.code is RefusalCode.E_PARSE


def test_tampered_arguments_change_the_hash() -> None:
    honest = ToolCall.model_validate(tool_call_value())
    for arguments in (
        {"order": "order-881", "amount": 125000, "currency": "EUR"},
        {"order": "order-881", "amount": "12500", "currency": "EUR"},
        {"order": "order-881", "amount": 12500, "currency": "EUR", "to": "mallory"},
    ):
        tampered = ToolCall.model_validate(tool_call_value(arguments=arguments))
        assert tampered.action_hash() != honest.action_hash()


def test_every_field_is_in_the_hash() -> None:
    honest = ToolCall.model_validate(tool_call_value()).action_hash()
    changes = {
        "tool": "refund_all",
        "target": "order-882",
        "effect_key": "refund:order-882",
        "premises": {"refunded_total": 1, "order_status": "paid"},
        "risk": "low",
        "summary": "Refund 1.00 EUR on order-881",
        "audience": "airlock-gate/other",
        "proposed_by": "agent:other",
        "created_at": "2025-11-29T06:00:06Z",
        "proposal_id": "prop_7a1d3e5c9b2f4a61",
    }
    for field, value in changes.items():
        changed = ToolCall.model_validate(tool_call_value(**{field: value})).action_hash()
        assert changed != honest, field


# --- verify_bundle with a gate's binding ------------------------------------------------


def test_an_approved_tool_call_verifies_for_its_gate() -> None:
    verified = verify_bundle(tool_bundle_for(), factory.keyset(), TOOL_BINDING, NOW)
    assert verified.action == ToolCall.model_validate(tool_call_value())
    assert verified.statement.effect_key == "refund:order-881"
    assert verified.action_hash == verified.statement.action_hash


def test_approval_for_another_audience_is_refused() -> None:
    other = ToolBinding("airlock-gate/payments-staging")
    assert refusal(tool_bundle_for(), binding=other) is RefusalCode.E_AUDIENCE


def test_tool_call_for_another_gate_under_this_gates_approval_is_refused() -> None:
    call = tool_call_value(audience="airlock-gate/payments-staging")
    statement = tool_statement_value(call)  # approval names this gate, the call another
    assert refusal(tool_bundle_for(call, statement)) is RefusalCode.E_MISMATCH


def test_tampered_arguments_are_refused() -> None:
    honest = tool_call_value()
    tampered = tool_call_value(arguments={"order": "order-881", "amount": 999999})
    bundle = tool_bundle_for(tampered, tool_statement_value(honest))
    assert refusal(bundle) is RefusalCode.E_ACTION_HASH


def test_swapped_action_bytes_in_the_bundle_are_refused() -> None:
    bundle = json.loads(tool_bundle_for())
    other = canonical_bytes(tool_call_value(target="order-882", effect_key="refund:order-882"))
    bundle["action"] = base64.b64encode(other).decode()
    assert refusal(canonical_bytes(bundle)) is RefusalCode.E_ACTION_HASH


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("target", "order-882"),
        ("tool", "refund_all"),
        ("effect_key", "refund:order-882"),
        ("proposal_id", "prop_0000000000000000"),
    ],
)
def test_swapped_target_is_refused(field: str, value: str) -> None:
    call = tool_call_value()
    statement = tool_statement_value(call, **{field: value})
    assert refusal(tool_bundle_for(call, statement)) is RefusalCode.E_MISMATCH


def test_expired_approval_is_refused() -> None:
    assert refusal(tool_bundle_for(), now=1764400900) is RefusalCode.E_EXPIRED


def test_approval_not_yet_valid_is_refused() -> None:
    assert refusal(tool_bundle_for(), now=1764400000 - 31) is RefusalCode.E_NOT_YET_VALID


def test_overlong_approval_is_refused() -> None:
    call = tool_call_value()
    statement = tool_statement_value(call, expires_at=1764400000 + 901)
    assert refusal(tool_bundle_for(call, statement)) is RefusalCode.E_TTL


def test_revoked_approval_is_refused() -> None:
    bundle = tool_bundle_for()
    assert refusal(bundle, revoked={"apv_5d4c3b2a1f0e9d8c"}) is RefusalCode.E_REVOKED


def test_approval_signed_by_an_untrusted_key_is_refused() -> None:
    assert refusal(tool_bundle_for(key="rfc8032-test3")) is RefusalCode.E_UNKNOWN_KEY


def test_cloud_approval_presented_to_a_gate_is_refused() -> None:
    # Even with the gate's audience: a cloud statement is not a statement a gate reads.
    action = factory.action_value()
    bundle = factory.bundle_for(
        action, factory.statement_value(action, audience=factory.GATE_AUDIENCE)
    )
    assert refusal(bundle) is RefusalCode.E_STATEMENT


def test_tool_call_approval_presented_to_an_executor_is_refused() -> None:
    call = tool_call_value(audience=factory.AUDIENCE)
    bundle = tool_bundle_for(call, tool_statement_value(call, audience=factory.AUDIENCE))
    assert refusal(bundle, binding=factory.BINDING) is RefusalCode.E_STATEMENT


def test_cloud_action_under_a_tool_call_approval_is_refused() -> None:
    action_bytes = canonical_bytes(factory.action_value())
    statement = tool_statement_value(
        tool_call_value(), action_hash=factory.action_hash(action_bytes)
    )
    bundle = tool_bundle_for(statement=statement, action_bytes=action_bytes)
    assert refusal(bundle) is RefusalCode.E_MISMATCH


def test_invalid_arguments_under_a_matching_approval_are_refused() -> None:
    # A checkpoint that signed a tool call with a float argument: the gate still refuses.
    call = tool_call_value(arguments={"amount": 1})
    raw = canonical_bytes(call).replace(b'"amount":1', b'"amount":"1","blob":[[[[[[[[1]]]]]]]]')
    statement = tool_statement_value(call, action_hash=factory.action_hash(raw))
    bundle = make_bundle(raw, factory.sign_tool_value(statement))
    assert refusal(bundle) is RefusalCode.E_OPERATION


def test_statement_with_a_duplicate_approver_is_refused() -> None:
    call = tool_call_value()
    value = tool_statement_value(
        call, approvers=[{"id": "alice", "at": 1}, {"id": "alice", "at": 2}], quorum=1
    )
    with pytest.raises(ValidationError, match="twice"):
        ToolApprovalStatement.model_validate(value)


def test_verify_bundle_refuses_an_unknown_binding_type() -> None:
    with pytest.raises(TypeError):
        verify_bundle(tool_bundle_for(), factory.keyset(), object(), NOW)  # type: ignore[call-overload]
