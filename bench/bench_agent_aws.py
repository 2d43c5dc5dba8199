"""A full agent scan of a 10,000-instance EC2 fleet at a local moto server, beside the bare
boto3 calls it is made of: ``bench_agent``'s figure for AWS.

``python -m bench.bench_agent_aws [--instances N] [--workers W] [--metrics M]``.
moto runs as its own process (``devstack.aws_demo``), seeded with N EC2 instances of
every class (idle, busy, protected, production, stopped). Only the first M running
instances get CloudWatch metrics (hourly CPU and network over the window): moto's
CloudWatch scans every stored datapoint on every query, so a fleet-wide 14 days of
hourly metrics would measure moto, not the agent. The rest have none, so the scan lists
them, queries their daily CPU in batches, and finds too few samples (``insufficient``).

Reports wall time, the agent process's peak RSS, CPU seconds of the agent and of moto,
the API calls by action, and the bare primitives measured in the same run against the
same server (a ``DescribeInstances`` page, a ``GetMetricData`` call over a batch) with
what the scan's calls would cost at those rates: a ratio, as for devcloud. The scan runs
in a child process as a dry run (no checkpoint). Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from devstack.ports import free_port

GOAL_SECONDS = 60.0
GOAL_MB = 300.0
REGION = "us-east-1"
DAY = 86_400


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _child(args: argparse.Namespace) -> int:
    """The agent process: bare primitives, then the scan; one JSON line on stdout."""
    from airlock.cloud.aws import AwsConfig, AwsReader
    from airlock.settings import AgentSettings
    from services.agent.service import build_agent

    config = AwsConfig(
        access_key_id="bench",
        secret_access_key="bench",  # moto's: any key without IAM enforced
        endpoint_url=args.endpoint,
        read_timeout_ms=120_000,
    )
    now = int(time.time())
    # (1) bare primitives: list every page, then one metric call over a batch
    bare = AwsReader(config)
    started = time.perf_counter()
    ids = [s.resource_id for s in bare.list_instances(REGION, "ec2.instance", page_size=100)]
    list_seconds = time.perf_counter() - started
    list_pages = bare.calls.get("ec2:DescribeInstances", 1)
    end = now - now % DAY
    started = time.perf_counter()
    points = sum(
        1
        for _ in bare.get_metrics_many(
            REGION, ids[:250], "CPUUtilization", start=end - 14 * DAY, end=end, period=DAY
        )
    )
    metric_seconds = time.perf_counter() - started
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    # (2) the scan
    settings = AgentSettings(
        AIRLOCK_ENV="dev",
        provider="aws",
        cloud_regions=(REGION,),
        scan_workers=args.workers,
        page_size=100,
        metric_batch=100,
    )
    agent = build_agent(
        settings,
        reader=AwsReader(config),
        reader_factory=lambda: AwsReader(config),
        clock=lambda: now,
        keep_rows=False,
    )
    server_cpu0 = _cpu_seconds(args.server_pid)
    cpu0 = time.process_time()
    started = time.perf_counter()
    report = agent.run_once(dry_run=True)
    wall = time.perf_counter() - started
    print(
        json.dumps(
            {
                "wall": wall,
                "agent_cpu": time.process_time() - cpu0,
                "server_cpu": _cpu_seconds(args.server_pid) - server_cpu0,
                "rss_before_mb": rss_before,
                "rss_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "scanned": report.scanned,
                "planned": report.planned,
                "by_verdict": report.by_verdict,
                "api_calls": report.api_calls,
                "bare_list_page_s": list_seconds / list_pages,
                "bare_metric_call_s": metric_seconds,
                "bare_metric_points": points,
            }
        )
    )
    return 0


def _run(instances: int, workers: int, metrics: int) -> dict[str, Any]:
    root = Path(__file__).parent.parent
    with tempfile.TemporaryDirectory(prefix="bench-agent-aws-") as tmp:
        ready = Path(tmp) / "fleet.json"
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
        started = time.perf_counter()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "devstack.aws_demo",
                "--port",
                str(port),
                "--instances",
                str(instances),
                "--rds",
                "0",
                "--metric-instances",
                str(metrics),
                "--ready",
                str(ready),
            ],
            cwd=root,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 1800
            while not ready.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto did not start or seed")
                time.sleep(0.2)  # readiness poll under a deadline, not a race wait
            seed_seconds = time.perf_counter() - started
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bench.bench_agent_aws",
                    "--child",
                    "--endpoint",
                    f"http://127.0.0.1:{port}",
                    "--server-pid",
                    str(proc.pid),
                    "--workers",
                    str(workers),
                ],
                capture_output=True,
                text=True,
                check=False,
                cwd=root,
            )
            if out.returncode != 0:
                raise RuntimeError(f"the scan failed:\n{out.stderr[-3000:]}")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    result["instances"] = instances
    result["seed_seconds"] = seed_seconds
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--instances", type=int, default=10_000, help="EC2 instances")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--metrics", type=int, default=100, help="instances with metrics")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args)

    r = _run(args.instances, args.workers, args.metrics)
    calls = r["api_calls"]
    total = sum(calls.values())
    metric_calls = sum(n for k, n in calls.items() if k.startswith("cloudwatch:"))
    list_calls = total - metric_calls
    bare = list_calls * r["bare_list_page_s"] + metric_calls * r["bare_metric_call_s"]
    print(
        f"fleet {r['instances']:,} EC2 instances ({r['scanned']:,} scanned), "
        f"{args.metrics} with 14 days hourly metrics, {args.workers} scan workers "
        f"(moto seeded in {r['seed_seconds']:.0f} s)"
    )
    print(f"  verdicts        {', '.join(f'{k} {v}' for k, v in sorted(r['by_verdict'].items()))}")
    print(f"  would propose   {r['planned']:,} stops")
    met = "met" if r["wall"] < GOAL_SECONDS else "NOT met"
    print(f"  wall            {r['wall']:7.1f} s   (goal < {GOAL_SECONDS:.0f} s: {met})")
    rss_met = "met" if r["rss_peak_mb"] < GOAL_MB else "NOT met"
    print(
        f"  peak RSS        {r['rss_peak_mb']:7.1f} MB  "
        f"(before the scan {r['rss_before_mb']:.1f} MB; goal < {GOAL_MB:.0f} MB: {rss_met})"
    )
    print(f"  CPU             agent {r['agent_cpu']:.1f} s, moto {r['server_cpu']:.1f} s")
    print(
        f"  API calls       {total:,}: " + ", ".join(f"{k} {v:,}" for k, v in sorted(calls.items()))
    )
    print(
        f"  bare primitives DescribeInstances page {r['bare_list_page_s'] * 1000:.0f} ms; "
        f"GetMetricData over 250 instances {r['bare_metric_call_s'] * 1000:.0f} ms"
    )
    if bare > 0:
        print(
            f"  the scan's calls at bare rates {bare:.1f} s; scan / bare = {r['wall'] / bare:.2f}"
        )
    return 0 if r["wall"] < GOAL_SECONDS and r["rss_peak_mb"] < GOAL_MB else 1


if __name__ == "__main__":
    raise SystemExit(main())
