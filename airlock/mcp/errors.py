"""The MCP proxy's one error tree.

Error hierarchy::

    Error               root of everything airlock.mcp raises
    ├── ConfigError     the config file is missing, not TOML, or not valid
    ├── UpstreamError   the server answered the proxy's own request with an error, or not at all
    ├── AnswerError     a premise or lookup tool answered what the proxy cannot use
    └── ToolFailed      the server ran a gated tool and its result is an error (``isError``)

Only :class:`ConfigError` reaches a caller of :mod:`airlock.mcp`; the others become tool
results the agent reads (docs/mcp.md).
"""

from __future__ import annotations

from typing import Any

__all__ = ["AnswerError", "ConfigError", "Error", "ToolFailed", "UpstreamError"]


class Error(Exception):
    """Root of every error raised by :mod:`airlock.mcp`."""


class ConfigError(Error):
    """The config file is missing, not TOML, or not valid."""


class UpstreamError(Error):
    """The server answered the proxy's own request with a JSON-RPC error, or not at all."""


class AnswerError(Error):
    """A premise or lookup tool answered something the proxy cannot use."""


class ToolFailed(Error):
    """The server ran the gated tool and its result is an error (``isError``)."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__("the tool's result is an error")
        self.result = result
