"""``airlock mcp``: put an Airlock approval in front of an MCP tool server (docs/mcp.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._help import Typer
from ._text import say

__all__ = ["mcp_app"]

mcp_app = Typer(
    name="mcp",
    help="Gate the tools of an MCP server behind a person's approval.",
    no_args_is_help=True,
)


@mcp_app.command(
    "proxy",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def proxy_command(
    command: Annotated[list[str], typer.Argument(help="The MCP server's command line, after --.")],
    config: Annotated[
        Path, typer.Option("--config", help="The proxy's TOML config (docs/mcp.md).")
    ] = Path("airlock-mcp.toml"),
) -> None:
    """Serve an agent on stdio in front of COMMAND; a gated tools/call runs once approved.

    Every other message passes byte for byte. Reads the gate's AIRLOCK_GATE_* settings.
    """
    from airlock.gate import ConfigError as GateConfigError
    from airlock.gate import Gate
    from airlock.mcp import ConfigError, ProxyConfig, run

    try:
        settings = ProxyConfig.load(config)
        gate = Gate.from_env()
    except (ConfigError, GateConfigError) as exc:
        say(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    try:
        code = run(settings, gate, command)
    finally:
        gate.close()
    raise typer.Exit(code)
