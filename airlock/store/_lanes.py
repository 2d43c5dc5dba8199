"""Lanes: one audit chain as several hash-linked lanes, so that concurrent writers commit
in parallel (docs/protocol.md#audit-chain). Not public: use ``airlock.store``.

A single chain makes every appender wait for the previous one's commit, WAL flush
included: on PostgreSQL no two commits can share a flush. With lanes each row extends
the head of its own lane (``lane``, ``prev_hash`` = that lane's last ``row_hash``), a lane
is appended by one transaction at a time, and the rows of all lanes are numbered by one
sequence, so ``seq`` still orders the merged chain. :func:`add_audit_lanes` (in a
migration) turns a one-lane chain into ``lanes`` lanes:

1. the whole chain's lock, so no appender runs meanwhile;
2. the ``lane`` column where an older ``create_audit_log`` made none, its range, the
   lane-scoped UNIQUE ``(lane, prev_hash)`` (every lane starts from the zero hash) and an
   index on ``(lane, seq)`` for the head read;
3. the insert trigger checks a row against its own lane's head, with a rising ``seq``;
4. a ``{"type": "airlock.audit/lanes", "lanes": N, "chain": …, "at": …}`` row on lane 0,
   hash-linked like any other, so the number of lanes is itself tamper-evident;
5. a genesis row for each new lane, ``{"chain": …, "lane": k, "type": "airlock.audit/genesis"}``;
6. the sequence, past the last row, and ``airlock_audit_lane()``, which an appender calls
   to take a lane: the whole chain's advisory lock *shared* (so :meth:`AuditLog.lock`,
   exclusive, still excludes every appender), then the first free lane's lock, starting
   from one picked by the backend's pid, waiting on that one only if all are taken.

:func:`add_audit_append` (a later migration) adds ``airlock_audit_append()``: the lane and
the append in one call, both head reads planned on the lane's index.

SQLite keeps one lane: ``BEGIN IMMEDIATE`` lets one writer in at a time anyway.

This module must never update or delete an audit row.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

import sqlalchemy as sa

from airlock.protocol import canonical_bytes

from ._audit import (
    _APPEND_LOCK_KEY,
    APPEND_FUNCTION,
    AUDIT_TABLE,
    GENESIS_PREV_HASH,
    GENESIS_TYPE,
    LANE_LOCK_CLASS,
    LANES_TYPE,
    SEQUENCE,
    _format_at,
)
from ._chain import chain_hash
from .errors import AuditError

__all__ = [
    "MAX_LANES",
    "add_audit_append",
    "add_audit_lanes",
    "add_lane_column",
    "lane_genesis_event",
    "lanes_event",
]

#: More lanes than writers cost nothing but rows; this bounds a verifier's state.
MAX_LANES: Final = 256

# Constants only in the DDL (hence the S608 noqa).
_PG_EXTENDS_LANE_HEAD = f"""
CREATE OR REPLACE FUNCTION airlock_{AUDIT_TABLE}_extends_head() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE head_seq BIGINT; head_hash TEXT;
BEGIN
  SELECT seq, row_hash INTO head_seq, head_hash
    FROM {AUDIT_TABLE} WHERE lane = NEW.lane ORDER BY seq DESC LIMIT 1;
  IF NOT FOUND THEN head_seq := -1; head_hash := '{GENESIS_PREV_HASH}'; END IF;
  IF NEW.seq <= head_seq OR NEW.prev_hash <> head_hash THEN
    RAISE EXCEPTION '{AUDIT_TABLE}: INSERT of seq % does not extend lane % at seq %',
      NEW.seq, NEW.lane, head_seq USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NEW;
END $$
"""  # noqa: S608


def _pg_lane_function(lanes: int) -> str:
    return f"""
CREATE OR REPLACE FUNCTION airlock_audit_lane() RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE start_at integer := pg_backend_pid() % {lanes}; candidate integer;
BEGIN
  PERFORM pg_advisory_xact_lock_shared({_APPEND_LOCK_KEY});
  FOR i IN 0..{lanes - 1} LOOP
    candidate := (start_at + i) % {lanes};
    IF pg_try_advisory_xact_lock({LANE_LOCK_CLASS}, candidate) THEN RETURN candidate; END IF;
  END LOOP;
  PERFORM pg_advisory_xact_lock({LANE_LOCK_CLASS}, start_at);
  RETURN start_at;
END $$
"""


# Both head reads — the append's and the insert trigger's — by the (lane, seq) index, with
# sorting off: a generic plan made while the table holds a page (a new database; a
# connection prepares its statements after five runs and keeps the plans) would else scan
# the whole table and sort it on every append, as long as the connection lives. The lane
# is taken first, then the head is read in a statement of its own, whose snapshot comes
# after the lock (READ COMMITTED: each statement of a volatile function takes a new one).
_PG_APPEND_FUNCTION = f"""
CREATE OR REPLACE FUNCTION {APPEND_FUNCTION}(p_lane integer, p_event text, p_event_bytes bytea)
RETURNS TABLE (o_lane integer, o_seq bigint, o_prev_hash text, o_row_hash text)
LANGUAGE plpgsql VOLATILE SET enable_sort = off AS $$
DECLARE l integer := p_lane;
BEGIN
  IF l IS NULL THEN l := airlock_audit_lane(); END IF;
  RETURN QUERY
  INSERT INTO {AUDIT_TABLE} AS appended (seq, lane, event, prev_hash, row_hash)
  SELECT nextval('{SEQUENCE}'), l, p_event, chain_head.row_hash,
         encode(sha256(decode(chain_head.row_hash, 'hex') || p_event_bytes), 'hex')
  FROM (SELECT h.seq, h.row_hash FROM {AUDIT_TABLE} AS h WHERE h.lane = l
        ORDER BY h.seq DESC LIMIT 1) AS chain_head
  WHERE octet_length(chain_head.row_hash) = 64 AND chain_head.row_hash !~ '[^0-9a-f]'
  RETURNING l, appended.seq, appended.prev_hash::text, appended.row_hash::text;
END $$
"""  # noqa: S608


def add_audit_append(op: Any) -> None:
    """Give a chain with lanes the append as one call, inside a migration.

    PostgreSQL: ``airlock_audit_append(lane, event, event_bytes)`` appends the row as
    :meth:`AuditLog.append` does and returns its lane, seq and hashes; with a NULL lane it
    first takes one (``airlock_audit_lane()``), so a transaction that appends before any
    other statement takes its lane and appends in one round trip. Both head reads (this
    one and the insert trigger's) are planned with sorting off, on the lane's index
    however small the table was when planned. A no-op on SQLite. Raises
    :class:`AuditError` on PostgreSQL for a chain without lanes.
    """
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":
        return
    if conn.dialect.name != "postgresql":
        raise AuditError(f"no audit append function for dialect {conn.dialect.name!r}")
    if not conn.exec_driver_sql(f"SELECT to_regclass('{SEQUENCE}') IS NOT NULL").scalar():
        raise AuditError("the append function needs a chain with lanes (add_audit_lanes)")
    op.execute(_PG_APPEND_FUNCTION)
    op.execute(f"ALTER FUNCTION airlock_{AUDIT_TABLE}_extends_head() SET enable_sort = off")


def lanes_event(chain: str, lanes: int, at: datetime) -> dict[str, object]:
    """The lane-0 event that declares ``lanes`` lanes (step 4)."""
    return {"at": _format_at(at), "chain": chain, "lanes": lanes, "type": LANES_TYPE}


def lane_genesis_event(chain: str, lane: int) -> dict[str, object]:
    """The first row of lane ``lane`` ≥ 1 (lane 0's is the chain's genesis, seq 0)."""
    return {"chain": chain, "lane": lane, "type": GENESIS_TYPE}


def add_lane_column(op: Any) -> None:
    """Give an ``audit_log`` made before lanes existed its ``lane`` column (every row in
    lane 0), so it reads as a fresh one (:func:`create_audit_log` makes it); a no-op where
    the column is there. Call from a service's migration ``upgrade()``."""
    dialect = op.get_context().dialect.name
    if dialect not in ("sqlite", "postgresql"):
        raise AuditError(f"no audit lanes for dialect {dialect!r}")
    if "lane" in {c["name"] for c in sa.inspect(op.get_bind()).get_columns(AUDIT_TABLE)}:
        return
    op.execute(
        f"ALTER TABLE {AUDIT_TABLE} ADD COLUMN lane SMALLINT NOT NULL DEFAULT 0 "
        f"CONSTRAINT ck_{AUDIT_TABLE}_lane CHECK (lane = 0)"
    )


def add_audit_lanes(op: Any, chain: str, lanes: int, *, now: datetime | None = None) -> None:
    """Give the chain ``chain`` (the service's name) ``lanes`` lanes, inside a migration.

    PostgreSQL only (steps in the module docstring); on SQLite it adds the ``lane``
    column where it is missing and nothing else. ``now`` is the time the declaration
    row carries (the clock's, by default). A no-op on a chain that has lanes already.
    Raises :class:`AuditError` for a lane count outside 2..MAX_LANES.
    """
    if not 2 <= lanes <= MAX_LANES:
        raise AuditError(f"lanes must be 2..{MAX_LANES}")
    conn = op.get_bind()
    dialect = conn.dialect.name
    if dialect == "sqlite":
        add_lane_column(op)
        return
    if dialect != "postgresql":
        raise AuditError(f"no audit lanes for dialect {dialect!r}")
    op.execute(f"SELECT pg_advisory_xact_lock({_APPEND_LOCK_KEY})")  # (1)
    if conn.exec_driver_sql(f"SELECT to_regclass('{SEQUENCE}') IS NOT NULL").scalar():
        return  # lanes already: their number is declared in the chain, never changed here
    add_lane_column(op)  # (2)
    op.execute(f"ALTER TABLE {AUDIT_TABLE} DROP CONSTRAINT ck_{AUDIT_TABLE}_lane")
    head = conn.exec_driver_sql(
        f"SELECT seq, row_hash FROM {AUDIT_TABLE} ORDER BY seq DESC LIMIT 1"  # noqa: S608
    ).one()
    for ddl in (
        f"ALTER TABLE {AUDIT_TABLE} ADD CONSTRAINT ck_{AUDIT_TABLE}_lane "
        f"CHECK (lane >= 0 AND lane < {lanes})",
        f"ALTER TABLE {AUDIT_TABLE} DROP CONSTRAINT uq_{AUDIT_TABLE}_prev_hash",
        f"ALTER TABLE {AUDIT_TABLE} ADD CONSTRAINT uq_{AUDIT_TABLE}_lane_prev_hash "
        "UNIQUE (lane, prev_hash)",
        f"CREATE INDEX ix_{AUDIT_TABLE}_lane_seq ON {AUDIT_TABLE} (lane, seq)",
        _PG_EXTENDS_LANE_HEAD,  # (3)
    ):
        op.execute(ddl)
    seq, prev = int(head[0]), str(head[1])
    rows: list[tuple[int, int, bytes, str]] = []
    declared = canonical_bytes(lanes_event(chain, lanes, now or datetime.now(UTC)))
    rows.append((seq + 1, 0, declared, prev))  # (4)
    for lane in range(1, lanes):  # (5)
        rows.append((seq + 1 + lane, lane, canonical_bytes(lane_genesis_event(chain, lane)), ""))
    for row_seq, lane, data, row_prev in rows:
        link = row_prev or GENESIS_PREV_HASH
        conn.exec_driver_sql(
            f"INSERT INTO {AUDIT_TABLE} (seq, lane, event, prev_hash, row_hash) "  # noqa: S608
            "VALUES (%(seq)s, %(lane)s, %(event)s, %(prev)s, %(hash)s)",
            {
                "seq": row_seq,
                "lane": lane,
                "event": data.decode("utf-8"),
                "prev": link,
                "hash": chain_hash(link, data),
            },
        )
    op.execute(f"CREATE SEQUENCE {SEQUENCE} AS bigint MINVALUE 0 START {seq + lanes + 1}")  # (6)
    op.execute(f"ALTER SEQUENCE {SEQUENCE} OWNED BY {AUDIT_TABLE}.seq")
    op.execute(_pg_lane_function(lanes))
