"""A feed page executed side by side (services.executor.parallel), on SQLite and PostgreSQL.

The executor, its ledger and the feed source are real; the checkpoint is a fake that
answers ``GET /v1/feed`` from a list of items by ``after``, as the real one does, so a
restarted source is handed again what its cursor has not passed. The in-memory cloud's
write log is the judge.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from airlock.cloud.ports import LiveState, ResourceType, WriteResult
from airlock.protocol import RefusalCode, loads_strict
from airlock.store import verify_chain
from services.executor import (
    Backoff,
    CheckpointFeedSource,
    Outcome,
    Shutdown,
    State,
    checkpoint_client,
    daemon,
    serve,
)
from services.executor.feed import read_cursor
from services.executor.parallel import Parallel, resource_key
from services.executor.recover import execute_delivery
from services.executor.sources import Delivery

from .conftest import Env
from .support import T0, TTL, Bundle, InMemoryCloud, make_executor, make_test_bundle

BASE = "http://checkpoint.test"


@dataclass
class Feed:
    """The checkpoint's feed: every item after ``after``, at most ``limit`` of them."""

    items: list[dict[str, Any]] = field(default_factory=list)

    def add(self, bundle: Bundle) -> int:
        seq = len(self.items) + 1
        self.items.append(
            {
                "seq": seq,
                "kind": "approval",
                "approval_id": bundle.approval_id,
                "bundle": loads_strict(bundle.raw, max_bytes=1 << 17),
            }
        )
        return seq

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/feed":
            return httpx.Response(200, json={})
        after, limit = int(request.url.params["after"]), int(request.url.params["limit"])
        page = [item for item in self.items if item["seq"] > after][:limit]
        cursor = page[-1]["seq"] if page else max(after, len(self.items))
        return httpx.Response(200, json={"items": page, "cursor": cursor})


@pytest.fixture
def feed() -> Feed:
    return Feed()


def _source(env: Env, feed: Feed) -> tuple[CheckpointFeedSource, httpx.Client]:
    client = checkpoint_client(
        BASE, "executor-token", poll_wait_s=1, transport=httpx.MockTransport(feed.handler)
    )
    source = CheckpointFeedSource(
        engine=env.engine, client=client, clock=env.clock, backoff=Backoff(cap=1.0)
    )
    return source, client


@pytest.fixture
def source(env: Env, feed: Feed) -> Iterator[CheckpointFeedSource]:
    made, client = _source(env, feed)
    yield made
    client.close()


def _cursor(env: Env, source: CheckpointFeedSource) -> int:
    with env.engine.connect() as conn:
        return read_cursor(conn, source.feed)


def _stops(env: Env, feed: Feed, tag: str, count: int) -> list[Bundle]:
    bundles = [make_test_bundle(n, tag=tag) for n in range(1, count + 1)]
    for b in bundles:
        env.cloud.add("ecs.instance", b.resource_id, "Running")
        feed.add(b)
    return bundles


# -- the ordering key ---------------------------------------------------------------------


def test_two_actions_on_one_resource_share_a_key_and_other_resources_do_not() -> None:
    stop, delete = (make_test_bundle(1, tag="pk", operation=op) for op in ("stop", "delete"))
    other = make_test_bundle(2, tag="pk")
    assert resource_key(stop.raw) == resource_key(delete.raw) != ""
    assert resource_key(other.raw) != resource_key(stop.raw)


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        b'{"envelope": {}}',
        b'{"action": "%%%"}',
        b'{"action": "' + base64.b64encode(b"not json") + b'"}',
        b'{"action": "' + base64.b64encode(json.dumps({"region": "r"}).encode()) + b'"}',
        b"[" * 100_000,
    ],
)
def test_a_bundle_whose_resource_cannot_be_read_gets_the_shared_key(raw: bytes) -> None:
    assert resource_key(raw) == ""


# -- the pool -----------------------------------------------------------------------------


def _deliveries(*bundles: Bundle) -> list[Delivery]:
    return [Delivery(f"feed:{i}", b.raw) for i, b in enumerate(bundles, 1)]


def test_resources_run_side_by_side_and_each_in_its_order() -> None:
    a1, a2 = (make_test_bundle(1, tag="pp", operation=op) for op in ("stop", "delete"))
    b1 = make_test_bundle(2, tag="pp")
    both = threading.Barrier(2, timeout=10)  # broken unless a1 and b1 run at once
    seen: list[str] = []

    def one(delivery: Delivery) -> bool:
        if delivery.ref in ("feed:1", "feed:3"):
            both.wait()
        seen.append(delivery.ref)
        return True

    pool = Parallel(4)
    try:
        assert pool.run(_deliveries(a1, a2, b1), one) == 3
    finally:
        pool.close()
    assert seen.index("feed:1") < seen.index("feed:2")  # a1 before a2, its resource's order


def test_a_run_stops_at_its_first_false_and_the_others_go_on() -> None:
    a1, a2 = (make_test_bundle(1, tag="ps", operation=op) for op in ("stop", "delete"))
    b1 = make_test_bundle(2, tag="ps")
    called: list[str] = []

    def one(delivery: Delivery) -> bool:
        called.append(delivery.ref)
        return delivery.ref != "feed:1"

    pool = Parallel(2)
    try:
        assert pool.run(_deliveries(a1, a2, b1), one) == 1
    finally:
        pool.close()
    assert sorted(called) == ["feed:1", "feed:3"]  # a2 never, after a1 said stop


def test_an_error_is_raised_only_once_every_run_has_ended() -> None:
    a, b = make_test_bundle(1, tag="pe"), make_test_bundle(2, tag="pe")
    b_ended = threading.Event()

    def one(delivery: Delivery) -> bool:
        if delivery.ref == "feed:1":
            raise RuntimeError("database gone")
        b_ended.wait(timeout=0.2)  # still running when the first run raised
        b_ended.set()
        return True

    pool = Parallel(2)
    try:
        with pytest.raises(RuntimeError, match="database gone"):
            pool.run(_deliveries(a, b), one)
        assert b_ended.is_set()
    finally:
        pool.close()


@pytest.mark.parametrize("workers", [0, 9])
def test_a_pool_size_out_of_bounds_is_refused(workers: int) -> None:
    with pytest.raises(ValueError, match="between 1 and 8"):
        Parallel(workers)


# -- the cursor ---------------------------------------------------------------------------


def test_a_delivery_that_commits_first_never_moves_the_cursor_past_an_earlier_one(
    env: Env, feed: Feed, source: CheckpointFeedSource
) -> None:
    _stops(env, feed, "pc", 3)
    d1, d2, d3 = source.receive(wait_s=0)
    execute_delivery(env.executor, source, d2)
    assert _cursor(env, source) == 0  # d1 has not committed
    execute_delivery(env.executor, source, d1)
    assert _cursor(env, source) == 2  # past d1 and d2, both committed
    execute_delivery(env.executor, source, d3)
    assert _cursor(env, source) == 3


def test_a_crash_with_a_later_delivery_committed_redelivers_both_and_writes_each_once(
    env: Env, feed: Feed, source: CheckpointFeedSource
) -> None:
    bundles = _stops(env, feed, "pr", 2)
    _, d2 = source.receive(wait_s=0)
    assert execute_delivery(env.executor, source, d2).state is State.SUCCEEDED
    # The process dies with d1 in hand: nothing of d1 committed, the cursor before it.
    assert _cursor(env, source) == 0
    restarted, client = _source(env, feed)
    try:
        again = restarted.receive(wait_s=0)
        assert [d.ref for d in again] == ["feed:1", "feed:2"]
        outcomes = [execute_delivery(env.executor, restarted, d) for d in again]
    finally:
        client.close()
    assert outcomes[0].state is State.SUCCEEDED
    assert outcomes[1].refusal_code is RefusalCode.E_REPLAY
    assert [env.cloud.writes_for(b.resource_id) for b in bundles] == [1, 1]
    assert _cursor(env, source) == 2
    assert verify_chain(env.engine).ok


def test_commits_made_side_by_side_that_leave_the_cursor_short_are_settled(
    env: Env, feed: Feed, source: CheckpointFeedSource
) -> None:
    """Both transactions acknowledge before either has committed: the first moves the
    cursor past itself only, the second not at all (the first has not committed)."""
    _stops(env, feed, "pt", 2)
    d1, d2 = source.receive(wait_s=0)
    with env.engine.begin() as conn:
        source.ack_in(conn, d1)
    with env.engine.begin() as conn:
        source.ack_in(conn, d2)  # d1 not yet counted as committed
    source.forget(d2)
    source.forget(d1)
    assert _cursor(env, source) == 1
    source.settle()
    assert _cursor(env, source) == 2
    source.settle()  # nothing left: no commit
    assert _cursor(env, source) == 2


def test_settle_never_passes_a_delivery_that_did_not_commit(
    env: Env, feed: Feed, source: CheckpointFeedSource
) -> None:
    _stops(env, feed, "pu", 3)
    _, d2, d3 = source.receive(wait_s=0)
    for d in (d2, d3):
        execute_delivery(env.executor, source, d)
    source.settle()
    assert _cursor(env, source) == 0


# -- the daemon ---------------------------------------------------------------------------


class _MeetingCloud(InMemoryCloud):
    """Reads of the first two resources named wait for each other: they pass only when
    both are re-read at once."""

    def __init__(self, first_two: tuple[str, str]) -> None:
        super().__init__()
        self.first_two = first_two
        self.met = threading.Barrier(2, timeout=10)
        self.broken = False

    def get_state(
        self, region: str, resource_type: ResourceType, resource_id: str
    ) -> LiveState | None:
        if resource_id in self.first_two and not self.met.broken:
            try:
                self.met.wait()
            except threading.BrokenBarrierError:
                self.broken = True
        return super().get_state(region, resource_type, resource_id)


def test_the_daemon_runs_resources_side_by_side_and_each_resources_approvals_in_order(
    env: Env, feed: Feed, source: CheckpointFeedSource
) -> None:
    """Four resources, each with a stop then a delete (the delete's precondition is the
    stopped state the stop leaves), and four stops: twelve approvals on one page. The
    first two resources' re-reads wait for each other, so they must run side by side."""
    pairs = [
        (
            make_test_bundle(n, tag="pd"),
            make_test_bundle(n, tag="pd", operation="delete", status="Stopped"),
        )
        for n in range(1, 5)
    ]
    singles = [make_test_bundle(n, tag="pd") for n in range(5, 9)]
    cloud = _MeetingCloud((pairs[0][0].resource_id, pairs[1][0].resource_id))
    executor = make_executor(env.url, cloud, env.clock, worker_id="worker-parallel")
    env.others.append(executor)  # disposed with the env
    # Each delete right behind its stop: run side by side, the delete would be re-read
    # while its stop waits for the other resource's read, and refused (still running).
    for stop, delete in pairs:
        cloud.add("ecs.instance", stop.resource_id, "Running")
        feed.add(stop)
        feed.add(delete)
    for b in singles:
        cloud.add("ecs.instance", b.resource_id, "Running")
        feed.add(b)
    shutdown = Shutdown()
    outcomes: list[Outcome] = []

    def on_outcome(outcome: Outcome) -> None:
        outcomes.append(outcome)
        if len(outcomes) == len(feed.items):
            shutdown.request()

    serve(executor, source, shutdown=shutdown, parallel=4, poll_wait_s=1, on_outcome=on_outcome)
    assert not cloud.broken  # the first two resources were re-read at once
    assert sorted(o.state.value for o in outcomes if o.state) == ["succeeded"] * 12
    for stop, _ in pairs:
        ops = [op for op, rid, _ in cloud.writes if rid == stop.resource_id]
        assert ops == ["stop", "delete"]
    assert _cursor(env, source) == len(feed.items)
    assert verify_chain(env.engine).ok


def test_a_bundle_refused_at_verification_on_the_feed_is_recorded_and_passed(
    env: Env, feed: Feed, source: CheckpointFeedSource
) -> None:
    """Found in review: the refusal's acknowledgement took a lane of the audit chain
    before the refusal took the whole chain, which PostgreSQL's laned chain refuses, so
    the cursor stayed on an expired bundle for good."""
    expired = make_test_bundle(1, tag="pv", issued_at=T0 - 2 * TTL)
    env.cloud.add("ecs.instance", expired.resource_id, "Running")
    feed.add(expired)
    [delivery] = source.receive(wait_s=0)
    outcome = execute_delivery(env.executor, source, delivery)
    assert outcome.refusal_code is RefusalCode.E_EXPIRED
    assert _cursor(env, source) == 1
    assert env.cloud.writes == []
    assert verify_chain(env.engine).ok


def test_once_a_delivery_fails_the_pages_other_runs_take_nothing_more(
    env: Env, feed: Feed, source: CheckpointFeedSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundles = [make_test_bundle(n, tag="pf") for n in range(1, 5)]
    cloud = _FailingCloud(bundles[0].resource_id, bundles[1].resource_id)
    executor = make_executor(env.url, cloud, env.clock, worker_id="worker-failing")
    env.others.append(executor)
    for b in bundles:
        cloud.add("ecs.instance", b.resource_id, "Running")
        feed.add(b)
    pool = Parallel(2)
    # The second's write waits for the first's run to have ended (raised): else, on a
    # loaded runner, the second's thread could finish and take the third before the first
    # thread, woken by the second's read, had raised, which no code could know of then.
    runs: list[Future[None]] = []
    submit = pool._pool.submit

    def recorded(*args: Any, **kwargs: Any) -> Future[None]:
        runs.append(submit(*args, **kwargs))
        return runs[-1]

    monkeypatch.setattr(pool._pool, "submit", recorded)
    cloud.before_write = lambda: runs[0].exception(timeout=10)
    try:
        with pytest.raises(RuntimeError, match="read went wrong"):
            daemon._drain(executor, source, Shutdown(), 0, on_outcome=None, parallel=pool)
        cloud.before_write = None
        # The second ran beside the failing first; the third and fourth were not taken.
        assert [cloud.writes_for(b.resource_id) for b in bundles] == [0, 1, 0, 0]
        assert _cursor(env, source) == 0
        cloud.fail_on = None
        assert daemon._drain(executor, source, Shutdown(), 0, on_outcome=None, parallel=pool) == 4
    finally:
        pool.close()
    assert [cloud.writes_for(b.resource_id) for b in bundles] == [1, 1, 1, 1]
    assert _cursor(env, source) == 4


class _FailingCloud(InMemoryCloud):
    """The first resource's re-read fails (not a cloud error: a bug, a driver fault) once
    the second's has been made."""

    def __init__(self, fail_on: str, after: str) -> None:
        super().__init__()
        self.fail_on: str | None = fail_on
        self.after = after
        self.second_read = threading.Event()
        #: Called before each write, when set.
        self.before_write: Callable[[], object] | None = None

    def get_state(
        self, region: str, resource_type: ResourceType, resource_id: str
    ) -> LiveState | None:
        if resource_id == self.after:
            self.second_read.set()
        if resource_id == self.fail_on:
            self.second_read.wait(timeout=10)
            raise RuntimeError("read went wrong")
        return super().get_state(region, resource_type, resource_id)

    def _write(self, op: str, resource_type: str, rid: str, token: str = "") -> WriteResult:
        if self.before_write is not None:
            self.before_write()
        return super()._write(op, resource_type, rid, token)


def test_the_daemon_settles_the_cursor_after_a_page_run_side_by_side(
    env: Env, feed: Feed, source: CheckpointFeedSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stops(env, feed, "pz", 3)
    settled: list[int] = []
    settle = source.settle
    monkeypatch.setattr(source, "settle", lambda: (settled.append(1), settle())[1])
    pool = Parallel(2)
    try:
        assert daemon._drain(env.executor, source, Shutdown(), 0, on_outcome=None, parallel=pool)
    finally:
        pool.close()
    assert settled == [1]
    assert _cursor(env, source) == 3
