"""Settings for every Airlock process: one class per service, all read from ``AIRLOCK_*``.

Each service reads only its own class, so a service's process never needs another
service's secrets in its environment. Dev defaults (embedded SQLite URLs, localhost
devcloud credentials) are refused unless ``AIRLOCK_ENV=dev``: a production process that
forgot a setting must fail at start, not run on a demo secret.

Every setting is documented in the README's configuration table; keep them in step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["CheckpointSettings", "Env", "ServiceSettings", "is_dev"]

Env = Literal["dev", "prod"]


class ServiceSettings(BaseSettings):
    """Base for each service's settings class.

    Subclasses set ``env_prefix="AIRLOCK_<SERVICE>_"`` in their ``model_config``.
    """

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", frozen=True)

    #: ``dev`` allows the embedded demo defaults; anything else refuses them. Read from
    #: ``AIRLOCK_ENV`` whatever the subclass's prefix is.
    env: Env = Field(default="prod", validation_alias=AliasChoices("AIRLOCK_ENV"))


def is_dev(settings: ServiceSettings) -> bool:
    return settings.env == "dev"


class CheckpointSettings(ServiceSettings):
    """The checkpoint (``AIRLOCK_CHECKPOINT_*``): its database, keys, policy and windows.

    The keys directory holds the private signing key; no other service's settings name it.
    """

    model_config = SettingsConfigDict(
        env_prefix="AIRLOCK_CHECKPOINT_", env_file=".env", extra="ignore", frozen=True
    )

    #: SQLAlchemy URL of the checkpoint's own database (never the executor's).
    database_url: str = "sqlite:///.airlock/checkpoint.db"
    #: Directory of signing keys and their manifest (``airlock keys generate``).
    keys_dir: Path = Path(".airlock/keys")
    #: Policy TOML; default: the policy shipped with the checkpoint.
    policy_path: Path | None = None
    #: Executor receipt public key set (JSON key set); receipts are checked against it.
    receipt_keys_path: Path | None = None
    #: The executor audience written into every statement.
    audience: str = "airlock-executor/dev"
    #: How long a proposal waits for votes, seconds (DESIGN §2.6: 24 h).
    approval_window: int = Field(default=24 * 3600, gt=0)
    #: Approval lifetime ``expires_at - issued_at``, seconds (DESIGN §2.6: 15 min).
    execution_window: int = Field(default=15 * 60, gt=0)
    #: Lifetime of a login session token, seconds.
    session_ttl: int = Field(default=8 * 3600, gt=0)
    #: Failed logins in a row before an account locks.
    lockout_threshold: int = Field(default=5, gt=0)
    #: How long a locked account stays locked, seconds.
    lockout_seconds: int = Field(default=15 * 60, gt=0)
    #: Longest long-poll a feed request may ask for, seconds.
    feed_max_wait: int = Field(default=30, gt=0)
    host: str = "127.0.0.1"
    port: int = Field(default=8787, gt=0, lt=65536)

    @model_validator(mode="after")
    def _no_dev_defaults_in_prod(self) -> CheckpointSettings:
        if not is_dev(self) and "database_url" not in self.model_fields_set:
            raise ValueError("AIRLOCK_CHECKPOINT_DATABASE_URL must be set outside AIRLOCK_ENV=dev")
        return self
