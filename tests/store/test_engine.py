"""make_engine: durability settings really in effect, writers serialized, bad URLs refused."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, OperationalError

from airlock.store import ConfigError, make_engine, read_statements, read_transaction


def test_sqlite_connections_run_wal_with_full_sync_and_foreign_keys(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    try:
        # Two pooled connections at once: the pragmas are per connection, so check both.
        # Raw DBAPI connections, because a SQLAlchemy transaction would BEGIN IMMEDIATE
        # and the second would wait for the first's write lock.
        first, second = engine.raw_connection(), engine.raw_connection()
        try:
            for conn in (first, second):
                cursor = conn.cursor()
                assert cursor.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
                assert cursor.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
                assert cursor.execute("PRAGMA foreign_keys").fetchone()[0] == 1
                assert cursor.execute("PRAGMA recursive_triggers").fetchone()[0] == 1
                assert cursor.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000
                cursor.close()
        finally:
            first.close()
            second.close()
    finally:
        engine.dispose()


def test_sqlite_transaction_takes_the_write_lock_at_begin(sqlite_url: str) -> None:
    holder = make_engine(sqlite_url)
    waiter = make_engine(sqlite_url, busy_timeout_s=0.05)
    try:
        with holder.begin() as conn:
            conn.execute(sa.text("SELECT 1"))  # a read only: a deferred BEGIN would lock nothing
            with pytest.raises(OperationalError, match="database is locked"), waiter.begin() as w:
                w.execute(sa.text("SELECT 1"))
            # Readers are never blocked by it: WAL snapshot under a deferred BEGIN.
            with read_transaction(waiter) as reader:
                assert reader.execute(sa.text("SELECT 1")).scalar() == 1
    finally:
        holder.dispose()
        waiter.dispose()


def test_sqlite_connection_lent_to_a_read_transaction_begins_immediate_again(
    sqlite_url: str,
) -> None:
    """A read_transaction's deferred BEGIN is marked on the pooled connection itself (the
    dialect's do_begin sees no more); the mark goes when the loan ends, even by an error,
    so the next transaction on that same connection holds the write lock from its BEGIN."""
    engine = make_engine(sqlite_url, busy_timeout_s=0.05)
    waiter = make_engine(sqlite_url, busy_timeout_s=0.05)

    class Boom(Exception):
        pass

    try:
        with read_transaction(engine) as reader:
            lent = reader.connection.dbapi_connection
            with waiter.begin() as w:  # a deferred BEGIN holds no lock: writers go on
                w.execute(sa.text("SELECT 1"))
        with pytest.raises(Boom), read_transaction(engine):
            raise Boom
        with engine.begin() as conn:
            assert conn.connection.dbapi_connection is lent  # the pool lent it again
            conn.execute(sa.text("SELECT 1"))
            with pytest.raises(OperationalError, match="database is locked"), waiter.begin() as w:
                w.execute(sa.text("SELECT 1"))
    finally:
        engine.dispose()
        waiter.dispose()


def test_sqlite_engine_runs_no_connection_events(sqlite_url: str) -> None:
    # Its BEGIN comes from the dialect, not a "begin" listener: any connection event on
    # the engine makes SQLAlchemy dispatch events around every statement it runs.
    engine = make_engine(sqlite_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("SELECT 1"))
            assert not engine._has_events and not conn._has_events
    finally:
        engine.dispose()


def test_sqlite_queued_writer_proceeds_after_commit(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE t (x INTEGER)"))
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO t VALUES (1)"))
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT x FROM t")).scalar() == 1
    finally:
        engine.dispose()


def test_sqlite_foreign_keys_are_enforced(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE p (id INTEGER PRIMARY KEY)"))
            conn.execute(sa.text("CREATE TABLE c (p INTEGER NOT NULL REFERENCES p(id))"))
        with pytest.raises(DBAPIError, match="FOREIGN KEY"), engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO c VALUES (42)"))
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "replace",
    [
        "INSERT OR REPLACE INTO kept (id, k, v) VALUES (1, 'other', 'swapped')",
        "INSERT OR REPLACE INTO kept (id, k, v) VALUES (2, 'a', 'swapped')",
        "REPLACE INTO kept (rowid, k, v) VALUES (1, 'other', 'swapped')",
        "UPDATE OR REPLACE kept SET k = 'a' WHERE id = 3",
    ],
)
def test_replace_cannot_delete_a_row_past_its_no_delete_trigger(
    sqlite_url: str, replace: str
) -> None:
    """REPLACE deletes the rows it conflicts with; SQLite fires DELETE triggers for that
    only with recursive_triggers on, which make_engine sets on every connection."""
    engine = make_engine(sqlite_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text("CREATE TABLE kept (id INTEGER PRIMARY KEY, k TEXT UNIQUE, v TEXT)")
            )
            conn.execute(
                sa.text(
                    "CREATE TRIGGER kept_no_delete BEFORE DELETE ON kept "
                    "BEGIN SELECT RAISE(ABORT, 'kept: rows are never deleted'); END"
                )
            )
            conn.execute(
                sa.text("INSERT INTO kept (id, k, v) VALUES (1, 'a', 'first'), (3, 'c', '')")
            )
        with pytest.raises(DBAPIError, match="never deleted"), engine.begin() as conn:
            conn.execute(sa.text(replace))
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT id, k, v FROM kept ORDER BY id")).all()
        assert [tuple(r) for r in rows] == [(1, "a", "first"), (3, "c", "")]
    finally:
        engine.dispose()


def test_missing_sqlite_directory_is_refused_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir"
    with pytest.raises(ConfigError, match="does not exist"):
        make_engine(f"sqlite:///{missing / 'ledger.db'}")
    assert not missing.exists()


def test_missing_sqlite_file_is_refused_when_create_is_false(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        make_engine(f"sqlite:///{tmp_path / 'ledger.db'}", create=False)
    assert not (tmp_path / "ledger.db").exists()


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://",
        "sqlite:///:memory:",
        "sqlite:///file:ledger.db?mode=memory&uri=true",
        "sqlite:///ledger.db?timeout=0",
        "mysql://root@localhost/ledger",
        "postgresql+psycopg2://postgres@localhost/ledger",
        "not a url",
    ],
)
def test_non_durable_or_unknown_urls_are_refused(url: str) -> None:
    with pytest.raises(ConfigError):
        make_engine(url)


@pytest.mark.postgres
@pytest.mark.parametrize("scheme", ["postgresql", "postgresql+psycopg"])
def test_postgresql_runs_psycopg3_read_committed_with_synchronous_commit(
    pg_url: str, scheme: str
) -> None:
    engine = make_engine(pg_url.replace("postgresql", scheme, 1))
    try:
        assert engine.dialect.driver == "psycopg"
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "on"
            assert conn.exec_driver_sql("SHOW transaction_isolation").scalar() == "read committed"
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_postgresql_read_transaction_cannot_write(pg_url: str) -> None:
    engine = make_engine(pg_url)
    try:
        with pytest.raises(DBAPIError, match="read-only"), read_transaction(engine) as conn:
            conn.execute(sa.text("CREATE TABLE t (x INTEGER)"))
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_postgresql_read_statements_open_no_transaction(pg_url: str) -> None:
    """Each read is its own round trip on a fresh snapshot: no BEGIN is sent, so the
    server holds no transaction after a read, and a commit made between two reads is
    seen by the second."""
    engine = make_engine(pg_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE statements_probe (k INTEGER)"))
        count = sa.text("SELECT count(*) FROM statements_probe")
        with read_statements(engine) as conn:
            assert conn.execute(count).scalar() == 0
            driver = conn.connection.dbapi_connection
            assert driver is not None
            assert driver.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            with engine.begin() as other:
                other.execute(sa.text("INSERT INTO statements_probe VALUES (1)"))
            assert conn.execute(count).scalar() == 1
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_postgresql_read_statements_leave_no_autocommit_in_the_pool(pg_url: str) -> None:
    """The connection goes back to the pool transactional again: a transaction on it
    afterwards that fails rolls all of its writes back."""
    engine = make_engine(pg_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE statements_pool (k INTEGER)"))
        with read_statements(engine) as conn:
            lent = conn.connection.dbapi_connection
            conn.execute(sa.text("SELECT 1"))

        class Boom(Exception):
            pass

        with pytest.raises(Boom), engine.begin() as conn:
            assert conn.connection.dbapi_connection is lent
            conn.execute(sa.text("INSERT INTO statements_pool VALUES (1)"))
            raise Boom
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM statements_pool")).scalar() == 0
    finally:
        engine.dispose()


def test_sqlite_pooled_connections_may_serve_several_threads(sqlite_url: str) -> None:
    import threading

    engine = make_engine(sqlite_url)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(5):
                with engine.begin() as conn:
                    conn.execute(sa.text("SELECT 1"))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
    finally:
        engine.dispose()


def test_sqlite_wal_switch_waits_for_a_writer_on_a_new_file(tmp_path: Path) -> None:
    """SQLite answers PRAGMA journal_mode=WAL with SQLITE_BUSY at once, without its busy
    handler, while another connection holds the write lock of a rollback-journal file;
    several processes opening one new file together hit exactly that."""
    path = tmp_path / "new.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        holder.execute("CREATE TABLE t (x INTEGER)")
        holder.execute("BEGIN IMMEDIATE")
        holder.execute("INSERT INTO t VALUES (1)")
        release = threading.Timer(0.3, holder.execute, args=("COMMIT",))
        release.start()
        engine = make_engine(f"sqlite:///{path}", busy_timeout_s=10)
        try:
            with engine.connect() as conn:
                mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar_one()
                rows = conn.exec_driver_sql("SELECT count(*) FROM t").scalar_one()
        finally:
            engine.dispose()
        release.join()
    finally:
        holder.close()
    assert mode == "wal"
    assert rows == 1


def test_sqlite_wal_switch_gives_up_after_the_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "held.db"
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("CREATE TABLE t (x INTEGER)")
        holder.execute("BEGIN IMMEDIATE")
        engine = make_engine(f"sqlite:///{path}", busy_timeout_s=0.2)
        try:
            with pytest.raises(OperationalError, match="locked"), engine.connect():
                pass
        finally:
            engine.dispose()
    finally:
        holder.close()


def test_a_connection_returned_with_its_transaction_open_is_rolled_back(db_url: str) -> None:
    """Reset on return asks the driver: a raw connection handed back mid-write has its
    write rolled back before the pool lends it again."""
    engine = make_engine(db_url, busy_timeout_s=1)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE reset_probe (k INTEGER)"))
        raw = engine.raw_connection()
        cursor = raw.cursor()
        if engine.dialect.name == "sqlite":
            cursor.execute("BEGIN IMMEDIATE")  # pysqlite begins nothing on its own here
        cursor.execute("INSERT INTO reset_probe VALUES (1)")
        cursor.close()
        raw.close()  # back to the pool, the INSERT uncommitted
        with engine.begin() as conn:  # the same pooled connection, or another
            assert conn.execute(sa.text("SELECT count(*) FROM reset_probe")).scalar() == 0
    finally:
        engine.dispose()


def test_a_committed_connection_goes_back_to_the_pool_without_a_rollback(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(db_url)
    with engine.connect():
        pass  # the first connect's own set-up rolls back once
    rolled_back: list[object] = []
    monkeypatch.setattr(engine.dialect, "do_rollback", rolled_back.append)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("SELECT 1"))
        with read_transaction(engine) as conn:  # rolled back by its Connection, once
            conn.execute(sa.text("SELECT 1"))
        assert len(rolled_back) == 1
    finally:
        engine.dispose()
