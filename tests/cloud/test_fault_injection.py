"""Injected faults reach the caller as the right typed error; the write log tells the truth.

Throttling, 5xx and timeouts are unknown outcomes (the executor must probe); a refused
precondition or a missing resource is a definite refusal.
"""

from __future__ import annotations

import pytest

from airlock.cloud.ports import IncorrectState, ResourceNotFound, UnknownOutcome
from devstack.devcloud import DevcloudHandle
from tests.support.polling import wait_for

REGION = "ap-southeast-1"


def test_throttling_is_an_unknown_outcome_with_no_effect(
    devcloud: DevcloudHandle, fresh_ecs_id: str
) -> None:
    devcloud.admin.create_instance(fresh_ecs_id)
    devcloud.admin.set_faults(fail_next_writes=1, fail_kind="throttling")
    with pytest.raises(UnknownOutcome) as unknown:
        devcloud.writer().stop_ecs(REGION, fresh_ecs_id, stopped_mode="StopCharging")
    assert unknown.value.code == "Throttling.User"
    assert devcloud.admin.writes(resource_id=fresh_ecs_id) == []
    # the fault was consumed: the next write goes through, exactly once
    devcloud.writer().stop_ecs(REGION, fresh_ecs_id, stopped_mode="StopCharging")
    assert len(devcloud.admin.writes(resource_id=fresh_ecs_id)) == 1


@pytest.mark.parametrize(
    ("kind", "code"), [("unavailable", "ServiceUnavailable"), ("internal", "InternalError")]
)
def test_server_error_is_an_unknown_outcome(
    devcloud: DevcloudHandle, fresh_ecs_id: str, kind: str, code: str
) -> None:
    devcloud.admin.create_instance(fresh_ecs_id, status="Stopped")
    devcloud.admin.set_faults(fail_next_writes=1, fail_kind=kind)
    with pytest.raises(UnknownOutcome) as unknown:
        devcloud.writer().delete_ecs(REGION, fresh_ecs_id, client_token="apv_5xx")
    assert unknown.value.code == code
    assert devcloud.admin.writes(resource_id=fresh_ecs_id) == []
    assert devcloud.reader().get_state(REGION, "ecs.instance", fresh_ecs_id) is not None


def test_apply_then_drop_is_an_unknown_outcome_and_the_effect_happened(
    devcloud: DevcloudHandle, fresh_ecs_id: str
) -> None:
    devcloud.admin.create_instance(fresh_ecs_id)
    devcloud.admin.set_faults(drop_next_writes=1, drop_delay_ms=1_500)
    with pytest.raises(UnknownOutcome) as unknown:
        devcloud.writer(read_timeout_ms=400).stop_ecs(
            REGION, fresh_ecs_id, stopped_mode="StopCharging"
        )
    assert unknown.value.code == "Transport"
    # Applied, then held: on a loaded runner devcloud may still be applying it when the
    # 400 ms run out, so wait for the log (a write never applied never appears).
    [entry] = wait_for(
        "the dropped write in the log",
        lambda: devcloud.admin.writes(resource_id=fresh_ecs_id),
        30,
        every=0.05,
    )
    assert entry["action"] == "StopInstance"
    state = devcloud.reader().get_state(REGION, "ecs.instance", fresh_ecs_id)
    assert state is not None and state.status in ("Stopping", "Stopped")  # what a probe sees


def test_dropped_delete_then_retry_with_the_same_token_deletes_once(
    devcloud: DevcloudHandle, fresh_ecs_id: str
) -> None:
    devcloud.admin.create_instance(fresh_ecs_id, status="Stopped")
    devcloud.admin.set_faults(drop_next_writes=1, drop_delay_ms=1_500)
    with pytest.raises(UnknownOutcome):
        devcloud.writer(read_timeout_ms=400).delete_ecs(
            REGION, fresh_ecs_id, client_token="apv_drop"
        )
    devcloud.writer().delete_ecs(REGION, fresh_ecs_id, client_token="apv_drop")
    assert len(devcloud.admin.writes(resource_id=fresh_ecs_id)) == 1


def test_latency_past_the_read_timeout_is_an_unknown_outcome(
    devcloud: DevcloudHandle, fresh_ecs_id: str
) -> None:
    devcloud.admin.create_instance(fresh_ecs_id)
    devcloud.admin.set_faults(write_latency_ms=5_000)
    with pytest.raises(UnknownOutcome):
        devcloud.writer(read_timeout_ms=300).stop_ecs(
            REGION, fresh_ecs_id, stopped_mode="StopCharging"
        )
    # reads are not slowed by write latency: a read held as long would time out, and one
    # that is not has seconds for a loaded runner's stalls (1 s was close)
    assert devcloud.reader(read_timeout_ms=4_000).get_state(REGION, "ecs.instance", fresh_ecs_id)


def test_failing_reads_surface_as_unknown_outcome(devcloud: DevcloudHandle) -> None:
    devcloud.admin.set_faults(fail_next_reads=1, fail_kind="unavailable")
    with pytest.raises(UnknownOutcome):
        list(devcloud.reader().list_instances(REGION, "ecs.instance"))
    assert next(iter(devcloud.reader().list_instances(REGION, "ecs.instance")))


def test_incorrect_status_is_a_definite_refusal(
    devcloud: DevcloudHandle, fresh_ecs_id: str
) -> None:
    devcloud.admin.create_instance(fresh_ecs_id)
    devcloud.admin.set_instance(fresh_ecs_id, status="Starting")
    with pytest.raises(IncorrectState):
        devcloud.writer().stop_ecs(REGION, fresh_ecs_id, stopped_mode="StopCharging")


def test_deleted_out_of_band_is_not_found(devcloud: DevcloudHandle, fresh_ecs_id: str) -> None:
    devcloud.admin.create_instance(fresh_ecs_id, status="Stopped")
    devcloud.admin.delete_instance(fresh_ecs_id)
    with pytest.raises(ResourceNotFound):
        devcloud.writer().delete_ecs(REGION, fresh_ecs_id, client_token="apv_oob")


def test_fault_settings_round_trip_and_reset(devcloud: DevcloudHandle) -> None:
    faults = devcloud.admin.set_faults(latency_ms=5, fail_next_writes=2, fail_kind="throttling")
    assert (faults["latency_ms"], faults["fail_next_writes"]) == (5, 2)
    devcloud.admin.reset_faults()
    assert devcloud.admin.faults()["fail_next_writes"] == 0


def test_connection_cut_after_the_effect_is_an_unknown_outcome(
    devcloud: DevcloudHandle, fresh_ecs_id: str
) -> None:
    devcloud.admin.create_instance(fresh_ecs_id, status="Stopped")
    devcloud.admin.set_faults(drop_next_writes=1, drop_mode="reset")
    with pytest.raises(UnknownOutcome) as unknown:
        devcloud.writer().delete_ecs(REGION, fresh_ecs_id, client_token="apv_cut")
    assert unknown.value.code == "Transport"
    assert len(devcloud.admin.writes(resource_id=fresh_ecs_id)) == 1
    assert devcloud.reader().get_state(REGION, "ecs.instance", fresh_ecs_id) is None


def test_unknown_fault_kinds_are_refused(devcloud: DevcloudHandle) -> None:
    import httpx

    with pytest.raises(httpx.HTTPStatusError):
        devcloud.admin.set_faults(fail_kind="meteor")
    with pytest.raises(httpx.HTTPStatusError):
        devcloud.admin.set_faults(fail_next_everything=1)
    assert devcloud.admin.faults()["fail_kind"] == "unavailable"
