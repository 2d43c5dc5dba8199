"""The saving each proposal signs: the instance type's price, read once per type.

The price comes from devcloud's ``DescribePrice`` through the real SDK adapter, becomes
integer millionths at the adapter, and the planner signs a month of it into the stop's
evidence (``evidence.saving``); a delete and a KeepCharging stop sign a saving of 0. An
RDS stop signs its class's compute price only: storage keeps charging while it is stopped.
"""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal

from airlock.cloud.alibaba import AlibabaReader
from airlock.cloud.ports import LiveState, Price, RdsSpec
from airlock.protocol import ProposedAction, monthly_minor
from services.agent.discovery import Observation
from services.agent.planner import CheckpointView, Submit, plan
from services.devcloud.prices import ECS_HOURLY, RDS_HOURLY

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
            continue  # test_each_rds_stop_signs_its_class_compute_not_its_storage
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


def _rds_stops(harness: Harness) -> list[ProposedAction]:
    actions = [
        ProposedAction.model_validate(json.loads(p["action_jcs"])) for p in harness.proposals()
    ]
    return [a for a in actions if a.resource.type == "rds.instance" and a.operation == "stop"]


def test_each_rds_stop_signs_its_class_compute_not_its_storage(harness: Harness) -> None:
    reader = harness.dc.reader()
    report = harness.agent(reader=reader, scan_workers=1).run_once()
    assert report.problems == 0
    stops = _rds_stops(harness)
    assert stops
    for action in stops:
        saving = action.saving
        assert saving is not None
        # devcloud quotes class + storage together; the signed price is the class alone.
        micros = int(Decimal(RDS_HOURLY[action.evidence["instance_type"]]) * 1_000_000)
        assert (saving.currency, saving.hourly_price_micros, saving.basis, saving.source) == (
            "USD",
            micros,
            "compute",
            "rds:DescribePrice",
        )
        assert saving.monthly_minor == monthly_minor(micros, "USD") > 0
    # Two quotes per class (engine, storage type, zone) in a scan, not per instance.
    assert 0 < reader.calls["rds:DescribePrice"] <= 2 * len(RDS_HOURLY)


class _StorageOnlyQuotes(AlibabaReader):
    """devcloud's reader whose RDS quotes grow with storage and leave nothing for compute."""

    def _rds_quote(
        self, region: str, rds_class: str, spec: RdsSpec, storage_gb: int
    ) -> tuple[str, int]:
        super()._rds_quote(region, rds_class, spec, storage_gb)
        return "USD", 160 * storage_gb


def test_rds_quotes_that_leave_no_compute_price_never_block_the_stop(harness: Harness) -> None:
    reader = _StorageOnlyQuotes(harness.dc.config(harness.dc.read_key))
    report = harness.agent(reader=reader, scan_workers=1).run_once()
    assert report.problems == 0
    stops = _rds_stops(harness)
    assert stops and all("saving" not in a.evidence for a in stops)
    assert reader.calls["rds:DescribePrice"] > 0


def _rds_obs() -> Observation:
    obs = _obs(rid="rm-abcd1234")
    spec = RdsSpec("MySQL", "8.0", "cloud_essd", "ap-southeast-1a", "Postpaid")
    state = LiveState(
        "rds.instance", "rm-abcd1234", "ap-southeast-1", "Running", {"team": "sre"},
        "rds.mysql.s3.large", "2025-01-01T00:00:00Z", "orders", rds=spec,
    )  # fmt: skip
    return dataclasses.replace(obs, state=state)


def test_an_rds_stop_signs_the_compute_price_it_read() -> None:
    rds_price = Price(currency="USD", hourly_micros=250000, source="rds:DescribePrice")
    (step,) = plan(dataclasses.replace(_rds_obs(), price=rds_price), CheckpointView(), CTX)
    assert isinstance(step, Submit) and step.action.params == {}
    saving = step.action.saving
    assert saving is not None
    assert (saving.basis, saving.monthly_minor, saving.source) == (
        "compute",
        18250,
        "rds:DescribePrice",
    )


def test_an_absurd_or_missing_rds_price_is_no_estimate_and_never_blocks_the_stop() -> None:
    (step,) = plan(_rds_obs(), CheckpointView(), CTX)
    assert isinstance(step, Submit) and "saving" not in step.action.evidence
    absurd = Price(currency="USD", hourly_micros=10**15, source="rds:DescribePrice")
    (step,) = plan(dataclasses.replace(_rds_obs(), price=absurd), CheckpointView(), CTX)
    assert isinstance(step, Submit) and "saving" not in step.action.evidence
