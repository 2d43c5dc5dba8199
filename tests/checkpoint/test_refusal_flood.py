"""A flood of refused requests costs the audit chain a bounded number of rows, and every
refusal is still counted in it (services/checkpoint/refusals.py)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import httpx
from fastapi.testclient import TestClient

from airlock.store import verify_chain
from services.checkpoint.app import RefusalLimits, create_app

from .harness import PASSWORD, TEST_HOSTS, World, audit_events

_T = TypeVar("_T")

FLOOD = 10_000
BURST = 60


class _Monotonic:
    """The token buckets' clock, moved by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _app(world: World, clock: _Monotonic) -> Any:
    return create_app(
        world.checkpoint,
        world.accounts,
        refusal_limits=RefusalLimits(interval=60, burst=BURST, per_minute=60),
        monotonic=clock,
        allowed_hosts=TEST_HOSTS,
    )


def _rows(world: World) -> int:
    return verify_chain(world.checkpoint.engine).rows


def _counted(world: World, by: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for event in audit_events(world, "checkpoint.refused"):
        if event["by"] == by:
            out[event["code"]] = out.get(event["code"], 0) + event.get("count", 1)
    return out


async def _flood(app: Any, headers: dict[str, str], n: int, every: int, flush: Any) -> list[int]:
    statuses: list[int] = []
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        for i in range(n):
            # The viewer may not read the executor's feed: E_FORBIDDEN, then E_RATE_LIMITED.
            response = await client.get("/v1/feed", headers=headers)
            statuses.append(response.status_code)
            if (i + 1) % every == 0:
                flush()  # what the app's flush task does once an interval
    return statuses


def _run(make: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """``asyncio.run`` in a thread of its own: the worker's main thread may hold an
    event loop another test file left running (a browser driver's), where asyncio.run
    refuses to start."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


def test_a_flood_of_forbidden_requests_adds_a_bounded_number_of_rows(
    sqlite_world: World,
) -> None:
    world = sqlite_world
    clock = _Monotonic()
    app = _app(world, clock)
    before = _rows(world)
    flushes = 10
    statuses = _run(
        lambda: _flood(app, world.auth("viewer"), FLOOD, FLOOD // flushes, app.state.refusals.flush)
    )
    app.state.refusals.flush()  # what the app does at stop
    # The bound: two codes (E_FORBIDDEN, E_RATE_LIMITED), each one row at once and at
    # most one row a flush: 2 × (1 + 10 + 1) = 24 rows for 10,000 refusals.
    added = _rows(world) - before
    assert added <= 2 * (1 + flushes + 1), added
    assert statuses[:BURST] == [403] * BURST
    assert set(statuses[BURST:]) == {429}
    # Nothing lost: every refusal is counted once, under its code.
    assert _counted(world, "viewer") == {"E_FORBIDDEN": BURST, "E_RATE_LIMITED": FLOOD - BURST}
    limited = [e for e in audit_events(world, "checkpoint.refused") if e["code"] != "E_FORBIDDEN"]
    assert limited[0]["request"] == "GET /v1/feed"
    assert all(e["requests"] == ["GET /v1/feed"] for e in limited[1:])
    assert verify_chain(world.checkpoint.engine).ok


def test_a_flooding_token_is_rate_limited_with_retry_after_and_others_are_not(
    sqlite_world: World,
) -> None:
    world = sqlite_world
    clock = _Monotonic()
    app = _app(world, clock)
    client = TestClient(app)
    for _ in range(BURST):
        assert client.get("/v1/feed", headers=world.auth("viewer")).status_code == 403
    limited = client.get("/v1/me", headers=world.auth("viewer"))
    assert limited.status_code == 429
    assert limited.json()["error"]["code"] == "E_RATE_LIMITED"
    assert limited.headers["Retry-After"] == "1"
    # Another person, and the same person with another session, are not slowed.
    assert client.get("/v1/me", headers=world.auth("alice")).status_code == 200
    other = world.accounts.login("viewer", PASSWORD)[0]
    assert client.get("/v1/me", headers={"Authorization": f"Bearer {other}"}).status_code == 200
    clock.t += 1.0  # a refusal earned back
    assert client.get("/v1/me", headers=world.auth("viewer")).status_code == 200


def test_an_approval_during_a_flood_is_recorded_once_and_not_held_up(sqlite_world: World) -> None:
    world = sqlite_world
    app = _app(world, _Monotonic())
    client = TestClient(app)
    proposal = world.submit().json()
    for _ in range(200):
        client.get("/v1/feed", headers=world.auth("bob"))
    approved = client.post(
        f"/v1/proposals/{proposal['id']}/approve",
        json={"action_hash": proposal["action_hash"]},
        headers=world.auth("alice"),
    )
    assert approved.status_code == 200 and approved.json()["state"] == "approved"
    # The refusals counted (all but the first of each code) wait for the flush: the
    # approval's commit neither wrote them nor waited for them.
    assert app.state.refusals.pending() == 200 - 2
    assert len(audit_events(world, "checkpoint.vote.approve")) == 1


def test_counted_refusals_are_written_when_the_app_stops(sqlite_world: World) -> None:
    world = sqlite_world
    app = _app(world, _Monotonic())
    with TestClient(app) as client:  # runs the lifespan: its end is the server's stop
        for _ in range(5):
            client.get("/v1/feed", headers=world.auth("viewer"))
        assert _counted(world, "viewer") == {"E_FORBIDDEN": 1}  # the first, at once
    assert _counted(world, "viewer") == {"E_FORBIDDEN": 5}
    last = audit_events(world, "checkpoint.refused")[-1]
    assert last["count"] == 4 and last["requests"] == ["GET /v1/feed"]
    assert last["interval"] == 60 and last["first_at"] <= last["last_at"]


def test_a_caller_quiet_for_an_interval_is_written_at_once_again(sqlite_world: World) -> None:
    world = sqlite_world
    app = _app(world, _Monotonic())
    client = TestClient(app)
    client.get("/v1/feed", headers=world.auth("viewer"))
    app.state.refusals.flush()  # nothing counted: the window closes
    client.get("/v1/feed", headers=world.auth("viewer"))
    rows = audit_events(world, "checkpoint.refused")
    assert [e.get("count") for e in rows] == [None, None]
