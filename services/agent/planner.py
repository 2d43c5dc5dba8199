"""The planner: from what the scan saw and what the checkpoint decided, what to do next.

Staged clean-up (docs/architecture.md#staged-clean-up), one instance at a time:

* an idle **running** instance gets a ``stop`` proposal (ECS with ``stopped_mode``);
* a **stopped** ECS or EC2 instance gets a ``delete`` proposal only when Airlock stopped it (an
  executed ``stop`` at the checkpoint), nobody started it since (the provider's last start
  time is before that stop's approval) and the grace period has passed since;
* an instance that is **running again** (or busy, or now protected) has its open
  proposals withdrawn, and one Airlock stopped that someone started again is left alone
  for a whole window before it can be proposed again;
* a resource whose proposal a person rejected is not proposed again for that operation
  until a window has passed since the rejection.

Proposal ids are deterministic — ``prop_`` + the first 32 hex of SHA-256 over account,
region, resource, operation, the window's first day and the attempt — so a re-run on the
same day yields the same id and never a second proposal. The checkpoint enforces the same
from its side (one open proposal per target; same id with another hash is a conflict).

A proposal that closed without its write (``RETRY_STATES``: failed, an in_doubt resolved
"did not happen", refused, lapsed, expired, withdrawn, revoked) does not hold its id: the
next scan that still finds the resource idle proposes again under the next attempt's id,
a new proposal with its own hash that needs its own approval. Only once the old approval
can no longer run: it was never issued, the executor reported using it (its ledger
refuses it again: single use), or it expired ``APPROVAL_SLACK`` ago; until then, a hold.

Each proposal carries the saving it is estimated to bring (``evidence.saving``, see
:class:`airlock.protocol.Saving`) when the scan read the instance type's price: a stop
that stops billing (``StopCharging``, or an RDS stop) saves a month of the compute price;
a ``KeepCharging`` stop and a delete save nothing Airlock prices (the delete's compute was
saved by the stop before it; disks and snapshots are not priced).

Pure: no I/O and no clock reads; ``now`` comes in the context.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from pydantic import ValidationError

from airlock.protocol import (
    ACTION_TYPE,
    CURRENCY_EXPONENTS,
    HOURS_PER_MONTH,
    MAX_HOURLY_MICROS,
    ProposedAction,
    Refused,
    monthly_minor,
)
from airlock.units import span

from .client import CheckpointClient, ProposalRecord
from .discovery import Observation
from .idle import DAY, POLICY_NAME, IdlePolicy, Window, parse_rfc3339, rfc3339
from .providers import ALIBABA, AgentProvider

__all__ = [
    "APPROVAL_SLACK",
    "RETRY_STATES",
    "START_SLACK",
    "CheckpointView",
    "Hold",
    "OpenProposal",
    "PlanContext",
    "Problem",
    "Step",
    "Submit",
    "Withdraw",
    "plan",
    "proposal_id",
]

_ID_DOMAIN: Final = "airlock-agent/proposal-id/v1"
_OPEN_STATES: Final = ("pending", "approved")
#: A last start this close before the approval of Airlock's stop counts as after it: ECS
#: reports StartTime to the minute, and the provider's clock is not the checkpoint's.
START_SLACK: Final = 10 * 60

#: Closed without the write: the next attempt at the same target gets a new id.
RETRY_STATES: Final = ("failed", "refused", "lapsed", "expired", "withdrawn", "revoked")
#: An unused approval counts as unusable this long after its expiry: the executor refuses
#: an expired approval by its own clock, which may run behind the checkpoint's.
APPROVAL_SLACK: Final = 5 * 60
#: Closed proposals older than this cannot share an id with today's: ids carry the day.
_RETRY_LOOKBACK: Final = 2 * DAY

Key = tuple[str, str]  # (region, resource id)


def proposal_id(
    *,
    account: str,
    region: str,
    resource_type: str,
    resource_id: str,
    operation: str,
    window: Window,
    attempt: int = 0,
) -> str:
    """Same resource, operation, idle window and attempt → same id (docs/protocol.md#action).

    ``attempt`` counts the proposals of that day that closed without their write; the
    first attempt's id carries no count.
    """
    if attempt < 0:
        raise ValueError("attempt must not be negative")
    # Every part matches a kernel pattern that excludes "\n", so the join is unambiguous.
    parts = [_ID_DOMAIN, account, region, resource_type, resource_id, operation]
    parts.append(window.start_day)
    if attempt:
        parts.append(f"attempt {attempt}")
    material = "\n".join(parts)
    return "prop_" + hashlib.sha256(material.encode("utf-8")).hexdigest()[:32]


# --------------------------------------------------------------------------- the view


@dataclass(frozen=True, slots=True)
class OpenProposal:
    id: str
    operation: str
    state: str


@dataclass(frozen=True, slots=True)
class AirlockStop:
    proposal_id: str
    executed_at: int  # when the executor's outcome was reported (checkpoint clock)
    #: When its approval was issued (or, lacking one, the proposal made): a checkpoint time
    #: before the write, so a start at or after it may have undone Airlock's stop.
    approved_at: int


@dataclass
class CheckpointView:
    """What the checkpoint knows that the planner needs, for one account.

    Sized by the proposals the checkpoint holds (open ones, recent rejections, executed
    stops), never by the fleet.
    """

    open: dict[Key, list[OpenProposal]] = field(default_factory=dict)
    #: (region, resource id, operation) → Unix time until which it is not proposed again.
    rejected_until: dict[tuple[str, str, str], int] = field(default_factory=dict)
    airlock_stops: dict[Key, AirlockStop] = field(default_factory=dict)
    #: Ids of recent proposals closed without their write whose approval cannot run.
    retired: set[str] = field(default_factory=set)
    #: Ids of recent proposals closed without their write → until when their unused
    #: approval might still run (its expiry plus ``APPROVAL_SLACK``).
    unspent: dict[str, int] = field(default_factory=dict)
    _seen: set[Key] = field(default_factory=set)

    @classmethod
    def load(
        cls, client: CheckpointClient, *, account: str, now: int, window_seconds: int
    ) -> CheckpointView:
        view = cls()
        for state in _OPEN_STATES:
            for record in client.proposals(account=account, state=state):
                view.add_open(record)
        for record in client.proposals(account=account, state="rejected"):
            # Newest first, and a rejection happens before its approval deadline: once a
            # deadline is a window old, every older rejection is too.
            if record.approval_deadline + window_seconds <= now:
                break
            view.add_rejection(record, window_seconds)
        for record in client.proposals(account=account, state="executed", operation="stop"):
            view.add_executed_stop(record)
        for record in client.proposals(account=account, state=RETRY_STATES):
            if record.created_at < now - _RETRY_LOOKBACK:
                break  # newest first: every later one is older still
            view.add_closed(record, now)
        return view

    def add_open(self, record: ProposalRecord) -> None:
        self.open.setdefault((record.region, record.resource_id), []).append(
            OpenProposal(record.id, record.operation, record.state)
        )

    def add_rejection(self, record: ProposalRecord, window_seconds: int) -> None:
        if record.rejected_at is None:
            return
        key = (record.region, record.resource_id, record.operation)
        until = record.rejected_at + window_seconds
        self.rejected_until[key] = max(until, self.rejected_until.get(key, 0))

    def add_executed_stop(self, record: ProposalRecord) -> None:
        if record.outcome_at is None:
            return  # no report time, no grace period can be measured: never delete
        key = (record.region, record.resource_id)
        known = self.airlock_stops.get(key)
        if known is None or record.outcome_at > known.executed_at:
            approved_at = record.created_at if record.approved_at is None else record.approved_at
            self.airlock_stops[key] = AirlockStop(record.id, record.outcome_at, approved_at)

    def add_closed(self, record: ProposalRecord, now: int) -> None:
        """A proposal in one of ``RETRY_STATES``: retired once its approval cannot run."""
        expires = record.approval_expires_at
        if expires is None or record.outcome_at is not None or expires + APPROVAL_SLACK <= now:
            self.retired.add(record.id)
        else:
            self.unspent[record.id] = expires + APPROVAL_SLACK

    def mark_seen(self, key: Key) -> None:
        if key in self.open:
            self._seen.add(key)

    def unseen_open(self, regions: Iterable[str]) -> Iterator[tuple[Key, OpenProposal]]:
        """Open proposals on resources a complete scan of ``regions`` did not find."""
        wanted = set(regions)
        for key, proposals in self.open.items():
            if key[0] in wanted and key not in self._seen:
                for proposal in proposals:
                    yield key, proposal


# --------------------------------------------------------------------------- steps


@dataclass(frozen=True, slots=True)
class Submit:
    action: ProposedAction


@dataclass(frozen=True, slots=True)
class Withdraw:
    proposal_id: str
    operation: str
    region: str
    resource_id: str
    note: str


@dataclass(frozen=True, slots=True)
class Hold:
    """Deliberately not proposing (rejected, grace period, left alone)."""

    operation: str
    region: str
    resource_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Problem:
    """A proposal could not be built (e.g. non-NFC tag text, over the size cap)."""

    operation: str
    region: str
    resource_id: str
    detail: str


Step = Submit | Withdraw | Hold | Problem


@dataclass(frozen=True, slots=True)
class PlanContext:
    account: str
    agent_id: str
    policy: IdlePolicy
    now: int
    grace_seconds: int = 7 * DAY
    stopped_mode: Literal["StopCharging", "KeepCharging"] = "StopCharging"
    provider: AgentProvider = ALIBABA

    @property
    def window_seconds(self) -> int:
        return self.policy.window_days * DAY


def plan(obs: Observation, view: CheckpointView, ctx: PlanContext) -> list[Step]:
    """The steps for one observed resource: withdraw open proposals that no longer hold,
    hold with the reason, or propose a stop (running and idle) or a delete (stopped by
    Airlock and left stopped past the grace period). Marks the resource seen in ``view``.
    """
    state = obs.state
    key = (state.region, state.resource_id)
    view.mark_seen(key)
    open_ = view.open.get(key, [])
    if obs.verdict.kind == "protected":
        return [_withdraw(obs, p, obs.verdict.reasons[0]) for p in open_]
    kind = ctx.provider.kind(state.resource_type)
    if state.status == kind.running or state.status in kind.starting:
        return _plan_running(obs, view, ctx, open_)
    if state.status == kind.stopped:
        return _plan_stopped(obs, view, ctx, open_)
    return []


def _withdraw(obs: Observation, p: OpenProposal, note: str) -> Withdraw:
    return Withdraw(p.id, p.operation, obs.state.region, obs.state.resource_id, note)


def _plan_running(
    obs: Observation, view: CheckpointView, ctx: PlanContext, open_: list[OpenProposal]
) -> list[Step]:
    """A running resource: withdraw its deletes (and its stops once busy); propose a stop
    when it is idle, not rejected lately and not one Airlock stopped within the window."""
    state, verdict = obs.state, obs.verdict
    key = (state.region, state.resource_id)
    steps: list[Step] = []
    for p in open_:
        if p.operation == "delete":
            steps.append(_withdraw(obs, p, f"running again (status {state.status})"))
    open_stops = [p for p in open_ if p.operation == "stop"]
    if verdict.kind == "busy":
        for p in open_stops:
            steps.append(_withdraw(obs, p, "no longer idle: " + "; ".join(verdict.reasons)))
        return steps
    if not verdict.idle or open_stops:
        return steps
    until = view.rejected_until.get((state.region, state.resource_id, "stop"), 0)
    if ctx.now < until:
        steps.append(Hold("stop", *key, f"rejected; not proposed again before {rfc3339(until)}"))
        return steps
    stopped = view.airlock_stops.get(key)
    if stopped is not None and ctx.now < stopped.executed_at + ctx.window_seconds:
        steps.append(
            Hold(
                "stop",
                *key,
                f"running again after Airlock stopped it; left alone until "
                f"{rfc3339(stopped.executed_at + ctx.window_seconds)}",
            )
        )
        return steps
    stop_id = _next_id(obs, view, ctx, "stop")
    if isinstance(stop_id, Hold):
        steps.append(stop_id)
        return steps
    steps.append(_build(lambda: _stop_action(obs, ctx, stop_id), "stop", key))
    return steps


def _plan_stopped(
    obs: Observation, view: CheckpointView, ctx: PlanContext, open_: list[OpenProposal]
) -> list[Step]:
    """A stopped resource: withdraw its pending stops; propose a delete only of an ECS
    instance Airlock stopped, not started since, stopped past the grace period."""
    state = obs.state
    key = (state.region, state.resource_id)
    steps: list[Step] = []
    for p in open_:
        if p.operation == "stop" and p.state == "pending":
            steps.append(_withdraw(obs, p, "already stopped"))
    if not ctx.provider.kind(state.resource_type).deletable:
        return steps  # RDS has no delete on the allowlist
    stopped = view.airlock_stops.get(key)
    if stopped is None or any(p.operation == "delete" for p in open_):
        return steps  # never delete what Airlock did not stop; one delete at a time
    # Stopped now is not "stayed stopped" (docs/architecture.md#staged-clean-up): someone may
    # have started it after Airlock's stop and stopped it again by hand, between two scans or
    # while the agent was down. The provider's last start time settles it; without one, no
    # delete.
    started = parse_rfc3339(state.started_at)
    if started is None:
        steps.append(
            Hold(
                "delete",
                *key,
                "the provider reports no last start time: cannot establish that it "
                f"stayed stopped since Airlock stopped it ({stopped.proposal_id})",
            )
        )
        return steps
    if started + START_SLACK >= stopped.approved_at:
        steps.append(
            Hold(
                "delete",
                *key,
                f"started again at {state.started_at} after Airlock stopped it "
                f"({stopped.proposal_id}); not deleted on the strength of that stop",
            )
        )
        return steps
    stopped_for = ctx.now - stopped.executed_at
    if stopped_for < ctx.grace_seconds:
        steps.append(
            Hold(
                "delete",
                *key,
                f"stopped {span(stopped_for)}; grace period ends "
                f"{rfc3339(stopped.executed_at + ctx.grace_seconds)}",
            )
        )
        return steps
    until = view.rejected_until.get((state.region, state.resource_id, "delete"), 0)
    if ctx.now < until:
        steps.append(Hold("delete", *key, f"rejected; not proposed again before {rfc3339(until)}"))
        return steps
    delete_id = _next_id(obs, view, ctx, "delete")
    if isinstance(delete_id, Hold):
        steps.append(delete_id)
        return steps
    steps.append(_build(lambda: _delete_action(obs, stopped, ctx, delete_id), "delete", key))
    return steps


def _next_id(
    obs: Observation, view: CheckpointView, ctx: PlanContext, operation: str
) -> str | Hold:
    """The id of the next attempt at ``operation``, or a hold while the last attempt's
    approval might still run (see the module docstring)."""
    state = obs.state
    attempt = 0
    while True:
        pid = proposal_id(
            account=ctx.account,
            region=state.region,
            resource_type=state.resource_type,
            resource_id=state.resource_id,
            operation=operation,
            window=obs.window,
            attempt=attempt,
        )
        until = view.unspent.get(pid)
        if until is not None:
            return Hold(
                operation,
                state.region,
                state.resource_id,
                f"{pid} closed with an approval the executor could still use; "
                f"not proposed again before {rfc3339(until)}",
            )
        if pid not in view.retired:
            return pid
        attempt += 1  # ends: ``retired`` is finite


def withdraw_vanished(view: CheckpointView, regions: Sequence[str]) -> list[Step]:
    """After a complete scan: pending proposals whose resource no longer exists."""
    return [
        Withdraw(p.id, p.operation, key[0], key[1], "the resource no longer exists")
        for key, p in view.unseen_open(regions)
        # An approved one may be executing right now (a delete makes the resource vanish);
        # the executor's ledger settles it, the agent must not race it with a revocation.
        if p.state == "pending"
    ]


# --------------------------------------------------------------------------- actions


def _build(make: Any, operation: str, key: Key) -> Step:
    try:
        action: ProposedAction = make()
        action.canonical_bytes()  # refuses an action over the size cap now, not at submit
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        return Problem(operation, *key, f"cannot build the action: {where}: {err['msg']}")
    except Refused as exc:
        return Problem(operation, *key, f"cannot build the action: {exc.code.value} {exc.detail}")
    return Submit(action)


def _common(obs: Observation, ctx: PlanContext, operation: str, pid: str) -> dict[str, object]:
    state = obs.state
    return {
        "type": ACTION_TYPE,
        "proposal_id": pid,
        "provider": ctx.provider.name,
        "account": ctx.account,
        "region": state.region,
        "resource": {"type": state.resource_type, "id": state.resource_id},
        "operation": operation,
        "proposed_by": ctx.agent_id,
        "created_at": rfc3339(ctx.now),
    }


def _describe(obs: Observation) -> dict[str, object]:
    state = obs.state
    return {
        "name": state.name,
        "instance_type": state.instance_type,
        "created_at": state.created_at,
        # The checkpoint's policy matches on these (services/checkpoint/policy.py).
        "tags": dict(state.tags),
    }


def _saving(obs: Observation, *, saves_compute: bool) -> dict[str, object]:
    """``evidence.saving`` from the price the scan read; {} when there is none to sign."""
    price = obs.price
    # A price the protocol would refuse (unknown currency, beyond 10^12 millionths) is no
    # estimate: it must never turn a proposal into a Problem.
    if price is None or price.currency not in CURRENCY_EXPONENTS:
        return {}
    if not 0 <= price.hourly_micros <= MAX_HOURLY_MICROS:
        return {}
    saved = price.hourly_micros if saves_compute else 0
    return {
        "saving": {
            "currency": price.currency,
            "monthly_minor": monthly_minor(saved, price.currency),
            "hourly_price_micros": price.hourly_micros,
            "hours_per_month": HOURS_PER_MONTH,
            "basis": "compute" if saves_compute else "none",
            "source": price.source,
        }
    }


def _stop_action(obs: Observation, ctx: PlanContext, pid: str) -> ProposedAction:
    usage = obs.usage
    if usage is None or not obs.verdict.idle:
        raise ValueError("a stop needs an idle verdict with usage")
    policy = ctx.policy
    evidence: dict[str, object] = {
        "policy": POLICY_NAME,
        "window_days": obs.window.days,
        "window_start": rfc3339(obs.window.start),
        "window_end": rfc3339(obs.window.end),
        "samples": usage.samples,
        "samples_expected": usage.samples_expected,
        "cpu_avg_bp": usage.cpu_avg_bp,
        "cpu_p95_bp": usage.cpu_p95_bp,
        "net_bytes_per_day": usage.net_bytes_per_day,
        "net_quiet_days": policy.quiet_days(usage),
        # One entry per UTC day of the window, oldest first; null = nothing reported.
        "daily_cpu_p95_bp": list(usage.daily_cpu_p95_bp),
        "daily_net_bytes": list(usage.daily_net_bytes),
        "thresholds": policy.thresholds,
        **_describe(obs),
    }
    if usage.mem_avg_bp is not None:
        evidence["mem_avg_bp"] = usage.mem_avg_bp
    # Only ECS stops take a mode; an EC2 stop never hibernates and an RDS stop has none.
    params = {"stopped_mode": ctx.stopped_mode} if obs.state.resource_type == "ecs.instance" else {}
    evidence.update(_saving(obs, saves_compute=params.get("stopped_mode") != "KeepCharging"))
    return ProposedAction.model_validate(
        {
            **_common(obs, ctx, "stop", pid),
            "params": params,
            "precondition": {
                "status": ctx.provider.kind(obs.state.resource_type).running,
                "absent_tags": list(policy.protect_tags),
                "observed_at": rfc3339(obs.observed_at),
            },
            "evidence": evidence,
            "reason": obs.verdict.reasons[0],
        }
    )


def _delete_action(
    obs: Observation, stopped: AirlockStop, ctx: PlanContext, pid: str
) -> ProposedAction:
    stopped_for = ctx.now - stopped.executed_at
    evidence: dict[str, object] = {
        "policy": POLICY_NAME,
        "stage": "delete-after-stop",
        "stop_proposal_id": stopped.proposal_id,
        "stopped_at": rfc3339(stopped.executed_at),
        "stopped_seconds": stopped_for,
        "grace_seconds": ctx.grace_seconds,
        # The provider's last start, before the stop's approval: nobody started it since.
        "last_started_at": obs.state.started_at,
        **_describe(obs),
        **_saving(obs, saves_compute=False),
    }
    return ProposedAction.model_validate(
        {
            **_common(obs, ctx, "delete", pid),
            "params": {},
            "precondition": {
                "status": ctx.provider.kind(obs.state.resource_type).stopped,
                "absent_tags": list(ctx.policy.protect_tags),
                "observed_at": rfc3339(obs.observed_at),
            },
            "evidence": evidence,
            "reason": (
                f"Stopped by Airlock {span(stopped_for)} ago ({stopped.proposal_id}) and "
                f"not started since (last start {obs.state.started_at}); the grace period "
                f"of {span(ctx.grace_seconds)} has passed"
            ),
        }
    )
