"""The AWS adapter: the reading half, and where the writing half lives.

``AwsConfig`` and ``AwsReader`` are exported here. ``AwsWriter`` is not: it lives alone in
:mod:`airlock.cloud.aws.writer`, which nothing here imports, so a process that imports
this package (the agent) never loads a class that can write, and import-linter forbids
the agent from importing that one module (``pyproject.toml``).
"""

from ._common import AwsConfig, map_vendor_error
from ._reader import EC2_METRICS, RDS_METRICS, AwsReader

__all__ = ["EC2_METRICS", "RDS_METRICS", "AwsConfig", "AwsReader", "map_vendor_error"]
