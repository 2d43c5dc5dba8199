"""How the executor opens its transactions: on SQLite, one pooled connection per execution.

An execution commits twice, the consume before the cloud call and the outcome after it,
and a checkout from SQLAlchemy's pool and the return cost about as much CPU as one of
its statements. A SQLite connection has no server to lose and, outside a transaction,
holds no lock (each transaction is ``BEGIN IMMEDIATE`` … ``COMMIT``, and between them
the connection is in autocommit mode), so :meth:`Transactions.held` keeps one connection
for every transaction of an execution, across the cloud call. On PostgreSQL every
transaction checks a connection out as before, so one whose backend ended during the
call is replaced at checkout instead of failing the outcome's commit.

It must never keep a transaction open across a cloud call: only an idle connection, and
only on SQLite.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from sqlalchemy.engine import Connection, Engine

__all__ = ["Transactions"]


@contextmanager
def _begin_on(conn: Connection) -> Iterator[Connection]:
    with conn.begin():
        yield conn


class Transactions:
    """Opens the transactions of one executor's ledger ``engine``."""

    __slots__ = ("_engine", "_hold", "_local")

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._hold = engine.dialect.name == "sqlite"
        self._local = threading.local()

    @contextmanager
    def held(self) -> Iterator[None]:
        """Inside this block, this thread's transactions share one connection (SQLite;
        elsewhere, or already inside such a block, nothing changes). It goes back to the
        pool at the block's end, whatever happens."""
        if not self._hold or getattr(self._local, "conn", None) is not None:
            yield
            return
        with self._engine.connect() as conn:
            self._local.conn = conn
            try:
                yield
            finally:
                self._local.conn = None

    def begin(self) -> AbstractContextManager[Connection]:
        """A transaction, as ``engine.begin()``: committed at the end of the block, rolled
        back if it raises."""
        conn: Connection | None = getattr(self._local, "conn", None)
        return self._engine.begin() if conn is None else _begin_on(conn)
