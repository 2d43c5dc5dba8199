"""Engines for the checkpoint's database, safe to use from FastAPI's worker threads. Not public.

``airlock.store.make_engine`` opens SQLite connections with ``check_same_thread=True``,
so a pooled connection must never be used by a thread other than the one that opened
it. The HTTP server runs handlers on a thread pool; for SQLite each thread therefore
gets an engine of its own (all on the same file, all with the store's durability
settings). PostgreSQL connections are not tied to a thread, so one engine is shared.
"""

from __future__ import annotations

import threading

from sqlalchemy.engine import Engine, make_url

from airlock.store import make_engine

__all__ = ["Database"]


class Database:
    __slots__ = ("_engines", "_local", "_lock", "_shared", "url")

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._local = threading.local()
        self._engines: list[Engine] = []
        first = make_engine(url)  # fails here, at start, on a bad URL
        self._engines.append(first)
        sqlite = make_url(url).get_backend_name() == "sqlite"
        self._shared: Engine | None = None if sqlite else first
        if sqlite:
            self._local.engine = first

    @property
    def engine(self) -> Engine:
        if self._shared is not None:
            return self._shared
        engine: Engine | None = getattr(self._local, "engine", None)
        if engine is None:
            engine = make_engine(self.url)
            with self._lock:
                self._engines.append(engine)
            self._local.engine = engine
        return engine

    def dispose(self) -> None:
        """Close this thread's (or the shared) engine; drop the other threads' engines.

        A SQLite connection may only be closed by its own thread; the others close when
        their engine is garbage-collected.
        """
        with self._lock:
            own = self._shared or getattr(self._local, "engine", None)
            if own is not None:
                own.dispose()
            self._engines.clear()
            self._local = threading.local()
