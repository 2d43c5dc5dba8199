"""The Alibaba Cloud adapter: ``CloudReader`` and ``CloudWriter`` over the official SDKs.

``AlibabaReader`` lists ECS and RDS instances page by page (``NextToken``), reads one
resource's live state and reads CloudMonitor metrics; ``AlibabaWriter`` performs exactly
the allowlisted writes — ECS ``StopInstance`` (with ``StoppedMode``, never forced), ECS
``DeleteInstances`` (with ``ClientToken``, never forced) and RDS ``StopDBInstance`` — and
nothing else. Every vendor error is mapped onto the tree in :mod:`airlock.cloud.ports`.

This module must never retry a write: the SDK's retry machinery is switched off
explicitly, because a blind retry of a call whose first attempt may have landed is a
double write. Unknown outcomes are raised as :class:`UnknownOutcome` for the caller to
probe.

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
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from alibabacloud_cms20190101 import models as cms_models
from alibabacloud_cms20190101.client import Client as CmsClient
from alibabacloud_ecs20140526 import models as ecs_models
from alibabacloud_ecs20140526.client import Client as EcsClient
from alibabacloud_rds20140815 import models as rds_models
from alibabacloud_rds20140815.client import Client as RdsClient
from alibabacloud_tea_openapi.exceptions import AlibabaCloudException
from alibabacloud_tea_openapi.models import Config
from alibabacloud_tea_openapi.utils_models import GlobalParameters
from darabonba.policy.retry import RetryOptions
from darabonba.runtime import RuntimeOptions

from airlock.settings import CloudSettings

from .ports import (
    CloudError,
    DefiniteRefusal,
    IncorrectState,
    LiveState,
    MetricPoint,
    PermissionDenied,
    ResourceNotFound,
    ResourceType,
    UnknownOutcome,
    WriteResult,
)

__all__ = [
    "ECS_METRICS",
    "RDS_METRICS",
    "AlibabaConfig",
    "AlibabaReader",
    "AlibabaWriter",
    "map_vendor_error",
]

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
_TAG_BATCH: Final = 50  # RDS ListTagResources takes at most 50 ResourceId.N
# Instances per DescribeMetricList call. The dimensions travel in the query string on
# every page, so a longer list costs more per call than it saves in calls.
_DIMENSIONS_BATCH: Final = 50
# The kernel's formats (airlock.protocol); always used with fullmatch ("$" admits "\n").
_ECS_ID = re.compile(r"i-[0-9a-z]{4,64}")
_RDS_ID = re.compile(r"(rm|pgm|pc)-[0-9a-z]{4,64}")


@dataclass(frozen=True, slots=True)
class AlibabaConfig:
    """How to reach the API and as whom.

    ``endpoint`` overrides every product's endpoint (devcloud serves ECS, RDS and
    CloudMonitor on one port); when it is ``None`` the SDKs pick the regional public
    endpoints. Timeouts are in milliseconds and always set explicitly (the SDK defaults
    are 5 s / 10 s).
    """

    access_key_id: str
    access_key_secret: str
    endpoint: str | None = None
    protocol: str = "https"
    connect_timeout_ms: int = 5_000
    read_timeout_ms: int = 10_000

    def __post_init__(self) -> None:
        if not self.access_key_id or not self.access_key_secret:
            raise ValueError("an access key id and secret are required")
        if self.protocol not in ("http", "https"):
            raise ValueError("protocol must be http or https")
        if self.connect_timeout_ms <= 0 or self.read_timeout_ms <= 0:
            raise ValueError("timeouts must be positive")

    @classmethod
    def from_settings(cls, settings: CloudSettings) -> AlibabaConfig:
        """The config a service's ``CloudSettings`` describe (devcloud in dev when unset)."""
        key_id, secret = settings.cloud_credentials()
        endpoint, protocol = settings.cloud_endpoint_or_default()
        return cls(
            access_key_id=key_id,
            access_key_secret=secret,
            endpoint=endpoint,
            protocol=protocol,
            connect_timeout_ms=settings.cloud_connect_timeout_ms,
            read_timeout_ms=settings.cloud_read_timeout_ms,
        )

    def __repr__(self) -> str:  # never print the secret
        return (
            f"AlibabaConfig(access_key_id={self.access_key_id!r}, endpoint={self.endpoint!r}, "
            f"protocol={self.protocol!r})"
        )


# --------------------------------------------------------------------------- errors

# Codes that mean "the request was refused and had no effect". Anything not listed here
# and not a 4xx validation error is treated as an unknown outcome: misreading a landed
# write as refused corrupts the record, misreading a refusal as unknown costs one probe.
_NOT_FOUND_CODES: Final = frozenset(
    {
        "InvalidInstanceId.NotFound",
        "InvalidDBInstanceId.NotFound",
        "InvalidInstance.NotFound",
        "InvalidInstanceIds.NotFound",
    }
)
_PERMISSION_CODES: Final = frozenset(
    {
        "Forbidden.RAM",
        "Forbidden",
        "NoPermission",
        "Forbidden.NoPermission",
        "SignatureDoesNotMatch",
        "IncompleteSignature",
        "InvalidAccessKeyId.NotFound",
        "InvalidAccessKeyId.Inactive",
        "InvalidAccessKeyId",
    }
)
_STATE_CODES: Final = frozenset(
    {
        "IncorrectInstanceStatus",
        "IncorrectDBInstanceState",
        "IncorrectDBInstanceStatus",
        "IncorrectInstanceStatus.Initializing",
        "InstanceLockedForSecurity",
        "OperationDenied.InstanceLocked",
    }
)
# 4xx codes the API returns before doing anything (parameter validation, replay guards).
_REFUSAL_PREFIXES: Final = (
    "InvalidParameter",
    "MissingParameter",
    "MissingRegionId",
    "InvalidRegionId",
    "IdempotentParameterMismatch",
    "SignatureNonceUsed",
    "InvalidTimeStamp",
    "InvalidAction",
    "InvalidInstanceType",
    "InvalidStoppedMode",
)


def map_vendor_error(exc: BaseException) -> CloudError:
    """Translate an SDK exception into the port's error tree (the one place that does)."""
    if isinstance(exc, AlibabaCloudException):
        code = str(exc.code or "")
        request_id = str(exc.request_id or "") if exc.request_id not in (None, "None") else ""
        status = int(exc.status_code or 0)
        message = f"{code}: {exc.message}"
        if code.startswith("Throttling") or code in ("ServiceUnavailable", "InternalError"):
            return UnknownOutcome(message, code=code, request_id=request_id)
        if status >= 500:
            return UnknownOutcome(message, code=code, request_id=request_id)
        if code in _NOT_FOUND_CODES:
            return ResourceNotFound(message, code=code, request_id=request_id)
        if code in _PERMISSION_CODES or code.startswith("Forbidden"):
            return PermissionDenied(message, code=code, request_id=request_id)
        if code in _STATE_CODES or code.startswith("IncorrectInstanceStatus"):
            return IncorrectState(message, code=code, request_id=request_id)
        if 400 <= status < 500 and code.startswith(_REFUSAL_PREFIXES):
            return DefiniteRefusal(message, code=code, request_id=request_id)
        return UnknownOutcome(message, code=code or f"HTTP{status}", request_id=request_id)
    # Transport failures reach us wrapped in darabonba's UnretryableException/RetryError:
    # a read timeout or a connection dropped after sending may have landed.
    return UnknownOutcome(f"transport: {exc}", code="Transport")


def _call(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except CloudError:
        raise
    except Exception as exc:  # the SDK raises bare Exception subclasses of many kinds
        raise map_vendor_error(exc) from exc


# --------------------------------------------------------------------------- helpers


def _norm_time(value: str | None) -> str:
    """ECS reports ``2026-11-01T06:00Z`` (no seconds), RDS ``2026-11-01T06:00:00Z``."""
    if not value:
        return ""
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
    return LiveState(
        resource_type="rds.instance",
        resource_id=str(inst.dbinstance_id),
        region=str(inst.region_id or region),
        status=str(inst.dbinstance_status or ""),
        tags=dict(tags),
        instance_type=str(inst.dbinstance_class or ""),
        created_at=_norm_time(inst.create_time),
        name=str(inst.dbinstance_description or ""),
    )


class _Clients:
    """One SDK client per (product, region), built lazily, with retries switched off."""

    def __init__(self, config: AlibabaConfig) -> None:
        self._config = config
        self._cache: dict[tuple[str, str], Any] = {}

    def sdk_config(self, region: str) -> Config:
        c = self._config
        return Config(
            access_key_id=c.access_key_id,
            access_key_secret=c.access_key_secret,
            region_id=region,
            endpoint=c.endpoint,
            protocol=c.protocol,
            connect_timeout=c.connect_timeout_ms,
            read_timeout=c.read_timeout_ms,
            # No automatic retries, ever: a retried write whose first attempt landed is a
            # double write. The caller decides, after probing.
            retry_options=RetryOptions({"retryable": False}),
            # Public endpoints are regional, and the region is all that scopes a write
            # without RegionId (StopInstance). One override endpoint (devcloud) serves every
            # region, so it is told which one this client stands for, and refuses a
            # resource of another region as a regional endpoint does.
            global_parameters=(
                GlobalParameters(headers={"x-acs-region-id": region}) if c.endpoint else None
            ),
        )

    def runtime(self) -> RuntimeOptions:
        c = self._config
        return RuntimeOptions(
            autoretry=False,
            max_attempts=0,
            ignore_ssl=False,
            connect_timeout=c.connect_timeout_ms,
            read_timeout=c.read_timeout_ms,
        )

    def get(self, product: str, region: str) -> Any:
        key = (product, region)
        client = self._cache.get(key)
        if client is None:
            cls = {"ecs": EcsClient, "rds": RdsClient, "cms": CmsClient}[product]
            client = cls(self.sdk_config(region))
            self._cache[key] = client
        return client


# --------------------------------------------------------------------------- reader


class AlibabaReader:
    """``CloudReader`` over the SDKs. Give it the read-only key (Describe*/List* only)."""

    def __init__(self, config: AlibabaConfig) -> None:
        self._clients = _Clients(config)
        #: Every API call made, by action — for benchmarks and scale tests.
        self.calls: dict[str, int] = {}

    def _count(self, action: str) -> None:
        self.calls[action] = self.calls.get(action, 0) + 1

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
        request = ecs_models.DescribeInstancesRequest(region_id=region, **kwargs)
        self._count("ecs:DescribeInstances")
        return _call(client.describe_instances_with_options, request, self._clients.runtime()).body

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
        request = rds_models.DescribeDBInstancesRequest(region_id=region, **kwargs)
        self._count("rds:DescribeDBInstances")
        return _call(
            client.describe_dbinstances_with_options, request, self._clients.runtime()
        ).body

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
                request = rds_models.ListTagResourcesRequest(
                    region_id=region, resource_type="INSTANCE", resource_id=batch, next_token=token
                )
                self._count("rds:ListTagResources")
                body = _call(
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
            if not _ECS_ID.fullmatch(resource_id):
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
            if not _RDS_ID.fullmatch(resource_id):
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

    # -- metrics

    def get_metrics(
        self, region: str, resource_id: str, metric: str, *, start: int, end: int, period: int
    ) -> Iterator[MetricPoint]:
        for _rid, point in self.get_metrics_many(
            region, [resource_id], metric, start=start, end=end, period=period
        ):
            yield point

    def get_metrics_many(
        self,
        region: str,
        resource_ids: Sequence[str],
        metric: str,
        *,
        start: int,
        end: int,
        period: int,
    ) -> Iterator[tuple[str, MetricPoint]]:
        """Datapoints of one metric for several resources of one kind in one query, paged.

        CloudMonitor accepts a list of dimensions per call, so a fleet scan costs one
        paged query per metric per batch rather than one per instance.
        """
        if not resource_ids:
            return
        if end <= start or period <= 0:
            raise ValueError("need start < end and a positive period")
        namespace = self._namespace(resource_ids, metric)
        for at in range(0, len(resource_ids), _DIMENSIONS_BATCH):
            batch = resource_ids[at : at + _DIMENSIONS_BATCH]
            yield from self._metric_pages(
                region, namespace, batch, metric=metric, start=start, end=end, period=period
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
            request = cms_models.DescribeMetricListRequest(
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
            body = _call(
                client.describe_metric_list_with_options, request, self._clients.runtime()
            ).body
            if body.success is False or (body.code not in (None, "200")):
                raise UnknownOutcome(
                    f"{body.code}: {body.message}", code=str(body.code), request_id=body.request_id
                )
            for raw in json.loads(body.datapoints or "[]"):
                ts = int(raw["timestamp"]) // 1000
                if start <= ts < end:
                    avg = float(raw.get("Average", raw.get("Value", 0.0)))
                    yield (
                        str(raw.get("instanceId", "")),
                        MetricPoint(
                            timestamp=ts, average=avg, maximum=float(raw.get("Maximum", avg))
                        ),
                    )
            token = body.next_token or None
            if token is None:
                return

    @staticmethod
    def _namespace(resource_ids: Sequence[str], metric: str) -> str:
        if all(_ECS_ID.fullmatch(r) for r in resource_ids):
            if metric not in ECS_METRICS:
                raise ValueError(f"unsupported ECS metric {metric!r}")
            return _ECS_NAMESPACE
        if all(_RDS_ID.fullmatch(r) for r in resource_ids):
            if metric not in RDS_METRICS:
                raise ValueError(f"unsupported RDS metric {metric!r}")
            return _RDS_NAMESPACE
        raise ValueError("resource ids must all be ECS (i-…) or all RDS (rm-…)")


# --------------------------------------------------------------------------- writer

_STOPPED_MODES: Final = frozenset({"StopCharging", "KeepCharging"})


class AlibabaWriter:
    """``CloudWriter`` over the SDKs: the allowlisted writes and nothing else.

    Give it the write key. Each method makes exactly one HTTP attempt.
    """

    def __init__(self, config: AlibabaConfig) -> None:
        self._clients = _Clients(config)

    def stop_ecs(self, region: str, instance_id: str, *, stopped_mode: str) -> WriteResult:
        if not _ECS_ID.fullmatch(instance_id):
            raise ValueError(f"not an ECS instance id: {instance_id!r}")
        if stopped_mode not in _STOPPED_MODES:
            raise ValueError(f"stopped_mode must be one of {sorted(_STOPPED_MODES)}")
        client = self._clients.get("ecs", region)
        request = ecs_models.StopInstanceRequest(
            instance_id=instance_id,
            stopped_mode=stopped_mode,
            force_stop=False,  # a forced stop can lose unflushed data; never ours to choose
            dry_run=False,
        )
        resp = _call(client.stop_instance_with_options, request, self._clients.runtime())
        return WriteResult(request_id=str(resp.body.request_id or ""))

    def delete_ecs(self, region: str, instance_id: str, *, client_token: str) -> WriteResult:
        if not _ECS_ID.fullmatch(instance_id):
            raise ValueError(f"not an ECS instance id: {instance_id!r}")
        # Alibaba: ClientToken is ASCII, at most 64 characters.
        if not client_token or len(client_token) > 64 or not client_token.isascii():
            raise ValueError("client_token must be 1..64 ASCII characters")
        client = self._clients.get("ecs", region)
        request = ecs_models.DeleteInstancesRequest(
            region_id=region,
            instance_id=[instance_id],
            client_token=client_token,
            force=False,  # the API then refuses a running instance: delete only what is stopped
            dry_run=False,
        )
        resp = _call(client.delete_instances_with_options, request, self._clients.runtime())
        return WriteResult(request_id=str(resp.body.request_id or ""))

    def stop_rds(self, region: str, instance_id: str) -> WriteResult:
        if not _RDS_ID.fullmatch(instance_id):
            raise ValueError(f"not an RDS instance id: {instance_id!r}")
        client = self._clients.get("rds", region)
        request = rds_models.StopDBInstanceRequest(region_id=region, dbinstance_id=instance_id)
        resp = _call(client.stop_dbinstance_with_options, request, self._clients.runtime())
        return WriteResult(request_id=str(resp.body.request_id or ""))
