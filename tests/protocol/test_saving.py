"""The saving estimate in the evidence: signed with the action, integers, consistent."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from pydantic import ValidationError

from airlock.protocol import (
    ProposedAction,
    RefusalCode,
    Refused,
    canonical_bytes,
    monthly_minor,
    verify_bundle,
)
from devstack import factory
from devstack.factory import BINDING, NOW, bundle_for


def _saving(**overrides: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "currency": "USD",
        "monthly_minor": 8249,
        "hourly_price_micros": 113000,
        "hours_per_month": 730,
        "basis": "compute",
        "source": "ecs:DescribePrice",
    }
    value.update(overrides)
    return value


def _action(**saving: Any) -> dict[str, Any]:
    return factory.action_value(evidence={"policy": "idle/v1", "saving": _saving(**saving)})


def test_a_month_is_730_hours_of_the_price_in_cents_half_up() -> None:
    assert monthly_minor(113000, "USD") == 8249  # 0.113 × 730 = 82.49
    assert monthly_minor(1, "USD") == 0  # 0.000730 cents rounds down
    assert monthly_minor(6850, "USD") == 500  # 500.05 cents, half up
    assert monthly_minor(100_000, "JPY") == 73  # no minor unit


def test_the_saving_is_read_back_from_the_signed_action() -> None:
    action = ProposedAction.from_json_bytes(canonical_bytes(_action()))
    saving = action.saving
    assert saving is not None
    assert (saving.monthly_minor, saving.currency) == (8249, "USD")
    assert ProposedAction.model_validate(factory.action_value()).saving is None


def test_changing_the_saving_changes_the_action_hash() -> None:
    honest = ProposedAction.model_validate(_action())
    inflated = ProposedAction.model_validate(
        _action(hourly_price_micros=1_130_000, monthly_minor=82490)
    )
    assert honest.action_hash() != inflated.action_hash()


def test_an_approval_does_not_verify_for_an_action_whose_saving_was_inflated() -> None:
    honest = _action()
    bundle = bundle_for(honest)
    assert verify_bundle(bundle, factory.keyset(), BINDING, NOW).action.saving is not None
    inflated = _action(hourly_price_micros=1_130_000, monthly_minor=82490)
    value = json.loads(bundle)
    value["action"] = base64.b64encode(canonical_bytes(inflated)).decode()
    with pytest.raises(Refused) as err:
        verify_bundle(canonical_bytes(value), factory.keyset(), BINDING, NOW)
    assert err.value.code is RefusalCode.E_ACTION_HASH


@pytest.mark.parametrize(
    "saving",
    [
        pytest.param(_saving(monthly_minor=999_999), id="monthly-figure-not-from-the-price"),
        pytest.param(_saving(basis="none"), id="nothing-saved-but-a-figure-shown"),
        pytest.param(_saving(currency="XBT"), id="unknown-currency"),
        pytest.param(_saving(currency="usd"), id="lowercase-currency"),
        pytest.param(_saving(hours_per_month=744), id="another-month"),
        pytest.param(_saving(monthly_minor=-1), id="negative"),
        pytest.param(_saving(monthly_minor=True), id="bool-for-int"),
        pytest.param(_saving(monthly_minor="8249"), id="string-for-int"),
        pytest.param({**_saving(), "note": "x"}, id="unknown-field"),
        pytest.param({k: v for k, v in _saving().items() if k != "basis"}, id="missing-field"),
        pytest.param([_saving()], id="not-an-object"),
    ],
)
def test_a_malformed_saving_is_refused(saving: Any) -> None:
    value = factory.action_value(evidence={"policy": "idle/v1", "saving": saving})
    with pytest.raises(ValidationError, match=r"evidence\.saving"):
        ProposedAction.model_validate(value)
    with pytest.raises(Refused) as err:
        ProposedAction.from_json_bytes(canonical_bytes(value))
    assert err.value.code is RefusalCode.E_PARSE


def test_a_float_saving_is_refused_before_the_model() -> None:
    raw = canonical_bytes(_action()).replace(b'"monthly_minor":8249', b'"monthly_minor":8249.0')
    with pytest.raises(Refused) as err:
        ProposedAction.from_json_bytes(raw)
    assert err.value.code is RefusalCode.E_PARSE
