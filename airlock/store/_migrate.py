"""Alembic migrations per service database, safe to run from several processes at once.

Not public: use ``airlock.store.upgrade`` and ``airlock.store.run_migrations``.

How a service sets up its migrations (``airlock/ledger/migrations`` as the example)::

    airlock/ledger/migrations/
        env.py            three lines, below
        script.py.mako    copy of alembic's templates/generic/script.py.mako
        versions/
            0001_ledger.py

``env.py``::

    from airlock.store import run_migrations
    from airlock.ledger import metadata  # or None if you write DDL by hand
    run_migrations(target_metadata=metadata)

The first revision creates the service's audit chain next to its own tables::

    from alembic import op
    from airlock.store import create_audit_log

    revision = "0001"
    down_revision = None

    def upgrade() -> None:
        create_audit_log(op, "executor")
        op.create_table(...)

    def downgrade() -> None:
        raise RuntimeError("an audit log is evidence: no downgrade")

At start a service calls ``upgrade(engine, Path(__file__).parent / "migrations")``.
Every run holds a lock for its whole duration, so N processes starting together apply
each revision once and the others then find the database at head: on PostgreSQL a
transaction-scoped ``pg_advisory_xact_lock`` taken before Alembic reads the version
table; on SQLite the ``BEGIN IMMEDIATE`` of an engine from ``make_engine`` (the
migration runs in that one transaction; SQLite DDL is transactional). A failed
revision rolls back entirely. On SQLite foreign keys are off during the migration (so
``op.batch_alter_table`` cannot cascade-delete child rows) and checked before commit.

New revision files: ``alembic.command.revision(alembic_config(DIR), "message")``, or
``--autogenerate`` with ``-x db=URL`` through the ``alembic`` CLI and an ini naming
``script_location``. Autogenerate never proposes changes to ``audit_log``.

This module must never run a migration without holding the lock, and never commit part
of an upgrade.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ._audit import AUDIT_TABLE
from ._engine import is_postgresql, is_sqlite, make_engine, read_transaction, require_immediate
from .errors import MigrationError

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = ["alembic_config", "run_migrations", "upgrade"]

_MIGRATE_LOCK_KEY = int.from_bytes(
    hashlib.sha256(b"airlock.store.migrate").digest()[:8], "big", signed=True
)
_CONNECTION = "airlock_connection"


def alembic_config(script_location: str | Path, *, url: str | None = None) -> Config:
    """An Alembic ``Config`` for a service's migrations directory (no ini file needed)."""
    from alembic.config import Config  # noqa: PLC0415 - see _at_head

    location = Path(script_location)
    if not (location / "env.py").is_file():
        raise MigrationError(f"{str(location)!r} is not a migrations directory (no env.py)")
    if not (location / "versions").is_dir():
        raise MigrationError(f"{str(location)!r} has no versions/ directory")
    cfg = Config()
    cfg.set_main_option("script_location", str(location))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


@contextmanager
def _locked_transaction(engine: Engine) -> Iterator[Connection]:
    """One transaction holding the migration lock, committed only if nothing failed.

    SQLite: foreign keys are switched off for the migration and checked before commit
    (SQLite's documented ALTER procedure, lang_altertable.html §7). Alembic's batch mode
    rebuilds a table by DROP TABLE + rename, and with foreign keys on, that DROP is an
    implicit DELETE firing every ON DELETE CASCADE: child rows would silently vanish.
    The pragma is a no-op inside a transaction, hence set on the raw connection first.
    """
    with engine.connect() as conn:
        sqlite = is_sqlite(conn)
        if sqlite:
            _raw_pragma(conn, "PRAGMA foreign_keys=OFF")
        try:
            with conn.begin():
                if is_postgresql(conn):
                    conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_MIGRATE_LOCK_KEY)))
                elif sqlite:
                    # BEGIN IMMEDIATE already holds the only write lock there is.
                    require_immediate(conn)
                else:
                    raise MigrationError(f"unsupported dialect {conn.dialect.name!r}")
                yield conn
                if sqlite:
                    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                    if broken:
                        raise MigrationError(
                            f"migration left {len(broken)} foreign key violations, "
                            f"first in table {broken[0][0]!r}; rolled back"
                        )
        finally:
            if sqlite:
                try:
                    _raw_pragma(conn, "PRAGMA foreign_keys=ON")
                except Exception:
                    # Never return a connection without foreign keys to the pool.
                    conn.invalidate()
                    raise


def _raw_pragma(conn: Connection, pragma: str) -> None:
    # Straight to pysqlite, outside any SQLAlchemy transaction (no BEGIN is emitted).
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(pragma)
    finally:
        cursor.close()


def upgrade(engine: Engine, script_location: str | Path, *, revision: str = "head") -> None:
    """Run ``alembic upgrade <revision>`` for one service's migrations, under the lock.

    ``engine`` comes from :func:`airlock.store.make_engine`. All pending revisions apply
    in one transaction: either the database reaches ``revision`` or nothing changed.
    """
    if revision == "head" and _at_head(engine, Path(script_location)):
        return
    from alembic import command  # noqa: PLC0415 - see _at_head

    cfg = alembic_config(script_location)
    with _locked_transaction(engine) as conn:
        cfg.attributes[_CONNECTION] = conn
        command.upgrade(cfg, revision)


#: ``revision = "…"`` and ``down_revision = …`` in a revision file, annotated or not.
_REVISION: Final = re.compile(r'^revision\b[^=\n]*=\s*"([^"\n]+)"\s*$', re.MULTILINE)
_DOWN: Final = re.compile(r"^down_revision\b[^=\n]*=\s*(None|\"[^\"\n]+\")\s*$", re.MULTILINE)


def _script_head(location: Path) -> str | None:
    """The one head revision of ``location``'s linear history, read from the revision
    files' text; None when any file is not of the plain form this reads (a merge, a
    branch, another spelling), which sends the caller to Alembic itself."""
    revisions: dict[str, str | None] = {}
    for path in sorted((location / "versions").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        found, down = _REVISION.findall(text), _DOWN.findall(text)
        if len(found) != 1 or len(down) != 1 or found[0] in revisions:
            return None
        revisions[found[0]] = None if down[0] == "None" else down[0].strip('"')
    heads = set(revisions) - set(revisions.values())
    roots = [r for r, d in revisions.items() if d is None]
    if len(heads) != 1 or len(roots) != 1 or not set(revisions.values()) - {None} <= set(revisions):
        return None
    return heads.pop()


def _at_head(engine: Engine, location: Path) -> bool:
    """True when the database is already at ``location``'s one head: a service that
    starts on a migrated database then never loads Alembic (about a quarter of a
    second of CPU a start). A read without the lock is enough: nobody migrates past the
    head. Anything unsure is False, and Alembic decides under the lock."""
    head = _script_head(location)
    if head is None:
        return False
    try:
        with read_transaction(engine) as conn:
            if not sa.inspect(conn).has_table("alembic_version"):
                return False
            rows = conn.execute(sa.text("SELECT version_num FROM alembic_version")).all()
    except sa.exc.SQLAlchemyError:
        return False
    return [row[0] for row in rows] == [head]


def _include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    # audit_log is created by create_audit_log, not by a service's metadata; without this
    # autogenerate would propose dropping it.
    table = getattr(obj, "table", None)
    return name != AUDIT_TABLE and getattr(table, "name", None) != AUDIT_TABLE


def run_migrations(target_metadata: sa.MetaData | None = None) -> None:
    """The body of every service's ``env.py``.

    Uses the connection that :func:`upgrade` opened and locked; invoked from the
    ``alembic`` CLI instead, connects to ``-x db=URL`` (or ``sqlalchemy.url``) through
    :func:`make_engine` and takes the same lock. ``--sql`` (offline) renders the DDL.
    """
    options: dict[str, Any] = {
        "target_metadata": target_metadata,
        "include_object": _include_object,
        # SQLite's DDL is transactional once pysqlite stops committing behind our back
        # (make_engine does that), so the whole upgrade is one transaction there too.
        "transactional_ddl": True,
    }
    from alembic import context  # noqa: PLC0415 - see _at_head

    if context.is_offline_mode():
        context.configure(url=_cli_url(context.config), literal_binds=True, **options)
        with context.begin_transaction():
            context.run_migrations()
        return

    conn = context.config.attributes.get(_CONNECTION)
    if conn is not None:
        context.configure(connection=conn, **options)
        context.run_migrations()
        return

    engine = make_engine(_cli_url(context.config))
    try:
        with _locked_transaction(engine) as own:
            context.configure(connection=own, **options)
            context.run_migrations()
    finally:
        engine.dispose()


def _cli_url(config: Config) -> str:
    from alembic import context  # noqa: PLC0415 - see _at_head

    url = context.get_x_argument(as_dictionary=True).get("db") or config.get_main_option(
        "sqlalchemy.url"
    )
    if not url:
        raise MigrationError("no database: pass -x db=URL")
    return str(url)
