"""devcloud's state in SQLite: instances, the write log, idempotency tokens, nonces, faults.

Every effect (stop, delete) is applied and appended to the write log in one
``BEGIN IMMEDIATE`` transaction, so the log is exactly the set of effects that happened —
that is what the exactly-once tests count. Each entry keeps every parameter of the request
as received (``ForceStop``, ``Hibernate``, ``DryRun``, …), so a test can see how it was
asked. Several processes may share the file (WAL); each write is serialized by SQLite's
write lock, so check-then-act on an instance's status cannot interleave.

Status transitions are computed lazily from timestamps: a stopped instance is
``Stopping`` until ``transition_at`` and ``Stopped`` after it.

This module must never log an effect that did not happen, nor apply one without logging.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from .errors import AcsError
from .fleet import InstanceSpec
from .wire import JsonObject, WriteRecord

__all__ = ["Faults", "Instance", "Store"]

#: Statuses an instance is in once started; entering one from another is a (re)start.
_STARTED = frozenset({"Starting", "Running"})

_SCHEMA = """
CREATE TABLE IF NOT EXISTS instances (
    ord INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL CHECK (kind IN ('ecs', 'rds')),
    region TEXT NOT NULL,
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    transition_at REAL,
    stopped_mode TEXT,
    instance_type TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    tags TEXT NOT NULL,
    truth TEXT NOT NULL DEFAULT '',
    profile TEXT NOT NULL DEFAULT 'idle',
    has_memory INTEGER NOT NULL DEFAULT 1,
    -- the last start (Unix seconds); NULL = started when created, as RunInstances does
    started_at INTEGER
);
CREATE INDEX IF NOT EXISTS instances_kind_region ON instances (kind, region, ord);
CREATE TABLE IF NOT EXISTS write_log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    action TEXT NOT NULL,
    resource_id TEXT NOT NULL,
    region TEXT NOT NULL,
    client_token TEXT,
    request_id TEXT NOT NULL,
    access_key_id TEXT NOT NULL,
    params TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS idempotency (
    action TEXT NOT NULL,
    token TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    response TEXT NOT NULL,
    PRIMARY KEY (action, token)
);
CREATE TABLE IF NOT EXISTS nonces (nonce TEXT PRIMARY KEY, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS nonces_at ON nonces (at);
CREATE TABLE IF NOT EXISTS faults (id INTEGER PRIMARY KEY CHECK (id = 1), data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@dataclass(frozen=True, slots=True)
class Instance:
    ord: int
    id: str
    kind: str
    region: str
    name: str
    status: str  # effective status, transitions applied
    stopped_mode: str | None
    instance_type: str
    created_at: int
    tags: tuple[tuple[str, str], ...]
    truth: str
    profile: str
    has_memory: bool
    started_at: int  # the last start, what DescribeInstances reports as StartTime


@dataclass(slots=True)
class Faults:
    """What the admin API injected. Counters are consumed atomically in the database."""

    latency_ms: int = 0  # added to every request
    write_latency_ms: int = 0  # added to every write request
    fail_next_writes: int = 0  # the next N writes fail before any effect
    fail_kind: str = "unavailable"  # unavailable (503) | internal (500) | throttling (400)
    drop_next_writes: int = 0  # the next N writes apply, then the response is withheld
    drop_delay_ms: int = 30_000  # how long a dropped response is withheld
    #: timeout: withhold the answer past the caller's read timeout; reset: start the
    #: answer, then cut the connection mid-body (the caller sees a broken response at once)
    drop_mode: str = "timeout"
    fail_next_reads: int = 0  # same as fail_next_writes, for Describe*/List*/metrics

    def to_json(self) -> dict[str, int | str]:
        """The settings as a JSON object, what ``GET /_admin/faults`` answers."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, text: str | bytes) -> Faults:
        """Settings stored with :meth:`to_json`; a field this version does not know is
        ignored, one it lacks takes its default."""
        return _FAULTS.validate_json(text)


_FAULTS = TypeAdapter(Faults)


class Store:
    def __init__(
        self,
        path: Path | str,
        *,
        transition_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._path = str(path)
        self._transition = transition_seconds
        self._clock = clock
        self._local = threading.local()
        self._conn().executescript(_SCHEMA)  # idempotent DDL, its own transaction
        self._add_started_at()

    def _add_started_at(self) -> None:
        """A database file from before ``started_at`` existed gets the column (NULL)."""
        db = self._conn()
        columns = {str(r["name"]) for r in db.execute("PRAGMA table_info(instances)")}
        if "started_at" not in columns:
            db.execute("ALTER TABLE instances ADD COLUMN started_at INTEGER")

    # -- connections

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self._path, isolation_level=None, timeout=30.0)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            # The write log is the exactly-once judge: it must survive a crash of devcloud.
            # In WAL mode NORMAL is durable across a process crash (only an OS crash or
            # power loss can drop the last commits), without an fsync per request.
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA busy_timeout=30000")
            self._local.conn = conn
        return conn

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        db = self._conn()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- seeding and meta

    def add_instances(self, specs: Iterable[InstanceSpec]) -> int:
        rows = [
            (
                s.id,
                s.kind,
                s.region,
                s.name,
                s.status,
                s.instance_type,
                s.created_at,
                json.dumps(list(s.tags), ensure_ascii=False),
                s.truth,
                s.profile,
                int(s.has_memory),
            )
            for s in specs
        ]
        with self._tx() as db:
            db.executemany(
                "INSERT INTO instances (id, kind, region, name, status, instance_type,"
                " created_at, tags, truth, profile, has_memory)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                rows,
            )
        return len(rows)

    def clear_instances(self) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM instances")

    def set_meta(self, key: str, value: str) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def get_meta(self, key: str, default: str = "") -> str:
        row = self._conn().execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return str(row["value"]) if row else default

    # -- reading

    def _to_instance(self, row: sqlite3.Row, now: float) -> Instance:
        status = str(row["status"])
        if (
            status == "Stopping"
            and row["transition_at"] is not None
            and now >= row["transition_at"]
        ):
            status = "Stopped"
        return Instance(
            ord=int(row["ord"]),
            id=str(row["id"]),
            kind=str(row["kind"]),
            region=str(row["region"]),
            name=str(row["name"]),
            status=status,
            stopped_mode=row["stopped_mode"],
            instance_type=str(row["instance_type"]),
            created_at=int(row["created_at"]),
            tags=tuple((str(k), str(v)) for k, v in json.loads(row["tags"])),
            truth=str(row["truth"]),
            profile=str(row["profile"]),
            has_memory=bool(row["has_memory"]),
            started_at=int(row["created_at"] if row["started_at"] is None else row["started_at"]),
        )

    def page(
        self,
        kind: str,
        region: str,
        *,
        after: int,
        offset: int,
        limit: int,
        ids: Sequence[str] | None = None,
        status: str | None = None,
        tags: Sequence[tuple[str, str | None]] = (),
    ) -> tuple[list[Instance], int]:
        """One page after ``ord`` > ``after`` (keyset) skipping ``offset``; and the total.

        Status and tag filters are applied after the lazy transition, in Python, so they
        see what a Describe call reports.
        """
        sql = "FROM instances WHERE kind = ? AND region = ?"
        args: list[Any] = [kind, region]
        if ids is not None:
            sql += f" AND id IN ({','.join('?' * len(ids))})"
            args.extend(ids)
        now = self._clock()
        db = self._conn()
        if status is None and not tags:
            # The common case (a full scan): keyset paging in SQL, memory bounded by a page.
            total = int(db.execute("SELECT COUNT(*) " + sql, args).fetchone()[0])
            rows = db.execute(
                "SELECT * " + sql + " AND ord > ? ORDER BY ord LIMIT ? OFFSET ?",
                [*args, after, limit, offset],
            )
            return [self._to_instance(r, now) for r in rows], total
        matched: list[Instance] = []
        for row in db.execute("SELECT * " + sql + " ORDER BY ord", args):
            inst = self._to_instance(row, now)
            if status is not None and inst.status != status:
                continue
            if not all(_has_tag(inst.tags, k, v) for k, v in tags):
                continue
            matched.append(inst)
        rest = [i for i in matched if i.ord > after][offset:]
        return rest[:limit], len(matched)

    def get(self, ids: Sequence[str]) -> dict[str, Instance]:
        if not ids:
            return {}
        now = self._clock()
        rows = self._conn().execute(
            # only "?" placeholders are interpolated, never a value
            f"SELECT * FROM instances WHERE id IN ({','.join('?' * len(ids))})",  # noqa: S608
            list(ids),
        )
        return {str(r["id"]): self._to_instance(r, now) for r in rows}

    def truth(self) -> dict[str, str]:
        rows = self._conn().execute("SELECT id, truth FROM instances ORDER BY ord")
        return {str(r["id"]): str(r["truth"]) for r in rows}

    # -- writes (each applies its effect and logs it in one transaction)

    def _log(
        self,
        db: sqlite3.Connection,
        *,
        action: str,
        resource_id: str,
        region: str,
        request_id: str,
        key_id: str,
        params: Mapping[str, str],
        client_token: str | None = None,
    ) -> None:
        db.execute(
            "INSERT INTO write_log (at, action, resource_id, region, client_token, request_id,"
            " access_key_id, params) VALUES (?,?,?,?,?,?,?,?)",
            (
                self._clock(),
                action,
                resource_id,
                region,
                client_token,
                request_id,
                key_id,
                json.dumps(params, ensure_ascii=False, sort_keys=True),
            ),
        )

    def _locked_get(self, db: sqlite3.Connection, instance_id: str) -> Instance | None:
        row = db.execute("SELECT * FROM instances WHERE id = ?", (instance_id,)).fetchone()
        return self._to_instance(row, self._clock()) if row else None

    def stop(
        self,
        *,
        kind: str,
        instance_ids: Sequence[str],
        region: str,
        stopped_mode: str | None,
        action: str,
        request_id: str,
        key_id: str,
        params: Mapping[str, str],
        dry_run: bool = False,
    ) -> list[Instance]:
        """Running → Stopping for every instance of ``region``, all or nothing; the previous
        states. ``params`` (the request's, as received) go into the write log."""
        not_found = (
            "InvalidInstanceId.NotFound" if kind == "ecs" else "InvalidDBInstanceId.NotFound"
        )
        with self._tx() as db:
            found = []
            for iid in instance_ids:
                inst = self._locked_get(db, iid)
                if inst is None or inst.kind != kind or inst.region != region:
                    raise AcsError(not_found, f"The specified instance {iid} does not exist.", 404)
                if inst.status != "Running":
                    if kind == "ecs":
                        raise AcsError(
                            "IncorrectInstanceStatus",
                            "The current status of the resource does not support this operation.",
                            403,
                        )
                    raise AcsError(
                        "IncorrectDBInstanceState",
                        "Current DB instance state does not support this operation.",
                        403,
                    )
                found.append(inst)
            if dry_run:
                raise AcsError(
                    "DryRunOperation",
                    "Request validation has been passed with DryRun flag set.",
                    400,
                )
            for inst in found:
                db.execute(
                    "UPDATE instances SET status = 'Stopping', transition_at = ?, stopped_mode = ?"
                    " WHERE id = ?",
                    (self._clock() + self._transition, stopped_mode, inst.id),
                )
                self._log(
                    db,
                    action=action,
                    resource_id=inst.id,
                    region=inst.region,
                    request_id=request_id,
                    key_id=key_id,
                    params=dict(params),
                )
            return found

    def delete_ecs(
        self,
        *,
        region: str,
        instance_ids: Sequence[str],
        force: bool,
        client_token: str | None,
        action: str,
        request_id: str,
        key_id: str,
        params: Mapping[str, str],
        dry_run: bool = False,
    ) -> tuple[JsonObject, bool]:
        """Delete the instances; returns (response body, replayed).

        With a ``ClientToken`` the first successful result is stored and a repeat with
        the same token and parameters replays it without deleting anything again; a
        repeat with other parameters is ``IdempotentParameterMismatch`` (as the real API).
        """
        fingerprint = json.dumps(
            {"region": region, "ids": list(instance_ids), "force": force}, sort_keys=True
        )
        with self._tx() as db:
            if client_token:
                row = db.execute(
                    "SELECT fingerprint, response FROM idempotency WHERE action = ? AND token = ?",
                    (action, client_token),
                ).fetchone()
                if row is not None:
                    if row["fingerprint"] != fingerprint:
                        raise AcsError(
                            "IdempotentParameterMismatch",
                            "The specified parameters differ from a previous request with the"
                            " same ClientToken.",
                            400,
                        )
                    return json.loads(row["response"]), True
            found = []
            for iid in instance_ids:
                inst = self._locked_get(db, iid)
                if inst is None or inst.kind != "ecs" or inst.region != region:
                    raise AcsError(
                        "InvalidInstanceId.NotFound",
                        f"The specified instance {iid} does not exist.",
                        404,
                    )
                if inst.status != "Stopped" and not force:
                    raise AcsError(
                        "IncorrectInstanceStatus",
                        "The current status of the resource does not support this operation.",
                        403,
                    )
                found.append(inst)
            if dry_run:
                raise AcsError(
                    "DryRunOperation",
                    "Request validation has been passed with DryRun flag set.",
                    400,
                )
            for inst in found:
                db.execute("DELETE FROM instances WHERE id = ?", (inst.id,))
                self._log(
                    db,
                    action=action,
                    resource_id=inst.id,
                    region=inst.region,
                    request_id=request_id,
                    key_id=key_id,
                    client_token=client_token,
                    params=dict(params),
                )
            response: JsonObject = {"RequestId": request_id}
            if client_token:
                db.execute(
                    "INSERT INTO idempotency (action, token, fingerprint, response)"
                    " VALUES (?,?,?,?)",
                    (action, client_token, fingerprint, json.dumps(response)),
                )
            return response, False

    def write_log(
        self, resource_id: str | None = None, action: str | None = None
    ) -> list[WriteRecord]:
        sql = "SELECT * FROM write_log WHERE 1 = 1"
        args: list[str] = []
        if resource_id is not None:
            sql += " AND resource_id = ?"
            args.append(resource_id)
        if action is not None:
            sql += " AND action = ?"
            args.append(action)
        sql += " ORDER BY seq"
        return [
            {
                "seq": r["seq"],
                "at": r["at"],
                "action": r["action"],
                "resource_id": r["resource_id"],
                "region": r["region"],
                "client_token": r["client_token"],
                "request_id": r["request_id"],
                "access_key_id": r["access_key_id"],
                "params": json.loads(r["params"]),
            }
            for r in self._conn().execute(sql, args)
        ]

    # -- out-of-band changes (admin), never in the write log

    def admin_update(
        self,
        instance_id: str,
        *,
        status: str | None = None,
        tags: Sequence[tuple[str, str]] | None = None,
        add_tags: Sequence[tuple[str, str]] = (),
        remove_tags: Sequence[str] = (),
        delete: bool = False,
        started_at: int | None = None,
    ) -> Instance | None:
        """A person's change in the console. Starting an instance that is not running
        (status Running or Starting) moves its last start to now, or to ``started_at``
        when given; ``started_at`` is ignored by any other change."""
        with self._tx() as db:
            inst = self._locked_get(db, instance_id)
            if inst is None:
                raise KeyError(instance_id)
            if delete:
                db.execute("DELETE FROM instances WHERE id = ?", (instance_id,))
                return None
            new_tags = list(inst.tags if tags is None else tags)
            new_tags = [(k, v) for k, v in new_tags if k not in set(remove_tags)]
            for k, v in add_tags:
                new_tags = [(k2, v2) for k2, v2 in new_tags if k2 != k] + [(k, v)]
            if status in _STARTED and inst.status not in _STARTED:
                started_at = int(self._clock()) if started_at is None else started_at
            else:
                started_at = None  # not a start: the last start stays
            db.execute(
                "UPDATE instances SET tags = ?, status = ?, transition_at = ?,"
                " started_at = COALESCE(?, started_at) WHERE id = ?",
                (
                    json.dumps(new_tags, ensure_ascii=False),
                    inst.status if status is None else status,
                    # an explicit status sticks; keep a pending transition otherwise
                    None if status is not None else self._pending(db, instance_id),
                    started_at,
                    instance_id,
                ),
            )
            return self._locked_get(db, instance_id)

    @staticmethod
    def _pending(db: sqlite3.Connection, instance_id: str) -> float | None:
        row = db.execute(
            "SELECT transition_at FROM instances WHERE id = ?", (instance_id,)
        ).fetchone()
        return None if row is None else row["transition_at"]

    # -- nonces (replay guard of signed requests)

    def use_nonce(self, nonce: str, max_age: float) -> bool:
        """Record a signature nonce; False when it was already used within ``max_age``."""
        now = self._clock()
        with self._tx() as db:
            db.execute("DELETE FROM nonces WHERE at < ?", (now - 2 * max_age,))
            try:
                db.execute("INSERT INTO nonces (nonce, at) VALUES (?, ?)", (nonce, now))
            except sqlite3.IntegrityError:
                return False
        return True

    # -- faults

    def get_faults(self) -> Faults:
        row = self._conn().execute("SELECT data FROM faults WHERE id = 1").fetchone()
        return Faults.from_json(row["data"]) if row else Faults()

    def set_faults(self, faults: Faults) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO faults (id, data) VALUES (1, ?)",
                (json.dumps(faults.to_json()),),
            )

    def consume_fault(self, counter: str, seen: Faults | None = None) -> Faults | None:
        """Atomically take one unit of ``counter``; the faults as they were, or None.

        ``seen`` (a snapshot just read) lets the common no-fault case skip the write lock.
        """
        if seen is not None and getattr(seen, counter) <= 0:
            return None
        with self._tx() as db:
            row = db.execute("SELECT data FROM faults WHERE id = 1").fetchone()
            if row is None:
                return None
            faults = Faults.from_json(row["data"])
            if getattr(faults, counter) <= 0:
                return None
            taken = dataclasses.replace(faults)
            setattr(faults, counter, getattr(faults, counter) - 1)
            db.execute("UPDATE faults SET data = ? WHERE id = 1", (json.dumps(faults.to_json()),))
            return taken


def _has_tag(tags: Sequence[tuple[str, str]], key: str, value: str | None) -> bool:
    return any(k == key and (value is None or v == value) for k, v in tags)
