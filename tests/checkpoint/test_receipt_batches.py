"""``POST /v1/receipts``: a batch of receipts, each answered as its own endpoint answers it.

Each receipt here is built the way the executor builds it (``harness.signed_receipt``);
each batch's answers are held to what ``POST /v1/outcomes`` and ``POST /v1/refusals``
answer for the same receipt, and to what the database and the audit chain hold after.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa

from airlock.api import BODY_MAX_BYTES, RECEIPTS_MAX
from services.checkpoint import batches, reports
from services.checkpoint.models import outcomes, refusal_notes

from .harness import START, World, approved, audit_events, signed_receipt

PATH = "/v1/receipts"
STAGING = "staging"


def _outcome(approval_id: str, action_hash: str, outcome: str = "succeeded") -> dict[str, Any]:
    return {"kind": "outcome", "receipt": signed_receipt(approval_id, action_hash, outcome)}


def _note(approval_id: str) -> dict[str, Any]:
    receipt = signed_receipt(
        approval_id,
        None,
        "refused",
        executor=STAGING,
        refusal_code="E_AUDIENCE",
        at=START + 5,
        detail="approval is for another audience",
    )
    return {"kind": "refusal", "receipt": receipt}


def _post(world: World, items: list[dict[str, Any]], who: str = "executor") -> Any:
    return world.client.post(PATH, json={"receipts": items}, headers=world.auth(who))


def _answers(response: Any) -> list[tuple[int, str | None]]:
    assert response.status_code == 200, response.text
    return [(r["status"], (r.get("error") or {}).get("code")) for r in response.json()["results"]]


def _alone(world: World, item: dict[str, Any]) -> tuple[int, str | None, str | None]:
    """What the receipt's own endpoint answers it."""
    path = "/v1/outcomes" if item["kind"] == "outcome" else "/v1/refusals"
    response = world.client.post(
        path, json={"receipt": item["receipt"]}, headers=world.auth("executor")
    )
    error = response.json().get("error") if response.status_code != 200 else None
    return response.status_code, error and error["code"], error and error["message"]


def _rows(world: World, table: sa.Table) -> list[Any]:
    with world.checkpoint.engine.connect() as conn:
        return list(conn.execute(table.select()).all())


def _state(world: World, proposal_id: str) -> str:
    shown = world.client.get(f"/v1/proposals/{proposal_id}", headers=world.auth("bob"))
    state: str = shown.json()["state"]
    return state


def _three(world: World) -> list[tuple[dict[str, Any], str]]:
    return [
        approved(world, proposal_id=f"prop_batch{n:07d}", resource_id=f"i-t4nbatch{n:04d}")
        for n in range(3)
    ]


def test_a_refused_receipt_between_two_accepted_ones_leaves_no_trace_and_stops_neither(
    world: World,
) -> None:
    (a, a_id), (b, b_id), (c, c_id) = _three(world)
    forged = _outcome(b_id, c["action_hash"])  # signed, but names another action hash
    items = [_outcome(a_id, a["action_hash"]), forged, _outcome(c_id, c["action_hash"])]
    response = _post(world, items)
    assert _answers(response) == [(200, None), (422, "E_RECEIPT"), (200, None)]
    assert response.json()["results"][1]["error"]["message"] == (
        "receipt names another action hash"
    )
    assert [_state(world, p["id"]) for p in (a, b, c)] == ["executed", "approved", "executed"]
    assert sorted(r.approval_id for r in _rows(world, outcomes)) == sorted([a_id, c_id])
    reported = audit_events(world, "checkpoint.outcome.reported")
    assert sorted(e["approval_id"] for e in reported) == sorted([a_id, c_id])
    # The refusal's audit record, as its own endpoint writes it, naming this request.
    refused = audit_events(world, "checkpoint.refused")
    assert [(e["code"], e["request"], e["by"]) for e in refused] == [
        ("E_RECEIPT", "POST /v1/receipts", "executor-1")
    ]
    # Its own endpoint answers it the same, then and now.
    assert _alone(world, forged) == (422, "E_RECEIPT", "receipt names another action hash")


def test_a_receipt_that_fails_after_writing_is_rolled_back_alone(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    (a, a_id), (b, b_id), (c, c_id) = _three(world)
    record = reports.notify.record

    def failing(conn: Any, config: Any, proposal_id: str, *args: Any, **kwargs: Any) -> None:
        # After the outcome row, the state and the audit event are written.
        if proposal_id == b["id"]:
            raise RuntimeError("the handler failed")
        record(conn, config, proposal_id, *args, **kwargs)

    monkeypatch.setattr(reports.notify, "record", failing)
    items = [_outcome(x, p["action_hash"]) for p, x in ((a, a_id), (b, b_id), (c, c_id))]
    assert _answers(_post(world, items)) == [(200, None), (500, None), (200, None)]
    assert [_state(world, p["id"]) for p in (a, b, c)] == ["executed", "approved", "executed"]
    assert sorted(r.approval_id for r in _rows(world, outcomes)) == sorted([a_id, c_id])
    reported = audit_events(world, "checkpoint.outcome.reported")
    assert sorted(e["approval_id"] for e in reported) == sorted([a_id, c_id])
    monkeypatch.setattr(reports.notify, "record", record)
    # Sent again, it lands; the other two are retries.
    assert _answers(_post(world, items)) == [(200, None)] * 3
    assert _state(world, b["id"]) == "executed"


def test_a_batch_posted_again_is_answered_as_each_retry_is_and_writes_nothing(
    world: World,
) -> None:
    (a, a_id), (_b, b_id), (c, c_id) = _three(world)
    items = [
        _outcome(a_id, a["action_hash"]),
        _note(b_id),
        _outcome("appr_" + "0" * 26, c["action_hash"]),  # no such approval
        _outcome(c_id, c["action_hash"], "failed"),
    ]
    first = _answers(_post(world, items))
    assert first == [(200, None), (200, None), (404, "E_NOT_FOUND"), (200, None)]
    chain = audit_events(world, "checkpoint.outcome.reported")
    notes = _rows(world, refusal_notes)
    assert _answers(_post(world, items)) == first
    assert audit_events(world, "checkpoint.outcome.reported") == chain
    assert _rows(world, refusal_notes) == notes
    # Each is what its own endpoint answers a retry.
    assert [_alone(world, item)[:2] for item in items] == first
    # Another outcome of a recorded one is refused, as alone.
    other = _outcome(a_id, a["action_hash"], "failed")
    assert _answers(_post(world, [other])) == [(409, "E_STATE")]
    assert _alone(world, other)[:2] == (409, "E_STATE")
    assert _state(world, a["id"]) == "executed"


def test_answers_come_in_the_order_the_receipts_were_sent(world: World) -> None:
    pairs = _three(world)
    unknown = "appr_" + "1" * 26
    items = [
        _outcome(unknown, pairs[0][0]["action_hash"]),
        _note(pairs[0][1]),
        _outcome(pairs[1][1], pairs[1][0]["action_hash"], "in_doubt"),
        _outcome(pairs[2][1], pairs[1][0]["action_hash"]),
        _outcome(pairs[2][1], pairs[2][0]["action_hash"], "refused"),
        _note(unknown),
    ]
    assert _answers(_post(world, items)) == [
        (404, "E_NOT_FOUND"),
        (200, None),
        (200, None),
        (422, "E_RECEIPT"),
        (200, None),
        (404, "E_NOT_FOUND"),
    ]
    states = [_state(world, p["id"]) for p, _ in pairs]
    assert states == ["approved", "in_doubt", "refused"]


def test_a_full_batch_holds_the_chain_lock_for_a_few_receipts_at_a_time(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Measured in review (PostgreSQL): an approve waited for the whole 50-receipt
    transaction, holding the chain lock, ~10x its time alone while batches kept coming."""
    together = batches._together
    sizes: list[int] = []

    def counted(*args: Any) -> None:
        sizes.append(len(args[2]))
        together(*args)

    monkeypatch.setattr(batches, "_together", counted)
    count = 2 * batches.PER_COMMIT + 1
    pairs = [
        approved(world, proposal_id=f"prop_lock{n:08d}", resource_id=f"i-t4nlock{n:05d}")
        for n in range(count)
    ]
    items = [_outcome(aid, proposal["action_hash"]) for proposal, aid in pairs]
    assert _answers(_post(world, items)) == [(200, None)] * count
    assert sizes == [batches.PER_COMMIT, batches.PER_COMMIT, 1]
    assert len(audit_events(world, "checkpoint.outcome.reported")) == count
    assert {_state(world, p["id"]) for p, _ in pairs} == {"executed"}


def test_a_refusal_receipt_refused_in_a_batch_writes_its_audit_record_and_nothing_else(
    world: World,
) -> None:
    (_a, a_id), _, _ = _three(world)
    note = _note(a_id)
    note["receipt"]["signatures"][0]["sig"] = note["receipt"]["signatures"][0]["sig"][::-1]
    assert _answers(_post(world, [note])) == [(422, "E_RECEIPT")]
    assert _rows(world, refusal_notes) == []
    assert audit_events(world, "checkpoint.executor_refusal") == []
    refused = audit_events(world, "checkpoint.refused")
    assert [(e["code"], e["request"]) for e in refused] == [("E_RECEIPT", "POST /v1/receipts")]
    assert _alone(world, note)[:2] == (422, "E_RECEIPT")


@pytest.mark.parametrize("count", [0, RECEIPTS_MAX + 1])
def test_a_batch_of_too_many_or_no_receipts_is_refused_whole(world: World, count: int) -> None:
    (a, a_id), _, _ = _three(world)
    response = _post(world, [_outcome(a_id, a["action_hash"])] * count)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "E_INVALID"
    assert _rows(world, outcomes) == []


@pytest.mark.parametrize(
    "body",
    [
        b'{"receipts": [], "receipts": []}',  # a duplicate key
        b'{"receipts": [{"kind": "vote", "receipt": {}}]}',
        b'{"receipts": {"kind": "outcome"}}',
        b'{"receipts": [{"kind": "outcome"}]}',
    ],
)
def test_a_malformed_batch_is_refused_whole(world: World, body: bytes) -> None:
    response = world.client.post(
        PATH, content=body, headers={**world.auth("executor"), "Content-Type": "application/json"}
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "E_INVALID"


def test_a_batch_over_the_body_cap_is_refused_whole(world: World) -> None:
    (a, a_id), _, _ = _three(world)
    item = _outcome(a_id, a["action_hash"])
    item["receipt"]["payload"] += "A" * BODY_MAX_BYTES
    response = _post(world, [item])
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "E_INVALID"
    assert _rows(world, outcomes) == []


@pytest.mark.parametrize(
    ("who", "status", "code"), [("alice", 403, "E_FORBIDDEN"), ("", 401, "E_UNAUTHENTICATED")]
)
def test_a_batch_from_a_caller_who_reports_nothing_is_refused_whole(
    world: World, who: str, status: int, code: str
) -> None:
    (a, a_id), _, _ = _three(world)
    headers = world.auth(who) if who else {}
    response = world.client.post(
        PATH, json={"receipts": [_outcome(a_id, a["action_hash"])]}, headers=headers
    )
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert _rows(world, outcomes) == []
    assert _state(world, a["id"]) == "approved"


def test_a_gate_s_receipt_for_a_cloud_action_is_refused_in_a_batch_as_alone(
    world: World,
) -> None:
    (a, a_id), _, _ = _three(world)
    item = _outcome(a_id, a["action_hash"])
    answers = _post(world, [item], who="agent")
    assert _answers(answers) == [(422, "E_RECEIPT")]
    alone = world.client.post(
        "/v1/outcomes", json={"receipt": item["receipt"]}, headers=world.auth("agent")
    )
    assert alone.status_code == 422
    assert answers.json()["results"][0]["error"] == alone.json()["error"]
    assert _rows(world, outcomes) == []


def test_the_answer_carries_no_proposal(world: World) -> None:
    (a, a_id), _, _ = _three(world)
    body = _post(world, [_outcome(a_id, a["action_hash"])]).json()
    assert body == {"results": [{"status": 200, "error": None}]}
    assert json.dumps(body).count("prop_") == 0


def test_an_executor_resolution_contradicting_a_person_s_is_kept_and_answered_as_alone(
    world: World,
) -> None:
    from .test_resolution_conflicts import _executor_resolution, _in_doubt_resolved_here

    proposal, approval_id = _in_doubt_resolved_here(world, "happened")
    (a, a_id), _, _ = _three(world)
    contradicting = {
        "kind": "outcome",
        "receipt": _executor_resolution(proposal, approval_id, "did_not_happen"),
    }
    items = [contradicting, _outcome(a_id, a["action_hash"])]
    response = _post(world, items)
    assert _answers(response) == [(409, "E_RESOLUTION_CONFLICT"), (200, None)]
    # Kept and audited once, as by POST /v1/outcomes; the proposal keeps the person's state.
    (event,) = audit_events(world, "checkpoint.executor_resolution")
    assert (event["approval_id"], event["agrees"]) == (approval_id, False)
    assert _state(world, proposal["id"]) == "executed"
    assert _state(world, a["id"]) == "executed"
    status, code, message = _alone(world, contradicting)
    assert (status, code) == (409, "E_RESOLUTION_CONFLICT")
    assert response.json()["results"][0]["error"]["message"] == message
    assert _answers(_post(world, items)) == [(409, "E_RESOLUTION_CONFLICT"), (200, None)]
    assert len(audit_events(world, "checkpoint.executor_resolution")) == 1


def test_a_full_disk_mid_batch_answers_no_receipt_recorded_that_was_not(
    sqlite_world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite rolls back the whole transaction on a full disk (SQLITE_FULL), not only the
    savepoint: the receipts before it were undone too, and a later savepoint would commit
    on its own. Every receipt of that transaction answers 500; none is kept, none is
    answered 200."""
    world = sqlite_world
    (a, a_id), (b, b_id), (c, c_id) = _three(world)
    with world.checkpoint.engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE filler (v BLOB)")
    record = reports.notify.record

    def full(conn: Any, config: Any, proposal_id: str, *args: Any, **kwargs: Any) -> None:
        if proposal_id == b["id"]:  # b's write does not fit on the disk
            pages = conn.exec_driver_sql("PRAGMA page_count").scalar()
            conn.exec_driver_sql(f"PRAGMA max_page_count = {pages + 2}")
            try:
                conn.exec_driver_sql("INSERT INTO filler VALUES (randomblob(1000000))")
            finally:
                conn.exec_driver_sql("PRAGMA max_page_count = 1073741823")
        record(conn, config, proposal_id, *args, **kwargs)

    monkeypatch.setattr(reports.notify, "record", full)
    items = [_outcome(x, p["action_hash"]) for p, x in ((a, a_id), (b, b_id), (c, c_id))]
    assert _answers(_post(world, items)) == [(500, None)] * 3
    assert _rows(world, outcomes) == []
    assert audit_events(world, "checkpoint.outcome.reported") == []
    assert {_state(world, p["id"]) for p in (a, b, c)} == {"approved"}
    # Posted again once the disk has room: each is recorded.
    monkeypatch.setattr(reports.notify, "record", record)
    assert _answers(_post(world, items)) == [(200, None)] * 3


def test_a_failed_transaction_after_an_in_doubt_answers_only_its_receipts_500(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An in_doubt outcome splits the batch into transactions; one that fails after
    another committed answers its own receipts 500 and keeps the others' answers: what is
    answered 200 is what is recorded."""
    from services.checkpoint import batches

    (a, a_id), (b, b_id), (c, c_id) = _three(world)
    lock, calls = batches.AuditLog.lock, []

    def second_fails(conn: Any) -> None:
        calls.append(1)
        if len(calls) == 2:  # the transaction after the in_doubt's: a lock timeout, say
            raise sa.exc.OperationalError("SELECT lock", {}, Exception("lock timeout"))
        lock(conn)

    monkeypatch.setattr(batches.AuditLog, "lock", staticmethod(second_fails))
    items = [
        _outcome(a_id, a["action_hash"]),
        _outcome(b_id, b["action_hash"], "in_doubt"),
        _outcome(c_id, c["action_hash"]),
    ]
    assert _answers(_post(world, items)) == [(200, None), (200, None), (500, None)]
    assert sorted(r.approval_id for r in _rows(world, outcomes)) == sorted([a_id, b_id])
    assert [_state(world, p["id"]) for p in (a, b, c)] == ["executed", "in_doubt", "approved"]
