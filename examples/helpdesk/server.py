"""The help desk's MCP server (the SDK's FastMCP, over stdio): look orders up, refund them.

``python -m examples.helpdesk.server [--db PATH]``. Four tools, amounts in cents:

- ``find_order(order)``: the customer, what was paid and refunded;
- ``refund(order, amount)``: issues a refund and answers what it issued, with the
  ``amount`` it actually refunded (an approver may have edited the call);
- ``refunded_total(order)``: ``{"refunded": cents}``, the premise the proxy checks;
- ``find_refund(effect_key)``: did the refund with this effect key happen? The proxy's
  lookup after a crash.

It knows nothing about Airlock: ``airlock mcp proxy --config airlock-mcp.toml -- python
-m examples.helpdesk.server`` gates ``refund`` in front of it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mcp.server.fastmcp import FastMCP

from . import desk


def build(db: Path) -> FastMCP:
    """The server over the desk database at ``db``."""
    conn = desk.connect(db)
    server = FastMCP("helpdesk", log_level="WARNING")  # stderr is the demo's terminal

    @server.tool()
    def find_order(order: str) -> dict[str, Any]:
        """Look an order up: its customer, and what was paid and refunded (cents)."""
        return desk.find_order(conn, order)

    @server.tool()
    def refund(order: str, amount: int) -> dict[str, Any]:
        """Refund an order, in cents; answers the refund it issued."""
        return desk.refund(conn, order, amount)

    @server.tool()
    def refunded_total(order: str) -> dict[str, int]:
        """What was refunded on an order so far (cents)."""
        return {"refunded": desk.refunded_total(conn, order)}

    @server.tool()
    def find_refund(effect_key: str) -> bool:
        """Did the refund with this effect key (``refund:<order>``) happen?"""
        return desk.refunded_by_tool(conn, effect_key.removeprefix("refund:"))

    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.helpdesk.server", description=__doc__)
    parser.add_argument("--db", type=Path, default=desk.DEFAULT_DB, help="the desk's file")
    args = parser.parse_args(argv)
    build(args.db).run("stdio")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
