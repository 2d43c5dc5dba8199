"""`airlock up --cloud aws-moto` end to end: the agent proposes a stop of an idle EC2
instance at a seeded moto server, a person approves it through the CLI, the executor
stops exactly that instance, and Ctrl-C stops everything. (doctor's AWS checks are in
test_doctor_aws.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest

from devstack.ports import free_port
from tests.support.polling import wait_for

from .up_harness import alive, cli, executed, log_in, pending, running_up

pytestmark = pytest.mark.slow

DEADLINE = 300.0


def _states(url: str) -> dict[str, str]:
    ec2 = boto3.session.Session().client(
        "ec2",
        region_name="us-east-1",
        endpoint_url=url,
        aws_access_key_id="test",
        aws_secret_access_key="test",  # moto: no IAM in the demo
    )
    return {
        i["InstanceId"]: i["State"]["Name"]
        for r in ec2.describe_instances()["Reservations"]
        for i in r["Instances"]
    }


def test_up_with_aws_moto_stops_an_idle_ec2_instance_once_approved(tmp_path: Path) -> None:
    ports = {name: free_port() for name in ("webapp", "checkpoint", "devcloud")}
    checkpoint = f"http://127.0.0.1:{ports['checkpoint']}"
    moto = f"http://127.0.0.1:{ports['devcloud']}"
    state = tmp_path / ".airlock"
    cli_home = tmp_path / "cli"
    cli_home.mkdir(mode=0o700)
    args = ("--cloud", "aws-moto", "--instances", "10")
    with running_up(tmp_path, ports, *args, deadline=DEADLINE) as up:
        # moto takes devcloud's port; no devcloud runs, none is seeded.
        services = up.services()
        assert sorted(services) == ["agent", "checkpoint", "executor", "moto", "webapp"]
        assert not (state / "devcloud.db").exists()
        fleet = json.loads((state / "moto-fleet.json").read_text())
        idle = {i["id"] for i in fleet if i["truth"] == "idle" and i["type"] == "ec2.instance"}
        log_in(state, checkpoint, cli_home)
        stop = {"provider": "aws", "resource_type": "ec2.instance", "operation": "stop"}
        proposal = wait_for(
            "the agent's AWS proposal", lambda: pending(cli_home, **stop), DEADLINE, every=0.5
        )
        assert proposal is not None
        target = proposal["resource_id"]
        assert target in idle, "only an idle instance is proposed"
        shown = cli(["approvals", "show", proposal["id"]], cli_home)
        assert "in AWS us-east-1 (account 123456789012)" in shown.stdout
        assert "console https://us-east-1.console.aws.amazon.com/ec2/home" in shown.stdout
        before = _states(moto)
        approve = cli(["approvals", "approve", proposal["id"], "--yes", "--json"], cli_home)
        assert approve.returncode == 0, approve.stdout + approve.stderr
        wait_for(
            "the stop to execute", lambda: executed(cli_home, proposal["id"]), DEADLINE, every=0.5
        )
        after = _states(moto)
        assert after[target] in ("stopping", "stopped")
        changed = {i for i in after if after[i] != before[i]}
        assert changed <= {target}, "the executor wrote to nothing else"
    assert up.proc.returncode == 0, up.text
    assert [pid for pid in services.values() if alive(pid)] == []
