"""The checkpoint's database handle. Not public.

One engine from :func:`airlock.store.make_engine`, shared by FastAPI's worker threads:
pooled SQLite connections may move between threads (``check_same_thread=False``, as
SQLAlchemy does for file databases), and every write transaction is ``BEGIN IMMEDIATE``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from sqlalchemy.engine import Engine

from airlock.store import make_engine

__all__ = ["MIGRATIONS", "Database"]

#: The checkpoint database's migrations (``airlock.store.upgrade``). Here, not in
#: ``app``: a CLI command that only migrates need not import the web app.
MIGRATIONS: Final = Path(__file__).with_name("migrations")


class Database:
    __slots__ = ("engine", "url")

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: Engine = make_engine(url)  # fails here, at start, on a bad URL

    def dispose(self) -> None:
        self.engine.dispose()
