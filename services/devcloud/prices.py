"""Pay-as-you-go list prices of the instance types devcloud's fleets use.

devcloud answers ECS ``DescribePrice`` from this table. The figures are in the shape and
order of magnitude of Alibaba Cloud's public ap-southeast-1 list prices, not a quote:
every region is priced alike here, and a real deployment reads the provider's own
``DescribePrice`` (see docs/savings.md). Decimal strings, so no float ever holds a
price before it reaches the wire.
"""

from __future__ import annotations

from typing import Final

__all__ = ["CURRENCY", "ECS_HOURLY", "SYSTEM_DISK_HOURLY"]

CURRENCY: Final = "USD"

#: ECS instance type → compute price per hour (vCPU and memory; no disk, no bandwidth).
ECS_HOURLY: Final[dict[str, str]] = {
    "ecs.g7.large": "0.1130",
    "ecs.c7.xlarge": "0.1860",
    "ecs.t6-c1m1.large": "0.0240",
    "ecs.r7.2xlarge": "0.4380",
}

#: What DescribePrice adds for the default system disk (40 GiB cloud_essd), per hour.
SYSTEM_DISK_HOURLY: Final = "0.0060"
