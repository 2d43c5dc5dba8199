"""The Alibaba Cloud adapter: the reading half, and where the writing half lives.

``AlibabaConfig`` and ``AlibabaReader`` are exported here. ``AlibabaWriter`` is not: it
lives alone in :mod:`airlock.cloud.alibaba.writer`, which nothing here imports, so a
process that imports this package (the agent) never loads a class that can write, and
import-linter can forbid the agent from importing that one module (``pyproject.toml``).
"""

from ._common import AlibabaConfig, map_vendor_error
from ._reader import ECS_METRICS, RDS_METRICS, AlibabaReader

__all__ = ["ECS_METRICS", "RDS_METRICS", "AlibabaConfig", "AlibabaReader", "map_vendor_error"]
