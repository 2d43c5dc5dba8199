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
    http: Annotated[
        int | None,
        typer.Option(
            "--http",
            metavar="PORT",
            help="Serve agents over MCP streamable HTTP at http://HOST:PORT/mcp, not stdio.",
        ),
    ] = None,
    host: Annotated[
        str,
        typer.Option("--host", help="The address --http binds (loopback unless --allow-remote)."),
    ] = "127.0.0.1",
    allow_remote: Annotated[
        bool,
        typer.Option(
            "--allow-remote",
            help="Let --host be a non-loopback address: whoever reaches it proposes as the agent.",
        ),
    ] = False,
) -> None:
    """Serve an agent in front of COMMAND; a gated tools/call runs once approved.

    Other messages pass byte for byte (stdio) or equal as JSON (--http, a COMMAND per session).

    Reads the gate's AIRLOCK_GATE_* settings.
    """
    from airlock.gate import ConfigError as GateConfigError
    from airlock.gate import Gate
    from airlock.mcp import ConfigError, ProxyConfig, run, serve_http

    try:
        settings = ProxyConfig.load(config)
        gate = Gate.from_env()
    except (ConfigError, GateConfigError) as exc:
        say(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    if http is not None:
        gate.close()  # made to check the settings; each HTTP session makes its own
        if allow_remote:
            say(
                f"warning: --allow-remote: anyone who reaches {host} proposes as the agent",
                err=True,
            )
        try:
            code = serve_http(
                settings, Gate.from_env, command, port=http, host=host, allow_remote=allow_remote
            )
        except ConfigError as exc:
            say(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        raise typer.Exit(code)
    try:
        code = run(settings, gate, command)
    finally:
        gate.close()
    raise typer.Exit(code)
