"""The real SDK clients, through the adapter, read devcloud page by page."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from airlock.cloud.alibaba import AlibabaReader
from airlock.cloud.ports import (
    CloudError,
    CloudReader,
    DefiniteRefusal,
    MetricsBatchReader,
    Price,
    RdsSpec,
)
from devstack.devcloud import DevcloudHandle
from services.devcloud import generate_fleet
from services.devcloud.prices import ECS_HOURLY, RDS_ENGINES, RDS_HOURLY

from .conftest import FLEET_ECS, FLEET_NOW, FLEET_RDS, FLEET_SEED

REGION = "ap-southeast-1"


def test_reader_implements_the_port(devcloud: DevcloudHandle) -> None:
    assert isinstance(devcloud.reader(), CloudReader)


def test_ecs_listing_walks_every_page(devcloud: DevcloudHandle) -> None:
    reader = devcloud.reader()
    seen = [s.resource_id for s in reader.list_instances(REGION, "ecs.instance", page_size=100)]
    assert len(seen) == FLEET_ECS == len(set(seen))
    assert reader.calls["ecs:DescribeInstances"] == 4  # 350 at 100 a page: > 3 pages


def test_rds_listing_walks_every_page_with_tags(devcloud: DevcloudHandle) -> None:
    reader = devcloud.reader()
    states = list(reader.list_instances(REGION, "rds.instance", page_size=10))
    assert len(states) == FLEET_RDS == len({s.resource_id for s in states})
    assert reader.calls["rds:DescribeDBInstances"] == 5
    expected = {
        s.id: dict(s.tags)
        for s in generate_fleet(seed=FLEET_SEED, instances=FLEET_ECS, rds=FLEET_RDS, now=FLEET_NOW)
        if s.kind == "rds"
    }
    assert {s.resource_id: dict(s.tags) for s in states} == expected


def test_listing_a_region_without_instances_is_empty(devcloud: DevcloudHandle) -> None:
    assert list(devcloud.reader().list_instances("eu-central-1", "ecs.instance")) == []


def test_hostile_names_and_tags_survive_the_round_trip(devcloud: DevcloudHandle) -> None:
    fleet = generate_fleet(seed=FLEET_SEED, instances=FLEET_ECS, rds=FLEET_RDS, now=FLEET_NOW)
    listed = {s.resource_id: s for s in devcloud.reader().list_instances(REGION, "ecs.instance")}
    hostile = 0
    for spec in (s for s in fleet if s.kind == "ecs"):
        state = listed[spec.id]
        assert state.name == spec.name
        assert dict(state.tags) == dict(spec.tags)
        assert state.instance_type == spec.instance_type
        assert state.status == spec.status
        # ECS reports creation time to the minute
        created = datetime.fromtimestamp(spec.created_at - spec.created_at % 60, UTC)
        assert state.created_at == created.strftime("%Y-%m-%dT%H:%M:%SZ")
        if any(c in spec.name for c in "<>\"'") or not spec.name.isascii():
            hostile += 1
    assert hostile > 10  # the fleet really does carry markup, quotes and non-ASCII names


def test_get_state_reads_one_instance(devcloud: DevcloudHandle) -> None:
    spec = next(
        s
        for s in generate_fleet(seed=FLEET_SEED, instances=FLEET_ECS, rds=FLEET_RDS, now=FLEET_NOW)
        if s.kind == "ecs" and s.truth == "protected"
    )
    state = devcloud.reader().get_state(REGION, "ecs.instance", spec.id)
    assert state is not None
    assert (state.resource_id, state.region, state.status) == (spec.id, REGION, spec.status)
    assert dict(state.tags) == dict(spec.tags)


def test_ecs_state_carries_the_last_start_time(devcloud: DevcloudHandle, fresh_ecs_id: str) -> None:
    """StartTime (to the minute, as ECS reports it): the creation until someone starts a
    stopped instance again; a stop leaves it, and so does a status change that is no start."""
    created = FLEET_NOW - 30 * 86_400 + 59  # the seconds are not reported
    devcloud.admin.create_instance(fresh_ecs_id, created_at=created)
    reader = devcloud.reader()

    def started_at() -> str:
        state = reader.get_state(REGION, "ecs.instance", fresh_ecs_id)
        assert state is not None
        return state.started_at

    assert started_at() == _minute(created)
    devcloud.admin.set_instance(fresh_ecs_id, status="Running", started_at=created + 3600)
    assert started_at() == _minute(created)  # already running: not a start
    devcloud.admin.set_instance(fresh_ecs_id, status="Stopped")
    assert started_at() == _minute(created)
    restarted = FLEET_NOW + 7 * 60
    devcloud.admin.set_instance(fresh_ecs_id, status="Running", started_at=restarted)
    assert started_at() == _minute(restarted)
    devcloud.admin.set_instance(fresh_ecs_id, status="Stopped")
    before = int(datetime.now(UTC).timestamp())
    devcloud.admin.set_instance(fresh_ecs_id, status="Starting")  # devcloud's clock
    assert _minute(before) <= started_at() <= _minute(before + 60)


def _minute(ts: int) -> str:
    return datetime.fromtimestamp(ts - ts % 60, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_get_state_of_a_missing_instance_is_none(devcloud: DevcloudHandle) -> None:
    reader = devcloud.reader()
    assert reader.get_state(REGION, "ecs.instance", "i-doesnotexist0") is None
    assert reader.get_state(REGION, "rds.instance", "rm-doesnotexist0") is None


def test_get_state_refuses_an_id_that_is_not_the_kernel_format(devcloud: DevcloudHandle) -> None:
    with pytest.raises(ValueError, match="not an ECS instance id"):
        devcloud.reader().get_state(REGION, "ecs.instance", "i-abcd\n")


def _old_running(kind: str, n: int) -> list[str]:
    fleet = generate_fleet(seed=FLEET_SEED, instances=FLEET_ECS, rds=FLEET_RDS, now=FLEET_NOW)
    return [
        s.id
        for s in fleet
        if s.kind == kind and s.truth not in ("young", "stopped") and s.has_memory
    ][:n]


def test_metrics_walk_every_page(devcloud: DevcloudHandle) -> None:
    reader = devcloud.reader()
    ids = _old_running("ecs", 20)
    start, end = FLEET_NOW - 14 * 86_400, FLEET_NOW
    points = list(
        reader.get_metrics_many(REGION, ids, "CPUUtilization", start=start, end=end, period=3600)
    )
    assert len(points) == 20 * 336  # 6720 datapoints at 1440 a page: 5 pages
    assert reader.calls["cms:DescribeMetricList"] == 5
    for rid in ids:
        stamps = [p.timestamp for r, p in points if r == rid]
        assert stamps == list(range(start, end, 3600))
    assert all(0 <= p.average <= p.maximum <= 100 for _, p in points)


def test_single_instance_metrics_match_the_batched_ones(devcloud: DevcloudHandle) -> None:
    reader: AlibabaReader = devcloud.reader()
    rid = _old_running("ecs", 1)[0]
    start, end = FLEET_NOW - 3 * 86_400, FLEET_NOW
    one = list(reader.get_metrics(REGION, rid, "IntranetInRate", start=start, end=end, period=3600))
    many = [
        p
        for r, p in reader.get_metrics_many(
            REGION, [rid], "IntranetInRate", start=start, end=end, period=3600
        )
    ]
    assert one == many and len(one) == 72


def test_rds_metrics_use_the_rds_namespace(devcloud: DevcloudHandle) -> None:
    rid = _old_running("rds", 1)[0]
    points = list(
        devcloud.reader().get_metrics(
            REGION, rid, "CpuUsage", start=FLEET_NOW - 86_400, end=FLEET_NOW, period=3600
        )
    )
    assert len(points) == 24


def test_unknown_metric_is_refused_before_any_call(devcloud: DevcloudHandle) -> None:
    reader = devcloud.reader()
    with pytest.raises(ValueError, match="unsupported ECS metric"):
        list(reader.get_metrics(REGION, "i-abcd1234", "DiskUsage", start=0, end=3600, period=60))
    assert reader.calls == {}


def test_reader_offers_batched_metrics(devcloud: DevcloudHandle) -> None:
    assert isinstance(devcloud.reader(), MetricsBatchReader)


def test_describe_price_quotes_the_instance_types_compute_per_hour(
    devcloud: DevcloudHandle,
) -> None:
    reader = devcloud.reader()
    price = reader.get_price(REGION, "ecs.instance", "ecs.g7.large")
    assert price == Price(currency="USD", hourly_micros=113000, source="ecs:DescribePrice")
    assert reader.calls["ecs:DescribePrice"] == 1
    assert reader.get_price(REGION, "rds.instance", "mysql.n2.medium.1") is None


def test_every_ecs_type_of_the_fleet_has_a_price() -> None:
    fleet = generate_fleet(seed=FLEET_SEED, instances=FLEET_ECS, rds=FLEET_RDS, now=FLEET_NOW)
    assert {s.instance_type for s in fleet if s.kind == "ecs"} <= set(ECS_HOURLY)


def test_rds_describe_reads_what_its_price_needs(devcloud: DevcloudHandle) -> None:
    state = next(devcloud.reader().list_instances(REGION, "rds.instance"))
    engine, version = RDS_ENGINES[state.instance_type]
    assert state.rds == RdsSpec(engine, version, "cloud_essd", f"{REGION}-a", "Postpaid")


def test_rds_describe_price_quotes_the_class_compute_without_its_storage(
    devcloud: DevcloudHandle,
) -> None:
    reader = devcloud.reader()
    spec = RdsSpec("MySQL", "8.0", "cloud_essd", f"{REGION}-a", "Postpaid")
    price = reader.get_price(REGION, "rds.instance", "rds.mysql.s3.large", rds=spec)
    assert price == Price(currency="USD", hourly_micros=250000, source="rds:DescribePrice")
    assert RDS_HOURLY["rds.mysql.s3.large"] == "0.2500"
    assert reader.calls["rds:DescribePrice"] == 2  # at 100 and at 200 GB


def test_a_subscription_rds_instance_is_not_priced(devcloud: DevcloudHandle) -> None:
    reader = devcloud.reader()
    spec = RdsSpec("MySQL", "8.0", "cloud_essd", f"{REGION}-a", "Prepaid")
    assert reader.get_price(REGION, "rds.instance", "rds.mysql.s3.large", rds=spec) is None
    assert "rds:DescribePrice" not in reader.calls


def test_an_rds_class_of_another_engine_is_not_priced(devcloud: DevcloudHandle) -> None:
    spec = RdsSpec("PostgreSQL", "14.0", "cloud_essd", f"{REGION}-a", "Postpaid")
    with pytest.raises(CloudError) as err:
        devcloud.reader().get_price(REGION, "rds.instance", "rds.mysql.s3.large", rds=spec)
    assert err.value.code == "InvalidDBInstanceClass.NotFound"


def test_every_rds_class_of_the_fleet_has_a_price() -> None:
    fleet = generate_fleet(seed=FLEET_SEED, instances=FLEET_ECS, rds=FLEET_RDS, now=FLEET_NOW)
    assert {s.instance_type for s in fleet if s.kind == "rds"} <= set(RDS_HOURLY)


def test_an_unknown_instance_type_is_a_definite_refusal(devcloud: DevcloudHandle) -> None:
    with pytest.raises(DefiniteRefusal) as err:
        devcloud.reader().get_price(REGION, "ecs.instance", "ecs.nonesuch.large")
    assert err.value.code == "InvalidInstanceType.ValueNotSupported"
