"""The proxy's agent side over MCP streamable HTTP: the SDK's transport in front of the
same relay as stdio (:meth:`Proxy.relay`).

Each agent session (an ``initialize`` without an ``Mcp-Session-Id``) gets what a stdio
proxy is: its own server subprocess, its own gate, its own recovery at start; the
results of gated calls that ran are kept in the one ``results`` file, so a call one
session ran is never run again for another. Only the agent's side differs: the SDK's
``StreamableHTTPSessionManager`` and ``StreamableHTTPServerTransport`` parse each HTTP
body into a ``JSONRPCMessage`` (answering a body that is not one with a JSON-RPC error),
route each answer to the request it answers, and keep the session ids. The relay gets
each message as one JSON line and gives back lines; what reaches the server is the
message as the transport parsed it, so the proxy and the server read the same value.

It must never bind a non-loopback address unless told to (whoever reaches it proposes
with the agent's token), and never start a server subprocess before an agent's session
sends its first message (a bad request costs no process).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import math
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import anyio
import uvicorn
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.models import InitializationOptions
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from airlock.gate import Gate
from airlock.text import inert_log_config

from ._config import ProxyConfig
from ._proxy import Proxy
from .errors import ConfigError

__all__ = ["PATH", "serve_http"]

#: Where the agent's MCP endpoint is: ``http://HOST:PORT/mcp``.
PATH: Final = "/mcp"
_LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")
_log = logging.getLogger("airlock.mcp")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def _security(host: str, port: int) -> TransportSecuritySettings:
    """Host and Origin checks (DNS rebinding): a page in the agent's browser that
    reaches the port under a name of its own is refused."""
    names = {*_LOOPBACK_NAMES, f"[{host}]" if ":" in host else host}
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=sorted(f"{name}:{port}" for name in names),
        allowed_origins=sorted(f"http://{name}:{port}" for name in names),
    )


class _SessionEndIsNoError(logging.Filter):
    """Drops the one error the SDK's transport logs each time a session with an open GET
    stream ends (its reader closed under it): that is how a session ends, not a fault."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (
            isinstance(exc, anyio.ClosedResourceError)
            and record.getMessage() == "Error in standalone SSE writer"
        )


class _Session:
    """One agent session's side of the relay: messages from the transport become
    lines, and lines the relay sends become messages to the transport."""

    def __init__(self, out: MemoryObjectSendStream[SessionMessage]) -> None:
        self._out = out
        #: progress token → the agent's request that named it (its stream on HTTP)
        self._progress: dict[str | int, types.RequestId] = {}

    async def lines(
        self,
        first: SessionMessage | Exception,
        read_stream: MemoryObjectReceiveStream[SessionMessage | Exception],
    ) -> AsyncIterator[bytes]:
        item = first
        while True:
            # An Exception: the transport failed a request and has answered it already.
            if isinstance(item, SessionMessage):
                self._note_progress(item.message.root)
                # exclude_unset: the members the agent sent, null ones included.
                dumped = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                yield dumped.encode() + b"\n"
            try:
                item = await read_stream.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return

    def _note_progress(self, message: Any) -> None:
        if isinstance(message, types.JSONRPCRequest) and isinstance(message.params, dict):
            meta = message.params.get("_meta")
            token = meta.get("progressToken") if isinstance(meta, dict) else None
            if isinstance(token, str | int):
                self._progress[token] = message.id

    def send(self, line: bytes) -> None:
        """Queue a line of the relay's for the agent (the relay writes without waiting)."""
        try:
            message = types.JSONRPCMessage.model_validate_json(line)
        except ValidationError:
            # On stdio it would pass as bytes; HTTP carries only JSON-RPC messages.
            _log.warning("E_UPSTREAM: dropped a line that is no JSON-RPC message")
            return
        root = message.root
        related: types.RequestId | None = None
        if isinstance(root, types.JSONRPCNotification) and root.method == "notifications/progress":
            token = (root.params or {}).get("progressToken")
            related = self._progress.get(token) if isinstance(token, str | int) else None
        elif isinstance(root, types.JSONRPCResponse | types.JSONRPCError):
            self._progress = {t: i for t, i in self._progress.items() if i != root.id}
        # Without a related request, a server's own request or notification goes on the
        # agent's GET stream.
        metadata = None if related is None else ServerMessageMetadata(related_request_id=related)
        self._out.send_nowait(SessionMessage(message, metadata=metadata))


class _Relays(Server[Any, Any]):
    """What the SDK's session manager runs once per agent session: a :class:`Proxy`
    relay with its own server subprocess and gate. A subclass of the SDK's server only
    because that is the manager's interface; it answers nothing itself."""

    def __init__(
        self, config: ProxyConfig, make_gate: Callable[[], Gate], command: list[str]
    ) -> None:
        super().__init__("airlock-mcp-proxy")
        self._config = config
        self._make_gate = make_gate
        self._command = command

    async def run(
        self,
        read_stream: MemoryObjectReceiveStream[SessionMessage | Exception],
        write_stream: MemoryObjectSendStream[SessionMessage],
        initialization_options: InitializationOptions,
        raise_exceptions: bool = False,
        stateless: bool = False,
    ) -> None:
        try:
            first = await read_stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return  # the opening request was refused: no server was started
        gate = await anyio.to_thread.run_sync(self._make_gate)
        out, to_agent = anyio.create_memory_object_stream[SessionMessage](math.inf)
        session = _Session(out)
        try:
            proxy = Proxy(self._config, gate, self._command)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(_pump, to_agent, write_stream)
                await proxy.relay(session.lines(first, read_stream), session.send)
                tasks.cancel_scope.cancel()
        finally:
            out.close()
            gate.close()


async def _pump(
    source: MemoryObjectReceiveStream[SessionMessage],
    sink: MemoryObjectSendStream[SessionMessage],
) -> None:
    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
        async for message in source:
            await sink.send(message)


class _Endpoint:
    """The ASGI app at :data:`PATH` (a class, so Starlette hands it every method)."""

    def __init__(self, manager: StreamableHTTPSessionManager) -> None:
        self._manager = manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._manager.handle_request(scope, receive, send)


def app(
    config: ProxyConfig,
    make_gate: Callable[[], Gate],
    command: list[str],
    *,
    host: str,
    port: int,
) -> Starlette:
    """The proxy as an ASGI app serving :data:`PATH` (see :func:`serve_http`)."""
    manager = StreamableHTTPSessionManager(
        app=_Relays(config, make_gate, command),
        json_response=False,
        stateless=False,
        security_settings=_security(host, port),
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    return Starlette(routes=[Route(PATH, endpoint=_Endpoint(manager))], lifespan=lifespan)


def serve_http(
    config: ProxyConfig,
    make_gate: Callable[[], Gate],
    command: list[str],
    *,
    port: int,
    host: str = "127.0.0.1",
    allow_remote: bool = False,
) -> int:
    """Serve agents over MCP streamable HTTP at ``http://host:port/mcp``, each session
    in front of its own ``command`` subprocess, until stopped (SIGINT, SIGTERM); 0.

    Args:
        make_gate: makes a session's gate; closed when the session ends.
        allow_remote: bind a ``host`` that is not a loopback address.

    Raises:
        ConfigError: ``command`` is empty, ``port`` is not 1–65535, or ``host`` is not
            loopback and ``allow_remote`` is false.
    """
    if not command:
        raise ConfigError("E_CONFIG: no server command")
    if not 0 < port < 65536:
        raise ConfigError(f"E_CONFIG: --http {port} is not a TCP port")
    if not _is_loopback(host) and not allow_remote:
        raise ConfigError(
            f"E_CONFIG: --host {host} is not a loopback address (pass --allow-remote)"
        )
    logging.getLogger("mcp.server.streamable_http").addFilter(_SessionEndIsNoError())
    server = uvicorn.Server(
        uvicorn.Config(
            app(config, make_gate, command, host=host, port=port),
            host=host,
            port=port,
            lifespan="on",
            log_level="warning",
            # Every line escaped (airlock.text): the SDK logs a refused request's Host.
            log_config=inert_log_config("WARNING"),
            access_log=False,
            # An agent's open GET stream would otherwise hold the shutdown forever.
            timeout_graceful_shutdown=5,
        )
    )
    server.run()
    return 0
