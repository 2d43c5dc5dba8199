"""The hash-chained, append-only audit log (docs/protocol.md#audit-chain). Not public: use
``airlock.store``.

Each service database holds one table ``audit_log``::

    seq        BIGINT  PRIMARY KEY   0 for genesis, then 1, 2, 3, ... with no gaps
                                     (with lanes: rising, from a sequence)
    lane       SMALLINT NOT NULL     0; 0..N-1 once a migration adds lanes (_lanes.py)
    event      TEXT    NOT NULL      JCS (RFC 8785) text of the event, a JSON object
    prev_hash  TEXT    NOT NULL      row_hash of the lane's previous row (64 "0"s for genesis)
    row_hash   TEXT    NOT NULL      lowercase hex of SHA-256(prev ‖ JCS(event))

where ``‖`` is byte concatenation of the **32 raw bytes** of the previous digest (not
its hex text) and the UTF-8 bytes of the canonical event. Row 0 is a fixed genesis event
``{"chain": <service>, "type": "airlock.audit/genesis"}`` written by the migration. The
time of every other event is inside the event (``"at"``, RFC 3339 UTC), so the hash
covers it. ``seq`` is not hashed, but renumbering, deleting or reordering rows breaks
either the gapless sequence or a ``prev_hash`` link, and :func:`verify_chain` reports it.

What the database enforces (triggers, on SQLite and PostgreSQL alike): UPDATE, DELETE
(and TRUNCATE on PostgreSQL) are refused; an INSERT must extend the current head
(``seq = head + 1``, ``prev_hash = head.row_hash``; with lanes, its lane's head and any
higher ``seq``). On SQLite an INSERT whose row
conflicts with a row kept (on ``rowid``, ``seq``, ``prev_hash`` or ``row_hash``) is
refused too: with the REPLACE conflict resolution (``INSERT OR REPLACE``) SQLite would
otherwise delete that row, firing no DELETE trigger on a connection without
``recursive_triggers`` (the sqlite3 shell; ``make_engine`` sets it). What it cannot
enforce, because an attacker with the database can drop triggers, :func:`verify_chain`
detects by re-deriving every hash from genesis. Truncating the tail or rewriting the
whole chain is detected only against a head recorded elsewhere (receipts carry it):
pass it as ``expect_head``.

Appends happen inside the caller's transaction, so a state change, its audit event and
its receipt commit together or not at all. They are serialized: on PostgreSQL by a
transaction-scoped advisory lock taken before the head is read (held until the caller
commits, so append late in a transaction) — the whole chain's (:meth:`AuditLog.lock`),
or one lane's (:meth:`AuditLog.lock_lane`), so that appenders in different lanes commit
in parallel and share WAL flushes (``_lanes.py``); on SQLite by ``BEGIN IMMEDIATE``, which
:func:`airlock.store.make_engine` puts on every transaction. The PostgreSQL scheme relies
on ``READ COMMITTED`` (the engine's level): in a ``REPEATABLE READ`` or ``SERIALIZABLE``
transaction that already read something, the head may be stale and the append then
fails (unique/serialization error) rather than forking the chain; retry the transaction.
A writer killed while holding the lock leaves nothing behind: its transaction never
committed, and the database releases the lock with the dead connection.

This module must never update or delete an audit row, and never accept an event that is
not canonical, float-free JSON.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import sys
from collections.abc import Generator, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from airlock.protocol import Refused, canonical_bytes, loads_strict

from ._chain import chain_hash
from ._engine import is_postgresql, is_sqlite, read_transaction, require_immediate
from ._prepared import Prepared
from .errors import AuditError, ChainError

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

__all__ = [
    "AUDIT_TABLE",
    "EVENT_MAX_BYTES",
    "EXPORT_LINE_MAX_BYTES",
    "GENESIS_PREV_HASH",
    "GENESIS_TYPE",
    "AuditEntry",
    "AuditLog",
    "chain_hash",
    "count_rows",
    "create_audit_log",
    "export",
    "genesis_event",
    "guard_audit_log_against_replace",
]

AUDIT_TABLE = "audit_log"
GENESIS_TYPE = "airlock.audit/genesis"
GENESIS_PREV_HASH = "0" * 64
#: An event carries at most an action (16 KiB) and a bundle (64 KiB) plus context.
EVENT_MAX_BYTES = 1024 * 1024
#: The longest line of an audit export: one event (at most EVENT_MAX_BYTES, refused at
#: append beyond that) and the record around it (two 64-hex hashes, a seq, the keys: under
#: 200 bytes). Real lines are far shorter (a demo run's longest is under 600 bytes); a
#: reader refuses a longer line without reading the rest of it (:func:`read_export_lines`).
EXPORT_LINE_MAX_BYTES = EVENT_MAX_BYTES + 1024
_RESERVED_AT = "at"

# pg_advisory_xact_lock takes a signed 64-bit key; derive it so it cannot collide with
# a hand-picked small integer another component might use.
_APPEND_LOCK_KEY = int.from_bytes(
    hashlib.sha256(b"airlock.store.audit_log.append").digest()[:8], "big", signed=True
)
#: The class (first key) of the two-key advisory locks of PostgreSQL lanes; the
#: two-int4 key space never overlaps the one-bigint one (functions-admin.html).
LANE_LOCK_CLASS = int.from_bytes(
    hashlib.sha256(b"airlock.store.audit_log.lane").digest()[:4], "big", signed=True
)
#: The type of the lane-0 row by which a migration declares a chain's lanes (``_lanes.py``).
LANES_TYPE = "airlock.audit/lanes"
#: The sequence that numbers rows once a chain has lanes (PostgreSQL).
SEQUENCE = "audit_log_seq"
#: The append as one call, on a chain with lanes whose migration made it (``_lanes.py``).
APPEND_FUNCTION = "airlock_audit_append"

_metadata = sa.MetaData()
_audit = sa.Table(
    AUDIT_TABLE,
    _metadata,
    sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("lane", sa.SmallInteger, nullable=False),
    sa.Column("event", sa.Text, nullable=False),
    sa.Column("prev_hash", sa.String(64), nullable=False),
    sa.Column("row_hash", sa.String(64), nullable=False),
)


def genesis_event(chain: str) -> dict[str, str]:
    """The fixed event of row 0 for the chain named ``chain`` (the service's name)."""
    return {"chain": chain, "type": GENESIS_TYPE}


# ---------------------------------------------------------------------------------------
# The migration side: table, triggers, genesis row.

# The DDL interpolates only this module's constants, never input (hence the S608 noqa).
_SQLITE_TRIGGERS = (
    f"""
    CREATE TRIGGER {AUDIT_TABLE}_no_update BEFORE UPDATE ON {AUDIT_TABLE}
    BEGIN SELECT RAISE(ABORT, '{AUDIT_TABLE} is append-only: UPDATE refused'); END
    """,
    f"""
    CREATE TRIGGER {AUDIT_TABLE}_no_delete BEFORE DELETE ON {AUDIT_TABLE}
    BEGIN SELECT RAISE(ABORT, '{AUDIT_TABLE} is append-only: DELETE refused'); END
    """,
    f"""
    CREATE TRIGGER {AUDIT_TABLE}_extends_head BEFORE INSERT ON {AUDIT_TABLE}
    BEGIN
      SELECT RAISE(ABORT, '{AUDIT_TABLE}: INSERT does not extend the chain head')
      WHERE NOT (
        NEW.seq = COALESCE((SELECT MAX(seq) FROM {AUDIT_TABLE}), -1) + 1
        AND NEW.prev_hash = COALESCE(
          (SELECT row_hash FROM {AUDIT_TABLE} ORDER BY seq DESC LIMIT 1),
          '{GENESIS_PREV_HASH}')
      );
    END
    """,  # noqa: S608
)

# REPLACE deletes the rows an INSERT conflicts with; a BEFORE INSERT trigger runs before
# that, so refusing every conflict here leaves nothing for REPLACE to delete. The append
# inserts with no conflict clause, so a conflict was an error before and still is.
# ``NEW.rowid`` is -1 for a rowid SQLite assigns (the append never names one), and no
# row of ours has a rowid below 1, so only an INSERT naming an existing rowid matches.
_SQLITE_NO_REPLACE = f"""
    CREATE TRIGGER {AUDIT_TABLE}_no_replace BEFORE INSERT ON {AUDIT_TABLE}
    WHEN (NEW.rowid > 0 AND EXISTS (SELECT 1 FROM {AUDIT_TABLE} WHERE rowid = NEW.rowid))
      OR EXISTS (SELECT 1 FROM {AUDIT_TABLE} WHERE seq = NEW.seq)
      OR EXISTS (SELECT 1 FROM {AUDIT_TABLE} WHERE prev_hash = NEW.prev_hash)
      OR EXISTS (SELECT 1 FROM {AUDIT_TABLE} WHERE row_hash = NEW.row_hash)
    BEGIN
      SELECT RAISE(ABORT, '{AUDIT_TABLE} is append-only: INSERT conflicting with a row refused');
    END
    """  # noqa: S608

_PG_TRIGGERS = (
    f"""
    CREATE OR REPLACE FUNCTION airlock_{AUDIT_TABLE}_refuse() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
      RAISE EXCEPTION '{AUDIT_TABLE} is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
    END $$
    """,
    f"""
    CREATE OR REPLACE FUNCTION airlock_{AUDIT_TABLE}_extends_head() RETURNS trigger
    LANGUAGE plpgsql AS $$
    DECLARE head_seq BIGINT; head_hash TEXT;
    BEGIN
      SELECT seq, row_hash INTO head_seq, head_hash
        FROM {AUDIT_TABLE} ORDER BY seq DESC LIMIT 1;
      IF NOT FOUND THEN head_seq := -1; head_hash := '{GENESIS_PREV_HASH}'; END IF;
      IF NEW.seq <> head_seq + 1 OR NEW.prev_hash <> head_hash THEN
        RAISE EXCEPTION '{AUDIT_TABLE}: INSERT of seq % does not extend head %',
          NEW.seq, head_seq USING ERRCODE = 'integrity_constraint_violation';
      END IF;
      RETURN NEW;
    END $$
    """,  # noqa: S608
    f"""
    CREATE TRIGGER {AUDIT_TABLE}_no_update_delete BEFORE UPDATE OR DELETE ON {AUDIT_TABLE}
    FOR EACH ROW EXECUTE FUNCTION airlock_{AUDIT_TABLE}_refuse()
    """,
    f"""
    CREATE TRIGGER {AUDIT_TABLE}_no_truncate BEFORE TRUNCATE ON {AUDIT_TABLE}
    FOR EACH STATEMENT EXECUTE FUNCTION airlock_{AUDIT_TABLE}_refuse()
    """,
    f"""
    CREATE TRIGGER {AUDIT_TABLE}_extends_head BEFORE INSERT ON {AUDIT_TABLE}
    FOR EACH ROW EXECUTE FUNCTION airlock_{AUDIT_TABLE}_extends_head()
    """,
)


def create_audit_log(op: Any, chain: str) -> None:
    """Create ``audit_log``, its triggers and its genesis row, inside an Alembic migration.

    Call from a service's migration ``upgrade()``: ``create_audit_log(op, "executor")``.
    ``op`` is ``alembic.op``; ``chain`` names the service and goes into the genesis event.
    The migration's ``downgrade()`` should raise: dropping an audit log destroys evidence.
    """
    if not chain or not isinstance(chain, str):
        raise AuditError("the chain needs a name (the service's)")
    dialect = op.get_context().dialect.name
    if dialect not in ("sqlite", "postgresql"):
        raise AuditError(f"no audit_log triggers for dialect {dialect!r}")
    table = op.create_table(
        AUDIT_TABLE,
        sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
        # One lane until a migration adds more (_lanes.add_audit_lanes, PostgreSQL).
        sa.Column("lane", sa.SmallInteger, nullable=False, server_default="0"),
        sa.Column("event", sa.Text, nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("row_hash", sa.String(64), nullable=False),
        sa.CheckConstraint("seq >= 0", name=f"ck_{AUDIT_TABLE}_seq"),
        sa.CheckConstraint("lane = 0", name=f"ck_{AUDIT_TABLE}_lane"),
        sa.UniqueConstraint("prev_hash", name=f"uq_{AUDIT_TABLE}_prev_hash"),
        sa.UniqueConstraint("row_hash", name=f"uq_{AUDIT_TABLE}_row_hash"),
    )
    for ddl in (*_SQLITE_TRIGGERS, _SQLITE_NO_REPLACE) if dialect == "sqlite" else _PG_TRIGGERS:
        op.execute(ddl)
    event_bytes = canonical_bytes(genesis_event(chain))
    op.bulk_insert(
        table,
        [
            {
                "seq": 0,
                "lane": 0,
                "event": event_bytes.decode("utf-8"),
                "prev_hash": GENESIS_PREV_HASH,
                "row_hash": chain_hash(GENESIS_PREV_HASH, event_bytes),
            }
        ],
    )


def guard_audit_log_against_replace(op: Any) -> None:
    """Give an ``audit_log`` made before its SQLite REPLACE guard existed that guard, so an
    upgraded database ends up as a fresh one (:func:`create_audit_log` makes it).

    Call from a service's migration ``upgrade()``; a no-op where the guard is already
    there and on PostgreSQL, which has no REPLACE (its ``ON CONFLICT DO UPDATE`` fires
    the UPDATE trigger, which refuses).
    """
    if op.get_context().dialect.name != "sqlite":
        return
    # SQLite keeps the statement without IF NOT EXISTS (fileformat2.html, "sqlite_schema"),
    # so the schema reads the same whichever of the two made the trigger.
    op.execute(_SQLITE_NO_REPLACE.replace("CREATE TRIGGER ", "CREATE TRIGGER IF NOT EXISTS ", 1))


# ---------------------------------------------------------------------------------------
# Appending.


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One row of the chain, as stored."""

    seq: int
    event_text: str
    prev_hash: str
    row_hash: str
    lane: int = 0

    @property
    def event(self) -> dict[str, Any]:
        value = json.loads(self.event_text)
        if not isinstance(value, dict):
            raise ChainError(f"audit row {self.seq} does not hold a JSON object")
        return value

    def to_json_line(self) -> str:
        """One line of ``airlock audit export``: canonical JSON, the event verbatim."""
        # Keys in JCS order (event < lane < prev_hash < row_hash < seq); the event is
        # already canonical text, so the line is JCS of the whole record when the row is
        # valid. json.dumps on the hashes only matters for a tampered row holding a quote.
        # Lane 0 is left out, so a chain without lanes exports as it always did.
        lane = f'"lane":{int(self.lane)},' if self.lane else ""
        return (
            f'{{"event":{self.event_text},{lane}"prev_hash":{json.dumps(self.prev_hash)},'
            f'"row_hash":{json.dumps(self.row_hash)},"seq":{int(self.seq)}}}'
        )


def _format_at(at: datetime) -> str:
    if not isinstance(at, datetime):
        raise AuditError("'at' must be a datetime (inject the clock's now)")
    if at.tzinfo is None or at.utcoffset() is None:
        raise AuditError("'at' must be a timezone-aware datetime")
    return _rfc3339_utc(at)


@functools.lru_cache(maxsize=64)
def _rfc3339_utc(at: datetime) -> str:
    # Cached: the events of one second share their time (the executor's clock counts
    # seconds), and strftime is a visible part of an append's CPU.
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _encode_event(event: Mapping[str, Any], at: datetime) -> bytes:
    if not isinstance(event, Mapping):
        raise AuditError("an audit event is a JSON object (a mapping)")
    if _RESERVED_AT in event:
        raise AuditError("'at' is set by AuditLog.append from its 'at' argument")
    kind = event.get("type")
    if not isinstance(kind, str) or not kind:
        raise AuditError("an audit event needs a non-empty string 'type'")
    if kind in (GENESIS_TYPE, LANES_TYPE):
        raise AuditError("only a migration writes a genesis or a lanes event")
    # The type as plain text: the services name it by a StrEnum member (airlock.events),
    # which canonical_bytes would otherwise send down its slow rfc8785 path; the bytes
    # are the same either way (a str subclass is written as its text).
    full = {**event, "type": str.__str__(kind), _RESERVED_AT: _format_at(at)}
    try:
        data = canonical_bytes(full)
    except (ValueError, TypeError, UnicodeError) as exc:
        raise AuditError(f"event is not float-free JSON: {exc}") from None
    if len(data) > EVENT_MAX_BYTES:
        raise AuditError(f"event is {len(data)} bytes canonical, over {EVENT_MAX_BYTES}")
    # rfc8785 escapes nothing beyond JSON's minimum, so a lone surrogate would reach the
    # database as text no strict parser accepts; verify_chain would then call it corrupt.
    # ASCII bytes hold none, and nothing else canonical_bytes writes parses back
    # differently, so only other text is parsed back here.
    if not data.isascii():
        try:
            loads_strict(data, max_bytes=EVENT_MAX_BYTES, nfc=False)
        except Refused as exc:
            raise AuditError(f"event would not parse back strictly: {exc.detail}") from None
    return data


_HEX64 = re.compile(r"[0-9a-f]{64}")


def is_hex64(value: object) -> bool:
    """True for a str of exactly 64 lowercase hex digits (a row_hash)."""
    return isinstance(value, str) and _HEX64.fullmatch(value) is not None


def connection_of(conn: Connection | Session) -> Connection:
    # Not ``from sqlalchemy.orm import Session`` at the top: the ORM costs every process
    # that opens a store about 0.08 s of CPU to import, and a caller holding a Session has
    # already imported it.
    orm = sys.modules.get("sqlalchemy.orm")
    if orm is not None and isinstance(conn, orm.Session):
        return cast("Connection", conn.connection())
    if not isinstance(conn, Connection):
        raise TypeError("pass a SQLAlchemy Connection or Session")
    return conn


# Built once: constructing a statement per call costs more than executing it.
_HEAD = (
    sa.select(_audit.c.seq, _audit.c.lane, _audit.c.event, _audit.c.prev_hash, _audit.c.row_hash)
    .order_by(_audit.c.seq.desc())
    .limit(1)
)

# On PostgreSQL an append is one statement (one round trip): read the head, extend it,
# return the new row. The head is read in the INSERT's own snapshot, which is taken after
# the chain lock (READ COMMITTED), as a SELECT of its own would be; the trigger then
# checks the row against the head once more. row_hash is SHA-256(raw(prev) ‖ event
# bytes), computed by the database's built-in sha256 (11+) over the very bytes passed in
# and checked against chain_hash on the returned row. The WHERE refuses a head whose
# row_hash is not 64 lowercase hex: nothing is inserted, and append reads the head to say
# why. The LIMIT is inside the subquery, so the WHERE judges the head only, never an
# older row.
_APPEND_SQL = """
INSERT INTO audit_log (seq, event, prev_hash, row_hash)
SELECT chain_head.seq + 1, :event, chain_head.row_hash, {row_hash}
FROM (SELECT seq, row_hash FROM audit_log ORDER BY seq DESC LIMIT 1) AS chain_head
WHERE {well_formed}
RETURNING seq, prev_hash, row_hash
"""
# Once a chain has lanes (PostgreSQL, ``_lanes.py``) a row extends the head of its own
# lane, and its seq comes from the sequence: unique and rising within every lane (a lane's
# appends are serialized by its lock), so seq still orders the merged chain, with gaps
# where a transaction that took a number rolled back.
_APPEND_LANE_SQL = f"""
INSERT INTO audit_log (seq, lane, event, prev_hash, row_hash)
SELECT nextval('{SEQUENCE}'), :lane, :event, chain_head.row_hash, {{row_hash}}
FROM (SELECT seq, row_hash FROM audit_log WHERE lane = :lane ORDER BY seq DESC LIMIT 1)
  AS chain_head
WHERE {{well_formed}}
RETURNING seq, prev_hash, row_hash
"""  # noqa: S608


def _append_statement(sql: str, row_hash: str, well_formed: str) -> Prepared:
    # Compiled once and run on the driver's cursor: every state change appends.
    params: list[sa.BindParameter[Any]] = [
        sa.bindparam("event", type_=sa.Text),
        sa.bindparam("event_bytes", type_=sa.LargeBinary),
    ]
    if ":lane" in sql:
        params.append(sa.bindparam("lane", type_=sa.SmallInteger))
    return Prepared(
        sa.text(sql.format(row_hash=row_hash, well_formed=well_formed)).bindparams(*params)
    )


_PG_HASH = "encode(sha256(decode(chain_head.row_hash, 'hex') || :event_bytes), 'hex')"
# 64 characters, none outside [0-9a-f]: what ``^[0-9a-f]{64}$`` says, at a tenth of its
# CPU (PostgreSQL's regex engine builds the bounded repetition's automaton on every match).
_PG_WELL_FORMED = "octet_length(chain_head.row_hash) = 64 AND chain_head.row_hash !~ '[^0-9a-f]'"
_APPEND = _append_statement(_APPEND_SQL, _PG_HASH, _PG_WELL_FORMED)
_APPEND_LANE = _append_statement(_APPEND_LANE_SQL, _PG_HASH, _PG_WELL_FORMED)
# On SQLite the transaction holds the database's one write lock from its BEGIN IMMEDIATE
# (no round trips, no other writer): the head is read, the row is hashed here by
# chain_hash itself, and inserted; the trigger checks the row against the head again.
_SQLITE_HEAD = Prepared(
    sa.select(_audit.c.seq, _audit.c.row_hash).order_by(_audit.c.seq.desc()).limit(1)
)
_SQLITE_APPEND = Prepared(
    sa.insert(_audit).values(
        seq=sa.bindparam("seq", type_=sa.BigInteger),
        event=sa.bindparam("event", type_=sa.Text),
        prev_hash=sa.bindparam("prev_hash", type_=sa.String(64)),
        row_hash=sa.bindparam("row_hash", type_=sa.String(64)),
    )
)
# The whole chain: exclusive, so no lane is held by anyone else. It also says whether the
# chain has lanes (its sequence exists), read afresh each time, so a connection that
# outlived the migration that added them never appends the old way to a chain with lanes.
_PG_HAS_APPEND = f"to_regprocedure('{APPEND_FUNCTION}(integer,text,bytea)') IS NOT NULL"
# These three run in most transactions that record anything: compiled once and run on
# the driver's cursor (Prepared), as the appends are.
_PG_LOCK = Prepared(
    sa.text(
        f"SELECT pg_advisory_xact_lock({_APPEND_LOCK_KEY}), "
        f"to_regclass('{SEQUENCE}') IS NOT NULL AS laned, {_PG_HAS_APPEND} AS appends"
    ).columns(
        sa.column("pg_advisory_xact_lock"),
        sa.column("laned", sa.Boolean),
        sa.column("appends", sa.Boolean),
    )
)
_PG_LANED = Prepared(
    sa.text(
        f"SELECT to_regclass('{SEQUENCE}') IS NOT NULL AS laned, {_PG_HAS_APPEND} AS appends"
    ).columns(sa.column("laned", sa.Boolean), sa.column("appends", sa.Boolean))
)
# The append as one call (a chain whose migration made the function, ``_lanes.py``): in
# the lane given, or, with none, in the lane it takes first.
_APPEND_CALL = Prepared(
    sa.text(
        f"SELECT o_lane, o_seq, o_prev_hash, o_row_hash FROM {APPEND_FUNCTION}"  # noqa: S608
        "(:lane, :event, :event_bytes)"
    ).bindparams(
        sa.bindparam("lane", type_=sa.Integer),
        sa.bindparam("event", type_=sa.Text),
        sa.bindparam("event_bytes", type_=sa.LargeBinary),
    )
)
# One lane: the function (made by the migration that added the lanes) takes the whole
# chain's lock shared, then the first free lane's, and returns the lane.
_PG_LANE = Prepared(
    sa.text("SELECT airlock_audit_lane() AS lane").columns(sa.column("lane", sa.SmallInteger))
)
# The feed asks it on every page with an approval (is the head the checkpoint names ours?).
_ROW_HASH_AT = Prepared(
    sa.select(_audit.c.row_hash).where(_audit.c.seq == sa.bindparam("seq", type_=sa.BigInteger))
)
#: ``Connection.info`` key: the lock this connection holds in its transaction (an
#: advisory lock is held until that transaction ends).
_LOCKED_IN = "airlock.audit.locked_in"
#: ``Connection.info`` key: True once this connection saw a chain with lanes.
_LANED = "airlock.audit.laned"
#: ``Connection.info`` key: True once this connection saw the append function.
_APPENDS = "airlock.audit.appends"


@dataclass(frozen=True, slots=True)
class _Held:
    """What a transaction holds: ``lane`` (0 under the whole chain), and whether the
    chain has lanes (then a row is numbered by the sequence)."""

    transaction: object
    whole: bool
    lane: int
    laned: bool


#: What every SQLite transaction holds (immutable, so one object serves them all).
_SQLITE_HELD: Final = _Held(None, True, 0, False)


def _hold(connection: Connection, *, whole: bool) -> _Held:
    """Take the whole chain's lock (``whole``) or a lane's for the rest of the open
    transaction, unless it holds one already; return what it holds."""
    if not connection.in_transaction():
        raise AuditError("the audit chain lock needs an open transaction (engine.begin())")
    if is_sqlite(connection):
        # One writer at a time already (BEGIN IMMEDIATE): one lane, the whole chain.
        require_immediate(connection)
        return _SQLITE_HELD
    if not is_postgresql(connection):
        raise AuditError(f"unsupported dialect {connection.dialect.name!r}")
    # Taken once per transaction: held until the transaction ends. A new transaction is
    # a new object, so ``is`` cannot match a finished one. Taken inside a savepoint, it
    # is not remembered: rolling the savepoint back may release it, while one taken
    # outside outlives any savepoint.
    transaction = connection.get_transaction()
    held = connection.info.get(_LOCKED_IN)
    if held is not None and held.transaction is transaction:
        if whole and not held.whole:
            # Asking for the whole chain while holding a lane waits for every other lane
            # holder, two such transactions for each other: a deadlock. Take it first.
            raise AuditError("take the whole audit chain's lock before a lane's, not after")
        return cast(_Held, held)
    if not whole and not connection.info.get(_LANED):
        # Asked until the answer is yes: a chain gets lanes once and keeps them.
        found = _one(_PG_LANED.first(connection, {}))
        connection.info[_LANED], connection.info[_APPENDS] = bool(found[0]), bool(found[1])
    if not whole and connection.info[_LANED]:
        held = _Held(transaction, False, _one(_PG_LANE.first(connection, {}))[0], True)
    else:
        # The whole chain, and whether the chain has lanes, afresh: a connection made
        # before the migration that added them must not append the old way after it.
        found = _one(_PG_LOCK.first(connection, {}))
        connection.info[_LANED], connection.info[_APPENDS] = bool(found[1]), bool(found[2])
        held = _Held(transaction, True, 0, bool(found[1]))
    return _remember(connection, held)


def _one(row: tuple[Any, ...] | None) -> tuple[Any, ...]:
    """The row a lock statement returned: a SELECT without FROM returns exactly one."""
    if row is None:
        raise AuditError("the audit chain lock statement returned no row")
    return row


def _remember(connection: Connection, held: _Held) -> _Held:
    if not connection.in_nested_transaction():
        connection.info[_LOCKED_IN] = held
    return held


def _head(conn: Connection) -> AuditEntry:
    row = conn.execute(_HEAD).one_or_none()
    if row is None:
        raise ChainError("audit_log has no genesis row: run the service's migrations")
    return AuditEntry(
        seq=row.seq,
        event_text=row.event,
        prev_hash=row.prev_hash,
        row_hash=row.row_hash,
        lane=row.lane,
    )


def _append_taking_lane(connection: Connection, text: str, data: bytes) -> AuditEntry:
    """Take a lane and append to it in one call (PostgreSQL, the append function); the
    lane is then held as :meth:`AuditLog.lock_lane` holds it."""
    row = _APPEND_CALL.first(connection, {"lane": None, "event": text, "event_bytes": data})
    if row is None:  # the head was malformed: nothing inserted, the lane unknown
        return _appended(connection, None, -1, text, data)
    taken = _remember(connection, _Held(connection.get_transaction(), False, row[0], True))
    return _appended(connection, row[1:], taken.lane, text, data)


def _appended(
    connection: Connection, row: Sequence[Any] | None, lane: int, text: str, data: bytes
) -> AuditEntry:
    """The entry the append returned as ``row`` (seq, prev_hash, row_hash) in ``lane``,
    checked against :func:`chain_hash`; ChainError for none, or another hash."""
    if row is None:
        head = _head(connection)  # raises for a chain with no genesis row
        if not is_hex64(head.row_hash):
            raise ChainError(f"audit head seq {head.seq} has a malformed row_hash: verify it")
        raise ChainError(f"audit append did not extend lane {lane}'s head")
    seq, prev_hash, row_hash = row
    entry = AuditEntry(seq=seq, event_text=text, prev_hash=prev_hash, row_hash=row_hash, lane=lane)
    # The database computed the hash; the chain is defined by chain_hash. On a
    # difference the caller's transaction rolls back, as after any failed append.
    if entry.row_hash != chain_hash(entry.prev_hash, data):
        raise ChainError(f"audit append of seq {entry.seq} computed a different row_hash")
    return entry


def _append_sqlite(connection: Connection, text: str, data: bytes) -> AuditEntry:
    """The append on SQLite (see ``_SQLITE_APPEND``), under the transaction's write lock."""
    head = _SQLITE_HEAD.first(connection, {})
    if head is None:
        raise ChainError("audit_log has no genesis row: run the service's migrations")
    seq, prev_hash = head
    if not is_hex64(prev_hash):
        raise ChainError(f"audit head seq {seq} has a malformed row_hash: verify it")
    row_hash = chain_hash(prev_hash, data)
    params = {"seq": seq + 1, "event": text, "prev_hash": prev_hash, "row_hash": row_hash}
    if _SQLITE_APPEND.rowcount(connection, params) != 1:
        raise ChainError(f"audit append of seq {seq + 1} inserted no row")
    return AuditEntry(seq=seq + 1, event_text=text, prev_hash=prev_hash, row_hash=row_hash)


class AuditLog:
    """Append to and read the head of a service's audit chain, in the caller's transaction."""

    @staticmethod
    def append(
        conn: Connection | Session,
        event: Mapping[str, Any],
        *,
        at: datetime,
        lane: bool = False,
    ) -> AuditEntry:
        """Append ``event`` (plus ``"at"``) to the chain inside ``conn``'s open transaction.

        The row extends the lane this transaction holds (:meth:`lock_lane`); where it holds
        none, ``lane`` takes one (as :meth:`lock_lane`, in the same statement where the
        chain's migration made the append function), else the whole chain's lock is
        taken (:meth:`lock`) and it extends lane 0. Nothing is committed here: the
        caller's commit makes the event durable together
        with whatever else the transaction wrote, and a rollback removes it with them.
        Raises :class:`AuditError` for an invalid event (nothing written) and
        :class:`ChainError` if the chain has no genesis row or a malformed head (nothing
        written), or if the row the database computed differs from :func:`chain_hash`:
        that row is then in the transaction, which the caller must roll back (every
        caller's ``begin()`` block does, as the error propagates); never catch it and
        commit.
        """
        data = _encode_event(event, at)
        connection = connection_of(conn)
        text = data.decode("utf-8")
        # Serialize appenders before reading the head: under READ COMMITTED the next
        # statement's snapshot then sees the previous appender's committed row.
        held: _Held | None = connection.info.get(_LOCKED_IN)
        if held is None or held.transaction is not connection.get_transaction():
            if lane and connection.info.get(_APPENDS) and connection.in_transaction():
                return _append_taking_lane(connection, text, data)
            held = _hold(connection, whole=not lane)
        if connection.dialect.name == "sqlite":
            return _append_sqlite(connection, text, data)
        params = {"event": text, "event_bytes": data, "lane": held.lane}
        if connection.info.get(_APPENDS):
            row = _APPEND_CALL.first(connection, params)
            row = None if row is None else row[1:]
        elif held.laned:
            row = _APPEND_LANE.first(connection, params)
        else:
            row = _APPEND.first(connection, {"event": text, "event_bytes": data})
        return _appended(connection, row, held.lane, text, data)

    @staticmethod
    def lock(conn: Connection | Session) -> None:
        """Take the whole chain's append lock for the rest of ``conn``'s open transaction.

        It excludes every other appender, in every lane: a transaction that must not
        interleave with any other recorder (a hold, a revocation, a refusal's report
        decision) takes it. PostgreSQL: a transaction-scoped advisory lock, exclusive
        (re-entrant). SQLite: the write lock that BEGIN IMMEDIATE already took. A
        transaction that also locks other rows (an UPDATE) and appends should call this
        first, so every such transaction takes the chain lock before any row lock and two
        of them cannot deadlock. Raises :class:`AuditError` in a transaction that holds a
        lane already.
        """
        _hold(connection_of(conn), whole=True)

    @staticmethod
    def lock_lane(conn: Connection | Session) -> int:
        """Take one lane of the chain for the rest of ``conn``'s open transaction; return it.

        Lane holders exclude whole-chain holders (:meth:`lock`) and each other's lane,
        not each other, so concurrent transactions append and commit in parallel and
        PostgreSQL flushes their commits together (docs/protocol.md#audit-chain). A no-op
        where the transaction holds a lane or the whole chain already. PostgreSQL: the
        whole chain's advisory lock shared, then the first free lane's lock, in one
        statement; on a chain without lanes (and SQLite), the whole chain. Call it first,
        before any row lock, as :meth:`lock`.
        """
        return _hold(connection_of(conn), whole=False).lane

    @staticmethod
    def head(conn: Connection | Session) -> AuditEntry:
        """The last row of the chain (the highest seq, whatever its lane) as this
        transaction sees it."""
        return _head(connection_of(conn))

    @staticmethod
    def row_hash_at(conn: Connection | Session, seq: int) -> str | None:
        """The ``row_hash`` of row ``seq`` as ``conn``'s open transaction sees it; None if
        there is no such row. Does this chain hold a head recorded elsewhere? Only if this equals
        the recorded hash (rows never change, so a different one means another chain)."""
        found = _ROW_HASH_AT.first(connection_of(conn), {"seq": seq})
        return None if found is None or found[0] is None else str(found[0])


# ---------------------------------------------------------------------------------------
# Verifying and exporting.


def stream_rows(conn: Connection, batch: int) -> Generator[Any, None, None]:
    """Rows in seq order, streamed (a server-side cursor on PostgreSQL).

    Always use inside ``contextlib.closing``: a verifier stops at the first bad row, and
    the cursor must be closed then, not whenever the generator is collected.
    """
    result = conn.execution_options(yield_per=batch).execute(
        sa.select(
            _audit.c.seq, _audit.c.lane, _audit.c.event, _audit.c.prev_hash, _audit.c.row_hash
        ).order_by(_audit.c.seq)
    )
    try:
        yield from result
    finally:
        result.close()


def require_table(conn: Connection) -> None:
    if not sa.inspect(conn).has_table(AUDIT_TABLE):
        raise ChainError(f"no {AUDIT_TABLE} table in this database")


def count_rows(source: Engine | Connection) -> int:
    """How many rows the chain holds (for a progress bar's total)."""
    if isinstance(source, Engine):
        with read_transaction(source) as conn:
            return count_rows(conn)
    require_table(source)
    return int(source.execute(sa.select(sa.func.count()).select_from(_audit)).scalar_one())


def export(conn: Connection, *, batch: int = 1000) -> Iterator[str]:
    """The chain as JSON lines (no newline), row 0 first, events verbatim.

    Each line is ``{"event":{...},"prev_hash":"…","row_hash":"…","seq":N}``. A row whose
    event is not JSON text at all raises :class:`ChainError` naming it; run
    ``verify_chain`` to find out why.
    """
    require_table(conn)
    with closing(stream_rows(conn, batch)) as rows:
        for row in rows:
            try:
                loads_strict(
                    str(row.event).encode("utf-8", errors="surrogatepass"),
                    max_bytes=EVENT_MAX_BYTES,
                    nfc=False,
                )
            except Refused as exc:
                raise ChainError(
                    f"audit row {row.seq}: event is not strict JSON: {exc.detail}"
                ) from None
            yield AuditEntry(
                seq=row.seq,
                event_text=row.event,
                prev_hash=row.prev_hash,
                row_hash=row.row_hash,
                lane=row.lane,
            ).to_json_line()
