"""A PostgreSQL backend that dies between the executor's transactions costs nothing.

The engine does not pre-ping (a round trip per checkout); a pooled connection whose
backend ended is found at checkout without one and replaced. Each test terminates the
executor's backends (``pg_terminate_backend``) at a point of the execute path and sees
the execution happen exactly once, with no error.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from airlock.store import make_engine
from services.executor import Failpoints, migrate
from services.executor.models import State, ledger

from .support import FakeClock, InMemoryCloud, make_executor, make_test_bundle

pytestmark = pytest.mark.postgres

_DEADLINE_S = 10.0


def _terminator(url: str) -> Callable[[], int]:
    """A function that ends every backend of ``url``'s database but its own caller's,
    waits until they are gone, and says how many it ended."""
    database = make_url(url).database
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)

    def terminate() -> int:
        with psycopg.connect(dsn, autocommit=True) as admin:
            pids = [
                row[0]
                for row in admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> "
                    "pg_backend_pid()",
                    (database,),
                )
            ]
            for pid in pids:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            # Polled with a deadline: a backend is gone once it left pg_stat_activity,
            # its socket closed behind its last message.
            deadline = time.monotonic() + _DEADLINE_S
            while admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)
            ).fetchone() != (0,):
                assert time.monotonic() < deadline, "terminated backends did not exit"
        return len(pids)

    return terminate


@pytest.mark.parametrize("point", ["before_consume", "after_cloud_call", "between"])
def test_a_backend_terminated_mid_run_leaves_every_execution_done_once(
    pg_url: str, point: str
) -> None:
    engine = make_engine(pg_url)
    migrate(engine)
    engine.dispose()
    terminate = _terminator(pg_url)
    ended: list[int] = []

    def at(hit: str) -> None:
        if hit == point:
            ended.append(terminate())

    cloud, clock = InMemoryCloud(), FakeClock()
    armed = frozenset({point} - {"between"})
    executor = make_executor(pg_url, cloud, clock, failpoints=Failpoints(armed, action=at))
    try:
        with executor.engine.connect():
            pass  # a pooled connection, for the first execution's point to end too
        bundles = [make_test_bundle(n, tag="fdead") for n in (1, 2, 3)]
        for b in bundles:
            cloud.add("ecs.instance", b.resource_id, "Running")
        outcomes = []
        for b in bundles:
            outcomes.append(executor.execute(b.raw))
            if point == "between":
                ended.append(terminate())
        assert [o.state for o in outcomes] == [State.SUCCEEDED] * 3
        assert [cloud.writes_for(b.resource_id) for b in bundles] == [1, 1, 1]
        assert ended and all(n >= 1 for n in ended)  # a pooled backend was there to end
        with executor.engine.connect() as conn:
            states = conn.execute(sa.select(ledger.c.state)).scalars().all()
        assert sorted(states) == ["succeeded"] * 3
    finally:
        executor.engine.dispose()
