"""ASGI pieces shared by the HTTP apps (the checkpoint API and the web app).

:class:`BodyLimit` caps the size of a request body. Starlette reads a body whole into
memory (``Request.body``, ``Request.json``, url-encoded forms) and spools multipart file
parts to disk with no total bound, and FastAPI reads and parses a route's body *before*
it authenticates the caller or checks a CSRF token, so without a cap anyone who can
reach the port can make the process hold as much as they care to send.

This module must never log or keep a byte of a body.
"""

from __future__ import annotations

from typing import Final

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BodyLimit", "BodyTooLarge"]

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
        refused = declared is not None and not (
            declared.isascii() and declared.isdigit() and int(declared) <= self.max_bytes
        )
        received = 0

        async def capped() -> Message:
            nonlocal received
            if refused:
                raise BodyTooLarge(self.max_bytes)
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, capped, send)
