"""The proxy's TOML config: which tools are gated, and how a call of each is named.

::

    wait = 30                               # seconds a call waits for a decision
    results = ".airlock/mcp-results.db"     # where results of gated calls are kept
    approval_url = "https://airlock.example/proposals/{proposal_id}"  # optional

    [tools.refund]
    effect_key = "refund:{order}"           # one effect per key, ever
    target = "order"                        # the argument naming what it acts on
    risk = "high"
    summary = "refund {amount} on {order}"  # optional
    premise = { tool = "refunded_total", arguments = { order = "order" }, keep = ["refunded"] }
    lookup = { tool = "find_refund", argument = "effect_key" }
    editable = true                         # a person may edit the arguments (default)

Parsed at the boundary: unknown keys, a template naming anything but plain argument
names, or a risk other than low/medium/high is a :class:`ConfigError`.
"""

from __future__ import annotations

import string
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import ConfigError

__all__ = ["GatedTool", "Lookup", "Premise", "ProxyConfig", "render"]


def _fields(template: str) -> list[str]:
    """The argument names a template uses; ValueError for anything but ``{name}``."""
    names = []
    for _, name, spec, conversion in string.Formatter().parse(template):
        if name is None:
            continue
        # No attribute access, indexing, conversion or format spec: a template names
        # arguments, it never evaluates anything on them.
        if not name.isidentifier() or spec or conversion:
            raise ValueError(f"template field {{{name}}} must be a plain argument name")
        names.append(name)
    return names


def render(template: str, arguments: dict[str, Any]) -> str:
    """``template`` with each ``{name}`` replaced by that argument (str or int only).

    Raises:
        ValueError: an argument is missing or is not a str or int.
    """
    out = []
    for literal, name, _, _ in string.Formatter().parse(template):
        out.append(literal)
        if name is None:
            continue
        if name not in arguments:
            raise ValueError(f"argument {name!r} is missing")
        value = arguments[name]
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise ValueError(f"argument {name!r} is not a string or an integer")
        out.append(str(value))
    return "".join(out)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Premise(_Strict):
    """A tool on the same server whose answer holds the facts the decision rests on."""

    tool: str = Field(min_length=1)
    #: The premise tool's argument -> the gated call's argument it takes.
    arguments: dict[str, str] = Field(default_factory=dict)
    #: The fields of its structured answer to keep (each must be present).
    keep: tuple[str, ...] = Field(min_length=1)


class Lookup(_Strict):
    """A tool on the same server that says whether an effect happened (true/false)."""

    tool: str = Field(min_length=1)
    #: The lookup tool's argument that receives the effect key.
    argument: str = "effect_key"


class GatedTool(_Strict):
    """How a call of one gated tool is named and checked."""

    effect_key: str = Field(min_length=1)
    target: str = Field(min_length=1)
    risk: Literal["low", "medium", "high"]
    summary: str | None = None
    premise: Premise | None = None
    lookup: Lookup | None = None
    #: May a person edit a call's arguments before approving it? The server then gets
    #: the edited call, and the agent's result says what was changed.
    editable: bool = True

    @field_validator("effect_key", "summary")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        if value is not None:
            _fields(value)
        return value


class ProxyConfig(_Strict):
    """The whole config file."""

    wait: float = Field(default=30.0, ge=0)
    results: Path = Path(".airlock/mcp-results.db")
    #: Where a person decides, ``{proposal_id}`` filled in (the web app's
    #: ``https://…/proposals/{proposal_id}``); default: the checkpoint's API URL.
    approval_url: str | None = None
    tools: dict[str, GatedTool] = Field(min_length=1)

    @field_validator("approval_url")
    @classmethod
    def _approval_url(cls, value: str | None) -> str | None:
        if value is not None and _fields(value) != ["proposal_id"]:
            raise ValueError("approval_url must name {proposal_id} once and nothing else")
        return value

    @classmethod
    def load(cls, path: Path) -> ProxyConfig:
        """Read and validate ``path``, or raise :class:`ConfigError` (one line, a code)."""
        try:
            value = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"E_CONFIG: {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"E_CONFIG: {path}: {exc}") from None
        try:
            return cls.model_validate(value)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "config"
            raise ConfigError(f"E_CONFIG: {path}: {where}: {err['msg']}") from None
