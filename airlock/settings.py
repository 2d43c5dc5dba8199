"""Settings for every Airlock process: one class per service, all read from ``AIRLOCK_*``.

Each service reads only its own class, so a service's process never needs another
service's secrets in its environment. Dev defaults (embedded SQLite URLs, localhost
devcloud credentials) are refused unless ``AIRLOCK_ENV=dev``: a production process that
forgot a setting must fail at start, not run on a demo secret.

Every setting is documented in the README's configuration table; keep them in step.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Env", "ServiceSettings", "is_dev"]

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
