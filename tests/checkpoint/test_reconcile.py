"""``airlock audit reconcile``: the checkpoint's and the executor's chains, held together.

The first tests drive the real checkpoint and the real executor (fed by its real feed
source over the checkpoint's API) and reconcile the chains they wrote, so a renamed event
cannot leave the cross-check silently empty: the counts are asserted, not only ``ok``.
Then each finding is provoked the way it happens — an approval minted with the real
signing key but never issued, a cut or rewritten executor chain, a cut or consistently
rewritten checkpoint chain — and, for the ones no honest run can produce, on hand-built
chains.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airlock.protocol import (
    ApprovalStatement,
    Binding,
    KeySet,
    canonical_bytes,
    make_bundle,
)
from airlock.reconcile import ReconcileCode, ReconcileReport, reconcile
from airlock.store import (
    GENESIS_PREV_HASH,
    AuditEntry,
    chain_hash,
    export,
    genesis_event,
    make_engine,
    read_transaction,
    verify_chain,
)
from services.checkpoint.keys import KeyDirectory
from services.executor import CheckpointFeedSource, Executor
from services.executor.recover import execute_delivery
from tests.cli.conftest import airlock
from tests.executor.support import InMemoryCloud, receipt_signer

from .builders import action
from .harness import AUDIENCE, TestClient, World

ACCOUNT = "5123456789012345"
REGION = "ap-southeast-1"
BINDING = Binding(AUDIENCE, "alibaba", ACCOUNT, REGION)


def _executor(world: World, ledger_url: str, cloud: InMemoryCloud) -> Executor:
    return Executor(
        engine=make_engine(ledger_url),
        keys=KeySet.from_value(world.client.get("/v1/keys").json()),
        binding=BINDING,
        reader=cloud,
        writer=cloud,
        signer=receipt_signer(),
        clock=world.clock,
    )


def _lines(url: str) -> list[str]:
    engine = make_engine(url, create=False)
    try:
        with read_transaction(engine) as conn:
            return list(export(conn))
    finally:
        engine.dispose()


def _report(world: World, receipt: Any) -> None:
    response = world.client.post(
        "/v1/outcomes", json={"receipt": receipt.to_value()}, headers=world.auth("executor")
    )
    assert response.status_code == 200, response.text


def _feed_source(world: World, executor: Executor) -> CheckpointFeedSource:
    """The executor's real feed source, over the checkpoint's real API."""
    client = TestClient(
        world.app, base_url="http://checkpoint.test", headers=world.auth("executor")
    )
    return CheckpointFeedSource(engine=executor.engine, client=client, clock=world.clock)


def _checkpoint_heads(ledger_url: str) -> list[dict[str, Any]]:
    """The checkpoint heads the executor's chain records: as events of their own, or
    carried by the event of the transaction that consumed or refused an approval."""
    events = [json.loads(line)["event"] for line in _lines(ledger_url)]
    return [
        e if e["type"] == "executor.checkpoint_head" else e["checkpoint_head"]
        for e in events
        if e["type"] == "executor.checkpoint_head" or "checkpoint_head" in e
    ]


def _run_three(world: World, ledger_url: str) -> tuple[Executor, InMemoryCloud]:
    """Three approvals on one feed page: one written, one refused at the re-read, one
    never consumed. The page's checkpoint head is recorded in the executor's chain with
    the first consume; the page read again after the reports (the third approval
    redelivered, not taken) records none, as no approval of it is recorded."""
    cloud = InMemoryCloud()
    for n in range(3):
        rid = f"i-reconcile{n:04d}"
        proposal = world.submit(proposal_id=f"prop_reconcile{n:04d}", resource_id=rid).json()
        assert world.approve("alice", proposal["id"], proposal["action_hash"]).status_code == 200
        cloud.add("ecs.instance", rid, "Running" if n != 1 else "Stopped")
    executor = _executor(world, ledger_url, cloud)
    source = _feed_source(world, executor)
    deliveries = source.receive(wait_s=0)
    assert len(deliveries) == 3
    for delivery in deliveries[:2]:
        outcome = execute_delivery(executor, source, delivery)  # as the daemon does
        assert outcome.receipt is not None
        _report(world, outcome.receipt)
    assert len(source.receive(wait_s=0)) == 1
    return executor, cloud


def test_the_real_services_chains_reconcile_with_every_count_accounted_for(
    world: World, ledger_url: str
) -> None:
    _, cloud = _run_three(world, ledger_url)
    assert len(cloud.writes) == 1

    report = reconcile(_lines(world.url), _lines(ledger_url))

    assert report.ok, report.findings
    assert (report.issued, report.consumed, report.writes) == (3, 2, 1)
    assert report.outcomes == {"succeeded": 1, "refused": 1}
    # Both reports carry the receipt's executor head, and both were checked against it.
    assert (report.reported, report.anchored) == (2, 2)
    assert (report.not_consumed, report.not_reported) == (1, 0)
    # The page whose approvals were recorded carried the checkpoint's head, checked.
    assert report.checkpoint_heads == 1
    assert report.to_value()["executor"]["anchored"] == 1


def test_the_executor_records_the_checkpoint_head_of_a_page_with_items_once(
    world: World, ledger_url: str
) -> None:
    """A page with items records the head it carries once one of its approvals is
    recorded; the same page read again with the chain unchanged, or an empty page,
    records nothing."""
    proposal = world.submit(proposal_id="prop_anchor000001", resource_id="i-anchor0001").json()
    world.approve("alice", proposal["id"], proposal["action_hash"])
    executor = _executor(world, ledger_url, InMemoryCloud())
    source = _feed_source(world, executor)
    [delivery] = source.receive(wait_s=0)
    head = verify_chain(world.checkpoint.engine)
    assert _checkpoint_heads(ledger_url) == []  # nothing of the page is recorded yet

    [again] = source.receive(wait_s=0)  # not acknowledged: redelivered, same head
    assert again.raw == delivery.raw
    source.ack(again)
    [recorded] = _checkpoint_heads(ledger_url)
    assert (recorded["seq"], recorded["hash"]) == (head.head_seq, head.head_hash)
    assert recorded["feed"] == "http://checkpoint.test"
    assert source.receive(wait_s=0) == ()  # an empty page
    assert len(_checkpoint_heads(ledger_url)) == 1
    assert verify_chain(executor.engine).ok


def _head_row(lines: list[str]) -> tuple[int, str]:
    record = json.loads(lines[-1])
    return record["seq"], record["row_hash"]


def test_a_live_system_reconciles_when_the_checkpoint_is_read_before_and_after(
    world: World, ledger_url: str, tmp_path: Path
) -> None:
    """Seen in review: on a live system either read order gave a finding with no fault.
    Read first, the checkpoint's export lacks the approvals issued and the heads recorded
    later; read last, it holds receipts for executor rows written after the executor's
    export. Reading it before and after the executor's, with receipts checked only up to
    the earlier read, is clean; the two single reads are not."""
    cloud = InMemoryCloud()
    executor = _executor(world, ledger_url, cloud)
    source = _feed_source(world, executor)

    def approve_and_execute(n: int, *, report: bool = True) -> None:
        rid = f"i-live0000000{n}"
        cloud.add("ecs.instance", rid, "Running")
        proposal = world.submit(proposal_id=f"prop_live0000000{n}", resource_id=rid).json()
        world.approve("alice", proposal["id"], proposal["action_hash"])
        [delivery] = source.receive(wait_s=0)  # records the page's checkpoint head
        outcome = executor.execute(delivery.raw, revoked=source.revoked())
        source.ack(delivery)
        assert outcome.receipt is not None
        _report(world, outcome.receipt)

    approve_and_execute(1)  # reported before the first read: its receipt is checked
    before = _lines(world.url)  # the checkpoint, read first
    world.submit(proposal_id="prop_live00000009", resource_id="i-live00000009")  # life goes on
    approve_and_execute(2)  # its page's head is past `before`
    executor_read = _lines(ledger_url)  # the executor's chain
    approve_and_execute(3)  # its receipt names a row past `executor_read`
    after = _lines(world.url)  # the checkpoint, read again

    both = reconcile(after, executor_read, reports_until=_head_row(before))
    assert both.ok, both.findings
    assert (both.reported, both.anchored, both.reports_later) == (3, 1, 2)
    assert both.checkpoint_heads == 2
    # Read first alone, it lacks approval 2's issue and its page's head.
    assert [f.code for f in reconcile(before, executor_read).findings] == [
        ReconcileCode.R_UNISSUED,
        ReconcileCode.R_CHECKPOINT_HEAD_BEYOND,
    ]
    assert [f.code for f in reconcile(after, executor_read).findings] == [
        ReconcileCode.R_HEAD_BEYOND
    ]
    # The earlier read must be a prefix of the later one.
    forged = reconcile(after, executor_read, reports_until=(_head_row(before)[0], "0" * 64))
    assert [f.code for f in forged.findings] == [ReconcileCode.R_CHAIN]

    # The command takes the earlier export as --checkpoint-before.
    files = {}
    for name, lines in (("before", before), ("after", after), ("executor", executor_read)):
        files[name] = tmp_path / f"{name}.jsonl"
        files[name].write_text("".join(line + "\n" for line in lines))
    result = airlock(
        "audit", "reconcile", "--checkpoint-file", str(files["after"]),
        "--checkpoint-before", str(files["before"]), "--executor-file", str(files["executor"]),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "(2 recorded after the executor's chain was read)" in result.output
    # With the databases it reads the checkpoint before and after by itself.
    live = airlock(
        "audit", "reconcile", "--checkpoint-db", world.url, "--executor-db", ledger_url
    )  # fmt: skip
    assert live.exit_code == 0, live.output


def test_an_approval_minted_with_the_real_key_but_never_issued_is_found(
    world: World, ledger_url: str
) -> None:
    """The executor cannot tell a stolen-key approval from a real one; the cross-check can."""
    _run_three(world, ledger_url)
    signer = KeyDirectory(world.keys_dir).active_signer()
    forged_action = action(proposal_id="prop_forged000001", resource_id="i-forged0001")
    now = world.clock()
    statement = ApprovalStatement.model_validate(
        {
            "type": "airlock.approval/v1",
            "approval_id": "apv_forged000001",
            "proposal_id": forged_action.proposal_id,
            "action_hash": forged_action.action_hash(),
            "provider": "alibaba",
            "account": ACCOUNT,
            "region": REGION,
            "resource": {"type": "ecs.instance", "id": "i-forged0001"},
            "operation": "stop",
            "audience": AUDIENCE,
            "nonce": uuid.uuid4().hex,
            "issued_at": now,
            "not_before": now,
            "expires_at": now + 600,
            "approvers": [{"id": "alice", "at": now}],
            "quorum": 1,
            "policy": {"rule": "stop-one-person", "hash": "sha256:" + "ab" * 32},
            "risk": "medium",
        }
    )
    bundle = make_bundle(forged_action.canonical_bytes(), signer.sign_statement(statement))
    cloud = InMemoryCloud()
    cloud.add("ecs.instance", "i-forged0001", "Running")
    outcome = _executor(world, ledger_url, cloud).execute(bundle)
    assert outcome.state is not None and outcome.state.value == "succeeded"  # it verified

    report = reconcile(_lines(world.url), _lines(ledger_url))

    assert [(f.code, f.approval_id) for f in report.findings] == [
        (ReconcileCode.R_UNISSUED, "apv_forged000001")
    ]

    result = airlock(
        "audit", "reconcile", "--checkpoint-db", world.url, "--executor-db", ledger_url
    )
    assert result.exit_code == 1, result.output
    assert "R_UNISSUED apv_forged000001" in result.output


def test_a_cut_executor_chain_is_found_by_the_receipts_the_checkpoint_holds(
    world: World, ledger_url: str
) -> None:
    _run_three(world, ledger_url)
    lines = _lines(ledger_url)
    last = max(i for i, line in enumerate(lines) if '"type":"executor.outcome"' in line)

    report = reconcile(_lines(world.url), lines[:last])

    assert [f.code for f in report.findings] == [ReconcileCode.R_HEAD_BEYOND]


def test_a_rewritten_executor_chain_that_verifies_on_its_own_is_found(
    world: World, ledger_url: str
) -> None:
    """Rewrite the outcome of the write and re-hash every row after it: the chain alone
    verifies, but the head the receipt carried no longer matches."""
    _run_three(world, ledger_url)
    records = [json.loads(line) for line in _lines(ledger_url)]
    for record in records:
        event = record["event"]
        if event.get("type") == "executor.outcome" and event["state"] == "succeeded":
            event["state"] = "failed"
    report = reconcile(_lines(world.url), _rechain(records))

    assert report.executor_rows == len(records)  # it verifies on its own
    # Both receipts name rows at or after the rewritten one, whose hashes all changed.
    assert [f.code for f in report.findings] == [ReconcileCode.R_HEAD_MISMATCH] * 2


def test_swapped_or_tampered_inputs_are_chain_findings(world: World, ledger_url: str) -> None:
    _run_three(world, ledger_url)
    checkpoint, executor = _lines(world.url), _lines(ledger_url)

    swapped = reconcile(executor, checkpoint)
    assert {f.code for f in swapped.findings} == {ReconcileCode.R_CHAIN}
    assert "not the 'checkpoint' chain" in str(swapped.findings[0])

    tampered = list(executor)
    at = next(i for i, line in enumerate(tampered) if '"epoch":1' in line)
    tampered[at] = tampered[at].replace('"epoch":1', '"epoch":2', 1)
    report = reconcile(checkpoint, tampered)
    assert [f.code for f in report.findings] == [ReconcileCode.R_CHAIN]
    assert f"seq {at}" in str(report.findings[0])


def test_a_checkpoint_chain_rewritten_consistently_is_found_by_the_heads_the_executor_holds(
    world: World, ledger_url: str
) -> None:
    """An insider with the checkpoint's database renames who approved the approval that
    was never consumed and re-hashes every row after it: the chain verifies on its own,
    and nothing the executor consumed names that approver. Only the heads the executor
    recorded from the feed show it."""
    _run_three(world, ledger_url)
    records = [json.loads(line) for line in _lines(world.url)]
    unconsumed = _approval_id(world, "prop_reconcile0002")
    [issued] = [
        r["event"]
        for r in records
        if r["event"].get("type") == "checkpoint.approval.issued"
        and r["event"]["approval_id"] == unconsumed
    ]
    issued["approvers"] = ["mallory"]

    report = reconcile(_rechain(records), _lines(ledger_url))

    assert report.checkpoint_rows == len(records)  # it verifies on its own
    assert [f.code for f in report.findings] == [ReconcileCode.R_CHECKPOINT_HEAD_MISMATCH]
    assert "it was rewritten" in report.findings[0].detail


def test_a_cut_checkpoint_chain_is_found_by_the_heads_the_executor_holds(
    world: World, ledger_url: str
) -> None:
    _run_three(world, ledger_url)
    lines = _lines(world.url)
    last_head = _checkpoint_heads(ledger_url)[-1]["seq"]
    assert 0 < last_head < len(lines)

    report = reconcile(lines[:last_head], _lines(ledger_url))

    assert [f.code for f in report.findings] == [ReconcileCode.R_CHECKPOINT_HEAD_BEYOND]
    assert f"ends at row {last_head - 1}" in report.findings[0].detail


def _refuse_the_third(world: World, ledger_url: str) -> str:
    """After :func:`_run_three`: the approval never consumed, presented again once it
    expired, is refused before the consume (E_EXPIRED), and its signed refusal receipt
    is kept at the checkpoint as a note. Its approval id."""
    executor, _ = _run_three(world, ledger_url)
    source = _feed_source(world, executor)
    [delivery] = source.receive(wait_s=0)  # not acknowledged: delivered again
    world.clock.advance(901)  # past the execution window
    outcome = executor.execute(delivery.raw, revoked=source.revoked())
    assert outcome.refusal_code == "E_EXPIRED" and outcome.receipt is not None
    response = world.client.post(
        "/v1/refusals", json={"receipt": outcome.receipt.to_value()}, headers=world.auth("executor")
    )
    assert response.status_code == 200, response.text
    assert [n["refusal_code"] for n in response.json()["executor_refusals"]] == ["E_EXPIRED"]
    assert outcome.approval_id is not None
    return outcome.approval_id


def _refused_row(lines: list[str]) -> int:
    [at] = [i for i, line in enumerate(lines) if '"type":"executor.refused"' in line]
    return at


def test_a_refusal_note_of_the_real_services_is_checked_against_the_executor_chain(
    world: World, ledger_url: str
) -> None:
    _refuse_the_third(world, ledger_url)

    report = reconcile(_lines(world.url), _lines(ledger_url))

    assert report.ok, report.findings
    assert (report.refusals, report.refusals_anchored, report.refusals_later) == (1, 1, 0)
    assert (report.reported, report.anchored) == (2, 2)  # the outcomes as before
    assert report.to_value()["checkpoint"]["refusals_anchored"] == 1


def test_a_cut_executor_chain_is_found_by_the_refusal_notes_the_checkpoint_holds(
    world: World, ledger_url: str
) -> None:
    """The refusal came after the last reported outcome: an executor chain cut between
    the two still holds every row an outcome receipt named. Only the refusal note's head
    shows the cut."""
    refused = _refuse_the_third(world, ledger_url)
    lines = _lines(ledger_url)

    report = reconcile(_lines(world.url), lines[: _refused_row(lines)])

    assert [(f.code, f.approval_id) for f in report.findings] == [
        (ReconcileCode.R_HEAD_BEYOND, refused)
    ]


def test_a_rewritten_refusal_in_the_executor_chain_is_found_by_the_note(
    world: World, ledger_url: str
) -> None:
    """Rewrite the refusal's code and re-hash the rows after it: the chain verifies on its
    own and every outcome receipt's head still matches, the note's does not."""
    refused = _refuse_the_third(world, ledger_url)
    records = [json.loads(line) for line in _lines(ledger_url)]
    records[_refused_row(_lines(ledger_url))]["event"]["code"] = "E_AUDIENCE"

    report = reconcile(_lines(world.url), _rechain(records))

    assert report.executor_rows == len(records)  # it verifies on its own
    assert [(f.code, f.approval_id) for f in report.findings] == [
        (ReconcileCode.R_HEAD_MISMATCH, refused)
    ]


def test_the_command_fails_on_an_executor_chain_cut_below_a_refusal_note(
    world: World, ledger_url: str, tmp_path: Path
) -> None:
    refused = _refuse_the_third(world, ledger_url)
    lines = _lines(ledger_url)
    cp, ex, cut = (tmp_path / f"{n}.jsonl" for n in ("cp", "ex", "cut"))
    cp.write_text("".join(line + "\n" for line in _lines(world.url)))
    ex.write_text("".join(line + "\n" for line in lines))
    cut.write_text("".join(line + "\n" for line in lines[: _refused_row(lines)]))

    whole = airlock("audit", "reconcile", "--checkpoint-file", str(cp), "--executor-file", str(ex))
    assert whole.exit_code == 0, whole.output
    assert "1 executor refusal noted, 1 checked the same way" in whole.output

    result = airlock(
        "audit", "reconcile", "--checkpoint-file", str(cp), "--executor-file", str(cut)
    )
    assert result.exit_code == 1, result.output
    assert f"R_HEAD_BEYOND {refused}" in result.output
    as_json = airlock(
        "audit", "reconcile", "--checkpoint-file", str(cp), "--executor-file", str(cut), "--json"
    )
    assert as_json.exit_code == 1
    assert [f["code"] for f in json.loads(as_json.output)["findings"]] == ["R_HEAD_BEYOND"]


def _approval_id(world: World, proposal_id: str) -> str:
    body = world.client.get(f"/v1/proposals/{proposal_id}", headers=world.auth("alice")).json()
    return str(body["approval"]["approval_id"])


# -- findings no honest run produces, on hand-built chains ---------------------------------


def _rechain(records: list[dict[str, Any]]) -> list[str]:
    """Export lines for these events, hashed from genesis as a valid chain would be."""
    prev = GENESIS_PREV_HASH
    lines = []
    for seq, record in enumerate(records):
        text = canonical_bytes(record["event"]).decode()
        row_hash = chain_hash(prev, text.encode())
        lines.append(AuditEntry(seq, text, prev, row_hash).to_json_line())
        prev = row_hash
    return lines


def _chain(name: str, events: list[dict[str, Any]]) -> list[str]:
    at = {"at": "2026-11-29T00:00:00.000000Z"}
    return _rechain([{"event": genesis_event(name)}] + [{"event": {**e, **at}} for e in events])


def _issued(aid: str) -> dict[str, Any]:
    return {
        "type": "checkpoint.approval.issued",
        "approval_id": aid,
        "action_hash": f"sha256:{aid}",
        "nonce": f"nonce-{aid}",
        "keyid": "ed25519:k",
        "approvers": ["alice"],
    }


def _consumed(aid: str) -> dict[str, Any]:
    return {
        "type": "executor.consumed",
        "approval_id": aid,
        "action_hash": f"sha256:{aid}",
        "nonce": f"nonce-{aid}",
        "keyid": "ed25519:k",
        "approvers": ["alice"],
    }


def _executing(aid: str) -> dict[str, Any]:
    return {"type": "executor.executing", "approval_id": aid}


def _outcome(aid: str, state: str) -> dict[str, Any]:
    return {"type": "executor.outcome", "approval_id": aid, "state": state}


def _reported(aid: str, outcome: str, head: Any = None) -> dict[str, Any]:
    event = {"type": "checkpoint.outcome.reported", "approval_id": aid, "outcome": outcome}
    if head is not None:
        event["executor_head"] = head
    return event


def _head(lines: list[str], seq: int) -> dict[str, Any]:
    record = json.loads(lines[seq])
    return {"seq": record["seq"], "hash": record["row_hash"]}


def _codes(report: ReconcileReport) -> list[tuple[str, str | None]]:
    return [(f.code.value, f.approval_id) for f in report.findings]


def test_hand_built_consistent_chains_are_ok() -> None:
    ex = _chain("executor", [_consumed("a1"), _executing("a1"), _outcome("a1", "succeeded")])
    cp = _chain("checkpoint", [_issued("a1"), _reported("a1", "succeeded", _head(ex, 3))])
    report = reconcile(cp, ex)
    assert report.ok and (report.anchored, report.writes) == (1, 1)


def test_a_second_write_a_second_consume_and_an_unconsumed_write_are_found() -> None:
    ex = _chain(
        "executor",
        [
            _consumed("a1"),
            _executing("a1"),
            _executing("a1"),
            _consumed("a2"),
            _consumed("a2"),
            _executing("a3"),
        ],
    )
    cp = _chain("checkpoint", [_issued("a1"), _issued("a2"), _issued("a3")])
    assert _codes(reconcile(cp, ex)) == [
        ("R_CONSUMED_TWICE", "a2"),
        ("R_WRITE_TWICE", "a1"),
        ("R_WRITE_UNCONSUMED", "a3"),
    ]


def test_an_approval_consumed_with_another_hash_nonce_or_key_is_unissued() -> None:
    changed = {**_consumed("a1"), "action_hash": "sha256:other", "keyid": "ed25519:x"}
    ex = _chain("executor", [changed])
    cp = _chain("checkpoint", [_issued("a1")])
    [finding] = reconcile(cp, ex).findings
    assert finding.code is ReconcileCode.R_UNISSUED
    assert "action_hash, keyid differ" in finding.detail


def test_an_approval_consumed_with_other_approvers_is_unissued() -> None:
    """The checkpoint's chain names who approved; a consumed approval naming anyone else
    was not the one issued (or the checkpoint's record of who approved was rewritten)."""
    ex = _chain("executor", [{**_consumed("a1"), "approvers": ["alice", "mallory"]}])
    cp = _chain("checkpoint", [_issued("a1")])
    [finding] = reconcile(cp, ex).findings
    assert finding.code is ReconcileCode.R_UNISSUED and "approvers differ" in finding.detail


def test_a_receipt_head_on_another_approvals_outcome_is_an_outcome_mismatch() -> None:
    ex = _chain(
        "executor",
        [_consumed("a1"), _outcome("a1", "refused"), _consumed("a2"), _outcome("a2", "refused")],
    )
    # The report for a1 names a2's outcome row; the one for a2 says succeeded.
    cp = _chain(
        "checkpoint",
        [
            _issued("a1"),
            _issued("a2"),
            _reported("a1", "refused", _head(ex, 4)),
            _reported("a2", "succeeded", _head(ex, 4)),
        ],
    )
    assert _codes(reconcile(cp, ex)) == [
        ("R_OUTCOME_MISMATCH", "a1"),
        ("R_OUTCOME_MISMATCH", "a2"),
    ]


def test_reports_recorded_before_heads_were_kept_are_matched_by_approval_id() -> None:
    ex = _chain("executor", [_consumed("a1"), _executing("a1"), _outcome("a1", "in_doubt")])
    cp = _chain(
        "checkpoint",
        [_issued("a1"), _reported("a1", "in_doubt"), _reported("a1", "succeeded")],
    )
    report = reconcile(cp, ex)
    assert report.anchored == 0
    assert _codes(report) == [("R_OUTCOME_MISMATCH", "a1")]


def test_a_malformed_head_is_a_head_mismatch() -> None:
    ex = _chain("executor", [_consumed("a1"), _outcome("a1", "refused")])
    cp = _chain("checkpoint", [_issued("a1"), _reported("a1", "refused", {"seq": "2"})])
    assert _codes(reconcile(cp, ex)) == [("R_HEAD_MISMATCH", "a1")]


def _executor_refused(aid: str, code: str = "E_AUDIENCE") -> dict[str, Any]:
    return {"type": "executor.refused", "approval_id": aid, "code": code}


def _noted(aid: str, code: str, head: Any) -> dict[str, Any]:
    return {
        "type": "checkpoint.executor_refusal",
        "approval_id": aid,
        "refusal_code": code,
        "executor_head": head,
    }


def test_a_refusal_note_on_another_code_approval_or_row_kind_is_an_outcome_mismatch() -> None:
    ex = _chain(
        "executor",
        [
            _executor_refused("a1", "E_AUDIENCE"),
            _consumed("a2"),
            _outcome("a2", "refused"),  # refused after the consume (E_PRECONDITION)
        ],
    )
    cp = _chain(
        "checkpoint",
        [
            _issued("a1"),
            _issued("a2"),
            _noted("a1", "E_AUDIENCE", _head(ex, 1)),  # agrees
            _noted("a1", "E_EXPIRED", _head(ex, 1)),  # another code
            _noted("a3", "E_AUDIENCE", _head(ex, 1)),  # another approval's refusal
            _noted("a2", "E_AUDIENCE", _head(ex, 3)),  # an outcome row, not a refusal
        ],
    )
    report = reconcile(cp, ex)
    assert report.refusals_anchored == 4
    assert _codes(report) == [
        ("R_OUTCOME_MISMATCH", "a1"),
        ("R_OUTCOME_MISMATCH", "a3"),
        ("R_OUTCOME_MISMATCH", "a2"),
    ]
    assert (
        "'E_EXPIRED'" in report.findings[0].detail and "'E_AUDIENCE'" in report.findings[0].detail
    )


def test_a_refusal_note_without_a_head_is_a_head_mismatch_not_an_old_row() -> None:
    """Notes carried the receipt's head from the first: no legacy form to match by id."""
    ex = _chain("executor", [_executor_refused("a1")])
    cp = _chain("checkpoint", [_issued("a1"), _noted("a1", "E_AUDIENCE", None)])
    assert _codes(reconcile(cp, ex)) == [("R_HEAD_MISMATCH", "a1")]


def test_a_refusal_noted_after_the_earlier_checkpoint_read_is_not_checked() -> None:
    ex = _chain("executor", [_executor_refused("a1")])
    head = _head(ex, 1)
    before = _chain("checkpoint", [_issued("a1")])
    after = _chain(
        "checkpoint",
        [_issued("a1"), _noted("a1", "E_AUDIENCE", {"seq": 2, "hash": head["hash"]})],
    )
    report = reconcile(after, ex, reports_until=_head_row(before))
    assert report.ok, report.findings
    assert (report.refusals, report.refusals_anchored, report.refusals_later) == (1, 0, 1)
    # Read at rest, the same note names a row past the executor chain's end.
    assert _codes(reconcile(after, ex)) == [("R_HEAD_BEYOND", "a1")]


def _checkpoint_head(seq: Any, digest: Any, feed: str = "http://cp") -> dict[str, Any]:
    return {"type": "executor.checkpoint_head", "feed": feed, "seq": seq, "hash": digest}


def test_checkpoint_heads_malformed_beyond_or_different_are_found() -> None:
    cp = _chain("checkpoint", [_issued("a1")])
    good = _head(cp, 1)
    ex = _chain(
        "executor",
        [
            _checkpoint_head(good["seq"], good["hash"]),
            _checkpoint_head("1", good["hash"]),
            _checkpoint_head(2, good["hash"], feed="http://cp\r\x1b[2K"),
            _checkpoint_head(0, good["hash"]),
        ],
    )
    report = reconcile(cp, ex)
    assert report.checkpoint_heads == 4
    assert [f.code for f in report.findings] == [
        ReconcileCode.R_CHECKPOINT_HEAD_MISMATCH,  # malformed
        ReconcileCode.R_CHECKPOINT_HEAD_BEYOND,
        ReconcileCode.R_CHECKPOINT_HEAD_MISMATCH,  # row 0 holds another hash
    ]
    shown = str(report.findings[1])
    assert "\r" not in shown and "\x1b" not in shown and "ends at row 1" in shown


# -- the command -------------------------------------------------------------------------


@pytest.fixture
def exports(world: World, ledger_url: str, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    _run_three(world, ledger_url)
    cp, ex = tmp_path / "cp.jsonl", tmp_path / "ex.jsonl"
    cp.write_text("".join(line + "\n" for line in _lines(world.url)))
    ex.write_text("".join(line + "\n" for line in _lines(ledger_url)))
    yield cp, ex


def test_the_command_on_exports_says_ok_and_counts(exports: tuple[Path, Path]) -> None:
    cp, ex = exports
    result = airlock("audit", "reconcile", "--checkpoint-file", str(cp), "--executor-file", str(ex))
    assert result.exit_code == 0, result.output
    assert "OK: the two chains agree" in result.output
    assert "3 approvals issued" in result.output and "2 approvals consumed" in result.output
    assert "2 outcomes recorded, 2 checked against the executor chain" in result.output
    assert "1 checkpoint head recorded, checked against the checkpoint chain" in result.output

    as_json = airlock(
        "audit", "reconcile", "--checkpoint-file", str(cp), "--executor-file", str(ex), "--json"
    )
    value = json.loads(as_json.output)
    assert value["ok"] is True and value["executor"]["writes"] == 1


def test_the_command_refuses_bad_arguments_and_unreadable_inputs(
    exports: tuple[Path, Path], tmp_path: Path
) -> None:
    cp, ex = exports
    both = airlock(
        "audit", "reconcile", "--checkpoint-file", str(cp), "--checkpoint-db", "sqlite:///x.db",
        "--executor-file", str(ex),
    )  # fmt: skip
    assert both.exit_code == 2 and "exactly one of --checkpoint-db" in both.output
    missing = airlock(
        "audit", "reconcile", "--checkpoint-file", str(tmp_path / "nope"), "--executor-file",
        str(ex),
    )  # fmt: skip
    assert missing.exit_code == 2 and "error:" in missing.output


def test_the_command_names_a_broken_database_chain(
    world: World, ledger_url: str, tmp_path: Path
) -> None:
    import sqlite3

    _run_three(world, ledger_url)
    path = ledger_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:  # the triggers refuse UPDATE; an attacker drops them
        conn.execute("DROP TRIGGER IF EXISTS audit_log_no_update")
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'")]
        for name in names:
            if "audit" in name:
                conn.execute(f'DROP TRIGGER "{name}"')
        conn.execute("UPDATE audit_log SET event = 'not json' WHERE seq = 1")
    result = airlock(
        "audit", "reconcile", "--checkpoint-db", world.url, "--executor-db", ledger_url
    )
    assert result.exit_code == 1, result.output
    assert "R_CHAIN" in result.output and "executor chain" in result.output
    # No counts from a chain that does not verify (they read as zeros, found in review).
    assert "not cross-checked: a chain does not verify" in result.output
    assert "approvals issued" not in result.output


def test_control_characters_from_a_crafted_export_are_escaped_on_screen(tmp_path: Path) -> None:
    """Seen in review: an export anyone can build put a carriage return and ANSI codes
    in an approval id, which redrew the report as "OK" on a terminal."""
    trick = "a1\r\x1b[2K\x1b[1AOK: the two chains agree\x1b[8m"
    ex = _chain("executor", [_consumed(trick), _outcome(trick, "\x1b[31msucceeded")])
    cp = _chain("checkpoint", [])
    cp_file, ex_file = tmp_path / "cp.jsonl", tmp_path / "ex.jsonl"
    cp_file.write_text("".join(line + "\n" for line in cp))
    ex_file.write_text("".join(line + "\n" for line in ex))
    result = airlock(
        "audit", "reconcile", "--checkpoint-file", str(cp_file), "--executor-file", str(ex_file)
    )
    assert result.exit_code == 1
    assert "\r" not in result.output and "\x1b" not in result.output
    assert "R_UNISSUED a1\\u000d\\u001b[2K" in result.output
    assert "1 \\u001b[31msucceeded" in result.output


def test_a_checkpoint_before_export_with_a_duplicate_key_is_not_an_export(
    tmp_path: Path,
) -> None:
    """Its last line names the head the checkpoint was read at; read last-wins, a second
    ``seq`` would name one head there and another where the line is verified."""
    ex = _chain("executor", [_consumed("a1"), _executing("a1"), _outcome("a1", "succeeded")])
    cp = _chain("checkpoint", [_issued("a1"), _reported("a1", "succeeded", _head(ex, 3))])
    paths = {}
    for name, lines in (("cp", cp), ("ex", ex)):
        paths[name] = tmp_path / f"{name}.jsonl"
        paths[name].write_text("".join(line + "\n" for line in lines))
    before = tmp_path / "before.jsonl"
    before.write_text("".join(line + "\n" for line in [*cp[:-1], '{"seq":0,' + cp[-1][1:]]))
    args = ["audit", "reconcile", "--checkpoint-file", str(paths["cp"])]
    args += ["--executor-file", str(paths["ex"]), "--checkpoint-before"]
    assert airlock(*args, str(paths["cp"])).exit_code == 0  # the export as written
    result = airlock(*args, str(before))
    assert result.exit_code == 2, result.output
    assert f"--checkpoint-before {before}: not an audit export" in result.output


@pytest.mark.parametrize("which", ["--checkpoint-file", "--executor-file", "--checkpoint-before"])
def test_an_over_long_export_line_is_an_unreadable_input_not_read_whole(
    tmp_path: Path, which: str
) -> None:
    """An export is anyone's file: one line of megabytes (no newline at all here) is named
    with its file and line number and exit 2, and is never held in memory whole."""
    import gc
    import tracemalloc

    from airlock.store import EXPORT_LINE_MAX_BYTES

    ex = _chain("executor", [_consumed("a1"), _executing("a1"), _outcome("a1", "succeeded")])
    cp = _chain("checkpoint", [_issued("a1"), _reported("a1", "succeeded", _head(ex, 3))])
    files = {"--checkpoint-file": cp, "--executor-file": ex, "--checkpoint-before": cp}
    paths = {}
    for option, lines in files.items():
        paths[option] = tmp_path / f"{option.strip('-')}.jsonl"
        paths[option].write_text("".join(line + "\n" for line in lines))
    args = ["audit", "reconcile", *(part for o, p in paths.items() for part in (o, str(p)))]
    assert airlock(*args).exit_code == 0  # as exported, the chains agree (and all is imported)

    line = 4 * EXPORT_LINE_MAX_BYTES
    with paths[which].open("ab") as out:
        out.write(b'{"event":' + b"x" * line)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = airlock(*args)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert peak < line, f"held {peak} bytes while refusing a {line}-byte line"
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # no traceback
    assert result.output == (
        f"error: {which} {paths[which]}: line {len(files[which]) + 1} is longer than "
        f"{EXPORT_LINE_MAX_BYTES} bytes, the most an audit export line can hold; "
        "not read further\n"
    )


def _in_lane(ledger_url: str, lane: int) -> Any:
    """A transaction holding every lane of the executor's chain but ``lane`` (PostgreSQL):
    an append meanwhile takes ``lane``, the one left free."""
    from airlock.store._audit import LANE_LOCK_CLASS

    engine = make_engine(ledger_url)
    conn = engine.connect()
    tx = conn.begin()
    for other in range(16):
        if other != lane:
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({LANE_LOCK_CLASS}, {other})")
    return engine, conn, tx


@pytest.fixture
def ledger_pg_url(pg_server: str, _pg_pool: Any) -> Iterator[str]:
    """An executor ledger on PostgreSQL (its own database, beside the checkpoint's)."""
    from sqlalchemy.engine import make_url

    from airlock.ledger import migrate

    name = _pg_pool.take()
    url = make_url(pg_server).set(database=name).render_as_string(hide_password=False)
    engine = make_engine(url)
    migrate(engine)
    engine.dispose()
    try:
        yield url
    finally:
        _pg_pool.give_back(name, url)


@pytest.mark.postgres
def test_executions_recorded_in_several_lanes_reconcile_and_a_cut_lane_is_found(
    world: World, ledger_pg_url: str
) -> None:
    pg_url = ledger_pg_url
    cloud = InMemoryCloud()
    for n in range(4):
        rid = f"i-lanes{n:04d}"
        proposal = world.submit(proposal_id=f"prop_lanes{n:04d}", resource_id=rid).json()
        assert world.approve("alice", proposal["id"], proposal["action_hash"]).status_code == 200
        cloud.add("ecs.instance", rid, "Running")
    executor = _executor(world, pg_url, cloud)
    source = _feed_source(world, executor)
    deliveries = source.receive(wait_s=0)
    assert len(deliveries) == 4
    heads = []
    for delivery, lane in zip(deliveries, (3, 7, 3, 11), strict=True):
        blocker, conn, tx = _in_lane(pg_url, lane)
        try:
            outcome = execute_delivery(executor, source, delivery)
        finally:
            tx.rollback()
            conn.close()
            blocker.dispose()
        assert outcome.receipt is not None
        heads.append(json.loads(outcome.receipt.payload)["audit_head"])
        _report(world, outcome.receipt)
    executor.engine.dispose()
    records = [json.loads(line) for line in _lines(pg_url)]
    lane_of = {record["seq"]: record.get("lane", 0) for record in records}
    assert [lane_of[h["seq"]] for h in heads] == [3, 7, 3, 11]

    report = reconcile(_lines(world.url), _lines(pg_url))
    assert report.ok, report.findings
    assert (report.issued, report.consumed, report.writes) == (4, 4, 4)
    assert (report.reported, report.anchored) == (4, 4)

    # Lane 7's last row, the second receipt's, cut: lane 7 alone still verifies (a cut
    # tail is a shorter lane), but the receipt the checkpoint holds names it.
    engine = make_engine(pg_url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE audit_log DISABLE TRIGGER USER")
            conn.exec_driver_sql(f"DELETE FROM audit_log WHERE seq = {heads[1]['seq']}")
    finally:
        engine.dispose()
    cut = reconcile(_lines(world.url), _lines(pg_url))
    assert [f.code for f in cut.findings] == [ReconcileCode.R_HEAD_MISMATCH]
