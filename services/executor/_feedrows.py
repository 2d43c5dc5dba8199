"""The feed's two rows in the ledger: its cursor and the checkpoint head last recorded.

Compiled statements (:class:`airlock.store.Prepared`) on the caller's transaction, for
:mod:`services.executor.feed`, which decides when they run. On PostgreSQL each write is
one statement, one round trip, the head's and the cursor's together when a transaction
moves both; on SQLite (in process, no round trip) the plain statements one by one. A
write takes the head row's lock before the cursor row's, whichever form it has: the
order every transaction takes them in, so two executors on one feed never each hold a
row the other waits for. Neither row is ever deleted or moved back here.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from airlock.store import Prepared

from .models import checkpoint_head, feed_cursor

__all__ = ["CURSOR", "advance_cursor", "store_head"]

_FEED = sa.bindparam("feed", type_=feed_cursor.c.feed.type)
#: The feed's cursor (no row: 0), which the source asks for before every page.
CURSOR: Final = Prepared(sa.select(feed_cursor.c.seq).where(feed_cursor.c.feed == _FEED))
_SEQ = sa.bindparam("seq", type_=sa.BigInteger)
_NOW = sa.bindparam("now", type_=sa.BigInteger)
_HASH = sa.bindparam("hash", type_=checkpoint_head.c.hash.type)
_TO = sa.bindparam("to", type_=sa.BigInteger)

_MOVE_STMT: Final = (
    sa.update(feed_cursor)
    .where(feed_cursor.c.feed == _FEED, feed_cursor.c.seq < _SEQ)
    .values(seq=_SEQ, updated_at=_NOW)
)
_MOVE: Final = Prepared(_MOVE_STMT)
# Not an upsert: the insert guard of ledger migration 0008 makes SQLite skip one whole.
_CREATE: Final = Prepared(
    sqlite.insert(feed_cursor)
    .values(feed=_FEED, seq=_SEQ, updated_at=_NOW)
    .on_conflict_do_nothing()
)
_HEAD_MOVE_STMT: Final = (
    sa.update(checkpoint_head)
    .where(
        checkpoint_head.c.feed == _FEED,
        sa.or_(checkpoint_head.c.seq != _SEQ, checkpoint_head.c.hash != _HASH),
    )
    .values(seq=_SEQ, hash=_HASH, recorded_at=_NOW)
)
_HEAD_MOVE: Final = Prepared(_HEAD_MOVE_STMT)
# Ignoring a conflict: an executor in another lane may insert it meanwhile.
_HEAD_CREATE: Final = Prepared(
    sqlite.insert(checkpoint_head)
    .values(feed=_FEED, seq=_SEQ, hash=_HASH, recorded_at=_NOW)
    .on_conflict_do_nothing()
    .returning(checkpoint_head.c.feed)
)


def _count(cte: sa.CTE) -> sa.ScalarSelect[int]:
    return sa.select(sa.func.count()).select_from(cte).scalar_subquery()


def _move_else_create(
    table: sa.Table,
    move: sa.Update,
    values: dict[str, sa.BindParameter[int] | sa.BindParameter[str]],
    name: str,
) -> tuple[sa.CTE, sa.CTE]:
    """``move``, else (nothing moved) an insert ignoring a conflict, as two CTEs: the
    insert reads the move's rows, so PostgreSQL runs the move first."""
    moved = move.returning(table.c.feed).cte(f"{name}_moved")
    created = (
        postgresql.insert(table)
        .from_select(list(values), sa.select(*values.values()).where(~sa.exists(moved.select())))
        .on_conflict_do_nothing()
        .returning(table.c.feed)
        .cte(f"{name}_created")
    )
    return moved, created


def _statements() -> tuple[Prepared, Prepared, Prepared]:
    """PostgreSQL's (cursor, head, head and cursor): each returns the rows its parts
    wrote; the select list reads the head's CTEs before the cursor's, and PostgreSQL runs
    them in that order (a test checks the locks)."""
    cursor = _move_else_create(
        feed_cursor, _MOVE_STMT, {"feed": _FEED, "seq": _SEQ, "updated_at": _NOW}, "cursor"
    )
    cursor_to = _move_else_create(
        feed_cursor,
        sa.update(feed_cursor)
        .where(feed_cursor.c.feed == _FEED, feed_cursor.c.seq < _TO)
        .values(seq=_TO, updated_at=_NOW),
        {"feed": _FEED, "seq": _TO, "updated_at": _NOW},
        "cursor",
    )
    head = _move_else_create(
        checkpoint_head,
        _HEAD_MOVE_STMT,
        {"feed": _FEED, "seq": _SEQ, "hash": _HASH, "recorded_at": _NOW},
        "head",
    )
    head_rows = (_count(head[0]) + _count(head[1])).label("head")
    return (
        Prepared(sa.select((_count(cursor[0]) + _count(cursor[1])).label("cursor"))),
        Prepared(sa.select(head_rows)),
        Prepared(
            sa.select(head_rows, (_count(cursor_to[0]) + _count(cursor_to[1])).label("cursor"))
        ),
    )


_PG_CURSOR, _PG_HEAD, _PG_HEAD_AND_CURSOR = _statements()


def advance_cursor(conn: Connection, feed: str, seq: int, now: int) -> None:
    """Move the cursor forward to ``seq`` (never back: another executor may be ahead),
    creating its row the first time."""
    params = {"feed": feed, "seq": seq, "now": now}
    if conn.dialect.name == "postgresql":
        _PG_CURSOR.first(conn, params)
    elif not _MOVE.rowcount(conn, params):
        _CREATE.rowcount(conn, params)


def store_head(
    conn: Connection, feed: str, seq: int, hash_: str, now: int, *, cursor_to: int | None
) -> bool:
    """Record (``seq``, ``hash_``) as ``feed``'s checkpoint head unless it is already the
    one recorded, and say whether it was not; with ``cursor_to``, then
    :func:`advance_cursor` to it too (on PostgreSQL in the same statement)."""
    params = {"feed": feed, "seq": seq, "hash": hash_, "now": now}
    if conn.dialect.name == "postgresql":
        if cursor_to is None:
            found = _PG_HEAD.first(conn, params)
        else:
            found = _PG_HEAD_AND_CURSOR.first(conn, {**params, "to": cursor_to})
        return bool(found and found[0])
    # One statement when the head moved, as it has on nearly every page; a second only
    # to tell a first head from the same one again.
    changed = bool(_HEAD_MOVE.rowcount(conn, params)) or (
        _HEAD_CREATE.first(conn, params) is not None
    )
    if cursor_to is not None:
        advance_cursor(conn, feed, cursor_to, now)
    return changed
