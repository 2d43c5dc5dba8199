"""A full agent scan of a 10,000-instance EC2 fleet at a local moto server, beside the bare
boto3 calls it is made of: ``bench_agent``'s figure for AWS.

``python -m bench.bench_agent_aws [--instances N] [--workers W] [--metrics M]``.
moto runs as its own process (``devstack.aws_demo``), seeded with N EC2 instances of
every class (idle, busy, protected, production, stopped), one instance a reservation, so
a ``DescribeInstances`` page holds 100 instances as at AWS (moto pages by reservation).
Only M running instances (none by default) get CloudWatch metrics (hourly CPU and
network over the window): moto's CloudWatch scans every stored datapoint for every
query and period, so a fleet-wide 14 days of hourly metrics would measure moto, not the
agent. The rest have none, so the scan lists them, queries their daily and hourly CPU in
batches, and finds too few samples (``insufficient``).

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
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._scan import measure_scan, report, run_child
from devstack.ports import free_port

REGION = "us-east-1"
DAY = 86_400


def _child(args: argparse.Namespace) -> int:
    """The agent process: bare primitives, then the scan; one JSON line on stdout."""
    from airlock.cloud.aws import AwsConfig, AwsReader
    from airlock.settings import AgentSettings

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

    # (2) the scan
    settings = AgentSettings(
        AIRLOCK_ENV="dev",
        provider="aws",
        cloud_regions=(REGION,),
        scan_workers=args.workers,
        page_size=100,
        metric_batch=100,
    )
    result = measure_scan(settings, lambda: AwsReader(config), now=now, server_pid=args.server_pid)
    result.update(
        bare_list_page_s=list_seconds / list_pages,
        bare_list_pages=list_pages,
        bare_metric_call_s=metric_seconds,
        bare_metric_points=points,
    )
    print(json.dumps(result))
    return 0


def _run(instances: int, workers: int, metrics: int) -> dict[str, Any]:
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
            cwd=Path(__file__).resolve().parent.parent,
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
            result = run_child(
                "bench.bench_agent_aws",
                [
                    "--endpoint",
                    f"http://127.0.0.1:{port}",
                    "--server-pid",
                    str(proc.pid),
                    "--workers",
                    str(workers),
                ],
            )
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    result["instances"] = instances
    result["seed_seconds"] = seed_seconds
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--instances", type=int, default=10_000, help="EC2 instances")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--metrics", type=int, default=0, help="instances with metrics")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args)

    r = _run(args.instances, args.workers, args.metrics)
    calls = r["api_calls"]
    metric_calls = sum(n for k, n in calls.items() if k.startswith("cloudwatch:"))
    list_calls = sum(calls.values()) - metric_calls
    bare = list_calls * r["bare_list_page_s"] + metric_calls * r["bare_metric_call_s"]
    met = report(
        r,
        title=(
            f"fleet {r['instances']:,} EC2 instances ({r['scanned']:,} scanned), "
            f"{args.metrics} with 14 days hourly metrics, {args.workers} scan workers "
            f"(moto seeded in {r['seed_seconds']:.0f} s)"
        ),
        server="moto",
        bare=[
            f"DescribeInstances page {r['bare_list_page_s'] * 1000:.0f} ms "
            f"({r['bare_list_pages']} pages); GetMetricData over 250 instances "
            f"{r['bare_metric_call_s'] * 1000:.0f} ms"
        ],
        bare_s=bare,
    )
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
