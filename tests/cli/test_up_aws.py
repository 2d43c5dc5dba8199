"""`airlock up --cloud aws-moto` end to end: the agent proposes a stop of an idle EC2
instance at a seeded moto server, a person approves it through the CLI, the executor
stops exactly that instance, and Ctrl-C stops everything. (doctor's AWS checks are in
test_doctor_aws.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest

from devstack.ports import free_port
from tests.support.polling import wait_for

from .test_up import _alive, _cli, _Up

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
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    args = ["--home", str(state), "--cloud", "aws-moto", "--instances", "10"]
    for name, port in ports.items():
        args += [f"--{name}-port", str(port)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "airlock.cli", "up", *args, "--agent-interval", "5"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    up = _Up(proc)
    try:
        try:
            wait_for("up", lambda: "Ctrl-C stops everything." in up.text or proc.poll(), DEADLINE)
        except AssertionError:
            raise AssertionError(up.text) from None
        assert proc.poll() is None, up.text
        fleet = json.loads((state / "moto-fleet.json").read_text())
        idle = {i["id"] for i in fleet if i["truth"] == "idle" and i["type"] == "ec2.instance"}
        people = {
            line.split()[0]: line.split()[2]
            for line in (state / "demo-credentials").read_text().splitlines()
        }
        login = _cli(
            ["login", "--url", checkpoint, "--username", "alice", "--password-stdin"],
            cli_home,
            stdin=people["alice"] + "\n",
        )
        assert login.returncode == 0, login.stderr

        def pending_ec2_stop() -> dict[str, Any] | None:
            out = _cli(["approvals", "list", "--state", "pending", "--json"], cli_home)
            assert out.returncode == 0, out.stderr
            items = [
                p
                for p in json.loads(out.stdout)["items"]
                if (p["provider"], p["resource_type"], p["operation"])
                == ("aws", "ec2.instance", "stop")
            ]
            return items[0] if items else None

        proposal = wait_for("the agent's AWS proposal", pending_ec2_stop, DEADLINE, every=0.5)
        assert proposal is not None
        target = proposal["resource_id"]
        assert target in idle, "only an idle instance is proposed"
        shown = _cli(["approvals", "show", proposal["id"]], cli_home)
        assert "in AWS us-east-1 (account 123456789012)" in shown.stdout
        assert "console https://us-east-1.console.aws.amazon.com/ec2/home" in shown.stdout
        before = _states(moto)
        approve = _cli(["approvals", "approve", proposal["id"], "--yes", "--json"], cli_home)
        assert approve.returncode == 0, approve.stdout + approve.stderr

        def executed() -> bool:
            out = _cli(["approvals", "show", proposal["id"], "--json"], cli_home)
            return out.returncode == 0 and json.loads(out.stdout)["state"] == "executed"

        wait_for("the stop to execute", executed, DEADLINE, every=0.5)
        after = _states(moto)
        assert after[target] in ("stopping", "stopped")
        changed = {i for i in after if after[i] != before[i]}
        assert changed <= {target}, "the executor wrote to nothing else"

        children = up.pids()
        assert len(children) == 5
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        up.close()
    assert proc.returncode == 0, up.text
    assert [pid for pid in children if _alive(pid)] == []
