"""infra/: scripts parse, RAM policies are least privilege, setup-ram has a dry run."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = [*sorted((ROOT / "infra").rglob("*.sh")), ROOT / ".ci" / "run"]
READ_ACTIONS = {
    "ecs:DescribeInstances",
    "ecs:DescribeInstanceStatus",
    "ecs:ListTagResources",
    "rds:DescribeDBInstances",
    "rds:DescribeDBInstanceAttribute",
    "rds:ListTagResources",
    "cms:DescribeMetricList",
}
WRITES = {
    "ecs:StopInstance",
    "ecs:StopInstances",
    "ecs:DeleteInstance",
    "ecs:DeleteInstances",
    "rds:StopDBInstance",
}


def _policy(name: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((ROOT / "infra" / "ram" / name).read_text())
    return value


def _allowed(policy: dict[str, Any]) -> set[str]:
    return {a for s in policy["Statement"] if s["Effect"] == "Allow" for a in s["Action"]}


@pytest.mark.parametrize("script", SCRIPTS, ids=[str(p.relative_to(ROOT)) for p in SCRIPTS])
def test_every_script_parses(script: Path) -> None:
    subprocess.run(["bash", "-n", str(script)], check=True)


def test_read_policy_allows_only_reads() -> None:
    policy = _policy("read-policy.json")
    assert _allowed(policy) == READ_ACTIONS
    assert all("*" not in a.split(":")[1] for a in _allowed(policy)), "no wildcard actions"


def test_write_policy_allows_only_the_allowlisted_writes_and_reads() -> None:
    policy = _policy("write-policy.json")
    allowed = _allowed(policy)
    assert allowed - READ_ACTIONS == WRITES
    assert "cms:DescribeMetricList" not in allowed  # the executor never needs metrics
    for statement in policy["Statement"]:
        if statement["Effect"] == "Allow" and set(statement["Action"]) & WRITES:
            assert statement["Resource"] != "*", "writes are scoped to instance resources"


def test_write_policy_denies_protected_resources() -> None:
    denies = [s for s in _policy("write-policy.json")["Statement"] if s["Effect"] == "Deny"]
    assert len(denies) == 1
    assert set(denies[0]["Action"]) == WRITES
    assert denies[0]["Condition"] == {"StringLike": {"acs:ResourceTag/airlock:protect": "*"}}


def test_setup_ram_dry_run_prints_the_commands_and_runs_nothing() -> None:
    result = subprocess.run(
        ["bash", str(ROOT / "infra" / "scripts" / "setup-ram.sh"), "--dry-run"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},  # no aliyun CLI on PATH: a dry run must not need it
    )
    lines = result.stdout.splitlines()
    assert [line.split()[2] for line in lines] == [
        "CreateUser",
        "CreatePolicy",
        "AttachPolicyToUser",
        "CreateAccessKey",
    ] * 2
    assert "airlock-agent-read" in lines[0]
    assert "airlock-executor-write" in lines[4]


def test_setup_ram_without_the_cli_refuses_clearly() -> None:
    result = subprocess.run(
        ["bash", str(ROOT / "infra" / "scripts" / "setup-ram.sh")],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 2
    assert "aliyun CLI is not installed" in result.stderr
