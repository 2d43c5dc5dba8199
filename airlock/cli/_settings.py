"""Loading a service's settings for a command, and saying why they do not load.

Every command that reads ``AIRLOCK_*`` settings goes through :func:`load`, so a setting
that is missing or wrong reads the same everywhere: one line per error,
``error: <service> settings: <VARIABLE>: <why>``, and exit 2. Only pydantic's message and
where it points are shown, never its rendering of the input: that echoes every value
read, secrets included (a cloud key's secret, a service token).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import typer

from ._text import say

if TYPE_CHECKING:
    from pydantic import ValidationError
    from pydantic_settings import BaseSettings

__all__ = ["SETTINGS_EXIT", "load", "messages"]

#: The exit code of a command whose settings do not load (a usage or configuration error).
SETTINGS_EXIT = 2

_S = TypeVar("_S", bound="BaseSettings")


def _service(cls: type[BaseSettings]) -> str:
    prefix = str(cls.model_config.get("env_prefix", ""))
    return prefix.removeprefix("AIRLOCK_").rstrip("_").lower() or cls.__name__


def messages(cls: type[BaseSettings], exc: ValidationError) -> list[str]:
    """One line per error: the variable it is about (when it is about one) and why."""
    prefix = str(cls.model_config.get("env_prefix", ""))
    lines = []
    for error in exc.errors():
        why = str(error["msg"]).removeprefix("Value error, ")
        loc = [str(part) for part in error["loc"]]
        if not loc:
            lines.append(why)
            continue
        head = loc[0] if loc[0] not in cls.model_fields else f"{prefix}{loc[0]}".upper()
        where = ".".join([head, *loc[1:]])
        # A validator's own message may name its variable already (``VAR=path: why``).
        lines.append(why if why.startswith(where) else f"{where}: {why}")
    return lines


def load(cls: type[_S], **overrides: Any) -> _S:
    """``cls(**overrides)``, or every reason it does not load on stderr and exit 2."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    try:
        return cls(**overrides)
    except ValidationError as exc:
        lines = messages(cls, exc)
    except SettingsError as exc:  # a list setting that is not JSON; names the field only
        lines = [str(exc)]
    for line in lines:
        say(f"error: {_service(cls)} settings: {line}", err=True)
    raise typer.Exit(SETTINGS_EXIT) from None
