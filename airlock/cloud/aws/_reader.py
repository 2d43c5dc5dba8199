"""``AwsReader``: the AWS ``CloudReader`` over boto3.

It lists EC2 instances (``DescribeInstances``) and RDS instances (``DescribeDBInstances``)
page by page to the last page, reads one resource's live state, and reads CloudWatch
metrics (``GetMetricData``, paged). It calls Describe*/Get* actions only, and this module
must never import :mod:`airlock.cloud.aws.writer`: the agent loads it, and the agent must
not be able to reach a writer (docs/architecture.md#import-boundaries).

Statuses are reported in the ports' vocabulary, so the agent and the executor read both
providers alike: EC2 ``running`` → ``Running``, ``stopped`` → ``Stopped`` (and
``pending``, ``stopping`` likewise); RDS ``available`` → ``Running``, ``stopped`` →
``Stopped``, any other RDS status in CamelCase (``backing-up`` → ``BackingUp``). An EC2
instance that is ``shutting-down`` or ``terminated`` is gone: :meth:`AwsReader.get_state`
answers None and listings skip it, as the executor's probe of a delete expects.

``started_at`` is EC2's ``LaunchTime``, which EC2 resets on every start: the executor
deletes only an instance whose last start came before the stop the approval rests on.
``created_at`` is when its first network interface was attached (at launch; a stop and a
start keep it). RDS reports neither start nor creation in a way a delete could rest on,
and no RDS delete is allowed.

Metrics (namespace ``AWS/EC2`` by ``InstanceId`` for ``i-…``, else ``AWS/RDS`` by
``DBInstanceIdentifier``), each point its period's ``Average`` and ``Maximum``, except
EC2's byte counts:

==========================  =========================================  ================
metric                      meaning                                    point's unit
==========================  =========================================  ================
CPUUtilization              EC2 / RDS CPU                              percent
NetworkIn, NetworkOut       EC2 bytes moved, as the period's mean      bytes/second
                            rate: ``Sum`` / period
NetworkReceiveThroughput    RDS inbound                                bytes/second
NetworkTransmitThroughput   RDS outbound                               bytes/second
==========================  =========================================  ================

EC2's ``NetworkIn`` and ``NetworkOut`` are bytes per sample, and a sample is 5 minutes
under basic monitoring but 1 minute under detailed monitoring: their ``Average`` over a
period depends on which, and read as 5-minute samples it undercounts a detailed-monitoring
machine's traffic five times (a busy machine would look idle). Their ``Sum`` over the
period is the bytes moved whatever the sampling, so the reader asks for it and reports
``Sum / period``: a rate averaged over the period, as every other network point of every
provider is (a point of period ``p`` moved ``average * p`` bytes). Their per-sample
``Maximum`` is not a rate either way; the point's ``maximum`` is its ``average``.

A datapoint without a number is dropped, never read as zero.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from airlock.cloud._metrics import BatchedMetrics
from airlock.cloud.ports import LiveState, MetricPoint, RdsSpec, ResourceNotFound, ResourceType

from ._common import EC2_ID, RDS_ID, AwsConfig, Clients, call, rfc3339

__all__ = ["EC2_METRICS", "RDS_METRICS", "AwsReader"]

EC2_METRICS: Final = ("CPUUtilization", "NetworkIn", "NetworkOut")
RDS_METRICS: Final = ("CPUUtilization", "NetworkReceiveThroughput", "NetworkTransmitThroughput")

_EC2_PAGE: Final = (5, 1000)  # DescribeInstances MaxResults bounds
_RDS_PAGE: Final = (20, 100)  # DescribeDBInstances MaxRecords bounds
#: Ids a GetMetricData call: it takes 500 queries, at most two (Average, Maximum) an id.
_METRIC_BATCH: Final = 250
#: Metrics that count bytes per sample: read as their Sum (see the module docstring).
_BYTE_COUNTS: Final = frozenset({"NetworkIn", "NetworkOut"})
_GONE: Final = frozenset({"shutting-down", "terminated"})


def _camel(status: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in status.split("-"))


def _tags(items: Sequence[Any] | None) -> dict[str, str]:
    return {str(t["Key"]): str(t.get("Value", "")) for t in items or ()}


def _ec2_state(region: str, inst: Any) -> LiveState | None:
    state = str(inst.get("State", {}).get("Name", ""))
    if state in _GONE:
        return None
    tags = _tags(inst.get("Tags"))
    attached = [
        nic["Attachment"]["AttachTime"]
        for nic in inst.get("NetworkInterfaces", ())
        if nic.get("Attachment", {}).get("AttachTime") is not None
    ]
    return LiveState(
        resource_type="ec2.instance",
        resource_id=str(inst["InstanceId"]),
        region=region,
        status=_camel(state),
        tags=tags,
        instance_type=str(inst.get("InstanceType", "")),
        created_at=rfc3339(min(attached)) if attached else "",
        name=tags.get("Name", ""),
        started_at=rfc3339(inst.get("LaunchTime")),
    )


def _rds_state(region: str, db: Any) -> LiveState:
    status = str(db.get("DBInstanceStatus", ""))
    engine = str(db.get("Engine", ""))
    return LiveState(
        resource_type="rds.instance",
        resource_id=str(db["DBInstanceIdentifier"]),
        region=region,
        status="Running" if status == "available" else _camel(status),
        tags=_tags(db.get("TagList")),
        instance_type=str(db.get("DBInstanceClass", "")),
        created_at=rfc3339(db.get("InstanceCreateTime")),
        name=str(db["DBInstanceIdentifier"]),
        rds=RdsSpec(
            engine=engine,
            engine_version=str(db.get("EngineVersion", "")),
            storage_type=str(db.get("StorageType", "")),
            zone_id=str(db.get("AvailabilityZone", "")),
            pay_type="Postpaid",  # on demand; reservations are billed apart from the instance
        ),
    )


def _namespace(resource_id: str) -> tuple[str, str]:
    if EC2_ID.fullmatch(resource_id):
        return "AWS/EC2", "InstanceId"
    if RDS_ID.fullmatch(resource_id):
        return "AWS/RDS", "DBInstanceIdentifier"
    raise ValueError(f"not an EC2 or RDS id: {resource_id!r}")


class AwsReader(BatchedMetrics):
    """``CloudReader`` (and ``MetricsBatchReader``) over boto3. Give it the read credentials.

    ``calls`` counts the API calls made, by action, as ``AlibabaReader`` does.
    """

    def __init__(self, config: AwsConfig) -> None:
        self._clients = Clients(config)
        self.calls: dict[str, int] = {}

    def _count(self, action: str) -> None:
        self.calls[action] = self.calls.get(action, 0) + 1

    def list_instances(
        self, region: str, resource_type: ResourceType, *, page_size: int = 100
    ) -> Iterator[LiveState]:
        if resource_type == "ec2.instance":
            yield from self._list_ec2(region, page_size)
        elif resource_type == "rds.instance":
            yield from self._list_rds(region, page_size)
        else:
            raise ValueError(f"AWS has no {resource_type}")

    def _list_ec2(self, region: str, page_size: int) -> Iterator[LiveState]:
        ec2 = self._clients.ec2(region)
        size = min(max(page_size, _EC2_PAGE[0]), _EC2_PAGE[1])
        token = ""
        seen: set[str] = set()
        while True:
            kwargs: dict[str, Any] = {"MaxResults": size}
            if token:
                kwargs["NextToken"] = token
            self._count("ec2:DescribeInstances")
            page = call(ec2.describe_instances, **kwargs)
            for reservation in page.get("Reservations", ()):
                for inst in reservation.get("Instances", ()):
                    state = _ec2_state(region, inst)
                    if state is not None and state.resource_id not in seen:
                        seen.add(state.resource_id)
                        yield state
            token = page.get("NextToken", "")
            if not token:
                return

    def _list_rds(self, region: str, page_size: int) -> Iterator[LiveState]:
        rds = self._clients.rds(region)
        size = min(max(page_size, _RDS_PAGE[0]), _RDS_PAGE[1])
        marker = ""
        while True:
            kwargs: dict[str, Any] = {"MaxRecords": size}
            if marker:
                kwargs["Marker"] = marker
            self._count("rds:DescribeDBInstances")
            page = call(rds.describe_db_instances, **kwargs)
            for db in page.get("DBInstances", ()):
                yield _rds_state(region, db)
            marker = page.get("Marker", "")
            if not marker:
                return

    def get_state(
        self, region: str, resource_type: ResourceType, resource_id: str
    ) -> LiveState | None:
        if resource_type == "ec2.instance":
            if not EC2_ID.fullmatch(resource_id):
                raise ValueError(f"not an EC2 instance id: {resource_id!r}")
            self._count("ec2:DescribeInstances")
            try:
                page = call(self._clients.ec2(region).describe_instances, InstanceIds=[resource_id])
            except ResourceNotFound:
                return None
            found = [
                inst
                for reservation in page.get("Reservations", ())
                for inst in reservation.get("Instances", ())
                if inst.get("InstanceId") == resource_id
            ]
            return _ec2_state(region, found[0]) if found else None
        if resource_type == "rds.instance":
            if not RDS_ID.fullmatch(resource_id):
                raise ValueError(f"not an RDS instance identifier: {resource_id!r}")
            self._count("rds:DescribeDBInstances")
            try:
                answer = call(
                    self._clients.rds(region).describe_db_instances,
                    DBInstanceIdentifier=resource_id,
                )
            except ResourceNotFound:
                return None
            dbs = [
                db
                for db in answer.get("DBInstances", ())
                if db.get("DBInstanceIdentifier") == resource_id
            ]
            return _rds_state(region, dbs[0]) if dbs else None
        raise ValueError(f"AWS has no {resource_type}")

    # -- metrics (get_metrics, get_metrics_many: BatchedMetrics)

    metric_batch = _METRIC_BATCH

    def _check_metric_query(self, resource_ids: Sequence[str], metric: str, period: int) -> None:
        if period % 60:
            raise ValueError("period must be a positive multiple of 60 seconds")
        for rid in resource_ids:
            _namespace(rid)

    def _metric_batch(
        self,
        region: str,
        resource_ids: Sequence[str],
        metric: str,
        *,
        start: int,
        end: int,
        period: int,
    ) -> Iterator[tuple[str, MetricPoint]]:
        ids = list(resource_ids)
        stats = ("Sum",) if metric in _BYTE_COUNTS else ("Average", "Maximum")
        queries = []
        for n, rid in enumerate(ids):
            namespace, dimension = _namespace(rid)
            for stat in stats:
                queries.append(
                    {
                        "Id": f"{stat[0].lower()}{n}",
                        "ReturnData": True,
                        "MetricStat": {
                            "Metric": {
                                "Namespace": namespace,
                                "MetricName": metric,
                                "Dimensions": [{"Name": dimension, "Value": rid}],
                            },
                            "Period": period,
                            "Stat": stat,
                        },
                    }
                )
        series: dict[str, dict[int, float]] = {}
        cw = self._clients.cloudwatch(region)
        token = ""
        while True:
            kwargs: dict[str, Any] = {
                "MetricDataQueries": queries,
                "StartTime": datetime.fromtimestamp(start, UTC),
                "EndTime": datetime.fromtimestamp(end, UTC),
                "ScanBy": "TimestampAscending",
            }
            if token:
                kwargs["NextToken"] = token
            self._count("cloudwatch:GetMetricData")
            page = call(cw.get_metric_data, **kwargs)
            for result in page.get("MetricDataResults", ()):
                values = series.setdefault(str(result["Id"]), {})
                for when, value in zip(
                    result.get("Timestamps", ()), result.get("Values", ()), strict=False
                ):
                    if isinstance(value, int | float) and math.isfinite(value):
                        values[int(when.timestamp())] = float(value)
            token = page.get("NextToken", "")
            if not token:
                break
        for n, rid in enumerate(ids):
            if metric in _BYTE_COUNTS:
                averages = {t: v / period for t, v in series.get(f"s{n}", {}).items()}
                maxima = averages
            else:
                averages = series.get(f"a{n}", {})
                maxima = series.get(f"m{n}", {})
            for stamp in sorted(averages):
                average = averages[stamp]
                point = MetricPoint(stamp, average=average, maximum=maxima.get(stamp, average))
                yield rid, point
