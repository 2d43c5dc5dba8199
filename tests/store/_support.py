"""Shared constants and attacker helpers for the store tests."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.engine import Engine

from airlock.store import AuditLog, is_sqlite

MIGRATIONS = Path(__file__).parent / "migrations"
#: Injected time for every appended event; the chain never reads a clock.
NOW = datetime(2026, 11, 29, 6, 0, 5, tzinfo=UTC)

_SQLITE_TRIGGERS = (
    "audit_log_no_update",
    "audit_log_no_delete",
    "audit_log_extends_head",
    "audit_log_no_replace",
)


def append_events(engine: Engine, count: int) -> None:
    """Append ``count`` events, one transaction each, as a service would."""
    for i in range(count):
        with engine.begin() as conn:
            AuditLog.append(conn, {"type": "test.event", "i": i}, at=NOW)


def tamper(engine: Engine, *statements: str) -> None:
    """Run ``statements`` as an attacker with full database access: triggers off first."""
    with engine.begin() as conn:
        if is_sqlite(conn):
            for name in _SQLITE_TRIGGERS:
                conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")
        else:
            conn.exec_driver_sql("ALTER TABLE audit_log DISABLE TRIGGER USER")
        for statement in statements:
            conn.exec_driver_sql(statement)
