"""What the AWS reader and writer share: the config, the boto3 clients (retries off) and
the one mapping of botocore errors onto :mod:`airlock.cloud.ports`.

Private to :mod:`airlock.cloud.aws`. It must never hold an operation that changes anything
at the provider: writes live only in :mod:`airlock.cloud.aws.writer`, so the agent, which
imports the reader, never loads a module that can write. boto3 signs every request
(SigV4); nothing here signs by hand.
"""

from __future__ import annotations

import re
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, TypeVar

import boto3
from botocore.config import Config
from botocore.credentials import RefreshableCredentials
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
    ProfileNotFound,
)
from botocore.loaders import Loader, create_loader
from botocore.session import Session as BotocoreSession
from botocore.session import get_session

from airlock.cloud.ports import (
    CloudError,
    DefiniteRefusal,
    IncorrectState,
    PermissionDenied,
    ResourceNotFound,
    UnknownOutcome,
)

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch import CloudWatchClient
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_rds import RDSClient

    from airlock.settings import CloudSettings

__all__ = [
    "EC2_ID",
    "RDS_ID",
    "AwsConfig",
    "Clients",
    "call",
    "map_vendor_error",
    "request_id",
    "rfc3339",
]

# The kernel's formats (airlock.protocol); always used with fullmatch.
EC2_ID: Final = re.compile(r"i-([0-9a-f]{8}|[0-9a-f]{17})")
RDS_ID: Final = re.compile(r"(?=.{1,63}\Z)[a-z](-?[a-z0-9])*")

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class AwsConfig:
    """How to reach AWS and as whom.

    Credentials: a static access key (``access_key_id`` + ``secret_access_key``), else the
    named ``profile`` of the shared config files, else boto3's default chain (environment,
    instance role). With ``role_arn``, those credentials only assume that role (STS
    ``AssumeRole``, refreshed before it expires) and the role makes every call: the agent
    and the executor each name their own. ``endpoint_url`` points every service at one
    endpoint (a local moto server); ``None`` is AWS's regional endpoints. Timeouts are in
    milliseconds and always set explicitly.
    """

    access_key_id: str = ""
    secret_access_key: str = field(default="", repr=False)
    profile: str | None = None
    role_arn: str | None = None
    endpoint_url: str | None = None
    connect_timeout_ms: int = 5_000
    read_timeout_ms: int = 10_000

    def __post_init__(self) -> None:
        if bool(self.access_key_id) != bool(self.secret_access_key):
            raise ValueError("an access key id needs its secret, and a secret its id")
        if self.access_key_id and self.profile:
            raise ValueError("name an access key or a profile, not both")
        if self.role_arn is not None and not re.fullmatch(
            r"arn:aws[a-z-]*:iam::[0-9]{12}:role/[\w+=,.@/-]{1,512}", self.role_arn
        ):
            raise ValueError(f"not an IAM role ARN: {self.role_arn!r}")
        if self.endpoint_url is not None and not self.endpoint_url.startswith(
            ("http://", "https://")
        ):
            raise ValueError("endpoint_url must be an http(s) URL")
        if self.connect_timeout_ms <= 0 or self.read_timeout_ms <= 0:
            raise ValueError("timeouts must be positive")

    @classmethod
    def from_settings(cls, settings: CloudSettings) -> AwsConfig:
        """The config a service's ``CloudSettings`` describe (``AIRLOCK_<SERVICE>_AWS_*``)."""
        return cls(
            access_key_id=settings.cloud_access_key_id,
            secret_access_key=settings.cloud_access_key_secret.get_secret_value(),
            profile=settings.aws_profile,
            role_arn=settings.aws_role_arn,
            endpoint_url=settings.aws_endpoint_url,
            connect_timeout_ms=settings.cloud_connect_timeout_ms,
            read_timeout_ms=settings.cloud_read_timeout_ms,
        )


# --------------------------------------------------------------------------- errors

# Codes that mean "the request was refused and had no effect". Anything not listed and
# not a 4xx validation error is an unknown outcome: misreading a landed write as refused
# corrupts the record, misreading a refusal as unknown costs one probe.
_NOT_FOUND_CODES: Final = frozenset(
    {"InvalidInstanceID.NotFound", "DBInstanceNotFound", "DBInstanceNotFoundFault"}
)
_PERMISSION_CODES: Final = frozenset(
    {
        "AccessDenied",
        "AccessDeniedException",
        "UnauthorizedOperation",
        "AuthFailure",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "IncompleteSignature",
        "UnrecognizedClientException",
        "ExpiredToken",
        "ExpiredTokenException",
        "OptInRequired",
        "Blocked",
    }
)
_STATE_CODES: Final = frozenset(
    {"IncorrectInstanceState", "InvalidDBInstanceState", "InvalidDBInstanceStateFault"}
)
_UNKNOWN_CODES: Final = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "TooManyRequestsException",
        "ServiceUnavailable",
        "Unavailable",
        "InternalError",
        "InternalFailure",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)
# 4xx codes the APIs return before doing anything (validation, termination protection).
_REFUSAL_PREFIXES: Final = (
    "InvalidParameter",
    "InvalidInstanceID.Malformed",
    "MissingParameter",
    "ValidationError",
    "UnsupportedOperation",
    "OperationNotPermitted",
    "InvalidAction",
    "DryRunOperation",
)


def map_vendor_error(exc: BaseException) -> CloudError:
    """Translate a botocore exception into the ports' error tree (the one place that does)."""
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        meta = exc.response.get("ResponseMetadata", {})
        code = str(err.get("Code", ""))
        status = int(meta.get("HTTPStatusCode", 0) or 0)
        request_id = str(meta.get("RequestId", ""))
        message = f"{code}: {err.get('Message', '')}"
        if code in _UNKNOWN_CODES or status >= 500:
            return UnknownOutcome(message, code=code, request_id=request_id)
        if code in _NOT_FOUND_CODES:
            return ResourceNotFound(message, code=code, request_id=request_id)
        if code in _PERMISSION_CODES or status in (401, 403):
            return PermissionDenied(message, code=code, request_id=request_id)
        if code in _STATE_CODES:
            return IncorrectState(message, code=code, request_id=request_id)
        if 400 <= status < 500 and code.startswith(_REFUSAL_PREFIXES):
            return DefiniteRefusal(message, code=code, request_id=request_id)
        return UnknownOutcome(message, code=code or f"HTTP{status}", request_id=request_id)
    # Raised before anything is sent: no credentials, a bad profile, a bad parameter.
    if isinstance(exc, NoCredentialsError | PartialCredentialsError | ProfileNotFound):
        return PermissionDenied(f"credentials: {exc}", code=type(exc).__name__)
    if isinstance(exc, ParamValidationError):
        return DefiniteRefusal(f"parameters: {exc}", code="ParamValidation")
    # Read timeouts, connections closed after sending: the call may have landed.
    if isinstance(exc, BotoCoreError):
        return UnknownOutcome(f"transport: {exc}", code=type(exc).__name__)
    return UnknownOutcome(f"transport: {exc}", code="Transport")


def call(fn: Callable[..., _T], /, **kwargs: Any) -> _T:
    """``fn(**kwargs)`` with every botocore error mapped onto the ports' tree."""
    try:
        return fn(**kwargs)
    except CloudError:
        raise
    except Exception as exc:  # botocore raises many unrelated types
        raise map_vendor_error(exc) from exc


def request_id(answer: Any) -> str:
    return str(answer.get("ResponseMetadata", {}).get("RequestId", ""))


def rfc3339(value: datetime | None) -> str:
    """A botocore timestamp as ``YYYY-MM-DDTHH:MM:SSZ``; "" when absent."""
    if value is None:
        return ""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- clients


class Clients:
    """One boto3 client per (service, region), built lazily, with retries switched off."""

    def __init__(self, config: AwsConfig) -> None:
        self._config = config
        self._session = _session(config)
        self._cache: dict[tuple[str, str], Any] = {}
        self._building = threading.Lock()
        self._botocore = Config(
            connect_timeout=config.connect_timeout_ms / 1000,
            read_timeout=config.read_timeout_ms / 1000,
            # No automatic retries, ever: a retried write whose first attempt landed is a
            # double write. The caller decides, after probing. Set explicitly: boto3's
            # default (legacy mode) would retry a 5xx up to 4 times.
            retries={"mode": "standard", "total_max_attempts": 1},
            tcp_keepalive=True,
        )

    def _get(self, service: str, region: str) -> Any:
        key = (service, region)
        client = self._cache.get(key)
        if client is None:
            # A boto3 session is not thread-safe (its clients are): one client at a time.
            with self._building:
                client = self._cache.get(key)
                if client is None:
                    client = self._session.client(
                        service,  # type: ignore[call-overload]
                        region_name=region,
                        endpoint_url=self._config.endpoint_url,
                        config=self._botocore,
                    )
                    self._cache[key] = client
        return client

    def ec2(self, region: str) -> EC2Client:
        client: EC2Client = self._get("ec2", region)
        return client

    def rds(self, region: str) -> RDSClient:
        client: RDSClient = self._get("rds", region)
        return client

    def cloudwatch(self, region: str) -> CloudWatchClient:
        client: CloudWatchClient = self._get("cloudwatch", region)
        return client


_loader: Loader | None = None


def _botocore_session() -> BotocoreSession:
    """A new botocore session sharing one loader of service models: each session would
    otherwise parse EC2's multi-megabyte model again (~1 s a client)."""
    global _loader  # noqa: PLW0603 - one read-only cache of botocore's model files
    if _loader is None:
        _loader = create_loader()
    session = get_session()
    session.register_component("data_loader", _loader)
    return session


def _session(config: AwsConfig) -> boto3.session.Session:
    if config.access_key_id:
        base = boto3.session.Session(
            aws_access_key_id=config.access_key_id,
            aws_secret_access_key=config.secret_access_key,
            botocore_session=_botocore_session(),
        )
    else:
        base = boto3.session.Session(
            profile_name=config.profile, botocore_session=_botocore_session()
        )
    if config.role_arn is None:
        return base
    role_arn = config.role_arn
    sts = base.client(
        "sts",
        endpoint_url=config.endpoint_url,
        region_name=base.region_name or "us-east-1",
        config=Config(retries={"mode": "standard", "total_max_attempts": 1}),
    )
    session_name = "airlock-" + secrets.token_hex(6)

    def assume() -> dict[str, str]:
        creds = call(sts.assume_role, RoleArn=role_arn, RoleSessionName=session_name)["Credentials"]
        return {
            "access_key": creds["AccessKeyId"],
            "secret_key": creds["SecretAccessKey"],
            "token": creds["SessionToken"],
            "expiry_time": creds["Expiration"].isoformat(),
        }

    botocore_session = _botocore_session()
    # botocore refreshes the role's credentials before they expire, with this function.
    # Its sessions take refreshable credentials only through this attribute (it is how
    # botocore's own AssumeRole provider is installed); the stubs do not declare it.
    botocore_session._credentials = RefreshableCredentials.create_from_metadata(  # type: ignore[attr-defined]
        metadata=assume(), refresh_using=assume, method="sts-assume-role"
    )
    return boto3.session.Session(botocore_session=botocore_session)
