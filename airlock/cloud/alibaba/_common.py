"""What the Alibaba Cloud reader and writer share: the config, the SDK clients (retries
off) and the one mapping of vendor errors onto :mod:`airlock.cloud.ports`.

Each product's SDK is imported on the first call to that product (:func:`sdk`): its
``models`` package imports every one of its 500 to 1,300 modules, about 0.9 s of CPU for
the three, which an executor or agent process that never calls the cloud should not pay.

Private to :mod:`airlock.cloud.alibaba`. It must never hold an operation that changes
anything at the provider: writes live only in :mod:`airlock.cloud.alibaba.writer`, so the
agent, which imports the reader, never loads a module that can write.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from airlock.cloud.ports import (
    CloudError,
    DefiniteRefusal,
    IncorrectState,
    PermissionDenied,
    ResourceNotFound,
    UnknownOutcome,
)
from airlock.settings import CloudSettings

if TYPE_CHECKING:
    from alibabacloud_tea_openapi.models import Config
    from darabonba.runtime import RuntimeOptions

__all__ = ["ECS_ID", "RDS_ID", "AlibabaConfig", "Clients", "Sdk", "call", "map_vendor_error", "sdk"]

# The kernel's formats (airlock.protocol); always used with fullmatch ("$" admits "\n").
ECS_ID: Final = re.compile(r"i-[0-9a-z]{4,64}")
RDS_ID: Final = re.compile(r"(rm|pgm|pc)-[0-9a-z]{4,64}")


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
    from alibabacloud_tea_openapi.exceptions import AlibabaCloudException  # noqa: PLC0415 - see sdk

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


def call(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except CloudError:
        raise
    except Exception as exc:  # the SDK raises bare Exception subclasses of many kinds
        raise map_vendor_error(exc) from exc


class Sdk(NamedTuple):
    """One product's SDK: its ``Client`` class and its request ``models`` module."""

    client: Any
    models: ModuleType


def sdk(product: str) -> Sdk:
    """``product``'s SDK, imported on first use.

    Args:
        product: ``"ecs"``, ``"rds"`` or ``"cms"``.

    Raises:
        KeyError: any other product.
    """
    # Imports inside a function (PLC0415) are the point; plain import statements, not
    # importlib, so that import-linter still sees which module loads which SDK.
    if product == "ecs":
        from alibabacloud_ecs20140526 import models as ecs  # noqa: PLC0415
        from alibabacloud_ecs20140526.client import Client as EcsClient  # noqa: PLC0415

        return Sdk(EcsClient, ecs)
    if product == "rds":
        from alibabacloud_rds20140815 import models as rds  # noqa: PLC0415
        from alibabacloud_rds20140815.client import Client as RdsClient  # noqa: PLC0415

        return Sdk(RdsClient, rds)
    if product == "cms":
        from alibabacloud_cms20190101 import models as cms  # noqa: PLC0415
        from alibabacloud_cms20190101.client import Client as CmsClient  # noqa: PLC0415

        return Sdk(CmsClient, cms)
    raise KeyError(product)


class Clients:
    """One SDK client per (product, region), built lazily, with retries switched off."""

    def __init__(self, config: AlibabaConfig) -> None:
        self._config = config
        self._cache: dict[tuple[str, str], Any] = {}
        self._building = threading.Lock()

    def sdk_config(self, region: str) -> Config:
        from alibabacloud_tea_openapi.models import Config  # noqa: PLC0415 - see sdk
        from alibabacloud_tea_openapi.utils_models import GlobalParameters  # noqa: PLC0415
        from darabonba.policy.retry import RetryOptions  # noqa: PLC0415 - see sdk

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
            # without RegionId (StopInstance). devcloud serves every region on one plain
            # HTTP endpoint, so it is told which one this client stands for, and refuses a
            # resource of another region as a regional endpoint does. Never sent to the
            # real cloud (HTTPS, even through an endpoint override).
            global_parameters=(
                GlobalParameters(headers={"x-acs-region-id": region})
                if c.endpoint and c.protocol == "http"
                else None
            ),
        )

    def runtime(self) -> RuntimeOptions:
        from darabonba.runtime import RuntimeOptions  # noqa: PLC0415 - see sdk

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
            with self._building:  # the executor's daemon calls from several threads
                client = self._cache.get(key)
                if client is None:
                    client = sdk(product).client(self.sdk_config(region))
                    self._cache[key] = client
        return client
