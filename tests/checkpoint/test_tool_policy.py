"""Policy for tool calls: rules on the type, the tool, the declared risk and argument
values; cloud rules never decide a tool call and tool rules never a cloud action; what a
file may not say is refused at load, naming the rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airlock.protocol import ToolCall
from services.checkpoint.errors import ConfigError
from services.checkpoint.policy import DEFAULT_RULE, Policy, load_policy

from .builders import action, tool_call_value
from .harness import World, make_world
from .tools import code, submit_tool

DEFAULT_POLICY = Path(__file__).parents[2] / "services" / "checkpoint" / "default-policy.toml"

REFUNDS = b"""
version = 1

[[rule]]
name = "refund-large"
effect = "approve"
quorum = 2
match.tool = "refund"
match.arguments = [{name = "amount", op = ">", value = 10000}]

[[rule]]
name = "refund-small-auto"
effect = "auto"
match.tool = "refund"
match.risk = ["low"]

[[rule]]
name = "no-wipes"
effect = "deny"
reason = "never through an agent"
match.tool = "wipe_disk"

[[rule]]
name = "every-cloud-action"
effect = "approve"
quorum = 3
"""


def call(**kwargs: Any) -> ToolCall:
    return ToolCall.model_validate(tool_call_value(**kwargs))


def policy(text: bytes) -> Policy:
    return Policy.from_bytes(text, "<test>")


def test_amount_over_limit_matches_the_two_person_rule() -> None:
    decision = policy(REFUNDS).decide(call(arguments={"amount": 10001}))
    assert (decision.rule, decision.quorum, decision.effect) == ("refund-large", 2, "approve")


def test_amount_at_limit_falls_to_the_default() -> None:
    decision = policy(REFUNDS).decide(call(arguments={"amount": 10000}))
    assert (decision.rule, decision.quorum, decision.confirm) == (DEFAULT_RULE, 1, False)


def test_condition_on_absent_or_other_typed_argument_does_not_match() -> None:
    p = policy(REFUNDS)
    assert p.decide(call(arguments={})).rule == DEFAULT_RULE
    assert p.decide(call(arguments={"amount": "99999"})).rule == DEFAULT_RULE
    assert p.decide(call(arguments={"amount": True})).rule == DEFAULT_RULE
    ne = policy(
        b'version = 1\n[[rule]]\nname = "n"\neffect = "approve"\nquorum = 2\n'
        b'match.arguments = [{name = "currency", op = "!=", value = "EUR"}]\n'
    )
    assert ne.decide(call(arguments={})).rule == DEFAULT_RULE
    assert ne.decide(call(arguments={"currency": 1})).rule == DEFAULT_RULE
    assert ne.decide(call(arguments={"currency": "USD"})).rule == "n"


@pytest.mark.parametrize(
    ("op", "value", "amount", "holds"),
    [
        ("==", 5, 5, True),
        ("!=", 5, 5, False),
        (">=", 5, 5, True),
        ("<", 5, 5, False),
        ("<=", 5, 4, True),
        ("in", [1, "5"], 5, False),
        ("in", [1, 5], 5, True),
    ],
)
def test_argument_operators(op: str, value: Any, amount: int, holds: bool) -> None:
    text = (
        'version = 1\n[[rule]]\nname = "r"\neffect = "approve"\nquorum = 2\n'
        f'match.arguments = [{{name = "amount", op = "{op}", value = {_toml(value)}}}]\n'
    )
    assert (policy(text.encode()).decide(call(arguments={"amount": amount})).rule == "r") is holds


def _toml(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return f'"{value}"' if isinstance(value, str) else str(value)


def test_cloud_rule_never_matches_a_tool_call() -> None:
    decision = policy(REFUNDS).decide(call(tool="send_email", arguments={}))
    assert decision.rule == DEFAULT_RULE  # not every-cloud-action


def test_tool_rule_never_matches_a_cloud_action() -> None:
    p = policy(
        b'version = 1\n[[rule]]\nname = "all-tools"\neffect = "deny"\n'
        b'match.type = "airlock.tool-call/v1"\n'
    )
    assert p.decide(action()).rule == DEFAULT_RULE
    assert p.decide(call()).effect == "deny"


def test_high_risk_tool_call_with_no_rule_needs_typed_target() -> None:
    decision = load_policy(DEFAULT_POLICY).decide(call(risk="high"))
    assert (decision.rule, decision.quorum, decision.confirm, decision.risk) == (
        DEFAULT_RULE,
        1,
        True,
        "high",
    )


def test_auto_never_approves_a_high_risk_tool_call() -> None:
    p = policy(REFUNDS)
    assert p.decide(call(risk="low", arguments={"amount": 5})).effect == "auto"
    assert p.decide(call(risk="high", arguments={"amount": 5})).effect == "approve"


@pytest.mark.parametrize(
    ("rule", "says"),
    [
        ('match.tool = "refund"\nmatch.operation = "stop"', "cloud keys"),
        ('match.type = "airlock.action/v1"\nmatch.tool = "refund"', "other action type"),
        ('match.type = "airlock.tool-call/v2"', "match.type"),
        ('match.tool = "re fund"', "not a tool name"),
        ('match.risk = "critical"', "match.risk"),
        ('match.tool = "refund"\nrisk = "high"', "declares its own risk"),
        ('match.arguments = [{name = "amount", op = "~", value = 1}]', "op must be"),
        ('match.arguments = [{name = "amount", op = ">", value = "9"}]', "integers only"),
        ('match.arguments = [{name = "amount", op = "==", value = 1.5}]', "integer or a string"),
        ('match.arguments = [{name = "amount", op = "==", value = true}]', "integer or a string"),
        ('match.arguments = [{name = "amount", op = "in", value = []}]', "'in' takes"),
        ('match.arguments = [{name = "amount", op = "=="}]', "exactly name, op and value"),
    ],
)
def test_invalid_tool_rule_is_refused_at_load_naming_it(rule: str, says: str) -> None:
    text = f'version = 1\n[[rule]]\nname = "bad-one"\neffect = "approve"\n{rule}\n'
    with pytest.raises(ConfigError, match="bad-one") as info:
        policy(text.encode())
    assert says in str(info.value)


@pytest.mark.parametrize(
    "match",
    [
        'match.risk = ["low"]',
        'match.tool = "refund"',
        'match.tool = "refund"\nmatch.risk = ["high"]',
    ],
)
def test_auto_tool_rule_must_name_tools_and_risks_below_high(match: str) -> None:
    text = f'version = 1\n[[rule]]\nname = "auto-one"\neffect = "auto"\n{match}\n'
    with pytest.raises(ConfigError, match="auto-one"):
        policy(text.encode())


@pytest.mark.parametrize(
    "tools",
    [
        '[tools.refund]\nreject_reasons = ["Fraud"]',
        '[tools.refund]\nreject_reasons = ["fraud suspected"]',
        "[tools.refund]\nother = 1",
        '[tools."re fund"]\nreject_reasons = ["fraud"]',
    ],
)
def test_invalid_tools_table_is_refused(tools: str) -> None:
    with pytest.raises(ConfigError, match="tools"):
        policy(f"version = 1\n{tools}\n".encode())


def test_tool_reject_reasons_extend_the_built_in_ones() -> None:
    p = policy(b'version = 1\n[tools.refund]\nreject_reasons = ["fraud_suspected"]\n')
    assert "fraud_suspected" in p.reject_reasons("refund")
    assert "other" in p.reject_reasons("refund")
    assert "fraud_suspected" not in p.reject_reasons("send_email")
    assert "fraud_suspected" not in p.reject_reasons(None)


@pytest.fixture
def refunds_world(db_url: str, tmp_path: Path) -> Any:
    w = make_world(db_url, tmp_path, policy(REFUNDS))
    try:
        yield w
    finally:
        w.client.close()
        w.checkpoint.db.dispose()


def test_tool_call_amount_over_limit_needs_two_approvers(refunds_world: World) -> None:
    w = refunds_world
    p = submit_tool(w, arguments={"order": "order-881", "amount": 25000}).json()
    assert (p["policy"]["rule"], p["policy"]["quorum"]) == ("refund-large", 2)
    one = w.approve("alice", p["id"], p["action_hash"]).json()
    assert (one["state"], one["votes_needed"]) == ("pending", 1)
    two = w.approve("bob", p["id"], p["action_hash"]).json()
    assert two["state"] == "approved"
    assert len(two["approval"]["envelope"]["signatures"]) == 1


def test_denied_tool_call_is_recorded_and_refused(refunds_world: World) -> None:
    r = submit_tool(refunds_world, tool="wipe_disk")
    assert (r.status_code, code(r)) == (403, "E_POLICY_DENIED")
    assert "never through an agent" in r.json()["error"]["message"]


def test_auto_tool_call_is_approved_by_the_policy(refunds_world: World) -> None:
    r = submit_tool(refunds_world, risk="low", arguments={"amount": 5})
    assert r.json()["state"] == "approved", r.text
