"""Run moto's server (AWS's double) as a real subprocess, seed it, and read its record.

Usage (tests, eval, bench)::

    from devstack.moto import running_moto

    with running_moto(tmp_path) as moto:
        ids = moto.seed_ec2("us-east-1", 200, tags={"team": "data"})
        moto.put_metrics("us-east-1", namespace="AWS/EC2", dimension="InstanceId",
                         resource_id=ids[0], metric="CPUUtilization",
                         points=[(t, 2.0) for t in range(start, end, 300)])
        moto.enforce_auth()                    # from here on IAM is enforced
        writer = AwsWriter(moto.config("writer"))
        writer.stop_ec2("us-east-1", ids[0])
        assert [w.action for w in moto.writes(key="writer")] == ["StopInstances"]

The server is ``moto.server`` on a free 127.0.0.1 port: boto3 talks to it over HTTP with
signed requests, as it talks to AWS, never through moto's in-process mock. Three IAM users
are made before anything else: ``reader`` (Describe*, CloudWatch reads), ``writer`` (the
executor's: the describes it re-reads with, StopInstances, TerminateInstances,
StopDBInstance) and ``admin`` (everything: the person who seeds, tags and starts things).
Until :meth:`MotoHandle.enforce_auth` any key is accepted; after it moto checks every
request's signature and the user's IAM policy.

The record: moto's recorder (``MOTO_ENABLE_RECORDING``) appends every request that reaches
the server, before moto acts on it, to a file here. :meth:`MotoHandle.writes` reads it: a
write is any call but ``Describe*``/``List*``/``Get*``, so a refused attempt counts too and
"zero writes" means no write was ever sent.

Two changes to moto: EC2 resets ``LaunchTime`` on every start, and moto 5 keeps the first
launch's. The server here is started through this module (``python -m devstack.moto``),
which teaches moto's instance to reset it, so "started since Airlock's stop" can be seen.
And :meth:`MotoHandle.set_write_latency` holds Airlock's three writes for a while before
moto acts on them (devcloud's ``write_latency_ms``), so a test can catch an executor
inside a write.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qs

import httpx

from .ports import free_port

if TYPE_CHECKING:
    from airlock.cloud.aws import AwsConfig, AwsReader
    from airlock.cloud.aws.writer import AwsWriter

__all__ = [
    "ACCOUNT",
    "REGIONS",
    "AwsKey",
    "MotoHandle",
    "MotoWrite",
    "delay_writes",
    "reset_launch_time_on_start",
    "run_in_backend",
    "running_moto",
]

#: moto's default account: every request lands in it.
ACCOUNT: Final = "123456789012"
#: The two regions the fleet tests spread over, and a third for a test's own instances
#: (listing it does not page through a fleet).
REGIONS: Final = ("us-east-1", "eu-west-1", "us-west-2")
_READY_TIMEOUT: Final = 120.0
#: An AMI moto ships in every region.
_AMI: Final = "ami-12c6146b"
_READ_PREFIXES: Final = ("Describe", "List", "Get")
#: The writes :meth:`MotoHandle.set_write_latency` slows: Airlock's, not the admin's.
_SLOWED: Final = frozenset({"StopInstances", "TerminateInstances", "StopDBInstance"})

_POLICIES: Final[dict[str, list[dict[str, Any]]]] = {
    "reader": [
        {
            "Effect": "Allow",
            "Action": [
                "ec2:Describe*",
                "rds:Describe*",
                "rds:ListTagsForResource",
                "cloudwatch:GetMetricData",
                "cloudwatch:GetMetricStatistics",
                "cloudwatch:ListMetrics",
                # moto names CloudWatch's actions by its endpoint prefix; AWS does not.
                "monitoring:GetMetricData",
                "monitoring:GetMetricStatistics",
                "monitoring:ListMetrics",
                "sts:GetCallerIdentity",
            ],
            "Resource": "*",
        }
    ],
    "writer": [
        {
            "Effect": "Allow",
            "Action": [
                "ec2:DescribeInstances",
                "rds:DescribeDBInstances",
                "rds:ListTagsForResource",
                "ec2:StopInstances",
                "ec2:TerminateInstances",
                "rds:StopDBInstance",
                "sts:GetCallerIdentity",
            ],
            "Resource": "*",
        }
    ],
    "admin": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
}


@dataclass(frozen=True, slots=True)
class AwsKey:
    """An IAM user's access key at the moto server."""

    access_key_id: str
    secret_access_key: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class MotoWrite:
    """One recorded request: its action, form parameters, signing key and region."""

    action: str
    params: Mapping[str, str]
    access_key_id: str
    region: str

    @property
    def ids(self) -> tuple[str, ...]:
        """The instance ids it names (``InstanceId.N``, ``DBInstanceIdentifier``)."""
        keys = sorted(k for k in self.params if k.startswith("InstanceId."))
        found = [self.params[k] for k in keys]
        if "DBInstanceIdentifier" in self.params:
            found.append(self.params["DBInstanceIdentifier"])
        return tuple(found)


@dataclass
class MotoHandle:
    url: str
    pid: int
    recording: Path
    #: The file the server reads its write latency (ms) from, before each slowed write.
    latency_file: Path
    keys: dict[str, AwsKey] = field(default_factory=dict)
    #: The EC2 ids seeded before the server started, region -> ids.
    fleet: dict[str, list[str]] = field(default_factory=dict)
    _http: httpx.Client = field(init=False, repr=False)
    _clients: dict[tuple[str, str, str], Any] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._http = httpx.Client(base_url=self.url, timeout=30.0)

    def close(self) -> None:
        self._http.close()

    # -- clients -----------------------------------------------------------------------

    def client(self, service: str, region: str = REGIONS[0], *, key: str = "admin") -> Any:
        """A boto3 client for ``service`` at this server, signing with ``key``'s user
        (made once per service, region and key)."""
        import boto3
        from botocore.config import Config

        cred = self.keys.get(key, AwsKey("testing", "testing"))
        cache_key = (service, region, cred.access_key_id)
        if cache_key in self._clients:
            return self._clients[cache_key]
        client = self._clients[cache_key] = boto3.session.Session().client(
            service,  # type: ignore[call-overload]
            region_name=region,
            endpoint_url=self.url,
            aws_access_key_id=cred.access_key_id,
            aws_secret_access_key=cred.secret_access_key,
            # botocore gzips a large PutMetricData body, and moto checks the signature
            # over the body it decompressed: send it as signed.
            config=Config(retries={"total_max_attempts": 1}, disable_request_compression=True),
        )
        return client

    def config(self, key: str = "reader", *, read_timeout_ms: int = 120_000) -> AwsConfig:
        """The adapter's config for ``key``'s user at this server. moto serializes a page
        of a thousand instances for seconds on a busy machine: the read timeout is long."""
        from airlock.cloud.aws import AwsConfig

        cred = self.keys[key]
        return AwsConfig(
            access_key_id=cred.access_key_id,
            secret_access_key=cred.secret_access_key,
            endpoint_url=self.url,
            connect_timeout_ms=2_000,
            read_timeout_ms=read_timeout_ms,
        )

    def reader(self, key: str = "reader") -> AwsReader:
        from airlock.cloud.aws import AwsReader

        return AwsReader(self.config(key))

    def writer(self, key: str = "writer") -> AwsWriter:
        from airlock.cloud.aws.writer import AwsWriter

        return AwsWriter(self.config(key))

    def enforce_auth(self) -> None:
        """From the next request on, moto checks signatures and IAM policies."""
        self._http.post("/moto-api/reset-auth", content=b"0").raise_for_status()

    def set_write_latency(self, ms: int) -> None:
        """Hold every later StopInstances, TerminateInstances and StopDBInstance ``ms``
        milliseconds before moto acts on it (0: no delay)."""
        tmp = self.latency_file.with_suffix(".tmp")
        tmp.write_text(str(int(ms)))
        os.replace(tmp, self.latency_file)

    # -- the record ----------------------------------------------------------------------

    def reset_record(self) -> None:
        self._http.post("/moto-api/recorder/reset-recording").raise_for_status()

    def requests(self) -> list[MotoWrite]:
        """Every request moto received since the last reset, oldest first."""
        out: list[MotoWrite] = []
        if not self.recording.exists():
            return out
        for line in self.recording.read_text().splitlines():
            if line.strip():
                out.append(_parse_entry(json.loads(line)))
        return out

    def writes(
        self, *, key: str | None = None, action: str | None = None, resource_id: str | None = None
    ) -> list[MotoWrite]:
        """The recorded write attempts (not Describe/List/Get), filtered."""
        key_id = None if key is None else self.keys[key].access_key_id
        return [
            w
            for w in self.requests()
            if w.action
            and not w.action.startswith(_READ_PREFIXES)
            and (key_id is None or w.access_key_id == key_id)
            and (action is None or w.action == action)
            and (resource_id is None or resource_id in w.ids)
        ]

    # -- seeding (as the admin) ----------------------------------------------------------

    def seed_ec2(
        self,
        region: str,
        count: int,
        *,
        tags: Mapping[str, str] | None = None,
        batch: int = 100,
        instance_type: str = "t3.micro",
    ) -> list[str]:
        """Run ``count`` instances in batches of ``batch`` (one reservation each); their ids."""
        ec2 = self.client("ec2", region)
        spec = []
        if tags:
            spec = [
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                }
            ]
        ids: list[str] = []
        while len(ids) < count:
            n = min(batch, count - len(ids))
            answer = ec2.run_instances(
                ImageId=_AMI,
                InstanceType=instance_type,
                MinCount=n,
                MaxCount=n,
                TagSpecifications=spec,
            )
            ids.extend(i["InstanceId"] for i in answer["Instances"])
        return ids

    def seed_rds(
        self, region: str, identifier: str, *, tags: Mapping[str, str] | None = None
    ) -> str:
        rds = self.client("rds", region)
        rds.create_db_instance(
            DBInstanceIdentifier=identifier,
            DBInstanceClass="db.t3.micro",
            Engine="postgres",
            AllocatedStorage=20,
            MasterUsername="airlock",
            MasterUserPassword="airlock-dev-only",  # a local double's, never a real one
            Tags=[{"Key": k, "Value": v} for k, v in (tags or {}).items()],
        )
        return identifier

    def put_metrics(
        self,
        region: str,
        *,
        namespace: str,
        dimension: str,
        resource_id: str,
        metric: str,
        points: Sequence[tuple[int, float]],
    ) -> None:
        """PutMetricData for one resource: (Unix time, value) pairs, 1,000 per call."""
        cw = self.client("cloudwatch", region)
        data = [
            {
                "MetricName": metric,
                "Dimensions": [{"Name": dimension, "Value": resource_id}],
                "Timestamp": datetime.fromtimestamp(t, UTC),
                "Value": value,
            }
            for t, value in points
        ]
        for start in range(0, len(data), 1000):
            cw.put_metric_data(Namespace=namespace, MetricData=data[start : start + 1000])

    def _make_users(self) -> None:
        iam = self.client("iam")
        for name, statements in _POLICIES.items():
            iam.create_user(UserName=f"airlock-{name}")
            iam.put_user_policy(
                UserName=f"airlock-{name}",
                PolicyName=f"airlock-{name}",
                PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}),
            )
            key = iam.create_access_key(UserName=f"airlock-{name}")["AccessKey"]
            self.keys[name] = AwsKey(key["AccessKeyId"], key["SecretAccessKey"])


def _parse_entry(entry: Mapping[str, Any]) -> MotoWrite:
    body = entry.get("body") or ""
    if entry.get("body_encoded"):
        import base64

        body = base64.b64decode(body).decode("utf-8", "replace")
    query = str(entry.get("url", "")).partition("?")[2]
    form = {k: v[-1] for k, v in parse_qs(query).items()}
    if isinstance(body, str):
        form.update({k: v[-1] for k, v in parse_qs(body).items()})
    headers = {str(k).lower(): str(v) for k, v in dict(entry.get("headers") or {}).items()}
    action = form.get("Action", "")
    target = headers.get("x-amz-target", "")
    if not action and target:
        action = target.rpartition(".")[2]
    # "AWS4-HMAC-SHA256 Credential=AKID/20261207/us-east-1/ec2/aws4_request, ..."
    scope = headers.get("authorization", "").partition("Credential=")[2].split(",")[0]
    parts = scope.split("/")
    return MotoWrite(
        action=action,
        params=form,
        access_key_id=parts[0] if parts else "",
        region=parts[2] if len(parts) > 2 else "",
    )


@contextlib.contextmanager
def running_moto(
    tmp: Path, *, fleet: Sequence[Mapping[str, Any]] = (), users: bool = True
) -> Iterator[MotoHandle]:
    """A moto server for the ``with`` block, its IAM users made (auth not yet enforced).

    ``fleet``: EC2 groups seeded in the server before it serves, each
    ``{"region", "count", "tags"?, "batch"?, "instance_type"?, "launched"?}`` (``launched``:
    the Unix time their launch and creation are dated back to; no API can); their ids are
    :attr:`MotoHandle.fleet` (region -> ids).
    """
    port = free_port()
    recording = tmp / "moto-recording.jsonl"
    latency = tmp / "moto-write-latency"
    argv = [
        sys.executable,
        "-m",
        "devstack.moto",
        "--port",
        str(port),
        "--write-latency-file",
        str(latency),
    ]
    spec = tmp / "moto-fleet.json"
    if fleet:
        spec.write_text(json.dumps({"ec2": list(fleet)}))
        argv += ["--seed", str(spec)]
    env = {
        **os.environ,
        "MOTO_ENABLE_RECORDING": "True",
        "MOTO_RECORDER_FILEPATH": str(recording),
        # Any key works until enforce_auth() sets the count to 0.
        "INITIAL_NO_AUTH_ACTION_COUNT": "inf",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        # moto's 1,366 default AMIs are filtered once per instance run (95 % of a run).
        "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
    }
    log = (tmp / "moto.log").open("wb")
    proc = subprocess.Popen(
        argv,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    handle = MotoHandle(
        url=f"http://127.0.0.1:{port}", pid=proc.pid, recording=recording, latency_file=latency
    )
    try:
        _wait_ready(handle, proc)
        if fleet:
            handle.fleet = json.loads(spec.with_suffix(".ids.json").read_text())
        if users:
            handle._make_users()
        handle.reset_record()
        yield handle
    finally:
        handle.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()


def _wait_ready(handle: MotoHandle, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + _READY_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto server exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            # Any answer will do (a GET here is refused at once); data.json would
            # serialize the whole seeded fleet.
            handle._http.get("/moto-api/reset-auth")
            return
        time.sleep(0.1)
    raise RuntimeError("moto server did not become ready")


def run_in_backend(
    region: str,
    count: int,
    *,
    tags: Mapping[str, str] | None = None,
    batch: int = 100,
    instance_type: str = "t3.micro",
    launched: int | None = None,
) -> list[str]:
    """Run ``count`` EC2 instances straight in moto's backend of this process, in
    reservations of ``batch``; their ids, in order. Only the process that serves moto can.

    Through the API, moto spends ~5 ms serializing each instance of a RunInstances answer.
    moto pages ``DescribeInstances`` by reservation, so ``batch`` sets how many instances a
    page of ``MaxResults`` holds. ``launched``: the Unix time the instances' launch and
    creation (their interfaces' attach time, as the reader reads it) are dated back to,
    which no API can do.
    """
    from moto.ec2.models import ec2_backends

    backend = ec2_backends[ACCOUNT][region]
    at = None if launched is None else datetime.fromtimestamp(launched, UTC)
    ids: list[str] = []
    with _newest_first(backend):
        while len(ids) < count:
            reservation = backend.run_instances(
                _AMI,
                min(batch, count - len(ids)),
                None,
                [],
                instance_type=instance_type,
                # "Default" skips moto's walk of its instance-type offerings on every call
                # (its validation is off): the type is still the one given.
                is_instance_type_default=True,
                region_name=region,
                nics=[],
                security_group_ids=[],
                client_token="devstack-seed",
                tags={"instance": dict(tags or {})},
            )
            for inst in reservation.instances:
                if at is not None:
                    inst.launch_time = at
                    for eni in inst.nics.values():
                        eni.attach_time = at
                ids.append(inst.id)
    return ids


@contextlib.contextmanager
def _newest_first(backend: Any) -> Iterator[None]:
    """While seeding, ``backend.get_instance`` looks through the newest reservations first.

    moto's own copies every reservation to find one instance, and each instance run looks
    itself up (to attach its volume): a fleet of N single-instance reservations would cost
    N² copies. The instance looked up is in the newest reservation.
    """
    original = backend.get_instance

    def get_instance(instance_id: str) -> Any:
        for reservation in reversed(backend.reservations.values()):
            for inst in reservation.instances:
                if inst.id == instance_id:
                    return inst
        return original(instance_id)

    backend.get_instance = get_instance
    try:
        yield
    finally:
        del backend.get_instance


def _seed_in_process(spec_path: Path) -> None:
    """Run the fleet of ``spec_path`` into moto's backend before serving; the ids are
    written beside the spec (``<spec>.ids.json``: region -> ids, in order)."""
    spec = json.loads(spec_path.read_text())
    out: dict[str, list[str]] = {}
    for group in spec["ec2"]:
        region = group["region"]
        out.setdefault(region, []).extend(
            run_in_backend(
                region,
                int(group["count"]),
                tags=group.get("tags"),
                batch=int(group.get("batch", 100)),
                instance_type=group.get("instance_type", "t3.micro"),
                launched=group.get("launched"),
            )
        )
    spec_path.with_suffix(".ids.json").write_text(json.dumps(out))


def reset_launch_time_on_start() -> None:
    """Teach moto's instances in this process what EC2 does: ``LaunchTime`` is the last
    start (moto 5 keeps the first launch's)."""
    from moto.core.utils import utcnow
    from moto.ec2.models.instances import Instance

    original = Instance.start

    def start(self: Any) -> Any:
        previous = original(self)
        if previous.name != "running":
            self.launch_time = utcnow()
        return previous

    Instance.start = start  # type: ignore[method-assign]


def delay_writes(latency_file: Path) -> None:
    """Before moto acts on one of Airlock's writes (:data:`_SLOWED`), sleep the
    milliseconds ``latency_file`` holds (none when it is absent). moto's server is
    threaded: only the slowed request waits."""
    from moto.core.responses import BaseResponse

    original = BaseResponse.call_action

    def call_action(self: Any) -> Any:
        if self._get_action() in _SLOWED:
            try:
                ms = int(latency_file.read_text() or "0")
            except FileNotFoundError:
                ms = 0
            if ms > 0:
                time.sleep(ms / 1000)  # the fault asked for: a slow cloud write
        return original(self)

    BaseResponse.call_action = call_action  # type: ignore[method-assign]


def _serve(argv: Sequence[str]) -> None:
    """Run moto's server with EC2's LaunchTime reset on every start."""
    parser = argparse.ArgumentParser(prog="python -m devstack.moto")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seed", type=Path, default=None)
    parser.add_argument("--write-latency-file", type=Path, default=None)
    args = parser.parse_args(argv)

    from moto.server import main

    if args.seed is not None:
        _seed_in_process(args.seed)

    reset_launch_time_on_start()
    if args.write_latency_file is not None:
        delay_writes(args.write_latency_file)
    main(["-H", "127.0.0.1", "-p", str(args.port)])


if __name__ == "__main__":
    _serve(sys.argv[1:])
