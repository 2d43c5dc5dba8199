"""The tools of an MCP server as the tool loop's tools: :mod:`airlock.agents` over a stdio
MCP session, usually to ``airlock mcp proxy`` in front of the real server (docs/mcp.md).

::

    proxy = ["airlock", "mcp", "proxy", "--config", "airlock-mcp.toml", "--"]
    with McpTools([*proxy, "python", "server.py"], env=environment) as mcp:
        agent = Agent(provider, mcp.tools, state=".airlock/agent-runs.db")
        result = agent.run("Refund order 881")   # Paused(...) while a person decides
        ...
        result = agent.resume(result.run_id)     # the same call again: the real result

Each tool the server lists becomes a :class:`~airlock.agents.Tool` whose function calls it
in the session. The proxy, not the loop, gates the calls (the loop sees every MCP tool as
``SAFE``); what it answers becomes what the loop does:

- ``_meta.airlock.status == "pending"`` → the function raises the gate's
  :class:`~airlock.gate.Pending` (``proposal_id``, ``url``): the run pauses, and
  ``resume`` calls the same tool with the same arguments, which the proxy answers with
  the status again, or with the server's real result once approved (run once, or its
  kept result);
- any other result with ``isError`` (a person rejected the call, the gate refused it,
  the server failed) → :class:`~airlock.agents.ToolError`: the model reads its text;
- the session is gone, or a call timed out → :class:`~airlock.gate.Unavailable`: the run
  pauses with no proposal and ``resume`` calls again (safe: the proxy keeps a gated
  call's result by its effect key, and never runs it twice);
- otherwise the result's text is what the model reads.

Why here and not in :mod:`airlock.agents` or an example: it reads the ``_meta.airlock``
the proxy of this package writes, so one package owns both ends of that wire; it needs
the ``mcp`` SDK, which this package (the ``mcp`` extra) already does, so the loop stays
in the base install with no optional import (import-linter forbids ``mcp`` there); and a
team that runs Airlock's loop against its MCP servers needs exactly this, typed and
tested, not a copy of an example.

It must never guess a pending call's outcome: only the proxy's answer to the same call
says what happened.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from contextlib import ExitStack, asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import ClientSession, McpError, StdioServerParameters, types
from mcp.client.stdio import stdio_client

from airlock.agents import Tool, ToolError
from airlock.gate import Pending, Unavailable

__all__ = ["McpTools"]

#: The code of the SDK's McpError for a request that timed out (its session uses
#: ``httpx.codes.REQUEST_TIMEOUT``); the session ended is ``types.CONNECTION_CLOSED``.
_TIMED_OUT: Final = 408


class McpTools:
    """A stdio MCP session, open between ``__enter__`` and ``__exit__``, and its tools.

    Args:
        command: the server's command line (usually ``airlock mcp proxy … -- server …``).
        env: the server's environment; None: the SDK's default (a few safe variables,
            not this process's environment, so pass the ``AIRLOCK_GATE_*`` settings).
        cwd: the server's working directory; None: this process's.
        names: only these tools, each of which the server must list; None: all.
        timeout: seconds a call may take before it counts as unanswered
            (:class:`~airlock.gate.Unavailable`); longer than the proxy's ``wait``.

    Raises (on enter):
        ValueError: ``E_CONFIG``: a named tool the server does not list, or a tool name
            the model APIs refuse (``[A-Za-z0-9_-]{1,64}``).
        OSError, McpError: the server could not be started or initialized.
    """

    def __init__(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        names: Collection[str] | None = None,
        timeout: float = 120.0,
    ) -> None:
        if not command:
            raise ValueError("E_CONFIG: no server command")
        self._params = StdioServerParameters(
            command=command[0],
            args=list(command[1:]),
            env=None if env is None else dict(env),
            cwd=cwd,
        )
        self._names = None if names is None else frozenset(names)
        self._timeout = timedelta(seconds=timeout)
        self._stack: ExitStack | None = None
        self._portal: BlockingPortal | None = None
        self._session: ClientSession | None = None
        self.tools: tuple[Tool, ...] = ()

    def __enter__(self) -> McpTools:
        stack = ExitStack()
        try:
            # The loop is synchronous and the SDK is async: the session lives in an event
            # loop on a thread of its own, entered and left by one task there.
            self._portal = stack.enter_context(start_blocking_portal())
            self._session = stack.enter_context(
                self._portal.wrap_async_context_manager(self._open())
            )
            listed = self._portal.call(self._list)
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        try:
            self.tools = tuple(self._tool(t) for t in listed)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the session (the server's stdin closes, so it exits)."""
        stack, self._stack, self._session = self._stack, None, None
        if stack is not None:
            stack.close()

    @asynccontextmanager
    async def _open(self) -> AsyncIterator[ClientSession]:
        async with (
            stdio_client(self._params) as (read, write),
            ClientSession(read, write, read_timeout_seconds=self._timeout) as session,
        ):
            await session.initialize()
            yield session

    async def _list(self) -> list[types.Tool]:
        assert self._session is not None
        tools: list[types.Tool] = []
        cursor: str | None = None
        while True:
            params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
            page = await self._session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.nextCursor
            if not cursor:
                break
        if self._names is not None:
            missing = self._names - {t.name for t in tools}
            if missing:
                raise ValueError(f"E_CONFIG: the server lists no tool {sorted(missing)[0]!r}")
            tools = [t for t in tools if t.name in self._names]
        return tools

    def _tool(self, listed: types.Tool) -> Tool:
        name = listed.name

        def call(**arguments: Any) -> str:
            return self._call(name, arguments)

        return Tool(name, listed.description or "", call, dict(listed.inputSchema))

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        """One call in the session, as the loop reads it (module docstring)."""
        portal, session = self._portal, self._session
        if portal is None or session is None:
            raise Unavailable(f"E_UNAVAILABLE: the MCP session to call {name} is closed")
        try:
            result = portal.call(session.call_tool, name, arguments)
        except McpError as exc:
            if exc.error.code in (types.CONNECTION_CLOSED, _TIMED_OUT):
                raise Unavailable(f"E_UNAVAILABLE: {name}: {exc.error.message}") from None
            raise ToolError(f"E_MCP: {name}: {exc.error.code}: {exc.error.message}") from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise Unavailable(f"E_UNAVAILABLE: {name}: the MCP session ended") from None
        return _read(name, result)


def _read(name: str, result: types.CallToolResult) -> str:
    """What the model reads of a result; raises for a pending or an error result."""
    airlock = (result.meta or {}).get("airlock")
    if isinstance(airlock, dict) and airlock.get("status") == "pending":
        proposal_id, url = airlock.get("proposal_id"), airlock.get("url")
        if not isinstance(proposal_id, str) or not isinstance(url, str):
            # Never paused on a proposal nobody can find, never read as a result either.
            raise ToolError(f"E_UPSTREAM: {name}: a pending result names no proposal")
        raise Pending(proposal_id, url, "pending")
    text = _text(result)
    if result.isError:
        raise ToolError(text or f"E_TOOL_FAILED: {name} answered an error")
    return text


def _text(result: types.CallToolResult) -> str:
    parts = []
    for content in result.content:
        if isinstance(content, types.TextContent):
            parts.append(content.text)
        else:
            parts.append(f"[{content.type} content]")
    if not parts and result.structuredContent is not None:
        return json.dumps(result.structuredContent)
    return "\n".join(parts)
