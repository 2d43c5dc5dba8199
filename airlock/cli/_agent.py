"""``airlock agent --once | --loop [--interval S] [--dry-run]``: scan and propose clean-ups.

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
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ._text import inert, inert_log_config, say

if TYPE_CHECKING:
    from services.agent.service import RunReport

__all__ = ["agent_command"]

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


def agent_command(
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
    """Find idle ECS/RDS instances with the read-only key and propose stop/delete."""
    import logging.config

    from airlock.cloud.alibaba import AlibabaConfig, AlibabaReader
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
        agent = build_agent(
            settings, reader=AlibabaReader(config), reader_factory=lambda: AlibabaReader(config)
        )
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
    )
