"""The two ports every cloud provider implements (docs/architecture.md#cloud-adapters).

``CloudReader`` is all the agent ever gets; ``CloudWriter`` exists only in the executor.
Adapters map vendor errors onto the tree below so callers can tell a definite refusal
(nothing happened) from an unknown outcome (something may have happened: probe first,
never blind-retry).

Error hierarchy::

    CloudError
    ├── DefiniteRefusal        the provider refused; the call had no effect
    │   ├── ResourceNotFound
    │   ├── PermissionDenied
    │   └── IncorrectState     e.g. IncorrectInstanceStatus
    └── UnknownOutcome         timeout, 5xx, throttling, connection lost: probe live state
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

__all__ = [
    "CloudError",
    "CloudReader",
    "CloudWriter",
    "DefiniteRefusal",
    "Ec2Writer",
    "EcsWriter",
    "IncorrectState",
    "LiveState",
    "MetricPoint",
    "MetricsBatchReader",
    "PermissionDenied",
    "Price",
    "PriceReader",
    "RdsSpec",
    "ResourceNotFound",
    "ResourceType",
    "UnknownOutcome",
    "WriteResult",
]

ResourceType = Literal["ecs.instance", "ec2.instance", "rds.instance"]


class CloudError(Exception):
    """Root of every error a cloud adapter raises."""

    def __init__(self, message: str, *, code: str = "", request_id: str = "") -> None:
        super().__init__(message)
        self.code = code  # the vendor's error code, e.g. "IncorrectInstanceStatus"
        self.request_id = request_id


class DefiniteRefusal(CloudError):
    """The provider refused the request; it had no effect."""


class ResourceNotFound(DefiniteRefusal):
    pass


class PermissionDenied(DefiniteRefusal):
    pass


class IncorrectState(DefiniteRefusal):
    pass


class UnknownOutcome(CloudError):
    """The request may or may not have taken effect (timeout, 5xx, throttling)."""


@dataclass(frozen=True, slots=True)
class LiveState:
    """One resource as the provider reports it right now."""

    resource_type: ResourceType
    resource_id: str
    region: str
    status: str  # provider vocabulary: Running, Stopping, Stopped, ...
    tags: Mapping[str, str] = field(default_factory=dict)
    instance_type: str = ""
    created_at: str = ""  # RFC 3339 UTC, "YYYY-MM-DDTHH:MM:SSZ"
    name: str = ""
    #: When the instance was last started (ECS ``StartTime``), RFC 3339 UTC; "" when the
    #: provider does not say. The agent deletes only what provably stayed stopped since
    #: Airlock stopped it, so "" there means "no delete".
    started_at: str = ""
    #: What an RDS price depends on besides the class; None for ECS, or when not reported.
    rds: RdsSpec | None = None


@dataclass(frozen=True, slots=True)
class RdsSpec:
    """An RDS instance's engine, storage type, zone and billing, as its describe reports them."""

    engine: str  # MySQL, PostgreSQL, SQLServer, MariaDB
    engine_version: str  # e.g. "8.0"
    storage_type: str  # e.g. "cloud_essd"; "" when not reported
    zone_id: str  # e.g. "ap-southeast-1a"
    pay_type: str  # Postpaid (pay-as-you-go) or Prepaid (subscription)


@dataclass(frozen=True, slots=True)
class MetricPoint:
    timestamp: int  # Unix seconds, start of the period
    average: float
    maximum: float


@dataclass(frozen=True, slots=True)
class Price:
    """The pay-as-you-go compute price of an instance type, as the provider quoted it."""

    currency: str  # ISO 4217, e.g. "USD"
    #: Per hour, in millionths of the currency unit (an integer: it is signed into evidence).
    hourly_micros: int
    source: str  # the API that quoted it, e.g. "ecs:DescribePrice"


@dataclass(frozen=True, slots=True)
class WriteResult:
    request_id: str  # the provider's request id, recorded in the receipt


@runtime_checkable
class CloudReader(Protocol):
    def list_instances(
        self, region: str, resource_type: ResourceType, *, page_size: int = 100
    ) -> Iterator[LiveState]:
        """Every instance of the type in the region, fetched page by page (never one page)."""
        ...

    def get_state(
        self, region: str, resource_type: ResourceType, resource_id: str
    ) -> LiveState | None:
        """Live state of one resource, or None when it does not exist."""
        ...

    def get_metrics(
        self, region: str, resource_id: str, metric: str, *, start: int, end: int, period: int
    ) -> Iterator[MetricPoint]:
        """Datapoints of one metric over [start, end), paged."""
        ...


@runtime_checkable
class MetricsBatchReader(Protocol):
    """Optional extension of a reader: one metric for many resources per paged query.

    A fleet scan then costs one paged query per metric per batch of resources rather than
    one per resource (issue 5, "Scale"). ``AlibabaReader`` implements it.
    """

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
        """(resource id, datapoint) pairs over [start, end), paged; ids all of one kind."""
        ...


@runtime_checkable
class PriceReader(Protocol):
    """Optional extension of a reader: the price of an instance type (``AlibabaReader``)."""

    def get_price(
        self,
        region: str,
        resource_type: ResourceType,
        instance_type: str,
        *,
        rds: RdsSpec | None = None,
    ) -> Price | None:
        """Its pay-as-you-go compute price per hour; None when the reader prices no such
        resource (an RDS class without ``rds``, a subscription). Raises CloudError when
        the provider does not answer or its answer yields no price."""
        ...


@runtime_checkable
class CloudWriter(Protocol):
    """The writes every provider has; each provider's writer adds its compute writes
    (:class:`EcsWriter`, :class:`Ec2Writer`). Each method makes one attempt, never retries."""

    def stop_rds(self, region: str, instance_id: str) -> WriteResult: ...


@runtime_checkable
class EcsWriter(CloudWriter, Protocol):
    """Alibaba Cloud: ECS ``StopInstance`` and ``DeleteInstances`` (``AlibabaWriter``)."""

    def stop_ecs(self, region: str, instance_id: str, *, stopped_mode: str) -> WriteResult: ...

    def delete_ecs(self, region: str, instance_id: str, *, client_token: str) -> WriteResult: ...


@runtime_checkable
class Ec2Writer(CloudWriter, Protocol):
    """AWS: EC2 ``StopInstances`` (hibernate off) and ``TerminateInstances`` (``AwsWriter``)."""

    def stop_ec2(self, region: str, instance_id: str) -> WriteResult: ...

    def terminate_ec2(self, region: str, instance_id: str) -> WriteResult: ...
