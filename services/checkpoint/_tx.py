"""The steps every checkpoint write is made of, and the one order they take. Not public.

A write is one database transaction, in this order, so two writers never wait on each
other in a cycle (PostgreSQL would kill one of them as a deadlock):

1. :func:`require` the caller's role, before the transaction;
2. :func:`lock` the proposal row (``SELECT … FOR UPDATE``; SQLite's ``BEGIN IMMEDIATE``
   serializes writers) and check its state;
3. move the state (:func:`set_state` when the state it leaves is known, :func:`move`
   when the outcome lands on whatever the row is);
4. :func:`audit`, which takes the audit chain's lock;
5. :func:`feed_entry`, which takes the feed counter's row, after the chain lock (and on
   PostgreSQL queues the replicas' wake-up, ``wake.notify``, sent at commit);
6. ``notify.record`` the event of the change (rows of its own: no lock another writer
   waits on in another order).

A write that names no proposal row (an executor's refusal note, raising the feed counter)
takes the chain lock first and no row after it. The sweeper locks every row it changes
before its first append. Nothing here commits: the caller's ``engine.begin()`` does.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from airlock.protocol import TOOL_CALL_TYPE, KeySet
from airlock.store import AuditLog, Prepared

from . import wake
from .auth import Principal
from .errors import ErrorCode, Refusal
from .gatekeys import GateKeys
from .models import feed_events, feed_head, proposals, users, votes
from .notify.config import NotifyConfig
from .policy import Decision

__all__ = [
    "APPROVER_ROLES",
    "AT_MAX",
    "DETAIL_MAX",
    "EXECUTOR_MAX",
    "FEED_AHEAD_MAX_S",
    "FEED_SEQ_MAX",
    "FEED_SEQ_PER_SECOND",
    "MAX_PAGE",
    "READER_ROLES",
    "CheckpointConfig",
    "Parts",
    "audit",
    "bound",
    "check_pending",
    "counted_votes",
    "feed_entry",
    "lock",
    "log",
    "move",
    "not_found",
    "require",
    "set_state",
]

log = logging.getLogger("airlock.checkpoint")

#: The last second ``datetime`` can show (9999-12-31T23:59:59Z): a note's time past it
#: would make every page that shows the note fail.
AT_MAX: Final = 253402300799
EXECUTOR_MAX: Final = 256
DETAIL_MAX: Final = 2000
APPROVER_ROLES: Final = frozenset({"approver", "admin"})
READER_ROLES: Final = frozenset({"viewer", "approver", "admin", "agent"})
MAX_PAGE: Final = 200
#: Feed seqs per second of the clock: a feed seq is at least ``now × this`` (see
#: :func:`feed_entry`). Up to a million items a second keep to the clock; more just count
#: on. In 2026 a seq is about 1.8e15, and stays under JSON's 2**53 for two centuries.
FEED_SEQ_PER_SECOND: Final = 1_000_000
#: The largest feed seq: JSON's largest exact integer (the feed's ``after`` takes no more).
FEED_SEQ_MAX: Final = 2**53 - 1
#: How far past this clock an executor's cursor may raise the feed counter, seconds.
FEED_AHEAD_MAX_S: Final = 24 * 3600


@dataclass(frozen=True, slots=True)
class CheckpointConfig:
    audience: str
    approval_window: int = 24 * 3600
    execution_window: int = 15 * 60


class Parts(Protocol):
    """What the feed, the reports and the views need of a
    :class:`~services.checkpoint.service.Checkpoint` (read at each call: the app sets
    ``on_change`` and tests set ``receipt_keys`` after construction)."""

    @property
    def engine(self) -> Engine: ...

    @property
    def config(self) -> CheckpointConfig: ...

    @property
    def receipt_keys(self) -> KeySet | None: ...

    @property
    def gate_keys(self) -> GateKeys: ...

    @property
    def now(self) -> Callable[[], int]: ...

    @property
    def notify(self) -> NotifyConfig: ...


def require(principal: Principal, roles: frozenset[str] | set[str], what: str) -> None:
    """Refuse (403 ``E_FORBIDDEN``) a principal whose role is not in ``roles``."""
    if principal.role not in roles:
        raise Refusal(ErrorCode.E_FORBIDDEN, f"role {principal.role} may not {what}", 403)


def not_found(proposal_id: str) -> Refusal:
    return Refusal(ErrorCode.E_NOT_FOUND, f"no proposal {proposal_id[:100]!r}", 404)


def bound(table: sa.Table, *columns: str) -> dict[str, sa.BindParameter[Any]]:
    """A parameter of each of ``columns``, named and typed as the column (an INSERT's
    ``values`` for :class:`~airlock.store.Prepared`)."""
    return {c: sa.bindparam(c, type_=table.c[c].type) for c in columns}


# The hot statements, compiled once and run on the driver's cursor (airlock.store.Prepared).
_LOCK = Prepared(sa.select(proposals).where(proposals.c.id == sa.bindparam("id")).with_for_update())
_COUNTED = Prepared(
    sa.select(votes.c.voter, votes.c.at)
    .select_from(votes.join(users, users.c.username == votes.c.voter))
    .where(
        votes.c.proposal_id == sa.bindparam("id"),
        users.c.disabled.is_(False),
        # Not in_(): a fixed list is an expanding parameter, which Prepared refuses.
        sa.or_(*(users.c.role == role for role in sorted(APPROVER_ROLES))),
    )
    .order_by(votes.c.at, votes.c.id)
)


def _feed_next() -> sa.Update:
    # One statement takes the next seq and returns it (RETURNING: SQLite 3.35+,
    # PostgreSQL): the larger of the counter + 1 and the clock's floor.
    after_last = feed_head.c.seq + 1
    floor = sa.bindparam("floor", type_=sa.BigInteger)
    return (
        feed_head.update()
        .where(feed_head.c.id == 1)
        .values(seq=sa.case((after_last > floor, after_last), else_=floor))
        .returning(feed_head.c.seq)
    )


_FEED_NEXT = Prepared(_feed_next())
_FEED_INSERT = Prepared(
    feed_events.insert().values(bound(feed_events, "seq", "kind", "approval_id", "at"))
)
_MOVE = Prepared(
    proposals.update()
    # Not a column's name: SQLAlchemy keeps those for the SET clause's own parameters.
    .where(proposals.c.id == sa.bindparam("pid", type_=proposals.c.id.type))
    .values(
        state=sa.bindparam("state", type_=proposals.c.state.type),
        updated_at=sa.bindparam("updated_at", type_=proposals.c.updated_at.type),
    )
)


def lock(conn: Connection, proposal_id: str) -> Any:
    """The proposal's row, locked until the transaction ends (step 2), or 404: a
    :meth:`~airlock.store.Prepared.rows` row (its columns by name, and ``_mapping``)."""
    row = _LOCK.row(conn, {"id": proposal_id})
    if row is None:
        raise not_found(proposal_id)
    return row


def check_pending(row: Any, now: int) -> None:
    """Refuse a proposal that is not pending (``E_STATE``) or past its window (``E_EXPIRED``)."""
    if row.state != "pending":
        raise Refusal(ErrorCode.E_STATE, f"the proposal is {row.state}, not pending", 409)
    if now >= row.approval_deadline:
        raise Refusal(ErrorCode.E_EXPIRED, "the approval window has passed", 409)


def set_state(conn: Connection, proposal_id: str, expected: str, state: str, now: int) -> None:
    """Move a locked proposal from ``expected`` to ``state``; refuse (``E_STATE``) if it
    is not in ``expected``."""
    done = conn.execute(
        proposals.update()
        .where(proposals.c.id == proposal_id, proposals.c.state == expected)
        .values(state=state, updated_at=now)
    ).rowcount
    if done != 1:  # the row lock makes this unreachable; fail closed if it is not
        raise Refusal(ErrorCode.E_STATE, "the proposal changed concurrently", 409)


def move(conn: Connection, proposal_id: str, state: str, now: int) -> None:
    """Put a locked proposal in ``state`` from whatever state it is in."""
    _MOVE.rowcount(conn, {"pid": proposal_id, "state": state, "updated_at": now})


def audit(conn: Connection, now: int, kind: str, **fields: Any) -> None:
    """Append one event to the audit chain in ``conn`` (takes the chain lock: step 4)."""
    AuditLog.append(conn, {"type": kind, **fields}, at=datetime.fromtimestamp(now, UTC))


def feed_entry(conn: Connection, kind: str, approval_id: str, now: int) -> None:
    """Give ``approval_id``'s issue or revocation the next feed seq (step 5).

    Raises:
        RuntimeError: the seq would pass 2**53 - 1, which no executor could ask after.
    """
    # The UPDATE locks the single counter row until commit: sequence numbers become
    # visible in the order they were taken, so a reader's cursor never skips one.
    # A seq is also at least the time in microseconds (FEED_SEQ_PER_SECOND): after
    # the database is restored from a backup, or reset, the counter restarts below
    # the seqs executors have already read past, and numbers taken from it alone
    # would be skipped by every executor's cursor without a word. Taken from the
    # clock they come after anything issued before the restore.
    seq = _FEED_NEXT.rows(conn, {"floor": now * FEED_SEQ_PER_SECOND})[0].seq
    if seq > FEED_SEQ_MAX:
        raise RuntimeError(f"feed seq {seq} is past 2**53 - 1; nothing is issued")
    _FEED_INSERT.rowcount(conn, {"seq": seq, "kind": kind, "approval_id": approval_id, "at": now})
    # Replicas on one PostgreSQL: wakes every process's long-polls, sent only on commit.
    wake.notify(conn)


def counted_votes(conn: Connection, proposal_id: str) -> list[tuple[str, int]]:
    """``(voter, at)`` of the votes that count toward quorum, oldest first: only those
    of people who are enabled *now* and whose role still allows approving. A vote of
    someone disabled (say, a compromised account) or demoted since stays on record but
    counts for nothing, and never appears among a statement's approvers."""
    rows = _COUNTED.rows(conn, {"id": proposal_id})
    return [(str(r.voter), int(r.at)) for r in rows]


def check_confirm(row: Any, asked: bool, typed: str | None) -> None:
    """Refuse a vote on ``row`` without its resource id (a tool call's target) typed,
    when ``asked`` (the policy's confirm): E_CONFIRM_REQUIRED, E_CONFIRM_MISMATCH."""
    if not asked:
        return
    what = "target" if row.action_type == TOOL_CALL_TYPE else "resource id"
    if not typed:
        raise Refusal(
            ErrorCode.E_CONFIRM_REQUIRED, f"type the {what} to confirm this high-risk action", 422
        )
    if not secrets.compare_digest(typed.encode(), row.resource_id.encode()):
        raise Refusal(
            ErrorCode.E_CONFIRM_MISMATCH, f"the typed {what} does not match the proposal's", 422
        )


def check_not_proposer(principal: Principal, row: Any) -> None:
    if principal.name in (row.proposed_by, row.submitted_by):
        raise Refusal(ErrorCode.E_SELF_APPROVAL, "you may not approve your own proposal", 403)


def deny_message(decision: Decision) -> str:
    return f"denied by policy rule {decision.rule}" + (
        f": {decision.reason}" if decision.reason else ""
    )
