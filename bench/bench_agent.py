"""A full agent scan of a 10,000-instance devcloud fleet with 14 days of hourly metrics.

``python -m bench.bench_agent [--instances N] [--workers W]`` (or ``make bench``).
Reports wall time, the agent process's peak RSS (``ru_maxrss``), CPU seconds of the agent
and of devcloud, and the cloud API calls the scan made, by action. Beside them, measured
in the same run against the same server: the bare SDK primitives the scan is made of —
a ``DescribeInstances`` page and a full ``DescribeMetricList`` page (1,440 hourly points)
— and what the scan's calls would cost at those bare rates, so the figure reads as a
ratio (machine noise hits both alike). Goal: under 60 s and under 300 MB.

The scan runs in a child process so the peak RSS is the agent's alone, as a dry run
(the checkpoint is not part of the measurement). devcloud runs as its own process, as
in the tests. Not a test: nothing here asserts.
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

import httpx

from bench._scan import measure_scan, report, run_child
from devstack.ports import free_port

#: A fixed anchor (2025-11-29T07:06:40Z) so every run scans the same fleet and metrics.
NOW = 1_764_400_000
REGION = "ap-southeast-1"


def _child(args: argparse.Namespace) -> int:
    """The agent process: bare primitives, then the scan; one JSON line on stdout."""
    from airlock.cloud.alibaba import AlibabaConfig, AlibabaReader
    from airlock.settings import DEVCLOUD_READ_KEY, AgentSettings

    config = AlibabaConfig(
        access_key_id=DEVCLOUD_READ_KEY[0],
        access_key_secret=DEVCLOUD_READ_KEY[1],
        endpoint=args.endpoint,
        protocol="http",
        read_timeout_ms=60_000,
    )
    # (1) bare primitives, with a reader of their own
    bare = AlibabaReader(config)
    started = time.perf_counter()
    ids = [s.resource_id for s in bare.list_instances(REGION, "ecs.instance", page_size=100)]
    list_seconds = time.perf_counter() - started
    list_pages = bare.calls["ecs:DescribeInstances"]
    sample = ids[: args.metric_sample]
    window_end = NOW - NOW % 86_400
    started = time.perf_counter()
    points = sum(
        1
        for _ in bare.get_metrics_many(
            REGION,
            sample,
            "CPUUtilization",
            start=window_end - 14 * 86_400,
            end=window_end,
            period=3600,
        )
    )
    metric_seconds = time.perf_counter() - started
    metric_pages = bare.calls["cms:DescribeMetricList"]

    # (2) the scan
    settings = AgentSettings(AIRLOCK_ENV="dev", cloud_regions=(REGION,), scan_workers=args.workers)
    result = measure_scan(
        settings, lambda: AlibabaReader(config), now=NOW, server_pid=args.server_pid
    )
    result.update(
        bare_list_page_s=list_seconds / list_pages,
        bare_metric_page_s=metric_seconds / metric_pages,
        bare_metric_points_per_s=points / metric_seconds,
        bare_metric_points_per_page=points / metric_pages,
    )
    print(json.dumps(result))
    return 0


def _serve(
    workdir: Path, instances: int, rds: int, seed: int
) -> tuple[subprocess.Popen[bytes], str]:
    from services.devcloud import Store, seed_store

    db = workdir / "devcloud.db"
    store = Store(db, transition_seconds=0.0)
    seed_store(
        store, seed=seed, instances=instances, rds=rds, now=NOW, regions=(REGION,), replace=True
    )
    store.close()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    env["AIRLOCK_ENV"] = "dev"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from airlock.cli import main; main()",
            "devcloud",
            "serve",
            "--port",
            str(port),
            "--db",
            str(db),
        ],
        cwd=workdir,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/_health", timeout=1).status_code == 200:
                return proc, f"127.0.0.1:{port}"
        except httpx.TransportError:
            time.sleep(0.05)  # readiness poll under a deadline, not a race wait
    proc.kill()
    raise RuntimeError("devcloud did not start")


def _run(instances: int, workers: int, seed: int) -> dict[str, Any]:
    rds = instances // 10
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp:
        proc, endpoint = _serve(Path(tmp), instances - rds, rds, seed)
        try:
            result = run_child(
                "bench.bench_agent",
                ["--endpoint", endpoint, "--server-pid", str(proc.pid), "--workers", str(workers)],
            )
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    result["instances"] = instances
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--instances", type=int, default=10_000, help="ECS + RDS (RDS = N/10)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--also", type=int, action="append", default=[], help="another fleet size (memory flatness)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--metric-sample", type=int, default=50, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args)

    for size in [*args.also, args.instances]:
        r = _run(size, args.workers, args.seed)
        calls = r["api_calls"]
        metric_calls = calls.get("cms:DescribeMetricList", 0)
        list_calls = sum(calls.values()) - metric_calls
        bare = list_calls * r["bare_list_page_s"] + metric_calls * r["bare_metric_page_s"]
        report(
            r,
            title=(
                f"fleet {r['instances']:,} instances ({r['scanned']:,} scanned), "
                f"14 days hourly, {args.workers} scan workers"
            ),
            server="devcloud",
            bare=[
                f"DescribeInstances page {r['bare_list_page_s'] * 1000:.1f} ms; "
                f"DescribeMetricList page ({r['bare_metric_points_per_page']:.0f} points) "
                f"{r['bare_metric_page_s'] * 1000:.1f} ms = "
                f"{r['bare_metric_points_per_s']:,.0f} points/s"
            ],
            bare_s=bare,
        )
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
