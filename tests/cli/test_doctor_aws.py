"""airlock doctor's AWS checks against moto's server with IAM enforced: who the
credentials are, whether they may describe instances, and nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from airlock.cli._doctor_aws import AwsTarget, aws_checks
from devstack.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
REGION = "us-east-1"
#: moto's fixed account id.
ACCOUNT = "123456789012"
#: Requests moto serves before it enforces IAM: the setup below, exactly.
SETUP_REQUESTS = 6


def _session(key: tuple[str, str]) -> boto3.Session:
    return boto3.Session(aws_access_key_id=key[0], aws_secret_access_key=key[1], region_name=REGION)


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    port = free_port()
    log = (tmp_path_factory.mktemp("moto") / "moto.log").open("wb")
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(SETUP_REQUESTS)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{url}/moto-api/", timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.1)
        setup = _session(("setup", "setup"))
        iam = setup.client("iam", endpoint_url=url)
        keys = {}
        iam.create_user(UserName="agent")  # 1
        iam.put_user_policy(  # 2
            UserName="agent",
            PolicyName="AirlockAgentRead",
            PolicyDocument=(ROOT / "infra" / "aws" / "read-policy.json").read_text(),
        )
        made = iam.create_access_key(UserName="agent")["AccessKey"]  # 3
        keys["agent"] = (made["AccessKeyId"], made["SecretAccessKey"])
        iam.create_user(UserName="nobody")  # 4
        made = iam.create_access_key(UserName="nobody")["AccessKey"]  # 5
        keys["nobody"] = (made["AccessKeyId"], made["SecretAccessKey"])
        ec2 = setup.client("ec2", endpoint_url=url)
        (instance,) = ec2.run_instances(  # 6
            ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType="t3.micro"
        )["Instances"]
        yield {"url": url, "keys": keys, "instance": instance["InstanceId"]}
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def _checks(moto: dict[str, Any], who: str, account: str = ACCOUNT) -> list[tuple[str, str]]:
    key = moto["keys"].get(who, (who, "secret"))
    target = AwsTarget("agent", _session(key), REGION, moto["url"], account)
    return [(status, detail) for status, _name, detail in aws_checks(target)]


def test_the_agents_read_credentials_pass_without_writing(moto: dict[str, Any]) -> None:
    checks = _checks(moto, "agent")
    assert [s for s, _ in checks] == ["ok", "ok"], checks
    assert "arn:aws:iam::123456789012:user/agent" in checks[0][1]
    assert "dry run" in checks[1][1]
    ec2 = _session(moto["keys"]["agent"]).client("ec2", endpoint_url=moto["url"])
    (reservation,) = ec2.describe_instances(InstanceIds=[moto["instance"]])["Reservations"]
    assert reservation["Instances"][0]["State"]["Name"] == "running"


def test_credentials_without_the_read_policy_fail_the_describe(moto: dict[str, Any]) -> None:
    checks = _checks(moto, "nobody")
    assert checks[-1][0] == "fail", checks
    assert "denied" in checks[-1][1]


def test_unknown_keys_fail_at_the_identity(moto: dict[str, Any]) -> None:
    checks = _checks(moto, "AKIAUNKNOWN000000000")
    assert checks == [("fail", "sts:GetCallerIdentity refused: InvalidClientTokenId")]


def test_credentials_of_another_account_fail(moto: dict[str, Any]) -> None:
    checks = _checks(moto, "agent", account="999999999999")
    assert (
        "fail",
        "the credentials are account 123456789012, the agent is bound to 999999999999",
    ) in checks


def test_a_doctor_run_is_read_only_by_construction() -> None:
    source = (ROOT / "airlock" / "cli" / "_doctor_aws.py").read_text()
    calls = {line.split(".")[-1].split("(")[0] for line in source.split() if "(" in line}
    assert not {c for c in calls if c.startswith(("stop_", "terminate_", "start_", "create_"))}
    assert json.loads((ROOT / "infra" / "aws" / "read-policy.json").read_text())
