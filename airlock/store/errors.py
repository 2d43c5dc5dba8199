"""The storage package's one error tree.

Error hierarchy::

    Error                  root of everything airlock.store raises on purpose
    ├── ConfigError        a database URL we refuse (unknown driver, memory DB, missing dir)
    ├── AuditError         an event that cannot go into the audit chain (floats, too big, ...)
    ├── ChainError         the audit chain is missing or unreadable (no table, no genesis)
    ├── ExportLineTooLong  a line of an audit export file is longer than any export writes
    └── MigrationError     a service's migrations directory is unusable

Database errors raised by the driver (SQLAlchemy's ``DBAPIError`` tree) pass through
untouched: a refused UPDATE on the audit log is the database saying no, and callers must
see it as such, never as a success.
"""

from __future__ import annotations

__all__ = [
    "AuditError",
    "ChainError",
    "ConfigError",
    "Error",
    "ExportLineTooLong",
    "MigrationError",
]


class Error(Exception):
    """Root of every error raised by :mod:`airlock.store`."""


class ConfigError(Error):
    """A database URL or option that is refused before any connection is made."""


class AuditError(Error):
    """An event refused by :meth:`airlock.store.AuditLog.append`; nothing was written."""


class ChainError(Error):
    """The audit chain cannot be read at all (no ``audit_log`` table, no genesis row)."""


class ExportLineTooLong(Error):
    """A line of an audit export is longer than any line ``export`` writes.

    Raised by :func:`airlock.store.read_export_lines` after reading at most ``max_bytes``
    + 1 bytes of the line: the rest of it is never read. ``line`` counts from 1.
    """

    def __init__(self, line: int, max_bytes: int, source: str | None = None) -> None:
        where = f"{source}: " if source else ""
        super().__init__(
            f"{where}line {line} is longer than {max_bytes} bytes, the most an audit export "
            "line can hold; not read further"
        )
        self.line = line
        self.max_bytes = max_bytes
        self.source = source


class MigrationError(Error):
    """A migrations directory is missing or malformed."""
