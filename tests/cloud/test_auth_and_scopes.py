"""devcloud authenticates like Alibaba Cloud (ACS3 signatures) and scopes keys like RAM."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from darabonba.core import DaraCore

from airlock.cloud.ports import PermissionDenied
from airlock.settings import DevcloudSettings
from devstack.devcloud import DevcloudHandle
from services.devcloud import create_app

REGION = "ap-southeast-1"


def test_read_key_cannot_stop_or_delete(devcloud: DevcloudHandle, fresh_ecs_id: str) -> None:
    devcloud.admin.create_instance(fresh_ecs_id, status="Stopped")
    reader_as_writer = devcloud.writer(key=devcloud.read_key)
    with pytest.raises(PermissionDenied) as stop:
        reader_as_writer.stop_ecs(REGION, fresh_ecs_id, stopped_mode="StopCharging")
    with pytest.raises(PermissionDenied) as delete:
        reader_as_writer.delete_ecs(REGION, fresh_ecs_id, client_token="tok-read-key")
    with pytest.raises(PermissionDenied):
        reader_as_writer.stop_rds(REGION, "rm-abcd1234")
    assert stop.value.code == delete.value.code == "Forbidden.RAM"
    assert stop.value.request_id
    assert devcloud.admin.writes(resource_id=fresh_ecs_id) == []
    assert devcloud.reader().get_state(REGION, "ecs.instance", fresh_ecs_id) is not None


def test_write_key_can_also_read(devcloud: DevcloudHandle) -> None:
    reader = devcloud.reader(key=devcloud.write_key)
    assert next(iter(reader.list_instances(REGION, "ecs.instance"))).resource_id


def test_bad_signature_is_refused(devcloud: DevcloudHandle) -> None:
    wrong_secret = (devcloud.read_key[0], devcloud.read_key[1] + "x")
    with pytest.raises(PermissionDenied) as refused:
        list(devcloud.reader(key=wrong_secret).list_instances(REGION, "ecs.instance"))
    assert refused.value.code == "SignatureDoesNotMatch"


def test_unknown_access_key_is_refused(devcloud: DevcloudHandle) -> None:
    with pytest.raises(PermissionDenied) as refused:
        list(
            devcloud.reader(key=("LTAIunknown000000", "s3cret")).list_instances(
                REGION, "ecs.instance"
            )
        )
    assert refused.value.code == "InvalidAccessKeyId.NotFound"


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every request the SDK sends, as signed (method, url, headers, body)."""
    seen: list[Any] = []
    original = DaraCore.do_action

    def spy(request: Any, runtime_option: Any = None) -> Any:
        url = DaraCore.compose_url(request)
        seen.append((request.method, url, dict(request.headers), request.body))
        return original(request, runtime_option)

    monkeypatch.setattr(DaraCore, "do_action", staticmethod(spy))
    yield seen


def _resend(
    devcloud: DevcloudHandle, method: str, url: str, headers: dict[str, str]
) -> httpx.Response:
    return httpx.request(method, url, headers=headers, timeout=5)


def test_replayed_signed_request_is_refused(devcloud: DevcloudHandle, captured: list[Any]) -> None:
    devcloud.reader().get_state(REGION, "ecs.instance", "i-abcd1234")
    method, url, headers, _ = captured[-1]
    replay = _resend(devcloud, method, url, headers)
    assert replay.status_code == 400
    assert replay.json()["Code"] == "SignatureNonceUsed"


def test_tampered_parameter_is_refused(devcloud: DevcloudHandle, captured: list[Any]) -> None:
    devcloud.reader().get_state(REGION, "ecs.instance", "i-abcd1234")
    method, url, headers, _ = captured[-1]
    headers = {**headers, "x-acs-signature-nonce": headers["x-acs-signature-nonce"] + "0"}
    forged = _resend(devcloud, method, url.replace("i-abcd1234", "i-abcd9999"), headers)
    assert forged.status_code == 400
    assert forged.json()["Code"] == "SignatureDoesNotMatch"


def test_swapped_action_header_is_refused(devcloud: DevcloudHandle, captured: list[Any]) -> None:
    devcloud.reader().get_state(REGION, "ecs.instance", "i-abcd1234")
    method, url, headers, _ = captured[-1]
    headers = {**headers, "x-acs-action": "DeleteInstances"}
    forged = _resend(devcloud, method, url, headers)
    assert forged.json()["Code"] == "SignatureDoesNotMatch"


def test_unsigned_request_gets_alibabas_error_shape(devcloud: DevcloudHandle) -> None:
    response = httpx.post(
        f"{devcloud.base_url}/?RegionId={REGION}",
        headers={"x-acs-action": "DescribeInstances", "x-acs-version": "2014-05-26"},
    )
    assert response.status_code == 400
    body = response.json()
    assert body["Code"] == "IncompleteSignature"
    assert set(body) == {"RequestId", "HostId", "Code", "Message", "Recommend"}


def test_admin_api_needs_its_token(devcloud: DevcloudHandle) -> None:
    assert httpx.get(f"{devcloud.base_url}/_admin/writes").status_code == 401
    wrong = {"Authorization": f"Bearer {devcloud.admin.token}x"}
    assert httpx.get(f"{devcloud.base_url}/_admin/writes", headers=wrong).status_code == 401
    # the cloud keys are no admin credential
    key = {"Authorization": f"Bearer {devcloud.write_key[1]}"}
    assert httpx.post(f"{devcloud.base_url}/_admin/faults", headers=key, json={}).status_code == 401


def test_admin_api_is_off_unless_enabled(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    settings = DevcloudSettings(db_path=tmp_path / "dc.db", admin_token="t" * 32)  # type: ignore[arg-type]
    app = create_app(settings)
    headers = {"Authorization": "Bearer " + "t" * 32}

    async def probe() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://devcloud") as client:
            return [
                (await client.get("/_admin/writes", headers=headers)).status_code,
                (await client.post("/_admin/faults", headers=headers, json={})).status_code,
                (await client.get("/_health")).status_code,
            ]

    assert asyncio.run(probe()) == [404, 404, 200]
