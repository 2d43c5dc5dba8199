"""The agent's settings (``AIRLOCK_AGENT_*``). Not public: :mod:`airlock.settings`
re-exports :class:`AgentSettings`, and that is where callers import it from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    Field,
    SecretStr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import SettingsConfigDict

from airlock.settings import (
    _AWS_ACCOUNT,
    _AWS_REGION,
    _DEVCLOUD_ACCOUNT,
    MOTO_ACCOUNT,
    CloudSettings,
    _ca_file_needs_https,
    _dev_checkpoint_url,
    _readable_ca_file,
    is_dev,
)

__all__ = ["AgentSettings", "AgentThreshold"]


#: The idle thresholds the agent takes per provider (``provider_thresholds``).
AgentThreshold = Literal[
    "window_days",
    "min_samples_bp",
    "cpu_avg_max_bp",
    "cpu_p95_max_bp",
    "mem_avg_max_bp",
    "net_quiet_bytes_per_day",
    "net_quiet_min_days",
]


class AgentSettings(CloudSettings):
    """The agent (``AIRLOCK_AGENT_*``): its read-only cloud key, its checkpoint token, the
    idle policy's thresholds and the scan's shape.

    Thresholds are integers in the units of the signed action (docs/protocol.md#strict-json):
    percentages in basis points, sizes in bytes, durations in seconds. ``AIRLOCK_AGENT_CLOUD_*``
    must name the **read** key; the agent never receives a write credential.
    """

    model_config = SettingsConfigDict(
        env_prefix="AIRLOCK_AGENT_", env_file=".env", extra="ignore", frozen=True
    )

    #: Base URL of the checkpoint API (the part before ``/v1``).
    checkpoint_url: str = Field(default_factory=_dev_checkpoint_url)
    #: The agent's service token (``role=agent``); needed to read back and to submit.
    checkpoint_token: SecretStr = SecretStr("")
    #: PEM bundle of the CA(s) that issued the checkpoint's TLS certificate; set, exactly
    #: these are trusted. Unset: certifi's bundle, or ``SSL_CERT_FILE`` if set.
    checkpoint_ca_file: Path | None = None
    #: Seconds to wait for the checkpoint on each request.
    checkpoint_timeout: float = Field(default=10.0, gt=0)
    #: Attempts per checkpoint request while it is down (bounded exponential backoff).
    checkpoint_attempts: int = Field(default=6, ge=1, le=20)
    #: First retry delay while the checkpoint is down, seconds.
    backoff_initial: float = Field(default=0.5, gt=0)
    #: Longest retry delay, seconds.
    backoff_max: float = Field(default=30.0, gt=0)
    #: The Alibaba Cloud account id written into every action (dev: devcloud's).
    account: str = ""
    #: ``proposed_by`` of every action.
    agent_id: str = Field(
        default="agent:scanner-1", pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$"
    )
    #: Seconds between scans with ``--loop``.
    interval: int = Field(default=3600, gt=0)
    #: A file ``--loop`` touches as it scans and while it waits (``airlock agent health``).
    heartbeat_path: Path | None = None
    #: Instances per DescribeInstances page; a CloudMonitor query never spans two pages.
    page_size: int = Field(default=100, ge=1, le=100)
    #: Instances per batched CloudMonitor query.
    metric_batch: int = Field(default=100, ge=1, le=100)
    #: Threads assessing pages while the next page is listed (each with its own reader).
    scan_workers: int = Field(default=2, ge=1, le=16)

    # -- the idle policy (idle/v1)
    #: Idle window, days: metrics looked at and the minimum age of a resource.
    window_days: int = Field(default=14, ge=1, le=60)
    #: Hourly CPU samples needed, as a share of the window's hours (9000 = 90 %).
    min_samples_bp: int = Field(default=9000, ge=0, le=10_000)
    #: Idle only below this CPU average, basis points (500 = 5 %).
    cpu_avg_max_bp: int = Field(default=500, ge=0, le=10_000)
    #: Idle only below this CPU p95, basis points (1000 = 10 %).
    cpu_p95_max_bp: int = Field(default=1000, ge=0, le=10_000)
    #: Applied only where memory is reported (it needs the CloudMonitor agent).
    mem_avg_max_bp: int = Field(default=1500, ge=0, le=10_000)
    #: A day is quiet when network in + out stays below this many bytes.
    net_quiet_bytes_per_day: int = Field(default=5_000_000, ge=0)
    #: Quiet network days needed within the window.
    net_quiet_min_days: int = Field(default=12, ge=0)
    #: A tag key or value equal to one of these (case-insensitive) protects a resource.
    protect_tags: tuple[str, ...] = ("airlock:protect",)
    #: A value of one of these tag keys starting with ``prod_value_prefix`` protects it too.
    prod_tag_keys: tuple[str, ...] = ("env", "environment")
    #: Value prefix of ``prod_tag_keys`` that marks production (case-insensitive).
    prod_value_prefix: str = "prod"
    #: How long an instance Airlock stopped must stay stopped before a delete is proposed.
    grace_seconds: int = Field(default=7 * 86_400, ge=0)
    #: ``StoppedMode`` of proposed ECS stops.
    ecs_stopped_mode: Literal["StopCharging", "KeepCharging"] = "StopCharging"
    #: The provider this agent scans (one agent per provider and account): alibaba or aws.
    provider: Literal["alibaba", "aws"] = "alibaba"
    #: Idle thresholds for one provider over those above, as JSON keyed by provider and
    #: threshold name: ``{"aws": {"cpu_avg_max_bp": 300, "net_quiet_min_days": 10}}``.
    provider_thresholds: dict[Literal["alibaba", "aws"], dict[AgentThreshold, int]] = Field(
        default_factory=dict
    )

    def thresholds(self, provider: str | None = None) -> dict[str, int]:
        """The idle thresholds for ``provider`` (default :attr:`provider`): those above,
        then its overrides."""
        out = {name: int(getattr(self, name)) for name in get_args(AgentThreshold)}
        out.update(self.provider_thresholds.get(provider or self.provider, {}))  # type: ignore[call-overload]
        return out

    @model_validator(mode="after")
    def _agent_checks(self) -> AgentSettings:
        for provider, given in self.provider_thresholds.items():
            for key, value in given.items():
                # The same bounds as the setting itself (``cpu_avg_max_bp`` ≤ 10000…).
                info = type(self).model_fields[key]
                form: Any = Annotated[(info.annotation, *info.metadata)]  # built at run time
                try:
                    TypeAdapter(form).validate_python(value)
                except ValidationError as exc:
                    raise ValueError(
                        f"provider_thresholds.{provider}.{key}: {exc.errors()[0]['msg']}"
                    ) from None
        if self.provider == "aws":
            if self.account and _AWS_ACCOUNT.fullmatch(self.account) is None:
                raise ValueError("AIRLOCK_AGENT_ACCOUNT must be 12 digits for provider aws")
            bad = [r for r in self.cloud_regions if _AWS_REGION.fullmatch(r) is None]
            if bad:
                raise ValueError(f"AIRLOCK_AGENT_CLOUD_REGIONS {bad} are not AWS regions")
        for provider in {self.provider, *self.provider_thresholds}:
            thresholds = self.thresholds(provider)
            if thresholds["net_quiet_min_days"] > thresholds["window_days"]:
                raise ValueError(f"{provider}: net_quiet_min_days cannot exceed window_days")
        if not self.checkpoint_url.startswith(("http://", "https://")):
            raise ValueError("AIRLOCK_AGENT_CHECKPOINT_URL must be an http(s) URL")
        _ca_file_needs_https(self, self.checkpoint_url, self.checkpoint_ca_file)
        if not is_dev(self):
            if not self.account:
                raise ValueError("AIRLOCK_AGENT_ACCOUNT must be set outside AIRLOCK_ENV=dev")
            if "checkpoint_url" not in self.model_fields_set:
                raise ValueError("AIRLOCK_AGENT_CHECKPOINT_URL must be set outside AIRLOCK_ENV=dev")
        return self

    _check_ca_file = field_validator("checkpoint_ca_file")(_readable_ca_file)

    def filled_in(self) -> dict[str, Any]:
        out = super().filled_in()
        if self.account_or_default() != self.account:
            out["account"] = self.account_or_default()
        return out

    def account_or_default(self) -> str:
        """The configured account; in dev when none is set, the local double's: devcloud's,
        or moto's (``123456789012``) for ``aws``."""
        if self.account:
            return self.account
        if not is_dev(self):  # unreachable after validation; fail closed anyway
            raise ValueError("no account configured")
        return MOTO_ACCOUNT if self.provider == "aws" else _DEVCLOUD_ACCOUNT
