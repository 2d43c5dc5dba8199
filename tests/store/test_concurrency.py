"""Real OS processes racing on one database: appends stay gapless, migrations apply once.

Processes are forked (each opens its own engine after the fork) and released together
by a ``multiprocessing.Barrier``; nothing waits on a sleep. Runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import multiprocessing
import traceback
from collections.abc import Callable
from multiprocessing.synchronize import Barrier
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from airlock.store import AuditLog, make_engine, upgrade, verify_chain

from ._support import MIGRATIONS, NOW

WORKERS = 8
APPENDS_PER_WORKER = 25
_ctx = multiprocessing.get_context("fork")


def _run(target: Callable[..., None], *args: Any) -> list[str]:
    """Start WORKERS processes on ``target(worker, barrier, errors, *args)``; return errors."""
    barrier = _ctx.Barrier(WORKERS)
    errors = _ctx.Queue()
    procs = [
        _ctx.Process(target=target, args=(worker, barrier, errors, *args))
        for worker in range(WORKERS)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    for proc in procs:
        if proc.is_alive():
            proc.kill()
            failures.append(f"pid {proc.pid} hung")
        elif proc.exitcode != 0 and not failures:
            failures.append(f"pid {proc.pid} exit code {proc.exitcode}")
    return failures


def _appender(worker: int, barrier: Barrier, errors: Any, url: str) -> None:
    try:
        engine = make_engine(url)
        barrier.wait(timeout=60)
        for i in range(APPENDS_PER_WORKER):
            # A state change and its audit event, committed together as services do.
            with engine.begin() as conn:
                conn.execute(
                    sa.text("INSERT INTO widgets (name) VALUES (:name)"),
                    {"name": f"w{worker}-{i}"},
                )
                AuditLog.append(conn, {"type": "test.append", "worker": worker, "i": i}, at=NOW)
        engine.dispose()
    except BaseException:
        errors.put(f"worker {worker}: {traceback.format_exc()}")
        raise


def test_concurrent_appenders_produce_one_gapless_verifying_chain(
    engine: Engine, db_url: str
) -> None:
    engine.dispose()  # no pooled connection may cross the fork
    assert _run(_appender, db_url) == []

    report = verify_chain(engine)
    assert report.ok, str(report.fault)
    total = WORKERS * APPENDS_PER_WORKER
    assert (report.rows, report.head_seq) == (total + 1, total)
    with engine.connect() as conn:
        events = [
            json.loads(text)
            for text in conn.execute(sa.text("SELECT event FROM audit_log WHERE seq > 0")).scalars()
        ]
        widgets = conn.execute(sa.text("SELECT count(*) FROM widgets")).scalar_one()
    assert sorted((e["worker"], e["i"]) for e in events) == [
        (w, i) for w in range(WORKERS) for i in range(APPENDS_PER_WORKER)
    ]
    assert widgets == total
    # Each worker's own events appear in its commit order.
    for w in range(WORKERS):
        assert [e["i"] for e in events if e["worker"] == w] == list(range(APPENDS_PER_WORKER))


def _migrator(worker: int, barrier: Barrier, errors: Any, url: str) -> None:
    try:
        engine = make_engine(url)
        barrier.wait(timeout=60)
        upgrade(engine, MIGRATIONS)
        engine.dispose()
    except BaseException:
        errors.put(f"worker {worker}: {traceback.format_exc()}")
        raise


def test_concurrent_migrations_apply_each_revision_once(db_url: str) -> None:
    assert _run(_migrator, db_url) == []

    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(
                sa.text("SELECT version_num FROM alembic_version")
            ).scalars().all() == ["0002"]
            assert conn.execute(sa.text("SELECT count(*) FROM audit_log")).scalar_one() == 1
        assert verify_chain(engine).ok
    finally:
        engine.dispose()


def _killed_mid_append(url: str, appended: Any, never: Any) -> None:
    engine = make_engine(url)
    with engine.begin() as conn:
        AuditLog.append(conn, {"type": "test.never_committed"}, at=NOW)
        appended.set()
        never.wait()  # holds the chain lock (and, on SQLite, the write lock) until killed


def test_writer_killed_holding_the_chain_lock_neither_wedges_nor_forks_it(
    engine: Engine, db_url: str
) -> None:
    engine.dispose()
    appended, never = _ctx.Event(), _ctx.Event()
    victim = _ctx.Process(target=_killed_mid_append, args=(db_url, appended, never))
    victim.start()
    try:
        assert appended.wait(timeout=60)
    finally:
        victim.kill()  # SIGKILL: no rollback, no atexit, the socket/file lock just vanishes
        victim.join(timeout=60)
    assert victim.exitcode == -9

    with engine.begin() as conn:
        entry = AuditLog.append(conn, {"type": "test.after_the_crash"}, at=NOW)
    assert entry.seq == 1  # the killed writer's seq 1 never committed, so there is no gap
    report = verify_chain(engine)
    assert report.ok
    assert report.head_seq == 1


def _chain_lock_held(conn: sa.Connection) -> bool:
    """Does this connection's backend hold the audit chain's advisory lock now?"""
    return bool(
        conn.execute(
            sa.text(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                "AND pid = pg_backend_pid() AND granted"
            )
        ).scalar_one()
    )


def test_postgresql_chain_lock_is_taken_once_per_transaction_and_again_in_the_next(
    pg_url: str,
) -> None:
    """The lock is remembered for the transaction that took it, never beyond it: each new
    transaction takes it again, and one taken inside a rolled-back savepoint is taken
    again by the next append (the concurrent-appender test races 8 processes on this)."""
    engine = make_engine(pg_url)
    upgrade(engine, MIGRATIONS)
    taken: list[str] = []

    @sa.event.listens_for(engine, "before_cursor_execute")
    def _count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "pg_advisory_xact_lock" in statement:
            taken.append(statement)

    try:
        for _ in range(2):
            with engine.begin() as conn:
                AuditLog.lock(conn)
                AuditLog.append(conn, {"type": "test.once"}, at=NOW)
                AuditLog.append(conn, {"type": "test.twice"}, at=NOW)
                assert _chain_lock_held(conn)
        assert len(taken) == 2  # once per transaction, not once per call

        taken.clear()
        with engine.begin() as conn:
            savepoint = conn.begin_nested()
            AuditLog.lock(conn)
            savepoint.rollback()
            AuditLog.append(conn, {"type": "test.after_savepoint"}, at=NOW)
            assert _chain_lock_held(conn)
        assert len(taken) == 2  # the savepoint's lock is not trusted after its rollback

        with engine.connect() as conn:
            assert not _chain_lock_held(conn)  # released with the transaction
        assert verify_chain(engine).ok
    finally:
        engine.dispose()
