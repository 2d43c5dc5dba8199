"""airlock doctor's AWS checks against moto's server with IAM enforced: who the
credentials are, whether they may describe instances, and nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from airlock.cli._doctor_aws import AwsTarget, aws_checks
from devstack.moto import ACCOUNT, AwsKey, MotoHandle, running_moto

ROOT = Path(__file__).resolve().parents[2]
REGION = "us-east-1"


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoHandle]:
    tmp = tmp_path_factory.mktemp("moto")
    with running_moto(tmp, fleet=[{"region": REGION, "count": 2}]) as handle:
        # A user holding exactly infra/aws/read-policy.json, and one holding nothing.
        iam = handle.client("iam")
        for name, policy in (("infra-read", "read-policy.json"), ("nobody", None)):
            iam.create_user(UserName=name)
            if policy is not None:
                iam.put_user_policy(
                    UserName=name,
                    PolicyName=name,
                    PolicyDocument=(ROOT / "infra" / "aws" / policy).read_text(),
                )
            key = iam.create_access_key(UserName=name)["AccessKey"]
            handle.keys[name] = AwsKey(key["AccessKeyId"], key["SecretAccessKey"])
        handle.enforce_auth()
        handle.reset_record()
        yield handle


def _checks(moto: MotoHandle, who: str, account: str = ACCOUNT) -> list[tuple[str, str]]:
    key = moto.keys.get(who, AwsKey(who, "secret"))
    session = boto3.session.Session(
        aws_access_key_id=key.access_key_id, aws_secret_access_key=key.secret_access_key
    )
    target = AwsTarget("agent", session, REGION, moto.url, account)
    return [(status, detail) for status, _name, detail in aws_checks(target)]


def test_the_read_policy_passes_the_checks_without_a_write(moto: MotoHandle) -> None:
    moto.reset_record()
    checks = _checks(moto, "infra-read")
    assert [s for s, _ in checks] == ["ok", "ok"], checks
    assert "user/infra-read" in checks[0][1]
    assert "dry run" in checks[1][1]
    assert moto.writes() == []  # moto's own record: nothing but reads reached it


def test_the_read_policy_is_refused_stop_and_terminate(moto: MotoHandle) -> None:
    from botocore.exceptions import ClientError

    ec2 = moto.client("ec2", REGION, key="infra-read")
    (instance,) = moto.fleet[REGION][:1]
    for call in (ec2.stop_instances, ec2.terminate_instances):
        with pytest.raises(ClientError) as refused:
            call(InstanceIds=[instance])
        assert refused.value.response["Error"]["Code"] in ("UnauthorizedOperation", "AccessDenied")
    states = ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"]
    assert states[0]["State"]["Name"] == "running"


def test_credentials_without_a_policy_fail_the_describe(moto: MotoHandle) -> None:
    checks = _checks(moto, "nobody")
    assert checks[-1][0] == "fail", checks
    assert "denied" in checks[-1][1]


def test_unknown_keys_fail_at_the_identity(moto: MotoHandle) -> None:
    checks = _checks(moto, "AKIAUNKNOWN000000000")
    assert checks == [("fail", "sts:GetCallerIdentity refused: InvalidClientTokenId")]


def test_credentials_of_another_account_fail(moto: MotoHandle) -> None:
    checks = _checks(moto, "infra-read", account="999999999999")
    expected = "the credentials are account 123456789012, the agent is bound to 999999999999"
    assert ("fail", expected) in checks


def test_airlock_doctor_checks_the_agents_and_executors_aws_credentials(
    moto: MotoHandle, tmp_path: Path
) -> None:
    reader, writer = moto.keys["reader"], moto.keys["writer"]
    moto.reset_record()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRLOCK_", "AWS_"))}
    env.update(
        {
            "AIRLOCK_ENV": "dev",
            "AIRLOCK_HOME": str(tmp_path),
            "AIRLOCK_AGENT_PROVIDER": "aws",
            "AIRLOCK_AGENT_AWS_ENDPOINT_URL": moto.url,
            "AIRLOCK_AGENT_CLOUD_REGIONS": REGION,
            "AIRLOCK_AGENT_CLOUD_ACCESS_KEY_ID": reader.access_key_id,
            "AIRLOCK_AGENT_CLOUD_ACCESS_KEY_SECRET": reader.secret_access_key,
            "AIRLOCK_EXECUTOR_PROVIDER": "aws",
            "AIRLOCK_EXECUTOR_REGION": REGION,
            "AIRLOCK_EXECUTOR_AWS_ENDPOINT_URL": moto.url,
            "AIRLOCK_EXECUTOR_CLOUD_ACCESS_KEY_ID": writer.access_key_id,
            "AIRLOCK_EXECUTOR_CLOUD_ACCESS_KEY_SECRET": writer.secret_access_key,
        }
    )
    done = subprocess.run(
        [sys.executable, "-m", "airlock.cli", "doctor", "--url", "http://127.0.0.1:9"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    lines = done.stdout.splitlines()
    for service, user in (("agent", "airlock-reader"), ("executor", "airlock-writer")):
        (identity,) = [line for line in lines if line.split()[1:2] == [f"aws.{service}"]]
        assert identity.startswith("ok") and f"user/{user}" in identity, done.stdout
        (describe,) = [line for line in lines if f"aws.{service}.describe" in line]
        assert describe.startswith("ok"), done.stdout
    assert moto.writes() == []
    assert json.dumps(done.stdout)  # printable as JSON: no raw control characters
