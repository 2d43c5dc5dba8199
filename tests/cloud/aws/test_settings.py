"""AWS settings: an aws executor's account and region are AWS's, and its credentials come
from a key, a profile or a role, under the existing settings scheme."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from airlock.cloud.aws import AwsConfig
from airlock.settings import MOTO_ACCOUNT, ExecutorSettings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.chdir(str(tmp_path))  # no stray .env
    for name in ("AIRLOCK_ENV", "AIRLOCK_EXECUTOR_PROVIDER", "AIRLOCK_EXECUTOR_REGION"):
        monkeypatch.delenv(name, raising=False)


def _prod(monkeypatch: pytest.MonkeyPatch, **env: str) -> None:
    base = {
        "PROVIDER": "aws",
        "REGION": "us-east-1",
        "ACCOUNT": "123456789012",
        "AUDIENCE": "airlock-executor/prod-us-east-1",
        "DATABASE_URL": "sqlite:///x.db",
    }
    for key, value in {**base, **env}.items():
        monkeypatch.setenv(f"AIRLOCK_EXECUTOR_{key}", value)


def test_an_aws_executor_takes_a_profile_or_a_role_instead_of_a_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _prod(monkeypatch)
    with pytest.raises(ValidationError, match="access key"):
        ExecutorSettings()
    _prod(monkeypatch, AWS_PROFILE="airlock-executor")
    settings = ExecutorSettings()
    assert AwsConfig.from_settings(settings).profile == "airlock-executor"
    monkeypatch.delenv("AIRLOCK_EXECUTOR_AWS_PROFILE")
    _prod(monkeypatch, AWS_ROLE_ARN="arn:aws:iam::123456789012:role/airlock-executor")
    config = AwsConfig.from_settings(ExecutorSettings())
    assert config.role_arn == "arn:aws:iam::123456789012:role/airlock-executor"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"ACCOUNT": "5123456789012345"}, "12 digits"),
        ({"REGION": "ap-southeast-1a"}, "not an AWS region"),
        ({"AWS_ENDPOINT_URL": "127.0.0.1:5000"}, "http"),
    ],
)
def test_an_aws_executor_refuses_another_providers_formats(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    _prod(monkeypatch, AWS_PROFILE="p", **env)
    with pytest.raises(ValidationError, match=message):
        ExecutorSettings()


def test_in_dev_an_aws_executor_is_bound_to_motos_account(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    monkeypatch.setenv("AIRLOCK_EXECUTOR_PROVIDER", "aws")
    monkeypatch.setenv("AIRLOCK_EXECUTOR_REGION", "us-east-1")
    assert ExecutorSettings().account_or_default() == MOTO_ACCOUNT


def test_the_cli_wires_an_aws_executor_with_the_aws_adapter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airlock.cli._executor import _cloud
    from airlock.cloud.aws import AwsReader
    from airlock.cloud.aws.writer import AwsWriter

    _prod(monkeypatch, CLOUD_ACCESS_KEY_ID="AKIAEXAMPLE", CLOUD_ACCESS_KEY_SECRET="s")
    reader, writer = _cloud(ExecutorSettings())
    assert isinstance(reader, AwsReader)
    assert isinstance(writer, AwsWriter)
