"""AwsReader against moto's server: whole fleets, live state, tags, LaunchTime, metrics."""

from __future__ import annotations

import time

import pytest

from airlock.cloud.ports import CloudReader, MetricsBatchReader
from devstack.moto import MotoHandle
from services.agent.discovery import Discovery
from services.agent.idle import HOUR, IdlePolicy, Window
from services.agent.providers import AWS

from .conftest import AGED, FLEET

#: Where a test runs its own instances: no fleet there to page through.
_OWN = "us-west-2"


def test_reader_implements_the_ports(moto_fleet: MotoHandle) -> None:
    reader = moto_fleet.reader()
    assert isinstance(reader, CloudReader)
    assert isinstance(reader, MetricsBatchReader)


def test_a_fleet_of_2000_is_scanned_completely_over_3_pages_in_2_regions(
    moto_fleet: MotoHandle,
) -> None:
    reader = moto_fleet.reader()
    moto_fleet.reset_record()
    seen: dict[str, list[str]] = {}
    for group in FLEET:
        region = str(group["region"])
        states = [
            s
            for s in reader.list_instances(region, "ec2.instance", page_size=10)
            if s.tags.get("fleet") == "scan"
        ]
        assert {s.region for s in states} == {region}
        assert {s.status for s in states} == {"Running"}
        assert all(s.tags["team"] == dict(group["tags"])["team"] for s in states)  # type: ignore[call-overload]
        seen[region] = [s.resource_id for s in states]
    # Every seeded instance once, none twice, nothing missed on a page boundary.
    assert {r: sorted(ids) for r, ids in seen.items()} == {
        r: sorted(moto_fleet.fleet[r]) for r in seen
    }
    assert sum(len(ids) for ids in seen.values()) == 2000
    # Pages as moto saw them: MaxResults counts reservations (100 instances each here).
    pages = [
        w
        for w in moto_fleet.requests()
        if w.action == "DescribeInstances"
        and w.access_key_id == moto_fleet.keys["reader"].access_key_id
    ]
    assert [(w.region, "NextToken" in w.params) for w in pages] == [
        ("us-east-1", False),
        ("us-east-1", True),
        ("eu-west-1", False),
    ]
    assert reader.calls["ec2:DescribeInstances"] == 3


def test_live_state_reports_tags_name_type_and_launch_time(moto_fleet: MotoHandle) -> None:
    region = _OWN
    (iid,) = moto_fleet.seed_ec2(region, 1, tags={"Name": "etl-7", "team": "data"})
    state = moto_fleet.reader().get_state(region, "ec2.instance", iid)
    assert state is not None
    assert (state.resource_type, state.resource_id, state.region) == ("ec2.instance", iid, region)
    assert (state.status, state.name, state.instance_type) == ("Running", "etl-7", "t3.micro")
    assert state.tags == {"Name": "etl-7", "team": "data"}
    described = moto_fleet.client("ec2", region).describe_instances(InstanceIds=[iid])
    launched = described["Reservations"][0]["Instances"][0]["LaunchTime"]
    assert state.started_at == launched.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert state.created_at != ""


def test_a_start_resets_launch_time_as_ec2_does(moto_fleet: MotoHandle) -> None:
    region = _OWN
    (iid,) = moto_fleet.seed_ec2(region, 1)
    reader = moto_fleet.reader()
    first = reader.get_state(region, "ec2.instance", iid)
    admin = moto_fleet.client("ec2", region)
    admin.stop_instances(InstanceIds=[iid])
    time.sleep(1.1)  # LaunchTime has whole seconds: the restart must land in a later one
    admin.start_instances(InstanceIds=[iid])
    again = reader.get_state(region, "ec2.instance", iid)
    assert first is not None and again is not None
    assert again.started_at > first.started_at
    assert again.created_at == first.created_at


def test_missing_and_terminated_instances_read_as_gone(moto_fleet: MotoHandle) -> None:
    region = _OWN
    reader = moto_fleet.reader()
    assert reader.get_state(region, "ec2.instance", "i-0123456789abcdef0") is None
    (iid,) = moto_fleet.seed_ec2(region, 1)
    moto_fleet.client("ec2", region).terminate_instances(InstanceIds=[iid])
    assert reader.get_state(region, "ec2.instance", iid) is None
    assert iid not in {s.resource_id for s in reader.list_instances(region, "ec2.instance")}


def test_rds_instances_are_listed_over_pages_with_tags(moto_fleet: MotoHandle) -> None:
    region = _OWN
    names = [f"orders-{n}" for n in range(21)]  # MaxRecords is at least 20: 2 pages
    for n, name in enumerate(names):
        moto_fleet.seed_rds(region, name, tags={"team": "data", "n": str(n)})
    reader = moto_fleet.reader()
    moto_fleet.reset_record()
    states = list(reader.list_instances(region, "rds.instance", page_size=20))
    assert sorted(s.resource_id for s in states) == sorted(names)
    assert {s.status for s in states} == {"Running"}  # RDS "available"
    one = next(s for s in states if s.resource_id == "orders-3")
    assert one.tags == {"team": "data", "n": "3"}
    assert one.rds is not None and one.rds.engine == "postgres"
    assert reader.calls["rds:DescribeDBInstances"] == 2
    state = reader.get_state(region, "rds.instance", "orders-3")
    assert state is not None and state.instance_type == "db.t3.micro"
    assert reader.get_state(region, "rds.instance", "orders-none") is None


def test_cloudwatch_metrics_are_read_per_period_for_many_instances(
    moto_fleet: MotoHandle,
) -> None:
    region = _OWN
    ids = moto_fleet.seed_ec2(region, 3)
    end = int(time.time()) // 3600 * 3600
    start = end - 4 * 3600
    for k, iid in enumerate(ids[:2]):
        # Two samples an hour: (k+1) and 3(k+1) percent, so Average 2(k+1), Maximum 3(k+1).
        points = [
            (t + d, float((k + 1) * m))
            for t in range(start, end, 3600)
            for d, m in ((0, 1), (1800, 3))
        ]
        moto_fleet.put_metrics(
            region,
            namespace="AWS/EC2",
            dimension="InstanceId",
            resource_id=iid,
            metric="CPUUtilization",
            points=points,
        )
    reader = moto_fleet.reader()
    got = list(
        reader.get_metrics_many(region, ids, "CPUUtilization", start=start, end=end, period=3600)
    )
    by_id: dict[str, list[tuple[int, float, float]]] = {}
    for rid, p in got:
        by_id.setdefault(rid, []).append((p.timestamp, p.average, p.maximum))
    assert by_id == {
        ids[0]: [(t, 2.0, 3.0) for t in range(start, end, 3600)],
        ids[1]: [(t, 4.0, 6.0) for t in range(start, end, 3600)],
    }  # the third has no datapoints: absent, never zero
    one = list(
        reader.get_metrics(region, ids[1], "CPUUtilization", start=start, end=end, period=3600)
    )
    assert [p.average for p in one] == [4.0] * 4


def test_a_period_that_cloudwatch_cannot_serve_is_refused(moto_fleet: MotoHandle) -> None:
    with pytest.raises(ValueError, match="period"):
        list(
            moto_fleet.reader().get_metrics(
                "us-east-1", "i-0123456789abcdef0", "CPUUtilization", start=0, end=60, period=90
            )
        )


def test_a_network_busy_ec2_instance_with_1_minute_samples_is_not_reported_idle(
    moto_fleet: MotoHandle,
) -> None:
    """Detailed monitoring: ``NetworkIn`` every minute. 6 kB a minute is 8.64 MB a day,
    over the idle policy's 5 MB quiet bar; an ``Average`` read as a 5-minute sample makes
    it 1.73 MB, a quiet day, and the machine idle."""
    region = str(AGED["region"])
    busy, quiet = moto_fleet.fleet[region]
    now = int(time.time())
    window = Window.ending_before(now, 2)
    for iid, per_minute in ((busy, 6_000.0), (quiet, 1_000.0)):
        for metric, step, value in (("CPUUtilization", HOUR, 1.0), ("NetworkIn", 60, per_minute)):
            moto_fleet.put_metrics(
                region,
                namespace="AWS/EC2",
                dimension="InstanceId",
                resource_id=iid,
                metric=metric,
                points=[(t, value) for t in range(window.start, window.end, step)],
            )
    discovery = Discovery(
        moto_fleet.reader(),
        IdlePolicy(window_days=2, net_quiet_min_days=2),
        regions=(region,),
        clock=lambda: now,
        provider=AWS,
    )
    seen = {obs.state.resource_id: obs for obs in discovery.scan(now)}
    assert seen[busy].verdict.kind == "busy", seen[busy].verdict
    assert seen[busy].verdict.reasons[0].startswith("network ≥ 5.0 MB/day on 2 of 2 days")
    usage = seen[busy].usage
    assert usage is not None and usage.daily_net_bytes == (8_640_000, 8_640_000)
    assert seen[quiet].verdict.kind == "idle", seen[quiet].verdict
