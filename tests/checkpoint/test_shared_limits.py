"""The rate limits replicas share (services/checkpoint/limits.py): the sign-in throttle's
claim holds across processes, a flood of throttled attempts costs no database work, and
refusal budgets are charged, read and forgotten in the database."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from airlock.store import make_engine, upgrade
from services.checkpoint.app import MIGRATIONS
from services.checkpoint.limits import RefusalBudgets, SharedSignInThrottle
from services.checkpoint.throttle import PAIR_FREE, Throttled

NOW = 1_764_400_000
GUESSER = "10.9.0.1"
NAME = "hmac:" + "a" * 32


@pytest.fixture
def engines(db_url: str) -> Iterator[tuple[sa.Engine, sa.Engine]]:
    """Two engines on one database, as two replicas hold."""
    first, second = make_engine(db_url), make_engine(db_url)
    upgrade(first, MIGRATIONS)
    try:
        yield first, second
    finally:
        first.dispose()
        second.dispose()


def test_racing_guesses_on_two_replicas_are_admitted_only_as_in_one(
    engines: tuple[sa.Engine, sa.Engine],
) -> None:
    throttles = [SharedSignInThrottle(e) for e in engines]
    start = threading.Barrier(4)
    admitted: list[int] = []
    refused: list[int] = []
    lock = threading.Lock()

    def guess(throttle: SharedSignInThrottle) -> None:
        start.wait()
        try:
            throttle.admit(GUESSER, NAME, NOW)
        except Throttled as exc:
            with lock:
                refused.append(exc.retry_after)
            return
        with lock:
            admitted.append(1)

    # Two at once per replica (its in-progress places), four in all, at one instant.
    threads = [threading.Thread(target=guess, args=(t,)) for t in throttles for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30.0)
    # The third failure starts the pair's delay: one process or two, a fourth waits.
    assert len(admitted) == PAIR_FREE
    assert refused == [1]


def test_a_flood_of_throttled_guesses_does_not_reach_the_database(
    engines: tuple[sa.Engine, sa.Engine],
) -> None:
    engine = engines[0]
    throttle = SharedSignInThrottle(engine)
    for _ in range(PAIR_FREE):
        throttle.done(throttle.admit(GUESSER, NAME, NOW))
    statements: list[str] = []

    def seen(*args: object) -> None:
        statements.append(str(args[2]))

    with pytest.raises(Throttled):  # learnt from the database once
        throttle.admit(GUESSER, NAME, NOW)
    sa.event.listen(engine, "before_cursor_execute", seen)
    try:
        for _ in range(100):
            with pytest.raises(Throttled):
                throttle.admit(GUESSER, NAME, NOW)
    finally:
        sa.event.remove(engine, "before_cursor_execute", seen)
    assert statements == []
    # Another replica learns it from the database.
    with pytest.raises(Throttled):
        SharedSignInThrottle(engines[1]).admit(GUESSER, NAME, NOW)
    assert throttle.retry_after(GUESSER, NAME, NOW) == 1
    assert throttle.retry_after(GUESSER, NAME, NOW + 1) == 0


def test_a_right_password_clears_the_pair_on_every_replica(
    engines: tuple[sa.Engine, sa.Engine],
) -> None:
    first, second = (SharedSignInThrottle(e) for e in engines)
    for _ in range(PAIR_FREE - 1):
        first.done(first.admit(GUESSER, NAME, NOW))
    admission = second.admit(GUESSER, NAME, NOW)
    assert admission.pair_failures == PAIR_FREE
    second.succeeded(admission)
    second.done(admission)
    # The pair starts over: its next failures are free again, on either replica.
    assert first.admit(GUESSER, NAME, NOW).pair_failures == 1


def test_budgets_are_charged_read_and_forgotten_in_the_database(
    engines: tuple[sa.Engine, sa.Engine],
) -> None:
    t = [float(NOW)]
    budgets = [RefusalBudgets(e, burst=3, per_second=1.0, wall=lambda: t[0]) for e in engines]
    assert budgets[0].charge("k" * 64, "viewer", "user", "viewer") == 2.0
    assert budgets[1].charge("k" * 64, "viewer", "user", "viewer") == 1.0
    assert budgets[1].spent() == []
    assert budgets[0].charge("k" * 64, "viewer", "user", "viewer") == 0.0
    (spent,) = budgets[1].spent("k" * 64)
    assert (spent.name, spent.kind, spent.role) == ("viewer", "user", "viewer")
    t[0] += 1.5  # earns back 1.5: not spent any more, not full either
    assert budgets[1].spent() == []
    assert budgets[0].forget_full() == 0
    t[0] += 1.5
    assert budgets[0].forget_full() == 1
