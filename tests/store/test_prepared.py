"""Prepared statements: run on the driver's cursor, inside the caller's transaction, with
SQLAlchemy's errors, events and invalidation.

Every test runs on SQLite and on PostgreSQL (the ``db_url`` fixture) unless named.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from airlock.store import Prepared, make_engine, upgrade

from ._support import MIGRATIONS

_widgets = sa.Table(
    "widgets",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(64), nullable=False),
)
_ADD = Prepared(
    sa.insert(_widgets)
    .values(id=sa.bindparam("id", type_=sa.Integer), name=sa.bindparam("name", type_=sa.String))
    .returning(_widgets.c.id)
)
_RENAME = Prepared(
    sa.update(_widgets)
    .where(_widgets.c.name == "fixed", _widgets.c.id == sa.bindparam("id", type_=sa.Integer))
    .values(name=sa.bindparam("name", type_=sa.String))
)


def _names(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(_widgets.c.name).order_by(_widgets.c.id)).scalars())


def test_a_prepared_statement_commits_and_rolls_back_with_the_callers_transaction(
    engine: Engine,
) -> None:
    with engine.begin() as conn:
        assert _ADD.first(conn, {"id": 1, "name": "kept"}) == (1,)

    class Boom(Exception):
        pass

    with pytest.raises(Boom), engine.begin() as conn:
        _ADD.first(conn, {"id": 2, "name": "rolled back"})
        raise Boom
    assert _names(engine) == ["kept"]


def test_values_fixed_in_the_statement_are_bound_with_the_callers(engine: Engine) -> None:
    with engine.begin() as conn:
        _ADD.first(conn, {"id": 1, "name": "fixed"})
        _ADD.first(conn, {"id": 2, "name": "other"})
        assert _RENAME.rowcount(conn, {"id": 1, "name": "renamed"}) == 1
        assert _RENAME.rowcount(conn, {"id": 2, "name": "not this one"}) == 0
    assert _names(engine) == ["renamed", "other"]


def test_a_driver_error_is_raised_as_sqlalchemys_and_the_connection_stays_usable(
    engine: Engine,
) -> None:
    with engine.begin() as conn:
        _ADD.first(conn, {"id": 1, "name": "first"})
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
        _ADD.first(conn, {"id": 1, "name": "same key"})
    with engine.begin() as conn:
        _ADD.first(conn, {"id": 2, "name": "second"})
    assert _names(engine) == ["first", "second"]


def test_a_statement_outside_a_transaction_is_refused_and_runs_nothing(engine: Engine) -> None:
    with engine.connect() as conn:
        with pytest.raises(sa.exc.InvalidRequestError):
            _ADD.first(conn, {"id": 1, "name": "never"})
        assert not conn.in_transaction()
    assert _names(engine) == []


def test_the_engines_statement_events_see_a_prepared_statement(engine: Engine) -> None:
    seen: list[str] = []

    def record(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    sa.event.listen(engine, "after_cursor_execute", record)
    try:
        with engine.begin() as conn:
            _ADD.first(conn, {"id": 1, "name": "watched"})
    finally:
        sa.event.remove(engine, "after_cursor_execute", record)
    assert [s.split()[:3] for s in seen] == [["INSERT", "INTO", "widgets"]]


def test_rows_are_named_and_typed_as_sqlalchemys_own(engine: Engine) -> None:
    listed = sa.select(
        _widgets.c.id, _widgets.c.name, (_widgets.c.id > sa.bindparam("over")).label("big")
    ).order_by(_widgets.c.id)
    with engine.begin() as conn:
        _ADD.first(conn, {"id": 1, "name": "small"})
        _ADD.first(conn, {"id": 2, "name": "large"})
        rows = Prepared(listed).rows(conn, {"over": 1})
        theirs = conn.execute(listed, {"over": 1}).all()
        assert Prepared(listed).row(conn, {"over": 9}) is not None
        assert Prepared(listed.where(_widgets.c.id > 9)).row(conn, {"over": 1}) is None
    assert (
        [tuple(r) for r in rows]
        == [tuple(r) for r in theirs]
        == [
            (1, "small", False),
            (2, "large", True),
        ]
    )
    assert rows[1].big is True  # SQLite's integer, processed as SQLAlchemy does
    assert rows[1].name == "large"
    assert rows[1]._mapping == dict(theirs[1]._mapping) == {"id": 2, "name": "large", "big": True}


def test_a_column_without_a_name_is_read_by_its_place(engine: Engine) -> None:
    counted = Prepared(sa.select(sa.func.count(), _widgets.c.name).group_by(_widgets.c.name))
    with engine.begin() as conn:
        _ADD.first(conn, {"id": 1, "name": "small"})
        assert counted.first(conn, {}) == (1, "small")
        [row] = counted.rows(conn, {})
    assert tuple(row) == (1, "small") and row._0 == 1 and row.name == "small"


def test_rows_of_a_statement_that_returns_none_are_refused(engine: Engine) -> None:
    with engine.begin() as conn, pytest.raises(TypeError, match="no columns"):
        _RENAME.rows(conn, {"id": 1, "name": "x"})


def test_an_in_list_parameter_is_refused(engine: Engine) -> None:
    prepared = Prepared(
        sa.select(_widgets.c.id).where(_widgets.c.id.in_(sa.bindparam("ids", expanding=True)))
    )
    with engine.begin() as conn, pytest.raises(ValueError, match="expanding"):
        prepared.first(conn, {"ids": [1]})


def _terminate(dsn: str, pid: int) -> None:
    """End backend ``pid`` and wait (with a deadline) until it is gone."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + 10
        while admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone() != (0,):
            assert time.monotonic() < deadline, "the terminated backend did not exit"


@pytest.mark.postgres
def test_a_connection_lost_mid_transaction_is_invalidated_never_pooled_again(
    pg_url: str,
) -> None:
    engine = make_engine(pg_url)
    upgrade(engine, MIGRATIONS)
    dsn = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        with pytest.raises(sa.exc.OperationalError) as raised, engine.begin() as conn:
            _ADD.first(conn, {"id": 1, "name": "before"})
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
            _terminate(dsn, pid)
            _ADD.first(conn, {"id": 2, "name": "lost"})
        assert raised.value.connection_invalidated
        # The pool lends a new connection: the next transaction just works.
        with engine.begin() as conn:
            _ADD.first(conn, {"id": 3, "name": "after"})
        assert _names(engine) == ["after"]
    finally:
        engine.dispose()
