"""An approval refused before it was consumed is reported to the checkpoint, once.

Without this, the checkpoint showed such an approval as approved, then lapsed, with no
reason (an executor bound to another audience, a clock behind the approval's window...).
The outbox posts the first refusal of each authenticated approval (never a replay, never
a bundle whose signature did not verify) to ``POST /v1/refusals``, as a third kind of
receipt with the same delivery record, re-queue at start and operator resend as the
others. The checkpoint side is tested in tests/checkpoint/.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from airlock.protocol import RefusalCode
from airlock.store import make_engine, upgrade, verify_chain
from services.executor import (
    MIGRATIONS_DIR,
    OutboxReporter,
    checkpoint_client,
    migrate,
    request_resend,
)
from services.executor.models import (
    State,
    deliveries,
    ledger_holds,
    outbox,
    refusals,
    resends,
)
from services.executor.resend import receipt_history

from .conftest import Env
from .support import (
    BINDING,
    TTL,
    FakeClock,
    InMemoryCloud,
    make_executor,
    make_test_bundle,
    with_effect_key_column,
)

BASE = "http://checkpoint.test"


@dataclass
class FakeCheckpoint:
    """Records each POST by path; answers ``status_for[path]`` (default 200)."""

    posted: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    status_for: dict[str, int] = field(default_factory=dict)

    def handler(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method != "POST" or path not in ("/v1/outcomes", "/v1/refusals"):
            return httpx.Response(404, json={"error": {"code": "E_NOT_FOUND"}})
        self.posted.append((path, json.loads(request.content)))
        status = self.status_for.get(path, 200)
        body = {} if status == 200 else {"error": {"code": "E_NOT_FOUND"}}
        return httpx.Response(status, json=body)

    def payloads(self, path: str) -> list[dict[str, Any]]:
        return [
            json.loads(base64.b64decode(body["receipt"]["payload"]))
            for p, body in self.posted
            if p == path
        ]


@dataclass
class Rig:
    env: Env
    fake: FakeCheckpoint
    mono: list[float]
    client: httpx.Client

    def reporter(self) -> OutboxReporter:
        return OutboxReporter(
            engine=self.env.engine,
            client=self.client,
            clock=self.env.clock,
            monotonic=lambda: self.mono[0],
        )

    def rows(self, table: sa.Table, *where: Any) -> list[sa.Row[Any]]:
        with self.env.engine.connect() as conn:
            return list(conn.execute(sa.select(table).where(*where)))


@pytest.fixture
def rig(env: Env) -> Iterator[Rig]:
    fake = FakeCheckpoint()
    client = checkpoint_client(
        BASE, "executor-token", poll_wait_s=1, transport=httpx.MockTransport(fake.handler)
    )
    yield Rig(env, fake, [0.0], client)
    client.close()


def _elsewhere(n: int, tag: str) -> Any:
    """A correctly signed approval for another executor's audience."""
    return make_test_bundle(n, tag=tag, audience="airlock-executor/another-region")


def test_an_approval_for_another_audience_is_reported_to_the_checkpoint(rig: Rig) -> None:
    b = _elsewhere(1, "rfaud")
    rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    outcome = rig.env.executor.execute(b.raw)
    assert outcome.refusal_code is RefusalCode.E_AUDIENCE
    assert [(q.kind, q.approval_id) for q in rig.rows(outbox)] == [("refusal", b.approval_id)]

    assert rig.reporter().flush() == 1
    [payload] = rig.fake.payloads("/v1/refusals")
    assert rig.fake.payloads("/v1/outcomes") == []  # a note, never an outcome
    assert (payload["approval_id"], payload["outcome"], payload["refusal_code"]) == (
        b.approval_id,
        "refused",
        "E_AUDIENCE",
    )
    # The very receipt the refusal committed, byte for byte.
    [row] = rig.rows(refusals)
    assert rig.fake.posted[0][1] == {"receipt": json.loads(row.receipt)}
    [record] = rig.rows(deliveries)
    assert (record.kind, record.approval_id, record.status) == (
        "refusal",
        b.approval_id,
        "delivered",
    )
    assert rig.rows(outbox) == []
    assert rig.env.cloud.writes_for(b.resource_id) == 0
    assert verify_chain(rig.env.engine).ok


def test_only_the_first_refusal_of_an_approval_is_reported(rig: Rig) -> None:
    b = _elsewhere(1, "rfonce")
    for _ in range(3):  # delivered again by an inbox, a restarted feed, run-bundle...
        assert rig.env.executor.execute(b.raw).refusal_code is RefusalCode.E_AUDIENCE
        rig.env.clock.advance(1)
        assert rig.reporter().flush() in (0, 1)
    assert len(rig.rows(refusals)) == 3  # every refusal is recorded
    [payload] = rig.fake.payloads("/v1/refusals")
    [first, *_] = rig.rows(refusals)
    assert payload["at"] == first.at


def test_a_replay_is_not_reported_as_a_refusal(rig: Rig) -> None:
    b = make_test_bundle(1, tag="rfrep")
    rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    assert rig.env.executor.execute(b.raw).state is State.SUCCEEDED
    assert rig.env.executor.execute(b.raw).refusal_code is RefusalCode.E_REPLAY
    assert rig.reporter().flush() == 1
    # The ledger's outcome goes out; the replay is not a refusal of the approval.
    assert [p for p, _ in rig.fake.posted] == ["/v1/outcomes"]
    assert [q.kind for q in rig.rows(outbox)] == []


def test_a_bundle_whose_signature_fails_is_not_reported(rig: Rig) -> None:
    b = make_test_bundle(1, tag="rfsig")
    bundle = json.loads(b.raw)
    sig = bytearray(base64.b64decode(bundle["envelope"]["signatures"][0]["sig"]))
    sig[0] ^= 1
    bundle["envelope"]["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    outcome = rig.env.executor.execute(json.dumps(bundle).encode())
    assert outcome.refusal_code is RefusalCode.E_SIGNATURE
    # Its approval id is not authenticated: nothing can be said to the checkpoint about
    # an approval, and nothing is queued.
    [row] = rig.rows(refusals)
    assert row.approval_id is None
    assert rig.rows(outbox) == []
    assert rig.reporter().flush() == 0
    assert rig.fake.posted == []


def test_an_approval_used_here_and_presented_again_once_expired_is_not_reported(
    rig: Rig,
) -> None:
    """Expiry is checked before the consume, so an approval this ledger consumed (and
    wrote) is refused E_EXPIRED, not E_REPLAY, when a feed redelivers it after a crash or
    a ledger hold: reported, the proposal would say it went unused (found in review)."""
    b = make_test_bundle(1, tag="rfexp")
    rig.env.cloud.add("ecs.instance", b.resource_id, "Running")
    assert rig.env.executor.execute(b.raw).state is State.SUCCEEDED
    rig.env.clock.advance(1000)  # past its expiry
    assert rig.env.executor.execute(b.raw).refusal_code is RefusalCode.E_EXPIRED
    assert [q.kind for q in rig.rows(outbox)] == ["outcome"]
    assert rig.reporter().flush() == 1
    assert [p for p, _ in rig.fake.posted] == ["/v1/outcomes"]
    assert rig.reporter().flush() == 0  # a new reporter's start-up scan finds none either
    assert [p for p, _ in rig.fake.posted] == ["/v1/outcomes"]
    with rig.env.engine.connect() as conn:
        assert [(h.kind, h.state) for h in receipt_history(conn, [b.approval_id])] == [
            ("outcome", "delivered")
        ]
    assert rig.env.cloud.writes_for(b.resource_id) == 1


def _refused_events(rig: Rig) -> list[dict[str, Any]]:
    with rig.env.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT event FROM audit_log ORDER BY seq")).scalars()
        events = [json.loads(e) for e in rows]
    return [e for e in events if e["type"] == "executor.refused"]


def _hold(rig: Rig, since: int) -> None:
    """What the feed source records when the checkpoint's last receipt names an audit
    head this ledger's chain lacks: it was restored from a backup (or replaced)."""
    with rig.env.engine.begin() as conn:
        conn.execute(
            ledger_holds.insert().values(
                feed=BASE, head_seq=5, head_hash="ab" * 32, since=since, until=since + TTL + 30
            )
        )


def test_an_approval_a_restored_ledger_may_have_used_is_not_reported_as_unused(
    rig: Rig,
) -> None:
    """A restored ledger has no row of an approval its lost rows consumed (and wrote);
    once the hold ends, the feed redelivers it, expired: refused E_EXPIRED with no row,
    it was queued as "refused before use" (found in review). The ledger's holds are its
    evidence that its memory is incomplete: an approval issued before one is never
    reported, whatever the refusal (a revocation of it, unknowing, is E_REVOKED)."""
    used = make_test_bundle(1, tag="rfheld")  # used by the rows the restore lost
    revoked = make_test_bundle(2, tag="rfheld")  # and this one, revoked since, unknowing
    _hold(rig, since=rig.env.clock())
    outcome = rig.env.executor.execute(revoked.raw, revoked={revoked.approval_id})
    assert outcome.refusal_code is RefusalCode.E_REVOKED  # (12) comes before the hold
    rig.env.clock.advance(TTL + 31)  # the hold is over, the approval long expired
    outcome = rig.env.executor.execute(used.raw)
    assert outcome.refusal_code is RefusalCode.E_EXPIRED
    assert rig.rows(outbox) == []
    assert rig.reporter().flush() == 0
    assert rig.fake.posted == []
    # Recorded as every refusal is, with why it was not reported.
    assert [(r.approval_id, r.code) for r in rig.rows(refusals)] == [
        (revoked.approval_id, "E_REVOKED"),
        (used.approval_id, "E_EXPIRED"),
    ]
    events = _refused_events(rig)
    assert [e["approval_id"] for e in events] == [revoked.approval_id, used.approval_id]
    assert all("may have used this approval" in e["not_reported"] for e in events)
    assert verify_chain(rig.env.engine).ok


def test_after_a_ledger_hold_an_approval_issued_since_is_reported_as_ever(rig: Rig) -> None:
    """Only an approval that could have been consumed before the hold was recorded may
    be one the ledger forgot: one is consumed no earlier than its issue less the clock
    skew, so one issued a skew after the hold's start or later is reported."""
    since = rig.env.clock()
    _hold(rig, since=since)
    rig.env.clock.advance(TTL + 31)
    skew = BINDING.skew
    before = _elsewhere_at(3, since + skew - 1)  # could have been consumed before `since`
    after = _elsewhere_at(4, since + skew)
    for b in (before, after):
        assert rig.env.executor.execute(b.raw).refusal_code is RefusalCode.E_AUDIENCE
    assert [(q.kind, q.approval_id) for q in rig.rows(outbox)] == [("refusal", after.approval_id)]
    assert rig.reporter().flush() == 1
    [payload] = rig.fake.payloads("/v1/refusals")
    assert payload["approval_id"] == after.approval_id
    assert ["not_reported" in e for e in _refused_events(rig)] == [True, False]


def _elsewhere_at(n: int, issued_at: int) -> Any:
    return make_test_bundle(
        n, tag="rfsince", issued_at=issued_at, audience="airlock-executor/another-region"
    )


def test_a_refusal_recorded_before_the_upgrade_is_not_reported(rig: Rig) -> None:
    """Before migration 0007 nothing recorded whether the ledger had consumed the
    approval when it was refused, so such a refusal is the ledger's record only: the
    start-up scan queues no refusal that was not queued when it was made."""
    b = _elsewhere(1, "rfold")
    rig.env.executor.execute(b.raw)
    with rig.env.engine.begin() as conn:
        conn.execute(sa.delete(outbox))  # what a ledger from before 0007 holds
    assert rig.reporter().flush() == 0
    assert rig.fake.posted == []
    with rig.env.engine.connect() as conn:
        assert receipt_history(conn, [b.approval_id]) == []


def test_a_refusal_receipt_the_checkpoint_rejected_can_be_sent_again(rig: Rig) -> None:
    b = _elsewhere(1, "rfres")
    rig.env.executor.execute(b.raw)
    rig.fake.status_for["/v1/refusals"] = 404  # a checkpoint from before /v1/refusals
    reporter = rig.reporter()
    assert reporter.flush() == 1
    [record] = rig.rows(deliveries)
    assert (record.kind, record.status, record.http_status) == ("refusal", "rejected", 404)
    [history] = [h for h in _history(rig) if h.approval_id == b.approval_id]
    assert (history.kind, history.state) == ("refusal", "rejected")

    del rig.fake.status_for["/v1/refusals"]  # the checkpoint was upgraded
    [queued] = request_resend(rig.env.engine, [b.approval_id], by="alice", note="", now=1)
    assert (queued.kind, queued.attempt) == ("refusal", 2)
    rig.mono[0] += 3600
    assert reporter.flush() == 1
    assert [(d.kind, d.attempt, d.status) for d in rig.rows(deliveries)] == [
        ("refusal", 1, "rejected"),
        ("refusal", 2, "delivered"),
    ]
    first, second = (body for _, body in rig.fake.posted)
    assert first == second  # the same signed receipt


def _history(rig: Rig) -> list[Any]:
    with rig.env.engine.connect() as conn:
        return receipt_history(conn, None)


def test_the_upgrade_to_0007_keeps_every_row_and_takes_refusal_receipts(
    db_url: str, tmp_path: Path
) -> None:
    engine = make_engine(db_url)
    try:
        upgrade(engine, MIGRATIONS_DIR, revision="0006_ledger_holds")
        cloud, clock = InMemoryCloud(), FakeClock()
        executor = make_executor(db_url, cloud, clock, worker_id="w-0006")
        ids = []
        with with_effect_key_column(engine):
            for n in (1, 2):
                b = make_test_bundle(n, tag="rfmig")
                cloud.add("ecs.instance", b.resource_id, "Running")
                assert executor.execute(b.raw).state is State.SUCCEEDED
                ids.append(b.approval_id)
        executor.engine.dispose()
        with engine.begin() as conn:
            conn.execute(
                sa.insert(deliveries).values(
                    kind="outcome",
                    approval_id=ids[0],
                    attempt=1,
                    status="rejected",
                    http_status=422,
                    detail="r",
                    at=5,
                )
            )
            conn.execute(
                sa.insert(resends).values(
                    kind="outcome",
                    approval_id=ids[0],
                    attempt=2,
                    requested_by="alice",
                    requested_at=6,
                    note="",
                )
            )
            conn.execute(sa.delete(outbox).where(outbox.c.approval_id == ids[1]))
            before = {
                t.name: conn.execute(sa.select(t).order_by(*t.primary_key.columns)).all()
                for t in (outbox, deliveries, resends)
            }
            with pytest.raises(DBAPIError), conn.begin_nested():
                conn.execute(
                    sa.insert(outbox).values(kind="refusal", approval_id=ids[1], queued_at=7)
                )
        migrate(engine)
        with engine.connect() as conn:
            after = {
                t.name: conn.execute(sa.select(t).order_by(*t.primary_key.columns)).all()
                for t in (outbox, deliveries, resends)
            }
        assert after == before
        with engine.begin() as conn:
            conn.execute(sa.insert(outbox).values(kind="refusal", approval_id=ids[1], queued_at=7))
            conn.execute(
                sa.insert(deliveries).values(
                    kind="refusal",
                    approval_id=ids[1],
                    attempt=1,
                    status="delivered",
                    detail="",
                    at=8,
                )
            )
        with pytest.raises(DBAPIError), engine.begin() as conn:
            conn.execute(sa.insert(outbox).values(kind="other", approval_id=ids[1], queued_at=7))
        # Still insert-only, on the rebuilt (SQLite) or altered (PostgreSQL) tables.
        for attack in (
            sa.update(deliveries).values(status="delivered"),
            sa.delete(deliveries),
            sa.update(resends).values(requested_by="mallory"),
            sa.delete(resends),
        ):
            with pytest.raises(DBAPIError), engine.begin() as conn:
                conn.execute(attack)
    finally:
        engine.dispose()
