"""``airlock mcp proxy``: an Airlock approval in front of any MCP tool server (docs/mcp.md).

The proxy relays an agent's MCP session (stdio, or streamable HTTP) to the real server
untouched, except a ``tools/call`` of a tool the config names: that call goes through
:mod:`airlock.gate` and runs once a person approved exactly it.

:class:`McpTools` is the other end: an MCP server's tools (through the proxy) as the tools
of :mod:`airlock.agents`' loop, which pauses while a gated call awaits a person.

Imports the kernel, :mod:`airlock.gate`, :mod:`airlock.agents` and the ``mcp`` SDK; never
a service, the web app or the CLI toolkit.
"""

from ._config import GatedTool, Lookup, Premise, ProxyConfig
from ._http import serve_http
from ._proxy import Proxy, run
from ._tools import McpTools
from .errors import ConfigError, Error

__all__ = [
    "ConfigError",
    "Error",
    "GatedTool",
    "Lookup",
    "McpTools",
    "Premise",
    "Proxy",
    "ProxyConfig",
    "run",
    "serve_http",
]
