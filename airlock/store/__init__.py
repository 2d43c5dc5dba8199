"""Storage shared by every service: engines, migrations, and the hash-chained audit log.

- :func:`make_engine` — SQLite (WAL, ``synchronous=FULL``, ``BEGIN IMMEDIATE``) or
  PostgreSQL (psycopg 3) from a URL; :func:`read_transaction` for snapshot reads,
  :func:`read_statements` for reads that need no common snapshot.
- :func:`upgrade` / :func:`run_migrations` — each service's own Alembic migrations,
  serialized across processes (see ``_migrate.py`` for the directory layout).
- :func:`create_audit_log`, :func:`guard_audit_log_against_replace`, :func:`add_lane_column`,
  :func:`add_audit_lanes` and :func:`add_audit_append` (in a migration),
  :class:`AuditLog` (append in the caller's
  transaction, head), :func:`verify_chain`, :func:`export`, :func:`verify_export` (an export file,
  no database needed, read line by line with a bounded :func:`read_export_lines`) —
  docs/protocol.md#audit-chain.
- :class:`Prepared` — a hot statement compiled once, run on the driver's cursor inside
  the caller's transaction.

Typical use in a service::

    engine = make_engine(settings.database_url)
    upgrade(engine, MIGRATIONS_DIR)
    with engine.begin() as conn:
        conn.execute(ledger.insert().values(...))
        AuditLog.append(conn, {"type": "executor.consumed", "approval_id": aid}, at=now)

Nothing here holds a secret or talks to a cloud; nothing here updates or deletes an
audit row.
"""

from ._audit import (
    AUDIT_TABLE,
    EVENT_MAX_BYTES,
    EXPORT_LINE_MAX_BYTES,
    GENESIS_PREV_HASH,
    GENESIS_TYPE,
    AuditEntry,
    AuditLog,
    chain_hash,
    count_rows,
    create_audit_log,
    export,
    genesis_event,
    guard_audit_log_against_replace,
)
from ._engine import (
    DEFAULT_BUSY_TIMEOUT_S,
    is_postgresql,
    is_sqlite,
    make_engine,
    read_statements,
    read_transaction,
)
from ._lanes import add_audit_append, add_audit_lanes, add_lane_column
from ._migrate import alembic_config, run_migrations, upgrade
from ._prepared import Prepared
from ._verify import (
    ChainFault,
    ChainReport,
    FaultKind,
    read_export_lines,
    verify_chain,
    verify_export,
)
from .errors import AuditError, ChainError, ConfigError, Error, ExportLineTooLong, MigrationError

__all__ = [
    "AUDIT_TABLE",
    "DEFAULT_BUSY_TIMEOUT_S",
    "EVENT_MAX_BYTES",
    "EXPORT_LINE_MAX_BYTES",
    "GENESIS_PREV_HASH",
    "GENESIS_TYPE",
    "AuditEntry",
    "AuditError",
    "AuditLog",
    "ChainError",
    "ChainFault",
    "ChainReport",
    "ConfigError",
    "Error",
    "ExportLineTooLong",
    "FaultKind",
    "MigrationError",
    "Prepared",
    "add_audit_append",
    "add_audit_lanes",
    "add_lane_column",
    "alembic_config",
    "chain_hash",
    "count_rows",
    "create_audit_log",
    "export",
    "genesis_event",
    "guard_audit_log_against_replace",
    "is_postgresql",
    "is_sqlite",
    "make_engine",
    "read_export_lines",
    "read_statements",
    "read_transaction",
    "run_migrations",
    "upgrade",
    "verify_chain",
    "verify_export",
]
