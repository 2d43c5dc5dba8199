"""Ledger operations: consume once, move state under a lease, take expired leases over.

Every function runs inside the caller's open transaction and commits nothing. Claim,
then act (STYLE 6): consuming is a single INSERT whose UNIQUE columns decide a race, and
every later step is an UPDATE conditional on (approval_id, state, owner, epoch) — a
worker whose lease was taken over (epoch bumped) matches zero rows and must stop
(:class:`~airlock.ledger.errors.Fenced`). Nothing here ever checks and then acts.

This module must never delete a ledger row, change a terminal row, or write anywhere
but the ledger's own tables. Not public: use :mod:`airlock.ledger`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from airlock.protocol import RefusalCode
from airlock.store import Prepared

from .errors import Fenced
from .models import (
    ACTIVE_STATES,
    LedgerRow,
    State,
    ledger,
    ledger_holds,
    outbox,
    refusals,
    resolutions,
    revocations,
)

__all__ = [
    "begin_executing",
    "consume",
    "expired",
    "forgotten_before",
    "get",
    "held_until",
    "insert_ignore",
    "insert_refusal",
    "insert_resolution",
    "of_proposal",
    "queue_receipt",
    "refusal_to_report",
    "release",
    "reportable_refusal",
    "take_over",
    "transition",
    "why_not_consumed",
]

# Which state may follow which (docs/protocol.md#ledger); the database triggers enforce the same.
_NEXT: Mapping[State, frozenset[State]] = {
    State.CLAIMED: frozenset({State.EXECUTING, State.REFUSED}),
    State.EXECUTING: frozenset({State.SUCCEEDED, State.FAILED, State.IN_DOUBT}),
}


def insert_ignore(conn: Connection, table: sa.Table) -> Any:
    """An INSERT into ``table`` that does nothing on a conflict with any UNIQUE key."""
    # ON CONFLICT DO NOTHING with no target covers every UNIQUE constraint at once
    # (nonce, approval_id, action_hash); PostgreSQL waits for a racing inserter to commit
    # or roll back before deciding, so exactly one of the racers inserts.
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing()
    if conn.dialect.name == "sqlite":
        return sqlite.insert(table).on_conflict_do_nothing()
    raise RuntimeError(f"unsupported dialect {conn.dialect.name!r}")


#: The parameter of the consume statement that is not a column: the time a hold is
#: judged at (``consume``'s ``now``).
_HOLD_NOW: Final = "consume_hold_now"
#: The states a ledger row may be born in: ``claimed`` (the gate, and the executor when
#: the live state could not be read), and ``executing`` or ``refused`` (the executor's
#: consume after its live re-read: docs/protocol.md#ledger).
_BORN: Final = frozenset({State.CLAIMED, State.EXECUTING, State.REFUSED})


#: Every column of a ledger row: a row given to :func:`consume` names each.
_COLUMNS: Final = frozenset(c.name for c in ledger.c)


@functools.cache
def _consume_statement(dialect: str, born_executing: bool) -> Prepared:
    # One statement per dialect with the row as parameters, compiled once and run on the
    # driver's cursor (the execute path's hottest statement).
    # INSERT … SELECT rather than VALUES, so that the row comes with the hold check: no
    # row while a hold is in force, in the same statement (one round trip, not two).
    # A row born executing also demands, at that instant, an unexpired approval and no
    # revocation recorded: the commitment to write and both checks are one statement.
    if dialect not in ("postgresql", "sqlite"):
        raise RuntimeError(f"unsupported dialect {dialect!r}")
    now = sa.bindparam(_HOLD_NOW, type_=sa.BigInteger)
    conditions = [~sa.exists().where(ledger_holds.c.until > now)]
    if born_executing:
        approval_id = sa.bindparam("approval_id", type_=ledger.c.approval_id.type)
        conditions.append(sa.bindparam("expires_at", type_=sa.BigInteger) > now)
        conditions.append(~sa.exists().where(revocations.c.approval_id == approval_id))
    row = sa.select(*(sa.bindparam(c.name, type_=c.type) for c in ledger.c)).where(*conditions)
    if dialect == "sqlite":
        # SQLite's rowcount is sqlite3_changes(): the rows this INSERT inserted, exact
        # (a row a trigger skips is not counted), so no RETURNING and the ephemeral table
        # SQLite builds for it.
        return Prepared(
            sqlite.insert(ledger).from_select(list(ledger.c), row).on_conflict_do_nothing()
        )
    return Prepared(
        postgresql.insert(ledger)
        .from_select(list(ledger.c), row)
        .on_conflict_do_nothing()
        .returning(ledger.c.approval_id)
    )


def consume(conn: Connection, row: Mapping[str, Any], *, now: int) -> bool:
    """(13) Insert the ledger row, unless a ledger hold is in force at ``now``; False if
    nothing was inserted: a UNIQUE key is taken, or a hold is in force (ask
    :func:`why_not_consumed`, under the same chain lock, before acting).

    A row is born ``claimed`` (then moved to ``executing`` by :func:`begin_executing`),
    or, by the executor after its live re-read, straight into ``executing`` or
    ``refused``. A row born ``executing`` is inserted only while its approval is
    unexpired at ``now`` and no revocation of it is recorded, in the same statement.
    """
    state = State(row["state"])
    if state not in _BORN:
        raise ValueError(f"a ledger row is not born {state}")
    if row.keys() != _COLUMNS:
        raise ValueError("a ledger row names every column")
    statement = _consume_statement(conn.dialect.name, state is State.EXECUTING)
    params = {**row, _HOLD_NOW: now}
    if conn.dialect.name == "sqlite":
        return statement.rowcount(conn, params) == 1
    # RETURNING, not rowcount: psycopg reports -1 for INSERT … ON CONFLICT DO NOTHING.
    return statement.first(conn, params) is not None


def why_not_consumed(
    conn: Connection, row: Mapping[str, Any], *, now: int
) -> Literal["held", "taken", "revoked", "expired"]:
    """Why :func:`consume` inserted nothing for ``row`` at ``now``, asked in the same
    transaction under the chain lock: a hold in force, a UNIQUE key (approval id, nonce
    or action hash) taken, or, for a row born ``executing``, a revocation recorded or
    the approval expired. Raises RuntimeError when none of them holds (fail closed)."""
    until = held_until(conn)
    if until is not None and now < until:
        return "held"
    taken = conn.execute(
        sa.select(ledger.c.approval_id)
        .where(
            (ledger.c.approval_id == row["approval_id"])
            | (ledger.c.nonce == row["nonce"])
            | (ledger.c.action_hash == row["action_hash"])
        )
        .limit(1)
    ).first()
    if taken is not None:
        return "taken"
    if row["state"] == State.EXECUTING.value:
        if revoked(conn, row["approval_id"]):
            return "revoked"
        if row["expires_at"] <= now:
            return "expired"
    raise RuntimeError(f"the consume of {row['approval_id']} inserted nothing, for no reason known")


def revoked(conn: Connection, approval_id: str) -> bool:
    """Is a revocation of ``approval_id`` recorded (``executor_revocations``)? Ask under
    the chain lock that revocations are recorded under, in the transaction that acts."""
    found = conn.execute(
        sa.select(revocations.c.approval_id).where(revocations.c.approval_id == approval_id)
    ).first()
    return found is not None


# Asked by the feed on every page with an approval: compiled once (see _consume_statement).
_HELD_UNTIL: Final = Prepared(sa.select(sa.func.max(ledger_holds.c.until).label("until")))


def held_until(conn: Connection) -> int | None:
    """The end of the latest ledger hold recorded (``executor_ledger_holds``), or None,
    in ``conn``'s open transaction. A hold is in force while ``now`` is before it."""
    found = _HELD_UNTIL.first(conn, {})
    return None if found is None or found[0] is None else int(found[0])


_FORGOTTEN_BEFORE: Final = sa.select(sa.func.max(ledger_holds.c.since))


def forgotten_before(conn: Connection) -> int | None:
    """The latest ``since`` of a ledger hold recorded, or None if there never was one.

    A hold is this ledger's own evidence that it went back (restored from a backup, or
    replaced) and lost the rows of approvals consumed before the hold was recorded;
    which ones, nothing here knows. So a ledger that has none of an approval's rows
    can say it never used that approval only if it could not have been consumed before
    this time. A hold that has ended still says so: it ends the feed's wait, not the gap.
    """
    since = conn.execute(_FORGOTTEN_BEFORE).scalar()
    return None if since is None else int(since)


def get(conn: Connection, approval_id: str) -> LedgerRow | None:
    found = (
        conn.execute(sa.select(ledger).where(ledger.c.approval_id == approval_id))
        .mappings()
        .one_or_none()
    )
    return None if found is None else LedgerRow.from_mapping(found)


def of_proposal(conn: Connection, proposal_id: str) -> list[LedgerRow]:
    """The rows of the approvals issued for ``proposal_id`` (one per checkpoint that
    issued one; an operator's lookup, not on the write path)."""
    found = conn.execute(
        sa.select(ledger).where(ledger.c.proposal_id == proposal_id).order_by(ledger.c.approval_id)
    ).mappings()
    return [LedgerRow.from_mapping(row) for row in found]


#: The outbox kind of an outcome's receipt (:func:`transition` with ``queue``).
_OUTCOME: Final = "outcome"


@functools.cache
def _transition_statement(
    dialect: str, live_lease: bool, columns: tuple[str, ...], queue: bool
) -> Prepared:
    # Built once per shape, values as parameters (see _consume_statement).
    where = [
        ledger.c.approval_id == sa.bindparam("w_approval_id"),
        ledger.c.state == sa.bindparam("w_state"),
        ledger.c.lease_owner == sa.bindparam("w_owner"),
        ledger.c.lease_epoch == sa.bindparam("w_epoch"),
    ]
    if live_lease:
        where.append(ledger.c.lease_expires > sa.bindparam("w_now"))
    update = (
        sa.update(ledger)
        .where(*where)
        .values({column: sa.bindparam(f"v_{column}") for column in columns})
    )
    if not queue or dialect != "postgresql":
        return Prepared(update)
    # The move and the receipt's place in the outbox in one statement (one round trip,
    # one snapshot): the row is queued only if it moved, and the count says whether it did.
    moved = update.returning(ledger.c.approval_id).cte("moved")
    queued = (
        postgresql.insert(outbox)
        .from_select(
            [outbox.c.kind, outbox.c.approval_id, outbox.c.queued_at],
            sa.select(
                sa.literal_column(f"'{_OUTCOME}'", outbox.c.kind.type),
                moved.c.approval_id,
                sa.bindparam("v_updated_at", type_=outbox.c.queued_at.type),
            ),
        )
        .on_conflict_do_nothing()
        .cte("queued")
    )
    return Prepared(sa.select(sa.func.count().label("moved")).select_from(moved).add_cte(queued))


def transition(
    conn: Connection,
    *,
    approval_id: str,
    owner: str,
    epoch: int,
    from_state: State,
    to_state: State,
    now: int,
    lease_expires: int | None = None,
    require_live_lease: bool = False,
    queue: bool = False,
    **values: Any,
) -> None:
    """Move one row ``from_state`` → ``to_state`` if this owner still holds it, or raise
    :class:`Fenced`. ``require_live_lease`` also demands the lease has not expired, for
    the step that commits to calling the cloud. ``queue`` also queues the row's outcome
    receipt for the outbox once it moved (:func:`queue_receipt`, at ``now``): on
    PostgreSQL in the same statement."""
    if to_state not in _NEXT.get(from_state, frozenset()):
        raise ValueError(f"no transition {from_state} -> {to_state}")
    updates: dict[str, Any] = {"state": to_state.value, "updated_at": now, **values}
    if lease_expires is not None:
        updates["lease_expires"] = lease_expires
    params = {f"v_{k}": v for k, v in updates.items()}
    params.update(w_approval_id=approval_id, w_state=from_state.value, w_owner=owner)
    params.update(w_epoch=epoch, w_now=now)
    dialect = conn.dialect.name
    statement = _transition_statement(dialect, require_live_lease, tuple(sorted(updates)), queue)
    if queue and dialect == "postgresql":
        found = statement.first(conn, params)
        moved = 0 if found is None else int(found[0])
    else:
        moved = statement.rowcount(conn, params)
    if moved != 1:
        raise Fenced(approval_id, f"{from_state}->{to_state} (epoch {epoch})")
    if queue and dialect != "postgresql":
        queue_receipt(conn, kind=_OUTCOME, approval_id=approval_id, now=now)


_BEGIN_EXECUTING: Final = (
    sa.update(ledger)
    .where(
        ledger.c.approval_id == sa.bindparam("w_approval_id"),
        ledger.c.state == State.CLAIMED.value,
        ledger.c.lease_owner == sa.bindparam("w_owner"),
        ledger.c.lease_epoch == sa.bindparam("w_epoch"),
        ledger.c.lease_expires > sa.bindparam("w_now"),
        ledger.c.expires_at > sa.bindparam("w_now"),
        ~sa.exists().where(revocations.c.approval_id == ledger.c.approval_id),
    )
    .values(
        state=State.EXECUTING.value,
        updated_at=sa.bindparam("v_now"),
        lease_expires=sa.bindparam("v_lease_expires"),
    )
)


def begin_executing(
    conn: Connection, *, approval_id: str, owner: str, epoch: int, now: int, lease_expires: int
) -> RefusalCode | None:
    """(15) ``claimed`` → ``executing``, the commitment to call the cloud.

    One conditional UPDATE that also demands, at that instant, an unexpired approval
    and no revocation recorded in ``executor_revocations`` — so neither can slip in
    between the checks before the live re-read and this commit. Returns None when the
    row moved; ``E_EXPIRED`` or ``E_REVOKED`` when the row is still ours but the
    approval no longer allows the write (the caller records the refusal); raises
    :class:`Fenced` when the row is not ours any more.
    """
    result = conn.execute(
        _BEGIN_EXECUTING,
        {
            "w_approval_id": approval_id,
            "w_owner": owner,
            "w_epoch": epoch,
            "w_now": now,
            "v_now": now,
            "v_lease_expires": lease_expires,
        },
    )
    if result.rowcount == 1:
        return None
    row = get(conn, approval_id)
    ours = (
        row is not None
        and row.state is State.CLAIMED
        and (row.lease_owner, row.lease_epoch) == (owner, epoch)
        and row.lease_expires > now
    )
    if row is None or not ours:
        raise Fenced(approval_id, f"claimed->executing (epoch {epoch})")
    if row.expires_at <= now:
        return RefusalCode.E_EXPIRED
    revoked = conn.execute(
        sa.select(revocations.c.approval_id).where(revocations.c.approval_id == approval_id)
    ).first()
    if revoked is not None:
        return RefusalCode.E_REVOKED
    raise Fenced(approval_id, f"claimed->executing matched no row (epoch {epoch})")


def expired(conn: Connection, now: int, limit: int = 100) -> Sequence[LedgerRow]:
    """Active rows whose lease has expired: candidates for recovery."""
    rows = (
        conn.execute(
            sa.select(ledger)
            .where(
                ledger.c.state.in_([s.value for s in ACTIVE_STATES]),
                ledger.c.lease_expires <= now,
            )
            .order_by(ledger.c.lease_expires, ledger.c.approval_id)
            .limit(limit)
        )
        .mappings()
        .all()
    )
    return [LedgerRow.from_mapping(r) for r in rows]


def take_over(
    conn: Connection, row: LedgerRow, *, owner: str, now: int, lease_expires: int
) -> bool:
    """Bump the epoch and take the lease if it is still the expired one we saw.

    Once this commits, the previous owner's conditional updates match zero rows.
    """
    result = conn.execute(
        sa.update(ledger)
        .where(
            ledger.c.approval_id == row.approval_id,
            ledger.c.state == row.state.value,
            ledger.c.lease_epoch == row.lease_epoch,
            ledger.c.lease_expires <= now,
        )
        .values(
            lease_owner=owner,
            lease_epoch=row.lease_epoch + 1,
            lease_expires=lease_expires,
            updated_at=now,
        )
    )
    return result.rowcount == 1


def release(conn: Connection, *, approval_id: str, owner: str, epoch: int, now: int) -> bool:
    """End this owner's lease on its ``claimed`` row now, so that the next recovery pass
    continues the row instead of the lease's end. False if the owner no longer holds it.

    Only a ``claimed`` row: no write was attempted, and recovery re-checks everything
    before it continues one. An ``executing`` row keeps its lease: its owner's call may
    still be in flight.
    """
    result = conn.execute(
        sa.update(ledger)
        .where(
            ledger.c.approval_id == approval_id,
            ledger.c.state == State.CLAIMED.value,
            ledger.c.lease_owner == owner,
            ledger.c.lease_epoch == epoch,
            ledger.c.lease_expires > now,
        )
        .values(lease_expires=now, updated_at=now)
    )
    return result.rowcount == 1


def insert_refusal(conn: Connection, values: Mapping[str, Any]) -> None:
    conn.execute(sa.insert(refusals).values(**values))


def reportable_refusal(approval_id: sa.ColumnElement[str]) -> sa.ScalarSelect[int]:
    """The id of the refusal of ``approval_id`` whose receipt the outbox delivers: its
    first that is not a replay. Only an approval whose refusal was queued (see
    :func:`refusal_to_report`) has one to deliver; that refusal is this one."""
    first = refusals.alias("first_refusal")  # never correlated with an outer refusals
    return (
        sa.select(sa.func.min(first.c.id))
        .where(first.c.approval_id == approval_id, first.c.code != "E_REPLAY")
        .correlate_except(first)
        .scalar_subquery()
    )


def refusal_to_report(conn: Connection, approval_id: str) -> bool:
    """Is a refusal of ``approval_id`` made now, before it is recorded, the one the
    checkpoint is told of? Only if this ledger never consumed the approval and no
    refusal of it (but a replay) is recorded yet. Run under the chain lock, as every
    refusal is recorded and every consume made, so neither can change meanwhile.

    An approval consumed here (and perhaps written) is refused ``E_EXPIRED`` rather than
    ``E_REPLAY`` when it is presented again after it expired, since steps 6–8 come before
    the consume (13), as a feed redelivers it after a crash or a ledger hold: that says
    nothing about the approval not being used, and is never reported. Nor is one that
    this ledger may have used and forgotten (:func:`forgotten_before`): the caller asks
    that too, knowing the approval's times."""
    consumed = conn.execute(
        sa.select(ledger.c.approval_id).where(ledger.c.approval_id == approval_id)
    ).first()
    if consumed is not None:
        return False
    found = conn.execute(
        sa.select(refusals.c.id)
        .where(refusals.c.approval_id == approval_id, refusals.c.code != "E_REPLAY")
        .limit(1)
    ).first()
    return found is None


@functools.cache
def _queue_statement(dialect: str) -> Prepared:
    # Built once per dialect, values as parameters (see _consume_statement).
    insert: postgresql.Insert | sqlite.Insert
    if dialect == "postgresql":
        insert = postgresql.insert(outbox)
    elif dialect == "sqlite":
        insert = sqlite.insert(outbox)
    else:
        raise RuntimeError(f"unsupported dialect {dialect!r}")
    return Prepared(
        insert.values(
            kind=sa.bindparam("kind", type_=outbox.c.kind.type),
            approval_id=sa.bindparam("approval_id", type_=outbox.c.approval_id.type),
            queued_at=sa.bindparam("queued_at", type_=outbox.c.queued_at.type),
        ).on_conflict_do_nothing()
    )


def queue_receipt(conn: Connection, *, kind: str, approval_id: str, now: int) -> None:
    """Queue a receipt for the outbox, in the transaction that commits the receipt."""
    _queue_statement(conn.dialect.name).rowcount(
        conn, {"kind": kind, "approval_id": approval_id, "queued_at": now}
    )


def insert_resolution(conn: Connection, values: Mapping[str, Any]) -> bool:
    """Record a human decision; False if the row was already resolved."""
    inserted = conn.execute(
        insert_ignore(conn, resolutions).values(**values).returning(resolutions.c.approval_id)
    ).first()
    return inserted is not None
