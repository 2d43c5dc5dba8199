"""Hot statements compiled once and run on the driver's cursor. Not public: use
``airlock.store``.

A :class:`Prepared` holds one SQLAlchemy statement (Core or ``text()``), compiles it
once per dialect, and runs it on the DBAPI cursor of the caller's open transaction:
the statement text, its parameter order and its bind processors are worked out once,
so an execution costs the driver's call and little else. SQLAlchemy's own execute
spends several times the driver's time per statement building an execution context,
processing parameters and a result object; on the executor's path (five statements,
two transactions) that was a large part of its CPU.

What stays SQLAlchemy's: the transaction (BEGIN, COMMIT, rollback, the pool), the
engine's ``before_cursor_execute`` and ``after_cursor_execute`` events (fired with no
execution context), and the errors. A driver error is handed to the ``Connection`` as
its own execute hands it, so it is raised as the same ``sqlalchemy.exc.DBAPIError``
subclass (``IntegrityError`` for a trigger's refusal, ``OperationalError`` for a lost
server), and a lost connection is invalidated and never returned to the pool.

This module must never open, commit or end a transaction, and never build SQL from a
value: values are parameters only.
"""

from __future__ import annotations

import operator
from collections import namedtuple
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect

__all__ = ["Prepared"]


@dataclass(frozen=True, slots=True)
class _Compiled:
    sql: str
    #: The parameters in placeholder order (a name may repeat) for a positional
    #: paramstyle (SQLite's ``qmark``), else each name once.
    names: tuple[str, ...]
    #: The values of ``names`` from a mapping, as a tuple.
    values: Callable[[Mapping[str, Any]], tuple[Any, ...]]
    #: Where in ``names`` a type has a bind processor (a SQLite blob, a boolean as an
    #: integer), and the processor.
    processed: tuple[tuple[int, Callable[[Any], Any]], ...]
    #: True for a positional paramstyle, False for a named one (psycopg's ``pyformat``).
    positional: bool
    #: Values fixed in the statement itself (``column == "claimed"``).
    fixed: Mapping[str, Any]
    #: What makes a returned row of its values (:func:`_row_class`); None: the
    #: statement returns none.
    row: Callable[[Iterable[Any]], Any] | None
    #: Where in a returned row a type has a result processor (a SQLite integer as a
    #: boolean), and the processor.
    results: tuple[tuple[int, Callable[[Any], Any]], ...]


def _getter(names: tuple[str, ...]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    if len(names) == 1:  # itemgetter of one name gives the value, not a tuple
        name = names[0]
        return lambda values: (values[name],)
    if not names:
        return lambda values: ()
    return operator.itemgetter(*names)


def _row_class(names: tuple[str | None, ...]) -> Callable[[Iterable[Any]], Any]:
    """What makes a row of ``names`` of its values: a named tuple, with ``_mapping`` as
    SQLAlchemy's ``Row`` has it (its columns by name), so code that reads either kind of
    row reads both. A column with no usable name (``count(*)`` unlabelled) is named by its
    place, ``_0``, ``_1``…"""
    fields = [str(name) for name in names]
    base = namedtuple("PreparedRow", fields, rename=True)  # type: ignore[misc]

    class PreparedRow(base):
        __slots__ = ()

        @property
        def _mapping(self) -> dict[str, Any]:
            return self._asdict()

    return PreparedRow._make


def _returned(
    statement: sa.Executable, dialect: Dialect
) -> tuple[Callable[[Iterable[Any]], Any] | None, tuple[tuple[int, Callable[[Any], Any]], ...]]:
    """The row class and result processors of what ``statement`` returns (a SELECT's
    columns, an INSERT's or UPDATE's RETURNING), or (None, ()) if it returns nothing."""
    columns = list(getattr(statement, "exported_columns", ()))
    if not columns:
        return None, ()
    processors = [c.type.dialect_impl(dialect).result_processor(dialect, None) for c in columns]
    made = _row_class(tuple(c.key for c in columns))
    return made, tuple((i, p) for i, p in enumerate(processors) if p is not None)


class Prepared:
    """One statement, compiled once per dialect, run on the caller's transaction.

    Args:
        statement: the statement; every parameter it takes is a named ``bindparam``
            (or a value fixed in it). ``expanding`` (IN-list) parameters are refused.
    """

    __slots__ = ("_by_dialect", "_statement")

    def __init__(self, statement: sa.Executable) -> None:
        self._statement = statement
        self._by_dialect: dict[str, _Compiled] = {}

    def _compiled(self, dialect: Dialect) -> _Compiled:
        found = self._by_dialect.get(dialect.name)
        if found is not None:
            return found
        compiled = self._statement.compile(dialect=dialect)  # type: ignore[attr-defined]
        binds = compiled.binds
        if any(bind.expanding for bind in binds.values()):
            raise ValueError("a prepared statement takes no expanding (IN-list) parameter")
        order = compiled.positiontup
        names = tuple(order or binds)
        processors = [binds[n].type.dialect_impl(dialect).bind_processor(dialect) for n in names]
        row, results = _returned(self._statement, dialect)
        made = _Compiled(
            sql=compiled.string,
            names=names,
            values=_getter(names),
            processed=tuple((i, p) for i, p in enumerate(processors) if p is not None),
            positional=order is not None,
            fixed={n: b.value for n, b in binds.items() if not b.required and b.value is not None},
            row=row,
            results=results,
        )
        self._by_dialect[dialect.name] = made
        return made

    def first(self, conn: Connection, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """Run the statement with ``params`` in ``conn``'s open transaction; the first row
        it returned (RETURNING), or None. Every row is fetched, so the statement is done."""
        rows, _ = self._run(conn, params)
        return tuple(rows[0]) if rows else None

    def rows(self, conn: Connection, params: Mapping[str, Any]) -> list[Any]:
        """Run the statement with ``params`` in ``conn``'s open transaction; the rows it
        returned, each a named tuple of the statement's columns (by their keys, and by
        ``_mapping`` as a ``Row``), with the types' result processing SQLAlchemy does.

        Raises:
            TypeError: the statement returns no columns.
        """
        compiled = self._compiled(conn.dialect)
        made = compiled.row
        if made is None:
            raise TypeError("the statement returns no columns")
        rows, _ = self._run(conn, params)
        if compiled.results:
            return [made(_processed(r, compiled.results)) for r in rows]
        return [made(r) for r in rows]

    def row(self, conn: Connection, params: Mapping[str, Any]) -> Any:
        """:meth:`rows`' first row, or None."""
        found = self.rows(conn, params)
        return found[0] if found else None

    def rowcount(self, conn: Connection, params: Mapping[str, Any]) -> int:
        """Run the statement with ``params`` in ``conn``'s open transaction; how many rows
        it changed (the driver's ``rowcount``)."""
        return self._run(conn, params)[1]

    def _run(self, conn: Connection, params: Mapping[str, Any]) -> tuple[Any, int]:
        """Raises ``sqlalchemy.exc.InvalidRequestError`` outside a transaction (this never
        begins one), KeyError for a parameter not given, and the driver's errors as
        SQLAlchemy's (see the module docstring)."""
        if not conn.in_transaction():
            raise sa.exc.InvalidRequestError("a prepared statement runs in an open transaction")
        compiled = self._compiled(conn.dialect)
        args: Any = compiled.values({**compiled.fixed, **params} if compiled.fixed else params)
        if compiled.processed:
            args = list(args)
            for i, process in compiled.processed:
                args[i] = process(args[i])
        if not compiled.positional:
            args = dict(zip(compiled.names, args, strict=True))
        sql = compiled.sql
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            # The engine's statement events, as Connection.execute fires them (tests hook
            # them to watch or pause statements; a listener gets no execution context).
            # Without a listener, no dispatch at all.
            events = conn._has_events or conn.engine._has_events
            if events:
                for fn in conn.dispatch.before_cursor_execute:
                    sql, args = fn(conn, cursor, sql, args, None, False)
            if conn._echo:
                conn._log_info(sql)
            cursor.execute(sql, args)
            if events:
                conn.dispatch.after_cursor_execute(conn, cursor, sql, args, None, False)
            rows = cursor.fetchall() if cursor.description is not None else None
            count: int = cursor.rowcount
        except BaseException as exc:
            # What Connection.execute does with a driver's error: wrap it, invalidate a
            # lost connection. It closes the cursor (unless the connection was lost) and
            # always raises.
            conn._handle_dbapi_exception(exc, sql, args, cursor, None)
        cursor.close()
        return rows, count


def _processed(
    row: tuple[Any, ...], results: tuple[tuple[int, Callable[[Any], Any]], ...]
) -> list[Any]:
    values = list(row)
    for i, process in results:
        values[i] = process(values[i])
    return values
