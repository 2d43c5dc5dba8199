"""SQLite REPLACE attacks on the tables whose rows are never deleted (executor 0008).

``INSERT OR REPLACE`` deletes every row the new one conflicts with (on ``rowid``, the
primary key or a UNIQUE constraint), and a connection without ``recursive_triggers``
(the sqlite3 shell) fires no DELETE trigger for it. These helpers read the keys from the
database itself, so a table or UNIQUE constraint added later is attacked too.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ReplaceAttack",
    "kept_tables",
    "replace_attacks",
    "snapshot",
]


@dataclass(frozen=True, slots=True)
class ReplaceAttack:
    table: str
    key: tuple[str, ...]  # the one key the new row shares with the row kept
    sql: str
    params: dict[str, Any]

    def __str__(self) -> str:
        return f"{self.table} on {'+'.join(self.key)}"


def kept_tables(conn: sqlite3.Connection) -> set[str]:
    """Tables a trigger keeps from DELETE: those whose rows are never deleted."""
    rows = conn.execute("SELECT tbl_name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    return {table for table, sql in rows if " BEFORE DELETE ON " in " ".join(sql.split())}


def _rowid_column(conn: sqlite3.Connection, table: str) -> str:
    """The column that is the rowid (an INTEGER PRIMARY KEY), or ``rowid`` itself."""
    pk = [r for r in conn.execute(f"PRAGMA table_info({table})") if r[5]]
    if len(pk) == 1 and str(pk[0][2]).upper() == "INTEGER":
        return str(pk[0][1])
    return "rowid"


def _unique_keys(conn: sqlite3.Connection, table: str) -> list[tuple[str, ...]]:
    keys = []
    for index in conn.execute(f"PRAGMA index_list({table})").fetchall():
        name, unique, partial = index[1], index[2], index[4]
        if unique and not partial:
            keys.append(tuple(r[2] for r in conn.execute(f"PRAGMA index_info({name})")))
    return keys


def _fresh(value: Any) -> Any:
    # Another value of the same type, within every CHECK of the tables attacked (an
    # attempt stays >= 2, a text column is not one of a fixed vocabulary).
    if isinstance(value, bool):
        raise TypeError("no boolean column is part of a key")
    if isinstance(value, int):
        return value + 1_000_000
    if isinstance(value, str):
        return value + "-replaced"
    if isinstance(value, bytes):
        return value + b"-replaced"
    raise TypeError(f"no fresh value for {value!r}")


def _change_one_column(key: tuple[str, ...], row: dict[str, Any]) -> str:
    # Of a composite key, change an integer column if there is one: the text ones (kind)
    # may be held to a fixed vocabulary by a CHECK.
    for column in key:
        if isinstance(row[column], int):
            return column
    return key[-1]


def replace_attacks(conn: sqlite3.Connection, table: str) -> Iterator[ReplaceAttack]:
    """One ``INSERT OR REPLACE`` per key of ``table``, each conflicting with the table's
    first row holding every key on that key only (every other key of the new row is fresh)."""
    unique = _unique_keys(conn, table)
    # The first row that holds every key: a NULL in a UNIQUE column conflicts with
    # nothing (a cloud action's effect key), so a row with one cannot be attacked on it.
    keyed = " AND ".join(f"{c} IS NOT NULL" for key in unique for c in key) or "1"
    cursor = conn.execute(
        f"SELECT rowid AS rowid_, * FROM {table} WHERE {keyed} ORDER BY rowid LIMIT 1"
    )
    found = cursor.fetchone()
    if found is None:
        raise AssertionError(f"{table} needs a row holding every key to attack")
    names = [d[0] for d in cursor.description]
    first = dict(zip(names, found, strict=True))
    rowid = first.pop("rowid_")
    rowid_column = _rowid_column(conn, table)
    for key in [(rowid_column,), *unique]:
        row = dict(first)
        for other in unique:
            if other != key:
                column = _change_one_column(other, row)
                row[column] = _fresh(row[column])
        if key == (rowid_column,):
            row[rowid_column] = rowid  # "rowid" itself when the table has no alias of it
        elif rowid_column != "rowid":
            row[rowid_column] = None  # SQLite assigns it: no conflict there
        columns = ", ".join(row)
        values = ", ".join(f":{c}" for c in row)
        yield ReplaceAttack(
            table=table,
            key=key,
            sql=f"INSERT OR REPLACE INTO {table} ({columns}) VALUES ({values})",
            params=row,
        )


def snapshot(conn: sqlite3.Connection, table: str) -> list[tuple[Any, ...]]:
    """Every row of ``table`` with its rowid, in rowid order."""
    return conn.execute(f"SELECT rowid, * FROM {table} ORDER BY rowid").fetchall()
