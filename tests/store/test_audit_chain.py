"""The hash-chained audit log: appends chain, the database refuses edits, tampering is named.

Every test runs on SQLite and on PostgreSQL (the ``db_url`` fixture).
"""

from __future__ import annotations

import gc
import hashlib
import io
import json
import sqlite3
import tracemalloc
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import rfc8785
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from airlock.cli import app
from airlock.events import ExecutorEvent
from airlock.protocol import canonical_bytes
from airlock.store import (
    EVENT_MAX_BYTES,
    EXPORT_LINE_MAX_BYTES,
    GENESIS_PREV_HASH,
    AuditError,
    AuditLog,
    ChainError,
    ConfigError,
    ExportLineTooLong,
    FaultKind,
    chain_hash,
    export,
    genesis_event,
    make_engine,
    read_export_lines,
    read_transaction,
    upgrade,
    verify_chain,
    verify_export,
)

from ._support import MIGRATIONS, NOW, append_events, tamper

# Known answer: SHA-256(32 zero bytes ‖ JCS(genesis event of chain "store-tests")).
GENESIS_ROW_HASH = "26f2dbea6fe16562d29197016cc4c03b9fdd1c2755c3d8a1ee5811bf14992a9a"


def _rows(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.text("SELECT seq, event, prev_hash, row_hash FROM audit_log ORDER BY seq")
            )
        )


# -- appending ------------------------------------------------------------------------------


def test_genesis_row_is_fixed_and_hashes_raw_digest_then_jcs_event(engine: Engine) -> None:
    [genesis] = _rows(engine)
    event = canonical_bytes(genesis_event("store-tests"))
    assert (genesis.seq, genesis.event, genesis.prev_hash) == (0, event.decode(), "0" * 64)
    assert genesis.row_hash == hashlib.sha256(bytes(32) + event).hexdigest() == GENESIS_ROW_HASH


def test_appends_chain_from_genesis_and_verify(engine: Engine) -> None:
    with engine.begin() as conn:
        first = AuditLog.append(conn, {"type": "test.consumed", "approval_id": "apv_1"}, at=NOW)
        second = AuditLog.append(conn, {"type": "test.executed", "n": 2**53 - 1}, at=NOW)
    assert (first.seq, second.seq) == (1, 2)
    assert first.prev_hash == GENESIS_ROW_HASH
    assert second.prev_hash == first.row_hash
    assert first.event_text == (
        '{"approval_id":"apv_1","at":"2026-11-29T06:00:05.000000Z","type":"test.consumed"}'
    )
    assert (
        second.row_hash
        == hashlib.sha256(bytes.fromhex(first.row_hash) + second.event_text.encode()).hexdigest()
    )
    with engine.connect() as conn:
        assert AuditLog.head(conn) == second

    report = verify_chain(engine)
    assert report.ok
    assert (report.rows, report.head_seq, report.head_hash) == (3, 2, second.row_hash)
    assert verify_chain(engine, expect_head=(1, first.row_hash)).ok


def test_non_ascii_events_hash_their_utf8_bytes(engine: Engine) -> None:
    # The database hashes the bytes it is given, never its own encoding of the text.
    with engine.begin() as conn:
        entry = AuditLog.append(conn, {"type": "test.note", "by": "Zoë 🛑 ✓"}, at=NOW)
    [_, row] = _rows(engine)
    assert row.event == entry.event_text and "Zoë 🛑 ✓" in row.event
    assert row.row_hash == chain_hash(GENESIS_ROW_HASH, row.event.encode("utf-8"))
    assert verify_chain(engine).ok


def test_an_append_is_one_statement_after_the_chain_lock(engine: Engine) -> None:
    # PostgreSQL: the head is read by the INSERT itself, no SELECT of it before (one round
    # trip). SQLite has no round trips: the head is read, then the row inserted, under
    # the write lock the transaction's BEGIN IMMEDIATE took.
    seen: list[str] = []

    def record(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        seen.append(" ".join(statement.split()))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        with engine.begin() as conn:
            AuditLog.lock(conn)
            seen.clear()
            AuditLog.append(conn, {"type": "test.one"}, at=NOW)
            AuditLog.append(conn, {"type": "test.two"}, at=NOW)
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    if engine.dialect.name == "sqlite":
        assert [s.split(" ", 1)[0] for s in seen] == ["SELECT", "INSERT"] * 2, seen
        assert all(s.startswith("INSERT INTO audit_log") for s in seen[1::2]), seen
    else:
        assert len(seen) == 2, seen
        assert all(s.startswith("INSERT INTO audit_log") for s in seen), seen
    assert verify_chain(engine).ok


def test_rolled_back_transaction_leaves_no_event_and_no_gap(engine: Engine) -> None:
    class Boom(Exception):
        pass

    with pytest.raises(Boom), engine.begin() as conn:
        AuditLog.append(conn, {"type": "test.state_change"}, at=NOW)
        raise Boom
    with engine.begin() as conn:
        entry = AuditLog.append(conn, {"type": "test.state_change"}, at=NOW)
    assert entry.seq == 1
    assert verify_chain(engine).ok


def test_append_through_an_orm_session_joins_its_transaction(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        session.execute(sa.text("INSERT INTO widgets (name) VALUES ('w')"))
        entry = AuditLog.append(session, {"type": "test.widget_created"}, at=NOW)
    assert entry.seq == 1
    assert verify_chain(engine).ok


def test_append_outside_a_transaction_is_refused(engine: Engine) -> None:
    with engine.connect() as conn, pytest.raises(AuditError, match="open transaction"):
        AuditLog.append(conn, {"type": "test.event"}, at=NOW)


@pytest.mark.parametrize(
    ("event", "match"),
    [
        ({"type": "test.event", "ratio": 0.5}, "float"),
        ({"type": "test.event", "n": 2**53}, "2\\^53"),
        ({"type": "test.event", "at": "2020-01-01T00:00:00Z"}, "'at'"),
        ({"kind": "no type"}, "'type'"),
        ({"type": "airlock.audit/genesis", "chain": "x"}, "genesis"),
        ({"type": "test.event", "text": "\ud800"}, "surrogate|JSON"),
        ({"type": "test.event", "blob": "x" * (1024 * 1024)}, "over"),
        (["not", "an", "object"], "object"),
    ],
)
def test_invalid_events_are_refused_and_nothing_is_written(
    sqlite_url: str, event: Any, match: str
) -> None:
    # Validation runs before any SQL, so one database is enough here.
    engine = make_engine(sqlite_url)
    try:
        upgrade(engine, MIGRATIONS)
        with engine.begin() as conn, pytest.raises(AuditError, match=match):
            AuditLog.append(conn, event, at=NOW)
        assert len(_rows(engine)) == 1
    finally:
        engine.dispose()


def test_naive_time_is_refused(engine: Engine) -> None:
    with engine.begin() as conn, pytest.raises(AuditError, match="timezone-aware"):
        AuditLog.append(conn, {"type": "test.event"}, at=datetime(2026, 11, 29))


def test_time_that_is_not_a_datetime_is_refused(engine: Engine) -> None:
    with engine.begin() as conn, pytest.raises(AuditError, match="datetime"):
        AuditLog.append(conn, {"type": "test.event"}, at=1764400000)  # type: ignore[arg-type]


def test_append_inside_a_read_transaction_is_refused_on_sqlite(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    try:
        upgrade(engine, MIGRATIONS)
        with read_transaction(engine) as conn, pytest.raises(ConfigError, match="read_transaction"):
            AuditLog.append(conn, {"type": "test.event"}, at=NOW)
    finally:
        engine.dispose()


def test_verify_reports_progress_for_every_row(engine: Engine) -> None:
    append_events(engine, 6)
    seen: list[int] = []
    assert verify_chain(engine, progress=seen.append, batch=3).ok
    assert seen == [3, 3, 1]


def test_chain_hash_refuses_a_previous_hash_that_is_not_hex_digest() -> None:
    for bad in ("ab", "A" * 64, "g" * 64):
        with pytest.raises(ValueError):
            chain_hash(bad, b"{}")


def test_sqlite_connection_not_from_make_engine_is_refused(sqlite_url: str) -> None:
    good = make_engine(sqlite_url)
    upgrade(good, MIGRATIONS)
    good.dispose()
    plain = sa.create_engine(sqlite_url)  # pysqlite's deferred BEGIN would race on the head
    try:
        with plain.begin() as conn, pytest.raises(ConfigError, match="make_engine"):
            AuditLog.append(conn, {"type": "test.event"}, at=NOW)
    finally:
        plain.dispose()


def test_export_writes_every_row_as_canonical_json_lines(engine: Engine) -> None:
    append_events(engine, 3)
    with engine.connect() as conn:
        lines = list(export(conn))
    assert len(lines) == 4
    records = [json.loads(line) for line in lines]
    assert [r["seq"] for r in records] == [0, 1, 2, 3]
    for line, record in zip(lines, records, strict=True):
        assert canonical_bytes(record).decode() == line
    prev = GENESIS_PREV_HASH
    for record in records:
        assert record["prev_hash"] == prev
        assert record["row_hash"] == chain_hash(prev, canonical_bytes(record["event"]))
        prev = record["row_hash"]


# -- the database refuses edits -------------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE audit_log SET event = '{}' WHERE seq = 1",
        "UPDATE audit_log SET row_hash = prev_hash",
        "DELETE FROM audit_log WHERE seq = 2",
        "DELETE FROM audit_log",
    ],
)
def test_update_and_delete_are_refused_by_triggers(engine: Engine, statement: str) -> None:
    append_events(engine, 2)
    before = _rows(engine)
    with pytest.raises(DBAPIError, match="append-only"), engine.begin() as conn:
        conn.execute(sa.text(statement))
    assert _rows(engine) == before
    assert verify_chain(engine).ok


@pytest.mark.postgres
def test_truncate_is_refused_by_trigger_on_postgresql(pg_url: str) -> None:
    engine = make_engine(pg_url)
    try:
        upgrade(engine, MIGRATIONS)
        with pytest.raises(DBAPIError, match="append-only"), engine.begin() as conn:
            conn.execute(sa.text("TRUNCATE audit_log"))
        assert len(_rows(engine)) == 1
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "values",
    [
        f"(5, '{{}}', '{'a' * 64}', '{'b' * 64}')",  # a gap after the head
        f"(1, '{{}}', '{'a' * 64}', '{'b' * 64}')",  # next seq, but a forked prev_hash
    ],
)
def test_insert_that_does_not_extend_the_head_is_refused(engine: Engine, values: str) -> None:
    with pytest.raises(DBAPIError, match="extend"), engine.begin() as conn:
        conn.execute(
            sa.text(f"INSERT INTO audit_log (seq, event, prev_hash, row_hash) VALUES {values}")
        )
    assert verify_chain(engine).ok


@pytest.mark.parametrize("through", ["sqlite3 shell", "make_engine"])
@pytest.mark.parametrize("conflict", ["row_hash", "rowid"])
def test_insert_or_replace_cannot_delete_an_audit_row(
    sqlite_url: str, through: str, conflict: str
) -> None:
    """A row that extends the head passes the append-only trigger; with REPLACE, one
    sharing row 2's row_hash (or naming its rowid) would delete row 2, firing no DELETE
    trigger in the sqlite3 shell (recursive_triggers off)."""
    engine = make_engine(sqlite_url)
    try:
        upgrade(engine, MIGRATIONS)
        append_events(engine, 3)
        before = _rows(engine)
        head = before[-1]
        sql = "INSERT OR REPLACE INTO audit_log (rowid, seq, event, prev_hash, row_hash) "
        sql += "VALUES (?, ?, ?, ?, ?)"
        values: tuple[Any, ...] = (None, head.seq + 1, "{}", head.row_hash)
        if conflict == "rowid":  # row 2's rowid (rows are inserted in seq order)
            values = (3, *values[1:], "f" * 64)
        else:  # None: SQLite assigns the rowid
            values = (*values, before[2].row_hash)
        if through == "sqlite3 shell":
            shell = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
            try:
                with pytest.raises(sqlite3.IntegrityError, match="conflicting with a row"):
                    shell.execute(sql, values)
            finally:
                shell.close()
        else:
            with pytest.raises(DBAPIError, match="conflicting with a row"), engine.begin() as conn:
                conn.exec_driver_sql(sql, values)
        assert _rows(engine) == before
        assert verify_chain(engine).ok
    finally:
        engine.dispose()


# -- tampering is detected and the first bad row named ---------------------------------------

_EVIL = '{"at":"2026-11-29T06:00:05.000000Z","i":999,"type":"test.event"}'
_CASES: dict[str, tuple[tuple[str, ...], int, FaultKind]] = {
    "edited_event": (
        (f"UPDATE audit_log SET event = '{_EVIL}' WHERE seq = 4",),
        4,
        FaultKind.HASH_MISMATCH,
    ),
    "deleted_row": (("DELETE FROM audit_log WHERE seq = 4",), 4, FaultKind.GAP),
    "reordered_rows": (
        (
            "UPDATE audit_log SET seq = 1000 WHERE seq = 3",
            "UPDATE audit_log SET seq = 3 WHERE seq = 4",
            "UPDATE audit_log SET seq = 4 WHERE seq = 1000",
        ),
        3,
        FaultKind.BROKEN_LINK,
    ),
    "relinked_row": (
        (f"UPDATE audit_log SET prev_hash = '{'f' * 64}' WHERE seq = 6",),
        6,
        FaultKind.BROKEN_LINK,
    ),
    "non_canonical_event": (
        (
            "UPDATE audit_log SET event = "
            '\'{"at": "2026-11-29T06:00:05.000000Z", "i": 4, "type": "test.event"}\' '
            "WHERE seq = 5",
        ),
        5,
        FaultKind.NON_CANONICAL_EVENT,
    ),
    "unparsable_event": (
        ('UPDATE audit_log SET event = \'{"i": 1.5, "type": "x"}\' WHERE seq = 2',),
        2,
        FaultKind.UNPARSABLE_EVENT,
    ),
    "deleted_genesis": (("DELETE FROM audit_log WHERE seq = 0",), 0, FaultKind.MISSING_GENESIS),
}


@pytest.mark.parametrize("case", sorted(_CASES))
def test_tampering_is_detected_at_the_first_bad_row(engine: Engine, case: str) -> None:
    statements, bad_seq, kind = _CASES[case]
    append_events(engine, 8)
    assert verify_chain(engine).ok
    tamper(engine, *statements)
    report = verify_chain(engine)
    assert not report.ok
    assert report.fault is not None
    assert (report.fault.seq, report.fault.kind) == (bad_seq, kind), str(report.fault)
    assert report.rows == bad_seq


def test_edited_and_rehashed_row_breaks_the_next_link(engine: Engine) -> None:
    append_events(engine, 8)
    prev = _rows(engine)[3].row_hash
    forged = chain_hash(prev, _EVIL.encode())
    tamper(engine, f"UPDATE audit_log SET event = '{_EVIL}', row_hash = '{forged}' WHERE seq = 4")
    report = verify_chain(engine)
    assert report.fault is not None
    assert (report.fault.seq, report.fault.kind) == (5, FaultKind.BROKEN_LINK)


def test_rehashing_the_rest_of_the_chain_is_caught_by_a_recorded_head(engine: Engine) -> None:
    append_events(engine, 5)
    with engine.connect() as conn:
        recorded = AuditLog.head(conn)  # what a receipt carries
    rows = _rows(engine)
    # The attacker rewrites row 3 and re-derives every later hash: a self-consistent fork.
    prev, updates = rows[2].row_hash, []
    for row in rows[3:]:
        event = _EVIL if row.seq == 3 else row.event
        new_hash = chain_hash(prev, event.encode())
        updates.append(
            f"UPDATE audit_log SET event = '{event}', prev_hash = '{prev}', "
            f"row_hash = '{new_hash}' WHERE seq = {row.seq}"
        )
        prev = new_hash
    tamper(engine, *updates)
    assert verify_chain(engine).ok  # undetectable from inside the database alone...
    report = verify_chain(engine, expect_head=(recorded.seq, recorded.row_hash))
    assert report.fault is not None  # ...but not against the head recorded elsewhere
    assert (report.fault.seq, report.fault.kind) == (recorded.seq, FaultKind.HEAD_MISMATCH)


def test_truncated_tail_is_caught_by_a_recorded_head(engine: Engine) -> None:
    append_events(engine, 5)
    with engine.connect() as conn:
        recorded = AuditLog.head(conn)
    tamper(engine, "DELETE FROM audit_log WHERE seq >= 4")
    report = verify_chain(engine, expect_head=(recorded.seq, recorded.row_hash))
    assert report.fault is not None
    assert report.fault.kind is FaultKind.HEAD_MISMATCH
    assert report.rows == 4


# -- the CLI --------------------------------------------------------------------------------


def test_cli_verify_exits_0_on_a_good_chain(engine: Engine, db_url: str) -> None:
    append_events(engine, 3)
    result = CliRunner().invoke(app, ["audit", "verify", "--db", db_url])
    assert result.exit_code == 0, result.output
    assert "OK: 4 rows" in result.output


def test_cli_verify_exits_1_naming_the_edited_row(engine: Engine, db_url: str) -> None:
    append_events(engine, 8)
    tamper(engine, f"UPDATE audit_log SET event = '{_EVIL}' WHERE seq = 4")
    result = CliRunner().invoke(app, ["audit", "verify", "--db", db_url])
    assert result.exit_code == 1, result.output
    assert "first bad row seq 4: hash_mismatch" in result.output


def test_cli_verify_exits_1_on_a_head_mismatch(engine: Engine, db_url: str) -> None:
    append_events(engine, 2)
    head = f"2:{'0' * 64}"
    result = CliRunner().invoke(app, ["audit", "verify", "--db", db_url, "--expect-head", head])
    assert result.exit_code == 1, result.output
    assert "seq 2: head_mismatch" in result.output


def test_cli_verify_exits_2_when_there_is_no_chain(sqlite_url: str, tmp_path: Any) -> None:
    missing = CliRunner().invoke(app, ["audit", "verify", "--db", sqlite_url])
    assert missing.exit_code == 2
    assert "does not exist" in missing.output
    make_engine(sqlite_url).dispose()
    (tmp_path / "airlock.db").touch()
    empty = CliRunner().invoke(app, ["audit", "verify", "--db", sqlite_url])
    assert empty.exit_code == 2
    assert "no audit_log table" in empty.output


def test_cli_export_writes_json_lines_to_a_file(engine: Engine, db_url: str, tmp_path: Any) -> None:
    append_events(engine, 2)
    out = tmp_path / "chain.jsonl"
    result = CliRunner().invoke(app, ["audit", "export", "--db", db_url, "--out", str(out)])
    assert result.exit_code == 0, result.output
    with engine.connect() as conn:
        lines = list(export(conn))
    assert out.read_text().splitlines() == lines
    # It says what it wrote (it printed nothing before), on stderr: stdout stays empty.
    head = json.loads(lines[-1])
    assert result.stdout == ""
    assert f"wrote 3 rows to {out} (head seq 2 row_hash {head['row_hash']})" in result.stderr


# -- an exported file verifies with no database ---------------------------------------------


def _exported(engine: Engine, appends: int) -> list[str]:
    append_events(engine, appends)
    with engine.connect() as conn:
        return list(export(conn))


def test_export_verifies_without_the_database(engine: Engine) -> None:
    lines = _exported(engine, 5)
    report = verify_export(lines)
    assert report.ok
    assert (report.rows, report.head_hash) == (6, verify_chain(engine).head_hash)


def _edit_event(lines: list[str]) -> list[str]:
    return [*lines[:3], lines[3].replace('"i":2', '"i":9'), *lines[4:]]


def _spaced(lines: list[str]) -> list[str]:
    return [*lines[:3], lines[3].replace('"i":2', '"i": 2'), *lines[4:]]


def _float(lines: list[str]) -> list[str]:
    return [*lines[:3], lines[3].replace('"i":2', '"i":2.5'), *lines[4:]]


_EXPORT_CASES = {
    "edited_event": (_edit_event, 3, FaultKind.HASH_MISMATCH),
    "dropped_line": (lambda lines: lines[:3] + lines[4:], 3, FaultKind.GAP),
    "swapped_lines": (lambda lines: [*lines[:3], lines[4], lines[3], *lines[5:]], 3, FaultKind.GAP),
    "non_canonical_line": (_spaced, 3, FaultKind.NON_CANONICAL_EVENT),
    "float_in_event": (_float, 3, FaultKind.UNPARSABLE_EVENT),
    "garbage_line": (
        lambda lines: [*lines[:3], "garbage", *lines[4:]],
        3,
        FaultKind.UNPARSABLE_EVENT,
    ),
    "no_genesis": (lambda lines: lines[1:], 0, FaultKind.MISSING_GENESIS),
}


@pytest.mark.parametrize("case", sorted(_EXPORT_CASES))
def test_tampered_export_is_detected_at_the_first_bad_row(sqlite_url: str, case: str) -> None:
    edit, bad_seq, kind = _EXPORT_CASES[case]
    engine = make_engine(sqlite_url)
    try:
        upgrade(engine, MIGRATIONS)
        lines = _exported(engine, 6)
    finally:
        engine.dispose()
    report = verify_export(edit(lines))
    assert report.fault is not None
    assert (report.fault.seq, report.fault.kind) == (bad_seq, kind), str(report.fault)


def test_truncated_export_is_caught_by_a_recorded_head(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    try:
        upgrade(engine, MIGRATIONS)
        lines = _exported(engine, 4)
    finally:
        engine.dispose()
    last = json.loads(lines[-1])
    assert verify_export(lines[:-1]).ok
    report = verify_export(lines[:-1], expect_head=(last["seq"], last["row_hash"]))
    assert report.fault is not None
    assert report.fault.kind is FaultKind.HEAD_MISMATCH


def test_cli_verifies_an_exported_file(engine: Engine, db_url: str, tmp_path: Any) -> None:
    append_events(engine, 6)
    out = tmp_path / "chain.jsonl"
    runner = CliRunner()
    assert runner.invoke(app, ["audit", "export", "--db", db_url, "--out", str(out)]).exit_code == 0
    good = runner.invoke(app, ["audit", "verify", "--file", str(out)])
    assert good.exit_code == 0, good.output
    out.write_text(out.read_text().replace('"i":4', '"i":5'))
    bad = runner.invoke(app, ["audit", "verify", "--file", str(out)])
    assert bad.exit_code == 1, bad.output
    assert "first bad row seq 5: hash_mismatch" in bad.output


class _CountingStream(io.RawIOBase):
    """``size`` bytes of one endless line, counting how many of them were read."""

    def __init__(self, size: int) -> None:
        self.left = size
        self.read_bytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), self.left)
        buffer[:n] = b"x" * n
        self.left -= n
        self.read_bytes += n
        return n


def test_export_lines_are_read_up_to_the_cap_and_no_further() -> None:
    """A line of many megabytes, or a file with no newline at all: the reader stops one
    byte past the cap (plus one buffer), never holding the line."""
    stream = _CountingStream(8 * 1024 * 1024)
    lines = read_export_lines(io.BufferedReader(stream), max_bytes=4096, source="huge.jsonl")
    with pytest.raises(ExportLineTooLong) as caught:
        next(lines)
    assert (caught.value.line, caught.value.max_bytes) == (1, 4096)
    assert str(caught.value).startswith("huge.jsonl: line 1 is longer than 4096 bytes")
    assert stream.read_bytes <= 4096 + 1 + io.DEFAULT_BUFFER_SIZE


def test_export_lines_at_the_cap_pass_and_the_first_longer_one_is_named() -> None:
    cap = 64
    data = b"a" * cap + b"\n" + b"b\r\n" + "é".encode() + b"\xff\n" + b"c" * (cap + 1) + b"\nd\n"
    lines = read_export_lines(io.BytesIO(data), max_bytes=cap)
    # Only \n ends a line; \r and invalid UTF-8 are kept for the verifier to refuse.
    assert [next(lines) for _ in range(3)] == ["a" * cap, "b\r", "é\udcff"]
    with pytest.raises(ExportLineTooLong) as caught:
        next(lines)
    assert caught.value.line == 4
    # The last line may lack its newline, as long as it fits.
    assert list(read_export_lines(io.BytesIO(b"x\n" + b"y" * cap), max_bytes=cap)) == [
        "x",
        "y" * cap,
    ]


def test_the_cap_holds_the_largest_event_an_append_accepts(engine: Engine) -> None:
    """The cap is a bound on what export writes, not a guess: an event of the largest
    size append accepts exports to a line within it, and verifies read back."""
    probe = len(canonical_bytes({"type": "t", "pad": "", "at": "2026-11-29T06:00:05.000000Z"}))
    pad = "p" * (EVENT_MAX_BYTES - probe)
    with engine.begin() as conn:
        AuditLog.append(conn, {"type": "t", "pad": pad}, at=NOW)
    with engine.connect() as conn:
        lines = list(export(conn))
    assert len(lines[-1].encode()) <= EXPORT_LINE_MAX_BYTES
    data = "".join(line + "\n" for line in lines).encode()
    assert verify_export(read_export_lines(io.BytesIO(data))).ok


def _peak_while(run: Any) -> tuple[Any, int]:
    """Run ``run()``; its result and the most memory Python held meanwhile above before."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = run()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return result, peak - before


def test_cli_verify_names_an_over_long_line_without_reading_it_whole(
    sqlite_url: str, tmp_path: Path
) -> None:
    engine = make_engine(sqlite_url)
    try:
        upgrade(engine, MIGRATIONS)
        append_events(engine, 3)
        with engine.connect() as conn:
            good = "".join(line + "\n" for line in export(conn))
    finally:
        engine.dispose()
    line = 4 * 1024 * 1024  # four times the cap, with no newline: a few MB is enough
    path = tmp_path / "chain.jsonl"
    path.write_bytes(good.encode() + b'{"event":' + b"x" * line)
    runner = CliRunner()
    assert runner.invoke(app, ["audit", "verify", "--file", str(path)]).exit_code == 1  # warm
    result, peak = _peak_while(lambda: runner.invoke(app, ["audit", "verify", "--file", str(path)]))
    assert peak < line, f"held {peak} bytes while refusing a {line}-byte line"
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)  # no traceback
    assert result.output == (
        f"FAIL: first bad row seq 4: line 5 is longer than {EXPORT_LINE_MAX_BYTES} bytes, the "
        "most an audit export line can hold; not read further\nrows verified before it: 4\n"
    )


@pytest.mark.parametrize(
    "bad", ["not-a-digest", "AB" * 32, "ab" * 31 + "a", "ab" * 31 + "a ", "ab" * 31 + "a\n"]
)
def test_append_on_a_corrupted_head_is_refused(engine: Engine, bad: str) -> None:
    append_events(engine, 2)
    tamper(engine, f"UPDATE audit_log SET row_hash = '{bad}' WHERE seq = 2")
    with engine.begin() as conn, pytest.raises(ChainError, match="malformed"):
        AuditLog.append(conn, {"type": "test.event"}, at=NOW)
    # Refused at the head: never appended after the last well-formed row instead.
    assert [r.seq for r in _rows(engine)] == [0, 1, 2]


def test_an_event_typed_by_an_enum_member_is_encoded_without_the_slow_encoder(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The services name event types by StrEnum members: the append writes the member's
    text, byte for byte what rfc8785 would, through the fast encoder alone."""

    def refused(value: object) -> bytes:
        raise AssertionError("the slow encoder was asked")

    monkeypatch.setattr(rfc8785, "dumps", refused)
    event = {"type": ExecutorEvent.CONSUMED, "approval_id": "apv_x", "epoch": 1}
    with engine.begin() as conn:
        entry = AuditLog.append(conn, event, at=NOW)
    monkeypatch.undo()
    at = json.loads(entry.event_text)["at"]
    expected = rfc8785.dumps({**event, "type": "executor.consumed", "at": at})
    assert entry.event_text.encode() == expected
    assert verify_chain(engine).ok
