"""Executor refusals before use (``POST /v1/refusals``): a signed note, never a state.

An executor that refuses an approval at verify steps 1-12 (another audience, a clock
behind, revoked…) never consumed it, so the proposal keeps its state: another executor
sharing the ledger may still run it, and it still lapses or gets its outcome as ever.
The note tells people why nothing happened. Receipts are built the way the executor
builds them (``harness.signed_receipt``), on SQLite and PostgreSQL.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
from collections import Counter
from typing import Any

import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from airlock.store import verify_chain
from services.checkpoint.models import refusal_notes
from services.checkpoint.service import REFUSAL_NOTES_MAX
from services.executor import ReceiptSigner
from tests.support.replace import ReplaceAttack, kept_tables, replace_attacks, snapshot

from .harness import AUDIENCE, START, World, approved, audit_events, signed_receipt
from .race_worker import report_refusals

STAGING = "airlock-executor/staging"


def _refusal(
    approval_id: str | None,
    code: str | None = "E_AUDIENCE",
    *,
    action_hash: str | None = None,
    executor: str = STAGING,
    outcome: str = "refused",
    at: int = START + 5,
    detail: str = "approval is for airlock-executor/test, this executor is staging",
    signer: ReceiptSigner | None = None,
) -> dict[str, Any]:
    return signed_receipt(
        approval_id,
        action_hash,
        outcome,
        executor=executor,
        refusal_code=code,
        at=at,
        detail=detail,
        signer=signer,
    )


def _post(world: World, receipt: dict[str, Any], who: str = "executor") -> Any:
    return world.client.post("/v1/refusals", json={"receipt": receipt}, headers=world.auth(who))


def _show(world: World, proposal_id: str) -> dict[str, Any]:
    response = world.client.get(f"/v1/proposals/{proposal_id}", headers=world.auth("bob"))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _stored(world: World) -> list[Any]:
    with world.checkpoint.engine.connect() as conn:
        return list(conn.execute(refusal_notes.select().order_by(refusal_notes.c.id)).all())


def _refused(response: Any, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code, error
    message: str = error["message"]
    return message


def test_a_refusal_before_use_is_shown_as_a_note_and_the_state_is_unchanged(
    world: World,
) -> None:
    proposal, approval_id = approved(world)
    world.clock.advance(7)
    response = _post(world, _refusal(approval_id))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"] == proposal["id"]
    assert body["state"] == "approved" and body["outcome"] is None
    assert body["executor_refusals"] == [
        {
            "approval_id": approval_id,
            "refusal_code": "E_AUDIENCE",
            "detail": "approval is for airlock-executor/test, this executor is staging",
            "executor": STAGING,
            "at": START + 5,
            "reported_at": START + 7,
        }
    ]
    assert _show(world, proposal["id"])["executor_refusals"] == body["executor_refusals"]
    (event,) = audit_events(world, "checkpoint.executor_refusal")
    assert event["proposal_id"] == proposal["id"] and event["approval_id"] == approval_id
    assert event["refusal_code"] == "E_AUDIENCE" and event["executor"] == STAGING
    assert event["executor_head"] == {"seq": 1, "hash": "sha256:" + "0" * 64}
    (row,) = _stored(world)
    assert row.receipt_keyid.startswith("ed25519:") and row.proposal_id == proposal["id"]
    # The feed's executor head moves with outcomes only.
    feed = world.client.get("/v1/feed", headers=world.auth("executor")).json()
    assert feed["executor_head"] is None
    # Still the approved proposal it was: revocable by a person, lapsing on time.
    assert audit_events(world, "checkpoint.outcome.reported") == []


def test_a_noted_approval_still_lapses_unused(world: World) -> None:
    proposal, approval_id = approved(world)
    assert (
        _post(world, _refusal(approval_id, "E_NOT_YET_VALID", executor=AUDIENCE)).status_code == 200
    )
    world.clock.advance(901)
    assert world.checkpoint.sweep()["lapsed"] == 1
    shown = _show(world, proposal["id"])
    assert shown["state"] == "lapsed"
    assert [n["refusal_code"] for n in shown["executor_refusals"]] == ["E_NOT_YET_VALID"]


def test_a_noted_approval_still_gets_the_outcome_another_executor_reports(world: World) -> None:
    proposal, approval_id = approved(world)
    assert _post(world, _refusal(approval_id, "E_EXPIRED", executor=AUDIENCE)).status_code == 200
    outcome = world.client.post(
        "/v1/outcomes",
        json={"receipt": signed_receipt(approval_id, proposal["action_hash"], "succeeded")},
        headers=world.auth("executor"),
    )
    assert outcome.status_code == 200, outcome.text
    assert outcome.json()["state"] == "executed"
    assert [n["refusal_code"] for n in outcome.json()["executor_refusals"]] == ["E_EXPIRED"]


def test_the_same_receipt_posted_again_is_one_note(world: World) -> None:
    _, approval_id = approved(world)
    receipt = _refusal(approval_id)
    first = _post(world, receipt)
    world.clock.advance(30)  # the executor retries after a lost answer
    again = _post(world, receipt)
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert len(_stored(world)) == 1
    assert len(audit_events(world, "checkpoint.executor_refusal")) == 1


def test_another_refusal_of_the_same_approval_is_a_second_note_oldest_first(
    world: World,
) -> None:
    _, approval_id = approved(world)
    assert _post(world, _refusal(approval_id)).status_code == 200
    world.clock.advance(60)
    later = _post(world, _refusal(approval_id, "E_ACCOUNT", executor=AUDIENCE, at=START + 60))
    assert later.status_code == 200, later.text
    notes = later.json()["executor_refusals"]
    assert [(n["refusal_code"], n["executor"]) for n in notes] == [
        ("E_AUDIENCE", STAGING),
        ("E_ACCOUNT", AUDIENCE),
    ]
    assert len(audit_events(world, "checkpoint.executor_refusal")) == 2


def test_a_receipt_naming_the_approval_s_own_action_hash_is_taken(world: World) -> None:
    proposal, approval_id = approved(world)
    receipt = _refusal(approval_id, "E_REVOKED", action_hash=proposal["action_hash"])
    assert _post(world, receipt).status_code == 200
    assert len(_stored(world)) == 1


def _other_hash(world: World) -> str:
    other, _ = approved(world, proposal_id="prop_test0000002", resource_id="i-t4n0other00")
    digest: str = other["action_hash"]
    return digest


BAD_RECEIPTS: dict[str, dict[str, Any]] = {
    "outcome-succeeded": {"outcome": "succeeded", "code": None},
    "outcome-failed": {"outcome": "failed", "code": None},
    "no-refusal-code": {"code": None},
    "empty-refusal-code": {"code": ""},
    "refusal-code-not-a-code": {"code": "audience\x1b[2J"},
    "replay": {"code": "E_REPLAY"},
    "precondition-after-consume": {"code": "E_PRECONDITION"},
    # About the bytes presented, not the approval: the executor never reports them, and
    # no other code (a made-up one) may reach a proposal's page either (found in review).
    "signature": {"code": "E_SIGNATURE"},
    "made-up-code": {"code": "E_SEE_ATTACHED_LINK"},
    # datetime cannot show it: every page with the note would fail (found in review).
    "time-past-the-year-9999": {"at": 253402300800},
    "no-approval-id": {"approval_id": None},
    "another-action-hash": {"action_hash": "other"},
    "unprintable-executor": {"executor": "staging\x1b[2J"},
}


@pytest.mark.parametrize("bad", BAD_RECEIPTS.values(), ids=BAD_RECEIPTS.keys())
def test_a_receipt_that_is_not_a_refusal_before_use_is_refused_and_records_nothing(
    world: World, bad: dict[str, Any]
) -> None:
    proposal, approval_id = approved(world)
    kwargs: dict[str, Any] = {"code": bad.get("code", "E_AUDIENCE")}
    for key in ("outcome", "executor", "at"):
        if key in bad:
            kwargs[key] = bad[key]
    if bad.get("action_hash") == "other":
        kwargs["action_hash"] = _other_hash(world)
    receipt = _refusal(bad.get("approval_id", approval_id), **kwargs)
    _refused(_post(world, receipt), 422, "E_RECEIPT")
    assert _stored(world) == []
    assert audit_events(world, "checkpoint.executor_refusal") == []
    assert _show(world, proposal["id"])["state"] == "approved"
    assert [e["code"] for e in audit_events(world, "checkpoint.refused")] == ["E_RECEIPT"]


def test_a_code_other_than_a_refusal_before_use_is_refused_naming_those_taken(
    world: World,
) -> None:
    _, approval_id = approved(world)
    message = _refused(_post(world, _refusal(approval_id, "E_REPLAY")), 422, "E_RECEIPT")
    for code in ("E_ACCOUNT", "E_AUDIENCE", "E_EXPIRED", "E_NOT_YET_VALID", "E_REVOKED", "E_TTL"):
        assert code in message


def test_the_last_second_a_page_can_show_is_taken(world: World) -> None:
    proposal, approval_id = approved(world)
    assert _post(world, _refusal(approval_id, at=253402300799)).status_code == 200
    [note] = _show(world, proposal["id"])["executor_refusals"]
    assert note["at"] == 253402300799


@pytest.mark.parametrize("who", ["agent", "alice", "admin", "viewer"])
def test_only_the_executor_token_may_report_a_refusal(world: World, who: str) -> None:
    _, approval_id = approved(world)
    # An agent token reports only a gate's receipt, which this is not.
    status, error = (422, "E_RECEIPT") if who == "agent" else (403, "E_FORBIDDEN")
    _refused(_post(world, _refusal(approval_id), who=who), status, error)
    unauthenticated = world.client.post("/v1/refusals", json={"receipt": _refusal(approval_id)})
    _refused(unauthenticated, 401, "E_UNAUTHENTICATED")
    assert _stored(world) == []


def test_a_refusal_of_an_unknown_approval_is_not_found(world: World) -> None:
    approved(world)
    _refused(_post(world, _refusal("apv_" + "0" * 32)), 404, "E_NOT_FOUND")
    assert _stored(world) == []


def test_a_refusal_signed_by_an_untrusted_key_is_refused(world: World) -> None:
    _, approval_id = approved(world)
    forger = ReceiptSigner(Ed25519PrivateKey.generate())
    _refused(_post(world, _refusal(approval_id, signer=forger)), 422, "E_RECEIPT")
    tampered = _refusal(approval_id)
    tampered["signatures"][0]["sig"] = _refusal(approval_id, "E_ACCOUNT")["signatures"][0]["sig"]
    _refused(_post(world, tampered), 422, "E_RECEIPT")
    assert _stored(world) == []


def test_a_refusal_without_a_receipt_key_set_is_refused(untrusting_world: World) -> None:
    world = untrusting_world
    _, approval_id = approved(world)
    _refused(_post(world, _refusal(approval_id)), 422, "E_RECEIPT")
    assert _stored(world) == []


def test_refusals_past_the_cap_are_refused_and_those_kept_stay(world: World) -> None:
    proposal, approval_id = approved(world)
    receipts = [_refusal(approval_id, at=START + i) for i in range(REFUSAL_NOTES_MAX + 1)]
    for receipt in receipts[:-1]:
        assert _post(world, receipt).status_code == 200
    _refused(_post(world, receipts[-1]), 409, "E_STATE")
    # A retry of one already kept is still answered as before.
    assert _post(world, receipts[0]).status_code == 200
    assert len(_stored(world)) == REFUSAL_NOTES_MAX
    assert len(_show(world, proposal["id"])["executor_refusals"]) == REFUSAL_NOTES_MAX
    assert len(audit_events(world, "checkpoint.executor_refusal")) == REFUSAL_NOTES_MAX


def test_executor_text_is_stored_printable_and_clipped(world: World) -> None:
    proposal, approval_id = approved(world)
    hostile = "\x00\x1b[31mred\u202eevil\r\n" + "x" * 1980
    assert _post(world, _refusal(approval_id, detail=hostile)).status_code == 200
    (note,) = _show(world, proposal["id"])["executor_refusals"]
    assert note["detail"].startswith("\\u0000\\u001b[31mred\\u202eevil\\u000d\\u000a")
    assert note["detail"].isprintable()
    assert len(note["detail"]) == 2000 and note["detail"].endswith("…")


def test_clipping_never_cuts_an_escape_in_half(world: World) -> None:
    proposal, approval_id = approved(world)
    # Escapes of 6 characters from the 1997th on: a clip at 1999 would leave "\u20".
    hostile = "x" * 1996 + "\u202e" * 4
    assert _post(world, _refusal(approval_id, detail=hostile)).status_code == 200
    (note,) = _show(world, proposal["id"])["executor_refusals"]
    assert note["detail"] == "x" * 1996 + "…"


def test_a_detail_that_fits_exactly_is_kept_whole(world: World) -> None:
    proposal, approval_id = approved(world)
    assert _post(world, _refusal(approval_id, detail="y" * 2000)).status_code == 200
    (note,) = _show(world, proposal["id"])["executor_refusals"]
    assert note["detail"] == "y" * 2000


def test_the_notes_cannot_be_changed_or_deleted(world: World) -> None:
    _, approval_id = approved(world)
    assert _post(world, _refusal(approval_id)).status_code == 200
    for statement in (
        "UPDATE refusal_notes SET refusal_code = 'E_EXPIRED'",
        "DELETE FROM refusal_notes",
    ):
        with (
            pytest.raises(sa.exc.DBAPIError, match="insert-only"),
            world.checkpoint.engine.begin() as conn,
        ):
            conn.execute(sa.text(statement))
    assert [row.refusal_code for row in _stored(world)] == ["E_AUDIENCE"]


def test_insert_or_replace_in_the_sqlite3_shell_cannot_swap_a_note_or_an_audit_row(
    sqlite_world: World, sqlite_url: str
) -> None:
    """SQLite's REPLACE deletes the row it conflicts with, and the shell (no
    recursive_triggers) fires no DELETE trigger for it: migration 0005 refuses the
    conflict before that, on every key of both insert-only tables."""
    world = sqlite_world
    _, approval_id = approved(world)
    assert _post(world, _refusal(approval_id)).status_code == 200
    shell = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        assert shell.execute("PRAGMA recursive_triggers").fetchone()[0] == 0
        # executor_resolutions (0006) is attacked in test_resolution_conflicts.py.
        assert kept_tables(shell) == {"refusal_notes", "audit_log", "executor_resolutions"}
        attacks = list(replace_attacks(shell, "refusal_notes"))
        assert {str(a) for a in attacks} == {
            "refusal_notes on id",
            "refusal_notes on receipt_sha256",
        }
        seq, head = shell.execute(
            "SELECT seq, row_hash FROM audit_log ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        (old_hash,) = shell.execute("SELECT row_hash FROM audit_log WHERE seq = 1").fetchone()
        attacks.append(  # extends the head, so only its row_hash conflicts (with row 1's)
            ReplaceAttack(
                "audit_log",
                ("row_hash",),
                "INSERT OR REPLACE INTO audit_log (seq, event, prev_hash, row_hash) "
                "VALUES (:seq, '{}', :prev, :hash)",
                {"seq": seq + 1, "prev": head, "hash": old_hash},
            )
        )
        for attack in attacks:
            before = snapshot(shell, attack.table)
            with pytest.raises(sqlite3.IntegrityError, match="conflicting with a row"):
                shell.execute(attack.sql, attack.params)
            assert snapshot(shell, attack.table) == before, attack
    finally:
        shell.close()
    assert [row.refusal_code for row in _stored(world)] == ["E_AUDIENCE"]
    assert verify_chain(world.checkpoint.engine).ok


RACERS = 8
ROUNDS_EACH = 3


def test_executors_racing_to_report_keep_one_note_per_receipt_and_no_more_than_the_cap(
    world: World,
) -> None:
    """Eight processes post one shared receipt at the same instant, then three receipts of
    their own each round: the shared one is one note, and of the 24 others only as many
    as the cap leaves room for are kept, whatever the interleaving."""
    proposal, approval_id = approved(world)
    shared = _refusal(approval_id)
    work = [
        [shared]
        + [_refusal(approval_id, at=START + 100 + n * ROUNDS_EACH + k) for k in range(ROUNDS_EACH)]
        for n in range(RACERS)
    ]
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(RACERS)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=report_refusals,
            args=(world.url, str(world.keys_dir), world.clock(), mine, barrier, results),
        )
        for mine in work
    ]
    for proc in procs:
        proc.start()
    answers = [results.get(timeout=180) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    assert all(mine[0] == "ok" for mine in answers)  # the shared receipt: one answer for all
    later = Counter(code for mine in answers for code in mine[1:])
    assert later == {
        "ok": REFUSAL_NOTES_MAX - 1,
        "E_STATE": RACERS * ROUNDS_EACH - REFUSAL_NOTES_MAX + 1,
    }
    assert len(_stored(world)) == REFUSAL_NOTES_MAX
    assert len(audit_events(world, "checkpoint.executor_refusal")) == REFUSAL_NOTES_MAX
    assert _show(world, proposal["id"])["state"] == "approved"
    assert verify_chain(world.checkpoint.engine).ok
