"""The writer's three operations against devcloud, judged by devcloud's write log."""

from __future__ import annotations

import time

import pytest

from airlock.cloud.ports import (
    CloudWriter,
    DefiniteRefusal,
    IncorrectState,
    ResourceNotFound,
)
from devstack.devcloud import DevcloudHandle

REGION = "ap-southeast-1"


def _wait_status(devcloud: DevcloudHandle, kind: str, rid: str, want: str) -> None:
    """Poll until the lazily computed transition shows (bounded; not a race wait)."""
    reader = devcloud.reader()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        state = reader.get_state(REGION, kind, rid)  # type: ignore[arg-type]
        if state is not None and state.status == want:
            return
        time.sleep(0.05)  # polling devcloud's lazy transition under a deadline
    raise AssertionError(f"{rid} never reached {want}")


def test_writer_implements_the_port(devcloud: DevcloudHandle) -> None:
    assert isinstance(devcloud.writer(), CloudWriter)


def test_stop_goes_running_stopping_stopped(devcloud: DevcloudHandle, fresh_ecs_id: str) -> None:
    devcloud.admin.create_instance(fresh_ecs_id)
    result = devcloud.writer().stop_ecs(REGION, fresh_ecs_id, stopped_mode="StopCharging")
    state = devcloud.reader().get_state(REGION, "ecs.instance", fresh_ecs_id)
    assert state is not None and state.status == "Stopping"
    _wait_status(devcloud, "ecs.instance", fresh_ecs_id, "Stopped")
    [entry] = devcloud.admin.writes(resource_id=fresh_ecs_id)
    assert entry["action"] == "StopInstance"
    assert entry["request_id"] == result.request_id
    # Every parameter as sent: never forced, never a dry run, the mode the action signed.
    assert entry["params"] == {
        "DryRun": "False",
        "ForceStop": "False",
        "InstanceId": fresh_ecs_id,
        "StoppedMode": "StopCharging",
    }


def test_stopping_a_stopped_instance_is_incorrect_state(
    devcloud: DevcloudHandle, fresh_ecs_id: str
) -> None:
    devcloud.admin.create_instance(fresh_ecs_id, status="Stopped")
    with pytest.raises(IncorrectState) as refused:
        devcloud.writer().stop_ecs(REGION, fresh_ecs_id, stopped_mode="KeepCharging")
    assert refused.value.code == "IncorrectInstanceStatus"
    assert devcloud.admin.writes(resource_id=fresh_ecs_id) == []


def test_delete_with_the_same_client_token_deletes_once(
    devcloud: DevcloudHandle, fresh_ecs_id: str
) -> None:
    devcloud.admin.create_instance(fresh_ecs_id, status="Stopped")
    writer = devcloud.writer()
    first = writer.delete_ecs(REGION, fresh_ecs_id, client_token="apv_same_token_1")
    again = writer.delete_ecs(REGION, fresh_ecs_id, client_token="apv_same_token_1")
    assert again.request_id == first.request_id  # the first result, replayed
    [entry] = devcloud.admin.writes(resource_id=fresh_ecs_id)
    assert entry["action"] == "DeleteInstances"
    assert entry["client_token"] == "apv_same_token_1"
    assert entry["params"] == {
        "ClientToken": "apv_same_token_1",
        "DryRun": "False",
        "Force": "False",  # the API then refuses anything not stopped
        "InstanceId.1": fresh_ecs_id,
        "RegionId": REGION,
    }
    assert devcloud.reader().get_state(REGION, "ecs.instance", fresh_ecs_id) is None


def test_reused_client_token_with_other_parameters_is_refused(
    devcloud: DevcloudHandle, fresh_ecs_id: str
) -> None:
    other = fresh_ecs_id + "b"
    devcloud.admin.create_instance(fresh_ecs_id, status="Stopped")
    devcloud.admin.create_instance(other, status="Stopped")
    writer = devcloud.writer()
    writer.delete_ecs(REGION, fresh_ecs_id, client_token="apv_token_2")
    with pytest.raises(DefiniteRefusal) as refused:
        writer.delete_ecs(REGION, other, client_token="apv_token_2")
    assert refused.value.code == "IdempotentParameterMismatch"
    assert devcloud.admin.writes(resource_id=other) == []


def test_deleting_a_running_instance_is_incorrect_state(
    devcloud: DevcloudHandle, fresh_ecs_id: str
) -> None:
    devcloud.admin.create_instance(fresh_ecs_id)
    with pytest.raises(IncorrectState):
        devcloud.writer().delete_ecs(REGION, fresh_ecs_id, client_token="apv_running")
    assert devcloud.admin.writes(resource_id=fresh_ecs_id) == []
    # a refused attempt does not burn the token: once stopped, the same token deletes
    devcloud.admin.set_instance(fresh_ecs_id, status="Stopped")
    devcloud.writer().delete_ecs(REGION, fresh_ecs_id, client_token="apv_running")
    assert len(devcloud.admin.writes(resource_id=fresh_ecs_id)) == 1


def test_missing_instances_are_not_found(devcloud: DevcloudHandle) -> None:
    writer = devcloud.writer()
    with pytest.raises(ResourceNotFound) as stop:
        writer.stop_ecs(REGION, "i-gone0000", stopped_mode="StopCharging")
    with pytest.raises(ResourceNotFound) as delete:
        writer.delete_ecs(REGION, "i-gone0000", client_token="apv_gone")
    with pytest.raises(ResourceNotFound) as rds:
        writer.stop_rds(REGION, "rm-gone0000")
    assert stop.value.code == delete.value.code == "InvalidInstanceId.NotFound"
    assert rds.value.code == "InvalidDBInstanceId.NotFound"


def test_instance_in_another_region_is_not_found(
    devcloud: DevcloudHandle, fresh_ecs_id: str
) -> None:
    devcloud.admin.create_instance(fresh_ecs_id, status="Stopped", region="eu-central-1")
    with pytest.raises(ResourceNotFound):
        devcloud.writer().delete_ecs(REGION, fresh_ecs_id, client_token="apv_region")
    assert devcloud.reader().get_state(REGION, "ecs.instance", fresh_ecs_id) is None


def test_stop_sent_to_another_region_is_not_found_and_writes_nothing(
    devcloud: DevcloudHandle, fresh_ecs_id: str
) -> None:
    """StopInstance carries no RegionId: the regional endpoint it is sent to is its region,
    and that endpoint does not know an instance of another region (nor does RDS)."""
    rid = "rm-" + fresh_suffix()
    devcloud.admin.create_instance(fresh_ecs_id, region=REGION)
    devcloud.admin.create_instance(rid, kind="rds", region=REGION)
    writer = devcloud.writer()
    with pytest.raises(ResourceNotFound) as ecs:
        writer.stop_ecs("eu-central-1", fresh_ecs_id, stopped_mode="StopCharging")
    with pytest.raises(ResourceNotFound) as rds:
        writer.stop_rds("eu-central-1", rid)
    assert ecs.value.code == "InvalidInstanceId.NotFound"
    assert rds.value.code == "InvalidDBInstanceId.NotFound"
    for resource_type, resource_id in (("ecs.instance", fresh_ecs_id), ("rds.instance", rid)):
        assert devcloud.admin.writes(resource_id=resource_id) == []
        state = devcloud.reader().get_state(REGION, resource_type, resource_id)  # type: ignore[arg-type]
        assert state is not None and state.status == "Running"
    # In its own region, the same calls stop both.
    writer.stop_ecs(REGION, fresh_ecs_id, stopped_mode="StopCharging")
    writer.stop_rds(REGION, rid)
    assert len(devcloud.admin.writes(resource_id=fresh_ecs_id)) == 1
    [rds_write] = devcloud.admin.writes(resource_id=rid)
    assert rds_write["params"] == {"DBInstanceId": rid, "RegionId": REGION}


def test_stop_rds_then_again_is_incorrect_state(devcloud: DevcloudHandle) -> None:
    rid = "rm-" + fresh_suffix()
    devcloud.admin.create_instance(rid, kind="rds")
    writer = devcloud.writer()
    writer.stop_rds(REGION, rid)
    state = devcloud.reader().get_state(REGION, "rds.instance", rid)
    assert state is not None and state.status in ("Stopping", "Stopped")
    with pytest.raises(IncorrectState) as refused:
        writer.stop_rds(REGION, rid)
    assert refused.value.code == "IncorrectDBInstanceState"
    assert [w["action"] for w in devcloud.admin.writes(resource_id=rid)] == ["StopDBInstance"]


def test_out_of_band_changes_are_visible_and_not_logged(
    devcloud: DevcloudHandle, fresh_ecs_id: str
) -> None:
    devcloud.admin.create_instance(fresh_ecs_id, tags=[("team", "sre")])
    devcloud.admin.set_instance(fresh_ecs_id, add_tags=[("airlock:protect", "true")])
    state = devcloud.reader().get_state(REGION, "ecs.instance", fresh_ecs_id)
    assert state is not None and state.tags == {"team": "sre", "airlock:protect": "true"}
    devcloud.admin.delete_instance(fresh_ecs_id)
    assert devcloud.reader().get_state(REGION, "ecs.instance", fresh_ecs_id) is None
    assert devcloud.admin.writes(resource_id=fresh_ecs_id) == []


def test_bad_arguments_are_refused_before_any_call(devcloud: DevcloudHandle) -> None:
    writer = devcloud.writer()
    with pytest.raises(ValueError):
        writer.stop_ecs(REGION, "i-abcd1234", stopped_mode="Hibernate")
    with pytest.raises(ValueError):
        writer.delete_ecs(REGION, "i-abcd1234", client_token="x" * 65)
    with pytest.raises(ValueError):
        writer.stop_ecs(REGION, "rm-abcd1234", stopped_mode="StopCharging")


_n = iter(range(10**9))


def fresh_suffix() -> str:
    return f"t{int(time.time() * 1000):x}{next(_n):04d}"
