"""What the agent knows of each provider: its resource types, the metrics it reads for
them and their units, the status words its reader reports, and what may be deleted.

The idle policy (``idle/v1``, :mod:`.idle`) is the same for every provider; only these
facts differ. A provider the agent scans is one :class:`AgentProvider`; adding a provider
adds one here (docs/providers.md). Pure data: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Final, Literal

from airlock.cloud.ports import ResourceType

__all__ = ["ALIBABA", "AWS", "PROVIDERS", "AgentProvider", "Kind", "Metrics", "NetUnit"]

#: How a reader reports a network metric's ``average``, always a rate averaged over the
#: point's period: bits per second (CloudMonitor) or bytes per second (CloudWatch: RDS's
#: throughputs, and EC2's ``NetworkIn``/``NetworkOut`` as their ``Sum`` / period).
NetUnit = Literal["bit/s", "B/s"]


@dataclass(frozen=True, slots=True)
class Metrics:
    """The metric names of one resource type, as its provider's reader takes them."""

    cpu: str  # percent
    mem: str | None  # percent; None where the provider reports none without an agent
    net: tuple[str, ...]
    net_unit: NetUnit

    def net_bytes(self, value: float, period: int) -> int:
        """Bytes moved in ``period`` seconds, from one point's value; rounded half up on
        the decimal the reader printed. Raises ValueError for a value no usage can be."""
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"not a usable network value: {value!r}")
        exact = Decimal(repr(value))
        exact = exact * period / 8 if self.net_unit == "bit/s" else exact * period
        return int(exact.to_integral_value(ROUND_HALF_UP))


@dataclass(frozen=True, slots=True)
class Kind:
    """One resource type at one provider."""

    resource_type: ResourceType
    metrics: Metrics
    #: The status of a running resource, as the reader reports it; a stop's precondition.
    running: str
    #: Statuses on the way up: a running resource's plan applies (withdraw its deletes).
    starting: frozenset[str]
    #: The status of a stopped resource; a delete's precondition.
    stopped: str
    #: Whether a stopped resource may be proposed for deletion (on the kernel's allowlist).
    deletable: bool


@dataclass(frozen=True, slots=True)
class AgentProvider:
    name: Literal["alibaba", "aws"]
    kinds: tuple[Kind, ...]

    @property
    def resource_types(self) -> tuple[ResourceType, ...]:
        return tuple(k.resource_type for k in self.kinds)

    def kind(self, resource_type: str) -> Kind:
        """The kind of ``resource_type``; KeyError for a type this provider does not have."""
        for kind in self.kinds:
            if kind.resource_type == resource_type:
                return kind
        raise KeyError(f"{self.name} has no resource type {resource_type!r}")


# CloudMonitor names and units (airlock.cloud.alibaba._reader): percent, bit/s.
ALIBABA: Final = AgentProvider(
    "alibaba",
    (
        Kind(
            "ecs.instance",
            Metrics(
                cpu="CPUUtilization",
                mem="memory_usedutilization",
                net=("IntranetInRate", "IntranetOutRate", "InternetInRate", "InternetOutRate"),
                net_unit="bit/s",
            ),
            running="Running",
            starting=frozenset({"Starting"}),
            stopped="Stopped",
            deletable=True,
        ),
        Kind(
            "rds.instance",
            Metrics(
                cpu="CpuUsage",
                mem="MemoryUsage",
                net=("MySQL_NetworkInNew", "MySQL_NetworkOutNew"),
                net_unit="bit/s",
            ),
            running="Running",
            starting=frozenset({"Starting"}),
            stopped="Stopped",
            deletable=False,
        ),
    ),
)

# CloudWatch names (namespace AWS/EC2 and AWS/RDS). The AWS reader reports states in the
# ports' words: EC2 running/stopped/pending as Running/Stopped/Pending, RDS available as
# Running (airlock.cloud.aws._reader).
AWS: Final = AgentProvider(
    "aws",
    (
        Kind(
            "ec2.instance",
            # Memory needs the CloudWatch agent: not assumed.
            Metrics(
                cpu="CPUUtilization", mem=None, net=("NetworkIn", "NetworkOut"), net_unit="B/s"
            ),
            running="Running",
            starting=frozenset({"Pending"}),
            stopped="Stopped",
            deletable=True,
        ),
        Kind(
            "rds.instance",
            Metrics(
                cpu="CPUUtilization",
                mem=None,
                net=("NetworkReceiveThroughput", "NetworkTransmitThroughput"),
                net_unit="B/s",
            ),
            running="Running",
            starting=frozenset({"Starting"}),
            stopped="Stopped",
            deletable=False,  # RDS has no delete on the kernel's allowlist
        ),
    ),
)

PROVIDERS: Final = {p.name: p for p in (ALIBABA, AWS)}
