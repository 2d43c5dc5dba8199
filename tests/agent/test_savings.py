"""The saving each proposal signs: the instance type's price, read once per type.

The price comes from devcloud's ``DescribePrice`` through the real SDK adapter, becomes
integer millionths at the adapter, and the planner signs a month of it into the stop's
evidence (``evidence.saving``); a delete and a KeepCharging stop sign a saving of 0.
"""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal

from airlock.cloud.ports import Price
from airlock.protocol import ProposedAction, monthly_minor
from services.agent.discovery import Observation
from services.agent.planner import CheckpointView, Submit, plan
from services.devcloud.prices import ECS_HOURLY

from .conftest import Harness
from .test_idle_policy import CTX, _obs, _stopped_view

PRICE = Price(currency="USD", hourly_micros=113000, source="ecs:DescribePrice")


def _priced(obs: Observation) -> Observation:
    return dataclasses.replace(obs, price=PRICE)


def test_each_stop_signs_a_month_of_its_instance_types_price(harness: Harness) -> None:
    reader = harness.dc.reader()
    report = harness.agent(reader=reader, scan_workers=1).run_once()
    assert report.created > 0 and report.problems == 0
    priced = 0
    for p in harness.proposals():
        action = ProposedAction.model_validate(json.loads(p["action_jcs"]))
        saving = action.saving
        if action.resource.type == "rds.instance":
            assert saving is None  # RDS prices are not read
            continue
        assert saving is not None
        micros = int(Decimal(ECS_HOURLY[action.evidence["instance_type"]]) * 1_000_000)
        assert (saving.currency, saving.hourly_price_micros, saving.basis) == (
            "USD",
            micros,
            "compute",
        )
        assert saving.monthly_minor == monthly_minor(micros, "USD") > 0
        priced += 1
    assert priced > 0
    # Read once per (region, type) in a scan, not once per instance.
    assert 0 < reader.calls["ecs:DescribePrice"] <= len(ECS_HOURLY)


def test_a_keep_charging_stop_signs_a_saving_of_nothing() -> None:
    ctx = dataclasses.replace(CTX, stopped_mode="KeepCharging")
    (step,) = plan(_priced(_obs()), CheckpointView(), ctx)
    assert isinstance(step, Submit)
    saving = step.action.saving
    assert saving is not None
    assert (saving.monthly_minor, saving.basis, saving.hourly_price_micros) == (0, "none", 113000)


def test_a_delete_signs_a_saving_of_nothing_its_stop_saved_the_compute() -> None:
    (step,) = plan(_priced(_obs("Stopped")), _stopped_view(), CTX)
    assert isinstance(step, Submit) and step.action.operation == "delete"
    saving = step.action.saving
    assert saving is not None and (saving.monthly_minor, saving.basis) == (0, "none")


def test_a_stop_without_a_price_signs_no_saving() -> None:
    (step,) = plan(_obs(), CheckpointView(), CTX)
    assert isinstance(step, Submit) and "saving" not in step.action.evidence


def test_an_absurd_price_is_no_estimate_and_never_blocks_the_stop() -> None:
    absurd = Price(currency="USD", hourly_micros=10**15, source="ecs:DescribePrice")
    (step,) = plan(dataclasses.replace(_obs(), price=absurd), CheckpointView(), CTX)
    assert isinstance(step, Submit) and "saving" not in step.action.evidence
    odd = Price(currency="XBT", hourly_micros=113000, source="ecs:DescribePrice")
    (step,) = plan(dataclasses.replace(_obs(), price=odd), CheckpointView(), CTX)
    assert isinstance(step, Submit) and "saving" not in step.action.evidence
