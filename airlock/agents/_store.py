"""Where runs live between processes: one SQLite file, one row per run.

A row holds the run's status, its conversation (JSON), the call it paused at and that
call's proposal id, a version and a lease. Every write is conditional on the version the
writer read (claim, then act): a process whose lease ran out and whose run another
process took over gets :class:`Fenced` and saves nothing. Standard library ``sqlite3``
only; the file holds no secret (the task, the model's turns and tool results).
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from ._model import Message
from .errors import Fenced, NotResumable, RunNotFound

__all__ = ["Run", "RunStore"]

Status = Literal["running", "paused", "done", "failed"]

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS agent_runs (
    id TEXT PRIMARY KEY,
    status TEXT NOT NULL CHECK (status IN ('running', 'paused', 'done', 'failed')),
    messages TEXT NOT NULL,
    pending TEXT,
    result TEXT,
    version INTEGER NOT NULL,
    lease_until INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
)
"""


@dataclass(frozen=True, slots=True)
class Run:
    """A run as stored: ``pending`` is ``{"call_id", "tool", "proposal_id", "url"}``
    while paused, else None."""

    id: str
    status: Status
    messages: tuple[Message, ...]
    pending: dict[str, Any] | None
    result: str | None
    version: int


class RunStore:
    """The runs of one agent, in the SQLite file at ``path`` (created if absent)."""

    def __init__(self, path: str | Path) -> None:
        self._path = str(path)
        with self._connect() as conn:
            conn.execute(_SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        # One short connection per operation: runs are resumed by other processes, and
        # an open connection per Agent would hold the file's lock between turns.
        with closing(sqlite3.connect(self._path, timeout=30.0)) as conn, conn:
            yield conn

    def create(self, messages: Sequence[Message], *, now: int, lease: int) -> Run:
        """A new run, ``running`` and held by the caller for ``lease`` seconds."""
        run_id = "run_" + uuid.uuid4().hex
        with self._connect() as conn:
            conn.execute(
                "INSERT INTO agent_runs VALUES (?, 'running', ?, NULL, NULL, 1, ?, ?)",
                (run_id, _dump(messages), now + lease, now),
            )
        return Run(run_id, "running", tuple(messages), None, None, 1)

    def load(self, run_id: str) -> Run:
        """The run; :class:`RunNotFound` if there is none."""
        with self._connect() as conn:
            row = conn.execute(
                "SELECT id, status, messages, pending, result, version FROM agent_runs "
                "WHERE id = ?",
                (run_id,),
            ).fetchone()
        if row is None:
            raise RunNotFound(f"no run {run_id}")
        return Run(
            id=row[0],
            status=row[1],
            messages=tuple(Message.from_value(m) for m in json.loads(row[2])),
            pending=None if row[3] is None else json.loads(row[3]),
            result=row[4],
            version=row[5],
        )

    def claim(self, run_id: str, *, now: int, lease: int) -> Run:
        """Take a paused run, or a running one whose holder's lease ran out (the process
        stopped), in one conditional UPDATE; :class:`NotResumable` otherwise."""
        with self._connect() as conn:
            taken = conn.execute(
                "UPDATE agent_runs SET status = 'running', version = version + 1, "
                "lease_until = ?, updated_at = ? WHERE id = ? AND "
                "(status = 'paused' OR (status = 'running' AND lease_until < ?))",
                (now + lease, now, run_id, now),
            ).rowcount
        run = self.load(run_id)
        if taken != 1:
            raise NotResumable(f"run {run_id} is {run.status}")
        return run

    def save(
        self,
        run: Run,
        messages: Sequence[Message],
        *,
        status: Status,
        now: int,
        lease: int,
        pending: dict[str, Any] | None = None,
        result: str | None = None,
    ) -> Run:
        """Write the run's new state if nobody took it over since ``run`` was read;
        :class:`Fenced` otherwise. Returns the run as written."""
        with self._connect() as conn:
            written = conn.execute(
                "UPDATE agent_runs SET status = ?, messages = ?, pending = ?, result = ?, "
                "version = version + 1, lease_until = ?, updated_at = ? "
                "WHERE id = ? AND version = ?",
                (
                    status,
                    _dump(messages),
                    None if pending is None else json.dumps(pending),
                    result,
                    now + lease,
                    now,
                    run.id,
                    run.version,
                ),
            ).rowcount
        if written != 1:
            raise Fenced(f"run {run.id} was taken over by another process")
        return Run(run.id, status, tuple(messages), pending, result, run.version + 1)


def _dump(messages: Sequence[Message]) -> str:
    return json.dumps([m.to_value() for m in messages], separators=(",", ":"))
