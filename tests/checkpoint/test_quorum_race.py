"""Approvers voting at the same instant on a quorum-2 proposal issue exactly one envelope.

Real concurrency: spawned OS processes, each with its own database connections, released
together by a barrier before every vote — on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import json
import multiprocessing
from collections import Counter

import sqlalchemy as sa

from airlock.protocol import ApprovalStatement
from airlock.store import verify_chain

from .harness import APPROVERS, World
from .race_worker import vote_all

ROUNDS = 8


def test_concurrent_votes_issue_exactly_one_envelope(world: World) -> None:
    work: list[tuple[str, str, str]] = []
    for n in range(ROUNDS):
        rid = f"i-race{n:06d}"
        response = world.submit(
            proposal_id=f"prop_race{n:08d}", operation="delete", resource_id=rid
        )
        assert response.status_code == 201, response.text
        body = response.json()
        assert body["policy"]["quorum"] == 2
        work.append((body["id"], body["action_hash"], rid))

    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(APPROVERS))
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=vote_all,
            args=(world.url, str(world.keys_dir), world.clock(), voter, work, barrier, results),
        )
        for voter in APPROVERS
    ]
    for proc in procs:
        proc.start()
    outcomes = [item for _ in procs for item in results.get(timeout=120)]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0

    with world.checkpoint.engine.connect() as conn:
        per_proposal = Counter(conn.execute(sa.text("SELECT proposal_id FROM approvals")).scalars())
        envelopes = conn.execute(sa.text("SELECT proposal_id, statement FROM approvals")).all()
        states = dict(conn.execute(sa.text("SELECT id, state FROM proposals")).all())
        vote_counts = Counter(conn.execute(sa.text("SELECT proposal_id FROM votes")).scalars())
    for proposal_id, _, _ in work:
        assert per_proposal[proposal_id] == 1, proposal_id  # exactly one envelope
        assert states[proposal_id] == "approved"
        assert vote_counts[proposal_id] == 2  # the third voter came too late
        mine = [o for o in outcomes if o[0] == proposal_id]
        assert sorted(code for _, _, code in mine) == ["E_STATE", "ok:approved", "ok:pending"]
    for _, statement in envelopes:
        parsed = ApprovalStatement.from_json_bytes(bytes(statement))
        assert len(parsed.approvers) == 2 and parsed.quorum == 2
    feed = world.client.get("/v1/feed", headers=world.auth("executor")).json()
    assert len(feed["items"]) == ROUNDS
    assert len({json.dumps(i["bundle"], sort_keys=True) for i in feed["items"]}) == ROUNDS
    assert verify_chain(world.checkpoint.engine).ok
