"""``<VARIABLE>_FILE``: a setting read from the file a variable names (airlock.settings).

Containers receive secrets as files (compose and Kubernetes mount them under
``/run/secrets/``), so that no secret sits in the container's configuration, where
``docker inspect`` shows every environment variable. Every ``AIRLOCK_<SERVICE>_<NAME>``
setting may instead be given as ``AIRLOCK_<SERVICE>_<NAME>_FILE=/path``; the file's text
is then the value, parsed exactly as the variable's would be.

It must never guess: a file that cannot be read, an empty ``_FILE`` variable, or one
setting given both ways stops the start with one line naming the variable, never a
silent fallback to a default or to the other source.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic_settings import EnvSettingsSource, SettingsError

if TYPE_CHECKING:
    from pydantic_settings import BaseSettings

__all__ = ["FileValueSource", "read_value_file"]

#: What a variable that names the file of a setting ends with.
SUFFIX = "_FILE"


def read_value_file(variable: str, path: str) -> str:
    """The text of ``path`` without one trailing line ending (``\\n`` or ``\\r\\n``).

    Args:
        variable: the ``…_FILE`` variable that named the file, for the message.
        path: the file.

    Raises:
        SettingsError: ``path`` is empty, cannot be read (missing, a directory, no
            permission) or is not UTF-8 text; the message is one line naming ``variable``.
    """
    if not path:
        raise SettingsError(f"{variable} is empty; it must name a file")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError(f"{variable}={path}: {exc.strerror or type(exc).__name__}") from None
    except UnicodeDecodeError:
        raise SettingsError(f"{variable}={path}: not UTF-8 text") from None
    # One line ending, as `echo` and `printf '%s\n'` write it, or `docker compose run`
    # through a terminal; anything more is part of the value.
    if text.endswith("\r\n"):
        return text[:-2]
    return text.removesuffix("\n")


class FileValueSource(EnvSettingsSource):
    """The settings given as ``<VARIABLE>_FILE``, for ``settings_customise_sources``.

    Reads every field under the class's ``env_prefix`` (a field with an alias, such as
    ``AIRLOCK_ENV``, has no file form; nor has a field ``x`` when the class also has a
    field ``x_file``, whose variable that would be).

    Args:
        settings_cls: the settings class.
        given: every variable of the environment and of ``.env``, names normalised as
            the class's environment source does (lower-case unless case-sensitive).

    Raises:
        SettingsError: see :func:`read_value_file`; and a setting given both as
            ``<VARIABLE>`` and as ``<VARIABLE>_FILE`` (which one holds the secret?).
    """

    def __init__(self, settings_cls: type[BaseSettings], given: Mapping[str, str | None]) -> None:
        self._given = given
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        values: dict[str, str | None] = {}
        fields = self.settings_cls.model_fields
        for name, field in fields.items():
            if field.validation_alias is not None or f"{name}_file" in fields:
                continue
            variable = f"{self.env_prefix}{name}".upper()
            key = self._apply_case_sensitive(f"{self.env_prefix}{name}")
            path = self._given.get(self._apply_case_sensitive(f"{self.env_prefix}{name}{SUFFIX}"))
            if path is None:
                continue
            if key in self._given:
                raise SettingsError(f"{variable} and {variable}{SUFFIX} are both set; set one")
            values[key] = read_value_file(f"{variable}{SUFFIX}", path)
        return values
