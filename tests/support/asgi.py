"""Drive an ASGI app directly, as a server would hand it a request.

A test client sends a body it holds in memory and re-encodes the path; an attacker
streams a body, and a server hands over the path it decoded. :func:`stream_body` sends a
chunked POST (no ``Content-Length``) of ``total`` bytes, ``chunk`` at a time, and
returns the response status and how many bytes the app pulled through ``receive`` (a
``prefix`` makes the stream a valid start of a form, so a parser keeps reading);
:func:`raw_get` sends one GET with the path exactly as given.

Each request runs on an event loop in a thread of its own: the browser tests' Playwright
keeps a loop running in the main thread, where ``asyncio.run`` refuses to start.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any


def _scope(method: str, path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }


def _run(coroutine: Coroutine[Any, Any, None]) -> None:
    failed: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(coroutine)
        except BaseException as exc:  # re-raised in the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=target, name="asgi-test-request")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]


def _serve(app: Any, scope: dict[str, Any], receive: Any) -> int:
    status: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    _run(app(scope, receive, send))
    return status[0]


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
    read = 0

    async def receive() -> dict[str, Any]:
        nonlocal read
        if read >= total:
            return {"type": "http.disconnect"}
        body = (prefix + b"x" * chunk)[:chunk] if read == 0 else b"x" * chunk
        read += chunk
        return {"type": "http.request", "body": body, "more_body": read < total}

    status = _serve(app, _scope("POST", path, headers or []), receive)
    return status, read


def raw_get(app: Any, path: str, *, headers: list[tuple[bytes, bytes]] | None = None) -> int:
    """The status of one GET of ``path`` exactly as given (a server's decoded path)."""

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    return _serve(app, _scope("GET", path, headers or []), receive)
