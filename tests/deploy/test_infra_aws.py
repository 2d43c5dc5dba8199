"""infra/aws/: the agent's IAM policy only reads; the executor's writes are denied on the
protect tag, the same tag key the RAM policies and the agent's default use."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from airlock.settings import AgentSettings

ROOT = Path(__file__).resolve().parents[2]
AWS = ROOT / "infra" / "aws"
ADAPTER = ROOT / "airlock" / "cloud" / "aws"
# What the adapter calls, read from its code: the reader counts each call by its IAM
# action name; the writer calls one boto3 method per write.
READ_ACTIONS = set(
    re.findall(r'_count\("([a-z0-9]+:[A-Za-z]+)"\)', (ADAPTER / "_reader.py").read_text())
)
_BOTO3_WRITES = {
    "stop_instances": "ec2:StopInstances",
    "terminate_instances": "ec2:TerminateInstances",
    "stop_db_instance": "rds:StopDBInstance",
}
WRITES = {
    _BOTO3_WRITES[method]
    for _service, method in re.findall(
        r"\.(ec2|rds)\(region\)\.([a-z_]+)", (ADAPTER / "writer.py").read_text()
    )
}
#: The executor re-reads live state; only the agent reads metrics.
EXECUTOR_READS = READ_ACTIONS - {"cloudwatch:GetMetricData"}
#: A read in IAM's naming: every AWS read action is one of these verbs.
READ_VERB = re.compile(r"^[a-z0-9-]+:(Describe|Get|List)[A-Za-z]+$")


def _policy(name: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((AWS / name).read_text())
    return value


def _statements(policy: dict[str, Any], effect: str) -> list[dict[str, Any]]:
    return [s for s in policy["Statement"] if s["Effect"] == effect]


def _actions(statement: dict[str, Any]) -> set[str]:
    action = statement["Action"]
    return {action} if isinstance(action, str) else set(action)


def _allowed(policy: dict[str, Any]) -> set[str]:
    return {a for s in _statements(policy, "Allow") for a in _actions(s)}


def _protect_key() -> str:
    """The tag key the Alibaba write policy denies on, which must be the agent's default."""
    ram = json.loads((ROOT / "infra" / "ram" / "write-policy.json").read_text())
    (deny,) = _statements(ram, "Deny")
    (condition_key,) = deny["Condition"]["StringLike"]
    key = condition_key.removeprefix("acs:ResourceTag/")
    assert (key,) == AgentSettings.model_fields["protect_tags"].default
    return str(key)


def test_the_adapter_actions_were_found() -> None:
    assert {
        "ec2:DescribeInstances",
        "rds:DescribeDBInstances",
        "cloudwatch:GetMetricData",
    } == READ_ACTIONS
    assert {"ec2:StopInstances", "ec2:TerminateInstances", "rds:StopDBInstance"} == WRITES


def test_both_policies_are_iam_policy_documents() -> None:
    for name in ("read-policy.json", "write-policy.json"):
        policy = _policy(name)
        assert set(policy) == {"Version", "Statement"}
        assert policy["Version"] == "2012-10-17"
        for statement in policy["Statement"]:
            assert statement["Effect"] in ("Allow", "Deny")
            assert "NotAction" not in statement and "NotResource" not in statement
            assert all("*" not in a for a in _actions(statement)), "no wildcard actions"


def test_the_agent_policy_allows_exactly_what_the_reader_calls() -> None:
    policy = _policy("read-policy.json")
    assert _statements(policy, "Deny") == []
    actions = _allowed(policy)
    assert actions == READ_ACTIONS
    assert not actions & WRITES
    assert all(READ_VERB.fullmatch(a) for a in actions), sorted(actions)


def test_the_executor_policy_allows_the_writes_and_the_live_re_read_only() -> None:
    policy = _policy("write-policy.json")
    assert _allowed(policy) == WRITES | EXECUTOR_READS
    for statement in _statements(policy, "Allow"):
        if _actions(statement) & WRITES:
            assert statement["Resource"] in (
                "arn:aws:ec2:*:*:instance/*",
                "arn:aws:rds:*:*:db:*",
            ), "writes are scoped to instance resources"


def test_the_executor_policy_denies_every_write_on_the_protect_tag() -> None:
    key = _protect_key()
    denies = _statements(_policy("write-policy.json"), "Deny")
    # aws:ResourceTag holds on all three; RDS's own rds:db-tag is denied too.
    on_tag = [
        s
        for s in denies
        if s["Resource"] == "*" and s["Condition"] == {"Null": {f"aws:ResourceTag/{key}": "false"}}
    ]
    assert len(on_tag) == 1
    assert _actions(on_tag[0]) == WRITES
    assert any(
        _actions(s) == {"rds:StopDBInstance"}
        and s["Condition"] == {"Null": {f"rds:db-tag/{key}": "false"}}
        for s in denies
    )
    assert all(_actions(s) <= WRITES for s in denies)


def test_the_guide_names_both_policies_and_the_protect_tag() -> None:
    guide = (AWS / "README.md").read_text()
    for needle in ("read-policy.json", "write-policy.json", _protect_key(), "role_arn"):
        assert needle in guide
