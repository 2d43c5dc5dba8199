"""Migrated SQLite databases for tests, without running the migrations for each one.

Alembic costs a tenth of a second of CPU and more a database, and the suite makes
thousands of them: :func:`sqlite_copy` writes a copy of one database migrated once per
process instead. Each test still gets a file of its own; the caller still runs its
``upgrade`` on it, which finds it at the head.
"""

from __future__ import annotations

import contextlib
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["sqlite_copy"]

_MIGRATED: dict[str, bytes] = {}


def sqlite_copy(url: str, name: str, migrate: Callable[[str], None]) -> bool:
    """Write, at ``url``'s SQLite file, a copy of the database ``migrate(url)`` makes
    from nothing (made once per process for ``name``). False, and nothing written, when
    ``url`` is not SQLite or its file exists already."""
    path = Path(url.removeprefix("sqlite:///"))
    if not url.startswith("sqlite:///") or path.exists():
        return False
    if name not in _MIGRATED:
        with tempfile.TemporaryDirectory() as tmp:
            template = Path(tmp) / "migrated.db"
            migrate(f"sqlite:///{template}")
            # Folds the WAL into the file, outside any transaction of the engine's.
            with contextlib.closing(sqlite3.connect(template)) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            _MIGRATED[name] = template.read_bytes()
    path.write_bytes(_MIGRATED[name])
    return True
