"""A uvicorn server that runs a callback as soon as a stop is asked for.

Imported only by the commands that serve (uvicorn is heavy for ``airlock --help``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from types import FrameType

import uvicorn

__all__ = ["ServerAnsweringOnStop"]


class ServerAnsweringOnStop(uvicorn.Server):
    """uvicorn's server, which on SIGTERM/SIGINT also answers open feed long-polls.

    An executor's long-poll waits up to feed_max_wait (30 s) for an approval. Left alone,
    a stop would wait the graceful timeout for it, then cut it without an answer; now the
    poll returns what it has (nothing new, the same cursor) and the stop is immediate.
    The feed is at-least-once and the executor keeps its cursor in its own ledger, so
    either way nothing is lost; this way a restart is quick and every request answered.
    """

    def __init__(self, config: uvicorn.Config, *, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_exit = on_exit
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # A signal handler runs between two bytecodes of the loop's own thread, which may
        # hold the signal's lock then: hand the wake-up to the loop instead of taking it.
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already closed
                self._loop.call_soon_threadsafe(self._on_exit)
        super().handle_exit(sig, frame)
