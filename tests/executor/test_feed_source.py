"""The feed source and the outcome outbox against a fake checkpoint, on SQLite and PostgreSQL.

``FakeCheckpoint`` answers ``GET /v1/feed`` and ``POST /v1/outcomes`` through
``httpx.MockTransport`` with whatever the test scripts (pages, failures, status codes),
so orderings the real checkpoint rarely produces — a revocation before its approval,
the same bundle twice, a 503 storm — are exact and fast. The executor, its ledger and
the database triggers are real; the cloud is the in-memory double. What only a socket
shows (a status line and headers sent a byte at a time) is served by a fake checkpoint on
a real loopback socket (tests/support/dripping.py), in the last tests here.
"""

from __future__ import annotations

import base64
import functools
import json
import threading
import time
from collections.abc import Callable, Container, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from airlock.protocol import RefusalCode, loads_strict
from airlock.store import AuditLog, is_postgresql, make_engine, upgrade, verify_chain
from services.executor import (
    MIGRATIONS_DIR,
    Backoff,
    CheckpointFeedSource,
    CheckpointUnauthorized,
    DirectorySource,
    Executor,
    Failpoints,
    Heartbeat,
    LedgerRevocations,
    OutboxReporter,
    Outcome,
    Shutdown,
    State,
    checkpoint_client,
    daemon,
    migrate,
    serve,
)
from services.executor import feed as feed_module
from services.executor import outbox as outbox_module
from services.executor.errors import LedgerHeld, SimulatedCrash
from services.executor.feed import DEFAULT_LEDGER_HOLD_S, HOLD_POLL_S, advance_cursor, read_cursor
from services.executor.models import (
    deliveries,
    feed_cursor,
    ledger,
    ledger_holds,
    outbox,
    refusals,
    revocations,
)
from services.executor.outbox import BATCH_RETRY_S
from services.executor.receipt_queue import pending_receipts, requeue_undelivered
from services.executor.recover import execute_delivery, ledger_checked, recover_expired, run
from services.executor.sources import Delivery
from tests.support.dripping import (
    DRIPPED_HEAD,
    GIVE_UP_SLACK_S,
    Answer,
    ok_json,
    serving_drips,
)

from .conftest import Env
from .support import (
    LEASE,
    FakeClock,
    InMemoryCloud,
    StopAfterFailures,
    leave_claimed,
    make_executor,
    make_test_bundle,
)

BASE = "http://checkpoint.test"


@dataclass
class FakeCheckpoint:
    """Scripted answers: each feed request pops ``pages`` (a page, an int status, raw
    bytes, a whole response, or an exception to raise); each outcome POST pops
    ``outcome_status`` (default 200)."""

    pages: list[Any] = field(default_factory=list)
    outcome_status: list[int] = field(default_factory=list)
    #: approval id -> the status every POST of its receipts gets (an exception: raised)
    answer_for: dict[str, Any] = field(default_factory=dict)
    feed_requests: list[dict[str, str]] = field(default_factory=list)
    posted: list[dict[str, Any]] = field(default_factory=list)
    #: Whether it takes ``POST /v1/receipts`` (False: a checkpoint from before it)
    batches: bool = True
    #: A status every ``POST /v1/receipts`` gets as a whole (None: an answer per item)
    batch_status: int | None = None
    #: The path of every POST, in order
    requests: list[str] = field(default_factory=list)

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            self.requests.append(request.url.path)
        if request.url.path == "/v1/receipts" and self.batch_status is not None:
            error = {"code": "E_INVALID", "message": "refused whole"}
            return httpx.Response(self.batch_status, json={"error": error})
        if request.url.path == "/v1/feed":
            self.feed_requests.append(dict(request.url.params))
            answer: Any = self.pages.pop(0) if self.pages else {"items": [], "cursor": 0}
            if isinstance(answer, Exception):
                raise answer
            if isinstance(answer, httpx.Response):
                return answer
            if isinstance(answer, int):
                return httpx.Response(answer, json={"error": {"code": "E_X", "message": "x"}})
            if isinstance(answer, bytes):
                return httpx.Response(200, content=answer)
            after = int(request.url.params["after"])
            return httpx.Response(200, json={**answer, "cursor": max(answer["cursor"], after)})
        if request.url.path == "/v1/receipts" and self.batches:
            return self.batch(json.loads(request.content)["receipts"])
        if request.url.path == "/v1/outcomes":
            return self.one(json.loads(request.content))
        return httpx.Response(404)

    def batch(self, items: list[dict[str, Any]]) -> httpx.Response:
        """Each receipt answered as alone; an answer about the whole server (a 401, a
        503…, an exception, a scripted response) is the whole batch's."""
        results = []
        for item in items:
            if item["kind"] != "outcome":  # it has no POST /v1/refusals
                results.append({"status": 404, "error": None})
                continue
            fixed = self.answer_for.get(posted_approval_id(item))
            if isinstance(fixed, httpx.Response):  # scripted: the whole answer
                self.posted.append({"receipt": item["receipt"]})
                return fixed
            answer = self.one({"receipt": item["receipt"]})
            if answer.status_code in (401, 403, 429, 502, 503, 504) or not answer.content:
                return answer
            body = answer.json()
            if not isinstance(body, dict) or set(body) - {"error"}:
                return answer
            results.append({"status": answer.status_code, "error": body.get("error")})
        return httpx.Response(200, json={"results": results})

    def one(self, posted: dict[str, Any]) -> httpx.Response:
        self.posted.append(posted)
        fixed = self.answer_for.get(posted_approval_id(self.posted[-1]))
        if isinstance(fixed, Exception):
            raise fixed
        if isinstance(fixed, httpx.Response):
            return fixed
        if fixed is not None:
            status = fixed
        else:
            status = self.outcome_status.pop(0) if self.outcome_status else 200
        codes = {
            401: "E_UNAUTHENTICATED",
            404: "E_NOT_FOUND",
            409: "E_STATE",
            503: "E_UNAVAILABLE",
        }
        code = codes.get(status, "E_X")
        body = {} if status == 200 else {"error": {"code": code, "message": code.lower()}}
        return httpx.Response(status, json=body)


def posted_approval_id(body: dict[str, Any]) -> str:
    """The approval id inside a posted ``{"receipt": envelope}``."""
    payload = json.loads(base64.b64decode(body["receipt"]["payload"]))
    return str(payload["approval_id"])


def approval(seq: int, raw: bytes, approval_id: str) -> dict[str, Any]:
    return {
        "seq": seq,
        "kind": "approval",
        "approval_id": approval_id,
        "bundle": loads_strict(raw, max_bytes=1 << 17),
    }


def revocation(seq: int, approval_id: str) -> dict[str, Any]:
    return {"seq": seq, "kind": "revocation", "approval_id": approval_id, "bundle": None}


@dataclass
class Rig:
    env: Env
    fake: FakeCheckpoint
    source: CheckpointFeedSource
    reporter: OutboxReporter
    sleeps: list[float]
    mono: list[float]
    client: httpx.Client

    @property
    def executor(self) -> Executor:
        return self.env.executor

    def turn(self) -> list[Any]:
        """What the daemon does with one page: execute, acknowledge, in order."""
        outcomes = []
        for delivery in self.source.receive(wait_s=0):
            outcomes.append(self.executor.execute(delivery.raw, revoked=self.source.revoked()))
            self.source.ack(delivery)
        return outcomes

    def cursor(self) -> int:
        with self.env.engine.connect() as conn:
            return read_cursor(conn, self.source.feed)

    def rows(self, table: sa.Table) -> list[sa.Row[Any]]:
        with self.env.engine.connect() as conn:
            return list(conn.execute(sa.select(table)))


@pytest.fixture
def rig(env: Env) -> Iterator[Rig]:
    fake = FakeCheckpoint()
    sleeps: list[float] = []
    mono = [0.0]
    client = checkpoint_client(
        BASE, "executor-token", poll_wait_s=1, transport=httpx.MockTransport(fake.handler)
    )
    one: Callable[[], float] = lambda: 1.0  # noqa: E731 - the jitter at its top
    source = CheckpointFeedSource(
        engine=env.engine,
        client=client,
        clock=env.clock,
        backoff=Backoff(cap=4.0, rng=one),
        sleep=sleeps.append,
        monotonic=lambda: mono[0],
    )
    reporter = OutboxReporter(
        engine=env.engine,
        client=client,
        clock=env.clock,
        backoff=Backoff(cap=4.0, rng=one),
        monotonic=lambda: mono[0],
        sweep_every_s=30,
    )
    yield Rig(env, fake, source, reporter, sleeps, mono, client)
    client.close()


def test_a_revocation_that_arrives_before_its_approval_is_honoured(rig: Rig) -> None:
    b = make_test_bundle(1, tag="frev")
    rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    rig.fake.pages = [
        {"items": [revocation(1, b.approval_id)], "cursor": 1},
        {"items": [approval(2, b.raw, b.approval_id)], "cursor": 2},
    ]
    # One turn: the page of the revocation hands over nothing, so the next is read at
    # once; its approval is refused, the revocation recorded before it.
    [outcome] = rig.turn()
    assert outcome.refusal_code is RefusalCode.E_REVOKED
    assert rig.env.cloud.writes_for(b.resource_id) == 0
    assert rig.cursor() == 2
    assert [r.approval_id for r in rig.rows(revocations)] == [b.approval_id]
    assert [r["after"] for r in rig.fake.feed_requests] == ["0", "1"]


def test_pages_of_revocations_only_do_not_end_a_receive_short_of_the_approvals_behind(
    rig: Rig,
) -> None:
    """Seen in review: ``executor --once`` stopped at the first page that handed over no
    approval (a page of revocations), leaving the approvals behind it for the next run."""
    b = make_test_bundle(1, tag="frevonly")
    rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    rig.fake.pages = [
        {"items": [revocation(1, "apv_someotherone01")], "cursor": 1},
        {"items": [revocation(2, "apv_someotherone02")], "cursor": 2},
        {"items": [approval(3, b.raw, b.approval_id)], "cursor": 3},
    ]
    [delivery] = rig.source.receive(wait_s=0)
    assert delivery.raw == b.raw
    # Nothing new: one page, no pause (asked not to wait), nothing handed over.
    rig.fake.pages = []
    rig.source.ack(delivery)
    assert rig.source.receive(wait_s=0) == ()
    assert [r["after"] for r in rig.fake.feed_requests] == ["0", "1", "2", "3"]
    assert rig.sleeps == []


def _client(fake: FakeCheckpoint) -> httpx.Client:
    return checkpoint_client(
        BASE, "executor-token", poll_wait_s=1, transport=httpx.MockTransport(fake.handler)
    )


def _wait_for_a_lock_waiter(url: str) -> None:
    """Until some session of this PostgreSQL database waits on a lock (bounded poll:
    PostgreSQL offers no event for it)."""
    probe = make_engine(url)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with probe.connect() as conn:
                waiting = conn.execute(
                    sa.text(
                        "SELECT count(*) FROM pg_locks WHERE NOT granted AND database ="
                        " (SELECT oid FROM pg_database WHERE datname = current_database())"
                    )
                ).scalar_one()
            if waiting:
                return
            time.sleep(0.01)  # a bounded poll: a lock wait has no event to wait on
        raise AssertionError("no session ever waited on a lock")
    finally:
        probe.dispose()


def test_two_executors_recording_overlapping_revocation_pages_do_not_deadlock(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen in review: A holds the chain lock (it appended R1) and goes on to insert R2,
    which B inserted first and B holds while it waits for the chain: DeadlockDetected on
    PostgreSQL. Both now take the chain lock before their first row. On SQLite BEGIN
    IMMEDIATE serializes them anyway; the test shows that stays so."""
    a_appended, b_started = threading.Event(), threading.Event()

    class HookedAuditLog(AuditLog):
        @staticmethod
        def append(conn: Any, event: Any, *, at: Any) -> Any:
            entry = AuditLog.append(conn, event, at=at)
            if threading.current_thread().name == "A" and event["approval_id"] == "apv_rev00001":
                a_appended.set()
                assert b_started.wait(30)
                if is_postgresql(conn):
                    _wait_for_a_lock_waiter(env.url)  # B now waits for something A holds
            return entry

    monkeypatch.setattr(feed_module, "AuditLog", HookedAuditLog)
    ids = ["apv_rev00001", "apv_rev00002", "apv_rev00003"]
    fake_a = FakeCheckpoint(
        pages=[{"items": [revocation(1, ids[0]), revocation(2, ids[1])], "cursor": 2}]
    )
    fake_b = FakeCheckpoint(
        pages=[{"items": [revocation(2, ids[1]), revocation(3, ids[2])], "cursor": 3}]
    )
    client_a, client_b = _client(fake_a), _client(fake_b)
    a = CheckpointFeedSource(engine=env.engine, client=client_a, clock=env.clock)
    b = CheckpointFeedSource(engine=env.engine, client=client_b, clock=env.clock)
    errors: dict[str, BaseException] = {}

    def run(name: str, source: CheckpointFeedSource) -> None:
        try:
            if name == "B":
                # A goes on only once B has read its cursor: read after A's commit, it
                # would make B's page look out of order and cut it (a CI flake on SQLite,
                # where nothing else holds A back).
                read_cursor_of_b = source.cursor

                def cursor() -> int:
                    value = read_cursor_of_b()
                    b_started.set()
                    return value

                source.cursor = cursor  # type: ignore[method-assign]
            assert source.receive(wait_s=0) == ()
        except BaseException as exc:
            errors[name] = exc

    ta = threading.Thread(target=run, name="A", args=("A", a))
    tb = threading.Thread(target=run, name="B", args=("B", b))
    ta.start()
    assert a_appended.wait(30)
    tb.start()
    ta.join(60)
    tb.join(60)
    client_a.close()
    client_b.close()
    assert not ta.is_alive() and not tb.is_alive()
    assert errors == {}
    with env.engine.connect() as conn:
        assert sorted(conn.execute(sa.select(revocations.c.approval_id)).scalars()) == ids
        assert read_cursor(conn, a.feed) == 3
    assert verify_chain(env.engine).ok


def test_a_revocation_of_a_malformed_approval_id_is_skipped_and_the_cursor_moves_on(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """Seen in review: an id longer than the column (100) failed the insert on PostgreSQL
    on every turn, so the cursor never moved. No approval can carry such an id."""
    bad: list[Any] = [
        "apv_" + "x" * 120,  # longer than the column and than the protocol allows
        "apv_short",
        "prop_abcdefgh1",
        "apv_abcdefgh\n",
        "apv_abc\u00e9defgh",
        "",
        7,
        None,
    ]
    good = "apv_0123456789abcdef"
    items = [revocation(n, aid) for n, aid in enumerate(bad, start=1)]
    rig.fake.pages = [{"items": [*items, revocation(len(bad) + 1, good)], "cursor": 20}]
    with caplog.at_level("WARNING", logger="airlock.executor.feed"):
        assert rig.turn() == []
    assert rig.cursor() == 20
    assert [r.approval_id for r in rig.rows(revocations)] == [good]
    skipped = [r.getMessage() for r in caplog.records if "malformed approval id" in r.message]
    assert len(skipped) == len(bad)
    assert all(len(m) < 200 for m in skipped)  # a long id is clipped in the log


def _crash_at(point: str) -> Failpoints:
    def _raise(p: str) -> None:
        raise SimulatedCrash(p)

    return Failpoints(frozenset({point}), action=_raise)


def test_a_feed_that_keeps_failing_does_not_starve_recovery_or_receipt_delivery(
    rig: Rig,
) -> None:
    """Seen in review: a feed item the ledger could not store failed every turn, and
    recovery and the outbox shared that turn's error handling, so neither ran again."""
    done, crashed = make_test_bundle(1, tag="fstuck"), make_test_bundle(2, tag="fstuck")
    for b in (done, crashed):
        rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    crashy = rig.env.another_worker("crashy")
    shutdown = Shutdown()

    class StuckFeed:
        long_poll = True

        def __init__(self) -> None:
            self.calls = 0

        def receive(self, *, wait_s: float) -> Sequence[Delivery]:
            self.calls += 1
            if self.calls == 1:
                # Work for the other steps: an outcome to deliver, a row to recover.
                assert rig.executor.execute(done.raw).state is State.SUCCEEDED
                leave_claimed(crashy, rig.env.cloud, crashed.raw)
                rig.env.clock.advance(LEASE)
            if len(rig.fake.posted) >= 2:
                shutdown.request()
            raise sa.exc.DataError("INSERT", {}, Exception("value too long"))

        def revoked(self) -> Container[str]:
            return LedgerRevocations(rig.env.engine)

        def ack(self, delivery: Delivery) -> None:
            raise AssertionError("nothing is delivered")

    serve(
        rig.executor,
        StuckFeed(),
        shutdown=shutdown,
        reporter=rig.reporter,
        recover_every_s=0,
        error_backoff=StopAfterFailures(shutdown, 10),
    )
    assert rig.env.cloud.writes_for(crashed.resource_id) == 1  # recovered, once
    assert sorted(p["receipt"]["payload"] for p in rig.fake.posted) == sorted(
        json.loads(r.receipt)["payload"] for r in rig.rows(ledger)
    )
    assert sorted(d.approval_id for d in rig.rows(deliveries)) == sorted(
        [done.approval_id, crashed.approval_id]
    )


def test_the_same_bundle_delivered_twice_is_a_replay_and_only_the_outcome_is_reported(
    rig: Rig,
) -> None:
    b = make_test_bundle(1, tag="fdup")
    rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    rig.fake.pages = [
        {"items": [approval(1, b.raw, b.approval_id)], "cursor": 1},
        {"items": [approval(2, b.raw, b.approval_id)], "cursor": 2},
    ]
    [first] = rig.turn()
    [second] = rig.turn()
    assert first.state is State.SUCCEEDED
    assert second.state is None and second.refusal_code is RefusalCode.E_REPLAY
    assert rig.env.cloud.writes_for(b.resource_id) == 1
    assert [r.code for r in rig.rows(refusals)] == ["E_REPLAY"]
    assert rig.reporter.flush() == 1
    # The replay's receipt says nothing about the approval's outcome: never posted.
    [posted] = rig.fake.posted
    assert posted["receipt"] == first.receipt.to_value()
    assert rig.reporter.flush() == 0 and len(rig.fake.posted) == 1


def test_a_page_with_approvals_and_revocations_moves_the_cursor_only_as_items_are_done(
    rig: Rig,
) -> None:
    a, b = make_test_bundle(1, tag="fcur"), make_test_bundle(2, tag="fcur")
    for x in (a, b):
        rig.env.cloud.add("ecs.instance", x.resource_id, "Running")
    rig.fake.pages = [
        {
            "items": [
                approval(3, a.raw, a.approval_id),
                revocation(5, "apv_elsewhere"),
                approval(8, b.raw, b.approval_id),
            ],
            "cursor": 9,  # seq 9 was filtered out by the checkpoint (expired)
        }
    ]
    first, second = rig.source.receive(wait_s=0)
    rig.executor.execute(first.raw)
    rig.source.ack(first)
    assert rig.cursor() == 7  # past the revocation (recorded with the page), not past b
    rig.executor.execute(second.raw)
    rig.source.ack(second)
    assert rig.cursor() == 9
    assert rig.fake.feed_requests[0]["after"] == "0"


def test_checkpoint_down_or_failing_backs_off_capped_and_never_raises(rig: Rig) -> None:
    request = httpx.Request("GET", BASE)
    rig.fake.pages = [
        httpx.ConnectError("refused", request=request),
        503,
        500,
        httpx.ReadTimeout("slow", request=request),
        429,
        b"not json",
        {"items": [], "cursor": 4},
    ]
    for _ in range(6):
        assert rig.source.receive(wait_s=0) == ()
    assert rig.sleeps == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert rig.cursor() == 0
    assert rig.source.receive(wait_s=0) == ()
    assert rig.cursor() == 4
    # Reachable again: the next failure starts from the bottom.
    rig.fake.pages = [503]
    rig.source.receive(wait_s=0)
    assert rig.sleeps[-1] == 0.5


def test_a_wrong_token_stops_the_feed_and_the_outbox(rig: Rig) -> None:
    rig.fake.pages = [401]
    with pytest.raises(CheckpointUnauthorized, match="AIRLOCK_EXECUTOR_CHECKPOINT_TOKEN"):
        rig.source.receive(wait_s=0)
    b = make_test_bundle(1, tag="ftok")
    rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    rig.executor.execute(b.raw)
    rig.fake.outcome_status = [401]
    with pytest.raises(CheckpointUnauthorized):
        rig.reporter.flush()
    assert rig.rows(deliveries) == []


def test_outcomes_are_retried_with_backoff_until_delivered(rig: Rig) -> None:
    b = make_test_bundle(1, tag="fretry")
    rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    rig.executor.execute(b.raw)
    rig.fake.outcome_status = [503, 503]
    assert rig.reporter.flush() == 0
    assert rig.reporter.flush() == 0  # inside the backoff window: no request at all
    assert len(rig.fake.posted) == 1
    rig.mono[0] += 0.5
    assert rig.reporter.flush() == 0
    rig.mono[0] += 1.0
    assert rig.reporter.flush() == 1
    [row] = rig.rows(deliveries)
    assert (row.kind, row.approval_id, row.status, row.http_status) == (
        "outcome",
        b.approval_id,
        "delivered",
        200,
    )
    assert len(rig.fake.posted) == 3


def test_a_receipt_refused_for_good_is_recorded_with_its_code_and_not_retried(rig: Rig) -> None:
    b = make_test_bundle(1, tag="frej")
    rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    rig.executor.execute(b.raw)
    rig.fake.outcome_status = [409]
    assert rig.reporter.flush() == 1
    [row] = rig.rows(deliveries)
    assert (row.status, row.http_status, row.error_code) == ("rejected", 409, "E_STATE")
    rig.mono[0] += 3600
    assert rig.reporter.flush() == 0
    assert len(rig.fake.posted) == 1


def test_a_resolution_is_reported_only_after_the_in_doubt_outcome_it_resolves(rig: Rig) -> None:
    b = make_test_bundle(1, tag="fres")
    rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    rig.env.cloud.next_fault = "timeout_before"  # unknown outcome, effect not visible
    outcome = rig.executor.execute(b.raw)
    assert outcome.state is State.IN_DOUBT
    resolved = rig.executor.resolve(b.approval_id, happened=False, by="admin", note="checked")
    # The in_doubt outcome fails once: the resolution must wait behind it.
    rig.fake.outcome_status = [503]
    assert rig.reporter.flush() == 0
    rig.mono[0] += 10
    assert rig.reporter.flush() == 2
    posted = [p["receipt"] for p in rig.fake.posted]
    assert posted == [
        outcome.receipt.to_value(),  # type: ignore[union-attr]
        outcome.receipt.to_value(),  # type: ignore[union-attr]
        resolved.receipt.to_value(),  # type: ignore[union-attr]
    ]
    assert [(d.kind, d.status) for d in rig.rows(deliveries)] == [
        ("outcome", "delivered"),
        ("resolution", "delivered"),
    ]


def test_feed_tables_are_insert_only_and_the_cursor_never_moves_back(env: Env) -> None:
    with env.engine.begin() as conn:
        advance_cursor(conn, "http://cp", 5, 1)
        advance_cursor(conn, "http://cp", 3, 2)  # behind: ignored, not an error
        assert read_cursor(conn, "http://cp") == 5
        conn.execute(
            sa.insert(revocations).values(approval_id="apv_x", feed="f", feed_seq=1, received_at=1)
        )
        conn.execute(
            sa.insert(deliveries).values(
                kind="outcome", approval_id="apv_x", status="delivered", detail="", at=1
            )
        )
    attacks = [
        sa.update(feed_cursor).values(seq=1),
        sa.delete(feed_cursor),
        sa.update(revocations).values(approval_id="apv_y"),
        sa.delete(revocations),
        sa.update(deliveries).values(status="rejected"),
        sa.delete(deliveries),
    ]
    for attack in attacks:
        with pytest.raises(DBAPIError), env.engine.begin() as conn:
            conn.execute(attack)
    with env.engine.connect() as conn:
        assert read_cursor(conn, "http://cp") == 5


def test_the_daemon_loop_finishes_the_item_in_hand_and_stops_before_the_next(
    env: Env, tmp_path: Path
) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    bundles = [make_test_bundle(n, tag="fstop") for n in (1, 2)]
    for n, b in enumerate(bundles):
        env.cloud.add("ecs.instance", b.resource_id, "Running")
        (inbox / f"{n}.json").write_bytes(b.raw)
    shutdown = Shutdown()
    beat = tmp_path / "heartbeat"
    seen: list[Outcome] = []

    def on_outcome(outcome: Outcome) -> None:
        seen.append(outcome)
        shutdown.request()  # as SIGTERM does while an item is in hand

    serve(
        env.executor,
        DirectorySource(inbox, also_revoked=LedgerRevocations(env.engine)),
        shutdown=shutdown,
        heartbeat=Heartbeat(beat),
        on_outcome=on_outcome,
    )
    assert [o.state for o in seen] == [State.SUCCEEDED]
    assert sorted(p.name for p in inbox.glob("*.json")) == ["1.json"]  # not acknowledged
    assert env.cloud.writes_for(bundles[1].resource_id) == 0
    assert beat.exists()


@pytest.mark.parametrize("status", [408, 425, 429])
def test_a_not_now_4xx_is_retried_not_recorded_as_refused_for_good(rig: Rig, status: int) -> None:
    b = make_test_bundle(1, tag=f"fnn{status}")
    rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    rig.executor.execute(b.raw)
    rig.fake.outcome_status = [status]
    assert rig.reporter.flush() == 0
    assert rig.rows(deliveries) == []  # not given up on
    rig.mono[0] += 10
    assert rig.reporter.flush() == 1
    [row] = rig.rows(deliveries)
    assert (row.status, row.http_status) == ("delivered", 200)


@pytest.mark.parametrize("bundle", [None, "not a bundle", [1, 2], 7])
def test_an_approval_item_whose_bundle_is_not_an_object_is_refused_and_recorded(
    rig: Rig, bundle: Any
) -> None:
    rig.fake.pages = [
        {
            "items": [{"seq": 1, "kind": "approval", "approval_id": "apv_x", "bundle": bundle}],
            "cursor": 1,
        }
    ]
    [delivery] = rig.source.receive(wait_s=0)
    outcome = rig.executor.execute(delivery.raw)
    rig.source.ack(delivery)
    assert outcome.state is None
    assert outcome.refusal_code in (RefusalCode.E_PARSE, RefusalCode.E_ENVELOPE)
    [row] = rig.rows(refusals)
    assert row.code == outcome.refusal_code.value
    assert rig.cursor() == 1
    assert rig.env.cloud.writes == []


def test_a_database_fault_during_recovery_at_start_is_retried_not_fatal(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen in the PostgreSQL fault sweep: a connection cut while the daemon recovered at
    start ended the process (the start was outside the loop's fault handling)."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    b = make_test_bundle(1, tag="fstart")
    env.cloud.add("ecs.instance", b.resource_id, "Running")
    (inbox / "1.json").write_bytes(b.raw)
    calls: list[int] = []

    def recover_failing_once(executor: Executor, **kwargs: Any) -> list[Outcome]:
        calls.append(1)
        if len(calls) == 1:
            raise sa.exc.OperationalError("SELECT 1", {}, Exception("connection cut"))
        return recover_expired(executor, **kwargs)

    monkeypatch.setattr(daemon, "recover_expired", recover_failing_once)
    shutdown = Shutdown()
    beat = tmp_path / "heartbeat"
    seen: list[Outcome] = []

    def on_outcome(outcome: Outcome) -> None:
        seen.append(outcome)
        shutdown.request()

    serve(
        env.executor,
        DirectorySource(inbox),
        shutdown=shutdown,
        heartbeat=Heartbeat(beat),
        error_backoff=Backoff(base=0.001, cap=0.001),
        on_outcome=on_outcome,
    )
    assert len(calls) >= 2
    assert [o.state for o in seen] == [State.SUCCEEDED]
    assert env.cloud.writes_for(b.resource_id) == 1
    assert beat.exists()


# -- the outbox queue (migration 0003) ----------------------------------------------------


def test_an_outcome_is_queued_with_its_commit_and_leaves_the_queue_when_delivered(
    rig: Rig,
) -> None:
    b = make_test_bundle(1, tag="fqueue")
    rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    assert rig.executor.execute(b.raw).state is State.SUCCEEDED
    assert [(r.kind, r.approval_id) for r in rig.rows(outbox)] == [("outcome", b.approval_id)]
    assert rig.reporter.flush() == 1
    assert rig.rows(outbox) == []
    assert [(d.kind, d.approval_id) for d in rig.rows(deliveries)] == [("outcome", b.approval_id)]


def test_the_outbox_reads_the_queue_not_the_ledger(rig: Rig) -> None:
    # Once started, a reporter delivers what is queued: an undelivered terminal row that
    # is not in the queue is not found by scanning (a flush costs the queue, not the
    # ledger); a reporter that starts re-queues it from the ledger and delivers it.
    assert rig.reporter.flush() == 0  # started on an empty ledger
    b = make_test_bundle(1, tag="flost")
    rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    rig.executor.execute(b.raw)
    with rig.env.engine.begin() as conn:
        conn.execute(sa.delete(outbox))  # a lost queue row
    rig.mono[0] += 3600
    assert rig.reporter.flush() == 0
    assert rig.fake.posted == []
    restarted = OutboxReporter(
        engine=rig.env.engine,
        client=checkpoint_client(
            BASE, "executor-token", poll_wait_s=1, transport=httpx.MockTransport(rig.fake.handler)
        ),
        clock=rig.env.clock,
    )
    assert restarted.flush() == 1
    assert [p["receipt"] for p in rig.fake.posted] == [
        json.loads(rig.rows(ledger)[0].receipt)  # the receipt the outcome committed
    ]
    assert rig.rows(outbox) == []


def test_requeueing_skips_what_was_delivered_or_is_queued(rig: Rig) -> None:
    done = make_test_bundle(1, tag="fdone")
    rig.env.cloud.add("ecs.instance", done.resource_id, "Running")
    rig.executor.execute(done.raw)
    assert rig.reporter.flush() == 1
    queued = make_test_bundle(2, tag="fqd")
    rig.env.cloud.add("ecs.instance", queued.resource_id, "Running")
    rig.executor.execute(queued.raw)
    with rig.env.engine.begin() as conn:
        assert requeue_undelivered(conn) == 0
    assert [r.approval_id for r in rig.rows(outbox)] == [queued.approval_id]


def test_a_resolution_is_queued_and_waits_for_its_outcome(rig: Rig) -> None:
    b = make_test_bundle(1, tag="fresq")
    rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    rig.env.cloud.next_fault = "timeout_before"
    assert rig.executor.execute(b.raw).state is State.IN_DOUBT
    rig.executor.resolve(b.approval_id, happened=True, by="admin", note="seen in console")
    assert sorted((r.kind, r.approval_id) for r in rig.rows(outbox)) == [
        ("outcome", b.approval_id),
        ("resolution", b.approval_id),
    ]
    with rig.env.engine.connect() as conn:
        assert [p.kind for p in pending_receipts(conn, 10)] == ["outcome"]
    assert rig.reporter.flush() == 2
    assert rig.rows(outbox) == []


def test_the_upgrade_queues_every_receipt_undelivered_at_the_time(env: Env) -> None:
    # Receipts written before 0003 (simulated: the same ledger rows, every table of 0002
    # and later dropped, the version put back to 0001 and 0002 applied for real, since
    # 0005 reshapes 0002's deliveries table) are queued by the upgrade unless already
    # delivered.
    bundles = [make_test_bundle(n, tag="fmig") for n in (1, 2, 3)]
    for b in bundles:
        env.cloud.add("ecs.instance", b.resource_id, "Running")
    env.executor.execute(bundles[0].raw)  # delivered before the upgrade
    env.cloud.next_fault = "timeout_before"
    env.executor.execute(bundles[1].raw)  # in_doubt, then resolved: two receipts
    env.executor.resolve(bundles[1].approval_id, happened=False, by="admin", note="n")
    env.executor.execute(bundles[2].raw)
    with env.engine.begin() as conn:
        for table in (
            "executor_ledger_holds",  # 0006
            "executor_resends",  # 0005
            "executor_checkpoint_head",  # 0004
            "executor_outbox",  # 0003
            "executor_deliveries",  # 0002 …
            "executor_revocations",
            "executor_feed_cursor",
        ):
            conn.execute(sa.text(f"DROP TABLE {table}"))
        if not is_postgresql(conn):  # 0008's guards on the tables of 0001 (SQLite only)
            for table in ("executor_ledger", "executor_refusals", "executor_resolutions"):
                conn.execute(sa.text(f"DROP TRIGGER {table}_no_replace"))
        # Nor had a ledger of then 0011's effect key.
        if is_postgresql(conn):
            conn.execute(sa.text("ALTER TABLE executor_ledger DROP COLUMN effect_key"))
        else:
            conn.execute(sa.text("DROP INDEX ux_executor_ledger_effect_key"))
            conn.execute(sa.text("DROP TRIGGER executor_ledger_guard"))  # it names the column
            conn.execute(sa.text("ALTER TABLE executor_ledger DROP COLUMN effect_key"))
            # A stand-in: 0009 drops the guard and makes it again.
            conn.execute(
                sa.text(
                    "CREATE TRIGGER executor_ledger_guard BEFORE UPDATE ON executor_ledger "
                    "BEGIN SELECT 1; END"
                )
            )
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0001_ledger'"))
    upgrade(env.engine, MIGRATIONS_DIR, revision="0002_feed")
    with env.engine.begin() as conn:
        conn.execute(
            sa.insert(deliveries).values(
                kind="outcome",
                approval_id=bundles[0].approval_id,
                status="delivered",
                detail="",
                at=1,
            )
        )
    migrate(env.engine)
    with env.engine.connect() as conn:
        queued = sorted((r.kind, r.approval_id) for r in conn.execute(sa.select(outbox)))
    assert queued == [
        ("outcome", bundles[1].approval_id),
        ("outcome", bundles[2].approval_id),
        ("resolution", bundles[1].approval_id),
    ]


# -- one receipt the checkpoint keeps failing ---------------------------------------------


def _executed(rig: Rig, n: int, tag: str, *, in_doubt: bool = False) -> str:
    b = make_test_bundle(n, tag=tag)
    rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    if in_doubt:
        rig.env.cloud.next_fault = "timeout_before"
    outcome = rig.executor.execute(b.raw)
    assert outcome.state is (State.IN_DOUBT if in_doubt else State.SUCCEEDED)
    rig.env.clock.advance(1)  # queued in this order
    return b.approval_id


def test_a_receipt_the_checkpoint_keeps_failing_does_not_hold_up_the_others(rig: Rig) -> None:
    """Seen in review: the flush stopped at the first transient failure and the queue is
    read oldest first, so one receipt the checkpoint kept failing blocked every later
    one for good, in_doubt outcomes (which hold a target at the checkpoint) included."""
    stuck = _executed(rig, 1, "fhol")
    fine = _executed(rig, 2, "fhol")
    doubt = _executed(rig, 3, "fhol", in_doubt=True)
    rig.executor.resolve(doubt, happened=False, by="admin", note="checked")
    rig.fake.answer_for[stuck] = 500

    assert rig.reporter.flush() == 3  # fine, doubt, then doubt's resolution
    assert [(d.kind, d.approval_id) for d in rig.rows(deliveries)] == [
        ("outcome", fine),
        ("outcome", doubt),
        ("resolution", doubt),
    ]
    # The stuck one waits out its own backoff: no request for it until then.
    assert [posted_approval_id(p) for p in rig.fake.posted].count(stuck) == 1
    assert rig.reporter.flush() == 0
    assert [posted_approval_id(p) for p in rig.fake.posted].count(stuck) == 1
    rig.mono[0] += 0.5
    assert rig.reporter.due()
    assert rig.reporter.flush() == 0
    assert [posted_approval_id(p) for p in rig.fake.posted].count(stuck) == 2
    # A receipt queued later is not held up either, while the stuck one backs off.
    later = _executed(rig, 4, "fhol")
    assert rig.reporter.flush() == 1
    assert rig.rows(deliveries)[-1].approval_id == later
    del rig.fake.answer_for[stuck]
    rig.mono[0] += 60
    assert rig.reporter.flush() == 1
    assert rig.rows(outbox) == []


def test_a_receipt_refused_for_good_between_two_delivered_ones_goes_in_the_same_request(
    rig: Rig,
) -> None:
    first, refused, last = (_executed(rig, n, "fmix") for n in range(1, 4))
    rig.fake.answer_for[refused] = 409
    assert rig.reporter.flush() == 3
    assert rig.fake.requests == ["/v1/receipts"]
    assert [posted_approval_id(p) for p in rig.fake.posted] == [first, refused, last]
    assert [
        (r.approval_id, r.status, r.http_status, r.error_code) for r in rig.rows(deliveries)
    ] == [
        (first, "delivered", 200, None),
        (refused, "rejected", 409, "E_STATE"),
        (last, "delivered", 200, None),
    ]
    # Kept as the answer to a POST of its own would have been.
    [row] = [r for r in rig.rows(deliveries) if r.status == "rejected"]
    assert row.detail == '{"error":{"code":"E_STATE","message":"e_state"}}'
    assert rig.rows(outbox) == []


@pytest.mark.parametrize("status", [413, 422])
def test_a_batch_refused_whole_is_posted_again_one_receipt_a_request(rig: Rig, status: int) -> None:
    ids = [_executed(rig, n, f"fwhole{status}") for n in range(1, 3)]
    rig.fake.batch_status = status
    assert rig.reporter.flush() == 2
    assert rig.fake.requests == ["/v1/receipts", "/v1/outcomes", "/v1/outcomes"]
    assert [(r.approval_id, r.status) for r in rig.rows(deliveries)] == [
        (aid, "delivered") for aid in ids
    ]


@pytest.mark.parametrize("answer", [httpx.ConnectError("refused"), 503], ids=repr)
def test_a_batch_cut_in_several_requests_stops_at_the_first_unavailable_answer(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, answer: Any
) -> None:
    """Seen in review: the parts of a batch cut to the body cap were all posted to a
    checkpoint the first part had found unavailable, and each paused the flush again."""
    monkeypatch.setattr(outbox_module, "_BATCH_BYTES", 1)  # one receipt a request
    ids = [_executed(rig, n, "fcutdown") for n in (1, 2, 3)]
    for aid in ids:
        rig.fake.answer_for[aid] = answer
    assert rig.reporter.flush() == 0
    assert rig.fake.requests == ["/v1/receipts"]  # neither the other parts nor one by one
    assert rig.reporter.flush() == 0  # inside the pause: no request at all
    assert rig.fake.requests == ["/v1/receipts"]
    rig.fake.answer_for.clear()
    rig.mono[0] += 0.5  # one pause's backoff, not three
    assert rig.reporter.due()
    assert rig.reporter.flush() == 3
    assert rig.fake.requests == ["/v1/receipts"] * 4
    assert [posted_approval_id(p) for p in rig.fake.posted] == [ids[0], *ids]


def test_a_batch_refused_whole_stops_at_the_first_unavailable_answer_alone(rig: Rig) -> None:
    """As above, for the receipts of a batch refused whole and posted one by one."""
    ids = [_executed(rig, n, "fwholedown") for n in (1, 2, 3)]
    rig.fake.batch_status = 413
    for aid in ids:
        rig.fake.answer_for[aid] = httpx.ConnectError("refused")
    assert rig.reporter.flush() == 0
    assert rig.fake.requests == ["/v1/receipts", "/v1/outcomes"]
    rig.fake.answer_for.clear()
    rig.mono[0] += 0.5
    assert rig.reporter.flush() == 3
    again = ["/v1/receipts", "/v1/outcomes", "/v1/outcomes", "/v1/outcomes"]
    assert rig.fake.requests == ["/v1/receipts", "/v1/outcomes", *again]


def test_a_checkpoint_upgraded_to_the_batch_endpoint_gets_batches_again(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """Seen in review: an executor that once met a checkpoint without ``POST
    /v1/receipts`` posted one receipt a request until it restarted."""
    rig.fake.batches = False
    single = ["/v1/outcomes"]
    n = iter(range(1, 100))

    def flushed_two() -> list[str]:
        """Two receipts queued and flushed: the requests that took them."""
        before = len(rig.fake.requests)
        for _ in range(2):
            _executed(rig, next(n), "fupgrade")
        assert rig.reporter.flush() == 2
        return rig.fake.requests[before:]

    assert flushed_two() == ["/v1/receipts", *single * 2]
    rig.mono[0] += BATCH_RETRY_S - 1
    assert flushed_two() == single * 2  # not asked again before the interval
    rig.mono[0] += 1
    assert flushed_two() == ["/v1/receipts", *single * 2]  # asked again: still old
    rig.fake.batches = True  # the checkpoint is upgraded
    rig.mono[0] += BATCH_RETRY_S - 1
    assert flushed_two() == single * 2
    rig.mono[0] += 1
    with caplog.at_level("INFO", logger="airlock.executor.feed"):
        assert flushed_two() == ["/v1/receipts"]
        assert flushed_two() == ["/v1/receipts"]
    taken = [r.getMessage() for r in caplog.records if "again; posting" in r.getMessage()]
    assert taken == ["the checkpoint takes POST /v1/receipts again; posting receipts in batches"]
    assert rig.rows(outbox) == []


def test_receipts_go_at_most_per_request_a_request(rig: Rig) -> None:
    rig.reporter = OutboxReporter(
        engine=rig.env.engine, client=rig.client, clock=rig.env.clock, per_request=2
    )
    ids = [_executed(rig, n, "fcut") for n in range(1, 6)]
    assert rig.reporter.flush() == 5
    assert rig.fake.requests == ["/v1/receipts"] * 3
    assert [posted_approval_id(p) for p in rig.fake.posted] == ids
    with pytest.raises(ValueError, match="per_request"):
        OutboxReporter(
            engine=rig.env.engine, client=rig.client, clock=rig.env.clock, per_request=51
        )


def test_a_receipt_another_executor_delivered_is_no_longer_retried_here(rig: Rig) -> None:
    """Seen in review: a retry entry for a receipt another executor on the same ledger
    delivered meanwhile was never dropped, so its past due time kept ``due()`` true and
    the daemon flushed on every turn instead of every sweep."""
    stuck = _executed(rig, 1, "fstale")
    rig.fake.answer_for[stuck] = 500
    assert rig.reporter.flush() == 0
    del rig.fake.answer_for[stuck]
    with checkpoint_client(
        BASE, "executor-token", poll_wait_s=1, transport=httpx.MockTransport(rig.fake.handler)
    ) as client:
        other = OutboxReporter(
            engine=rig.env.engine, client=client, clock=rig.env.clock, monotonic=lambda: 0.0
        )
        assert other.flush() == 1  # the other executor delivers it
    assert rig.rows(outbox) == []
    rig.mono[0] += 1
    assert rig.reporter.flush() == 0
    assert not rig.reporter.due()  # next due at the periodic sweep, not at once
    rig.mono[0] += 29
    assert not rig.reporter.due()
    rig.mono[0] += 1
    assert rig.reporter.due()


def test_a_resolution_still_waits_for_its_outcome_that_keeps_failing(rig: Rig) -> None:
    doubt = _executed(rig, 1, "fwait", in_doubt=True)
    rig.executor.resolve(doubt, happened=True, by="admin", note="seen in console")
    rig.fake.answer_for[doubt] = 500
    assert rig.reporter.flush() == 0
    rig.mono[0] += 60
    assert rig.reporter.flush() == 0
    assert [p["receipt"]["payloadType"] for p in rig.fake.posted] == [
        "application/vnd.airlock.receipt.v1+json"
    ] * 2
    assert rig.rows(deliveries) == []  # the resolution was never posted before it
    del rig.fake.answer_for[doubt]
    rig.mono[0] += 60
    assert rig.reporter.flush() == 2
    assert [d.kind for d in rig.rows(deliveries)] == ["outcome", "resolution"]


def test_a_resolution_whose_outcome_is_delivered_in_the_same_flush_goes_in_that_flush(
    rig: Rig,
) -> None:
    # y's resolution, queued after x's, is read before x's outcome is delivered; x's
    # resolution, skipped at that read, must not wait for the next flush.
    y = _executed(rig, 1, "fsame", in_doubt=True)
    assert rig.reporter.flush() == 1
    x = _executed(rig, 2, "fsame", in_doubt=True)
    rig.executor.resolve(x, happened=False, by="admin", note="n")
    rig.env.clock.advance(1)
    rig.executor.resolve(y, happened=False, by="admin", note="n")
    assert rig.reporter.flush() == 3
    assert rig.rows(outbox) == []


@pytest.mark.parametrize(
    "answer",
    [httpx.ConnectError("refused"), httpx.ConnectTimeout("slow"), 502, 503, 504, 429],
    ids=repr,
)
def test_an_unreachable_checkpoint_ends_the_flush_at_the_first_receipt(
    rig: Rig, answer: Any
) -> None:
    ids = [_executed(rig, n, "fdown") for n in (1, 2, 3)]
    for aid in ids:
        rig.fake.answer_for[aid] = answer
    assert rig.reporter.flush() == 0
    assert len(rig.fake.posted) == 1  # not one request per receipt
    assert rig.reporter.flush() == 0  # inside the shared backoff: no request at all
    assert len(rig.fake.posted) == 1
    rig.fake.answer_for.clear()
    rig.mono[0] += 0.5
    assert rig.reporter.flush() == 3


def test_a_checkpoint_failing_every_receipt_of_a_batch_is_paused_after_it(rig: Rig) -> None:
    ids = [_executed(rig, n, "fall") for n in range(1, 7)]
    for aid in ids:
        rig.fake.answer_for[aid] = 500  # its database is down, say
    assert rig.reporter.flush() == 0
    assert [posted_approval_id(p) for p in rig.fake.posted] == ids  # one request
    assert rig.reporter.backing_off == 6
    assert rig.reporter.flush() == 0
    assert len(rig.fake.posted) == 6  # paused as a whole
    rig.fake.answer_for.clear()
    rig.mono[0] += 60
    assert rig.reporter.flush() == 6
    assert rig.reporter.backing_off == 0


def test_a_checkpoint_failing_every_receipt_is_paused_after_a_few(rig: Rig) -> None:
    rig.fake.batches = False  # one receipt a request: the flush stops at the third
    ids = [_executed(rig, n, "fall") for n in range(1, 7)]
    for aid in ids:
        rig.fake.answer_for[aid] = 500  # its database is down, say
    assert rig.reporter.flush() == 0
    assert [posted_approval_id(p) for p in rig.fake.posted] == ids[:3]
    assert rig.reporter.flush() == 0
    assert len(rig.fake.posted) == 3  # paused as a whole
    # After the pause, receipts not yet tried go first: the first three cannot hold
    # the rest up by failing again.
    rig.mono[0] += 0.5
    assert rig.reporter.flush() == 0
    assert [posted_approval_id(p) for p in rig.fake.posted][3:] == ids[3:]
    rig.fake.answer_for.clear()
    rig.mono[0] += 60
    assert rig.reporter.flush() == 6


def test_the_receipts_backing_off_are_remembered_up_to_a_bound(rig: Rig) -> None:
    rig.reporter = OutboxReporter(
        engine=rig.env.engine,
        client=rig.client,
        clock=rig.env.clock,
        backoff=Backoff(cap=4.0, rng=lambda: 1.0),
        monotonic=lambda: rig.mono[0],
        sweep_every_s=30,
        retry_max=2,
    )
    ids = [_executed(rig, n, "fbound") for n in (1, 2, 3)]
    rig.fake.answer_for.update({ids[0]: 500, ids[2]: 500})
    assert rig.reporter.flush() == 1
    rig.fake.answer_for[ids[1]] = 500  # not asked again: delivered
    assert rig.reporter.flush() == 0
    assert [posted_approval_id(p) for p in rig.fake.posted] == ids
    assert rig.reporter.backing_off == 2


# -- the checkpoint's audit head, anchored in our chain ----------------------------------


def _head(n: int) -> dict[str, Any]:
    return {"seq": 10 + n, "hash": f"{n:02x}" * 32}


def _recorded_heads(env: Env) -> list[dict[str, Any]]:
    with env.engine.connect() as conn:
        events = [
            json.loads(e)
            for e in conn.execute(sa.text("SELECT event FROM audit_log ORDER BY seq")).scalars()
        ]
    # As an event of its own, or carried by the event of the transaction that recorded
    # the page's first approval.
    return [
        e if e["type"] == "executor.checkpoint_head" else e["checkpoint_head"]
        for e in events
        if e["type"] == "executor.checkpoint_head" or "checkpoint_head" in e
    ]


def test_the_checkpoint_head_of_a_page_with_items_is_recorded_once(rig: Rig) -> None:
    """Bounded: an empty long-poll page, a page whose head is unchanged (redelivered,
    or read by another executor or after a restart) add nothing to the chain."""
    b = make_test_bundle(1, tag="fhead")
    rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    rig.fake.pages = [
        {"items": [approval(1, b.raw, b.approval_id)], "cursor": 1, "audit_head": _head(1)},
        {"items": [], "cursor": 1, "audit_head": _head(2)},
        {"items": [revocation(2, "apv_0123456789abcdef")], "cursor": 2, "audit_head": _head(1)},
        {"items": [revocation(3, "apv_0123456789abcdee")], "cursor": 3, "audit_head": _head(3)},
    ]
    [outcome] = rig.turn()
    assert outcome.state is State.SUCCEEDED
    for _ in range(3):
        assert rig.turn() == []
    assert [(e["seq"], e["hash"], e["feed"]) for e in _recorded_heads(rig.env)] == [
        (11, "01" * 32, BASE),
        (13, "03" * 32, BASE),
    ]
    # Another source on this ledger (a restart, a second executor) reads the same head.
    fake = FakeCheckpoint(
        pages=[
            {"items": [revocation(4, "apv_0123456789abcded")], "cursor": 4, "audit_head": _head(3)}
        ]
    )
    client = _client(fake)
    other = CheckpointFeedSource(engine=rig.env.engine, client=client, clock=rig.env.clock)
    assert other.receive(wait_s=0) == ()
    client.close()
    assert len(_recorded_heads(rig.env)) == 2
    assert verify_chain(rig.env.engine).ok


@pytest.mark.parametrize(
    "head",
    [
        "absent",
        None,
        [11, "01" * 32],
        {"seq": -1, "hash": "01" * 32},
        {"seq": True, "hash": "01" * 32},
        {"seq": "11", "hash": "01" * 32},
        {"seq": 11, "hash": "AB" * 32},
        {"seq": 11, "hash": "01" * 31},
        {"seq": 11, "hash": "sha256:" + "01" * 32},
        {"seq": 11},
    ],
)
def test_a_page_without_a_valid_head_records_none_and_is_handled_as_before(
    rig: Rig, head: Any
) -> None:
    """An older checkpoint sends no head; a malformed one is not a reason to refuse a
    page or hold up an approval: the head is evidence, not a condition."""
    b = make_test_bundle(1, tag="fnohead")
    rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    page: dict[str, Any] = {
        "items": [approval(1, b.raw, b.approval_id), revocation(2, "apv_0123456789abcdef")],
        "cursor": 2,
    }
    if head != "absent":
        page["audit_head"] = head
    rig.fake.pages = [page]
    [outcome] = rig.turn()
    assert outcome.state is State.SUCCEEDED
    assert rig.env.cloud.writes_for(b.resource_id) == 1
    assert rig.cursor() == 2
    assert [r.approval_id for r in rig.rows(revocations)] == ["apv_0123456789abcdef"]
    assert _recorded_heads(rig.env) == []


# -- what the executor trusts from the checkpoint's answers ------------------------------


@pytest.mark.parametrize(
    "first",
    [
        revocation(2, "apv_0123456789abcdef"),  # replayed: at or before the cursor
        {"seq": "6", "kind": "revocation", "approval_id": "apv_0123456789abcdef"},
        revocation(9, "apv_0123456789abcdef"),  # past the page's own cursor
        "not an item",
    ],
)
def test_a_page_with_nothing_after_the_cursor_is_backed_off_not_polled_in_a_tight_loop(
    rig: Rig, first: Any
) -> None:
    """Seen in review: a page whose first item could not be taken (a checkpoint that
    replays old items, a malformed item) was cut before it and handled as an empty page,
    so the daemon asked again at once, got the same page, and spun without a pause."""
    rig.fake.pages = [{"items": [revocation(5, "apv_fedcba9876543210")], "cursor": 5}]
    rig.source.receive(wait_s=0)
    assert rig.cursor() == 5
    rig.fake.pages = [{"items": [first, revocation(6, "apv_0123456789abcdef")], "cursor": 7}] * 3
    for _ in range(3):
        assert rig.source.receive(wait_s=0) == ()
    assert rig.sleeps == [0.5, 1.0, 2.0]  # one request per backoff, not a tight loop
    assert rig.cursor() == 5
    assert [r.approval_id for r in rig.rows(revocations)] == ["apv_fedcba9876543210"]


class EndlessBody:
    """A response body of ``total`` bytes in 64 KiB chunks that counts what was read."""

    def __init__(self, total: int = 64 << 20, fill: bytes = b" ") -> None:
        self.total, self.fill, self.consumed = total, fill, 0

    def __iter__(self) -> Iterator[bytes]:
        while self.consumed < self.total:
            self.consumed += 1 << 16
            yield self.fill * (1 << 16)


@pytest.mark.parametrize("status", [500, 503, 404])
def test_an_endless_error_body_on_the_feed_is_read_no_further_than_a_cap(
    rig: Rig, status: int
) -> None:
    """Seen in review: a feed page was read capped, but an error answer was read whole,
    so a broken checkpoint or a proxy in front could exhaust the executor's memory."""
    body = EndlessBody()
    rig.fake.pages = [httpx.Response(status, content=body)]
    assert rig.source.receive(wait_s=0) == ()
    assert rig.sleeps == [0.5]
    assert body.consumed <= 1 << 20


def test_empty_answers_given_at_once_are_not_asked_for_again_at_once(rig: Rig) -> None:
    """Seen in review: a checkpoint or a proxy that ignores ``wait`` and answers an empty
    page at once was asked again as fast as the network allowed."""
    assert rig.source.receive(wait_s=5) == ()
    assert rig.sleeps == [1.0]  # no time passed on the rig's clock: the whole second
    rig.mono[0] += 0.25
    assert rig.source.receive(wait_s=0) == ()  # asked not to wait: no pause
    assert rig.sleeps == [1.0]

    class Slow:  # an empty answer that took 0.6 s: paused for the rest of the second
        def __iter__(self) -> Iterator[bytes]:
            rig.mono[0] += 0.6
            yield b'{"items": [], "cursor": 0}'

    rig.fake.pages = [httpx.Response(200, content=Slow())]
    assert rig.source.receive(wait_s=5) == ()
    assert rig.sleeps == [1.0, pytest.approx(0.4)]
    assert [r["wait"] for r in rig.fake.feed_requests] == ["5", "0", "5"]


class DrippingBody:
    """A byte at a time, each a second later (on the rig's clock): every chunk inside any
    read timeout, the whole never arriving."""

    def __init__(self, mono: list[float]) -> None:
        self.mono = mono
        self.sent = 0

    def __iter__(self) -> Iterator[bytes]:
        yield b'{"items": ['
        while self.sent < 10_000:
            self.sent += 1
            self.mono[0] += 1.0
            yield b" "


def test_a_feed_page_dripped_a_byte_at_a_time_is_given_up_after_a_deadline(rig: Rig) -> None:
    """Seen in review: the read timeout bounds one chunk, not the page, so a checkpoint or
    a proxy sending a byte now and then held the executor's feed request for ever."""
    body = DrippingBody(rig.mono)
    rig.fake.pages = [httpx.Response(200, content=body)]
    assert rig.source.receive(wait_s=5) == ()
    assert rig.sleeps == [0.5]  # backed off like any failed page
    assert body.sent <= 5 + 15 + 1  # the wait asked for, then the grace
    assert rig.cursor() == 0


@pytest.mark.parametrize("status", [200, 409, 500, 503])
def test_an_endless_answer_to_a_receipt_is_read_no_further_than_a_cap(
    rig: Rig, status: int
) -> None:
    """Seen in review: the outbox read the checkpoint's whole answer to each POST."""
    rig.fake.batches = False  # one receipt a request (a batch's: the next test)
    b = make_test_bundle(1, tag=f"fendless{status}")
    rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    rig.executor.execute(b.raw)
    body = EndlessBody(fill=b"x")
    rig.fake.answer_for[b.approval_id] = httpx.Response(status, content=body)
    assert rig.reporter.flush() == (1 if status in (200, 409) else 0)
    assert body.consumed <= 1 << 20
    recorded = rig.rows(deliveries)
    if status == 409:
        [row] = recorded
        assert (row.status, row.http_status, row.error_code) == ("rejected", 409, "HTTP 409")
        assert row.detail == "x" * 999 + "…"
    elif status == 200:
        assert [(r.status, r.http_status) for r in recorded] == [("delivered", 200)]
    else:
        assert recorded == []


def test_an_endless_answer_to_a_batch_is_read_no_further_than_a_cap_and_records_nothing(
    rig: Rig,
) -> None:
    b = make_test_bundle(1, tag="fendlessbatch")
    rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    rig.executor.execute(b.raw)
    body = EndlessBody(fill=b"x")
    rig.fake.answer_for[b.approval_id] = httpx.Response(200, content=body)
    # A 200 that is no answer per receipt says nothing of any: the whole checkpoint waits.
    assert rig.reporter.flush() == 0
    assert body.consumed <= 1 << 20
    assert rig.rows(deliveries) == []


def test_a_refusal_answer_with_control_characters_is_recorded_escaped(rig: Rig) -> None:
    """Seen in review: a 4xx answer holding a NUL (in its error code, or in a text body a
    proxy sent) could not be stored on PostgreSQL, so recording the rejected receipt
    failed on every flush and the receipts queued behind it were never delivered."""
    bundles = [make_test_bundle(n, tag="fnul") for n in (1, 2, 3)]
    for b in bundles:
        rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
        rig.executor.execute(b.raw)
    coded, texted, fine = (b.approval_id for b in bundles)
    rig.fake.answer_for[coded] = httpx.Response(409, json={"error": {"code": "E_\x00X"}})
    rig.fake.answer_for[texted] = httpx.Response(400, content=b"bad\x00 \x1b[2Jreceipt")
    assert rig.reporter.flush() == 3
    rows = {r.approval_id: r for r in rig.rows(deliveries)}
    assert (rows[coded].status, rows[coded].error_code) == ("rejected", "HTTP 409")
    assert (rows[texted].status, rows[texted].error_code) == ("rejected", "HTTP 400")
    assert rows[texted].detail == "bad\\x00 \\x1b[2Jreceipt"
    assert all(r.detail.isprintable() for r in rows.values())
    assert rows[fine].status == "delivered"


def test_a_receipt_for_an_approval_the_checkpoint_does_not_hold_is_not_logged_as_one_to_resend(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """A 404: that checkpoint has no such approval and answers every resend the same."""
    bundles = [make_test_bundle(n, tag="f404") for n in (1, 2)]
    for b in bundles:
        rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
        rig.executor.execute(b.raw)
    unknown, untrusted = (b.approval_id for b in bundles)
    rig.fake.answer_for.update({unknown: 404, untrusted: 422})
    with caplog.at_level("ERROR", logger="airlock.executor.feed"):
        assert rig.reporter.flush() == 2
    logged = {
        aid: [r.getMessage() for r in caplog.records if aid in r.getMessage()]
        for aid in (unknown, untrusted)
    }
    [gone] = logged[unknown]
    assert "it has no such approval, so sending it there again cannot help" in gone
    assert f"why and what can: airlock executor receipts list {unknown}" in gone
    assert "receipts resend" not in gone
    [refused] = logged[untrusted]
    assert f"once the cause is fixed: airlock executor receipts resend {untrusted}" in refused


def test_a_404_that_is_not_the_api_s_answer_is_still_one_to_resend_once_fixed(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """Found in review: a 404 from a proxy or a wrong path prefix (no ``E_NOT_FOUND``)
    was told that a resend cannot help, when fixing the URL and resending would."""
    b = make_test_bundle(1, tag="f404proxy")
    rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    rig.executor.execute(b.raw)
    rig.fake.answer_for[b.approval_id] = httpx.Response(404, text="<html>Not Found</html>")
    with caplog.at_level("ERROR", logger="airlock.executor.feed"):
        assert rig.reporter.flush() == 1
    [line] = [r.getMessage() for r in caplog.records if b.approval_id in r.getMessage()]
    assert "HTTP 404 HTTP 404" in line and "no such approval" not in line
    assert f"once the cause is fixed: airlock executor receipts resend {b.approval_id}" in line


@pytest.mark.parametrize("status", [500, 502, 404])
def test_an_error_answer_dripped_a_byte_at_a_time_is_given_up_after_the_deadline(
    rig: Rig, status: int
) -> None:
    """Seen in review: the page deadline held for a 200 only; an error answer was read to
    its 64 KiB cap a chunk per read timeout, so a proxy answering 502 and dripping its
    body held the executor's one feed request for days."""
    body = DrippingBody(rig.mono)
    rig.fake.pages = [httpx.Response(status, content=body)]
    assert rig.source.receive(wait_s=5) == ()
    assert rig.sleeps == [0.5]  # backed off like any failed page
    assert body.sent <= 5 + 15 + 1  # the wait asked for, then the grace
    assert rig.cursor() == 0


@pytest.mark.parametrize("status", [200, 409])
def test_an_answer_to_a_receipt_dripped_a_byte_at_a_time_is_given_up_after_a_deadline(
    rig: Rig, status: int
) -> None:
    """Seen in review: the outbox read the answer to a receipt to its 64 KiB cap a chunk
    per read timeout, so a dripping answer held every receipt queued behind it."""
    rig.fake.batches = False  # one receipt a request: a batch's answer is read whole
    b = make_test_bundle(1, tag=f"fdrip{status}")
    rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    rig.executor.execute(b.raw)
    body = DrippingBody(rig.mono)
    rig.fake.answer_for[b.approval_id] = httpx.Response(status, content=body)
    assert rig.reporter.flush() == 1  # the status decides; the body is only an explanation
    assert body.sent <= 15 + 1
    [row] = rig.rows(deliveries)
    assert (row.status, row.http_status) == (
        ("delivered", 200) if status == 200 else ("rejected", 409)
    )


def test_a_feed_that_ends_before_the_cursor_is_reported_once_and_moves_nothing(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """The checkpoint's database went back (restored from a backup, or reset): its pages
    say so by a ``feed_head`` below the cursor. Its new items still come after the cursor
    (its seqs follow its clock), so the operator is told, once per such head, and the
    cursor stays."""
    b = make_test_bundle(1, tag="fbehind")
    rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    rig.fake.pages = [{"items": [approval(5, b.raw, b.approval_id)], "cursor": 5, "feed_head": 5}]
    rig.turn()
    assert rig.cursor() == 5
    rig.fake.pages = [
        {"items": [], "cursor": 5},  # a checkpoint from before the field
        {"items": [], "cursor": 5, "feed_head": "2"},  # malformed: ignored
        {"items": [], "cursor": 5, "feed_head": True},
        {"items": [], "cursor": 5, "feed_head": 5},  # not behind
        {"items": [], "cursor": 5, "feed_head": 2},  # behind: warned
        {"items": [], "cursor": 5, "feed_head": 2},  # the same head: not again
        {"items": [], "cursor": 5, "feed_head": 3},  # another: warned
    ]
    with caplog.at_level("WARNING", logger="airlock.executor.feed"):
        for _ in range(7):
            assert rig.turn() == []
    warned = [r.getMessage() for r in caplog.records if "restored from a backup" in r.getMessage()]
    assert [w.split(" ends at ")[1].split(",")[0] for w in warned] == ["2", "3"]
    assert f"feed {BASE} ends at 2, before this executor's cursor 5" in warned[0]
    assert rig.cursor() == 5


# -- a checkpoint that drips the head of its answer, on a real socket ---------------------

#: The pace of a dripped body below: well inside any read timeout here.
_DRIP_EVERY_S = 0.2
#: The grace after a page's wait, and the receipt's answer deadline, below: the deadline
#: given up at, and all the room the answer in time that follows gets. That one waits for
#: the server, which takes connections in turn, to see the client has left the dripping
#: one (a drip or two), then for its own answer: 0.5 s was too little on a loaded runner.
#: Without the deadline the given-up exchange takes the whole 60 s drip.
_GRACE_S = 5.0


def test_a_checkpoint_dripping_the_head_of_a_feed_page_is_given_up_at_the_deadline(
    env: Env,
) -> None:
    """httpx's read timeout bounds each read only, and the page's deadline started with
    its body: a checkpoint or a proxy sending the status line and headers a byte at a time
    held the executor's one feed request for as long as it liked."""
    assert (
        DRIPPED_HEAD.byte_every_s < 1 + _GRACE_S
    )  # the client's read timeout: the long-poll, then grace
    revoked = "apv_dripped000001"
    page = {"items": [revocation(1, revoked)], "cursor": 1}
    answers = [
        DRIPPED_HEAD,
        ok_json(json.dumps(page).encode()),
        ok_json(b'{"items": [], "cursor": 1}'),
    ]
    sleeps: list[float] = []
    with (
        serving_drips(answers) as server,
        checkpoint_client(server.url, "executor-token", poll_wait_s=1) as client,
    ):
        source = CheckpointFeedSource(
            engine=env.engine,
            client=client,
            clock=env.clock,
            backoff=Backoff(rng=lambda: 1.0),
            sleep=sleeps.append,
            monotonic=lambda: 0.0,  # the source's own body deadline never passes here
            page_grace_s=_GRACE_S,
        )
        started = time.monotonic()
        assert source.receive(wait_s=1) == ()
        took = time.monotonic() - started
        # The wait asked for, then the grace.
        assert 1 + _GRACE_S <= took < 1 + _GRACE_S + GIVE_UP_SLACK_S
        assert sleeps == [0.5]  # backed off like any failed page
        assert source.cursor() == 0
        with env.engine.connect() as conn:
            assert conn.execute(sa.select(revocations)).all() == []
        # A page answered in time over the same client is taken as before.
        assert source.receive(wait_s=0) == ()
        assert source.cursor() == 1
        with env.engine.connect() as conn:
            assert list(conn.execute(sa.select(revocations.c.approval_id)).scalars()) == [revoked]
        assert sleeps == [0.5]
        assert [r.split(b"?")[0] for r in server.requests] == [b"GET /v1/feed"] * 3


def test_a_checkpoint_dripping_the_head_of_its_answer_to_a_receipt_is_given_up_at_the_deadline(
    env: Env,
) -> None:
    """As for the feed: the receipt's deadline started once the status had arrived, so a
    dripped status line held the outbox, and every receipt queued behind, for ever."""
    b = make_test_bundle(1, tag="fdriphead")
    env.cloud.add("ecs.instance", b.resource_id, "Running")
    env.executor.execute(b.raw)
    mono = [0.0]
    answers = [
        DRIPPED_HEAD,
        ok_json(b'{"results":[{"status":200}]}'),
    ]
    with (
        serving_drips(answers) as server,
        checkpoint_client(server.url, "executor-token", poll_wait_s=1) as client,
    ):
        reporter = OutboxReporter(
            engine=env.engine,
            client=client,
            clock=env.clock,
            backoff=Backoff(rng=lambda: 1.0),
            monotonic=lambda: mono[0],  # the body deadline on this clock never passes
            answer_deadline_s=_GRACE_S,
        )
        started = time.monotonic()
        assert reporter.flush() == 0
        took = time.monotonic() - started
        assert _GRACE_S <= took < _GRACE_S + GIVE_UP_SLACK_S
        with env.engine.connect() as conn:
            assert conn.execute(sa.select(deliveries)).all() == []
            queued = conn.execute(sa.select(outbox.c.kind, outbox.c.approval_id)).all()
        assert [tuple(row) for row in queued] == [("outcome", b.approval_id)]
        assert not reporter.due()  # the checkpoint's shared backoff, as when it is down
        mono[0] += 0.5
        assert reporter.flush() == 1  # answered in time over the same client
        with env.engine.connect() as conn:
            [row] = conn.execute(sa.select(deliveries)).all()
            assert conn.execute(sa.select(outbox)).all() == []
        assert (row.approval_id, row.status, row.http_status) == (b.approval_id, "delivered", 200)
        assert server.requests == [b"POST /v1/receipts HTTP/1.1"] * 2


def test_an_answer_to_a_receipt_whose_body_drips_past_the_deadline_is_decided_by_its_status(
    env: Env,
) -> None:
    """The deadline cuts a dripped body on the wire as it does between chunks: what
    arrived explains the status, which decides (here: refused for good, recorded), and
    the flush goes on rather than pausing every receipt as for a checkpoint that is down."""
    b = make_test_bundle(1, tag="fdripbody")
    env.cloud.add("ecs.instance", b.resource_id, "Running")
    env.executor.execute(b.raw)
    body = b'{"error": {"code": "E_STATE", "message": "a different outcome is recorded"}}'
    head = b"HTTP/1.1 409 Conflict\r\nContent-Length: %d\r\n\r\n" % len(body)
    answers = [Answer(at_once=head, dripped=body, byte_every_s=_DRIP_EVERY_S)]
    with (
        serving_drips(answers) as server,
        checkpoint_client(server.url, "executor-token", poll_wait_s=1) as client,
    ):
        reporter = OutboxReporter(
            engine=env.engine,
            client=client,
            clock=env.clock,
            monotonic=lambda: 0.0,  # the body deadline on this clock never passes
            answer_deadline_s=1.0,
        )
        started = time.monotonic()
        assert reporter.flush() == 1
        took = time.monotonic() - started
    assert 1.0 <= took < 1.0 + GIVE_UP_SLACK_S
    with env.engine.connect() as conn:
        [row] = conn.execute(sa.select(deliveries)).all()
    assert (row.status, row.http_status, row.error_code) == ("rejected", 409, "HTTP 409")
    assert row.detail and body.startswith(row.detail.encode())  # what arrived in time
    assert len(row.detail) < len(body)


# -- a ledger that went back (restored from a backup, or replaced) -------------------------


def _receipt_head(outcome: Outcome) -> dict[str, Any]:
    """Our chain's head as the outcome's receipt names it (what the checkpoint keeps)."""
    assert outcome.receipt is not None
    payload = json.loads(base64.b64decode(outcome.receipt.to_value()["payload"]))
    head = payload["audit_head"]
    return {"seq": head["seq"], "hash": head["hash"], "at": payload["at"]}


def test_a_head_this_ledger_holds_takes_the_page_as_ever(rig: Rig) -> None:
    first, second = (make_test_bundle(n, tag="fheadok") for n in (1, 2))
    for b in (first, second):
        rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    rig.fake.pages = [{"items": [approval(1, first.raw, first.approval_id)], "cursor": 1}]
    [done] = rig.turn()
    rig.fake.pages = [
        {
            "items": [approval(2, second.raw, second.approval_id)],
            "cursor": 2,
            "executor_head": _receipt_head(done),
        }
    ]
    assert [o.state for o in rig.turn()] == [State.SUCCEEDED]
    assert _audit_events(rig.env, "executor.ledger_behind") == []


def _audit_events(env: Env, kind: str) -> list[dict[str, Any]]:
    with env.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT event FROM audit_log ORDER BY seq")).scalars()
        return [e for e in map(json.loads, rows) if e["type"] == kind]


def test_a_ledger_lacking_the_checkpoint_s_record_of_it_holds_the_feed_until_it_is_safe(
    rig: Rig,
) -> None:
    """The checkpoint's last receipt names a head this chain does not hold: the ledger
    went back and may have forgotten approvals it used, so no approval is taken from the
    feed until every approval it could have used has expired. The hold is recorded
    once, is not ended by a head of ours named later (a receipt the restored ledger sent
    since), outlives a restart, and lets revocations through."""
    # Issued while the feed is held: an approval the lost rows cannot have used.
    b = make_test_bundle(1, tag="fbehindl", issued_at=rig.env.clock() + 900)
    mine = make_test_bundle(2, tag="fbehindm")
    for bundle in (b, mine):
        rig.env.cloud.add("ecs.instance", bundle.resource_id, "Running")
    foreign = {"seq": 9_999, "hash": "ab" * 32, "at": rig.env.clock()}
    page = {"items": [approval(3, b.raw, b.approval_id)], "cursor": 3, "executor_head": foreign}
    ours = rig.executor.execute(mine.raw)  # its receipt reaches the checkpoint later
    assert ours.state is State.SUCCEEDED
    revoked = "apv_revokedwhileheld01"
    rig.fake.pages = [{**page, "items": [revocation(2, revoked), *page["items"]]}]
    assert rig.turn() == []
    assert rig.env.cloud.writes_for(b.resource_id) == 0
    assert rig.cursor() == 0  # the approval is still ahead
    assert [r.approval_id for r in rig.rows(revocations)] == [revoked]  # but this counts

    # A receipt of this (restored) ledger accepted since: its head is ours. The hold
    # stays: it ends by time only.
    rig.env.clock.advance(DEFAULT_LEDGER_HOLD_S - 1)
    rig.fake.pages = [{**page, "executor_head": _receipt_head(ours)}]
    assert rig.turn() == []
    # Restarted: a new source on the same ledger holds as well, and records no new hold.
    restarted = CheckpointFeedSource(
        engine=rig.env.engine,
        client=rig.client,
        clock=rig.env.clock,
        sleep=rig.sleeps.append,
        monotonic=lambda: 0.0,
    )
    rig.fake.pages = [page]
    assert restarted.receive(wait_s=0) == ()
    assert rig.env.cloud.writes_for(b.resource_id) == 0
    assert rig.sleeps == [HOLD_POLL_S] * 3
    [behind] = _audit_events(rig.env, "executor.ledger_behind")  # once
    assert behind["checkpoint_records"] == foreign
    assert behind["hold_until"] == rig.env.clock() + 1

    rig.env.clock.advance(1)  # the hold is over
    rig.fake.pages = [page]
    assert [o.state for o in rig.turn()] == [State.SUCCEEDED]
    assert rig.cursor() == 3
    with pytest.raises(DBAPIError), rig.env.engine.begin() as conn:
        conn.execute(sa.delete(ledger_holds))  # insert-only: a hold cannot be lifted early
    assert verify_chain(rig.env.engine).ok


def test_a_hold_starts_no_earlier_than_the_receipt_it_comes_from(rig: Rig) -> None:
    """On a host whose clock is behind the old one's, approvals used just before the
    backup expire later than this clock suggests: the hold counts from the receipt's
    time, if later (and at most one hold length later)."""
    b = make_test_bundle(1, tag="fbehindat", issued_at=rig.env.clock() + 1000)
    rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    ahead = {"seq": 9_999, "hash": "cd" * 32, "at": rig.env.clock() + 100}
    rig.fake.pages = [
        {"items": [approval(1, b.raw, b.approval_id)], "cursor": 1, "executor_head": ahead}
    ]
    assert rig.turn() == []
    [behind] = _audit_events(rig.env, "executor.ledger_behind")
    assert behind["hold_until"] == rig.env.clock() + 100 + DEFAULT_LEDGER_HOLD_S


def test_a_ledger_restored_from_a_backup_does_not_write_an_approval_it_forgot_twice(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Z is executed and reported (the checkpoint keeps the head its receipt names); A is
    executed but its receipt never reaches the checkpoint, which hands A out again. The
    ledger is restored from a backup taken before both, and A's instance was started
    again meanwhile: without the hold, A would be written a second time."""
    engine = make_engine(sqlite_url)
    migrate(engine)
    engine.dispose()
    database = Path(sqlite_url.removeprefix("sqlite:///"))
    backup = tmp_path / "ledger-backup.db"
    backup.write_bytes(database.read_bytes())
    cloud, clock = InMemoryCloud(), FakeClock()
    z, a = make_test_bundle(1, tag="frestz"), make_test_bundle(2, tag="fresta")
    for b in (z, a):
        cloud.add("ecs.instance", b.resource_id, "Running")
    before = make_executor(sqlite_url, cloud, clock)
    reported = _receipt_head(before.execute(z.raw))
    assert before.execute(a.raw).state is State.SUCCEEDED
    before.engine.dispose()

    database.write_bytes(backup.read_bytes())  # the restore
    cloud.set_status("ecs.instance", a.resource_id, "Running")  # started again by someone
    fake = FakeCheckpoint(
        pages=[
            {"items": [approval(7, a.raw, a.approval_id)], "cursor": 7, "executor_head": reported}
        ]
        * 3
    )
    after = make_executor(sqlite_url, cloud, clock)
    client = checkpoint_client(
        BASE, "t", poll_wait_s=1, transport=httpx.MockTransport(fake.handler)
    )
    source = CheckpointFeedSource(
        engine=after.engine, client=client, clock=clock, sleep=lambda _: None, ledger_hold_s=930
    )
    try:
        assert source.receive(wait_s=0) == ()  # held
        clock.advance(930)  # every approval the lost rows could have used has expired
        [delivery] = source.receive(wait_s=0)
        outcome = after.execute(delivery.raw, revoked=source.revoked())
        assert outcome.refusal_code is RefusalCode.E_EXPIRED
        assert cloud.writes_for(a.resource_id) == 1
    finally:
        client.close()
        after.engine.dispose()


@pytest.mark.parametrize("mode", ["once", "daemon"])
def test_a_claimed_row_in_a_restored_ledger_is_not_continued_a_second_time(
    sqlite_url: str, tmp_path: Path, mode: str
) -> None:
    """The backup holds A `claimed` (consumed, not yet written); the ledger it is
    restored over went on to write A and report it. Recovery at start would continue A
    again: the feed is checked first, the hold recorded, and recovery leaves A until it
    has expired, when it is refused."""
    engine = make_engine(sqlite_url)
    migrate(engine)
    engine.dispose()
    database = Path(sqlite_url.removeprefix("sqlite:///"))
    cloud, clock = InMemoryCloud(), FakeClock()
    a = make_test_bundle(1, tag="fclaimed")
    cloud.add("ecs.instance", a.resource_id, "Running")
    crashing = make_executor(sqlite_url, cloud, clock)
    leave_claimed(crashing, cloud, a.raw)
    crashing.engine.dispose()
    backup = tmp_path / "ledger-backup.db"
    backup.write_bytes(database.read_bytes())  # A is claimed in the backup

    clock.advance(LEASE + 1)
    old = make_executor(sqlite_url, cloud, clock)
    [written] = recover_expired(old)  # the old ledger went on and wrote A
    assert written.state is State.SUCCEEDED and cloud.writes_for(a.resource_id) == 1
    reported = _receipt_head(written)
    old.engine.dispose()

    database.write_bytes(backup.read_bytes())  # the restore
    cloud.set_status("ecs.instance", a.resource_id, "Running")  # started again by someone
    page = {"items": [], "cursor": 0, "executor_head": reported}
    fake = FakeCheckpoint(pages=[page, page])
    shutdown = Shutdown()

    def handler(request: httpx.Request) -> httpx.Response:
        if len(fake.feed_requests) == 1:
            shutdown.request()  # the daemon's first turn, after recovery at start
        return fake.handler(request)

    restored = make_executor(sqlite_url, cloud, clock)
    client = checkpoint_client(BASE, "t", poll_wait_s=1, transport=httpx.MockTransport(handler))
    source = CheckpointFeedSource(
        engine=restored.engine, client=client, clock=clock, sleep=lambda _: None
    )
    try:
        if mode == "once":
            assert run(restored, source, once=True) == []
        else:
            serve(restored, source, shutdown=shutdown, poll_wait_s=0)
        assert fake.feed_requests  # checked before recovery; held: A left alone
        assert cloud.writes_for(a.resource_id) == 1
        with restored.engine.connect() as conn:
            assert conn.execute(sa.select(ledger.c.state)).scalars().all() == ["claimed"]
        clock.advance(DEFAULT_LEDGER_HOLD_S)
        [late] = recover_expired(restored)
        assert (late.state, late.refusal_code) == (State.REFUSED, RefusalCode.E_EXPIRED)
        assert cloud.writes_for(a.resource_id) == 1
    finally:
        client.close()
        restored.engine.dispose()


def test_claimed_rows_wait_until_the_ledger_could_be_checked_against_the_checkpoint(
    env: Env,
) -> None:
    """With the checkpoint down as the executor starts, whether the ledger went back is
    unknown: recovery leaves `claimed` rows until the feed has answered once."""
    a = make_test_bundle(1, tag="funchecked")
    env.cloud.add("ecs.instance", a.resource_id, "Running")
    leave_claimed(env.another_worker("crashing"), env.cloud, a.raw)
    env.clock.advance(LEASE + 1)
    fake = FakeCheckpoint(pages=[503, 503, {"items": [], "cursor": 0}])
    client = checkpoint_client(
        BASE, "t", poll_wait_s=1, transport=httpx.MockTransport(fake.handler)
    )
    source = CheckpointFeedSource(
        engine=env.engine, client=client, clock=env.clock, sleep=lambda _: None
    )
    try:
        assert run(env.executor, source, once=True) == []  # the check and the page: 503
        assert not source.ledger_checked
        assert env.cloud.writes_for(a.resource_id) == 0
        assert source.receive(wait_s=0) == ()  # the feed answers: checked
        assert source.ledger_checked
        [done] = recover_expired(env.executor, continue_claimed=ledger_checked(source))
        assert done.state is State.SUCCEEDED
        assert env.cloud.writes_for(a.resource_id) == 1
    finally:
        client.close()


def test_no_receipt_goes_out_before_the_feed_has_answered_once(env: Env) -> None:
    """A restored ledger's first receipts (what its recovery settled) would move the
    checkpoint's record of this executor's head onto the restored chain; the feed would
    then name a head this chain holds and no hold would be recorded, so an approval the
    lost ledger used could be written again. With the feed down as the executor starts,
    nothing is posted until the feed has answered and the ledger is checked (review)."""
    b = make_test_bundle(1, tag="fgate")
    env.cloud.add("ecs.instance", b.resource_id, "Running")
    assert env.executor.execute(b.raw).state is State.SUCCEEDED  # its receipt is queued
    shutdown = Shutdown()
    asked: list[str] = []
    feed = [503, 503, 503, {"items": [], "cursor": 0}]

    def checkpoint(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        if request.url.path == "/v1/feed":
            answer = feed.pop(0) if feed else {"items": [], "cursor": 0}
            if isinstance(answer, int):
                return httpx.Response(answer, json={"error": {"code": "E_UNAVAILABLE"}})
            after = int(request.url.params["after"])
            return httpx.Response(200, json={**answer, "cursor": after})
        shutdown.request()  # the receipt: the test is over
        return httpx.Response(200, json={})

    client = checkpoint_client(BASE, "t", poll_wait_s=0, transport=httpx.MockTransport(checkpoint))
    source = CheckpointFeedSource(
        engine=env.engine, client=client, clock=env.clock, sleep=lambda _: None
    )
    reporter = OutboxReporter(engine=env.engine, client=client, clock=env.clock)
    try:
        serve(
            env.executor,
            source,
            shutdown=shutdown,
            reporter=reporter,
            poll_wait_s=0,
            error_backoff=StopAfterFailures(shutdown, 20),
        )
    finally:
        client.close()
    assert "/v1/receipts" in asked, asked
    before = asked[: asked.index("/v1/receipts")]
    assert before == ["/v1/feed"] * 4  # three unanswered, then the one that checked


def test_a_hold_stops_every_source_before_anything_is_consumed(env: Env, tmp_path: Path) -> None:
    """The feed holds its own approvals; a bundle from an inbox or ``run-bundle`` meets
    the hold at the consume itself: nothing is recorded, the file stays in the inbox,
    and the same bundle runs once the hold is over."""
    b = make_test_bundle(1, tag="fheldall")
    env.cloud.add("ecs.instance", b.resource_id, "Running")
    with env.engine.begin() as conn:
        conn.execute(
            sa.insert(ledger_holds).values(
                feed=BASE,
                head_seq=1,
                head_hash="ab" * 32,
                since=env.clock(),
                until=env.clock() + 100,
            )
        )
    with pytest.raises(LedgerHeld):
        env.executor.execute(b.raw)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "b.json").write_bytes(b.raw)
    source = DirectorySource(inbox, also_revoked=LedgerRevocations(env.engine))
    assert run(env.executor, source, once=True) == []
    assert [p.name for p in inbox.glob("*.json")] == ["b.json"]  # not acknowledged
    assert env.cloud.writes_for(b.resource_id) == 0
    with env.engine.connect() as conn:
        assert conn.execute(sa.select(ledger)).all() == []
        assert conn.execute(sa.select(refusals)).all() == []

    env.clock.advance(120)  # the hold is over
    [outcome] = run(env.executor, source, once=True)
    assert outcome.state is State.SUCCEEDED
    assert list(inbox.glob("*.json")) == []  # acknowledged (moved to done/)
    assert verify_chain(env.engine).ok


class _CountingShutdown(Shutdown):
    """A stop requested after ``limit`` idle waits, which take no time."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.waits: list[float] = []
        self._limit = limit

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        if len(self.waits) >= self._limit:
            self.request()


def test_a_waiting_inbox_during_a_hold_waits_between_attempts_instead_of_spinning(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in review: the inbox's file stays during a hold, so a source that waits only
    on an empty inbox handed it over again at once, and the daemon tried it (a signature
    check, the chain lock, a warning) over a thousand times a second for the hold's
    quarter of an hour. After a hold the loop waits its poll, as it did before."""
    b = make_test_bundle(1, tag="fheldspin")
    env.cloud.add("ecs.instance", b.resource_id, "Running")
    _hold(env, env.clock() + 100)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "b.json").write_bytes(b.raw)
    shutdown = _CountingShutdown(limit=3)
    source = DirectorySource(inbox, sleep=shutdown.sleep)
    attempts: list[bytes] = []
    execute = env.executor.execute

    def counted(raw: bytes, **kw: Any) -> Outcome:
        attempts.append(raw)
        if len(attempts) > 50:  # spinning: stop the loop so the test can fail, not hang
            shutdown.request()
        return execute(raw, **kw)

    monkeypatch.setattr(env.executor, "execute", counted)
    serve(env.executor, source, shutdown=shutdown, poll_wait_s=5.0, monotonic=lambda: 0.0)
    assert len(attempts) == 3  # one per poll wait
    assert shutdown.waits == [5.0] * 3
    assert [p.name for p in inbox.glob("*.json")] == ["b.json"]  # left for after the hold
    assert env.cloud.writes_for(b.resource_id) == 0


def _hold(env: Env, until: int) -> None:
    with env.engine.begin() as conn:
        conn.execute(
            sa.insert(ledger_holds).values(
                feed=BASE, head_seq=1, head_hash="cd" * 32, since=env.clock(), until=until
            )
        )


def test_a_replay_during_a_hold_meets_the_hold_and_records_nothing(env: Env) -> None:
    """The consume's INSERT inserts nothing while a hold is in force, and a taken key
    inserts nothing either: the hold is told apart, under the chain lock, before a replay
    would be recorded."""
    b = make_test_bundle(1, tag="fheldreplay")
    env.cloud.add("ecs.instance", b.resource_id, "Running")
    assert env.executor.execute(b.raw).state is State.SUCCEEDED
    _hold(env, env.clock() + 100)
    with env.engine.connect() as conn:
        head = AuditLog.head(conn)
    with pytest.raises(LedgerHeld):
        env.executor.execute(b.raw)
    with env.engine.connect() as conn:
        assert AuditLog.head(conn) == head  # no refusal event
        assert conn.execute(sa.select(refusals)).all() == []
        assert len(conn.execute(sa.select(ledger)).all()) == 1
    assert env.cloud.writes_for(b.resource_id) == 1


def test_a_hold_ends_at_its_until(env: Env) -> None:
    """In force while now < until, as every reader of the holds judges it."""
    b = make_test_bundle(1, tag="fheldends")
    env.cloud.add("ecs.instance", b.resource_id, "Running")
    _hold(env, env.clock() + 1)
    with pytest.raises(LedgerHeld):
        env.executor.execute(b.raw)
    env.clock.advance(1)
    assert env.executor.execute(b.raw).state is State.SUCCEEDED


def test_a_crash_before_the_consume_commits_leaves_neither_its_row_nor_the_cursor(
    env: Env,
) -> None:
    """The consume and the cursor past its feed item are one transaction: a crash before
    it commits leaves neither, and the item delivered again is written once."""
    b = make_test_bundle(1, tag="fcurtx")
    env.cloud.add("ecs.instance", b.resource_id, "Running")
    page = {"items": [approval(1, b.raw, b.approval_id)], "cursor": 1, "audit_head": _head(1)}
    fake = FakeCheckpoint(pages=[page, page])
    client = checkpoint_client(
        BASE, "t", poll_wait_s=1, transport=httpx.MockTransport(fake.handler)
    )
    crashing = CheckpointFeedSource(
        engine=env.engine,
        client=client,
        clock=env.clock,
        sleep=lambda _: None,
        failpoints=_crash_at("before_cursor_commit"),
    )
    source = CheckpointFeedSource(
        engine=env.engine, client=client, clock=env.clock, sleep=lambda _: None
    )
    try:
        [delivery] = crashing.receive(wait_s=0)
        also = functools.partial(crashing.ack_in, delivery=delivery)
        with pytest.raises(SimulatedCrash):
            env.executor.execute(delivery.raw, revoked=crashing.revoked(), record_also=also)
        with env.engine.connect() as conn:
            assert conn.execute(sa.select(ledger.c.approval_id)).all() == []
            assert read_cursor(conn, source.feed) == 0
        assert env.cloud.calls == []
        assert _recorded_heads(env) == []  # the page's head commits with the consume too
        [again] = source.receive(wait_s=0)
        also = functools.partial(source.ack_in, delivery=again)
        outcome = env.executor.execute(again.raw, revoked=source.revoked(), record_also=also)
        assert outcome.state is State.SUCCEEDED
        assert source.cursor() == 1 and env.cloud.writes_for(b.resource_id) == 1
        assert [(e["seq"], e["hash"]) for e in _recorded_heads(env)] == [(11, "01" * 32)]
    finally:
        client.close()


def test_a_page_of_approvals_commits_only_their_consumes_and_outcomes(env: Env) -> None:
    """No commit of its own for the feed's bookkeeping: the cursor and the checkpoint's
    head are recorded in the consumes' transactions (two approvals: four commits), the
    head once, in the first, and the chain holds one row per transaction."""
    bundles = [make_test_bundle(n, tag="fcommits") for n in (1, 2)]
    for b in bundles:
        env.cloud.add("ecs.instance", b.resource_id, "Running")
    items = [approval(n, b.raw, b.approval_id) for n, b in enumerate(bundles, 1)]
    fake = FakeCheckpoint(pages=[{"items": items, "cursor": 2, "audit_head": _head(4)}])
    client = checkpoint_client(
        BASE, "t", poll_wait_s=1, transport=httpx.MockTransport(fake.handler)
    )
    source = CheckpointFeedSource(
        engine=env.engine, client=client, clock=env.clock, sleep=lambda _: None
    )
    with env.engine.connect() as conn:
        before = AuditLog.head(conn).seq
    commits: list[object] = []

    def count(conn: object) -> None:
        commits.append(conn)

    sa.event.listen(env.engine, "commit", count)
    try:
        deliveries = source.receive(wait_s=0)
        outcomes = [execute_delivery(env.executor, source, d) for d in deliveries]
    finally:
        sa.event.remove(env.engine, "commit", count)
        client.close()
    assert [o.state for o in outcomes] == [State.SUCCEEDED, State.SUCCEEDED]
    assert len(commits) == 4
    assert source.cursor() == 2
    assert [(e["seq"], e["hash"]) for e in _recorded_heads(env)] == [(14, "04" * 32)]
    with env.engine.connect() as conn:
        assert AuditLog.head(conn).seq == before + 4
    assert verify_chain(env.engine).ok


def test_receipts_delivered_apart_from_the_execute_loop_are_all_delivered(rig: Rig) -> None:
    """With ``deliver_apart`` the outbox posts on its own thread, woken by the loop's
    turns: every receipt is delivered and recorded, none twice."""
    bundles = [make_test_bundle(n, tag="fapart") for n in range(1, 5)]
    for b in bundles:
        rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    items = [approval(n, b.raw, b.approval_id) for n, b in enumerate(bundles, 1)]
    # The first answer is the ledger check at start (it takes nothing from the feed).
    rig.fake.pages = [{"items": [], "cursor": 0}, {"items": items, "cursor": 4}]
    shutdown = Shutdown()
    done = threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(rig.rows(deliveries)) < len(bundles):
            time.sleep(0.05)
        done.set()
        shutdown.request()

    watcher = threading.Thread(target=watch)
    watcher.start()
    serve(
        rig.executor,
        rig.source,
        shutdown=shutdown,
        reporter=rig.reporter,
        deliver_apart=True,
        poll_wait_s=0,
    )
    watcher.join()
    assert done.is_set()
    assert sorted(r.approval_id for r in rig.rows(deliveries)) == sorted(
        b.approval_id for b in bundles
    )
    assert len(rig.fake.posted) == len(bundles)
    assert rig.cursor() == 4


def test_recover_once_records_the_cursor_and_head_in_the_consumes_transactions(
    env: Env,
) -> None:
    """``airlock executor --once`` (recover.run) acknowledges as the daemon does: two
    approvals cost their consumes and outcomes, four commits, beside recovery's pass at
    start; the feed's answers, empty or not, none of their own."""
    bundles = [make_test_bundle(n, tag="fonce") for n in (1, 2)]
    for b in bundles:
        env.cloud.add("ecs.instance", b.resource_id, "Running")
    items = [approval(n, b.raw, b.approval_id) for n, b in enumerate(bundles, 1)]
    page = {"items": items, "cursor": 2, "audit_head": _head(5)}
    fake = FakeCheckpoint(pages=[{"items": [], "cursor": 0}, page])
    client = checkpoint_client(
        BASE, "t", poll_wait_s=1, transport=httpx.MockTransport(fake.handler)
    )
    source = CheckpointFeedSource(
        engine=env.engine, client=client, clock=env.clock, sleep=lambda _: None
    )
    commits: list[object] = []

    def count(conn: object) -> None:
        commits.append(conn)

    sa.event.listen(env.engine, "commit", count)
    try:
        outcomes = run(env.executor, source, once=True)
    finally:
        sa.event.remove(env.engine, "commit", count)
        client.close()
    assert [o.state for o in outcomes] == [State.SUCCEEDED, State.SUCCEEDED]
    assert len(commits) == 1 + 4
    assert source.cursor() == 2
    assert [(e["seq"], e["hash"]) for e in _recorded_heads(env)] == [(15, "05" * 32)]
    assert verify_chain(env.engine).ok
