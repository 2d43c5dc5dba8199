"""Drive an ASGI app with a request body that never ends, counting what it reads.

A test client sends a body it holds in memory; an attacker streams one. This sends a
chunked POST (no ``Content-Length``) of ``total`` bytes, ``chunk`` at a time, and
returns the response status and how many bytes the app pulled through ``receive``
(a ``prefix`` makes the stream a valid start of a form, so a parser keeps reading).
"""

from __future__ import annotations

import asyncio
from typing import Any


def stream_body(
    app: Any,
    path: str,
    *,
    total: int,
    chunk: int = 16 * 1024,
    headers: list[tuple[bytes, bytes]] | None = None,
    prefix: bytes = b"",
) -> tuple[int, int]:
    """``(status, bytes_read)`` of one chunked POST to ``path``: ``prefix``, then ``x``
    up to ``total`` bytes."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), *(headers or [])],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    read = 0
    status: list[int] = []

    async def receive() -> dict[str, Any]:
        nonlocal read
        if read >= total:
            return {"type": "http.disconnect"}
        body = (prefix + b"x" * chunk)[:chunk] if read == 0 else b"x" * chunk
        read += chunk
        return {"type": "http.request", "body": body, "more_body": read < total}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    asyncio.run(app(scope, receive, send))
    return status[0], read
