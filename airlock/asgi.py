"""ASGI pieces shared by the HTTP apps (the checkpoint API and the web app).

:class:`HostAllowlist` answers 400 to a request whose ``Host`` is not one of the names
the app is configured to be reached by: a web page on ``evil.example`` whose name
resolves to 127.0.0.1 (DNS rebinding) reaches a loopback server with ``Host:
evil.example``, and the browser treats the answers as that page's own.

:class:`BodyLimit` caps the size of a request body. Starlette reads a body whole into
memory (``Request.body``, ``Request.json``, url-encoded forms) and spools multipart file
parts to disk with no total bound, and FastAPI reads and parses a route's body *before*
it authenticates the caller or checks a CSRF token, so without a cap anyone who can
reach the port can make the process hold as much as they care to send.

This module must never log or keep a byte of a body.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "LOOPBACK_HOSTS",
    "BodyLimit",
    "BodyTooLarge",
    "HostAllowlist",
    "capped_receive",
    "host_name",
]

#: The names of this machine's loopback interface: the default allowlist.
LOOPBACK_HOSTS: Final = ("localhost", "127.0.0.1", "::1")

_TOO_LARGE: Final = 413


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` when a body passes the cap, before the bytes past it are
    taken in. An HTTPException, so the app's own handler answers it (413) in the app's
    usual shape, and FastAPI's body parsing lets it through as it is."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(_TOO_LARGE, f"the request body is over {max_bytes} bytes")


class BodyLimit:
    """Refuse a request body over ``max_bytes``: at the first read when the declared
    ``Content-Length`` is over it (or not a number), else as soon as the bytes received
    pass it (a chunked body declares no length)."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        await self.app(scope, capped_receive(receive, declared, self.max_bytes), send)


def capped_receive(receive: Receive, declared: str | None, max_bytes: int) -> Receive:
    """``receive`` that raises :class:`BodyTooLarge` at the first read when the declared
    ``Content-Length`` is over ``max_bytes`` (or not a number), else as soon as the bytes
    received pass it."""
    refused = declared is not None and not (
        declared.isascii() and declared.isdigit() and int(declared) <= max_bytes
    )
    received = 0

    async def capped() -> Message:
        nonlocal received
        if refused:
            raise BodyTooLarge(max_bytes)
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > max_bytes:
                raise BodyTooLarge(max_bytes)
        return message

    return capped


def host_name(host: str) -> str | None:
    """The name in a ``Host`` header value (RFC 9110 §7.2: ``uri-host [":" port]``),
    lowercase, an IPv6 literal without its brackets; None when it is not of that form."""
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            return None
        name, rest = host[1:end], host[end + 1 :]
        if rest and not (rest.startswith(":") and _is_port(rest[1:])):
            return None
    else:
        name, colon, port = host.partition(":")
        if colon and not _is_port(port):
            return None
    if not name or not name.isascii() or not name.isprintable() or " " in name:
        return None
    return name.lower()


def _is_port(port: str) -> bool:
    return port.isascii() and port.isdigit() and len(port) <= 5


class HostAllowlist:
    """Answer 400 with ``body`` to a request whose ``Host`` names none of ``hosts``
    (names, IPv4 or IPv6 literals; compared without the port, case-insensitively).
    A request with no ``Host`` (HTTP/1.0) or a malformed one is refused too."""

    def __init__(
        self, app: ASGIApp, *, hosts: Iterable[str], body: bytes, content_type: str
    ) -> None:
        self.app = app
        self.hosts = frozenset(h.lower().strip("[]") for h in hosts)
        if not self.hosts:
            raise ValueError("an empty host allowlist would refuse every request")
        self.body = body
        self.content_type = content_type.encode("latin-1")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = Headers(scope=scope).get("host")
        if host is not None and host_name(host) in self.hosts:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await send(
            {
                "type": "http.response.start",
                "status": 400,
                "headers": [
                    (b"content-type", self.content_type),
                    (b"content-length", str(len(self.body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": self.body})
