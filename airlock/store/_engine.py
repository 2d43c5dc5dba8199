"""SQLAlchemy engines from a database URL, configured for durability. Not public.

SQLite (one host): WAL, ``synchronous=FULL`` (a consumed approval must survive power
loss; ``NORMAL`` in WAL mode may lose the last commits), foreign keys on,
``recursive_triggers`` on (see below), a busy timeout, and every transaction opened
with ``BEGIN IMMEDIATE``. pysqlite's default ``BEGIN``
(deferred) takes the write lock only at the first write; two such transactions that both
read first then fail with ``SQLITE_BUSY`` on the upgrade, *without* waiting for the busy
timeout. Taking the write lock at ``BEGIN`` makes concurrent writers queue instead. This
is SQLAlchemy's documented recipe ("Serializable isolation / Savepoints / Transactional
DDL"): ``isolation_level = None`` at connect so pysqlite never emits its own ``BEGIN``,
and our own ``BEGIN``. The recipe emits it from the engine's ``begin`` event; we emit it
from the dialect's ``do_begin`` (:class:`_DurableSQLiteDialect`), which SQLAlchemy calls
at exactly the same point of every root transaction, autobegin included. The same BEGIN,
but an engine with a connection event listener dispatches events around every statement
and commit it runs: about 0.1 ms of CPU per execution of the executor (three
transactions, seven statements), a tenth of it, for a hook that fires once per
transaction.
Each connection also gets the audit chain's hash as a SQL function (``_chain.py``).

``recursive_triggers``: the REPLACE conflict resolution (``INSERT OR REPLACE``,
``REPLACE INTO``, ``UPDATE OR REPLACE``) deletes the rows an insert conflicts with, and
SQLite fires DELETE triggers for that delete only with this pragma on (off by default,
lang_conflict.html "REPLACE"). Off, one ``INSERT OR REPLACE`` swaps a terminal ledger
row or an audit row for another past every "never deleted" trigger. None of our
triggers writes a row and none of our statements is an upsert, so turning it on changes
nothing else. A connection that does not set it (the sqlite3 shell) meets the guard
triggers of the services' migrations instead (executor 0008, checkpoint 0005).

PostgreSQL (several hosts): psycopg 3, ``READ COMMITTED``, ``synchronous_commit=on``,
both set explicitly even where they are the defaults (STYLE 7). No pre-ping (a round
trip per checkout): a pooled connection is checked at checkout without one
(:func:`_check_idle`). A backend that ended (a server restart, ``pg_terminate_backend``,
an idle timeout) sends its last message and closes its socket; an idle connection
whose socket has anything to read is discarded, and the pool connects again.

Reset on return, both: a connection goes back to the pool rolled back only if its
driver says a transaction is still open on it (:func:`_reset_if_open`). SQLAlchemy's
default rolls back every connection whose ``Connection`` did not roll back itself,
committed ones included: a wasted call per transaction (on PostgreSQL a trip through
psycopg's lock and wait loop) on the path that commits most.

This module must never create directories, fall back to an in-memory database, or hand
out an engine whose durability settings did not take effect.
"""

from __future__ import annotations

import select
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import registry
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import PoolProxiedConnection

from .errors import ConfigError

__all__ = [
    "DEFAULT_BUSY_TIMEOUT_S",
    "is_postgresql",
    "is_sqlite",
    "make_engine",
    "read_statements",
    "read_transaction",
    "require_immediate",
]

#: How long a SQLite writer waits for another's lock before failing (seconds).
DEFAULT_BUSY_TIMEOUT_S = 30.0

# A read-only transaction on SQLite opens with a deferred BEGIN, which in WAL mode reads
# a snapshot without taking the write lock. read_transaction marks it twice under this
# key: as an execution option of its Connection (what require_immediate reads), and in
# the pooled connection's ``info`` for as long as it lends that connection out (what
# do_begin reads: the dialect sees the DBAPI connection, never the Connection).
_SQLITE_DEFERRED = "airlock_sqlite_deferred"

_SQLITE_DRIVERS = {"sqlite", "sqlite+pysqlite"}
_PG_DRIVERS = {"postgresql", "postgresql+psycopg"}
#: psycopg's ``TransactionStatus.IDLE`` (libpq's PQTRANS_IDLE, 0): no transaction open.
#: Its value, so that an engine for SQLite needs no psycopg installed.
_PG_IDLE = 0
#: The driver name make_engine gives its SQLite URLs: pysqlite with our own BEGIN.
_DURABLE_SQLITE_DRIVER = "sqlite+airlock_pysqlite"


class _DurableSQLiteDialect(SQLiteDialect_pysqlite):
    """pysqlite whose every transaction starts with our own BEGIN (module docstring)."""

    # Read from the class's own __dict__: without it SQLAlchemy caches no statement of
    # this dialect and compiles each one on every execution.
    supports_statement_cache = True

    def do_begin(self, dbapi_connection: PoolProxiedConnection) -> None:
        deferred = dbapi_connection.info.get(_SQLITE_DEFERRED, False)
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("BEGIN DEFERRED" if deferred else "BEGIN IMMEDIATE")
        finally:
            cursor.close()


registry.register(_DURABLE_SQLITE_DRIVER.replace("+", "."), __name__, "_DurableSQLiteDialect")


def is_sqlite(bind: Engine | Connection) -> bool:
    return bind.dialect.name == "sqlite"


def is_postgresql(bind: Engine | Connection) -> bool:
    return bind.dialect.name == "postgresql"


def make_engine(
    url: str | URL,
    *,
    create: bool = True,
    busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    echo: bool = False,
) -> Engine:
    """An engine for ``url``: ``sqlite:///PATH`` or ``postgresql[+psycopg]://…``.

    ``create=False`` refuses a SQLite file that does not exist yet (for read-only tools
    such as ``airlock audit verify``, which must not leave an empty database behind).
    A SQLite parent directory is never created: a typo in a path must fail, not start a
    fresh, empty ledger somewhere unexpected. Raises :class:`ConfigError`.

    On SQLite *every* transaction holds the database's one write lock from its first
    statement (autobegin included) until commit or rollback, reads too: keep transactions
    short, never hold one open across a cloud call (a connection kept across one runs
    nothing outside an explicit ``begin()``, or it autobegins one), and use
    :func:`read_transaction` for reads that should not block writers.

    Engines hold pooled connections: create them *after* forking worker processes.
    """
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(f"not a database URL: {exc}") from None
    if parsed.drivername in _SQLITE_DRIVERS:
        return _sqlite_engine(parsed, create=create, busy_timeout_s=busy_timeout_s, echo=echo)
    if parsed.drivername in _PG_DRIVERS:
        return _postgresql_engine(parsed, echo=echo)
    raise ConfigError(
        f"unsupported database driver {parsed.drivername!r}: "
        "use sqlite:///PATH or postgresql://USER@HOST/DB (psycopg 3)"
    )


def _sqlite_engine(url: URL, *, create: bool, busy_timeout_s: float, echo: bool) -> Engine:
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:") or url.query:
        # Memory databases are not durable and are a different database per pooled
        # connection; URI filenames and query options could override our pragmas.
        raise ConfigError(
            f"refusing SQLite URL {url.render_as_string(hide_password=True)!r}: "
            "give a plain file path, sqlite:///relative.db or sqlite:////absolute.db"
        )
    path = Path(database)
    if not path.parent.is_dir():
        raise ConfigError(f"directory {str(path.parent)!r} for SQLite database does not exist")
    if not create and not path.is_file():
        raise ConfigError(f"SQLite database {str(path)!r} does not exist")
    if busy_timeout_s <= 0:
        raise ConfigError("busy_timeout_s must be positive")

    engine = sa.create_engine(
        url.set(drivername=_DURABLE_SQLITE_DRIVER),
        echo=echo,
        pool_reset_on_return=None,  # _reset_if_open below
        connect_args={
            "timeout": busy_timeout_s,
            # Python must not emit BEGIN/COMMIT around statements on its own; the
            # dialect's do_begin does it. The pragma reads then happen in autocommit mode.
            "isolation_level": None,
            # The pool lends a connection to one thread at a time, and CPython's SQLite
            # is built serialized (sqlite3.threadsafety == 3), so a pooled connection
            # may move between a server's worker threads; SQLAlchemy's own default.
            "check_same_thread": False,
        },
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            mode = _enter_wal(cursor, busy_timeout_s)
            if mode is None or str(mode[0]).lower() != "wal":
                raise ConfigError(f"SQLite refused WAL mode (got {mode!r}) for {database!r}")
            cursor.execute("PRAGMA synchronous=FULL")
            cursor.execute("PRAGMA foreign_keys=ON")
            # REPLACE's implicit delete then meets the tables' no-delete triggers.
            cursor.execute("PRAGMA recursive_triggers=ON")
            cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
            sync = cursor.execute("PRAGMA synchronous").fetchone()
            fks = cursor.execute("PRAGMA foreign_keys").fetchone()
            recursive = cursor.execute("PRAGMA recursive_triggers").fetchone()
            if (
                sync is None
                or sync[0] != 2
                or fks is None
                or fks[0] != 1
                or recursive is None
                or recursive[0] != 1
            ):
                raise ConfigError(f"SQLite pragmas did not take effect for {database!r}")
        finally:
            cursor.close()

    if not isinstance(engine.dialect, _DurableSQLiteDialect):  # never a plain BEGIN
        raise ConfigError(f"SQLite engine for {database!r} lacks Airlock's dialect")
    event.listen(engine, "reset", _reset_if_open)
    return engine


def _reset_if_open(dbapi_connection: Any, _record: Any, _state: Any) -> None:
    """Roll back a connection returned to the pool with a transaction still open.

    Asked of the driver itself, so whatever left it open (a ``Connection`` closed
    mid-transaction, a raw DBAPI connection) is covered, and a connection whose
    transaction committed or rolled back is returned as it is. pysqlite's
    ``in_transaction`` and psycopg's ``info.transaction_status`` read the driver's own
    state; neither costs a round trip.
    """
    if isinstance(dbapi_connection, sqlite3.Connection):
        open_ = dbapi_connection.in_transaction
    else:
        open_ = dbapi_connection.info.transaction_status != _PG_IDLE
    if open_:
        dbapi_connection.rollback()


def _enter_wal(cursor: sqlite3.Cursor, busy_timeout_s: float) -> Any:
    """Switch the connection to WAL, retrying while another connection holds a lock.

    Turning a new database file to WAL needs an exclusive lock, and SQLite returns
    SQLITE_BUSY at once, without calling the busy handler, when several connections
    open the same new file together (seen with 8 processes migrating one new file).
    Retry for at most the busy timeout, then let the error through.
    """
    deadline = time.monotonic() + busy_timeout_s
    delay = 0.001
    while True:
        try:
            return cursor.execute("PRAGMA journal_mode=WAL").fetchone()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() + delay > deadline:
                raise
        # A bounded poll under the busy-timeout deadline: SQLite gives no lock-free signal.
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _postgresql_engine(url: URL, *, echo: bool) -> Engine:
    options = url.query.get("options", "")
    if isinstance(options, tuple):
        raise ConfigError("give the PostgreSQL 'options' URL parameter once")
    options = f"{options} -c synchronous_commit=on".strip()
    engine = sa.create_engine(
        url.set(drivername="postgresql+psycopg"),
        echo=echo,
        pool_pre_ping=False,  # _check_idle below, with no round trip
        pool_reset_on_return=None,  # _reset_if_open below
        isolation_level="READ COMMITTED",
        connect_args={"options": options, "connect_timeout": 10},
    )
    event.listen(engine, "reset", _reset_if_open)
    event.listen(engine, "checkout", _check_idle)
    return engine


def _check_idle(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """Refuse a pooled PostgreSQL connection that cannot be used (at checkout).

    Raises :class:`~sqlalchemy.exc.DisconnectionError`, on which the pool discards the
    connection and connects again. A connection idle in the pool has nothing to read:
    the server sends nothing unasked outside a transaction but its last words (the
    error a terminated backend sends before it closes the socket) or the close itself.
    So one whose socket is readable, or that psycopg knows closed or broken, is not
    lent; anything else that could arrive unasked (a NOTIFY, a parameter's new value
    after a reload) costs a reconnect, never a wrong answer. A poll with no wait, not a
    query: no round trip. A backend that ends after the checkout fails that transaction
    as it would have after a pre-ping.
    """
    if dbapi_connection.closed or dbapi_connection.broken:
        raise sa.exc.DisconnectionError("the connection is closed")
    poller = select.poll()
    poller.register(dbapi_connection.fileno(), select.POLLIN)
    if poller.poll(0):
        raise sa.exc.DisconnectionError("the server spoke or hung up while it sat idle")


def require_immediate(conn: Connection) -> None:
    """Refuse a SQLite connection whose transactions do not start with BEGIN IMMEDIATE.

    Code that reads then writes (the audit head, the migration version) is serialized
    on SQLite only by that lock. A connection from a plain ``create_engine`` lets
    pysqlite issue a deferred BEGIN; our dialect, and the ``isolation_level`` our connect
    hook clears, are the signs that :func:`make_engine` made it.
    """
    if not is_sqlite(conn):
        return
    pooled = conn.connection
    if not isinstance(conn.dialect, _DurableSQLiteDialect) or (
        getattr(pooled.dbapi_connection, "isolation_level", "") is not None
    ):
        raise ConfigError("SQLite connection not from airlock.store.make_engine")
    if conn.get_execution_options().get(_SQLITE_DEFERRED) or pooled.info.get(_SQLITE_DEFERRED):
        raise ConfigError("write attempted in a read_transaction")


@contextmanager
def read_transaction(engine: Engine) -> Iterator[Connection]:
    """A connection in a read-only transaction over one consistent snapshot.

    SQLite: a deferred ``BEGIN`` (a WAL snapshot that never blocks writers; do not write
    in it). PostgreSQL: ``REPEATABLE READ READ ONLY``. Always rolled back on exit.
    """
    with engine.connect() as raw:
        if not is_sqlite(raw):
            conn = raw.execution_options(
                isolation_level="REPEATABLE READ", postgresql_readonly=True
            )
            with conn.begin() as txn:
                yield conn
                txn.rollback()
            return
        conn = raw.execution_options(**{_SQLITE_DEFERRED: True})
        # The pooled connection's info outlives this loan: unmarked before it goes back,
        # whatever happens, so the next borrower's BEGIN is IMMEDIATE again.
        pooled = raw.connection.info
        pooled[_SQLITE_DEFERRED] = True
        try:
            with conn.begin() as txn:
                yield conn
                txn.rollback()
        finally:
            pooled.pop(_SQLITE_DEFERRED, None)


@contextmanager
def read_statements(engine: Engine) -> Iterator[Connection]:
    """A connection for reads each of which may see its own snapshot: no transaction
    around them on PostgreSQL, so a read costs its one round trip, not three.

    For one read whose answer stands alone (a feed's cursor), or reads that need not
    agree with each other; never for anything that writes. PostgreSQL: autocommit, each
    statement on a fresh READ COMMITTED snapshot (the ``begin()`` it is in sends
    nothing). SQLite: :func:`read_transaction`, whose deferred ``BEGIN`` costs no round
    trip.
    """
    if is_sqlite(engine):
        with read_transaction(engine) as conn:
            yield conn
        return
    with engine.connect() as raw:
        conn = raw.execution_options(isolation_level="AUTOCOMMIT")
        with conn.begin() as txn:
            yield conn
            txn.rollback()
