"""The idle policy and the planner's pure parts: integer units, thresholds, protection,
deterministic ids, staged decisions. No I/O."""

from __future__ import annotations

import dataclasses
import math

import pytest

from airlock.api import Proposal
from airlock.cloud.ports import LiveState
from services.agent.discovery import Observation
from services.agent.idle import (
    DAY,
    IdlePolicy,
    Usage,
    UsageAccumulator,
    Verdict,
    Window,
    percent_to_bp,
    rate_to_bytes,
    rfc3339,
)
from services.agent.planner import (
    START_SLACK,
    AirlockStop,
    CheckpointView,
    Hold,
    PlanContext,
    Submit,
    Withdraw,
    plan,
    proposal_id,
    withdraw_vanished,
)

NOW = 1_764_400_000
POLICY = IdlePolicy()
WINDOW = Window.ending_before(NOW, 14)


def test_percent_becomes_basis_points_rounding_half_up_on_the_printed_decimal() -> None:
    assert percent_to_bp(3.4) == 340
    assert percent_to_bp(1.005) == 101  # 1.005 * 100 in binary floats is 100.49999…
    assert percent_to_bp(0.004) == 0 and percent_to_bp(0.005) == 1
    assert percent_to_bp(100.0) == 10_000
    for bad in (math.nan, math.inf, -0.5):
        with pytest.raises(ValueError):
            percent_to_bp(bad)


def test_rate_becomes_bytes() -> None:
    assert rate_to_bytes(80.0, DAY) == 864_000  # 80 bit/s for a day
    assert rate_to_bytes(0.1, 1) == 0 and rate_to_bytes(4.0, 1) == 1  # 0.0125 B, 0.5 B
    with pytest.raises(ValueError):
        rate_to_bytes(math.nan, DAY)


def test_window_is_the_last_whole_utc_days() -> None:
    assert WINDOW.end % DAY == 0 and WINDOW.end <= NOW < WINDOW.end + DAY
    assert WINDOW.end - WINDOW.start == 14 * DAY and WINDOW.hours == 336


def _usage(
    *,
    cpu: int = 120,
    peak: int | None = None,
    hours: int = 336,
    mem: int | None = 700,
    net: list[int | None] | None = None,
) -> Usage:
    acc = UsageAccumulator(WINDOW)
    for h in range(hours):
        acc.add_cpu(WINDOW.start + h * 3600, peak if peak is not None and h % 24 < 2 else cpu)
    if mem is not None:
        for d in range(14):
            acc.add_mem(WINDOW.start + d * DAY, mem)
    for d, nbytes in enumerate(net if net is not None else [2_000_000] * 14):
        if nbytes is not None:
            acc.add_net(WINDOW.start + d * DAY, nbytes)
    return acc.usage(complete=True)


def test_idle_usage_is_idle_and_says_why() -> None:
    verdict = POLICY.verdict(_usage(), WINDOW)
    assert verdict.kind == "idle"
    assert verdict.reasons[0].startswith("Idle 14 days: CPU avg 1.20% < 5.00%, p95 1.20%")


@pytest.mark.parametrize(
    ("usage", "kind"),
    [
        (_usage(cpu=499), "idle"),
        (_usage(cpu=500), "busy"),  # strictly below 5 %
        (_usage(cpu=100, peak=4000), "busy"),  # two hours a day at 40 %: p95 far above 10 %
        (_usage(mem=None), "idle"),  # memory not reported: not a criterion
        (_usage(mem=1500), "busy"),
        (_usage(net=[6_000_000] * 2 + [1_000] * 12), "idle"),  # 12 of 14 quiet days
        (_usage(net=[6_000_000] * 3 + [1_000] * 11), "busy"),
        (_usage(net=[None] * 3 + [1_000] * 11), "insufficient"),  # not reported ≠ quiet
        (_usage(hours=302), "insufficient"),  # under 90 % of the hours
        (_usage(hours=303), "idle"),
    ],
)
def test_thresholds(usage: Usage, kind: str) -> None:
    assert POLICY.verdict(usage, WINDOW).kind == kind


@pytest.mark.parametrize(
    ("tags", "protected"),
    [
        ({"airlock:protect": "true"}, True),
        ({"AIRLOCK:Protect": ""}, True),
        ({"note": "Airlock:PROTECT"}, True),
        ({"env": "prod"}, True),
        ({"Environment": "PRODUCTION"}, True),
        ({"ENV": "Prod-EU"}, True),
        ({"env": "preprod"}, False),
        ({"stage": "prod"}, False),  # only env/environment carry the production rule
        ({"team": "<i>growth</i>", "env": "dev"}, False),
    ],
)
def test_protect_list_is_case_insensitive(tags: dict[str, str], protected: bool) -> None:
    assert (POLICY.protection(tags) is not None) is protected


def test_young_instances_wait_for_a_whole_window() -> None:
    assert POLICY.age_verdict("2025-11-20T00:00:00Z", NOW) == Verdict(
        "young", ("9 days old, under the 14-day window",)
    )
    assert POLICY.age_verdict("2025-11-01T00:00:00Z", NOW) is None
    assert POLICY.age_verdict("", NOW) is not None  # unknown age is never old enough


def test_proposal_id_is_deterministic_per_resource_operation_and_window() -> None:
    base = {
        "account": "5123456789012345",
        "region": "ap-southeast-1",
        "resource_type": "ecs.instance",
        "resource_id": "i-abcd1234",
        "operation": "stop",
    }
    first = proposal_id(**base, window=WINDOW)
    assert first == proposal_id(**base, window=Window.ending_before(NOW + 3600, 14))
    assert first.startswith("prop_") and len(first) == 37
    assert first != proposal_id(**{**base, "operation": "delete"}, window=WINDOW)
    assert first != proposal_id(**base, window=Window.ending_before(NOW + DAY, 14))
    assert first != proposal_id(**{**base, "resource_id": "i-abcd1235"}, window=WINDOW)


# --------------------------------------------------------------------------- planner


def _obs(
    status: str = "Running",
    verdict: Verdict | None = None,
    rid: str = "i-abcd1234",
    started_at: str = "2025-01-01T00:00:00Z",
) -> Observation:
    usage = _usage()
    return Observation(
        state=LiveState(
            "ecs.instance",
            rid,
            "ap-southeast-1",
            status,
            {"team": "sre"},
            "ecs.g7.large",
            "2025-01-01T00:00:00Z",
            "web",
            started_at,
        ),
        observed_at=NOW - 5,
        verdict=verdict or POLICY.verdict(usage, WINDOW),
        usage=usage,
        window=WINDOW,
    )


CTX = PlanContext(account="5123456789012345", agent_id="agent:scanner-1", policy=POLICY, now=NOW)


def test_an_idle_running_instance_gets_a_float_free_stop() -> None:
    (step,) = plan(_obs(), CheckpointView(), CTX)
    assert isinstance(step, Submit)
    action = step.action
    assert action.operation == "stop" and action.params == {"stopped_mode": "StopCharging"}
    assert action.precondition.observed_at == "2025-11-29T07:06:35Z"
    assert action.created_at == "2025-11-29T07:06:40Z"
    assert action.evidence["daily_cpu_p95_bp"] == [120] * 14
    assert action.evidence["tags"] == {"team": "sre"}
    action.canonical_bytes()  # within the 16 KiB cap


def test_a_rejected_stop_is_held_for_a_window() -> None:
    view = CheckpointView(rejected_until={("ap-southeast-1", "i-abcd1234", "stop"): NOW + 1})
    (step,) = plan(_obs(), view, CTX)
    assert isinstance(step, Hold) and step.reason.startswith("rejected")


def test_non_nfc_tag_text_is_a_problem_not_a_rewrite() -> None:
    obs = _obs()
    bad = Observation(
        state=LiveState(
            "ecs.instance",
            "i-abcd1234",
            "ap-southeast-1",
            "Running",
            {"owner": "zoe\u0308"},
            "ecs.g7.large",
            "2025-01-01T00:00:00Z",
            "web",
        ),
        observed_at=obs.observed_at,
        verdict=obs.verdict,
        usage=obs.usage,
        window=WINDOW,
    )
    (step,) = plan(bad, CheckpointView(), CTX)
    assert type(step).__name__ == "Problem" and "NFC" in step.detail  # type: ignore[union-attr]


def test_a_busy_instance_has_its_open_stop_withdrawn() -> None:
    view = CheckpointView()
    from services.agent.planner import OpenProposal

    view.open[("ap-southeast-1", "i-abcd1234")] = [OpenProposal("prop_x0000000", "stop", "pending")]
    (step,) = plan(_obs(verdict=Verdict("busy", ("CPU avg 40.00% ≥ 5.00%",))), view, CTX)
    assert isinstance(step, Withdraw) and step.note.startswith("no longer idle")


def test_only_pending_proposals_of_vanished_resources_are_withdrawn() -> None:
    from services.agent.planner import OpenProposal

    view = CheckpointView()
    view.open[("ap-southeast-1", "i-gone0001")] = [OpenProposal("prop_p0000000", "stop", "pending")]
    view.open[("ap-southeast-1", "i-gone0002")] = [
        OpenProposal("prop_a0000000", "delete", "approved")
    ]
    view.open[("eu-west-1", "i-gone0003")] = [OpenProposal("prop_e0000000", "stop", "pending")]
    steps = withdraw_vanished(view, ["ap-southeast-1"])
    assert [s.proposal_id for s in steps if isinstance(s, Withdraw)] == ["prop_p0000000"]


# --------------------------------------------------------------------------- staged delete

#: Airlock's stop of i-abcd1234: approved 10 days ago, reported executed a minute later.
APPROVED = NOW - 10 * DAY
STOP = AirlockStop("prop_stop0000", executed_at=APPROVED + 60, approved_at=APPROVED)


def _stopped_view() -> CheckpointView:
    return CheckpointView(airlock_stops={("ap-southeast-1", "i-abcd1234"): STOP})


def test_a_delete_is_proposed_for_what_stayed_stopped_since_airlocks_stop() -> None:
    started = rfc3339(APPROVED - 30 * DAY)
    (step,) = plan(_obs("Stopped", started_at=started), _stopped_view(), CTX)
    assert isinstance(step, Submit) and step.action.operation == "delete"
    evidence = step.action.evidence
    assert evidence["last_started_at"] == started
    assert evidence["stopped_seconds"] == NOW - STOP.executed_at
    assert f"not started since (last start {started})" in step.action.reason


def test_the_delete_reason_names_the_grace_period_in_its_own_unit() -> None:
    """A grace period shorter than a day (the demo's) reads "2 minutes", not "0-day"."""
    started = rfc3339(APPROVED - 30 * DAY)
    stop = AirlockStop("prop_stop0000", executed_at=NOW - 300, approved_at=NOW - 360)
    view = CheckpointView(airlock_stops={("ap-southeast-1", "i-abcd1234"): stop})
    short = dataclasses.replace(CTX, grace_seconds=120)
    (step,) = plan(_obs("Stopped", started_at=started), view, short)
    assert isinstance(step, Submit) and step.action.operation == "delete"
    assert "Stopped by Airlock 5 minutes ago (prop_stop0000)" in step.action.reason
    assert step.action.reason.endswith("the grace period of 2 minutes has passed")
    (held,) = plan(_obs("Stopped", started_at=started), view, CTX)
    assert isinstance(held, Hold) and held.reason.startswith("stopped 5 minutes; grace period")
    (step,) = plan(_obs("Stopped", started_at=started), _stopped_view(), CTX)
    assert (
        isinstance(step, Submit) and "the grace period of 7 days has passed" in step.action.reason
    )


@pytest.mark.parametrize("after_approval", [0, 1, DAY, 9 * DAY])
def test_restarted_since_airlocks_stop_then_stopped_by_hand_is_not_deleted(
    after_approval: int,
) -> None:
    started = rfc3339(APPROVED + after_approval)
    (step,) = plan(_obs("Stopped", started_at=started), _stopped_view(), CTX)
    assert isinstance(step, Hold) and step.operation == "delete"
    assert step.reason.startswith(f"started again at {started} after Airlock stopped it")


def test_a_start_within_the_slack_before_the_approval_counts_as_after_it() -> None:
    # StartTime is to the minute and the clocks differ: too close to call is "started since".
    near = rfc3339(APPROVED - START_SLACK)
    (step,) = plan(_obs("Stopped", started_at=near), _stopped_view(), CTX)
    assert isinstance(step, Hold) and step.reason.startswith("started again")
    clear = rfc3339(APPROVED - START_SLACK - 1)
    (step,) = plan(_obs("Stopped", started_at=clear), _stopped_view(), CTX)
    assert isinstance(step, Submit)


@pytest.mark.parametrize("started_at", ["", "2025-11-19T07:06Z", "yesterday"])
def test_no_readable_last_start_time_means_no_delete(started_at: str) -> None:
    (step,) = plan(_obs("Stopped", started_at=started_at), _stopped_view(), CTX)
    assert isinstance(step, Hold) and step.operation == "delete"
    assert "cannot establish that it stayed stopped" in step.reason


def _executed_stop(*, approved: bool) -> Proposal:
    """The checkpoint's record of Airlock's executed stop, as the agent's client parses it."""
    return Proposal.model_validate(
        {
            "id": "prop_stop0000",
            "state": "executed",
            "action_hash": "sha256:" + "0" * 64,
            "action_jcs": "{}",
            "action": {},
            "provider": "alibaba",
            "account": "5123456789012345",
            "region": "ap-southeast-1",
            "resource_type": "ecs.instance",
            "resource_id": "i-abcd1234",
            "operation": "stop",
            "risk": "medium",
            "proposed_by": "agent:scanner-1",
            "submitted_by": "scanner-1",
            "policy": {
                "rule": "stop-default",
                "effect": "approve",
                "quorum": 1,
                "confirm": False,
                "hash": "sha256:" + "1" * 64,
            },
            "deny_reason": None,
            "votes": [],
            "votes_needed": 0,
            "approval_deadline": APPROVED + DAY,
            "created_at": APPROVED - DAY,
            "updated_at": APPROVED + 60,
            "approval": {
                "approval_id": "apv_stop00000001",
                "keyid": "ed25519:" + "2" * 32,
                "issued_at": APPROVED,
                "expires_at": APPROVED + 900,
                "revoked_at": None,
                "revoked_by": None,
                "envelope": {},
            }
            if approved
            else None,
            "rejection": None,
            "outcome": {
                "approval_id": "apv_stop00000001",
                "outcome": "succeeded",
                "refusal_code": None,
                "receipt_verified": True,
                "receipt_keyid": None,
                "receipt": {},
                "late": False,
                "reported_at": APPROVED + 60,
                "resolution": None,
                "resolved_by": None,
                "resolved_at": None,
                "resolution_note": None,
            },
        }
    )


def test_the_approval_time_of_airlocks_stop_is_the_reference_for_a_start() -> None:
    from services.agent.client import ProposalRecord

    view = CheckpointView()
    view.add_executed_stop(ProposalRecord.from_api(_executed_stop(approved=True)))
    assert view.airlock_stops[("ap-southeast-1", "i-abcd1234")] == STOP
    # Without an approval on record, the proposal's time (earlier still) is used.
    view = CheckpointView()
    view.add_executed_stop(ProposalRecord.from_api(_executed_stop(approved=False)))
    assert view.airlock_stops[("ap-southeast-1", "i-abcd1234")].approved_at == APPROVED - DAY
