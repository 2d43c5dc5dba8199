"""A seeded AWS double for ``airlock up --cloud aws-moto`` and ``bench_agent --cloud aws``:
moto's server in this process, a fleet of EC2 and RDS instances, and their CloudWatch
metrics.

``python -m devstack.aws_demo --port P --instances N --ready FILE`` serves moto on
127.0.0.1:P, seeds it, writes FILE (the fleet, as JSON) once the fleet can be read, and
serves until SIGTERM. moto keeps everything in memory, so each start seeds again.

The server runs in this process (``ThreadedMotoServer``) so the seeding can do what no
AWS API can: date each instance's launch back (EC2 has no creation time to set; the
agent proposes nothing younger than its window). As EC2 does, ``LaunchTime`` moves to
now on every start. IAM is not enforced here: the demo's keys are any keys; the tests
that need IAM enforced use ``devstack.moto``.

Dev and test only: nothing shipped imports this module.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from .moto import ACCOUNT, reset_launch_time_on_start, run_in_backend

__all__ = ["ACCOUNT", "DemoInstance", "main", "seed_fleet"]

_HOUR: Final = 3_600
_DAY: Final = 86_400

Truth = Literal["idle", "busy", "protected", "prod", "stopped"]
_CLASSES: Final[tuple[Truth, ...]] = ("idle", "busy", "protected", "prod", "stopped")
_WEIGHTS: Final = (40, 30, 10, 10, 10)
_TAGS: Final[dict[Truth, dict[str, str]]] = {
    "idle": {"team": "data"},
    "busy": {"team": "web"},
    "protected": {"team": "data", "airlock:protect": "true"},
    "prod": {"team": "web", "env": "production"},
    "stopped": {"team": "data"},
}


@dataclass(frozen=True, slots=True)
class DemoInstance:
    resource_type: Literal["ec2.instance", "rds.instance"]
    resource_id: str
    region: str
    truth: Truth


def seed_fleet(
    url: str,
    *,
    instances: int,
    region: str = "us-east-1",
    days: int = 15,
    now: int | None = None,
    seed: int = 26,
    rds: int = 2,
    metric_instances: int | None = None,
    reservation: int = 1,
) -> list[DemoInstance]:
    """Seed the moto server at ``url``: ``instances`` EC2 instances (idle, busy,
    protected, production-tagged, stopped) and ``rds`` RDS instances, launched ``days + 20``
    days ago, with ``days`` days of hourly CPU and network metrics ending at ``now`` (for
    the first ``metric_instances`` running ones only, when given). EC2 instances are run
    in moto's backend in reservations of ``reservation`` (moto pages ``DescribeInstances``
    by reservation: one instance each pages as AWS does), so only the process that serves
    moto can seed."""
    rng = random.Random(seed)
    now = int(datetime.now(UTC).timestamp()) if now is None else now
    launched = now - (days + 20) * _DAY
    classes = rng.choices(_CLASSES, _WEIGHTS, k=instances)
    ec2 = _client("ec2", url, region)
    fleet: list[DemoInstance] = []
    for truth in _CLASSES:
        count = classes.count(truth)
        if not count:
            continue
        made = run_in_backend(
            region,
            count,
            tags=_TAGS[truth],
            batch=reservation,
            instance_type="t3.large",
            launched=launched,
        )
        if truth == "stopped":
            for start in range(0, len(made), 500):
                ec2.stop_instances(InstanceIds=made[start : start + 500])
        fleet.extend(DemoInstance("ec2.instance", i, region, truth) for i in made)
    rds_client = _client("rds", url, region)
    for n in range(rds):
        db_truth: Truth = "idle" if n % 2 == 0 else "busy"
        name = f"demo-db-{n + 1}"
        rds_client.create_db_instance(
            DBInstanceIdentifier=name,
            DBInstanceClass="db.t3.micro",
            Engine="postgres",
            AllocatedStorage=20,
            MasterUsername="airlock",
            MasterUserPassword="airlock-dev-only",  # a local double's, never a real one
            Tags=[{"Key": k, "Value": v} for k, v in _TAGS[db_truth].items()],
        )
        fleet.append(DemoInstance("rds.instance", name, region, db_truth))
    _date_rds_back(fleet, launched)
    running = [i for i in fleet if i.truth != "stopped"]
    if metric_instances is not None:
        # A stride through the fleet (grouped by class): every class, not the first alone.
        step = max(1, len(running) // max(1, metric_instances))
        running = running[::step][:metric_instances]
    _put_metrics(url, region, running, rng, end=now - now % _HOUR, days=days)
    return fleet


def _client(service: str, url: str, region: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        service,  # type: ignore[call-overload]
        region_name=region,
        endpoint_url=url,
        # Seeding thousands of instances is slow at moto; one call is never sent twice.
        config=Config(read_timeout=900, retries={"total_max_attempts": 1}),
        aws_access_key_id="demo",
        aws_secret_access_key="demo",  # moto's: any key is accepted without IAM
    )


def _date_rds_back(fleet: Sequence[DemoInstance], when: int) -> None:
    """Set each RDS instance's creation time (moto's backend is in this process)."""
    from moto.rds.models import rds_backends

    at = datetime.fromtimestamp(when, UTC)
    for inst in fleet:
        if inst.resource_type == "rds.instance":
            db = rds_backends[ACCOUNT][inst.region].databases[inst.resource_id]
            db.instance_create_time = at


def _put_metrics(
    url: str, region: str, fleet: Sequence[DemoInstance], rng: random.Random, *, end: int, days: int
) -> None:
    """Hourly CPU (percent) and network (bytes in the hour) for every running instance."""
    cw = _client("cloudwatch", url, region)
    hours = range(end - days * _DAY, end, _HOUR)
    batch: list[dict[str, Any]] = []
    for inst in fleet:
        if inst.truth == "stopped":
            continue
        ec2 = inst.resource_type == "ec2.instance"
        space, dim = ("AWS/EC2", "InstanceId") if ec2 else ("AWS/RDS", "DBInstanceIdentifier")
        net = (
            ("NetworkIn", "NetworkOut")
            if ec2
            else (
                "NetworkReceiveThroughput",
                "NetworkTransmitThroughput",
            )
        )
        busy = inst.truth == "busy"
        for t in hours:
            stamp = datetime.fromtimestamp(t, UTC)
            dims = [{"Name": dim, "Value": inst.resource_id}]
            cpu = rng.uniform(30, 80) if busy else rng.uniform(0.3, 3.0)
            # Bytes in the hour: EC2 counts them per sample (one sample an hour here; the
            # reader sums the samples), RDS reports bytes per second.
            moved = rng.uniform(2e8, 9e8) if busy else rng.uniform(2e4, 9e4)
            value = moved if ec2 else moved / _HOUR
            batch.append(_datum("CPUUtilization", dims, stamp, round(cpu, 2)))
            batch.extend(_datum(name, dims, stamp, round(value, 2)) for name in net)
        for start in range(0, len(batch), 1000):
            cw.put_metric_data(Namespace=space, MetricData=batch[start : start + 1000])
        batch = []


def _datum(name: str, dims: list[dict[str, str]], stamp: datetime, value: float) -> dict[str, Any]:
    return {"MetricName": name, "Dimensions": dims, "Timestamp": stamp, "Value": value}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m devstack.aws_demo")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--instances", type=int, default=24)
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--ready", type=Path, required=True)
    parser.add_argument("--days", type=int, default=15, help="days of hourly metrics")
    parser.add_argument("--rds", type=int, default=2, help="RDS instances")
    parser.add_argument(
        "--metric-instances", type=int, default=None, help="only this many get metrics"
    )
    parser.add_argument("--reservation", type=int, default=1, help="EC2 instances per reservation")
    args = parser.parse_args(argv)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "demo")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "demo")
    # moto's 1,366 default AMIs are filtered once per instance run: most of a seeding.
    os.environ.setdefault("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    from moto.server import ThreadedMotoServer

    reset_launch_time_on_start()
    server = ThreadedMotoServer("127.0.0.1", args.port, verbose=False)
    server.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        fleet = seed_fleet(
            f"http://127.0.0.1:{args.port}",
            instances=args.instances,
            region=args.region,
            days=args.days,
            rds=args.rds,
            metric_instances=args.metric_instances,
            reservation=args.reservation,
        )
        tmp = args.ready.with_name(args.ready.name + ".tmp")
        rows = [
            {"type": i.resource_type, "id": i.resource_id, "region": i.region, "truth": i.truth}
            for i in fleet
        ]
        tmp.write_text(json.dumps(rows))
        tmp.replace(args.ready)
        stop.wait()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
