"""Waking long-polls across checkpoint processes: PostgreSQL ``LISTEN``/``NOTIFY``.

Checkpoint replicas on one PostgreSQL database serve one system: an approval committed
by one process must wake the executor's long-poll waiting on another. :func:`notify`
queues a ``NOTIFY`` in the caller's transaction (the one that takes a feed seq,
``_tx.feed_entry``), so PostgreSQL sends it only if that transaction commits.
:class:`Listener` holds one connection per process that ``LISTEN``\\ s and calls this
process's callbacks (:meth:`FeedSignal.bump`) from its own thread, and
:class:`FeedSignal` wakes the long-polls waiting in this process.

A wake is a hint, never the data: a woken long-poll re-reads the feed after its cursor,
so a spurious wake costs one query. A missed one (the listener's connection dropped
between a commit and its reconnect) costs at most the long-poll's one-second re-read
(``routes.feed``): approvals are never lost, only late. After every (re)connect the
listener calls each callback once, for whatever it may have missed.

On SQLite (one process by design) there is no listener: the committing thread wakes its
own process's waiters (``Checkpoint.on_change``). This module never reads or writes a
table.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection

if TYPE_CHECKING:
    import psycopg

__all__ = ["FEED", "LIMITS", "FeedSignal", "Listener", "notify"]

_log = logging.getLogger("airlock.checkpoint.wake")

#: The channel of feed changes (an approval issued or revoked).
FEED: Final = "airlock_feed"
#: The channel of refusal budgets spent (``limits.RefusalBudgets``).
LIMITS: Final = "airlock_limits"
_CHANNELS: Final = frozenset({FEED, LIMITS})
#: What the listener's connection calls itself in ``pg_stat_activity``.
APPLICATION_NAME: Final = "airlock-checkpoint-listener"
#: Seconds between checks of the stop flag while no notification arrives; also how
#: often an idle connection is pinged (a dead peer that sent no RST is found by it).
_TICK: Final = 0.25
_PING_EVERY: Final = 30.0
#: Reconnect delays, seconds: doubling from the first to the last.
_BACKOFF_FIRST: Final = 0.1
_BACKOFF_MAX: Final = 5.0


def notify(conn: Connection, channel: str = FEED, payload: str | None = None) -> None:
    """Queue a notification on ``channel`` in ``conn``'s transaction (PostgreSQL sends it
    at commit, never on rollback); nothing on SQLite."""
    if conn.dialect.name != "postgresql":
        return
    if channel not in _CHANNELS:  # names go into SQL: only ours
        raise ValueError(f"unknown channel {channel!r}")
    conn.execute(
        sa.text("SELECT pg_notify(:channel, :payload)"),
        {"channel": channel, "payload": payload or ""},
    )


def _conninfo(url: sa.URL) -> str:
    """The libpq URI of a SQLAlchemy PostgreSQL URL (psycopg takes no ``+driver``)."""
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


class Listener:
    """One ``LISTEN`` connection and the thread that serves it.

    Args:
        url: the checkpoint's PostgreSQL URL (``engine.url``).
        callbacks: per channel, called with the notification's payload ("" after a
            (re)connect) from the listener's thread; they must be quick and thread-safe.
    """

    def __init__(self, url: sa.URL, callbacks: Mapping[str, Callable[[str], None]]) -> None:
        unknown = set(callbacks) - _CHANNELS
        if unknown:
            raise ValueError(f"unknown channels {sorted(unknown)}")
        self._conninfo = _conninfo(url)
        self._callbacks = dict(callbacks)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Connections made so far (1 after the first; each reconnect adds one).
        self.connections = 0
        #: Set while the connection listens: a test waits for it, an operator reads it.
        self.listening = threading.Event()

    def start(self) -> None:
        """Start the thread (it connects, and reconnects, on its own)."""
        self._thread = threading.Thread(target=self._run, name="checkpoint-listener", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and close its connection (within about ``_TICK`` seconds)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        delay = _BACKOFF_FIRST
        while not self._stop.is_set():
            try:
                self._serve()
                delay = _BACKOFF_FIRST
            except Exception as exc:  # any failure: reconnect; the re-read covers the gap
                self.listening.clear()
                _log.warning("feed listener: %s; reconnecting in %.1f s", type(exc).__name__, delay)
                self._stop.wait(delay)  # a backoff, cut short by stop
                delay = min(_BACKOFF_MAX, delay * 2)

    def _serve(self) -> None:
        import psycopg  # noqa: PLC0415 - a checkpoint on SQLite never loads the driver

        with psycopg.connect(
            self._conninfo,
            autocommit=True,
            application_name=APPLICATION_NAME,
            connect_timeout=10,
            # A peer gone without a word (no RST) is found by TCP keepalives and the ping.
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
        ) as conn:
            for channel in sorted(self._callbacks):
                conn.execute(f"LISTEN {channel}")  # a name from _CHANNELS
            self.connections += 1
            self.listening.set()
            # Whatever was sent while no connection listened is not coming: wake all once.
            for callback in self._callbacks.values():
                callback("")
            self._loop(conn)
        self.listening.clear()

    def _loop(self, conn: psycopg.Connection[Any]) -> None:
        idle = 0.0
        while not self._stop.is_set():
            got = False
            for note in conn.notifies(timeout=_TICK):
                got = True
                callback = self._callbacks.get(note.channel)
                if callback is not None:
                    callback(note.payload)
            idle = 0.0 if got else idle + _TICK
            if idle >= _PING_EVERY:
                conn.execute("SELECT 1")
                idle = 0.0


class FeedSignal:
    """Wakes long-polling feed readers in this process when an approval or revocation lands.

    ``bump`` is called from the worker thread that committed, and on PostgreSQL from the
    listener thread for a commit of any process on the database (:class:`Listener`);
    each waiting reader's event is set on its own event loop, so a reader answers within
    a scheduling tick, not a polling interval. Readers also re-query the database every
    second, so a wake that never came (a listener reconnecting) costs at most that.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.version = 0
        #: Set once the server is stopping: every reader answers with what it has now.
        self.closed = False
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()

    def bump(self) -> None:
        with self._lock:
            self.version += 1
            waiters = list(self._waiters)
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):  # that reader's loop has closed
                loop.call_soon_threadsafe(event.set)

    def close(self) -> None:
        """Wake every reader for good: the server is stopping, and a long-poll left open
        would hold the stop until the graceful timeout cut it without an answer."""
        with self._lock:
            self.closed = True
            waiters = list(self._waiters)
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(event.set)

    async def wait(self, seen: int, timeout: float) -> None:
        """Return once ``version`` has moved past ``seen``, or after ``timeout`` seconds,
        or at once when closed."""
        entry = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            if self.version != seen or self.closed:
                return
            self._waiters.add(entry)
        try:
            await asyncio.wait_for(entry[1].wait(), max(0.0, timeout))
        except TimeoutError:
            pass
        finally:
            with self._lock:
                self._waiters.discard(entry)
