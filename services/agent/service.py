"""The agent's run: read the checkpoint's decisions, scan, plan, submit and withdraw.

One run streams: each page of instances is assessed, planned and acted on before the next
page is read, so neither the fleet nor its metrics are ever held at once. A dry run plans
the same way (reading the checkpoint back when it can) and changes nothing.

The agent holds a :class:`~airlock.cloud.ports.CloudReader` and a checkpoint client —
nothing that can write to the cloud or sign (:func:`build_agent` wires only those).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from airlock.cloud.ports import CloudReader
from airlock.heartbeat import Heartbeat
from airlock.tls import CAFileError, checkpoint_verify

from .client import CheckpointClient, HttpCheckpointClient
from .discovery import Discovery, Observation
from .errors import AgentError, CheckpointRefused, ConfigError
from .idle import DAY, IdlePolicy
from .planner import (
    CheckpointView,
    Hold,
    PlanContext,
    Step,
    Submit,
    Withdraw,
    plan,
    withdraw_vanished,
)
from .providers import PROVIDERS

if TYPE_CHECKING:
    from airlock.settings import AgentSettings

__all__ = ["Agent", "PlannedRow", "RunReport", "build_agent"]

_log = logging.getLogger("airlock.agent")


@dataclass(frozen=True, slots=True)
class PlannedRow:
    """One line of the run's table (what was, or in a dry run would be, done)."""

    kind: Literal["propose", "withdraw", "hold", "problem"]
    operation: str
    region: str
    resource_id: str
    proposal_id: str
    detail: str
    result: str = ""


@dataclass
class RunReport:
    started_at: int
    dry_run: bool
    checkpoint_read: bool = False
    complete: bool = False
    scanned: int = 0
    by_verdict: dict[str, int] = field(default_factory=dict)
    created: int = 0
    existing: int = 0
    withdrawn: int = 0
    refused: int = 0  # denied by policy, conflicting id, another open proposal
    held: int = 0
    #: Proposals planned (submitted, or in a dry run printed), whether or not rows are kept.
    planned: int = 0
    problems: int = 0
    rows: list[PlannedRow] = field(default_factory=list)
    api_calls: dict[str, int] = field(default_factory=dict)


class Agent:
    def __init__(
        self,
        *,
        discovery: Discovery,
        client: CheckpointClient | None,
        account: str,
        agent_id: str,
        policy: IdlePolicy,
        clock: Callable[[], int],
        grace_seconds: int = 7 * DAY,
        stopped_mode: Literal["StopCharging", "KeepCharging"] = "StopCharging",
        keep_rows: bool = True,
    ) -> None:
        self.discovery = discovery
        self.client = client
        self.account = account
        self.agent_id = agent_id
        self.policy = policy
        self.clock = clock
        self.grace_seconds = grace_seconds
        self.stopped_mode: Literal["StopCharging", "KeepCharging"] = stopped_mode
        #: A bench of a 10,000-instance dry run keeps counts only (rows grow with proposals).
        self.keep_rows = keep_rows

    def run_once(
        self, *, dry_run: bool = False, on_progress: Callable[[int], None] | None = None
    ) -> RunReport:
        """One scan. Raises CheckpointError when the checkpoint stays down, ScanError when
        the cloud cannot be listed; per-resource problems are in the report."""
        now = self.clock()
        report = RunReport(started_at=now, dry_run=dry_run)
        if self.client is None and not dry_run:
            raise ConfigError("submitting needs a checkpoint client (the agent's token)")
        window_seconds = self.policy.window_days * DAY
        if self.client is not None:
            view = CheckpointView.load(
                self.client, account=self.account, now=now, window_seconds=window_seconds
            )
            report.checkpoint_read = True
        else:
            view = CheckpointView()
        ctx = PlanContext(
            account=self.account,
            agent_id=self.agent_id,
            policy=self.policy,
            now=now,
            grace_seconds=self.grace_seconds,
            stopped_mode=self.stopped_mode,
            provider=self.discovery.provider,
        )
        calls_before = self.discovery.api_calls()
        obs: Observation
        for obs in self.discovery.scan(now):
            report.scanned += 1
            for step in plan(obs, view, ctx):
                self._act(step, report, dry_run)
            if on_progress is not None and report.scanned % 100 == 0:
                on_progress(report.scanned)
        report.complete = True
        if report.checkpoint_read:
            for step in withdraw_vanished(view, self.discovery.regions):
                self._act(step, report, dry_run)
        report.by_verdict = dict(self.discovery.stats.by_verdict)
        report.api_calls = {
            name: n - calls_before.get(name, 0)
            for name, n in self.discovery.api_calls().items()
            if n - calls_before.get(name, 0)
        }
        return report

    def _act(self, step: Step, report: RunReport, dry_run: bool) -> None:
        if isinstance(step, Submit):
            report.planned += 1
            action = step.action
            result = "dry-run"
            if not dry_run:
                assert self.client is not None  # checked at the start of the run
                outcome = self.client.submit(action)
                result = outcome.kind
                if outcome.kind == "created":
                    report.created += 1
                elif outcome.kind == "exists":
                    report.existing += 1
                else:
                    report.refused += 1
                    result = f"{outcome.kind}: {outcome.detail}"[:200]
            self._row(
                report,
                PlannedRow(
                    "propose",
                    action.operation,
                    action.region,
                    action.resource.id,
                    action.proposal_id,
                    action.reason,
                    result,
                ),
            )
        elif isinstance(step, Withdraw):
            result = "dry-run"
            if not dry_run:
                assert self.client is not None
                try:
                    result = self.client.withdraw(step.proposal_id, step.note)
                except CheckpointRefused as exc:
                    result = f"refused: {exc.code}"
                    report.refused += 1
                else:
                    report.withdrawn += 1
            self._row(
                report,
                PlannedRow(
                    "withdraw",
                    step.operation,
                    step.region,
                    step.resource_id,
                    step.proposal_id,
                    step.note,
                    result,
                ),
            )
        elif isinstance(step, Hold):
            report.held += 1
            self._row(
                report,
                PlannedRow("hold", step.operation, step.region, step.resource_id, "", step.reason),
            )
        else:
            report.problems += 1
            self._row(
                report,
                PlannedRow(
                    "problem", step.operation, step.region, step.resource_id, "", step.detail
                ),
            )

    def _row(self, report: RunReport, row: PlannedRow) -> None:
        if self.keep_rows or row.kind != "propose":
            report.rows.append(row)

    def run_loop(
        self,
        *,
        interval: float,
        stop: threading.Event,
        dry_run: bool = False,
        on_report: Callable[[RunReport], None] | None = None,
        on_error: Callable[[Exception], None] | None = None,
        heartbeat: Heartbeat | None = None,
        beat_every: float = 30.0,
    ) -> None:
        """Run every ``interval`` seconds until ``stop`` is set; a failed run is reported
        and the next one starts on schedule.

        An unexpected exception (a bug, or provider data nobody anticipated) fails that
        run only: it is logged with its traceback and reported like an AgentError, since a
        loop thread that dies silently stops every later scan. KeyboardInterrupt and
        SystemExit are not Exceptions and still end the loop.

        ``heartbeat`` is touched by this thread only, so a stale one means the loop is
        stuck or gone: when a run starts, every 100 instances it scans, when it ends
        (failed or not) and every ``beat_every`` seconds of the wait for the next.
        """
        beat = heartbeat or Heartbeat(None)
        while not stop.is_set():
            started = time.monotonic()
            beat.beat()
            try:
                report = self.run_once(dry_run=dry_run, on_progress=lambda _: beat.beat())
            except AgentError as exc:
                if on_error is not None:
                    on_error(exc)
            except Exception as exc:
                _log.exception("agent run failed unexpectedly; next run in %ss", interval)
                if on_error is not None:
                    on_error(exc)
            else:
                if on_report is not None:
                    on_report(report)
            beat.beat()
            while not stop.is_set():
                left = interval - (time.monotonic() - started)
                if left <= 0 or stop.wait(min(left, beat_every)):
                    break
                beat.beat()


def policy_from(settings: AgentSettings) -> IdlePolicy:
    """The idle policy for the agent's provider: its thresholds, then the tag rules."""
    return IdlePolicy(
        **settings.thresholds(),
        protect_tags=settings.protect_tags,
        prod_tag_keys=settings.prod_tag_keys,
        prod_value_prefix=settings.prod_value_prefix,
    )


def build_agent(
    settings: AgentSettings,
    *,
    reader: CloudReader,
    reader_factory: Callable[[], CloudReader] | None = None,
    clock: Callable[[], int] = lambda: int(time.time()),
    client: CheckpointClient | None = None,
    sleep: Callable[[float], None] = time.sleep,
    keep_rows: bool = True,
) -> Agent:
    """Wire an agent from settings. Without an explicit client, one is built from the
    token; with no token there is none (a dry run then plans against an empty view)."""
    policy = policy_from(settings)
    if client is None:
        token = settings.checkpoint_token.get_secret_value()
        if token:
            try:
                verify = checkpoint_verify(settings.checkpoint_ca_file)
            except CAFileError as exc:  # the settings read it; it changed since
                raise ConfigError(f"AIRLOCK_AGENT_CHECKPOINT_CA_FILE={exc}") from None
            client = HttpCheckpointClient(
                settings.checkpoint_url,
                token,
                timeout=settings.checkpoint_timeout,
                verify=verify,
                attempts=settings.checkpoint_attempts,
                backoff_initial=settings.backoff_initial,
                backoff_max=settings.backoff_max,
                sleep=sleep,
            )
    discovery = Discovery(
        reader,
        policy,
        regions=settings.cloud_regions,
        clock=clock,
        page_size=settings.page_size,
        metric_batch=settings.metric_batch,
        workers=settings.scan_workers,
        reader_factory=reader_factory,
        sleep=sleep,
        provider=PROVIDERS[settings.provider],
    )
    return Agent(
        discovery=discovery,
        client=client,
        account=settings.account_or_default(),
        agent_id=settings.agent_id,
        policy=policy,
        clock=clock,
        grace_seconds=settings.grace_seconds,
        stopped_mode=settings.ecs_stopped_mode,
        keep_rows=keep_rows,
    )
