"""Database fixtures shared by the whole suite.

- ``sqlite_url``: a fresh SQLite file in the test's ``tmp_path``.
- ``pg_url``: an empty PostgreSQL database of its own per test function, on the server
  named by ``AIRLOCK_TEST_PG_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``).
  Made from ``template0`` once and then reused by this process (:class:`_PgPool`): after
  a test every connection to it is ended, its ``public`` schema is made anew, and it is
  renamed before the next test gets it, so a process a test left behind cannot reach the
  next test's data. A database that cannot be reset is dropped.
- ``db_url``: parametrized over both; the PostgreSQL case carries the ``postgres`` mark.

PostgreSQL tests skip loudly (a summary line at the end) when no server answers, and
fail instead when ``AIRLOCK_REQUIRE_POSTGRES=1``: CI must never pass by skipping them.
URLs are plain ``sqlite:///…`` / ``postgresql://…`` strings for ``make_engine``.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import make_url

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
_PG_SKIP = "SKIPPED PostgreSQL TEST"
_STATE_BEFORE = pytest.StashKey[bool]()


#: Loggers a command configures for its whole process when it starts (the root, uvicorn's).
_CONFIGURED_LOGGERS = ("", "uvicorn", "uvicorn.error", "uvicorn.access")


@pytest.fixture(autouse=True)
def _process_logging_restored() -> Iterator[None]:
    """Logging as it was before the test, after it.

    A command run in-process (typer's runner) configures logging for the whole process,
    as it must in a real one (airlock.text.inert_log_config): its handler writes to the
    stderr the runner had then. Left in place, a later test's log records go to that
    closed stream and "--- Logging error ---" lands in whatever that test captures
    (found when a checkpoint command test ran before the CLI's sign-in tests).
    """
    saved = [
        (lg, lg.level, list(lg.handlers), lg.propagate, lg.disabled)
        for lg in (logging.getLogger(name) for name in _CONFIGURED_LOGGERS)
    ]
    yield
    for lg, level, before, propagate, disabled in saved:
        lg.setLevel(level)
        # pytest adds and removes its own capture handlers around each phase: leave
        # those to it, and drop only what the test's commands added.
        lg.handlers[:] = [
            h for h in lg.handlers if h in before or type(h).__module__.startswith("_pytest")
        ]
        lg.propagate = propagate
        lg.disabled = disabled


def _pg_admin_url() -> str:
    return os.environ.get("AIRLOCK_TEST_PG_URL", DEFAULT_PG_URL)


def _libpq(url: str) -> str:
    """The URL psycopg itself accepts (no SQLAlchemy ``+driver`` suffix)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def pg_server() -> str:
    """The admin URL of a reachable PostgreSQL server, or skip (fail if required)."""
    url = _pg_admin_url()
    try:
        with psycopg.connect(_libpq(url), connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        reason = f"PostgreSQL unreachable at {make_url(url)!r}: {exc}".strip()
        if os.environ.get("AIRLOCK_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"AIRLOCK_REQUIRE_POSTGRES=1 but {reason}", pytrace=False)
        pytest.skip(f"{_PG_SKIP} — {reason}")
    return url


class _PgPool:
    """Empty test databases for one process: CREATE DATABASE copies ``template0`` with
    two syncs (~0.3 s) and DROP DATABASE another (~0.15 s); a schema reset and a rename
    cost a tenth of that, for every PostgreSQL test of the suite."""

    def __init__(self, admin: str) -> None:
        self.admin = admin
        self.free: list[str] = []

    def _name(self) -> str:
        return f"airlock_test_{os.getpid()}_{uuid.uuid4().hex[:12]}"

    def take(self) -> str:
        name = self._name()
        with psycopg.connect(self.admin, autocommit=True) as conn:
            while self.free:
                old = self.free.pop()
                try:
                    conn.execute(
                        sql.SQL("ALTER DATABASE {} RENAME TO {}").format(
                            sql.Identifier(old), sql.Identifier(name)
                        )
                    )
                    return name
                except psycopg.errors.ObjectInUse:  # a process left behind came back
                    conn.execute(
                        sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                            sql.Identifier(old)
                        )
                    )
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8'").format(
                    sql.Identifier(name)
                )
            )
        return name

    def give_back(self, name: str, url: str) -> None:
        """End every connection to ``name`` and empty it for the next test, or drop it."""
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            try:
                with psycopg.connect(_libpq(url), autocommit=True) as db:
                    # As template0 has it in PostgreSQL 15: owned by the database owner,
                    # usable by everyone, created in by its owner only.
                    db.execute(
                        "DROP SCHEMA public CASCADE;"
                        " CREATE SCHEMA public AUTHORIZATION pg_database_owner;"
                        " GRANT USAGE ON SCHEMA public TO PUBLIC"
                    )
                    left = db.execute(
                        "SELECT count(*) FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%'"
                        " AND nspname NOT IN ('public', 'information_schema')"
                    ).fetchone()
                if left is not None and left[0] == 0:
                    self.free.append(name)
                    return
            except psycopg.Error:
                pass
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    def close(self) -> None:
        with psycopg.connect(self.admin, autocommit=True) as conn:
            for name in self.free:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
        self.free.clear()


@pytest.fixture(scope="session")
def _pg_pool(pg_server: str) -> Iterator[_PgPool]:
    pool = _PgPool(_libpq(pg_server))
    yield pool
    pool.close()


@pytest.fixture
def pg_url(pg_server: str, _pg_pool: _PgPool) -> Iterator[str]:
    """An empty PostgreSQL database for this test alone (see the module docstring)."""
    name = _pg_pool.take()
    url = make_url(pg_server).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        _pg_pool.give_back(name, url)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLite file URL in this test's own directory (the file does not exist yet)."""
    return f"sqlite:///{tmp_path / 'airlock.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """Each test using this runs once on SQLite and once on PostgreSQL."""
    fixture = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(fixture))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with a ``slow`` test first, then by their number of tests, most first.

    ``make test`` hands whole files to the xdist workers in collection order
    (``--dist loadfile --no-loadscope-reorder``). xdist's own order, most tests first,
    put a file of three tests behind a minute-long module rig at the end of the queue,
    where the whole run waited on it; started first, it runs beside the short files.
    A file's tests keep their order.
    """
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def cost(path: str) -> tuple[bool, int]:
        tests = files[path]
        return (not any(t.get_closest_marker("slow") for t in tests), -len(tests))

    # sorted() is stable: files of equal cost keep their collection order.
    items[:] = [item for path in sorted(files, key=cost) for item in files[path]]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    # From the skip reports, not from state kept in this module: under pytest-xdist the
    # skips happen in the worker processes and only their reports reach this one.
    reasons = []
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        if isinstance(longrepr, tuple) and _PG_SKIP in str(longrepr[-1]):
            reasons.append(str(longrepr[-1]).split(_PG_SKIP, 1)[1].lstrip(" —"))
    if reasons:
        terminalreporter.section("PostgreSQL tests SKIPPED", sep="!", red=True, bold=True)
        terminalreporter.write_line(reasons[0])
        terminalreporter.write_line(
            "Start PostgreSQL or set AIRLOCK_TEST_PG_URL; AIRLOCK_REQUIRE_POSTGRES=1 makes "
            "this a failure."
        )


#: ``airlock up``'s default state directory in the checkout. A test that writes there
#: (the browser tests' screenshots once did) makes ``make up`` refuse it afterwards.
_REPO_STATE = Path(__file__).resolve().parents[1] / ".airlock"


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_STATE_BEFORE] = _REPO_STATE.exists()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller checks
        return
    if not session.config.stash.get(_STATE_BEFORE, True) and _REPO_STATE.exists():
        writer = session.config.get_terminal_writer()
        writer.line()
        writer.line(
            f"a test created {_REPO_STATE}, `airlock up`'s state directory: `make up` would "
            "refuse it; write to tmp_path instead",
            red=True,
            bold=True,
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
