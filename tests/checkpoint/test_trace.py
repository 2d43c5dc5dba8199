"""``airlock audit trace``: one action's story, from the chains the real services wrote.

The checkpoint and the executor run as in ``test_reconcile`` (three approvals on one
feed page: one written, one refused at the re-read, one never consumed); the trace of
each is read back through the CLI, from the databases and from export files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from airlock.store import export, make_engine, read_transaction
from airlock.trace import trace
from tests.cli.conftest import airlock

from .harness import World
from .test_reconcile import _run_three

WRITTEN, REFUSED, NEVER_CONSUMED = (f"prop_reconcile{n:04d}" for n in range(3))


def _trace(world: World, ledger_url: str, ident: str, *extra: str) -> Any:
    result = airlock(
        "audit", "trace", ident, "--checkpoint-db", world.url, "--executor-db", ledger_url, *extra
    )
    return result


def _types(value: dict[str, Any]) -> list[str]:
    return [e["type"] for e in value["events"]]


def test_a_written_proposal_is_told_from_submission_to_its_recorded_receipt(
    world: World, ledger_url: str
) -> None:
    _run_three(world, ledger_url)
    result = _trace(world, ledger_url, WRITTEN, "--json")
    assert result.exit_code == 0, result.output
    value = json.loads(result.stdout)
    # The fixed clock puts every event in the same second: the order is the merge's
    # (the checkpoint's decisions, the executor's events, the checkpoint's record).
    assert _types(value) == [
        "checkpoint.proposal.submitted",
        "checkpoint.vote.approve",
        "checkpoint.approval.issued",
        "executor.consumed",  # straight into executing: one event
        "executor.outcome",
        "checkpoint.outcome.reported",
    ]
    [approval_id] = value["approvals"]
    assert value["proposals"] == [WRITTEN]
    assert {e["approval_id"] for e in value["events"][2:]} == {approval_id}
    assert value["events"][3]["state"] == "executing"
    assert value["events"][4]["state"] == "succeeded"
    assert {e["chain"] for e in value["events"]} == {"checkpoint", "executor"}
    assert value["rows"]["checkpoint"] > 7 and value["rows"]["executor"] > 3

    # The approval id tells the same story, its proposal's votes included.
    by_approval = json.loads(_trace(world, ledger_url, approval_id, "--json").stdout)
    assert by_approval["events"] == value["events"]

    # As text: one line per event, then what was verified.
    text = _trace(world, ledger_url, WRITTEN)
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert lines[0] == f"proposal {WRITTEN}; approval {approval_id}"
    assert "executor.outcome" in lines[5] and "state=succeeded" in lines[5]
    assert lines[-1].startswith("6 events; chains verified from genesis: checkpoint ")


def test_a_refused_and_a_never_consumed_approval_end_where_they_ended(
    world: World, ledger_url: str
) -> None:
    _run_three(world, ledger_url)
    refused = json.loads(_trace(world, ledger_url, REFUSED, "--json").stdout)
    assert _types(refused)[-3:] == [
        "executor.consumed",
        "executor.outcome",
        "checkpoint.outcome.reported",
    ]
    assert refused["events"][-2]["state"] == "refused"
    assert refused["events"][-2]["refusal_code"] == "E_PRECONDITION"
    never = json.loads(_trace(world, ledger_url, NEVER_CONSUMED, "--json").stdout)
    assert _types(never) == [
        "checkpoint.proposal.submitted",
        "checkpoint.vote.approve",
        "checkpoint.approval.issued",
    ]


def test_one_chain_or_export_files_do_as_well(
    world: World, ledger_url: str, tmp_path: Path
) -> None:
    _run_three(world, ledger_url)
    expected = json.loads(_trace(world, ledger_url, WRITTEN, "--json").stdout)["events"]
    files = {}
    for label, url in (("checkpoint", world.url), ("executor", ledger_url)):
        engine = make_engine(url, create=False)
        with read_transaction(engine) as conn:
            files[label] = tmp_path / f"{label}.jsonl"
            files[label].write_text("".join(line + "\n" for line in export(conn)))
        engine.dispose()
    from_files = airlock(
        "audit",
        "trace",
        WRITTEN,
        "--checkpoint-file",
        str(files["checkpoint"]),
        "--executor-file",
        str(files["executor"]),
        "--json",
    )
    assert from_files.exit_code == 0, from_files.output
    assert json.loads(from_files.stdout)["events"] == expected
    only_executor = airlock("audit", "trace", WRITTEN, "--executor-db", ledger_url, "--json")
    assert only_executor.exit_code == 0, only_executor.output
    assert _types(json.loads(only_executor.stdout)) == [
        "executor.consumed",
        "executor.outcome",
    ]


def test_an_export_file_changed_after_it_verified_is_refused(
    world: World, ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file is read three times (verified, then two passes): one rewritten between
    the verify and the passes must not be printed as a chain that verified."""
    from airlock import trace as traced

    _run_three(world, ledger_url)
    engine = make_engine(ledger_url, create=False)
    with read_transaction(engine) as conn:
        lines = list(export(conn))
    engine.dispose()
    path = tmp_path / "executor.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    real = traced.trace

    def swapped_after_the_verify(asked: str, chains: Any) -> Any:
        path.write_text(path.read_text().replace("succeeded", "failed"))
        return real(asked, chains)

    monkeypatch.setattr(traced, "trace", swapped_after_the_verify)
    result = airlock("audit", "trace", WRITTEN, "--executor-file", str(path))
    assert result.exit_code == 2
    assert "changed while it was read" in result.stderr
    assert "succeeded" not in result.stdout and "failed" not in result.stdout


def test_a_chain_that_does_not_verify_is_not_traced(world: World, ledger_url: str) -> None:
    _run_three(world, ledger_url)
    engine = make_engine(ledger_url, create=False)
    with engine.begin() as conn:  # an attacker with the database file: triggers off
        conn.execute(sa.text("DROP TRIGGER IF EXISTS audit_log_no_update"))
        conn.execute(sa.text("UPDATE audit_log SET event = replace(event, 'succeeded', 'failed')"))
    engine.dispose()
    result = _trace(world, ledger_url, WRITTEN)
    assert result.exit_code == 1
    assert "FAIL: the executor chain does not verify" in result.stdout
    assert "nothing traced" in result.stdout


def test_unknown_malformed_and_missing_inputs_are_told_apart(world: World, ledger_url: str) -> None:
    _run_three(world, ledger_url)
    unknown = _trace(world, ledger_url, "prop_nosuchproposal")
    assert unknown.exit_code == 1
    assert unknown.stdout.startswith("no event names prop_nosuchproposal")
    malformed = _trace(world, ledger_url, "i-not-an-id")
    assert malformed.exit_code == 2 and "ID is a proposal id" in malformed.stderr
    neither = airlock("audit", "trace", WRITTEN)
    assert neither.exit_code == 2 and "give a chain" in neither.stderr
    both = airlock(
        "audit", "trace", WRITTEN, "--executor-db", ledger_url, "--executor-file", "x.jsonl"
    )
    assert both.exit_code == 2 and "at most one of --executor-db" in both.stderr


def test_linked_ids_are_followed_both_ways_and_hostile_values_are_ignored() -> None:
    # A proposal whose first approval was revoked and a second issued: both approvals.
    at = "2026-11-29T06:00:00.000000Z"
    cp = [
        {"type": "checkpoint.proposal.submitted", "proposal_id": "prop_aaaaaaaa", "at": at},
        {
            "type": "checkpoint.approval.issued",
            "proposal_id": "prop_aaaaaaaa",
            "approval_id": "apv_first001",
            "at": at,
        },
        {
            "type": "checkpoint.approval.revoked",
            "proposal_id": "prop_aaaaaaaa",
            "approval_id": "apv_first001",
            "at": at,
        },
        {
            "type": "checkpoint.approval.issued",
            "proposal_id": "prop_aaaaaaaa",
            "approval_id": "apv_second01",
            "at": at,
        },
        {"type": "checkpoint.proposal.submitted", "proposal_id": "prop_bbbbbbbb", "at": at},
        {"type": "checkpoint.refused", "proposal_id": ["prop_aaaaaaaa"], "at": at},
    ]
    ex = [
        {
            "type": "executor.consumed",
            "proposal_id": "prop_aaaaaaaa",
            "approval_id": "apv_second01",
            "at": at,
        },
        {"type": "executor.outcome", "approval_id": "apv_second01", "at": at},
    ]

    def lines(events: list[dict[str, Any]]) -> list[str]:
        return [
            json.dumps({"seq": n + 1, "row_hash": f"{n:064x}", "prev_hash": "", "event": e})
            for n, e in enumerate(events)
        ]

    found = trace("apv_first001", {"checkpoint": lambda: lines(cp), "executor": lambda: lines(ex)})
    assert found.proposals == ["prop_aaaaaaaa"]
    assert found.approvals == ["apv_first001", "apv_second01"]
    assert [(e.chain, e.seq) for e in found.events] == [
        ("checkpoint", 1),
        ("checkpoint", 2),
        ("checkpoint", 3),
        ("checkpoint", 4),
        ("executor", 1),
        ("executor", 2),
    ]
    with pytest.raises(ValueError, match="proposal id"):
        trace("prop_x", {"checkpoint": lambda: lines(cp)})
