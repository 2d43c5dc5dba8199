"""devcloud answers the SDK's other request shapes: PageNumber paging, filters, batch calls."""

from __future__ import annotations

import json
from typing import Any

import pytest
from alibabacloud_cms20190101 import models as cms_models
from alibabacloud_cms20190101.client import Client as CmsClient
from alibabacloud_ecs20140526 import models as ecs_models
from alibabacloud_ecs20140526.client import Client as EcsClient
from alibabacloud_tea_openapi.exceptions import ClientException
from alibabacloud_tea_openapi.models import Config
from darabonba.runtime import ExtendsParameters, RuntimeOptions

from devstack.devcloud import DevcloudHandle

from .conftest import FLEET_ECS, FLEET_NOW

REGION = "ap-southeast-1"


def _config(devcloud: DevcloudHandle, key: tuple[str, str]) -> Config:
    return Config(
        access_key_id=key[0],
        access_key_secret=key[1],
        endpoint=devcloud.endpoint,
        protocol="http",
        region_id=REGION,
        read_timeout=5000,
        connect_timeout=1000,
    )


@pytest.fixture
def ecs(devcloud: DevcloudHandle) -> Any:
    return EcsClient(_config(devcloud, devcloud.write_key))


def test_page_number_paging_covers_the_fleet(ecs: Any) -> None:
    seen: list[str] = []
    page = 1
    while True:
        body = ecs.describe_instances_with_options(
            ecs_models.DescribeInstancesRequest(region_id=REGION, page_number=page, page_size=100),
            RuntimeOptions(),
        ).body
        seen += [i.instance_id for i in body.instances.instance]
        if page * 100 >= body.total_count:
            break
        page += 1
    assert page == 4 and len(set(seen)) == len(seen) >= FLEET_ECS


def test_status_and_tag_filters(ecs: Any, devcloud: DevcloudHandle, fresh_ecs_id: str) -> None:
    devcloud.admin.create_instance(fresh_ecs_id, status="Stopped", tags=[("cost", "<b>42</b>")])
    body = ecs.describe_instances_with_options(
        ecs_models.DescribeInstancesRequest(
            region_id=REGION,
            status="Stopped",
            tag=[ecs_models.DescribeInstancesRequestTag(key="cost", value="<b>42</b>")],
        ),
        RuntimeOptions(),
    ).body
    assert [i.instance_id for i in body.instances.instance] == [fresh_ecs_id]


def test_stop_instances_batch_is_all_or_nothing(
    ecs: Any, devcloud: DevcloudHandle, fresh_ecs_id: str
) -> None:
    running, stopped = fresh_ecs_id + "r", fresh_ecs_id + "s"
    devcloud.admin.create_instance(running)
    devcloud.admin.create_instance(stopped, status="Stopped")
    with pytest.raises(ClientException) as refused:
        ecs.stop_instances_with_options(
            ecs_models.StopInstancesRequest(region_id=REGION, instance_id=[running, stopped]),
            RuntimeOptions(),
        )
    assert refused.value.code == "IncorrectInstanceStatus"
    assert devcloud.admin.writes(resource_id=running) == []


def test_a_forced_stop_is_visible_in_the_write_log(
    ecs: Any, devcloud: DevcloudHandle, fresh_ecs_id: str
) -> None:
    """The real API accepts ForceStop and Hibernate; the log keeps every parameter as sent,
    so a regression of the writer to a forced stop cannot pass unseen."""
    devcloud.admin.create_instance(fresh_ecs_id)
    ecs.stop_instance_with_options(
        ecs_models.StopInstanceRequest(
            instance_id=fresh_ecs_id, stopped_mode="StopCharging", force_stop=True, hibernate=True
        ),
        RuntimeOptions(extends_parameters=ExtendsParameters(headers={"x-acs-region-id": REGION})),
    )
    [entry] = devcloud.admin.writes(resource_id=fresh_ecs_id)
    assert entry["params"] == {
        "ForceStop": "True",
        "Hibernate": "True",
        "InstanceId": fresh_ecs_id,
        "StoppedMode": "StopCharging",
    }


def test_a_stop_that_names_no_region_is_refused(
    ecs: Any, devcloud: DevcloudHandle, fresh_ecs_id: str
) -> None:
    """Neither a RegionId nor the endpoint's region: devcloud cannot tell which regional
    endpoint the call stands for, so it refuses rather than stop in any region."""
    devcloud.admin.create_instance(fresh_ecs_id)
    with pytest.raises(ClientException) as refused:
        ecs.stop_instance_with_options(
            ecs_models.StopInstanceRequest(instance_id=fresh_ecs_id, stopped_mode="StopCharging"),
            RuntimeOptions(),
        )
    assert refused.value.code == "MissingParameter.RegionId"
    assert devcloud.admin.writes(resource_id=fresh_ecs_id) == []


def test_dry_run_changes_nothing(ecs: Any, devcloud: DevcloudHandle, fresh_ecs_id: str) -> None:
    devcloud.admin.create_instance(fresh_ecs_id, status="Stopped")
    with pytest.raises(ClientException) as dry:
        ecs.delete_instances_with_options(
            ecs_models.DeleteInstancesRequest(
                region_id=REGION, instance_id=[fresh_ecs_id], dry_run=True
            ),
            RuntimeOptions(),
        )
    assert dry.value.code == "DryRunOperation"
    assert devcloud.admin.writes(resource_id=fresh_ecs_id) == []


def test_datapoints_are_a_json_string_like_the_real_api(devcloud: DevcloudHandle) -> None:
    cms = CmsClient(_config(devcloud, devcloud.read_key))
    first = next(iter(devcloud.reader().list_instances(REGION, "ecs.instance")))
    body = cms.describe_metric_list_with_options(
        cms_models.DescribeMetricListRequest(
            namespace="acs_ecs_dashboard",
            metric_name="CPUUtilization",
            dimensions=json.dumps({"instanceId": first.resource_id}),
            period="86400",
            start_time="2026-11-01 00:00:00",
            end_time=str((FLEET_NOW - FLEET_NOW % 86_400) * 1000),
        ),
        RuntimeOptions(),
    ).body
    assert body.code == "200" and body.success is True and body.period == "86400"
    points = json.loads(body.datapoints)
    assert points and {"timestamp", "instanceId", "Average", "Maximum", "Minimum"} <= set(points[0])
