"""``airlock agent --once | --loop [--interval S] [--dry-run]``: scan and propose clean-ups;
``airlock agent health``: whether a ``--loop`` is alive (its heartbeat file).

The agent is built here from ``AIRLOCK_AGENT_*`` with the **read** cloud key only; it is
imported inside the command, never at module import (docs/architecture.md#import-boundaries).
``--dry-run`` prints what would be proposed or withdrawn and changes nothing anywhere.

Exit codes: 0 the run completed; 1 it did not (cloud or checkpoint unreachable); 2 bad
configuration.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ._help import Typer
from ._text import inert, inert_log_config, say

if TYPE_CHECKING:
    from collections.abc import Callable

    from airlock.cloud.ports import CloudReader
    from airlock.settings import AgentSettings
    from services.agent.service import RunReport

__all__ = ["agent_app"]

agent_app = Typer(
    name="agent",
    # Typer's help wins over the callback's docstring, so what a bare `airlock agent`
    # does is said here.
    help=(
        "Find idle instances (ECS/RDS; EC2/RDS with AIRLOCK_AGENT_PROVIDER=aws) with the "
        "read-only key and propose stop/delete.\n\n"
        "Without a command: one scan (--once) or a scan every --interval seconds (--loop), "
        "which touches AIRLOCK_AGENT_HEARTBEAT_PATH, when set, as it goes."
    ),
    invoke_without_command=True,
)

_COLUMNS = ("ACTION", "OPERATION", "REGION", "RESOURCE", "PROPOSAL", "RESULT", "DETAIL")


def _table(report: RunReport) -> str:
    # Ids and regions are the cloud's, details quote the cloud and the checkpoint: escaped
    # before the widths are measured, so the columns line up on what is printed.
    rows = [
        tuple(
            map(
                inert,
                (r.kind, r.operation, r.region, r.resource_id, r.proposal_id, r.result, r.detail),
            )
        )
        for r in report.rows
    ]
    widths = [
        min(60, max(len(c), *(len(row[i]) for row in rows))) if rows else len(c)
        for i, c in enumerate(_COLUMNS)
    ]
    widths[-1] = 0  # the detail column is last and unpadded

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([line(_COLUMNS), *(line(row) for row in rows)])


def _summary(report: RunReport) -> str:
    verdicts = ", ".join(f"{k} {v}" for k, v in sorted(report.by_verdict.items()))
    calls = sum(report.api_calls.values())
    what = "would propose" if report.dry_run else "proposed"
    return (
        f"scanned {report.scanned} instances ({verdicts}); {what} {report.planned} "
        f"({report.created} new, {report.existing} already there, {report.refused} refused), "
        f"withdrew {report.withdrawn}, held {report.held}, problems {report.problems}; "
        f"{calls} cloud API calls"
        + ("" if report.checkpoint_read else "; checkpoint not read (no agent token)")
    )


def _progress(count: int) -> None:
    if sys.stderr.isatty():
        sys.stderr.write(f"\rscanned {count} instances…")
        sys.stderr.flush()


@agent_app.callback()
def agent_command(
    ctx: typer.Context,
    *,
    once: Annotated[bool, typer.Option("--once", help="Scan once and exit.")] = False,
    loop: Annotated[bool, typer.Option("--loop", help="Scan every --interval seconds.")] = False,
    interval: Annotated[
        int | None,
        typer.Option(metavar="SECONDS", help="Seconds between scans (default: settings).", min=1),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would be proposed; submit nothing.")
    ] = False,
) -> None:
    """Find idle instances (ECS/RDS, or EC2/RDS with provider aws) with the read-only key
    and propose stop/delete."""
    if ctx.invoked_subcommand is not None:
        return
    import logging.config

    from airlock.heartbeat import Heartbeat
    from airlock.settings import AgentSettings
    from services.agent.errors import AgentError
    from services.agent.service import build_agent

    from ._settings import load

    if once == loop:
        typer.echo("agent: pass exactly one of --once or --loop", err=True)
        raise typer.Exit(2)
    # The agent logs what the cloud lists (an instance id, a tag) and the checkpoint's
    # answers: escaped (airlock.text), at the level Python's default handler had.
    logging.config.dictConfig(inert_log_config("WARNING"))
    settings = load(AgentSettings)
    try:
        make_reader = _reader_factory(settings)
        agent = build_agent(settings, reader=make_reader(), reader_factory=make_reader)
    except ValueError as exc:  # a bad region or account from the cloud configuration
        say(f"agent: {exc}", err=True)
        raise typer.Exit(2) from None
    if agent.client is None and not dry_run:
        typer.echo("agent: AIRLOCK_AGENT_CHECKPOINT_TOKEN is required to submit", err=True)
        raise typer.Exit(2)

    def show(report: RunReport) -> None:
        if sys.stderr.isatty():
            sys.stderr.write("\n")
        if report.rows:
            typer.echo(_table(report))
        typer.echo(_summary(report))

    if once:
        try:
            report = agent.run_once(dry_run=dry_run, on_progress=_progress)
        except AgentError as exc:
            say(f"agent: run incomplete: {exc}", err=True)
            raise typer.Exit(1) from None
        show(report)
        return

    stop = threading.Event()

    def _stop(*_: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    agent.run_loop(
        interval=interval or settings.interval,
        stop=stop,
        dry_run=dry_run,
        on_report=show,
        on_error=lambda exc: say(f"agent: run incomplete: {exc}", err=True),
        heartbeat=Heartbeat(settings.heartbeat_path),
    )


def _heartbeat_path_setting() -> Path | None:
    """Only the heartbeat path, read (environment or .env) as the agent reads it."""
    from airlock.settings import ServiceSettings

    from ._settings import load

    # Defined here, not at the top: ``airlock --help`` must not pay for pydantic-settings.
    class _HeartbeatSetting(ServiceSettings):
        model_config = ServiceSettings.model_config | {"env_prefix": "AIRLOCK_AGENT_"}
        heartbeat_path: Path | None = None

    return load(_HeartbeatSetting).heartbeat_path


@agent_app.command("health")
def health_command(
    max_age: Annotated[
        float,
        typer.Option(
            "--max-age",
            metavar="SECONDS",
            help="Seconds since the loop's last heartbeat (it beats at least every 30 s "
            "while it waits, and every 100 instances while it scans).",
            min=1,
        ),
    ] = 300.0,
    path: Annotated[
        Path | None,
        typer.Option(
            "--path",
            metavar="FILE",
            help="Heartbeat file (default AIRLOCK_AGENT_HEARTBEAT_PATH).",
        ),
    ] = None,
) -> None:
    """Exit 0 if the `--loop` heartbeat is fresher than --max-age, 1 if not (for health checks).

    Example: airlock agent health --path /tmp/agent.heartbeat
    """
    from airlock.heartbeat import heartbeat_age

    if path is None:
        # Only the heartbeat path is read: a health check must not need the agent's
        # cloud key or token.
        path = _heartbeat_path_setting()
    if path is None:
        say("agent: no heartbeat file: pass --path or set AIRLOCK_AGENT_HEARTBEAT_PATH", err=True)
        raise typer.Exit(2)
    age = heartbeat_age(path, time.time())
    if age is None:
        say(f"unhealthy: no heartbeat at {path}")
        raise typer.Exit(1)
    if age > max_age:
        say(f"unhealthy: last heartbeat {age:.0f}s ago (max {max_age:.0f}s)")
        raise typer.Exit(1)
    say(f"healthy: last heartbeat {max(age, 0.0):.1f}s ago")


def _reader_factory(settings: AgentSettings) -> Callable[[], CloudReader]:
    """New readers of the agent's provider, with its read credentials (a scan worker
    each). Raises ValueError for a configuration the adapter refuses."""
    if settings.provider == "aws":
        from airlock.cloud.aws import AwsConfig, AwsReader

        aws = AwsConfig.from_settings(settings)
        return lambda: AwsReader(aws)
    from airlock.cloud.alibaba import AlibabaConfig, AlibabaReader

    key_id, secret = settings.cloud_credentials()
    endpoint, protocol = settings.cloud_endpoint_or_default()
    config = AlibabaConfig(
        access_key_id=key_id,
        access_key_secret=secret,
        endpoint=endpoint,
        protocol=protocol,
        connect_timeout_ms=settings.cloud_connect_timeout_ms,
        read_timeout_ms=settings.cloud_read_timeout_ms,
    )
    return lambda: AlibabaReader(config)
