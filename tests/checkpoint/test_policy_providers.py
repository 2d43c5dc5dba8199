"""Policy rules match the provider, and the default policy is as strict for AWS as for
Alibaba Cloud: a provider the kernel knows never falls through to the one-human default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airlock.protocol import ALLOWED_OPERATIONS, PROVIDER_RESOURCE_TYPES, ProposedAction
from services.checkpoint.errors import ConfigError
from services.checkpoint.policy import DEFAULT_RULE, Policy, load_policy

from .builders import action_value

DEFAULT_POLICY = Path(__file__).parents[2] / "services" / "checkpoint" / "default-policy.toml"
#: A valid target at each provider, per resource type.
TARGETS: dict[tuple[str, str], tuple[str, str, str]] = {
    ("alibaba", "ecs.instance"): ("5123456789012345", "ap-southeast-1", "i-t4n0example"),
    ("alibaba", "rds.instance"): ("5123456789012345", "ap-southeast-1", "rm-t4n0example"),
    ("aws", "ec2.instance"): ("123456789012", "us-east-1", "i-0123456789abcdef0"),
    ("aws", "rds.instance"): ("123456789012", "us-east-1", "orders-db"),
}


def _action(provider: str, rtype: str, operation: str, **kwargs: Any) -> ProposedAction:
    account, region, rid = TARGETS[provider, rtype]
    value = action_value(
        operation=operation,
        resource_type=rtype,
        resource_id=rid,
        account=account,
        region=region,
        **kwargs,
    )
    value["provider"] = provider
    if provider == "aws":
        value["params"] = {}
        value["precondition"]["status"] = "Running" if operation == "stop" else "Stopped"
    return ProposedAction.model_validate(value)


CALLS = [
    (provider, rtype, op)
    for provider, rtypes in PROVIDER_RESOURCE_TYPES.items()
    for rtype in sorted(rtypes)
    for op in sorted(ALLOWED_OPERATIONS[rtype])
]


@pytest.fixture(scope="module")
def default() -> Policy:
    return load_policy(DEFAULT_POLICY)


def test_every_call_the_kernel_allows_has_a_target_here() -> None:
    assert {(p, t) for p, t, _ in CALLS} == set(TARGETS)


@pytest.mark.parametrize(("provider", "rtype", "operation"), CALLS)
def test_the_default_policy_has_a_rule_of_its_own_for_every_provider_call(
    default: Policy, provider: str, rtype: str, operation: str
) -> None:
    action = _action(provider, rtype, operation)
    decision = default.decide(action)
    assert decision.rule != DEFAULT_RULE, "a provider must never fall through to the default"
    assert decision.effect == "approve"
    if action.is_high_risk:
        assert (decision.quorum, decision.confirm, decision.risk) == (2, True, "high")
    else:
        assert (decision.quorum, decision.confirm, decision.risk) == (1, False, "medium")


def test_an_ec2_terminate_needs_two_people_and_the_typed_id(default: Policy) -> None:
    decision = default.decide(_action("aws", "ec2.instance", "delete"))
    assert decision.rule == "aws-terminate-two-people"
    assert (decision.quorum, decision.confirm, decision.risk) == (2, True, "high")


@pytest.mark.parametrize("provider", sorted(PROVIDER_RESOURCE_TYPES))
@pytest.mark.parametrize(
    "tags", [{"airlock:protect": ""}, {"Airlock:Protect": "1"}, {"Environment": "Production"}]
)
def test_protected_and_production_resources_are_denied_at_every_provider(
    default: Policy, provider: str, tags: dict[str, str]
) -> None:
    rtype = sorted(PROVIDER_RESOURCE_TYPES[provider])[0]
    assert default.decide(_action(provider, rtype, "stop", tags=tags)).effect == "deny"


def test_a_rule_for_one_provider_never_decides_another() -> None:
    policy = Policy.from_bytes(
        b'version = 1\n[[rule]]\nname = "no-aws-stops"\neffect = "deny"\n'
        b'match.provider = "aws"\nmatch.operation = "stop"\n'
    )
    assert policy.decide(_action("aws", "ec2.instance", "stop")).effect == "deny"
    assert policy.decide(_action("aws", "rds.instance", "stop")).effect == "deny"
    alibaba = policy.decide(_action("alibaba", "ecs.instance", "stop"))
    assert (alibaba.rule, alibaba.effect) == (DEFAULT_RULE, "approve")


@pytest.mark.parametrize(
    ("match", "says"),
    [
        ('match.provider = "gcp"', "unknown providers ['gcp']"),
        (
            'match.provider = "aws"\nmatch.resource_type = "ecs.instance"',
            "ecs.instance does not exist at aws",
        ),
        (
            'match.provider = "alibaba"\nmatch.resource_type = ["ec2.instance"]',
            "ec2.instance does not exist at alibaba",
        ),
    ],
)
def test_a_rule_no_action_can_match_is_refused_at_load(match: str, says: str) -> None:
    text = f'version = 1\n[[rule]]\nname = "r"\neffect = "deny"\n{match}\n'
    with pytest.raises(ConfigError, match=says.replace("[", r"\[").replace("]", r"\]")):
        Policy.from_bytes(text.encode())
