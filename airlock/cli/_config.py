"""``airlock config``: every setting of every service, as documentation or as in effect.

``airlock config --markdown`` prints the settings tables of ``docs/configuration.md``,
generated from the settings classes and their ``#:`` comments (a test keeps the file in
step).
``airlock config [SERVICE]`` shows what this environment resolves to, secrets masked:
a ``SecretStr`` is shown as set or unset, and a database URL without its password.
A value a service fills in after validation (``ServiceSettings.filled_in``, e.g. the
devcloud account and key in dev) is shown as it will be used, and marked as a default.

This module must never print a secret, in either output.
"""

from __future__ import annotations

import ast
import functools
import inspect
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ._text import say

if TYPE_CHECKING:
    from pydantic_settings import BaseSettings

__all__ = ["config_command", "markdown_table", "services"]


@functools.cache
def services() -> dict[str, type[BaseSettings]]:
    """Each service's settings class, by the name ``airlock config`` takes.

    A function, not a constant: ``airlock --help`` must not pay for pydantic-settings.
    """
    from airlock import settings

    return {
        "checkpoint": settings.CheckpointSettings,
        "executor": settings.ExecutorSettings,
        "agent": settings.AgentSettings,
        "webapp": settings.WebappSettings,
        "devcloud": settings.DevcloudSettings,
    }


def _comments(cls: type) -> dict[str, str]:
    """Field name -> the ``#:`` comment block above it, across the class's bases."""
    from pydantic_settings import BaseSettings

    from airlock import settings

    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not (isinstance(klass, type) and issubclass(klass, BaseSettings)):
            continue
        if klass.__module__.rpartition(".")[0] != settings.__name__.rpartition(".")[0]:
            continue  # pydantic's own classes; ours are in airlock.settings and beside it
        lines = inspect.getsource(klass).splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                block: list[str] = []
                row = node.lineno - 2
                while row >= 0 and lines[row].strip().startswith("#:"):
                    block.insert(0, lines[row].strip()[2:].strip())
                    row -= 1
                if block:
                    out[node.target.id] = " ".join(block)
    return out


def _env_name(cls: type[BaseSettings], field: str) -> str:
    if field == "env":
        return "AIRLOCK_ENV"
    return f"{cls.model_config.get('env_prefix', '')}{field}".upper()


def _is_database_url(field: str) -> bool:
    return field == "database_url" or field.endswith("_database_url")


def _masked_database_url(value: str) -> str:
    """``value`` with its password replaced by ``***``, as ``airlock doctor`` shows it."""
    # Imported here: ``airlock --help`` must not pay for SQLAlchemy.
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(value).render_as_string(hide_password=True)
    except ArgumentError:
        # Unparseable, so there is no telling where a password would be: show none of it.
        return "•••• (not a database URL; not shown)"


def _default(cls: type[BaseSettings], field: str) -> str:
    from airlock.settings import DOCUMENTED

    info = cls.model_fields[field]
    if info.is_required():
        return "(required)"
    if info.default_factory_takes_validated_data:
        # A default that depends on AIRLOCK_ENV: show both.
        prod, dev = (
            _shown_default(field, info.get_default(call_default_factory=True, validated_data=d))
            for d in ({"env": "prod"}, {"env": "dev", DOCUMENTED: True})
        )
        return prod if prod == dev else f"{prod} (dev: {dev})"
    return _shown_default(field, info.get_default(call_default_factory=True))


def _shown_default(field: str, value: Any) -> str:
    from pydantic import SecretStr

    if isinstance(value, SecretStr):
        return "(secret, unset)" if not value.get_secret_value() else "(dev default)"
    if value is None:
        return "unset"
    if isinstance(value, tuple):
        value = list(value)
    text = str(value) if not isinstance(value, list) else repr(value).replace("'", '"')
    if text and _is_database_url(field):
        text = _masked_database_url(text)
    return f"`{text}`" if text else "empty"


def markdown_table() -> str:
    """The settings tables of ``docs/configuration.md``: one section per service."""
    parts: list[str] = []
    for service, cls in services().items():
        comments = _comments(cls)
        parts.append(f"### {service}\n")
        parts.append("| variable | default | meaning |")
        parts.append("|---|---|---|")
        for field in cls.model_fields:
            meaning = comments.get(field, "").replace("|", "\\|")
            parts.append(f"| `{_env_name(cls, field)}` | {_default(cls, field)} | {meaning} |")
        parts.append("")
    return "\n".join(parts)


def _shown(field: str, value: Any, *, filled: bool = False) -> str:
    from pydantic import SecretStr

    if isinstance(value, SecretStr):
        if filled:
            return "••••"  # a default's value is no more printed than a set one
        return "•••• (set)" if value.get_secret_value() else "(unset)"
    if isinstance(value, str) and value and _is_database_url(field):
        return _masked_database_url(value)
    return str(value)


def config_command(
    service: Annotated[
        str | None, typer.Argument(help="checkpoint, executor, agent, webapp or devcloud.")
    ] = None,
    markdown: Annotated[
        bool, typer.Option("--markdown", help="Print the tables of docs/configuration.md.")
    ] = False,
) -> None:
    """Show each service's settings as this environment resolves them (secrets masked).

    A value a service fills in when none is set is shown as used, marked (dev default).
    """
    from pydantic import ValidationError

    from airlock.settings import ServiceSettings

    from ._settings import messages

    if markdown:
        typer.echo(markdown_table(), nl=False)
        return
    known = services()
    if service is not None and service not in known:
        typer.echo(f"config: unknown service {service!r}; one of {', '.join(known)}", err=True)
        raise typer.Exit(2)
    failed = False
    for name, cls in known.items():
        if service is not None and name != service:
            continue
        typer.echo(f"[{name}]")
        try:
            loaded = cls()
        except ValidationError as exc:
            failed = True
            for line in messages(cls, exc):
                say(f"  invalid: {line}")
            continue
        # What the service fills in after validation is what it uses: shown, and marked.
        filled = loaded.filled_in() if isinstance(loaded, ServiceSettings) else {}
        mark = "(dev default)" if getattr(loaded, "env", None) == "dev" else "(default)"
        for field in cls.model_fields:
            # Values are the environment's and ./.env's, a file anyone may have written.
            if field in filled:
                shown = f"{_shown(field, filled[field], filled=True)} {mark}"
            else:
                shown = _shown(field, getattr(loaded, field))
            say(f"  {_env_name(cls, field):<44} {shown}")
    if failed:
        raise typer.Exit(1)
