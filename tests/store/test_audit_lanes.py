"""The executor's audit chain in lanes on PostgreSQL (docs/protocol.md#lanes).

Lanes let concurrent writers commit in parallel; the chain must stay as tamper-evident
as one lane: an edit, a deletion, a reordering or a move in any lane is found, so is a
lane that vanished, and a head recorded elsewhere still finds a cut tail. A chain made
before lanes verifies after the migration, its rows untouched. Real processes append
to two lanes at once, each committing while the other's transaction is open.
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from airlock.ledger import MIGRATIONS_DIR
from airlock.store import (
    AuditError,
    AuditLog,
    FaultKind,
    export,
    make_engine,
    read_transaction,
    upgrade,
    verify_chain,
    verify_export,
)

from ._support import NOW, tamper

pytestmark = pytest.mark.postgres

_ctx = multiprocessing.get_context("fork")
_BEFORE_LANES = "0011_effect_key"
LANES = 16


@pytest.fixture
def ledger(pg_url: str) -> Iterator[Engine]:
    """The executor's ledger on PostgreSQL, migrated to head: a chain with lanes."""
    engine = make_engine(pg_url)
    upgrade(engine, MIGRATIONS_DIR)
    try:
        yield engine
    finally:
        engine.dispose()


def _two_lanes(engine: Engine, rounds: int) -> tuple[int, int]:
    """Append ``rounds`` events to each of two lanes, the two transactions open at once
    (so they cannot share a lane); return the two lanes."""
    lanes = set()
    for i in range(rounds):
        with engine.begin() as one, engine.begin() as two:
            for conn, name in ((one, "one"), (two, "two")):
                lanes.add(AuditLog.lock_lane(conn))
                AuditLog.append(conn, {"type": "test.event", "writer": name, "i": i}, at=NOW)
    ordered = sorted(lanes)
    assert len(ordered) >= 2
    return ordered[0], ordered[-1]


def _rows(engine: Engine, lane: int) -> list[int]:
    with read_transaction(engine) as conn:
        found = conn.exec_driver_sql(f"SELECT seq FROM audit_log WHERE lane = {lane} ORDER BY seq")
        return [int(seq) for (seq,) in found]


def test_lanes_migration_keeps_a_single_chain_made_before_it_verifying(pg_url: str) -> None:
    engine = make_engine(pg_url)
    try:
        upgrade(engine, MIGRATIONS_DIR, revision=_BEFORE_LANES)
        for i in range(5):
            with engine.begin() as conn:
                AuditLog.append(conn, {"type": "test.event", "i": i}, at=NOW)
        with read_transaction(engine) as conn:
            before = list(export(conn))
        upgrade(engine, MIGRATIONS_DIR)
        _two_lanes(engine, 3)
        with read_transaction(engine) as conn:
            after = list(export(conn))
        report = verify_chain(engine)
    finally:
        engine.dispose()
    assert report.ok, report.fault
    assert report.lanes == LANES
    assert after[: len(before)] == before  # the old rows, byte for byte
    assert verify_export(after).ok
    # 1 genesis + 5 events, the lanes row, 15 lane geneses, 6 events in lanes.
    assert report.rows == 6 + 1 + (LANES - 1) + 6


def test_two_processes_append_to_two_lanes_while_the_other_is_open(ledger: Engine) -> None:
    """Each process commits its append while the other holds its own lane open: with
    one chain the second would wait for the first's commit, which waits for it."""
    url = ledger.url.render_as_string(hide_password=False)
    errors = _ctx.Queue()
    events = [_ctx.Event() for _ in range(4)]
    procs = [_ctx.Process(target=_holder, args=(url, w, events, errors)) for w in (0, 1)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert not failures, failures
    assert all(proc.exitcode == 0 for proc in procs)
    report = verify_chain(ledger)
    assert report.ok, report.fault
    with read_transaction(ledger) as conn:
        lanes = conn.exec_driver_sql(
            "SELECT DISTINCT lane FROM audit_log WHERE event LIKE '%%test.parallel%%'"
        ).all()
    assert len(lanes) == 2


def _holder(url: str, worker: int, events: list[Any], errors: Any) -> None:
    """Worker 0 appends and keeps its transaction open until worker 1 has appended and
    committed in another lane; then commits. Both repeat it the other way round."""
    try:
        engine = make_engine(url)
        for holder in (0, 1):
            opened, done = events[2 * holder], events[2 * holder + 1]
            if worker == holder:
                with engine.begin() as conn:
                    AuditLog.lock_lane(conn)
                    AuditLog.append(conn, {"type": "test.parallel", "w": worker}, at=NOW)
                    opened.set()
                    if not done.wait(timeout=60):
                        raise AssertionError("the other lane's commit waited for this one")
            else:
                if not opened.wait(timeout=60):
                    raise AssertionError("the other process never appended")
                with engine.begin() as conn:
                    AuditLog.lock_lane(conn)
                    AuditLog.append(conn, {"type": "test.parallel", "w": worker}, at=NOW)
                done.set()
        engine.dispose()
    except BaseException:
        errors.put(traceback.format_exc())
        raise


def _appender(url: str, worker: int, barrier: Any, errors: Any) -> None:
    try:
        engine = make_engine(url)
        barrier.wait(timeout=60)
        for i in range(20):
            with engine.begin() as conn:
                AuditLog.lock_lane(conn)
                AuditLog.append(conn, {"type": "test.event", "w": worker, "i": i}, at=NOW)
        engine.dispose()
    except BaseException:
        errors.put(traceback.format_exc())
        raise


def test_concurrent_lane_appenders_in_processes_verify_clean(ledger: Engine) -> None:
    url = ledger.url.render_as_string(hide_password=False)
    errors = _ctx.Queue()
    barrier = _ctx.Barrier(4)
    procs = [_ctx.Process(target=_appender, args=(url, w, barrier, errors)) for w in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert not failures, failures
    report = verify_chain(ledger)
    assert report.ok, report.fault
    assert report.rows == 1 + 1 + (LANES - 1) + 4 * 20


def test_widening_a_lane_to_the_whole_chain_is_refused(ledger: Engine) -> None:
    with ledger.begin() as conn:
        AuditLog.lock_lane(conn)
        with pytest.raises(AuditError):
            AuditLog.lock(conn)


def test_the_whole_chain_lock_excludes_a_lane(ledger: Engine) -> None:
    with ledger.connect() as other, ledger.begin() as whole:
        AuditLog.lock(whole)
        with other.begin():
            other.exec_driver_sql("SET LOCAL lock_timeout = '100ms'")
            with pytest.raises(sa.exc.OperationalError, match="lock timeout"):
                AuditLog.lock_lane(other)


def test_an_append_taking_its_lane_is_one_statement_and_holds_the_lane(ledger: Engine) -> None:
    with ledger.connect() as conn:
        with conn.begin():
            AuditLog.lock_lane(conn)  # a connection learns what the chain offers once
        seen: list[str] = []

        def record(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
            seen.append(" ".join(statement.split()))

        sa.event.listen(ledger, "before_cursor_execute", record)
        try:
            with conn.begin():
                first = AuditLog.append(conn, {"type": "test.one"}, at=NOW, lane=True)
                second = AuditLog.append(conn, {"type": "test.two"}, at=NOW, lane=True)
                assert AuditLog.lock_lane(conn) == first.lane  # held: no second lane
        finally:
            sa.event.remove(ledger, "before_cursor_execute", record)
    assert first.lane == second.lane and second.prev_hash == first.row_hash
    assert len(seen) == 2 and all("airlock_audit_append" in s for s in seen), seen
    with ledger.begin() as whole:
        AuditLog.lock(whole)  # the lane went with the appender's commit
    assert verify_chain(ledger).ok


def test_appends_read_the_lane_head_by_its_index_on_a_new_table(ledger: Engine) -> None:
    # Plans made while the table holds a page (kept by the connection once generic)
    # must not scan and sort the whole chain on every append as it grows.
    with ledger.connect() as conn:
        for i in range(8):  # past the prepare and generic-plan thresholds (5 each)
            with conn.begin():
                AuditLog.append(conn, {"type": "test.warm", "i": i}, at=NOW, lane=True)
        with conn.begin():
            # Counts not yet reported (none are within a transaction), hence a difference.
            scans = (
                "SELECT seq_scan, idx_scan FROM pg_stat_xact_user_tables "
                "WHERE relname = 'audit_log'"
            )
            seq_before, index_before = conn.exec_driver_sql(scans).one()
            for i in range(8):
                AuditLog.append(conn, {"type": "test.event", "i": i}, at=NOW, lane=True)
            seq_after, index_after = conn.exec_driver_sql(scans).one()
    assert seq_after == seq_before and index_after - index_before >= 16
    assert verify_chain(ledger).ok


# What an attacker with the database does, and what verify must name. {a} and {b} are
# the two lanes written, {a_mid} a row in the middle of lane a, {a_last} its last row,
# {b_first} lane b's genesis.
_TAMPERING = {
    "deleted_row_in_a_lane": (
        ["DELETE FROM audit_log WHERE seq = {a_mid}"],
        FaultKind.BROKEN_LINK,
    ),
    "altered_event_in_a_lane": (
        ["UPDATE audit_log SET event = replace(event, '\"i\":1', '\"i\":7') WHERE seq = {a_mid}"],
        FaultKind.HASH_MISMATCH,
    ),
    "reordered_rows_in_a_lane": (
        [
            "UPDATE audit_log SET seq = 999999 WHERE seq = {a_mid}",
            "UPDATE audit_log SET seq = {a_mid} WHERE seq = {a_last}",
            "UPDATE audit_log SET seq = {a_last} WHERE seq = 999999",
        ],
        FaultKind.BROKEN_LINK,
    ),
    "row_moved_to_another_lane": (
        ["UPDATE audit_log SET lane = {b} WHERE seq = {a_last}"],
        FaultKind.BROKEN_LINK,
    ),
    "lane_deleted_whole": (
        ["DELETE FROM audit_log WHERE lane = {b}"],
        FaultKind.MISSING_GENESIS,
    ),
    "lane_genesis_deleted": (
        ["DELETE FROM audit_log WHERE seq = {b_first}"],
        FaultKind.MISSING_GENESIS,
    ),
    "lane_relabelled": (
        ["UPDATE audit_log SET lane = 99 WHERE lane = {b}"],
        FaultKind.BROKEN_LINK,
    ),
    "lanes_row_deleted": (
        ["DELETE FROM audit_log WHERE event LIKE '%%airlock.audit/lanes%%'"],
        FaultKind.GAP,
    ),
}


@pytest.mark.parametrize("attack", sorted(_TAMPERING))
def test_tampering_in_any_lane_is_detected(ledger: Engine, attack: str) -> None:
    a, b = _two_lanes(ledger, 4)
    lane_a, lane_b = _rows(ledger, a), _rows(ledger, b)
    marks = {
        "a": a,
        "b": b,
        "a_mid": lane_a[-3],
        "a_last": lane_a[-1],
        "b_first": lane_b[0],
    }
    statements, kind = _TAMPERING[attack]
    tamper(ledger, "ALTER TABLE audit_log DROP CONSTRAINT ck_audit_log_lane")
    tamper(ledger, *(s.format(**marks) for s in statements))
    report = verify_chain(ledger)
    assert not report.ok
    assert report.fault is not None and report.fault.kind is kind, report.fault
    with read_transaction(ledger) as conn:
        lines = list(export(conn))
    exported = verify_export(lines)
    assert exported.fault == report.fault


def test_a_cut_lane_tail_is_found_against_the_head_a_receipt_named(ledger: Engine) -> None:
    a, _ = _two_lanes(ledger, 3)
    tail = _rows(ledger, a)[-1]
    with read_transaction(ledger) as conn:
        head = conn.exec_driver_sql(f"SELECT row_hash FROM audit_log WHERE seq = {tail}").scalar()
    assert verify_chain(ledger, expect_head=(tail, str(head))).ok
    tamper(ledger, f"DELETE FROM audit_log WHERE seq = {tail}")
    assert verify_chain(ledger).ok  # a cut tail alone looks like a shorter lane
    report = verify_chain(ledger, expect_head=(tail, str(head)))
    assert report.fault is not None and report.fault.kind is FaultKind.HEAD_MISMATCH
