"""Pay-as-you-go list prices of the instance types devcloud's fleets use.

devcloud answers ECS and RDS ``DescribePrice`` from these tables. The figures are in the shape and
order of magnitude of Alibaba Cloud's public ap-southeast-1 list prices, not a quote:
every region is priced alike here, and a real deployment reads the provider's own
``DescribePrice`` (see docs/savings.md). Decimal strings, so no float ever holds a
price before it reaches the wire.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CURRENCY",
    "ECS_HOURLY",
    "RDS_ENGINES",
    "RDS_HOURLY",
    "RDS_STORAGE_GB_HOURLY",
    "SYSTEM_DISK_HOURLY",
]

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

#: RDS class → compute price per hour of a pay-as-you-go primary instance (no storage).
RDS_HOURLY: Final[dict[str, str]] = {
    "mysql.n2.medium.1": "0.0880",
    "rds.mysql.s3.large": "0.2500",
    "pg.n4.xlarge.2c": "0.3100",
}

#: RDS class → the engine and version devcloud reports for it and prices it for.
RDS_ENGINES: Final[dict[str, tuple[str, str]]] = {
    "mysql.n2.medium.1": ("MySQL", "8.0"),
    "rds.mysql.s3.large": ("MySQL", "8.0"),
    "pg.n4.xlarge.2c": ("PostgreSQL", "14.0"),
}

#: RDS storage per GB per hour (cloud_essd); a stopped RDS instance keeps paying it.
RDS_STORAGE_GB_HOURLY: Final = "0.00016"
