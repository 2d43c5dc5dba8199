"""A tiny MCP refunds server (the SDK's FastMCP) for the proxy's tests.

``python refunds_server.py COUNTER``: each ``refund`` appends its order to COUNTER, so
the file, not the proxy, says how often it ran; each start appends a line to
COUNTER.starts. ``refunded_total`` is the premise tool, ``find_refund`` the lookup tool,
``echo`` an ungated tool, ``steps`` one that reports progress; ``broken_premise``,
``partial_premise`` and ``garbage_lookup`` answer what the proxy must not trust.
"""

from __future__ import annotations

import sys
from pathlib import Path

COUNTER = Path(sys.argv[1])
# A start is counted before the slow import, so a server stopped at once counts too.
with COUNTER.with_suffix(".starts").open("a") as starts:
    starts.write("start\n")

from mcp.server.fastmcp import Context, FastMCP  # noqa: E402

server = FastMCP("refunds")


def _refunds() -> list[str]:
    return COUNTER.read_text().split() if COUNTER.exists() else []


@server.tool()
def refund(order: str, amount: int) -> str:
    """Refund an order (minor units)."""
    with COUNTER.open("a") as out:
        out.write(f"{order}:{amount}\n")
    return f"refunded {amount} on {order}"


@server.tool()
def refunded_total(order: str) -> dict[str, int]:
    """What was refunded on an order so far."""
    total = sum(int(line.split(":")[1]) for line in _refunds() if line.split(":")[0] == order)
    return {"refunded": total}


@server.tool()
def find_refund(effect_key: str) -> bool:
    """Did the refund with this effect key happen?"""
    order = effect_key.removeprefix("refund:")
    return any(line.split(":")[0] == order for line in _refunds())


@server.tool()
def broken_premise(order: str) -> dict[str, int]:
    """A premise tool that fails."""
    raise RuntimeError("the ledger is down")


@server.tool()
def partial_premise(order: str) -> dict[str, int]:
    """A premise tool whose answer lacks the field the config keeps."""
    return {"other": 1}


@server.tool()
def garbage_lookup(effect_key: str) -> str:
    """A lookup tool that answers no boolean."""
    return "maybe"


@server.tool()
def echo(text: str) -> str:
    """Say it back."""
    return text


@server.tool()
async def steps(n: int, ctx: Context) -> str:  # type: ignore[type-arg]
    """Report n steps of progress, then say done."""
    for i in range(n):
        await ctx.report_progress(i + 1, n)
    return "done"


if __name__ == "__main__":
    server.run("stdio")
