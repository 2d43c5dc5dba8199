"""Sending rejected receipts again (``request_resend``), on SQLite and PostgreSQL.

The checkpoint is ``FakeCheckpoint`` (tests/executor/test_feed_source.py), scripted per
receipt; the executor, its ledger, the outbox reporter, the migrations and the database
triggers are real. ``test_feed.py`` runs the same story against the real checkpoint.
"""

from __future__ import annotations

import base64
import json
import multiprocessing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, IntegrityError

from airlock.store import is_sqlite, make_engine, upgrade, verify_chain
from services.executor import (
    MIGRATIONS_DIR,
    OperatorRefusal,
    OutboxReporter,
    ResendRefused,
    State,
    checkpoint_client,
    migrate,
    plan_redelivery,
    receipt_history,
    request_redelivery,
    request_resend,
)
from services.executor.models import (
    deliveries,
    ledger,
    ledger_holds,
    outbox,
    resends,
    resolutions,
)
from services.executor.receipt_queue import pending_receipts, requeue_undelivered

from .conftest import Env
from .support import (
    FakeClock,
    InMemoryCloud,
    make_executor,
    make_test_bundle,
    with_effect_key_column,
)
from .test_feed_source import BASE, FakeCheckpoint, posted_approval_id
from .workers import redelivery_race, resend_race

_CTX = multiprocessing.get_context("fork")


@dataclass
class Rig:
    env: Env
    fake: FakeCheckpoint
    reporter: OutboxReporter
    mono: list[float]

    def executed(self, n: int, tag: str, *, in_doubt: bool = False) -> str:
        b = make_test_bundle(n, tag=tag)
        self.env.cloud.add("ecs.instance", b.resource_id, "Running")
        if in_doubt:
            self.env.cloud.next_fault = "timeout_before"
        outcome = self.env.executor.execute(b.raw)
        assert outcome.state is (State.IN_DOUBT if in_doubt else State.SUCCEEDED)
        self.env.clock.advance(1)
        return b.approval_id

    def rows(self, table: sa.Table, *where: Any) -> list[sa.Row[Any]]:
        with self.env.engine.connect() as conn:
            return list(conn.execute(sa.select(table).where(*where)))

    def attempts(self, approval_id: str) -> list[tuple[str, int, str, int | None]]:
        found = self.rows(deliveries, deliveries.c.approval_id == approval_id)
        return sorted((d.kind, d.attempt, d.status, d.http_status) for d in found)

    def resend(self, *ids: str, by: str = "alice", note: str = "key installed") -> list[Any]:
        return request_resend(self.env.engine, list(ids), by=by, note=note, now=self.env.clock())

    def flush_later(self) -> int:
        self.mono[0] += 3600  # past every backoff and the periodic sweep
        return self.reporter.flush()


def _events(engine: sa.Engine, kind: str) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT event FROM audit_log ORDER BY seq")).scalars()
        events = [json.loads(row) for row in rows]
    return [e for e in events if e["type"] == kind]


def _reporter(
    env: Env, handler: Callable[[httpx.Request], httpx.Response], mono: list[float]
) -> OutboxReporter:
    client = checkpoint_client(
        BASE, "executor-token", poll_wait_s=1, transport=httpx.MockTransport(handler)
    )
    return OutboxReporter(
        engine=env.engine, client=client, clock=env.clock, monotonic=lambda: mono[0]
    )


@pytest.fixture
def rig(env: Env) -> Iterator[Rig]:
    fake, mono = FakeCheckpoint(), [0.0]
    yield Rig(env, fake, _reporter(env, fake.handler, mono), mono)


def test_a_rejected_receipt_resent_is_delivered_and_both_attempts_stay(rig: Rig) -> None:
    aid = rig.executed(1, "rsok")
    [before] = rig.rows(ledger, ledger.c.approval_id == aid)
    rig.fake.answer_for[aid] = 422  # the checkpoint does not trust the receipt key yet
    assert rig.reporter.flush() == 1
    assert rig.attempts(aid) == [("outcome", 1, "rejected", 422)]
    assert rig.flush_later() == 0  # refused for good: not retried by itself
    assert len(rig.fake.posted) == 1

    del rig.fake.answer_for[aid]  # the key is trusted now
    [queued] = rig.resend(aid)
    assert (queued.kind, queued.attempt, queued.follows.attempt) == ("outcome", 2, 1)
    assert rig.flush_later() == 1
    assert rig.attempts(aid) == [("outcome", 1, "rejected", 422), ("outcome", 2, "delivered", 200)]
    # The same signed receipt both times, and the ledger row untouched.
    assert rig.fake.posted[0] == rig.fake.posted[1] == {"receipt": json.loads(before.receipt)}
    assert rig.rows(ledger, ledger.c.approval_id == aid) == [before]
    assert rig.rows(outbox) == []
    [request] = rig.rows(resends)
    assert (request.approval_id, request.attempt, request.requested_by, request.note) == (
        aid,
        2,
        "alice",
        "key installed",
    )
    [event] = _events(rig.env.engine, "executor.receipt_resend_requested")
    assert {k: event[k] for k in ("kind", "approval_id", "attempt", "by", "note")} == {
        "kind": "outcome",
        "approval_id": aid,
        "attempt": 2,
        "by": "alice",
        "note": "key installed",
    }
    assert event["rejected"] == {"attempt": 1, "http_status": 422, "error_code": "E_X"}
    assert verify_chain(rig.env.engine).ok
    with rig.env.engine.connect() as conn:
        [history] = receipt_history(conn, [aid])
    assert history.state == "delivered"
    assert [(a.attempt, a.status) for a in history.attempts] == [(1, "rejected"), (2, "delivered")]


def test_a_delivered_receipt_is_never_sent_again(rig: Rig) -> None:
    aid = rig.executed(1, "rsdel")
    assert rig.reporter.flush() == 1
    events = len(_events(rig.env.engine, "executor.receipt_resend_requested"))
    with pytest.raises(ResendRefused) as refused:
        rig.resend(aid)
    [(subject, why)] = refused.value.problems
    assert subject == aid
    assert "delivered" in why and "never sent again" in why
    assert rig.rows(resends) == [] and rig.rows(outbox) == []
    assert len(_events(rig.env.engine, "executor.receipt_resend_requested")) == events
    assert rig.flush_later() == 0
    assert len(rig.fake.posted) == 1


def test_one_unknown_or_not_rejected_id_refuses_the_whole_request(rig: Rig) -> None:
    rejected = rig.executed(1, "rsall")
    delivered = rig.executed(2, "rsall")
    waiting = rig.executed(3, "rsall")
    rig.fake.answer_for.update({rejected: 422, waiting: 500})
    assert rig.reporter.flush() == 2  # rejected, delivered; waiting backs off
    unknown = "apv_nosuchapproval1"
    with pytest.raises(ResendRefused) as refused:
        rig.resend(rejected, unknown, delivered, waiting)
    problems = dict(refused.value.problems)
    assert sorted(problems) == sorted([unknown, delivered, waiting])
    assert "no ledger row" in problems[unknown]
    assert "never sent again" in problems[delivered]
    assert "not delivered yet" in problems[waiting]
    # Nothing queued, nothing recorded, for the good one either.
    assert rig.rows(resends) == []
    assert sorted(r.approval_id for r in rig.rows(outbox)) == [waiting]
    assert _events(rig.env.engine, "executor.receipt_resend_requested") == []
    # The refusal itself is audited, with its stable code and every reason.
    assert refused.value.code is OperatorRefusal.E_NOT_REJECTED
    [event] = _events(rig.env.engine, "executor.receipt_resend_refused")
    assert (event["code"], event["by"]) == ("E_NOT_REJECTED", "alice")
    assert event["approval_ids"] == [rejected, unknown, delivered, waiting]
    assert sorted(subject for subject, _ in event["problems"]) == sorted(problems)
    with pytest.raises(ResendRefused, match="not an approval id") as malformed:
        rig.resend(rejected, "prop_not\u202eanapproval")
    assert malformed.value.code is OperatorRefusal.E_INVALID
    with pytest.raises(ResendRefused, match="names who asked") as nobody:
        rig.resend(rejected, by="  ")
    assert nobody.value.code is OperatorRefusal.E_INVALID
    events = _events(rig.env.engine, "executor.receipt_resend_refused")
    assert [(e["code"], e["by"]) for e in events] == [
        ("E_NOT_REJECTED", "alice"),
        ("E_INVALID", "alice"),
        ("E_INVALID", ""),
    ]
    # Operator input reaches the chain printable: the bidi override is escaped.
    assert events[1]["approval_ids"][1] == "prop_not\\u202eanapproval"
    assert rig.rows(resends) == []
    assert verify_chain(rig.env.engine).ok


def test_a_receipt_queued_again_is_not_queued_twice(rig: Rig) -> None:
    aid = rig.executed(1, "rstwice")
    rig.fake.answer_for[aid] = 422
    rig.reporter.flush()
    rig.resend(aid)
    with pytest.raises(ResendRefused, match="already queued again"):
        rig.resend(aid, by="bob")
    assert [(r.attempt, r.requested_by) for r in rig.rows(resends)] == [(2, "alice")]
    # Rejected again: a further resend is a third attempt.
    assert rig.flush_later() == 1
    rig.resend(aid, by="bob")
    del rig.fake.answer_for[aid]
    assert rig.flush_later() == 1
    assert rig.attempts(aid) == [
        ("outcome", 1, "rejected", 422),
        ("outcome", 2, "rejected", 422),
        ("outcome", 3, "delivered", 200),
    ]
    assert [r.attempt for r in rig.rows(resends)] == [2, 3]


def test_all_rejected_resends_exactly_the_rejected_receipts(rig: Rig) -> None:
    ids = [rig.executed(n, "rsevery") for n in (1, 2, 3)]
    rig.fake.answer_for.update({ids[0]: 422, ids[2]: 404})
    assert rig.reporter.flush() == 3
    queued = request_resend(rig.env.engine, None, by="alice", note="", now=rig.env.clock())
    assert sorted(r.approval_id for r in queued) == sorted([ids[0], ids[2]])
    rig.fake.answer_for.clear()
    assert rig.flush_later() == 2
    assert request_resend(rig.env.engine, None, by="alice", note="", now=rig.env.clock()) == []
    assert [posted_approval_id(p) for p in rig.fake.posted].count(ids[1]) == 1


def test_a_resend_whose_queue_row_was_lost_is_queued_again_at_start(rig: Rig) -> None:
    aid = rig.executed(1, "rslost")
    rig.fake.answer_for[aid] = 422
    rig.reporter.flush()
    rig.resend(aid)
    with rig.env.engine.begin() as conn:
        conn.execute(sa.delete(outbox))  # the queue is not the record
        assert requeue_undelivered(conn) == 1
        [row] = conn.execute(sa.select(outbox)).all()
        assert (row.approval_id, row.attempt) == (aid, 2)
        conn.execute(sa.delete(outbox))
    del rig.fake.answer_for[aid]
    restarted = _reporter(rig.env, rig.fake.handler, rig.mono)
    assert restarted.flush() == 1
    assert rig.attempts(aid) == [("outcome", 1, "rejected", 422), ("outcome", 2, "delivered", 200)]


def test_a_late_record_of_an_earlier_attempt_keeps_a_resend_queued_meanwhile(rig: Rig) -> None:
    """Two executors on one ledger post the same receipt; the slower one records its
    answer after the other's rejection was recorded and a resend queued. Its record of
    attempt 1 is dropped (the first stands), and it must not take attempt 2's queue row."""
    aid = rig.executed(1, "rslate")
    fast_fake, fast_mono = FakeCheckpoint(answer_for={aid: 422}), [0.0]
    fast = _reporter(rig.env, fast_fake.handler, fast_mono)

    def slow_answer(request: httpx.Request) -> httpx.Response:
        # While this POST is in flight: the other executor is refused, an operator resends.
        assert fast.flush() == 1
        rig.resend(aid)
        error = {"code": "E_RECEIPT", "message": "x"}
        return httpx.Response(200, json={"results": [{"status": 422, "error": error}]})

    slow = _reporter(rig.env, slow_answer, rig.mono)
    assert slow.flush() == 1
    assert rig.attempts(aid) == [("outcome", 1, "rejected", 422)]
    assert [(r.approval_id, r.attempt) for r in rig.rows(outbox)] == [(aid, 2)]
    fast_fake.answer_for.clear()
    fast_mono[0] += 3600
    assert fast.flush() == 1
    assert rig.attempts(aid) == [("outcome", 1, "rejected", 422), ("outcome", 2, "delivered", 200)]


def test_a_resolution_resent_with_its_outcome_waits_for_it(rig: Rig) -> None:
    aid = rig.executed(1, "rsres", in_doubt=True)
    rig.env.executor.resolve(aid, happened=False, by="admin", note="checked")
    rig.fake.answer_for[aid] = 422
    assert rig.reporter.flush() == 2  # the outcome, then its resolution: both refused
    [queued_outcome, queued_resolution] = rig.resend(aid)
    assert (queued_outcome.kind, queued_resolution.kind) == ("outcome", "resolution")
    # The outcome's second attempt fails for now: its resolution must not go before it.
    rig.fake.answer_for[aid] = 500
    with rig.env.engine.connect() as conn:
        assert [p.kind for p in pending_receipts(conn, 10)] == ["outcome"]
    assert rig.flush_later() == 0
    assert [p["receipt"]["payloadType"] for p in rig.fake.posted[2:]] == [
        "application/vnd.airlock.receipt.v1+json"
    ]
    del rig.fake.answer_for[aid]
    assert rig.flush_later() == 2
    posted = [json.loads(base64.b64decode(p["receipt"]["payload"])) for p in rig.fake.posted]
    assert [p["outcome"] for p in posted[-2:]] == ["in_doubt", "resolved"]
    assert rig.attempts(aid) == [
        ("outcome", 1, "rejected", 422),
        ("outcome", 2, "delivered", 200),
        ("resolution", 1, "rejected", 422),
        ("resolution", 2, "delivered", 200),
    ]
    assert len(rig.rows(resolutions)) == 1


def test_eight_processes_resending_one_receipt_queue_it_once(rig: Rig, migrated_url: str) -> None:
    aid = rig.executed(1, "rsrace")
    rig.fake.answer_for[aid] = 422
    rig.reporter.flush()
    barrier, results = _CTX.Barrier(8), _CTX.Queue()
    procs = [
        _CTX.Process(
            target=resend_race,
            kwargs={
                "url": migrated_url,
                "approval_id": aid,
                "by": f"operator-{i}",
                "barrier": barrier,
                "results": results,
                "now": rig.env.clock(),
            },
        )
        for i in range(8)
    ]
    for p in procs:
        p.start()
    out = [results.get(timeout=120) for _ in procs]  # drain before join
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert sorted(o for o, _ in out) == ["queued"] + ["refused"] * 7
    # Serialized by the chain lock, the others see the resend; the UNIQUE claim backs it.
    assert all(
        "already queued again" in why or "queued meanwhile" in why
        for o, why in out
        if o == "refused"
    )
    [request] = rig.rows(resends)
    assert request.attempt == 2
    assert [(r.approval_id, r.attempt) for r in rig.rows(outbox)] == [(aid, 2)]
    assert len(_events(rig.env.engine, "executor.receipt_resend_requested")) == 1
    assert verify_chain(rig.env.engine).ok


# -- delivered receipts sent again, for a checkpoint restored from a backup ---------------


def _redeliver(
    rig: Rig,
    ids: list[str] | None = None,
    *,
    since: int | None = None,
    by: str = "alice",
    note: str = "checkpoint restored",
) -> list[Any]:
    return request_redelivery(
        rig.env.engine, ids, since=since, by=by, note=note, now=rig.env.clock()
    )


def _delivered_at(rig: Rig, approval_id: str, kind: str = "outcome") -> int:
    return max(
        d.at
        for d in rig.rows(deliveries, deliveries.c.approval_id == approval_id)
        if d.kind == kind and d.status == "delivered"
    )


def test_a_delivered_receipt_is_sent_again_only_when_a_redelivery_is_asked_for(rig: Rig) -> None:
    aid = rig.executed(1, "rdok")
    [before] = rig.rows(ledger, ledger.c.approval_id == aid)
    assert rig.reporter.flush() == 1
    delivered_at = _delivered_at(rig, aid)
    with pytest.raises(ResendRefused, match="never sent again"):
        rig.resend(aid)  # a resend is for rejected receipts only
    rig.env.clock.advance(60)

    [queued] = _redeliver(rig, [aid])
    assert (queued.kind, queued.attempt, queued.redelivery) == ("outcome", 2, True)
    assert (queued.follows.attempt, queued.follows.status) == (1, "delivered")
    with pytest.raises(ResendRefused, match="already queued again") as twice:
        _redeliver(rig, [aid], by="bob")
    assert twice.value.code is OperatorRefusal.E_NOT_DELIVERED
    assert rig.flush_later() == 1
    assert rig.attempts(aid) == [("outcome", 1, "delivered", 200), ("outcome", 2, "delivered", 200)]
    # The same signed receipt both times, and the ledger row untouched.
    assert rig.fake.posted[0] == rig.fake.posted[1] == {"receipt": json.loads(before.receipt)}
    assert rig.rows(ledger, ledger.c.approval_id == aid) == [before]
    assert rig.rows(outbox) == []
    [request] = rig.rows(resends)
    assert (request.approval_id, request.attempt, request.requested_by, request.note) == (
        aid,
        2,
        "alice",
        "checkpoint restored",
    )
    # Audited as a redelivery, never as a resend of a rejected receipt.
    assert _events(rig.env.engine, "executor.receipt_resend_requested") == []
    [event] = _events(rig.env.engine, "executor.receipt_redelivery_requested")
    assert {k: event[k] for k in ("kind", "approval_id", "attempt", "by", "note")} == {
        "kind": "outcome",
        "approval_id": aid,
        "attempt": 2,
        "by": "alice",
        "note": "checkpoint restored",
    }
    assert event["delivered_since"] is None
    assert event["delivered"] == {"attempt": 1, "http_status": 200, "at": delivered_at}
    assert verify_chain(rig.env.engine).ok
    with rig.env.engine.connect() as conn:
        [history] = receipt_history(conn, [aid])
    assert history.state == "delivered"
    [asked] = history.resends
    follows = history.follows(asked)
    assert follows is not None and follows.status == "delivered"
    assert rig.flush_later() == 0  # delivered again once, not again and again
    assert len(rig.fake.posted) == 2


def test_delivered_since_queues_exactly_the_receipts_last_delivered_at_or_after_it(
    rig: Rig,
) -> None:
    early = rig.executed(1, "rdsince")
    assert rig.reporter.flush() == 1
    rig.env.clock.advance(100)
    boundary = rig.executed(2, "rdsince")
    assert rig.reporter.flush() == 1
    since = _delivered_at(rig, boundary)
    assert _delivered_at(rig, early) < since
    rig.env.clock.advance(100)
    late, rejected, waiting = (rig.executed(n, "rdsince") for n in (3, 4, 5))
    rig.fake.answer_for.update({rejected: 404, waiting: 500})
    assert rig.reporter.flush() == 2  # late delivered, rejected refused; waiting backs off

    with rig.env.engine.connect() as conn:  # what --dry-run shows; changes nothing
        planned = plan_redelivery(conn, None, since=since)
    assert sorted(r.approval_id for r in planned) == sorted([boundary, late])
    assert rig.rows(resends) == []
    queued = _redeliver(rig, since=since)
    assert [(r.approval_id, r.attempt) for r in queued] == [(r.approval_id, 2) for r in planned]
    events = _events(rig.env.engine, "executor.receipt_redelivery_requested")
    assert sorted(e["approval_id"] for e in events) == sorted([boundary, late])
    assert {e["delivered_since"] for e in events} == {since}
    # Queued already: not selected again. Nothing delivered since: nothing, no event.
    assert _redeliver(rig, since=since) == []
    assert _redeliver(rig, since=rig.env.clock() + 1000) == []
    assert len(_events(rig.env.engine, "executor.receipt_redelivery_requested")) == 2
    assert _events(rig.env.engine, "executor.receipt_redelivery_refused") == []

    rig.fake.answer_for.clear()
    assert rig.flush_later() == 3  # boundary and late again, waiting's first attempt
    posted = [posted_approval_id(p) for p in rig.fake.posted]
    assert (posted.count(early), posted.count(boundary), posted.count(late)) == (1, 2, 2)
    assert posted.count(rejected) == 1  # a rejected receipt is a resend's business
    assert rig.attempts(waiting) == [("outcome", 1, "delivered", 200)]


def test_a_settled_in_doubt_is_redelivered_as_its_resolution_alone(rig: Rig) -> None:
    """Sent again first, the in_doubt would land at a restored checkpoint as an open
    in_doubt on a proposal that moved on (a lapsed one takes its target back and
    withdraws a newer pending proposal) before its resolution closed it (found in
    review): the resolution, which says what became of the write, goes alone."""
    aid = rig.executed(1, "rdres", in_doubt=True)
    assert rig.reporter.flush() == 1  # the in_doubt outcome
    rig.env.clock.advance(60)
    rig.env.executor.resolve(aid, happened=False, by="admin", note="checked")
    assert rig.reporter.flush() == 1  # then its resolution
    outcome_at = _delivered_at(rig, aid)
    resolution_at = _delivered_at(rig, aid, "resolution")
    assert outcome_at < resolution_at
    rig.env.clock.advance(60)
    # By a time that selects both, by one that selects the resolution only, and (below)
    # by name: the resolution alone each time.
    with rig.env.engine.connect() as conn:
        for since in (outcome_at, resolution_at):
            plan = plan_redelivery(conn, None, since=since)
            assert [(r.kind, r.approval_id) for r in plan] == [("resolution", aid)]
        assert plan_redelivery(conn, None, since=resolution_at + 1) == []
    [alone] = _redeliver(rig, since=outcome_at)
    assert (alone.kind, alone.attempt) == ("resolution", 2)
    with rig.env.engine.connect() as conn:
        assert [p.kind for p in pending_receipts(conn, 10)] == ["resolution"]
    assert rig.flush_later() == 1

    [named] = _redeliver(rig, [aid])
    assert (named.kind, named.attempt) == ("resolution", 3)
    assert rig.flush_later() == 1
    posted = [json.loads(base64.b64decode(p["receipt"]["payload"])) for p in rig.fake.posted]
    assert [p["outcome"] for p in posted] == ["in_doubt", "resolved", "resolved", "resolved"]
    assert rig.attempts(aid) == [
        ("outcome", 1, "delivered", 200),
        ("resolution", 1, "delivered", 200),
        ("resolution", 2, "delivered", 200),
        ("resolution", 3, "delivered", 200),
    ]
    assert len(rig.rows(resolutions)) == 1


def test_a_settled_outcome_named_alone_says_its_resolution_goes_instead(rig: Rig) -> None:
    aid = rig.executed(1, "rdset", in_doubt=True)
    assert rig.reporter.flush() == 1
    rig.env.executor.resolve(aid, happened=True, by="admin", note="console shows it")
    rig.fake.answer_for[aid] = 422  # the resolution is refused for now
    assert rig.reporter.flush() == 1
    with pytest.raises(ResendRefused) as refused:
        _redeliver(rig, [aid])
    assert refused.value.code is OperatorRefusal.E_NOT_DELIVERED
    [(subject, why)] = refused.value.problems
    assert subject == aid and "settled by its resolution" in why
    assert rig.rows(resends) == []


def test_one_unknown_or_undelivered_id_refuses_the_whole_redelivery(rig: Rig) -> None:
    delivered = rig.executed(1, "rdall")
    rejected = rig.executed(2, "rdall")
    waiting = rig.executed(3, "rdall")
    rig.fake.answer_for.update({rejected: 422, waiting: 500})
    assert rig.reporter.flush() == 2
    unknown = "apv_nosuchapproval1"
    with pytest.raises(ResendRefused) as refused:
        _redeliver(rig, [delivered, rejected, unknown, waiting])
    assert refused.value.code is OperatorRefusal.E_NOT_DELIVERED
    problems = dict(refused.value.problems)
    assert sorted(problems) == sorted([rejected, unknown, waiting])
    assert "that is a resend, not a redelivery" in problems[rejected]
    assert "no ledger row" in problems[unknown]
    assert "not delivered yet" in problems[waiting]
    # Nothing queued, nothing recorded, for the delivered one either.
    assert rig.rows(resends) == []
    assert sorted(r.approval_id for r in rig.rows(outbox)) == [waiting]
    assert _events(rig.env.engine, "executor.receipt_redelivery_requested") == []
    [event] = _events(rig.env.engine, "executor.receipt_redelivery_refused")
    assert (event["code"], event["by"], event["delivered_since"]) == (
        "E_NOT_DELIVERED",
        "alice",
        None,
    )
    assert event["approval_ids"] == [delivered, rejected, unknown, waiting]
    assert sorted(subject for subject, _ in event["problems"]) == sorted(problems)
    assert _events(rig.env.engine, "executor.receipt_resend_refused") == []
    with pytest.raises(ResendRefused, match="not an approval id") as malformed:
        _redeliver(rig, [delivered, "prop_notanapproval"])
    assert malformed.value.code is OperatorRefusal.E_INVALID
    with pytest.raises(ResendRefused, match="names who asked") as nobody:
        _redeliver(rig, since=0, by=" ")
    assert nobody.value.code is OperatorRefusal.E_INVALID
    assert [e["code"] for e in _events(rig.env.engine, "executor.receipt_redelivery_refused")] == [
        "E_NOT_DELIVERED",
        "E_INVALID",
        "E_INVALID",
    ]
    with pytest.raises(ValueError, match="exactly one"):
        _redeliver(rig)  # neither ids nor a time
    with pytest.raises(ValueError, match="exactly one"):
        _redeliver(rig, [delivered], since=0)
    assert rig.rows(resends) == []
    assert verify_chain(rig.env.engine).ok


def test_eight_processes_redelivering_one_receipt_queue_it_once(
    rig: Rig, migrated_url: str
) -> None:
    """Four name the approval, four ask for everything delivered since a time: one
    request queues the attempt; the others see it queued (named: refused; by time:
    nothing left to send)."""
    aid = rig.executed(1, "rdrace")
    assert rig.reporter.flush() == 1
    since = _delivered_at(rig, aid)
    barrier, results = _CTX.Barrier(8), _CTX.Queue()
    procs = [
        _CTX.Process(
            target=redelivery_race,
            kwargs={
                "url": migrated_url,
                "approval_id": aid,
                "since": since if i % 2 else None,
                "by": f"operator-{i}",
                "barrier": barrier,
                "results": results,
                "now": rig.env.clock(),
            },
        )
        for i in range(8)
    ]
    for p in procs:
        p.start()
    out = [results.get(timeout=120) for _ in procs]  # drain before join
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert [o for o, _, _ in out].count("queued") == 1
    for outcome, by, why in out:
        named = int(by.rsplit("-", 1)[1]) % 2 == 0
        if outcome == "refused":
            assert named and ("already queued again" in why or "queued meanwhile" in why), why
        elif outcome == "nothing":
            assert not named
    [request] = rig.rows(resends)
    assert request.attempt == 2
    assert [(r.approval_id, r.attempt) for r in rig.rows(outbox)] == [(aid, 2)]
    assert len(_events(rig.env.engine, "executor.receipt_redelivery_requested")) == 1
    assert verify_chain(rig.env.engine).ok
    assert rig.flush_later() == 1
    assert rig.attempts(aid) == [("outcome", 1, "delivered", 200), ("outcome", 2, "delivered", 200)]


# -- migration 0005 ------------------------------------------------------------------


def test_the_upgrade_to_0005_keeps_every_delivery_record_as_attempt_one(
    db_url: str, tmp_path: Path
) -> None:
    engine = make_engine(db_url)
    try:
        upgrade(engine, MIGRATIONS_DIR, revision="0004_checkpoint_head")
        cloud, clock = InMemoryCloud(), FakeClock()
        executor = make_executor(db_url, cloud, clock, worker_id="w-0004")
        with engine.begin() as conn:
            ledger_holds.create(conn)  # today's execute reads it (0006); dropped below
        ids = []
        with with_effect_key_column(engine):
            for n in (1, 2, 3):
                b = make_test_bundle(n, tag="rsmig")
                cloud.add("ecs.instance", b.resource_id, "Running")
                assert executor.execute(b.raw).state is State.SUCCEEDED
                ids.append(b.approval_id)
        executor.engine.dispose()
        with engine.begin() as conn:
            ledger_holds.drop(conn)
        # What a 0004 reporter recorded: one delivered, one rejected; the third queued.
        with engine.begin() as conn:
            for aid, status, http in ((ids[0], "delivered", 200), (ids[1], "rejected", 422)):
                conn.execute(
                    sa.text(
                        "INSERT INTO executor_deliveries (kind, approval_id, status, "
                        "http_status, error_code, detail, at) VALUES ('outcome', :a, :s, :h, "
                        ":c, :d, 5)"
                    ),
                    {"a": aid, "s": status, "h": http, "c": None, "d": status},
                )
            conn.execute(sa.delete(outbox).where(outbox.c.approval_id.in_(ids[:2])))
            old = conn.execute(sa.text("SELECT * FROM executor_deliveries ORDER BY id")).all()
        migrate(engine)
        with engine.connect() as conn:
            new = conn.execute(sa.select(deliveries).order_by(deliveries.c.id)).all()
            queued = conn.execute(sa.select(outbox)).all()
        assert [tuple(r) for r in new] == [(*r, 1) for r in old]
        assert [(q.approval_id, q.attempt) for q in queued] == [(ids[2], 1)]
        # The old rejected record can be followed up.
        queued_again = request_resend(engine, [ids[1]], by="alice", note="", now=clock())
        assert [(r.approval_id, r.attempt) for r in queued_again] == [(ids[1], 2)]
        # Still insert-only, on the rebuilt (SQLite) or altered (PostgreSQL) table, and
        # the new one too; one record per attempt.
        for attack in (
            sa.update(deliveries).values(status="delivered"),
            sa.delete(deliveries),
            sa.update(resends).values(requested_by="mallory"),
            sa.delete(resends),
        ):
            with pytest.raises(DBAPIError), engine.begin() as conn:
                conn.execute(attack)
        # A second record of an attempt is never stored: PostgreSQL refuses it (UNIQUE);
        # on SQLite migration 0008's guard skips it, as it must to leave the recorder's
        # ON CONFLICT DO NOTHING as it was (a refusal there would be an error).
        second = sa.insert(deliveries).values(
            kind="outcome", approval_id=ids[0], attempt=1, status="rejected", detail="", at=6
        )
        if is_sqlite(engine):
            with engine.begin() as conn:
                assert conn.execute(second).rowcount == 0
        else:
            with pytest.raises(IntegrityError), engine.begin() as conn:
                conn.execute(second)
        with engine.connect() as conn:
            [first] = receipt_history(conn, [ids[0]])
        assert [(a.attempt, a.status) for a in first.attempts] == [(1, "delivered")]
        with engine.begin() as conn:  # the resend's own attempt is a record of its own
            conn.execute(
                sa.insert(deliveries).values(
                    kind="outcome",
                    approval_id=ids[1],
                    attempt=2,
                    status="delivered",
                    detail="",
                    at=7,
                )
            )
        with engine.connect() as conn:
            [history] = receipt_history(conn, [ids[1]])
        assert [(a.attempt, a.status) for a in history.attempts] == [
            (1, "rejected"),
            (2, "delivered"),
        ]
    finally:
        engine.dispose()


# -- the command line ---------------------------------------------------------------------


@pytest.fixture
def receipts_cli(rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """``airlock executor receipts ARGS…`` on the rig's ledger."""
    from typer.testing import CliRunner

    from airlock.cli import app

    monkeypatch.chdir(tmp_path)  # settings read ./.env; never the developer's
    env = {"AIRLOCK_ENV": "dev", "AIRLOCK_EXECUTOR_DATABASE_URL": rig.env.url}

    def airlock(*args: str) -> Any:
        return CliRunner().invoke(app, ["executor", "receipts", *args], env=env)

    return airlock


def test_the_resend_command_says_what_it_did_and_refuses_with_stable_exit_codes(
    rig: Rig, receipts_cli: Callable[..., Any]
) -> None:
    airlock = receipts_cli
    aid = rig.executed(1, "rscli")
    rig.fake.answer_for[aid] = 422
    rig.reporter.flush()
    for usage in (
        ["resend", "--by", "alice"],  # neither ids nor --all-rejected
        ["resend", aid, "--all-rejected", "--by", "alice"],
        ["resend", aid],  # no --by
        ["resend", aid, "--by", " "],
        ["resend", "prop_notanapproval", "--by", "alice"],
        ["list", "apv_"],
    ):
        result = airlock(*usage)
        assert result.exit_code == 2, (usage, result.output)
    unknown = airlock("resend", aid, "apv_nosuchapproval1", "--by", "alice")
    assert unknown.exit_code == 1
    assert "refused (E_NOT_REJECTED): apv_nosuchapproval1: unknown here" in unknown.output
    assert "nothing queued; the refusal is audited" in unknown.output
    dry = airlock("resend", "--all-rejected", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert f"would queue the outcome receipt of {aid} as attempt 2" in dry.output
    assert rig.rows(resends) == [] and rig.rows(outbox) == []

    done = airlock("resend", aid, "--by", "alice", "--note", "key installed")
    assert done.exit_code == 0, done.output
    assert f"queued the outcome receipt of {aid} as attempt 2 (after attempt 1 rejected" in (
        done.output
    )
    listed = airlock("list")
    assert listed.exit_code == 0, listed.output
    assert f"{aid} outcome: queued again" in listed.output
    assert (
        "attempt 2  requested by alice" in listed.output and "note: key installed" in listed.output
    )
    missing = airlock("list", aid, "apv_nosuchapproval1")
    assert missing.exit_code == 1
    assert f"{aid} outcome: queued again" in missing.output
    assert "apv_nosuchapproval1: unknown here" in missing.output


def test_a_receipt_for_an_approval_the_checkpoint_does_not_hold_is_not_listed_as_one_to_resend(
    rig: Rig, receipts_cli: Callable[..., Any]
) -> None:
    """A 404 (a checkpoint restored from a backup, or another checkpoint than the one that
    issued the approval) is answered again to every resend: the list says what can help."""
    airlock = receipts_cli
    unknown, other = rig.executed(1, "rs404a"), rig.executed(2, "rs404b")
    untrusted = rig.executed(3, "rs422")
    rig.fake.answer_for.update({unknown: 404, other: 404, untrusted: 422})
    assert rig.reporter.flush() == 3
    listed = airlock("list")
    assert listed.exit_code == 0, listed.output
    for aid in (unknown, other):
        assert (
            f"{aid} outcome: rejected: the checkpoint has no such approval (404); a resend to "
            "it cannot help" in listed.output
        )
        assert f"{aid} outcome: rejected (send it again" not in listed.output
    assert (
        f"{untrusted} outcome: rejected (send it again with: airlock executor receipts resend)"
        in listed.output
    )
    # Said once, under the receipts, in one line with its code; the remedy is in the docs.
    notes = [x for x in listed.output.splitlines() if x.startswith("note E_NOT_FOUND:")]
    assert len(notes) == 1 and "2 receipt(s)" in notes[0]
    assert "docs/operations.md#receipts-and-their-delivery" in notes[0]
    assert "note E_NOT_FOUND:" in airlock("list", unknown).output
    assert "note E_NOT_FOUND:" not in airlock("list", untrusted).output


def test_the_redelivery_command_takes_a_time_or_named_ids_and_says_what_it_did(
    rig: Rig, receipts_cli: Callable[..., Any]
) -> None:
    from datetime import UTC, datetime

    airlock = receipts_cli
    aid = rig.executed(1, "rdcli")
    assert rig.reporter.flush() == 1
    at = _delivered_at(rig, aid)
    rfc3339 = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for usage in (
        ["resend", "--delivered-since", "yesterday", "--by", "alice"],
        ["resend", "--delivered-since", rfc3339.replace("Z", "+00:00"), "--by", "alice"],
        ["resend", "--delivered-since", rfc3339.replace("T", " "), "--by", "alice"],
        ["resend", "--delivered-since", rfc3339.lower(), "--by", "alice"],
        ["resend", "--delivered-since", "2026-02-30T06:00:00Z", "--by", "alice"],
        ["resend", "--delivered-since", "2026-11-29T24:00:00Z", "--by", "alice"],
        ["resend", "--delivered-since", "-5", "--by", "alice"],
        ["resend", "--delivered-since", "\uff11\uff12\uff13", "--by", "alice"],  # fullwidth 123
        ["resend", "--delivered-since", f"{at}.5", "--by", "alice"],
        # A time still to come (a mistyped year) would quietly send nothing (review).
        ["resend", "--delivered-since", "2999-01-01T00:00:00Z", "--by", "alice"],
        ["resend", "--delivered-since", "99999999999", "--by", "alice", "--dry-run"],
        ["resend", aid, "--delivered-since", str(at), "--by", "alice"],
        ["resend", "--all-rejected", "--delivered-since", str(at), "--by", "alice"],
        ["resend", "--delivered", "--by", "alice"],  # --delivered names ids
        ["resend", "--delivered", "--all-rejected", "--by", "alice"],
        ["resend", "--delivered-since", str(at)],  # no --by
    ):
        result = airlock(*usage)
        assert result.exit_code == 2, (usage, result.output)
    bad = airlock("resend", "--delivered-since", "yesterday", "--by", "alice")
    assert "RFC 3339 UTC time" in bad.output and "integer Unix seconds" in bad.output
    ahead = airlock("resend", "--delivered-since", "2999-01-01T00:00:00Z", "--by", "alice")
    assert "2999-01-01 00:00:00 UTC is in the future" in ahead.output
    assert rig.rows(resends) == []
    assert _events(rig.env.engine, "executor.receipt_redelivery_refused") == []

    for since in (rfc3339, rfc3339.replace("Z", ".999Z"), str(at)):
        dry = airlock("resend", "--delivered-since", since, "--dry-run")
        assert dry.exit_code == 0, dry.output
        assert f"at or after {datetime.fromtimestamp(at, UTC):%Y-%m-%d %H:%M:%S} UTC" in dry.output
        assert (
            f"would queue the outcome receipt of {aid} as attempt 2 (after attempt 1 "
            "delivered (200))" in dry.output
        )
    later = airlock("resend", "--delivered-since", str(at + 1), "--by", "alice")
    assert later.exit_code == 0, later.output
    assert "no receipt delivered since" in later.output
    plain = airlock("resend", aid, "--by", "alice")  # without --delivered: a resend
    assert plain.exit_code == 1
    assert "a delivered receipt is never sent again" in plain.output
    assert rig.rows(resends) == [] and rig.rows(outbox) == []

    done = airlock("resend", aid, "--delivered", "--by", "alice", "--note", "restored at 06:00")
    assert done.exit_code == 0, done.output
    assert f"queued the outcome receipt of {aid} as attempt 2 (after attempt 1 delivered" in (
        done.output
    )
    again = airlock("resend", aid, "--delivered", "--by", "bob")
    assert again.exit_code == 1
    assert "refused (E_NOT_DELIVERED)" in again.output and "already queued again" in again.output
    listed = airlock("list")
    assert listed.exit_code == 0, listed.output
    assert f"{aid} outcome: queued again" in listed.output
    assert "attempt 2  redelivery requested by alice" in listed.output
    assert "note: restored at 06:00" in listed.output
    assert rig.flush_later() == 1
    shown = airlock("list", aid)
    assert shown.exit_code == 0, shown.output
    assert f"{aid} outcome: delivered" in shown.output
    assert "attempt 1  delivered 200" in shown.output
    assert "attempt 2  delivered 200" in shown.output
    assert "every receipt was delivered" in airlock("list").output


@pytest.mark.parametrize("code", ["E_RESOLUTION_CONFLICT", "E_STATE"])
def test_a_resolution_the_checkpoint_holds_another_decision_for_is_not_listed_as_one_to_resend(
    rig: Rig, receipts_cli: Callable[..., Any], code: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A 409 for a resolution: a person resolved the in_doubt at the checkpoint first
    (E_RESOLUTION_CONFLICT: kept there as a conflict; E_STATE: a checkpoint before it).
    A resend gets the same answer for ever: the list and the log say what it means and
    what to do instead (found by a walkthrough)."""
    airlock = receipts_cli
    aid = rig.executed(1, "rs409", in_doubt=True)
    assert rig.reporter.flush() == 1  # the in_doubt, delivered
    rig.env.executor.resolve(aid, happened=False, by="ops", note="nothing in the console")
    rig.fake.answer_for[aid] = httpx.Response(
        409, json={"error": {"code": code, "message": "a person resolved it here"}}
    )
    untrusted = rig.executed(2, "rs409b")
    rig.fake.answer_for[untrusted] = 422
    assert rig.reporter.flush() == 2
    assert ("resolution", 1, "rejected", 409) in rig.attempts(aid)
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "another decision for this in_doubt" in logged and "check the cloud" in logged

    listed = airlock("list")

    assert listed.exit_code == 0, listed.output
    line = next(x for x in listed.output.splitlines() if x.startswith(f"{aid} resolution:"))
    assert "send it again" not in line and "a resend cannot help" in line
    assert ("in conflict" in line) is (code == "E_RESOLUTION_CONFLICT")
    notes = [x for x in listed.output.splitlines() if x.startswith("note R_RESOLUTION_CONFLICT:")]
    assert len(notes) == 1 and "a person resolved it there" in notes[0]
    assert "docs/operations.md#resolving-an-in_doubt" in notes[0]
    assert f"{untrusted} outcome: rejected (send it again" in listed.output  # as before
    assert "note R_RESOLUTION_CONFLICT:" not in airlock("list", untrusted).output
