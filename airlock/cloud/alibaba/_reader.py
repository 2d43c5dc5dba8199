"""``AlibabaReader``: the Alibaba Cloud ``CloudReader`` over the official SDKs.

It lists ECS and RDS instances page by page (``NextToken``), reads one resource's live
state and reads CloudMonitor metrics. It calls Describe*/List* actions only, and this
module must never import :mod:`airlock.cloud.alibaba.writer`: the agent loads it, and the
agent must not be able to reach a writer (docs/architecture.md#import-boundaries).

A datapoint without a usable number is dropped, never read as zero: a missing CPU figure
read as 0 % would make a busy machine look idle. Fewer samples then make the idle policy's
verdict ``insufficient``.

Metrics (CloudMonitor ``DescribeMetricList``; the namespace follows the resource id:
``i-…`` → ``acs_ecs_dashboard``, ``rm-…`` (RDS) → ``acs_rds_dashboard``). Metric names are the
vendor's, listed in :data:`ECS_METRICS` / :data:`RDS_METRICS` with their units:

=========================  ==============================================  ==========
metric                     meaning                                         unit
=========================  ==============================================  ==========
CPUUtilization             ECS CPU, hypervisor view                        percent
memory_usedutilization     ECS memory in use (needs the CloudMonitor       percent
                           agent; absent when the agent is not installed)
IntranetInRate             ECS private network inbound                     bit/s
IntranetOutRate            ECS private network outbound                    bit/s
InternetInRate             ECS public network inbound                      bit/s
InternetOutRate            ECS public network outbound                     bit/s
CpuUsage                   RDS CPU                                         percent
MemoryUsage                RDS memory                                      percent
MySQL_NetworkInNew         RDS inbound traffic                             bit/s
MySQL_NetworkOutNew        RDS outbound traffic                            bit/s
=========================  ==============================================  ==========

A rate averaged over a period of ``p`` seconds moved ``average * p / 8`` bytes.

Prices (ECS ``DescribePrice``, ``ResourceType=instance``, ``PriceUnit=Hour``): the
pay-as-you-go price of an instance type, read from the ``instanceType`` entry of
``PriceInfo.Price.DetailInfos`` (compute only: the system disk is priced apart) as
``TradePrice`` (after discounts) in ``Currency``. The decimal the API printed becomes
integer millionths here, the one place a price is a float.

RDS prices (RDS ``DescribePrice``, ``PayType=Postpaid``): the API quotes a class with its
storage and does not split them, and a stopped RDS instance keeps paying for its storage.
The class is quoted twice, at 100 and at 200 GB of the instance's storage type, engine,
version and zone (from ``DescribeDBInstances``); storage is priced per GB, so the compute
part is what the quote would be at 0 GB: ``2 × quote(100) − quote(200)``. A subscription
instance is not priced (a stop saves nothing before its term ends).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterator, Mapping, Sequence, Set
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Final

from airlock.cloud._metrics import BatchedMetrics
from airlock.cloud.ports import (
    LiveState,
    MetricPoint,
    Price,
    RdsSpec,
    ResourceNotFound,
    ResourceType,
    UnknownOutcome,
)

from ._common import ECS_ID, RDS_ID, AlibabaConfig, Clients, call, sdk

__all__ = ["ECS_METRICS", "RDS_METRICS", "AlibabaReader"]

_log = logging.getLogger("airlock.cloud")

ECS_METRICS: Final = (
    "CPUUtilization",
    "memory_usedutilization",
    "IntranetInRate",
    "IntranetOutRate",
    "InternetInRate",
    "InternetOutRate",
)
RDS_METRICS: Final = ("CpuUsage", "MemoryUsage", "MySQL_NetworkInNew", "MySQL_NetworkOutNew")

_ECS_NAMESPACE: Final = "acs_ecs_dashboard"
_RDS_NAMESPACE: Final = "acs_rds_dashboard"
_MAX_PAGE: Final = 100  # ECS and RDS both cap MaxResults at 100
_METRIC_PAGE: Final = 1440  # CloudMonitor's cap on Length
#: The storage sizes (GB) an RDS class is quoted at; 100 to 200 GB is valid for every
#: engine's cloud and local disks, and 2 × the first − the second leaves the compute part.
_RDS_QUOTE_GB: Final = (100, 200)
_TAG_BATCH: Final = 50  # RDS ListTagResources takes at most 50 ResourceId.N
# Instances per DescribeMetricList call. The dimensions travel in the query string on
# every page, so a longer list costs more per call than it saves in calls.
_DIMENSIONS_BATCH: Final = 50

# --------------------------------------------------------------------------- helpers


# The two forms in _norm_time's docstring with zero-padded fields and a four-digit year,
# read without strptime (which costs ten times as much: the executor's live re-read reads
# two such times per instance).
_PLAIN_TIME: Final = re.compile(
    r"([1-9][0-9]{3})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2})(?::([0-9]{2}))?Z"
)


def _norm_time(value: str | None) -> str:
    """ECS reports ``2026-11-01T06:00Z`` (no seconds), RDS ``2026-11-01T06:00:00Z``.

    Returns the time as ``YYYY-MM-DDTHH:MM:SSZ``, or "" for no time or one in neither
    form.
    """
    if not value:
        return ""
    plain = _PLAIN_TIME.fullmatch(value)
    if plain is not None:
        year, month, day, hour, minute, second = plain.groups("00")
        try:  # the calendar date, hour, minute and second, as strptime checks them
            datetime(int(year), int(month), int(day), int(hour), int(minute), int(second))
        except ValueError:
            pass  # strptime below decides
        else:
            return f"{year}-{month}-{day}T{hour}:{minute}:{second}Z"
    for fmt in ("%Y-%m-%dT%H:%MZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            parsed = datetime.strptime(value, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
        return parsed.strftime("%Y-%m-%dT%H:%M:%SZ")
    return ""


def _ecs_state(region: str, inst: Any) -> LiveState:
    tags: dict[str, str] = {}
    if inst.tags is not None and inst.tags.tag:
        for tag in inst.tags.tag:
            tags[str(tag.tag_key)] = str(tag.tag_value or "")
    return LiveState(
        resource_type="ecs.instance",
        resource_id=str(inst.instance_id),
        region=str(inst.region_id or region),
        status=str(inst.status or ""),
        tags=tags,
        instance_type=str(inst.instance_type or ""),
        created_at=_norm_time(inst.creation_time),
        name=str(inst.instance_name or ""),
        started_at=_norm_time(inst.start_time),
    )


def _rds_state(region: str, inst: Any, tags: Mapping[str, str]) -> LiveState:
    spec = RdsSpec(
        engine=str(inst.engine or ""),
        engine_version=str(inst.engine_version or ""),
        storage_type=str(inst.dbinstance_storage_type or ""),
        zone_id=str(inst.zone_id or ""),
        pay_type=str(inst.pay_type or ""),
    )
    return LiveState(
        resource_type="rds.instance",
        resource_id=str(inst.dbinstance_id),
        region=str(inst.region_id or region),
        status=str(inst.dbinstance_status or ""),
        tags=dict(tags),
        instance_type=str(inst.dbinstance_class or ""),
        created_at=_norm_time(inst.create_time),
        name=str(inst.dbinstance_description or ""),
        rds=spec,
    )


class _Unusable(Exception):
    """A datapoint without a usable value in ``field``: it is dropped, never defaulted."""

    def __init__(self, field: str) -> None:
        super().__init__(field)
        self.field = field


def _datapoints(text: object, *, request_id: str) -> list[object]:
    """The page's ``Datapoints`` JSON array. A page that is not one is unreadable as a whole:
    raised as a CloudError, so the caller's read retry and failure handling apply."""
    if text is None or text == "":
        return []
    try:
        parsed = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        parsed = None
    if not isinstance(parsed, list):
        raise UnknownOutcome(
            "CloudMonitor Datapoints is not a JSON array",
            code="MalformedResponse",
            request_id=request_id,
        )
    return parsed


def _number(value: object) -> float | None:
    """A finite JSON number, else None. ``bool`` is an ``int`` to Python but no reading."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer too large for a float
        return None
    return number if math.isfinite(number) else None


def _datapoint(raw: object, wanted: Set[str]) -> tuple[str, MetricPoint]:
    """One CloudMonitor datapoint, or :class:`_Unusable` naming the first bad field.

    Nothing is defaulted: a missing ``Average`` read as 0 would make a busy machine look
    idle (the idle policy counts samples, so a dropped point can only make its verdict
    ``insufficient``). ``Value`` stands in for ``Average`` only when ``Average`` is absent
    (some metrics report ``Value``); an absent ``Maximum`` is the average (nothing decides
    on it today).
    """
    if not isinstance(raw, dict):
        raise _Unusable("datapoint")
    rid = raw.get("instanceId")
    if not isinstance(rid, str) or rid not in wanted:  # a point for an id we did not ask for
        raise _Unusable("instanceId")
    ms = raw.get("timestamp")
    if isinstance(ms, bool) or not isinstance(ms, int):
        raise _Unusable("timestamp")
    average = _number(raw["Average"] if "Average" in raw else raw.get("Value"))
    if average is None:
        raise _Unusable("Average")
    maximum = _number(raw["Maximum"]) if "Maximum" in raw else average
    if maximum is None:
        raise _Unusable("Maximum")
    return rid, MetricPoint(timestamp=ms // 1000, average=average, maximum=maximum)


def _micros(value: object, *, request_id: str) -> int:
    """A price the API printed (``0.113``) as integer millionths, half up; else unreadable."""
    number = _number(value)
    if number is None or number < 0:
        raise UnknownOutcome(
            "DescribePrice returned no usable TradePrice",
            code="MalformedResponse",
            request_id=request_id,
        )
    return int((Decimal(repr(number)) * 1_000_000).to_integral_value(ROUND_HALF_UP))


# --------------------------------------------------------------------------- reader


class AlibabaReader(BatchedMetrics):
    """``CloudReader`` over the SDKs. Give it the read-only key (Describe*/List* only)."""

    def __init__(self, config: AlibabaConfig) -> None:
        self._clients = Clients(config)
        #: Every API call made, by action — for benchmarks and scale tests.
        self.calls: dict[str, int] = {}
        #: Datapoints dropped as unusable, by ``metric:field`` (see :func:`_datapoint`).
        self.dropped: dict[str, int] = {}

    def _count(self, action: str) -> None:
        self.calls[action] = self.calls.get(action, 0) + 1

    def _drop(self, metric: str, by_field: Mapping[str, int]) -> None:
        """Count and log datapoints dropped for want of a usable field (one line a page)."""
        for name, n in by_field.items():
            key = f"{metric}:{name}"
            self.dropped[key] = self.dropped.get(key, 0) + n
        _log.warning(
            "CloudMonitor %s: dropped %d datapoint(s) with no usable %s",
            metric,
            sum(by_field.values()),
            ", ".join(sorted(by_field)),
        )

    # -- listing

    def list_instances(
        self, region: str, resource_type: ResourceType, *, page_size: int = 100
    ) -> Iterator[LiveState]:
        if not 1 <= page_size <= _MAX_PAGE:
            raise ValueError(f"page_size must be within 1..{_MAX_PAGE}")
        if resource_type == "ecs.instance":
            yield from self._list_ecs(region, page_size=page_size)
        elif resource_type == "rds.instance":
            yield from self._list_rds(region, page_size=page_size)
        else:
            raise ValueError(f"unknown resource type {resource_type!r}")

    def _describe_ecs(self, region: str, **kwargs: Any) -> Any:
        client = self._clients.get("ecs", region)
        request = sdk("ecs").models.DescribeInstancesRequest(region_id=region, **kwargs)
        self._count("ecs:DescribeInstances")
        return call(client.describe_instances_with_options, request, self._clients.runtime()).body

    def _list_ecs(self, region: str, *, page_size: int) -> Iterator[LiveState]:
        token: str | None = None
        while True:
            body = self._describe_ecs(region, max_results=page_size, next_token=token)
            instances = body.instances.instance if body.instances is not None else None
            for inst in instances or ():
                yield _ecs_state(region, inst)
            token = body.next_token or None
            if token is None:
                return

    def _describe_rds(self, region: str, **kwargs: Any) -> Any:
        client = self._clients.get("rds", region)
        request = sdk("rds").models.DescribeDBInstancesRequest(region_id=region, **kwargs)
        self._count("rds:DescribeDBInstances")
        return call(client.describe_dbinstances_with_options, request, self._clients.runtime()).body

    def _list_rds(self, region: str, *, page_size: int) -> Iterator[LiveState]:
        token: str | None = None
        while True:
            body = self._describe_rds(region, max_results=page_size, next_token=token)
            items = body.items.dbinstance if body.items is not None else None
            page = list(items or ())
            tags = self._rds_tags(region, [str(i.dbinstance_id) for i in page])
            for inst in page:
                yield _rds_state(region, inst, tags.get(str(inst.dbinstance_id), {}))
            token = body.next_token or None
            if token is None:
                return

    def _rds_tags(self, region: str, ids: Sequence[str]) -> dict[str, dict[str, str]]:
        """RDS ``DescribeDBInstances`` carries no tags; ``ListTagResources`` does."""
        out: dict[str, dict[str, str]] = {i: {} for i in ids}
        client = self._clients.get("rds", region)
        for start in range(0, len(ids), _TAG_BATCH):
            batch = list(ids[start : start + _TAG_BATCH])
            token: str | None = None
            while True:
                request = sdk("rds").models.ListTagResourcesRequest(
                    region_id=region, resource_type="INSTANCE", resource_id=batch, next_token=token
                )
                self._count("rds:ListTagResources")
                body = call(
                    client.list_tag_resources_with_options, request, self._clients.runtime()
                ).body
                resources = body.tag_resources.tag_resource if body.tag_resources else None
                for res in resources or ():
                    out.setdefault(str(res.resource_id), {})[str(res.tag_key)] = str(
                        res.tag_value or ""
                    )
                token = body.next_token or None
                if token is None:
                    break
        return out

    # -- one resource

    def get_state(
        self, region: str, resource_type: ResourceType, resource_id: str
    ) -> LiveState | None:
        if resource_type == "ecs.instance":
            if not ECS_ID.fullmatch(resource_id):
                raise ValueError(f"not an ECS instance id: {resource_id!r}")
            body = self._describe_ecs(
                region, instance_ids=json.dumps([resource_id]), max_results=_MAX_PAGE
            )
            instances = body.instances.instance if body.instances is not None else None
            for inst in instances or ():
                if inst.instance_id == resource_id:
                    return _ecs_state(region, inst)
            return None
        if resource_type == "rds.instance":
            if not RDS_ID.fullmatch(resource_id):
                raise ValueError(f"not an RDS instance id: {resource_id!r}")
            try:
                body = self._describe_rds(region, dbinstance_id=resource_id)
            except ResourceNotFound:
                return None
            items = body.items.dbinstance if body.items is not None else None
            for inst in items or ():
                if inst.dbinstance_id == resource_id:
                    tags = self._rds_tags(region, [resource_id]).get(resource_id, {})
                    return _rds_state(region, inst, tags)
            return None
        raise ValueError(f"unknown resource type {resource_type!r}")

    # -- prices

    def get_price(
        self,
        region: str,
        resource_type: ResourceType,
        instance_type: str,
        *,
        rds: RdsSpec | None = None,
    ) -> Price | None:
        """The pay-as-you-go compute price per hour of an ECS instance type or RDS class.

        Args:
            rds: the RDS instance's engine, storage type, zone and billing; an RDS class
                without it, or billed by subscription, is not priced (None).

        Raises:
            CloudError: the provider refused or did not answer, or its answer yields no
                price (no usable ``TradePrice``, quotes that leave no compute part).
        """
        if resource_type == "rds.instance":
            return self._rds_price(region, instance_type, rds)
        client = self._clients.get("ecs", region)
        request = sdk("ecs").models.DescribePriceRequest(
            region_id=region,
            resource_type="instance",
            instance_type=instance_type,
            price_unit="Hour",
            period=1,
        )
        self._count("ecs:DescribePrice")
        body = call(client.describe_price_with_options, request, self._clients.runtime()).body
        request_id = str(body.request_id or "")
        price = body.price_info.price if body.price_info is not None else None
        details = (
            price.detail_infos.detail_info
            if price is not None and price.detail_infos is not None
            else None
        )
        for detail in details or ():
            if detail.resource == "instanceType":
                currency = str(price.currency or "") if price is not None else ""
                if len(currency) != 3 or not currency.isupper():
                    break
                return Price(
                    currency=currency,
                    hourly_micros=_micros(detail.trade_price, request_id=request_id),
                    source="ecs:DescribePrice",
                )
        raise UnknownOutcome(
            "DescribePrice returned no instanceType price",
            code="MalformedResponse",
            request_id=request_id,
        )

    def _rds_price(self, region: str, rds_class: str, spec: RdsSpec | None) -> Price | None:
        if spec is None or spec.pay_type != "Postpaid" or not spec.engine:
            return None
        (currency, low), (other, high) = (
            self._rds_quote(region, rds_class, spec, gb) for gb in _RDS_QUOTE_GB
        )
        compute = 2 * low - high
        if currency != other or high < low or compute <= 0:
            raise UnknownOutcome(
                "RDS DescribePrice quotes leave no compute price", code="MalformedResponse"
            )
        return Price(currency=currency, hourly_micros=compute, source="rds:DescribePrice")

    def _rds_quote(
        self, region: str, rds_class: str, spec: RdsSpec, storage_gb: int
    ) -> tuple[str, int]:
        """(currency, hourly millionths) of the class with ``storage_gb`` of storage."""
        client = self._clients.get("rds", region)
        request = sdk("rds").models.DescribePriceRequest(
            region_id=region,
            zone_id=spec.zone_id or None,
            engine=spec.engine,
            engine_version=spec.engine_version,
            dbinstance_class=rds_class,
            dbinstance_storage=storage_gb,
            dbinstance_storage_type=spec.storage_type or None,
            pay_type="Postpaid",
            instance_used_type=0,
            order_type="BUY",
            quantity=1,
        )
        self._count("rds:DescribePrice")
        body = call(client.describe_price_with_options, request, self._clients.runtime()).body
        request_id = str(body.request_id or "")
        info = body.price_info
        currency = str(info.currency or "") if info is not None else ""
        if info is None or len(currency) != 3 or not currency.isupper():
            raise UnknownOutcome(
                "DescribePrice returned no price", code="MalformedResponse", request_id=request_id
            )
        return currency, _micros(info.trade_price, request_id=request_id)

    # -- metrics (get_metrics, get_metrics_many: BatchedMetrics)

    # CloudMonitor accepts a list of dimensions per call, so a fleet scan costs one paged
    # query per metric per batch rather than one per instance.
    metric_batch = _DIMENSIONS_BATCH

    def _check_metric_query(self, resource_ids: Sequence[str], metric: str, period: int) -> None:
        self._namespace(resource_ids, metric)

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
        namespace = self._namespace(resource_ids, metric)
        return self._metric_pages(
            region, namespace, resource_ids, metric=metric, start=start, end=end, period=period
        )

    def _metric_pages(
        self,
        region: str,
        namespace: str,
        resource_ids: Sequence[str],
        *,
        metric: str,
        start: int,
        end: int,
        period: int,
    ) -> Iterator[tuple[str, MetricPoint]]:
        client = self._clients.get("cms", region)
        dimensions = json.dumps([{"instanceId": rid} for rid in resource_ids])
        token: str | None = None
        while True:
            request = sdk("cms").models.DescribeMetricListRequest(
                namespace=namespace,
                metric_name=metric,
                dimensions=dimensions,
                period=str(period),
                # CloudMonitor takes Unix milliseconds; the window is [start, end).
                start_time=str(start * 1000),
                end_time=str(end * 1000),
                length=str(_METRIC_PAGE),
                next_token=token,
            )
            self._count("cms:DescribeMetricList")
            body = call(
                client.describe_metric_list_with_options, request, self._clients.runtime()
            ).body
            if body.success is False or (body.code not in (None, "200")):
                raise UnknownOutcome(
                    f"{body.code}: {body.message}", code=str(body.code), request_id=body.request_id
                )
            wanted = frozenset(resource_ids)
            dropped: dict[str, int] = {}
            for raw in _datapoints(body.datapoints, request_id=str(body.request_id or "")):
                try:
                    rid, point = _datapoint(raw, wanted)
                except _Unusable as exc:
                    dropped[exc.field] = dropped.get(exc.field, 0) + 1
                    continue
                yield rid, point  # BatchedMetrics keeps those within the window
            if dropped:
                self._drop(metric, dropped)
            token = body.next_token or None
            if token is None:
                return

    @staticmethod
    def _namespace(resource_ids: Sequence[str], metric: str) -> str:
        if all(ECS_ID.fullmatch(r) for r in resource_ids):
            if metric not in ECS_METRICS:
                raise ValueError(f"unsupported ECS metric {metric!r}")
            return _ECS_NAMESPACE
        if all(RDS_ID.fullmatch(r) for r in resource_ids):
            if metric not in RDS_METRICS:
                raise ValueError(f"unsupported RDS metric {metric!r}")
            return _RDS_NAMESPACE
        raise ValueError("resource ids must all be ECS (i-…) or all RDS (rm-…)")
