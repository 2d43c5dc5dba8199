"""The storage package's one error tree.

Error hierarchy::

    Error                  root of everything airlock.store raises on purpose
    ├── ConfigError        a database URL we refuse (unknown driver, memory DB, missing dir)
    ├── AuditError         an event that cannot go into the audit chain (floats, too big, ...)
    ├── ChainError         the audit chain is missing or unreadable (no table, no genesis)
    └── MigrationError     a service's migrations directory is unusable

Database errors raised by the driver (SQLAlchemy's ``DBAPIError`` tree) pass through
untouched: a refused UPDATE on the audit log is the database saying no, and callers must
see it as such, never as a success.
"""

from __future__ import annotations

__all__ = ["AuditError", "ChainError", "ConfigError", "Error", "MigrationError"]


class Error(Exception):
    """Root of every error raised by :mod:`airlock.store`."""


class ConfigError(Error):
    """A database URL or option that is refused before any connection is made."""


class AuditError(Error):
    """An event refused by :meth:`airlock.store.AuditLog.append`; nothing was written."""


class ChainError(Error):
    """The audit chain cannot be read at all (no ``audit_log`` table, no genesis row)."""


class MigrationError(Error):
    """A migrations directory is missing or malformed."""
