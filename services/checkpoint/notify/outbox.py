"""The notification outbox: events written with the state change, deliveries claimed,
sent and settled (docs/notifications.md).

:func:`record` runs inside the caller's transaction, after the proposal row is locked
and the state moved (``_tx``'s order; it takes no lock the chain or the feed holds), so
an event exists exactly when its state change committed. :class:`Outbox` is the delivery
worker's and the CLI's view: a delivery is claimed by a conditional update of
``next_at`` (claim, then act), so two workers never send one delivery at once, and one
that died mid-send leaves it to be sent again when the claim runs out: at least once,
with the same event id.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from airlock.ledger import insert_ignore
from airlock.store import Prepared
from services.checkpoint.models import notify_deliveries, notify_events, proposals, votes

from .config import NotifyConfig
from .events import build_body
from .people import targets

__all__ = ["WAKE", "Delivery", "Outbox", "OutboxStats", "record"]

#: The mark :func:`record` leaves on a connection: back in the pool, it wakes the worker.
WAKE = "airlock.notify.wake"

#: Characters of a receiver's error kept on a delivery.
_ERROR_MAX = 300


def _bound(table: sa.Table, *columns: str) -> dict[str, sa.BindParameter[Any]]:
    return {c: sa.bindparam(c, type_=table.c[c].type) for c in columns}


_EVENT_COLUMNS: Final = ("id", "kind", "proposal_id", "body", "created_at", "step")
#: The event INSERTs by dialect, built once and run on the driver's cursor: an approval
#: writes one event (and a delivery per channel) in its own transaction.
_EVENT_INSERTS: dict[str, Prepared] = {}
_INSERT_DELIVERY: Final = Prepared(
    notify_deliveries.insert().values(
        _bound(
            notify_deliveries, "event_id", "channel", "state", "attempts", "next_at", "created_at"
        )
    )
)


def _insert_event(conn: Connection) -> Prepared:
    """``INSERT … ON CONFLICT DO NOTHING RETURNING id`` into ``notify_events``."""
    statement = _EVENT_INSERTS.get(conn.dialect.name)
    if statement is None:
        # RETURNING, not rowcount: psycopg reports -1 for an INSERT … ON CONFLICT.
        statement = Prepared(
            insert_ignore(conn, notify_events)
            .values(_bound(notify_events, *_EVENT_COLUMNS))
            .returning(notify_events.c.id)
        )
        _EVENT_INSERTS[conn.dialect.name] = statement
    return statement


def record(
    conn: Connection,
    notify: NotifyConfig,
    proposal_id: str,
    kind: str,
    now: int,
    *,
    voters: Sequence[str] | None = None,
    row: Any = None,
    step: int = 0,
) -> None:
    """Write the ``kind`` event of ``proposal_id`` and a delivery per channel that wants
        it, in ``conn`` (the state change's transaction, the proposal row locked, its state
        moved). ``voters`` (the people who approved it) and ``row`` (the proposal's row, as
    the change left it) save a read when the caller has them at hand.

        Once per (proposal, kind, ``step``): a second call writes nothing (an INSERT that
        does nothing on the UNIQUE key, so it can never abort the state change's
        transaction). Who gets it is :func:`.people.targets`'s; no one: nothing.
    """
    if not notify.active:
        return
    channels, asked = targets(conn, notify, proposal_id, kind)
    if not channels:
        return
    if row is None:
        row = conn.execute(sa.select(proposals).where(proposals.c.id == proposal_id)).one()
    if voters is None:
        voters = [
            str(v)
            for v in conn.execute(
                sa.select(votes.c.voter)
                .where(votes.c.proposal_id == proposal_id)
                .order_by(votes.c.at, votes.c.id)
            ).scalars()
        ]
    event_id = "msg_" + secrets.token_hex(16)
    body = build_body(
        row,
        kind=kind,
        event_id=event_id,
        voters=voters,
        now=now,
        proposal_url=notify.proposal_url,
        groups=asked,
    )
    written = _insert_event(conn).first(
        conn,
        {
            "id": event_id,
            "kind": kind,
            "proposal_id": proposal_id,
            "body": json.dumps(body, sort_keys=True, separators=(",", ":")),
            "created_at": now,
            "step": step,
        },
    )
    if written is None:
        return  # told already
    for name in channels:
        _INSERT_DELIVERY.rowcount(
            conn,
            {
                "event_id": event_id,
                "channel": name,
                "state": "pending",
                "attempts": 0,
                "next_at": now,
                "created_at": now,
            },
        )
    conn.info[WAKE] = True


@dataclass(frozen=True, slots=True)
class Delivery:
    """One delivery as the outbox holds it, with its event."""

    id: int
    event_id: str
    channel: str
    state: str
    attempts: int
    next_at: int
    last_error: str | None
    created_at: int
    kind: str
    proposal_id: str
    body: str

    def value(self) -> dict[str, Any]:
        """What ``airlock notify outbox --json`` shows (not the body)."""
        return {
            "id": self.id,
            "event_id": self.event_id,
            "channel": self.channel,
            "state": self.state,
            "kind": self.kind,
            "proposal_id": self.proposal_id,
            "attempts": self.attempts,
            "next_at": self.next_at,
            "last_error": self.last_error,
            "created_at": self.created_at,
        }


@dataclass(frozen=True, slots=True)
class OutboxStats:
    pending: int
    dead: int
    #: Seconds the oldest pending delivery has waited (0 when none waits).
    oldest_age: int


_COLUMNS = (
    notify_deliveries.c.id,
    notify_deliveries.c.event_id,
    notify_deliveries.c.channel,
    notify_deliveries.c.state,
    notify_deliveries.c.attempts,
    notify_deliveries.c.next_at,
    notify_deliveries.c.last_error,
    notify_deliveries.c.created_at,
    notify_events.c.kind,
    notify_events.c.proposal_id,
    notify_events.c.body,
)
_PENDING = notify_deliveries.c.state == "pending"
_JOINED = notify_deliveries.join(notify_events, notify_events.c.id == notify_deliveries.c.event_id)


class Outbox:
    """The deliveries in one database, on the clock ``now`` (Unix seconds)."""

    def __init__(self, engine: Engine, now: Callable[[], int]) -> None:
        self.engine = engine
        self.now = now

    def due(self, limit: int, skip: Sequence[str] = ()) -> list[Delivery]:
        """Pending deliveries whose time has come, oldest first, none of ``skip``'s channels."""
        query = (
            sa.select(*_COLUMNS)
            .select_from(_JOINED)
            .where(notify_deliveries.c.state == "pending")
            .where(notify_deliveries.c.next_at <= self.now())
            .order_by(notify_deliveries.c.next_at, notify_deliveries.c.id)
            .limit(limit)
        )
        if skip:
            query = query.where(notify_deliveries.c.channel.not_in(list(skip)))
        with self.engine.connect() as conn:
            return [Delivery(*r) for r in conn.execute(query).all()]

    def claim(self, deliveries: Sequence[Delivery], hold: int) -> list[Delivery]:
        """Take ``deliveries`` for ``hold`` seconds, in one transaction; the ones another
        worker took first are left out of what is returned."""
        taken: list[Delivery] = []
        until = self.now() + hold
        with self.engine.begin() as conn:
            for delivery in deliveries:
                done = conn.execute(
                    notify_deliveries.update()
                    .where(
                        notify_deliveries.c.id == delivery.id,
                        _PENDING,
                        notify_deliveries.c.next_at == delivery.next_at,
                    )
                    .values(next_at=until, attempts=notify_deliveries.c.attempts + 1)
                ).rowcount
                if done == 1:
                    taken.append(delivery)
        return taken

    def settle(
        self, results: Sequence[tuple[Delivery, str | None]], config: NotifyConfig
    ) -> list[Delivery]:
        """Record what each try came to, in one transaction: ``None`` delivered; an
        error retried after the next delay, or dead once the retry window (from the
        delivery's start) is over. Returns the deliveries now dead."""
        now = self.now()
        dead: list[Delivery] = []
        with self.engine.begin() as conn:
            for delivery, error in results:
                mine = (notify_deliveries.c.id == delivery.id, _PENDING)
                if error is None:
                    conn.execute(
                        notify_deliveries.update()
                        .where(*mine)
                        .values(state="delivered", delivered_at=now, last_error=None)
                    )
                    continue
                # ``attempts`` is the count before this try's claim added one.
                delays = config.retry_delays
                delay = delays[min(delivery.attempts, len(delays) - 1)]
                over = now + delay - delivery.created_at > config.retry_for
                conn.execute(
                    notify_deliveries.update()
                    .where(*mine)
                    .values(
                        state="dead" if over else "pending",
                        next_at=now if over else now + delay,
                        last_error=error[:_ERROR_MAX],
                    )
                )
                if over:
                    dead.append(delivery)
        return dead

    def kill(self, delivery_id: int, error: str) -> None:
        """Mark a delivery dead at once (its channel is no longer configured)."""
        with self.engine.begin() as conn:
            conn.execute(
                notify_deliveries.update()
                .where(
                    notify_deliveries.c.id == delivery_id, notify_deliveries.c.state == "pending"
                )
                .values(state="dead", last_error=error[:_ERROR_MAX])
            )

    def resend(self, delivery_id: int) -> bool:
        """Put a dead delivery back, due now, with a new retry window. False if it is
        not dead (or not there)."""
        now = self.now()
        with self.engine.begin() as conn:
            done = conn.execute(
                notify_deliveries.update()
                .where(notify_deliveries.c.id == delivery_id, notify_deliveries.c.state == "dead")
                .values(state="pending", next_at=now, attempts=0, created_at=now)
            ).rowcount
        return done == 1

    def listing(self, states: Sequence[str], limit: int = 200) -> list[Delivery]:
        """Deliveries in ``states``, oldest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(*_COLUMNS)
                .select_from(_JOINED)
                .where(notify_deliveries.c.state.in_(list(states)))
                .order_by(notify_deliveries.c.id)
                .limit(limit)
            ).all()
        return [Delivery(*r) for r in rows]

    def stats(self) -> OutboxStats:
        with self.engine.connect() as conn:
            counts: dict[str, int] = dict(
                conn.execute(
                    sa.select(notify_deliveries.c.state, sa.func.count())
                    .where(notify_deliveries.c.state.in_(["pending", "dead"]))
                    .group_by(notify_deliveries.c.state)
                ).all()
            )
            oldest = conn.execute(
                sa.select(sa.func.min(notify_events.c.created_at))
                .select_from(_JOINED)
                .where(notify_deliveries.c.state == "pending")
            ).scalar()
        age = 0 if oldest is None else max(0, self.now() - int(oldest))
        return OutboxStats(int(counts.get("pending", 0)), int(counts.get("dead", 0)), age)
