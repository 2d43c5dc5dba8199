"""infra/: scripts parse, RAM policies are least privilege, setup-ram has a dry run."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = [*sorted((ROOT / "infra").rglob("*.sh")), ROOT / ".ci" / "run"]
ALIBABA = ROOT / "airlock" / "cloud" / "alibaba"
# What the adapter calls, read from its code: the reader counts each call by its RAM
# action name; the writer builds one SDK request per call (``sdk("ecs").models.
# StopInstanceRequest``...).
READ_ACTIONS = set(
    re.findall(r'_count\("([a-z]+:[A-Za-z]+)"\)', (ALIBABA / "_reader.py").read_text())
)
WRITES = {
    f"{service}:{name}"
    for service, name in re.findall(
        r'\bsdk\("(ecs|rds)"\)\.models\.([A-Za-z]+)Request\(', (ALIBABA / "writer.py").read_text()
    )
}
#: The executor re-reads live state; only the agent reads metrics and prices.
EXECUTOR_READS = READ_ACTIONS - {"cms:DescribeMetricList", "ecs:DescribePrice", "rds:DescribePrice"}


def test_the_adapter_actions_were_found() -> None:
    assert {
        "ecs:DescribeInstances",
        "ecs:DescribePrice",
        "rds:DescribeDBInstances",
        "rds:DescribePrice",
        "rds:ListTagResources",
        "cms:DescribeMetricList",
    } == READ_ACTIONS
    assert {"ecs:StopInstance", "ecs:DeleteInstances", "rds:StopDBInstance"} == WRITES


def _policy(name: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((ROOT / "infra" / "ram" / name).read_text())
    return value


def _allowed(policy: dict[str, Any]) -> set[str]:
    return {a for s in policy["Statement"] if s["Effect"] == "Allow" for a in s["Action"]}


@pytest.mark.parametrize("script", SCRIPTS, ids=[str(p.relative_to(ROOT)) for p in SCRIPTS])
def test_every_script_parses(script: Path) -> None:
    subprocess.run(["bash", "-n", str(script)], check=True)


def test_read_policy_allows_exactly_what_the_reader_calls() -> None:
    policy = _policy("read-policy.json")
    assert _allowed(policy) == READ_ACTIONS
    assert all("*" not in a.split(":")[1] for a in _allowed(policy)), "no wildcard actions"


def test_write_policy_allows_exactly_the_writes_and_the_live_re_read() -> None:
    policy = _policy("write-policy.json")
    assert _allowed(policy) == WRITES | EXECUTOR_READS
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


def _dry_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ROOT / "infra" / "scripts" / "setup-ram.sh"), "--dry-run", *args],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )


def _words(line: str) -> list[str]:
    """The arguments bash would pass for one printed command (it prints with ``%q``)."""
    out = subprocess.run(
        ["bash", "-c", f"set -- {line}; printf '%s\\0' \"$@\""],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split("\0")[:-1]


def _policy_documents(stdout: str) -> dict[str, dict[str, Any]]:
    documents = {}
    for line in stdout.splitlines():
        words = _words(line)
        if words[2] == "CreatePolicy":
            name = words[words.index("--PolicyName") + 1]
            documents[name] = json.loads(words[words.index("--PolicyDocument") + 1])
    return documents


def test_setup_ram_scopes_the_writes_to_the_account_and_regions() -> None:
    result = _dry_run("--account", "5123456789012345", "--regions", "ap-southeast-1,cn-hangzhou")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    documents = _policy_documents(result.stdout)
    assert documents["AirlockAgentRead"] == _policy("read-policy.json")
    write = documents["AirlockExecutorWrite"]
    assert _allowed(write) == WRITES | EXECUTOR_READS
    scoped = {
        action: statement["Resource"]
        for statement in write["Statement"]
        if statement["Effect"] == "Allow"
        for action in statement["Action"]
        if action in WRITES
    }
    ecs = [f"acs:ecs:{r}:5123456789012345:instance/*" for r in ("ap-southeast-1", "cn-hangzhou")]
    rds = [f"acs:rds:{r}:5123456789012345:dbinstance/*" for r in ("ap-southeast-1", "cn-hangzhou")]
    assert scoped == {
        "ecs:StopInstance": ecs,
        "ecs:DeleteInstances": ecs,
        "rds:StopDBInstance": rds,
    }
    # The protect-tag deny still covers every resource.
    denies = [s for s in write["Statement"] if s["Effect"] == "Deny"]
    assert denies == [s for s in _policy("write-policy.json")["Statement"] if s["Effect"] == "Deny"]


def test_setup_ram_without_a_scope_warns_that_writes_cover_every_region() -> None:
    result = _dry_run()
    assert result.returncode == 0
    assert "every region" in result.stderr
    assert _policy_documents(result.stdout)["AirlockExecutorWrite"] == _policy("write-policy.json")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--account", "5123456789012345"], "together"),
        (["--regions", "ap-southeast-1"], "together"),
        (["--account", "acct-1", "--regions", "ap-southeast-1"], "numeric"),
        (["--account", "5123456789012345", "--regions", "ap-southeast-1,Bad Region"], "region id"),
        (["--account", "5123456789012345", "--regions", "*"], "region id"),
        (["--account"], "needs a value"),
        (["--prefix", "a b"], "--prefix"),
        (["--bogus"], "usage"),
    ],
)
def test_setup_ram_refuses_bad_arguments_before_printing_anything(
    args: list[str], message: str
) -> None:
    result = _dry_run(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert message in result.stderr
