"""What ``bench_agent`` (devcloud) and ``bench_agent_aws`` (moto) share: the dry-run scan in
a child process, its measurement and its report. Not a test: nothing here asserts.

A benchmark's parent serves its cloud double, then runs itself again with ``--child``
(:func:`run_child`); the child measures the bare primitives its own way, then calls
:func:`measure_scan` and prints one JSON line, which the parent reads back and prints with
:func:`report`. The scan runs in a child so its peak RSS is the agent's alone.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airlock.cloud.ports import CloudReader
    from airlock.settings import AgentSettings

__all__ = ["GOAL_MB", "GOAL_SECONDS", "cpu_seconds", "measure_scan", "report", "run_child"]

GOAL_SECONDS = 60.0
GOAL_MB = 300.0
_ROOT = Path(__file__).resolve().parent.parent


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_scan(
    settings: AgentSettings,
    reader_factory: Callable[[], CloudReader],
    *,
    now: int,
    server_pid: int,
) -> dict[str, Any]:
    """One dry-run scan (no checkpoint) by an agent built from ``settings``: wall and CPU
    time, the server's CPU, peak RSS (before and after) and the report's counts."""
    from services.agent.service import build_agent

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    agent = build_agent(
        settings,
        reader=reader_factory(),
        reader_factory=reader_factory,
        clock=lambda: now,
        keep_rows=False,
    )
    server_cpu0 = cpu_seconds(server_pid)
    cpu0 = time.process_time()
    started = time.perf_counter()
    scan = agent.run_once(dry_run=True)
    wall = time.perf_counter() - started
    return {
        "wall": wall,
        "agent_cpu": time.process_time() - cpu0,
        "server_cpu": cpu_seconds(server_pid) - server_cpu0,
        "rss_before_mb": rss_before,
        "rss_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "scanned": scan.scanned,
        "planned": scan.planned,
        "by_verdict": scan.by_verdict,
        "api_calls": scan.api_calls,
    }


def run_child(module: str, args: Sequence[str]) -> dict[str, Any]:
    """Run ``python -m module --child *args`` from the checkout; its last stdout line, parsed.

    Raises:
        RuntimeError: the child failed (its stderr's tail is in the message).
    """
    out = subprocess.run(
        [sys.executable, "-m", module, "--child", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=_ROOT,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the scan failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def report(
    r: dict[str, Any], *, title: str, server: str, bare: Sequence[str], bare_s: float
) -> bool:
    """Print a scan's figures under ``title``; ``bare`` are the primitive lines and
    ``bare_s`` what the scan's calls cost at those rates. True when both goals are met."""
    calls = r["api_calls"]
    met = bool(r["wall"] < GOAL_SECONDS and r["rss_peak_mb"] < GOAL_MB)
    print(title)
    print(f"  verdicts        {', '.join(f'{k} {v}' for k, v in sorted(r['by_verdict'].items()))}")
    print(f"  would propose   {r['planned']:,} stops")
    print(
        f"  wall            {r['wall']:7.1f} s   (goal < {GOAL_SECONDS:.0f} s: "
        f"{'met' if r['wall'] < GOAL_SECONDS else 'NOT met'})"
    )
    print(
        f"  peak RSS        {r['rss_peak_mb']:7.1f} MB  (before the scan "
        f"{r['rss_before_mb']:.1f} MB; goal < {GOAL_MB:.0f} MB: "
        f"{'met' if r['rss_peak_mb'] < GOAL_MB else 'NOT met'})"
    )
    print(f"  CPU             agent {r['agent_cpu']:.1f} s, {server} {r['server_cpu']:.1f} s")
    print(
        f"  API calls       {sum(calls.values()):,}: "
        + ", ".join(f"{k} {v:,}" for k, v in sorted(calls.items()))
    )
    for line in bare:
        print(f"  bare primitives {line}")
    if bare_s > 0:
        ratio = r["wall"] / bare_s
        print(f"  the scan's calls at bare rates {bare_s:.1f} s; scan / bare = {ratio:.2f}")
    return met
