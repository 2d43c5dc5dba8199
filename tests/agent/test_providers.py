"""The agent per provider: its facts match the kernel's, units become bytes the same way,
AWS proposals are AWS actions, thresholds come per provider. Pure: no I/O."""

from __future__ import annotations

import math
import os

import pytest

from airlock.cloud.ports import LiveState
from airlock.protocol import ALLOWED_OPERATIONS, PROVIDER_RESOURCE_TYPES
from airlock.settings import AgentSettings
from services.agent.discovery import Observation
from services.agent.idle import DAY, IdlePolicy, Usage, Window, rate_to_bytes, rfc3339
from services.agent.planner import AirlockStop, CheckpointView, Hold, PlanContext, Submit, plan
from services.agent.providers import AWS, PROVIDERS, Metrics
from services.agent.service import policy_from

NOW = 1_764_400_000
POLICY = IdlePolicy()
WINDOW = Window.ending_before(NOW, 14)
CTX = PlanContext(
    account="123456789012", agent_id="agent:scanner-1", policy=POLICY, now=NOW, provider=AWS
)
EC2 = "i-0123456789abcdef0"
APPROVED = NOW - 10 * DAY
STOPPED = CheckpointView(
    airlock_stops={
        ("us-east-1", EC2): AirlockStop("prop_stop0000", APPROVED + 60, approved_at=APPROVED)
    }
)


def _idle_usage() -> Usage:
    hours = WINDOW.hours
    return Usage(
        samples=hours,
        samples_expected=hours,
        cpu_avg_bp=100,
        cpu_p95_bp=200,
        daily_cpu_p95_bp=(200,) * 14,
        mem_avg_bp=None,
        daily_net_bytes=(1000,) * 14,
        complete=True,
    )


def _obs(rtype: str, rid: str, status: str, started_at: str = "") -> Observation:
    usage = _idle_usage()
    return Observation(
        state=LiveState(
            rtype,
            rid,
            "us-east-1",
            status,
            {"team": "sre"},
            "t3.large",
            "2025-01-01T00:00:00Z",
            "web",
            started_at,
        ),
        observed_at=NOW - 5,
        verdict=POLICY.verdict(usage, WINDOW),
        usage=usage,
        window=WINDOW,
    )


@pytest.mark.parametrize("name", sorted(PROVIDER_RESOURCE_TYPES))
def test_each_provider_the_kernel_knows_has_the_agents_facts(name: str) -> None:
    provider = PROVIDERS[name]
    assert set(provider.resource_types) == PROVIDER_RESOURCE_TYPES[name]
    for kind in provider.kinds:
        assert kind.deletable == ("delete" in ALLOWED_OPERATIONS[kind.resource_type])


def test_network_values_become_bytes_in_each_unit() -> None:
    def metrics(unit: str) -> Metrics:
        return Metrics("cpu", None, ("n",), unit)  # type: ignore[arg-type]

    assert metrics("bit/s").net_bytes(80.0, DAY) == rate_to_bytes(80.0, DAY) == 864_000
    assert metrics("B/s").net_bytes(10.0, DAY) == 864_000
    assert metrics("B/s").net_bytes(0.5, 1) == 1  # half up on the printed decimal
    for bad in (math.nan, math.inf, -1.0):
        with pytest.raises(ValueError):
            metrics("B/s").net_bytes(bad, DAY)


def test_an_idle_ec2_instance_gets_an_aws_stop_without_params() -> None:
    (step,) = plan(_obs("ec2.instance", EC2, "Running"), CheckpointView(), CTX)
    assert isinstance(step, Submit)
    action = step.action
    assert (action.provider, action.account, action.operation) == ("aws", "123456789012", "stop")
    assert action.params == {} and action.precondition.status == "Running"


def test_an_idle_aws_rds_instance_is_stopped() -> None:
    # The reader reports RDS "available" as Running.
    (step,) = plan(_obs("rds.instance", "orders-db", "Running"), CheckpointView(), CTX)
    assert isinstance(step, Submit) and step.action.precondition.status == "Running"


def test_an_ec2_instance_that_stayed_stopped_gets_a_terminate_proposal() -> None:
    started = rfc3339(APPROVED - 30 * DAY)
    (step,) = plan(_obs("ec2.instance", EC2, "Stopped", started), STOPPED, CTX)
    assert isinstance(step, Submit)
    assert step.action.operation == "delete" and step.action.precondition.status == "Stopped"
    assert step.action.is_high_risk


def test_an_ec2_instance_a_person_started_after_airlocks_stop_is_not_terminated() -> None:
    # EC2 resets LaunchTime on every start: the reader reports it as the last start.
    started = rfc3339(APPROVED + DAY)
    (step,) = plan(_obs("ec2.instance", EC2, "Stopped", started), STOPPED, CTX)
    assert isinstance(step, Hold) and step.operation == "delete"
    assert step.reason.startswith(f"started again at {started}")


def test_a_stopped_aws_rds_instance_is_never_proposed_for_deletion() -> None:
    view = CheckpointView(
        airlock_stops={("us-east-1", "orders-db"): AirlockStop("prop_s", APPROVED, APPROVED)}
    )
    started = rfc3339(APPROVED - 30 * DAY)
    assert plan(_obs("rds.instance", "orders-db", "Stopped", started), view, CTX) == []


def test_a_status_the_provider_does_not_report_is_acted_on_never() -> None:
    assert plan(_obs("ec2.instance", EC2, "ShuttingDown"), CheckpointView(), CTX) == []
    assert plan(_obs("ec2.instance", EC2, "running"), CheckpointView(), CTX) == []


def test_thresholds_are_per_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("AIRLOCK_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    monkeypatch.setenv("AIRLOCK_AGENT_CPU_AVG_MAX_BP", "400")
    monkeypatch.setenv(
        "AIRLOCK_AGENT_PROVIDER_THRESHOLDS",
        '{"aws": {"cpu_avg_max_bp": 300, "window_days": 7, "net_quiet_min_days": 6}}',
    )
    aws = policy_from(AgentSettings(provider="aws", _env_file=None))  # type: ignore[call-arg]
    assert (aws.cpu_avg_max_bp, aws.window_days, aws.cpu_p95_max_bp) == (300, 7, 1000)
    alibaba = policy_from(AgentSettings(provider="alibaba", _env_file=None))  # type: ignore[call-arg]
    assert (alibaba.cpu_avg_max_bp, alibaba.window_days) == (400, 14)


@pytest.mark.parametrize(
    "given",
    [
        '{"aws": {"cpu_avg_max_bp": 10001}}',
        '{"aws": {"cpu_avg": 300}}',
        '{"gcp": {"cpu_avg_max_bp": 300}}',
        '{"aws": {"net_quiet_min_days": 20}}',  # more than the 14-day window
    ],
)
def test_a_threshold_no_policy_can_take_is_refused(
    monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    monkeypatch.setenv("AIRLOCK_AGENT_PROVIDER_THRESHOLDS", given)
    with pytest.raises(ValueError, match=r"provider_thresholds|net_quiet_min_days"):
        AgentSettings(provider="aws", _env_file=None)  # type: ignore[call-arg]
