"""The sweeper racing a revoke, a withdrawal or an outcome report on PostgreSQL.

Each of those locks its proposal's row, then takes the audit chain lock (its first
append). A sweeper that expires one proposal (an append: the chain lock) and then waits
for the row of another that one of them holds waits for it while it waits for the
chain: a deadlock, which PostgreSQL breaks by failing one of the two. SQLite takes one
writer at a time, so no lock order can go wrong there; this runs on PostgreSQL only.

Real threads, each with its own connection. No sleep stands in for an ordering: the
racer stops holding its row until the database shows the sweeper waiting on it, then
goes on to its append.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from airlock.store import verify_chain
from services.checkpoint import _tx

from .harness import World, approved, opened_world, signed_receipt

pytestmark = pytest.mark.postgres

_BOUND_S = 30.0  # every wait below ends by then, whatever the code under test does


@pytest.fixture
def pg_world(pg_url: str, tmp_path: Path) -> Iterator[World]:
    with opened_world(pg_url, tmp_path) as w:
        yield w


def _revoke(world: World, proposal: dict[str, Any], _: str) -> None:
    alice = world.accounts.authenticate(world.tokens["alice"])
    world.checkpoint.revoke(alice, proposal["id"], "stop it")


def _withdraw(world: World, proposal: dict[str, Any], _: str) -> None:
    agent = world.accounts.authenticate(world.tokens["agent"])
    world.checkpoint.withdraw(agent, proposal["id"], "running again")


def _report(world: World, proposal: dict[str, Any], approval_id: str) -> None:
    executor = world.accounts.authenticate(world.tokens["executor"])
    receipt = signed_receipt(approval_id, proposal["action_hash"], "succeeded", at=world.clock())
    world.checkpoint.report_outcome(executor, receipt)


_RACERS: dict[str, tuple[Callable[[World, dict[str, Any], str], None], str]] = {
    "revoke": (_revoke, "revoked"),
    "withdraw": (_withdraw, "withdrawn"),
    "outcome": (_report, "executed"),
}


def _blocks_another(engine: sa.Engine, pid: int) -> bool:
    with engine.connect() as conn:
        return bool(
            conn.execute(
                sa.text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE CAST(:pid AS integer) = ANY(pg_blocking_pids(pid))"
                ),
                {"pid": pid},
            ).scalar_one()
        )


@pytest.mark.parametrize("racer", sorted(_RACERS))
def test_the_sweeper_and_a_write_holding_a_proposal_do_not_deadlock(
    pg_world: World, racer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """p1's approval has expired (the sweeper would lapse it) and p2's approval window
    has passed (the sweeper expires it, an audit append). The racer holds p1's row
    when the sweeper starts, and goes on to its own append only once the sweeper waits
    for that row: both finish, neither fails, and the chain verifies."""
    world = pg_world
    act, final = _RACERS[racer]
    p1, aid = approved(world, proposal_id="prop_dead00000001", resource_id="i-dead00000001")
    p2 = world.submit(proposal_id="prop_dead00000002", resource_id="i-dead00000002")
    assert p2.status_code == 201, p2.text
    world.clock.advance(24 * 3600 + 1)

    holding = threading.Event()
    go = threading.Event()
    racer_pid: list[int] = []
    errors: dict[str, BaseException] = {}
    swept: list[dict[str, int]] = []
    audit = _tx.audit

    def audit_after_the_sweeper_waits(conn: Connection, now: int, kind: str, **fields: Any) -> None:
        # The racer's first append: its proposal's row is locked, the chain not yet.
        if threading.current_thread().name == "racer" and not racer_pid:
            racer_pid.append(int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()))
            holding.set()
            assert go.wait(_BOUND_S), "the sweeper never waited for the racer's row"
        audit(conn, now, kind, **fields)

    monkeypatch.setattr(_tx, "audit", audit_after_the_sweeper_waits)

    def run(name: str, fn: Callable[[], Any]) -> threading.Thread:
        def body() -> None:
            try:
                fn()
            except BaseException as exc:  # reported by the assertions below
                errors[name] = exc

        thread = threading.Thread(target=body, name=name, daemon=True)
        thread.start()
        return thread

    racing = run("racer", lambda: act(world, p1, aid))
    assert holding.wait(_BOUND_S), errors
    sweeping = run("sweeper", lambda: swept.append(world.checkpoint.sweep()))
    # Wait for a state the database reports, not for time: the sweeper blocked on p1.
    deadline = time.monotonic() + _BOUND_S
    while not _blocks_another(world.checkpoint.engine, racer_pid[0]):
        assert time.monotonic() < deadline, "the sweeper never waited for the racer's row"
        assert sweeping.is_alive(), errors
        time.sleep(0.005)
    go.set()
    racing.join(_BOUND_S)
    sweeping.join(_BOUND_S)
    assert not racing.is_alive() and not sweeping.is_alive()

    assert errors == {}, {k: f"{type(v).__name__}: {v}" for k, v in errors.items()}
    assert swept == [{"expired": 1, "lapsed": 0, "escalated": 0}]
    states = {
        p["id"]: p["state"]
        for p in world.client.get("/v1/proposals", headers=world.auth("alice")).json()["items"]
    }
    assert states == {p1["id"]: final, p2.json()["id"]: "expired"}
    verify_chain(world.checkpoint.engine)
