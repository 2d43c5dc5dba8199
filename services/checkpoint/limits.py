"""Rate limits that hold across checkpoint replicas on one PostgreSQL database.

Two limits live in memory in a single checkpoint (SQLite): the sign-in throttle
(``throttle.py``) and each token's refusal budget (``refusals.py``). Replicas behind a
load balancer would each keep their own, and a guesser or a flood would get one budget
per replica. Here both are kept in the database instead:

* :class:`SharedSignInThrottle` keeps the failure counts and delays in
  ``sign_in_counts``: admitting an attempt locks its two rows (address, then pair: one
  order, no deadlock), checks both delays and counts the failure in one transaction
  (claim, then act, as in memory); a throttled attempt rolls back and writes nothing.
  What this process last learnt of a delay is kept, so a flood of throttled attempts
  costs no database work until the delay passes. In-progress places stay per process:
  each holds one of this process's worker threads.
* :class:`RefusalBudgets` keeps each token's budget in ``refusal_budgets``: a refusal
  takes one in a transaction of its own; the one that spends it notifies the replicas
  (``wake.LIMITS``), whose listeners copy the bucket into their memory, so the refusing
  gate (``_front.Front``) stays a dict lookup everywhere.

Times are the caller's ``now`` (sign-ins, whole seconds) or the injected wall clock
(budgets, fractional seconds): replicas share no monotonic clock. Names are keyed hashes
(``auth.name_key``), tokens their SHA-256: nothing here stores what a person typed.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine

from . import wake
from .models import refusal_budgets, sign_in_counts
from .throttle import (
    ADDRESS_FREE,
    FORGET_AFTER,
    IN_FLIGHT_PER_ADDRESS,
    PAIR_FREE,
    Admission,
    SignInThrottle,
    Throttled,
    delay_after,
)

__all__ = ["Budget", "RefusalBudgets", "SharedSignInThrottle"]

#: Delays this process remembers (to refuse a flood without the database).
_KNOWN_MAX: Final = 100_000


def _insert(conn: Connection, table: sa.Table) -> postgresql.Insert | sqlite.Insert:
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


class SharedSignInThrottle(SignInThrottle):
    """The sign-in throttle with its counts in the checkpoint's database. Thread-safe."""

    def __init__(self, engine: Engine, *, max_entries: int = _KNOWN_MAX) -> None:
        super().__init__(max_entries=max_entries)
        self._engine = engine
        #: key → no attempt before this time, as this process last read it.
        self._known: OrderedDict[str, int] = OrderedDict()
        self._known_max = max_entries

    @staticmethod
    def _keys(address: str, name_key: str) -> tuple[str, str]:
        return f"a|{address}", f"p|{address}|{name_key}"

    def admit(self, address: str, name_key: str, now: int) -> Admission:
        """Admit one attempt and count it as a failure in the database, or refuse it.

        Raises:
            Throttled: a delay of the address or of the pair has not passed (by any
                replica's count), or this process has IN_FLIGHT_PER_ADDRESS attempts
                from the address in progress.
        """
        keys = self._keys(address, name_key)
        with self._lock:
            wait = max(self._known.get(k, 0) for k in keys) - now
            if wait > 0:
                raise Throttled(wait)
            place = self._count(("address", address), now)
            if place.in_flight >= IN_FLIGHT_PER_ADDRESS:
                raise Throttled(1)
            place.in_flight += 1
        admission = Admission(address, name_key, 0)
        try:
            failures = self._claim(keys, now)
        except BaseException:
            self.done(admission)
            raise
        return Admission(address, name_key, failures)

    def _claim(self, keys: tuple[str, str], now: int) -> int:
        """Both counts in one transaction: the pair's failures with this attempt."""
        address_key, pair_key = keys
        with self._engine.begin() as conn:
            conn.execute(
                _insert(conn, sign_in_counts)
                .values([{"key": k, "failures": 0, "next_at": 0, "last_at": now} for k in keys])
                .on_conflict_do_nothing(index_elements=["key"])
            )
            rows = {
                r.key: r
                for r in conn.execute(
                    sa.select(sign_in_counts)
                    .where(sign_in_counts.c.key.in_(keys))
                    .order_by(sign_in_counts.c.key)  # one lock order for every replica
                    .with_for_update()
                )
            }
            counts = {}
            for key in keys:
                row = rows[key]
                stale = now - row.last_at >= FORGET_AFTER
                counts[key] = (0, 0) if stale else (row.failures, row.next_at)
            wait = max(next_at for _, next_at in counts.values()) - now
            if wait > 0:
                self._remember(keys, now + wait)
                raise Throttled(wait)  # rolls back: a throttled attempt writes nothing
            for key, free in ((address_key, ADDRESS_FREE), (pair_key, PAIR_FREE)):
                failures = counts[key][0] + 1
                conn.execute(
                    sign_in_counts.update()
                    .where(sign_in_counts.c.key == key)
                    .values(
                        failures=failures, last_at=now, next_at=now + delay_after(failures, free)
                    )
                )
        return counts[pair_key][0] + 1

    def _remember(self, keys: tuple[str, ...], until: int) -> None:
        with self._lock:
            for key in keys:
                self._known[key] = until
                self._known.move_to_end(key)
            while len(self._known) > self._known_max:
                self._known.popitem(last=False)

    def succeeded(self, admission: Admission) -> None:
        """The attempt was right: the pair's count is deleted and the address's failure
        undone (its delay stays, as in memory: ``SignInThrottle.succeeded``)."""
        address_key, pair_key = self._keys(admission.address, admission.name_key)
        with self._engine.begin() as conn:
            conn.execute(sign_in_counts.delete().where(sign_in_counts.c.key == pair_key))
            conn.execute(
                sign_in_counts.update()
                .where(sign_in_counts.c.key == address_key, sign_in_counts.c.failures > 0)
                .values(failures=sign_in_counts.c.failures - 1)
            )
        with self._lock:
            self._known.pop(pair_key, None)

    def retry_after(self, address: str, name_key: str, now: int) -> int:
        """Seconds until an attempt for ``name_key`` from ``address`` is admitted (0: now)."""
        with self._engine.connect() as conn:
            waits = conn.execute(
                sa.select(sign_in_counts.c.next_at).where(
                    sign_in_counts.c.key.in_(self._keys(address, name_key))
                )
            ).scalars()
            return int(max([0, *(w - now for w in waits)]))


@dataclass(frozen=True, slots=True)
class Budget:
    """A token's refusal budget as the database holds it."""

    token_key: str
    name: str
    kind: str
    role: str
    #: Refusals left at ``at`` (wall-clock seconds).
    tokens: float
    at: float


class RefusalBudgets:
    """Refusal budgets per token in the checkpoint's database (``refusals.py`` keeps the
    copy its gate reads). Thread-safe.

    Args:
        engine: the checkpoint's engine.
        burst: refusals a token may have in a row.
        per_second: refusals a token earns back each second.
        wall: the wall clock, seconds (the replicas' shared time).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        burst: int,
        per_second: float,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._engine = engine
        self.burst = burst
        self.per_second = per_second
        self.wall = wall
        self._lock = threading.Lock()

    def left(self, budget: Budget) -> float:
        """Refusals ``budget`` has left now."""
        earned = max(0.0, self.wall() - budget.at) * self.per_second
        return min(float(self.burst), budget.tokens + earned)

    def charge(self, token_key: str, name: str, kind: str, role: str) -> float:
        """Take one refusal from the token's budget (one transaction); returns what is
        left. The charge that leaves less than one notifies every replica (at commit)."""
        now = self.wall()
        with self._engine.begin() as conn:
            conn.execute(
                _insert(conn, refusal_budgets)
                .values(
                    token_key=token_key,
                    name=name,
                    kind=kind,
                    role=role,
                    tokens=float(self.burst),
                    at=now,
                )
                .on_conflict_do_nothing(index_elements=["token_key"])
            )
            row = conn.execute(
                sa.select(refusal_budgets)
                .where(refusal_budgets.c.token_key == token_key)
                .with_for_update()
            ).one()
            left = max(0.0, self.left(Budget(**row._mapping)) - 1.0)
            conn.execute(
                refusal_budgets.update()
                .where(refusal_budgets.c.token_key == token_key)
                .values(tokens=left, at=now)
            )
            if left < 1.0:
                wake.notify(conn, wake.LIMITS, token_key)
        return left

    def spent(self, token_key: str | None = None) -> list[Budget]:
        """The budgets with less than one refusal left now (only ``token_key``'s, if given)."""
        with self._engine.connect() as conn:
            query = sa.select(refusal_budgets)
            if token_key is not None:
                query = query.where(refusal_budgets.c.token_key == token_key)
            budgets = [Budget(**r._mapping) for r in conn.execute(query)]
        return [b for b in budgets if self.left(b) < 1.0]

    def forget_full(self) -> int:
        """Delete the budgets that have earned everything back; returns how many."""
        full_since = self.wall() - self.burst / self.per_second
        with self._engine.begin() as conn:
            return int(
                conn.execute(
                    refusal_budgets.delete().where(refusal_budgets.c.at <= full_since)
                ).rowcount
            )
