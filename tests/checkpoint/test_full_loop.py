"""The whole loop: submit → approve → feed → the executor verifies and writes → outcome.

The bundle is verified with the public key set exported by the checkpoint (GET /v1/keys),
executed by the real executor path against an in-memory cloud double, and the executor's
signed receipt lands on the proposal as a verified outcome.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from airlock.protocol import Binding, KeySet, KeyStatus, canonical_bytes, verify_bundle
from airlock.reconcile import ReconcileReport, reconcile
from airlock.store import export, make_engine, read_transaction, verify_chain
from services.executor import (
    CheckpointFeedSource,
    Executor,
    OutboxReporter,
    ReceiptSigner,
    State,
    checkpoint_client,
    migrate,
    receipt_history,
    request_redelivery,
)
from services.executor.models import ledger
from services.executor.outbox import delivery_records
from tests.executor.support import InMemoryCloud, receipt_keyset, receipt_signer

from .harness import AUDIENCE, START, World, approved, signed_receipt

RESOURCE = "i-t4n0example"
BINDING = Binding(AUDIENCE, "alibaba", "5123456789012345", "ap-southeast-1")


def _executor(
    world: World,
    tmp_path: Path,
    cloud: InMemoryCloud,
    keys: KeySet,
    signer: ReceiptSigner | None = None,
) -> Executor:
    engine = make_engine(f"sqlite:///{tmp_path / 'ledger.db'}")
    migrate(engine)
    return Executor(
        engine=engine,
        keys=keys,
        binding=BINDING,
        reader=cloud,
        writer=cloud,
        signer=signer or receipt_signer(),
        clock=world.clock,
    )


def _pull(world: World, after: int = 0) -> dict[str, Any]:
    response = world.client.get("/v1/feed", params={"after": after}, headers=world.auth("executor"))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


@pytest.fixture
def trusting_world(world: World) -> World:
    world.checkpoint.receipt_keys = receipt_keyset()
    return world


def test_submit_approve_feed_execute_and_verified_receipt(
    trusting_world: World, tmp_path: Path
) -> None:
    world = trusting_world
    proposal = world.submit(resource_id=RESOURCE).json()
    approved = world.approve("alice", proposal["id"], proposal["action_hash"]).json()
    assert approved["state"] == "approved"

    # The executor side: trust exactly the exported key set, pull, verify, execute.
    keys = KeySet.from_value(world.client.get("/v1/keys").json())
    page = _pull(world)
    [item] = page["items"]
    assert item["kind"] == "approval" and page["cursor"] == item["seq"]
    raw = canonical_bytes(item["bundle"])
    verified = verify_bundle(raw, keys, BINDING, world.clock())
    assert verified.action_hash == proposal["action_hash"]
    assert verified.statement.approval_id == approved["approval"]["approval_id"]
    assert [a.id for a in verified.statement.approvers] == ["alice"]
    assert verified.statement.policy.hash == world.checkpoint.policy.hash

    cloud = InMemoryCloud()
    cloud.add("ecs.instance", RESOURCE, "Running")
    world.clock.advance(5)
    outcome = _executor(world, tmp_path, cloud, keys).execute(raw)
    assert outcome.receipt is not None and cloud.writes_for(RESOURCE) == 1

    reported = world.client.post(
        "/v1/outcomes", json={"receipt": outcome.receipt.to_value()}, headers=world.auth("executor")
    )
    assert reported.status_code == 200, reported.text
    shown = world.client.get(f"/v1/proposals/{proposal['id']}", headers=world.auth("viewer")).json()
    assert shown["state"] == "executed"
    assert shown["outcome"]["outcome"] == "succeeded"
    assert shown["outcome"]["receipt_verified"] is True
    assert shown["outcome"]["late"] is False
    # reporting the same receipt again is harmless
    again = world.client.post(
        "/v1/outcomes", json={"receipt": outcome.receipt.to_value()}, headers=world.auth("executor")
    )
    assert again.status_code == 200
    assert _pull(world, page["cursor"])["items"] == []
    assert verify_chain(world.checkpoint.engine).ok


def test_the_feed_hands_back_the_latest_executor_head_the_receipts_named(
    trusting_world: World, tmp_path: Path
) -> None:
    """An executor whose chain lacks it knows its ledger went back. Receipts are
    accepted out of order (one backs off alone, a resend comes late): an older one
    accepted later, or one posted again, never moves it back."""
    world = trusting_world
    assert _pull(world)["executor_head"] is None
    keys = KeySet.from_value(world.client.get("/v1/keys").json())
    cloud = InMemoryCloud()
    executor = _executor(world, tmp_path, cloud, keys)
    receipts, heads = [], []
    for n in (1, 2):
        rid = f"i-t4nhead{n:04d}"
        proposal = world.submit(proposal_id=f"prop_head{n:08d}", resource_id=rid).json()
        approved = world.approve("alice", proposal["id"], proposal["action_hash"]).json()
        cloud.add("ecs.instance", rid, "Running")
        [item] = [
            i
            for i in _pull(world)["items"]
            if i["approval_id"] == approved["approval"]["approval_id"]
        ]
        outcome = executor.execute(canonical_bytes(item["bundle"]))
        assert outcome.receipt is not None and outcome.state is not None
        receipts.append(outcome.receipt.to_value())
        payload = json.loads(base64.b64decode(receipts[-1]["payload"]))
        heads.append({**payload["audit_head"], "at": payload["at"]})
        world.clock.advance(1)
    assert heads[0]["seq"] < heads[1]["seq"]

    def post(receipt: dict[str, Any]) -> None:
        posted = world.client.post(
            "/v1/outcomes", json={"receipt": receipt}, headers=world.auth("executor")
        )
        assert posted.status_code == 200, posted.text

    post(receipts[1])
    assert _pull(world)["executor_head"] == heads[1]
    post(receipts[0])  # the older one, accepted later
    post(receipts[1])  # the same one again
    assert _pull(world)["executor_head"] == heads[1]
    chain = verify_chain(executor.engine)
    assert (chain.head_seq, chain.head_hash) == (heads[1]["seq"], heads[1]["hash"])


def _post_outcome(world: World, n: int, *, seq: int, at: int) -> None:
    """Approve a proposal of its own and post a succeeded receipt for it whose audit
    head is ``seq`` (a hash of its own) and whose time is ``at``."""
    proposal, aid = approved(world, proposal_id=f"prop_pin{n:08d}", resource_id=f"i-t4npin{n:05d}")
    head = {"seq": seq, "hash": f"sha256:{n:064x}"}
    receipt = signed_receipt(aid, proposal["action_hash"], "succeeded", at=at, audit_head=head)
    posted = world.client.post(
        "/v1/outcomes", json={"receipt": receipt}, headers=world.auth("executor")
    )
    assert posted.status_code == 200, posted.text


def _head(world: World) -> tuple[int, str, int]:
    head = _pull(world)["executor_head"]
    return head["seq"], head["hash"], head["at"]


def test_a_receipt_from_a_clock_far_ahead_does_not_pin_the_executor_head(world: World) -> None:
    """One receipt from an executor whose clock jumped 50 years ahead once: the
    receipts after it (a higher seq, the clock back) still move the head, so a ledger
    restored to after the first is still found. The time kept is bounded by ours."""
    _post_outcome(world, 1, seq=10, at=START + 50 * 365 * 86400)
    assert _head(world) == (10, f"sha256:{1:064x}", START + 300)
    world.clock.advance(60)
    _post_outcome(world, 2, seq=500, at=START + 60)
    assert _head(world) == (500, f"sha256:{2:064x}", START + 60)


def test_a_higher_seq_moves_the_executor_head_even_from_a_clock_set_back(world: World) -> None:
    _post_outcome(world, 1, seq=10, at=START)
    world.clock.advance(60)
    _post_outcome(world, 2, seq=11, at=START - 3600)  # the executor's clock was set back
    assert _head(world)[:2] == (11, f"sha256:{2:064x}")


def test_receipts_of_a_restored_chain_move_the_executor_head_onto_it(world: World) -> None:
    """A ledger restored from a backup reports lower seqs of another chain, signed after
    the head recorded: the head follows it (the executor held for the old one when it
    read the feed), so a second restore of that ledger is found too. A late receipt of
    the old chain (lower seq, signed before) still moves nothing."""
    _post_outcome(world, 1, seq=100, at=START)
    world.clock.advance(600)
    _post_outcome(world, 2, seq=60, at=START + 600)  # the restored chain
    assert _head(world) == (60, f"sha256:{2:064x}", START + 600)
    _post_outcome(world, 3, seq=55, at=START + 10)  # late, from before the restore
    assert _head(world) == (60, f"sha256:{2:064x}", START + 600)
    _post_outcome(world, 4, seq=61, at=START + 601)
    assert _head(world)[:2] == (61, f"sha256:{4:064x}")


def test_outcome_reported_late_lands_on_a_lapsed_proposal(
    trusting_world: World, tmp_path: Path
) -> None:
    world = trusting_world
    proposal = world.submit(resource_id=RESOURCE).json()
    world.approve("alice", proposal["id"], proposal["action_hash"])
    keys = KeySet.from_value(world.client.get("/v1/keys").json())
    raw = canonical_bytes(_pull(world)["items"][0]["bundle"])
    cloud = InMemoryCloud()
    cloud.add("ecs.instance", RESOURCE, "Running")
    outcome = _executor(world, tmp_path, cloud, keys).execute(raw)
    assert outcome.receipt is not None

    world.clock.advance(900)
    assert world.checkpoint.sweep()["lapsed"] == 1
    reported = world.client.post(
        "/v1/outcomes", json={"receipt": outcome.receipt.to_value()}, headers=world.auth("executor")
    )
    body = reported.json()
    assert body["state"] == "executed" and body["outcome"]["late"] is True


def test_receipt_from_an_untrusted_key_is_refused(trusting_world: World, tmp_path: Path) -> None:
    world = trusting_world
    proposal = world.submit(resource_id=RESOURCE).json()
    world.approve("alice", proposal["id"], proposal["action_hash"])
    keys = KeySet.from_value(world.client.get("/v1/keys").json())
    raw = canonical_bytes(_pull(world)["items"][0]["bundle"])
    cloud = InMemoryCloud()
    cloud.add("ecs.instance", RESOURCE, "Running")
    stranger = ReceiptSigner(Ed25519PrivateKey.generate())
    outcome = _executor(world, tmp_path, cloud, keys, stranger).execute(raw)
    assert outcome.receipt is not None
    reported = world.client.post(
        "/v1/outcomes", json={"receipt": outcome.receipt.to_value()}, headers=world.auth("executor")
    )
    assert reported.status_code == 422
    assert reported.json()["error"]["code"] == "E_RECEIPT"
    shown = world.client.get(f"/v1/proposals/{proposal['id']}", headers=world.auth("viewer")).json()
    assert shown["state"] == "approved" and shown["outcome"] is None


def test_rotation_keeps_in_flight_approvals_and_revocation_kills_them(world: World) -> None:
    from airlock.protocol import RefusalCode, Refused
    from services.checkpoint.keys import KeyDirectory

    first = world.submit(proposal_id="prop_rotate000001", resource_id="i-rotate0001").json()
    world.approve("alice", first["id"], first["action_hash"])
    first_page = _pull(world)
    old_bundle = canonical_bytes(first_page["items"][0]["bundle"])

    directory = KeyDirectory(world.keys_dir)
    old_kid = directory.records()[0].kid
    # What `airlock keys stage` and then `airlock keys rotate` do, while serving.
    staged = directory.stage(world.clock(), audit=world.key_audit())
    published = KeySet.from_value(world.client.get("/v1/keys").json())
    assert published[staged.kid].status is KeyStatus.NEXT  # for executors, ahead of time
    directory.rotate(world.clock(), execution_window=900, audit=world.key_audit())
    second = world.submit(proposal_id="prop_rotate000002", resource_id="i-rotate0002").json()
    approved = world.approve("alice", second["id"], second["action_hash"]).json()
    # The running checkpoint picked it up, and an executor given the key set at the stage
    # (and not since) verifies it.
    assert approved["approval"]["keyid"] == staged.kid
    new_bundle = canonical_bytes(_pull(world, first_page["cursor"])["items"][0]["bundle"])
    assert verify_bundle(new_bundle, published, BINDING, world.clock()).keyid == staged.kid

    keys = KeySet.from_value(world.client.get("/v1/keys").json())
    assert verify_bundle(old_bundle, keys, BINDING, world.clock()).keyid == old_kid

    directory.revoke(old_kid, audit=world.key_audit())
    keys = KeySet.from_value(world.client.get("/v1/keys").json())
    with pytest.raises(Refused) as refused:
        verify_bundle(old_bundle, keys, BINDING, world.clock())
    assert refused.value.code is RefusalCode.E_KEY_REVOKED
    assert verify_bundle(new_bundle, keys, BINDING, world.clock()).keyid == staged.kid


def test_a_staged_key_never_signs_an_approval_at_the_running_checkpoint(world: World) -> None:
    """Staged keys are for executors to trust ahead of time: the checkpoint goes on
    signing with the active key, and with no active key it signs nothing, never falling
    back on the staged one."""
    from services.checkpoint.keys import KeyDirectory

    directory = KeyDirectory(world.keys_dir)
    [active] = directory.records()
    staged = directory.stage(world.clock(), audit=world.key_audit())
    one = world.submit(proposal_id="prop_staged000001", resource_id="i-staged0001").json()
    signed = world.approve("alice", one["id"], one["action_hash"])
    assert signed.status_code == 200, signed.text
    assert signed.json()["approval"]["keyid"] == active.kid != staged.kid
    bundle = canonical_bytes(_pull(world)["items"][0]["bundle"])
    assert json.loads(bundle)["envelope"]["signatures"][0]["keyid"] == active.kid

    directory.revoke(active.kid, audit=world.key_audit())
    two = world.submit(proposal_id="prop_staged000002", resource_id="i-staged0002").json()
    refused = world.approve("alice", two["id"], two["action_hash"])
    assert refused.status_code == 503, refused.text
    shown = world.client.get(f"/v1/proposals/{two['id']}", headers=world.auth("viewer")).json()
    assert shown["state"] == "pending" and shown.get("approval") is None
    assert world.client.get("/readyz").status_code == 503


def _bridge(world: World) -> httpx.MockTransport:
    """The executor's own HTTP client, answered by the checkpoint app in this process."""

    def handler(request: httpx.Request) -> httpx.Response:
        headers = {
            k: v for k, v in request.headers.items() if k in ("authorization", "content-type")
        }
        answer = world.client.request(
            request.method, request.url.raw_path.decode(), content=request.content, headers=headers
        )
        return httpx.Response(
            answer.status_code,
            content=answer.content,
            headers={"content-type": answer.headers.get("content-type", "application/json")},
        )

    return httpx.MockTransport(handler)


def test_an_approval_an_executor_of_another_audience_refuses_shows_why_on_the_proposal(
    trusting_world: World, tmp_path: Path
) -> None:
    """The real feed source, executor and outbox against the real checkpoint: the refusal
    before the consume reaches the proposal as a note, its state untouched, nothing
    written; the executor's receipt of it is recorded delivered."""
    world = trusting_world
    proposal = world.submit(resource_id=RESOURCE).json()
    approved = world.approve("alice", proposal["id"], proposal["action_hash"]).json()
    approval_id = approved["approval"]["approval_id"]
    keys = KeySet.from_value(world.client.get("/v1/keys").json())
    cloud = InMemoryCloud()
    cloud.add("ecs.instance", RESOURCE, "Running")
    engine = make_engine(f"sqlite:///{tmp_path / 'ledger.db'}")
    migrate(engine)
    elsewhere = Binding(
        "airlock-executor/another-region", BINDING.provider, BINDING.account, BINDING.region
    )
    executor = Executor(
        engine=engine,
        keys=keys,
        binding=elsewhere,
        reader=cloud,
        writer=cloud,
        signer=receipt_signer(),
        clock=world.clock,
    )
    client = checkpoint_client(
        "http://checkpoint.test",
        world.tokens["executor"],
        poll_wait_s=1,
        transport=_bridge(world),
    )
    try:
        source = CheckpointFeedSource(engine=engine, client=client, clock=world.clock)
        [delivery] = source.receive(wait_s=0)
        outcome = executor.execute(delivery.raw, revoked=source.revoked())
        source.ack(delivery)
        assert (outcome.approval_id, outcome.refusal_code) == (approval_id, "E_AUDIENCE")
        reporter = OutboxReporter(engine=engine, client=client, clock=world.clock)
        assert reporter.flush() == 1
        assert reporter.flush() == 0  # delivered once
    finally:
        client.close()
        engine.dispose()

    shown = world.client.get(f"/v1/proposals/{proposal['id']}", headers=world.auth("viewer")).json()
    assert shown["state"] == "approved"  # a note, not an outcome: it may still run elsewhere
    assert shown["outcome"] is None
    [note] = shown["executor_refusals"]
    assert (note["approval_id"], note["refusal_code"], note["executor"]) == (
        approval_id,
        "E_AUDIENCE",
        "airlock-executor/another-region",
    )
    assert cloud.writes_for(RESOURCE) == 0
    assert verify_chain(world.checkpoint.engine).ok


def _sqlite_path(world: World) -> Path:
    assert world.url.startswith("sqlite:///")
    return Path(world.url.removeprefix("sqlite:///"))


def _copy_checkpoint_db(world: World, frm: Path, to: Path) -> None:
    """A file copy of a SQLite database, as an operator's backup or restore is: every
    connection closed first, so the WAL is in the file and nothing holds it open."""
    world.checkpoint.db.dispose()
    assert not Path(f"{frm}-wal").exists()  # the last connection closed checkpointed it
    for suffix in ("-wal", "-shm"):
        Path(f"{to}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(frm, to)


def _reconcile(world: World, executor: Executor) -> ReconcileReport:
    """What ``airlock audit reconcile`` says of the two chains as they are now."""
    with read_transaction(world.checkpoint.engine) as conn:
        checkpoint_lines = list(export(conn))
    with read_transaction(executor.engine) as conn:
        executor_lines = list(export(conn))
    return reconcile(checkpoint_lines, executor_lines)


def test_a_checkpoint_restored_from_a_backup_learns_its_lost_outcomes_from_a_redelivery(
    sqlite_world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoint's database is restored from a file copy taken before outcomes it
    then learned; the executor's ledger still knows them. A redelivery of what was
    delivered since gives each back, and the restored checkpoint answers each receipt
    as it can: approved → executed; lapsed meanwhile → executed, late; already known →
    the same answer; an in_doubt it has → resolved by its resolution, which is sent
    alone (the in_doubt it settled is not sent again); an approval issued after the
    backup → 404, recorded rejected and listed."""
    world = sqlite_world
    keys = KeySet.from_value(world.client.get("/v1/keys").json())
    cloud = InMemoryCloud()
    executor = _executor(world, tmp_path, cloud, keys)
    client = checkpoint_client(
        "http://checkpoint.test", world.tokens["executor"], poll_wait_s=1, transport=_bridge(world)
    )
    reporter = OutboxReporter(engine=executor.engine, client=client, clock=world.clock)

    def approve(name: str) -> dict[str, Any]:
        rid = f"i-t4nlost{name}0001"
        proposal = world.submit(proposal_id=f"prop_lost{name}000001", resource_id=rid).json()
        issued = world.approve("alice", proposal["id"], proposal["action_hash"]).json()
        cloud.add("ecs.instance", rid, "Running")
        return {"id": proposal["id"], "resource": rid, "aid": issued["approval"]["approval_id"]}

    def execute(p: dict[str, Any], *, in_doubt: bool = False) -> str:
        [item] = [i for i in _pull(world)["items"] if i["approval_id"] == p["aid"]]
        if in_doubt:
            cloud.next_fault = "timeout_before"
        outcome = executor.execute(canonical_bytes(item["bundle"]))
        assert outcome.state is (State.IN_DOUBT if in_doubt else State.SUCCEEDED)
        return str(item["approval_id"])

    def state(p: dict[str, Any]) -> Any:
        shown = world.client.get(f"/v1/proposals/{p['id']}", headers=world.auth("viewer"))
        return shown.json() if shown.status_code == 200 else shown.status_code

    try:
        since = world.clock()
        known = approve("known")  # delivered before the backup: the restored one has it
        known_aid = execute(known)
        doubt = approve("doubt")  # in_doubt delivered before, its resolution after
        doubt_aid = execute(doubt, in_doubt=True)
        assert reporter.flush() == 2
        world.clock.advance(10)
        lapsing = approve("lapsing")  # approved before the backup, executed after
        world.clock.advance(590)
        approved = approve("approved")  # the same, its window still open at the restore
        world.clock.advance(5)
        backup = tmp_path / "checkpoint-backup.db"
        _copy_checkpoint_db(world, _sqlite_path(world), backup)

        lapsing_aid = execute(lapsing)
        approved_aid = execute(approved)
        executor.resolve(doubt_aid, happened=False, by="admin", note="checked: still running")
        lost = approve("lost")  # issued after the backup: the restored one never saw it
        lost_aid = execute(lost)
        assert reporter.flush() == 4
        assert [state(p)["state"] for p in (known, doubt, lapsing, approved, lost)] == [
            "executed",
            "failed",
            "executed",
            "executed",
            "executed",
        ]
        with executor.engine.connect() as conn:
            ledger_before = conn.execute(sa.select(ledger).order_by(ledger.c.approval_id)).all()

        _copy_checkpoint_db(world, backup, _sqlite_path(world))  # the restore
        assert state(lost) == 404
        assert state(lapsing)["state"] == state(approved)["state"] == "approved"
        assert state(doubt)["state"] == "in_doubt"
        world.clock.advance(400)  # lapsing's execution window has passed, approved's not
        assert world.checkpoint.sweep()["lapsed"] == 1
        assert state(lapsing)["state"] == "lapsed"
        # Finished at the executor, never reported here: lapsing, approved and lost.
        assert _reconcile(world, executor).not_reported == 3

        queued = request_redelivery(
            executor.engine,
            None,
            since=since,
            by="alice",
            note="checkpoint restored from its backup",
            now=world.clock(),
        )
        assert sorted((r.approval_id, r.kind) for r in queued) == sorted(
            [
                (known_aid, "outcome"),
                (doubt_aid, "resolution"),
                (lapsing_aid, "outcome"),
                (approved_aid, "outcome"),
                (lost_aid, "outcome"),
            ]
        )
        assert reporter.flush() == 5
        assert reporter.flush() == 0  # each once

        shown = {name: state(p) for name, p in (("known", known), ("doubt", doubt))}
        shown.update({"lapsing": state(lapsing), "approved": state(approved)})
        assert {k: (v["state"], v["outcome"]["late"]) for k, v in shown.items()} == {
            "known": ("executed", False),  # the same receipt again: the same answer
            "doubt": ("failed", False),  # the in_doubt it had, replaced by its resolution
            "lapsing": ("executed", True),  # lapsed at the restored checkpoint: late
            "approved": ("executed", False),
        }
        assert state(lost) == 404
        delivered = {
            (d["approval_id"], d["kind"], d["attempt"]): (d["status"], d["http_status"])
            for d in delivery_records(executor.engine)
        }
        for aid in (known_aid, lapsing_aid, approved_aid):
            assert delivered[(aid, "outcome", 2)] == ("delivered", 200)
        assert delivered[(doubt_aid, "resolution", 2)] == ("delivered", 200)
        assert delivered[(lost_aid, "outcome", 2)] == ("rejected", 404)
        # What the restored checkpoint cannot take stays visible, with why.
        with executor.engine.connect() as conn:
            [left] = receipt_history(conn, None)
            ledger_after = conn.execute(sa.select(ledger).order_by(ledger.c.approval_id)).all()
        assert (left.approval_id, left.kind, left.state) == (lost_aid, "outcome", "rejected")
        assert left.last is not None and left.last.error_code == "E_NOT_FOUND"
        # And the operator is told why a resend would be answered the same, not to resend.
        from typer.testing import CliRunner

        from airlock.cli import app

        monkeypatch.chdir(tmp_path)  # settings read ./.env; never the developer's
        ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
        listed = CliRunner().invoke(
            app,
            ["executor", "receipts", "list"],
            env={"AIRLOCK_ENV": "dev", "AIRLOCK_EXECUTOR_DATABASE_URL": ledger_url},
        )
        assert listed.exit_code == 0, listed.output
        assert f"{lost_aid} outcome: rejected: the checkpoint has no such approval (404)" in (
            listed.output
        )
        assert "note E_NOT_FOUND: the checkpoint has no such approval" in listed.output
        assert "or one restored from before the approval" in listed.output
        # Nothing in the ledger changed and nothing was written twice.
        assert ledger_after == ledger_before
        for p in (known, doubt, lapsing, approved, lost):
            assert cloud.writes_for(p["resource"]) == (0 if p is doubt else 1)
        assert _reconcile(world, executor).not_reported == 1  # lost, which it never issued
        # Named once more, the settled in_doubt goes as its resolution alone: the same
        # receipt the checkpoint holds now, the same answer.
        request_redelivery(executor.engine, [doubt_aid], by="alice", note="", now=world.clock())
        assert reporter.flush() == 1
        assert [
            (d["kind"], d["attempt"], d["status"], d["http_status"])
            for d in delivery_records(executor.engine)
            if d["approval_id"] == doubt_aid and d["attempt"] == 3
        ] == [("resolution", 3, "delivered", 200)]
        assert (doubt_aid, "outcome", 2) not in delivered
        assert state(doubt)["state"] == "failed"
        assert verify_chain(world.checkpoint.engine).ok
        assert verify_chain(executor.engine).ok
    finally:
        client.close()
        executor.engine.dispose()
