"""An MCP proxy that puts an Airlock approval in front of the tools it is told to.

It is a raw JSON-RPC relay, not an MCP server of its own: each line the agent writes is
forwarded to the real server's stdin as the very bytes it read, and each line the server
writes reaches the agent as the very bytes it wrote, except

- a ``tools/call`` request naming a gated tool: answered by the proxy, through the gate
  (:mod:`airlock.gate`), with the server's real result once a person approved it;
- the answers to the proxy's own requests to the server (the forwarded gated call, its
  premise and lookup tools), which carry ids only the proxy uses.

Why a relay and not ``mcp.server.lowlevel.Server`` in front of a ``ClientSession``: such a
pair parses every message into the SDK's models and serialises it again, so key order,
unknown fields, ``_meta``, capability and protocol-version negotiation and any message
the SDK does not model would be re-made by the proxy; "every other message is
byte-identical to a direct connection" would then be a hope. The relay parses a line only
to decide whether it is a gated call, and the SDK's types validate what the proxy itself
reads and makes (``CallToolRequestParams``, ``CallToolResult``).

What the agent receives for a gated call, always as a tool result (a rejection or a
refusal is never a protocol error that would end its session): the server's result, with
``_meta.airlock.status = "executed"``; or a text saying it awaits approval, with
``_meta.airlock = {status, proposal_id, url}``; or, with ``isError`` true, why it was
rejected or refused (the premises that moved). The same call again returns the status,
runs it once when approved, or returns the kept result without a second run.

It must never forward a gated ``tools/call`` to the server except through the gate, and
never answer one on a guess: a premise or lookup tool that errors or omits a field is an
error, not a default. A line that cannot be read as one unambiguous JSON value (not
JSON, duplicate keys) or a batch holding a gated call is refused, never forwarded.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import secrets
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Final

from mcp import types

from airlock.gate import (
    EffectKeyConflict,
    Gate,
    InDoubt,
    Pending,
    Refused,
    Rejected,
    Unavailable,
    changed,
)
from airlock.gate import Error as GateError

from ._config import GatedTool, ProxyConfig, render
from .errors import AnswerError, ToolFailed, UpstreamError

__all__ = ["Proxy", "run"]

#: A line from either side is at most this long (a tool result can be large).
_LINE_LIMIT: Final = 32 << 20
#: How long a premise or lookup tool may take to answer.
_AUX_TIMEOUT_S: Final = 30.0
#: How long the server may take to exit once the agent is gone, before SIGTERM, SIGKILL.
_EXIT_GRACE_S: Final = 5.0
_INVALID_REQUEST: Final = -32600
_PARSE_ERROR: Final = -32700

#: The ``_meta`` of the agent's gated call being forwarded (its progress token).
_call_meta: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "_call_meta", default=None
)
#: Where the forwarded gated call notes the arguments it sent (a person may have edited
#: them): the caller reads them back after the gate returns.
_call_sent: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "_call_sent", default=None
)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _parse(line: bytes) -> Any:
    """The JSON value of a line; ValueError if it is not JSON or has a duplicate key
    (another reader could take the other value: ambiguous, so never forwarded)."""
    return json.loads(line, object_pairs_hook=_no_duplicates)


def _text_result(text: str, *, error: bool, airlock: dict[str, Any]) -> dict[str, Any]:
    result = types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        isError=error,
        _meta={"airlock": airlock},
    )
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


class _Results:
    """The results of gated calls that ran, by effect key: the same call again returns
    the result kept here, never a second run. One SQLite file; used from one thread."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS results ("
            " effect_key TEXT PRIMARY KEY, arguments_sha TEXT NOT NULL, result TEXT NOT NULL)"
        )

    def get(self, effect_key: str, arguments_sha: str) -> dict[str, Any] | None:
        row = self._db.execute(
            "SELECT result FROM results WHERE effect_key = ? AND arguments_sha = ?",
            (effect_key, arguments_sha),
        ).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def put(self, effect_key: str, arguments_sha: str, result: dict[str, Any]) -> None:
        self._db.execute(
            "INSERT OR IGNORE INTO results VALUES (?, ?, ?)",
            (effect_key, arguments_sha, json.dumps(result)),
        )

    def close(self) -> None:
        self._db.close()


def _with_status(
    result: dict[str, Any], status: dict[str, Any], asked: dict[str, Any], sent: dict[str, Any]
) -> dict[str, Any]:
    """The server's result with ``_meta.airlock`` set; when a person edited the call, the
    edit named there and in a first text block the model reads."""
    result = dict(result)
    edits = changed(asked, sent)
    if edits:
        status["edited"] = {
            "arguments": sent,
            "changes": [{"argument": c.field, "was": c.was, "now": c.now} for c in edits],
        }
        what = ", ".join(
            f"{c.field} was {json.dumps(c.was)}, now {json.dumps(c.now)}" for c in edits
        )
        note = {"type": "text", "text": f"A person edited this call before approving it ({what})."}
        result["content"] = [note, *(result.get("content") or [])]
    meta_out = dict(result.get("_meta") or {})
    meta_out["airlock"] = status
    result["_meta"] = meta_out
    return result


def _arguments_sha(tool: str, arguments: dict[str, Any]) -> str:
    data = json.dumps([tool, arguments], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(data.encode()).hexdigest()


class Proxy:
    """One proxy between an agent and a server subprocess: :meth:`relay` over lines, the
    agent on stdio (:meth:`serve`) or one session over HTTP (:mod:`._http`).

    Args:
        config: the gated tools (:class:`ProxyConfig`).
        gate: the gate the gated calls go through.
        command: the server's command line.
    """

    def __init__(self, config: ProxyConfig, gate: Gate, command: list[str]) -> None:
        if not command:
            raise ValueError("E_CONFIG: no server command")
        self.config = config
        self.gate = gate
        self.command = command
        self._prefix = f"airlock-{secrets.token_hex(6)}-"
        self._next = 0
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._guarded: dict[str, Callable[..., Any]] = {}
        self._ready = asyncio.Event()
        self._results = _Results(config.results)
        self._tasks: set[asyncio.Task[None]] = set()
        #: Gated tools with an output schema: a result without structured content must
        #: be an error for them (MCP: a client validates every other result).
        self._schemas: set[str] = set()
        #: Gated tools the server lists: a call of another is refused, nothing sent.
        self._listed: set[str] = set()
        self._broken: str | None = None
        for name, tool in config.tools.items():
            self._guarded[name] = self._guard(name, tool)

    # -- the gate's view of each tool ---------------------------------------------------

    def _guard(self, name: str, tool: GatedTool) -> Callable[..., Any]:
        premises = None
        if tool.premise is not None:
            premise = tool.premise

            def premises(**arguments: Any) -> dict[str, Any]:
                return self._read_premise(premise.tool, premise.arguments, premise.keep, arguments)

        lookup = None
        if tool.lookup is not None:
            found = tool.lookup

            def lookup(effect_key: str) -> bool:
                return self._ask_lookup(found.tool, found.argument, effect_key)

        def named(template: str) -> Callable[..., str]:
            return lambda **arguments: render(template, arguments)

        def target(**arguments: Any) -> str:
            value = arguments.get(tool.target)
            if not isinstance(value, str):
                raise ValueError(f"target argument {tool.target!r} is not a string")
            return value

        async def forward(**arguments: Any) -> dict[str, Any]:
            params: dict[str, Any] = {"name": name, "arguments": arguments}
            meta = _call_meta.get()
            if meta is not None:
                params["_meta"] = meta
            sent = _call_sent.get()
            if sent is not None:
                sent.update(arguments)
            result = await self._request("tools/call", params)
            try:
                types.CallToolResult.model_validate(result)
            except ValueError:
                raise UpstreamError(f"E_UPSTREAM: {name} answered no tool result") from None
            if result.get("isError"):
                raise ToolFailed(result)
            return result

        return self.gate.guard(
            risk=tool.risk,
            target=target,
            effect_key=named(tool.effect_key),
            premises=premises,
            lookup=lookup,
            summary=None if tool.summary is None else named(tool.summary),
            tool=name,
            wait=self.config.wait,
            editable=tool.editable,
        )(forward)

    def _from_thread(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """A request to the server from the gate's worker thread (premises, lookups)."""
        future = asyncio.run_coroutine_threadsafe(self._request(method, params), self._loop)
        return future.result(_AUX_TIMEOUT_S)

    def _call_tool(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = self._from_thread("tools/call", {"name": tool, "arguments": arguments})
        parsed = types.CallToolResult.model_validate(result)
        if parsed.isError:
            raise AnswerError(f"E_PREMISE_TOOL: {tool} answered an error")
        if isinstance(parsed.structuredContent, dict):
            return parsed.structuredContent
        texts = [c.text for c in parsed.content if isinstance(c, types.TextContent)]
        if len(texts) == 1:
            try:
                value = json.loads(texts[0])
            except ValueError:
                value = None
            if isinstance(value, dict):
                return value
        raise AnswerError(f"E_PREMISE_TOOL: {tool} answered no JSON object")

    def _read_premise(
        self,
        tool: str,
        mapping: dict[str, str],
        keep: tuple[str, ...],
        arguments: dict[str, Any],
    ) -> dict[str, Any]:
        missing = [a for a in mapping.values() if a not in arguments]
        if missing:
            raise AnswerError(f"E_PREMISE_TOOL: the call has no argument {missing[0]!r}")
        answer = self._call_tool(tool, {k: arguments[a] for k, a in mapping.items()})
        out = {}
        for field in keep:
            if field not in answer:
                raise AnswerError(f"E_PREMISE_TOOL: {tool} answered no {field!r}")
            out[field] = answer[field]
        return out

    def _ask_lookup(self, tool: str, argument: str, effect_key: str) -> bool:
        answer = self._call_tool(tool, {argument: effect_key})
        value = answer.get("result")
        # A lookup that answers anything but a boolean settles nothing (the gate then
        # leaves the call in_doubt for a person).
        if not isinstance(value, bool) or len(answer) != 1:
            raise AnswerError(f"E_LOOKUP: {tool} answered no boolean")
        return value

    # -- the wire -----------------------------------------------------------------------

    async def _request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send the proxy's own request to the server; its ``result``, or UpstreamError."""
        await self._ready.wait()
        self._next += 1
        request_id = f"{self._prefix}{self._next}"
        future: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        self._waiting[request_id] = future
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        try:
            await self._to_server(json.dumps(message).encode() + b"\n")
            answer = await future
        finally:
            self._waiting.pop(request_id, None)
        if "error" in answer:
            error = answer["error"]
            raise UpstreamError(f"E_UPSTREAM: {method}: {error.get('message', error)}")
        result = answer.get("result")
        if not isinstance(result, dict):
            raise UpstreamError(f"E_UPSTREAM: {method}: no result")
        return result

    async def _to_server(self, line: bytes) -> None:
        assert self._child.stdin is not None
        self._child.stdin.write(line)
        await self._child.stdin.drain()

    def _to_agent(self, line: bytes) -> None:
        self._send(line)

    def _answer(self, request_id: Any, result: dict[str, Any]) -> None:
        message = {"jsonrpc": "2.0", "id": request_id, "result": result}
        self._to_agent(json.dumps(message).encode() + b"\n")

    def _protocol_error(self, request_id: Any, message: str, code: int = _INVALID_REQUEST) -> None:
        error = {"code": code, "message": message}
        answer = {"jsonrpc": "2.0", "id": request_id, "error": error}
        self._to_agent(json.dumps(answer).encode() + b"\n")

    def _is_gated(self, value: Any) -> bool:
        return (
            isinstance(value, dict)
            and value.get("method") == "tools/call"
            and isinstance(value.get("params"), dict)
            and value["params"].get("name") in self._guarded
        )

    async def _from_agent(self, line: bytes) -> None:
        try:
            value = _parse(line)
        except ValueError:
            # What the proxy cannot read, a lenient server might (a duplicate key, an
            # escaped method name): it could be a gated call, so it is never forwarded.
            self._protocol_error(None, "E_PARSE: not one plain JSON value", _PARSE_ERROR)
            return
        if isinstance(value, list) and any(self._is_gated(v) for v in value):
            self._protocol_error(None, "E_BATCH: a gated tools/call must not be in a batch")
            return
        if self._is_gated(value):
            if "id" not in value:
                return  # a notification runs nothing and is answered by nothing
            task = asyncio.create_task(self._gated(value))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        await self._to_server(line)
        if isinstance(value, dict) and value.get("method") == "notifications/initialized":
            self._ready.set()

    def _from_server(self, line: bytes) -> None:
        try:
            value = _parse(line)
        except ValueError:
            value = None
        if (
            isinstance(value, dict)
            and "method" not in value
            and isinstance(value.get("id"), str)
            and value["id"] in self._waiting
        ):
            future = self._waiting[value["id"]]
            if not future.done():
                future.set_result(value)
            return
        self._to_agent(line)

    # -- a gated call ---------------------------------------------------------------------

    async def _gated(self, request: dict[str, Any]) -> None:
        request_id = request["id"]
        try:
            params = types.CallToolRequestParams.model_validate(request["params"])
        except ValueError:
            self._protocol_error(request_id, "E_INVALID: tools/call params are not valid")
            return
        result = await self._run_gated(params, request["params"].get("_meta"))
        self._answer(request_id, result)

    async def _run_gated(self, params: Any, meta: Any) -> dict[str, Any]:
        name = params.name
        arguments = dict(params.arguments or {})
        await self._recovered.wait()
        if self._broken is not None:
            return _text_result(self._broken, error=True, airlock={"status": "refused"})
        if name not in self._listed:
            text = f"E_UNKNOWN_TOOL: the server lists no tool {name!r}"
            return _text_result(text, error=True, airlock={"status": "refused"})
        sha = _arguments_sha(name, arguments)
        try:
            key = render(self.config.tools[name].effect_key, arguments)
        except ValueError as exc:
            return _text_result(f"E_ARGUMENTS: {exc}", error=True, airlock={"status": "invalid"})
        kept = self._results.get(key, sha)
        if kept is not None:
            return kept
        _call_meta.set(meta if isinstance(meta, dict) else None)
        sent: dict[str, Any] = {}
        _call_sent.set(sent)
        status: dict[str, Any]
        outcome = "executed"
        try:
            result: dict[str, Any] = await self._guarded[name](**arguments)
        except ToolFailed as failed:
            result, outcome = failed.result, "failed"
        except Pending as p:
            url = p.url
            if self.config.approval_url is not None:
                url = render(self.config.approval_url, {"proposal_id": p.proposal_id})
            status = {"status": "pending", "proposal_id": p.proposal_id, "url": url}
            text = (
                f"E_PENDING: {name} awaits a person's approval ({p.proposal_id}, {url}); "
                "call it again with the same arguments to get its result"
            )
            return _text_result(text, error=name in self._schemas, airlock=status)
        except Rejected as r:
            status = {"status": "rejected", "proposal_id": r.proposal_id, "by": r.by}
            text = f"E_REJECTED: {name} was rejected by {r.by}: {r.reason_code} {r.note}".strip()
            return _text_result(text, error=True, airlock=status)
        except Refused as r:
            status = {
                "status": "refused",
                "proposal_id": r.proposal_id,
                "code": r.code,
            }
            if r.changes:
                status["changes"] = [
                    {"field": c.field, "was": c.was, "now": c.now} for c in r.changes
                ]
            return _text_result(f"{r.code}: {r.detail}", error=True, airlock=status)
        except (EffectKeyConflict, InDoubt, Unavailable, GateError) as exc:
            found = getattr(exc, "proposal_id", None)
            status = {"status": "refused", "proposal_id": found}
            return _text_result(str(exc), error=True, airlock=status)
        except (AnswerError, UpstreamError, TypeError, ValueError, TimeoutError) as exc:
            # Bad arguments, or a premise tool that could not be read: nothing was run.
            code = "" if str(exc).startswith("E_") else "E_ARGUMENTS: "
            return _text_result(f"{code}{exc}", error=True, airlock={"status": "refused"})
        result = _with_status(result, {"status": outcome, "effect_key": key}, arguments, sent)
        self._results.put(key, sha, result)
        return result

    # -- running ------------------------------------------------------------------------

    async def _learn_tools(self) -> None:
        """Note which gated tools the server lists, and which of those declare an
        ``outputSchema`` (the proxy's own tools/list, all pages)."""
        cursor: str | None = None
        while True:
            page = await self._request("tools/list", {} if cursor is None else {"cursor": cursor})
            listed = types.ListToolsResult.model_validate(page)
            for tool in listed.tools:
                if tool.name in self._guarded:
                    self._listed.add(tool.name)
                    if tool.outputSchema:
                        self._schemas.add(tool.name)
            cursor = listed.nextCursor
            if not cursor:
                return

    async def _start(self) -> None:
        """Learn the tools, then recover (it asks the lookup tools): both once the
        agent's initialize is done. A failure refuses every gated call (fail closed)."""
        await self._ready.wait()
        try:
            await self._learn_tools()
            await asyncio.to_thread(self.gate.recover)
        except Exception as exc:
            self._broken = f"E_UNAVAILABLE: the proxy could not start: {type(exc).__name__}: {exc}"
        finally:
            self._recovered.set()

    async def serve(self, agent_in: asyncio.StreamReader, agent_out: Any) -> int:
        """Relay an agent on a byte stream (stdio) until it closes its input or the
        server exits; the server's exit code."""

        async def lines() -> AsyncIterator[bytes]:
            while line := await agent_in.readline():
                yield line

        def send(line: bytes) -> None:
            agent_out.write(line)
            agent_out.flush()

        return await self.relay(lines(), send)

    async def relay(self, agent_lines: AsyncIterator[bytes], send: Callable[[bytes], None]) -> int:
        """The relay under every transport: start the server, pass each of
        ``agent_lines`` (one JSON-RPC message each) to it or through the gate, and each
        line the server writes, and the proxy's own answers, to ``send``. Until the
        lines end or the server exits; the server's exit code. Cancelled, it kills the
        server."""
        self._loop = asyncio.get_running_loop()
        self._send = send
        self._recovered = asyncio.Event()
        self._child = await asyncio.create_subprocess_exec(
            *self.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=_LINE_LIMIT,
        )
        recovery = asyncio.create_task(self._start())

        async def agent_side() -> None:
            async for line in agent_lines:
                await self._from_agent(line)
            assert self._child.stdin is not None
            self._child.stdin.close()
            # MCP stdio shutdown: the server may take a while to exit, then is stopped.
            for stop in (self._child.terminate, self._child.kill):
                try:
                    await asyncio.wait_for(self._child.wait(), _EXIT_GRACE_S)
                    return
                except TimeoutError:
                    stop()

        async def server_side() -> None:
            assert self._child.stdout is not None
            while line := await self._child.stdout.readline():
                self._from_server(line)

        agent = asyncio.create_task(agent_side())
        try:
            await server_side()
            return await self._child.wait()
        finally:
            if self._child.returncode is None:
                self._child.kill()
            for future in self._waiting.values():
                if not future.done():
                    future.set_exception(UpstreamError("E_UPSTREAM: the server exited"))
            for task in (agent, recovery, *self._tasks):
                task.cancel()
            self._results.close()


async def _stdin_reader() -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_LINE_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


def run(config: ProxyConfig, gate: Gate, command: list[str]) -> int:
    """Serve the agent on this process's stdin/stdout in front of ``command``; the
    server's exit code."""

    async def main() -> int:
        proxy = Proxy(config, gate, command)
        return await proxy.serve(await _stdin_reader(), sys.stdout.buffer)

    return asyncio.run(main())
