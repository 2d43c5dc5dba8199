"""Cloud and devcloud settings refuse demo secrets outside dev, and resolve them inside."""

from __future__ import annotations

from typing import ClassVar, Literal

import pytest
from pydantic import ValidationError
from pydantic_settings import SettingsConfigDict

from airlock.cloud.alibaba import AlibabaConfig
from airlock.settings import DEVCLOUD_READ_KEY, DEVCLOUD_WRITE_KEY, CloudSettings, DevcloudSettings


class _WriterSettings(CloudSettings):
    model_config = SettingsConfigDict(env_prefix="AIRLOCK_TESTWRITER_", extra="ignore", frozen=True)
    dev_access: ClassVar[Literal["read", "write"]] = "write"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.chdir(str(tmp_path))  # no stray .env
    monkeypatch.delenv("AIRLOCK_ENV", raising=False)


def test_missing_cloud_key_is_refused_outside_dev() -> None:
    with pytest.raises(ValidationError, match="access key"):
        _WriterSettings()


def test_devcloud_demo_key_is_refused_outside_dev(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRLOCK_TESTWRITER_CLOUD_ACCESS_KEY_ID", DEVCLOUD_WRITE_KEY[0])
    monkeypatch.setenv("AIRLOCK_TESTWRITER_CLOUD_ACCESS_KEY_SECRET", DEVCLOUD_WRITE_KEY[1])
    with pytest.raises(ValidationError, match="demo key"):
        _WriterSettings()


def test_dev_resolves_to_devcloud_and_the_services_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    writer = _WriterSettings()
    assert writer.cloud_credentials() == DEVCLOUD_WRITE_KEY
    assert writer.cloud_endpoint_or_default() == ("127.0.0.1:8788", "http")
    reader = CloudSettings()
    assert reader.cloud_credentials() == DEVCLOUD_READ_KEY


def test_configured_key_and_endpoint_are_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRLOCK_TESTWRITER_CLOUD_ACCESS_KEY_ID", "LTAIreal")
    monkeypatch.setenv("AIRLOCK_TESTWRITER_CLOUD_ACCESS_KEY_SECRET", "real-secret")
    monkeypatch.setenv("AIRLOCK_TESTWRITER_CLOUD_REGIONS", '["ap-southeast-1","eu-central-1"]')
    settings = _WriterSettings()
    assert settings.cloud_credentials() == ("LTAIreal", "real-secret")
    assert settings.cloud_endpoint_or_default() == (None, "https")
    assert settings.cloud_regions == ("ap-southeast-1", "eu-central-1")
    assert "real-secret" not in repr(settings)


def test_alibaba_config_from_settings_keeps_the_secret_out_of_repr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    config = AlibabaConfig.from_settings(_WriterSettings())
    assert (config.access_key_id, config.endpoint, config.protocol) == (
        DEVCLOUD_WRITE_KEY[0],
        "127.0.0.1:8788",
        "http",
    )
    assert DEVCLOUD_WRITE_KEY[1] not in repr(config)


def test_devcloud_refuses_to_run_outside_dev() -> None:
    with pytest.raises(ValidationError, match="AIRLOCK_ENV=dev"):
        DevcloudSettings()


def test_devcloud_admin_needs_a_real_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    with pytest.raises(ValidationError, match="admin token"):
        DevcloudSettings(enable_admin=True)
    with pytest.raises(ValidationError, match="admin token"):
        DevcloudSettings(enable_admin=True, admin_token="short")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "regions"),
    [
        ("ap-southeast-1,cn-hangzhou", ("ap-southeast-1", "cn-hangzhou")),
        (" ap-southeast-1 , cn-hangzhou ", ("ap-southeast-1", "cn-hangzhou")),
        ('["ap-southeast-1", "cn-hangzhou"]', ("ap-southeast-1", "cn-hangzhou")),
        ("eu-central-1", ("eu-central-1",)),
    ],
)
def test_regions_are_read_comma_separated_or_as_a_json_list(
    monkeypatch: pytest.MonkeyPatch, text: str, regions: tuple[str, ...]
) -> None:
    """The documented comma-separated form used to fail with a settings traceback."""
    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    monkeypatch.setenv("AIRLOCK_TESTWRITER_CLOUD_REGIONS", text)
    assert _WriterSettings().cloud_regions == regions


@pytest.mark.parametrize("text", ["", "ap southeast 1", "AP-SOUTHEAST-1", '["x y"]', "[1"])
def test_a_malformed_region_list_is_refused(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    monkeypatch.setenv("AIRLOCK_TESTWRITER_CLOUD_REGIONS", text)
    with pytest.raises(ValidationError):
        _WriterSettings()


def test_devcloud_serves_by_default_the_account_dev_services_default_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airlock.settings import AgentSettings, ExecutorSettings
    from services.devcloud import ACCOUNT_ID

    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    assert DevcloudSettings().account == ACCOUNT_ID
    assert AgentSettings().account_or_default() == ACCOUNT_ID
    assert ExecutorSettings().account_or_default() == ACCOUNT_ID
    monkeypatch.setenv("AIRLOCK_DEVCLOUD_ACCOUNT", "not an account")
    with pytest.raises(ValidationError, match="account"):
        DevcloudSettings()
