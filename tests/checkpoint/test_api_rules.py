"""The approval rules, through the raw HTTP API.

Rules the database enforces (idempotency, one open proposal, one vote, quorum, windows,
lockout counters) run on SQLite and PostgreSQL; rules decided in Python before any write
(roles, stale view, typed confirmation, self-approval) run on SQLite only, to keep the
suite fast.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from airlock.store import verify_chain
from services.checkpoint.errors import Refusal
from services.checkpoint.models import feed_head
from services.checkpoint.service import FEED_SEQ_PER_SECOND

from .harness import SESSION_TTL, World, audit_events


def _pending(world: World, **kwargs: Any) -> dict[str, Any]:
    response = world.submit(**kwargs)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    assert body["state"] == "pending"
    return body


def _code(response: Any) -> str:
    return str(response.json()["error"]["code"])


def test_stop_approved_by_one_person_issues_a_signed_approval(world: World) -> None:
    p = _pending(world)
    assert p["policy"]["rule"] == "stop-one-person" and p["votes_needed"] == 1
    r = world.approve("alice", p["id"], p["action_hash"], note="looks idle")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["state"] == "approved"
    assert body["approval"]["envelope"]["payloadType"] == "application/vnd.airlock.approval.v1+json"
    assert [v["voter"] for v in body["votes"]] == ["alice"]
    assert verify_chain(world.checkpoint.engine).ok


def test_approving_with_a_stale_action_hash_is_refused(sqlite_world: World) -> None:
    world = sqlite_world
    p = _pending(world)
    r = world.approve("alice", p["id"], "sha256:" + "0" * 64)
    assert (r.status_code, _code(r)) == (409, "E_STALE_VIEW")
    assert (
        world.client.get(f"/v1/proposals/{p['id']}", headers=world.auth("alice")).json()["votes"]
        == []
    )


def test_high_risk_approve_without_confirm_is_refused(sqlite_world: World) -> None:
    world = sqlite_world
    p = _pending(world, operation="delete")
    assert p["policy"]["quorum"] == 2 and p["policy"]["confirm"] and p["risk"] == "high"
    r = world.approve("alice", p["id"], p["action_hash"])
    assert (r.status_code, _code(r)) == (422, "E_CONFIRM_REQUIRED")


def test_high_risk_approve_with_wrong_confirm_is_refused(sqlite_world: World) -> None:
    world = sqlite_world
    p = _pending(world, operation="delete")
    for wrong in ("i-t4n0exampl", "I-T4N0EXAMPLE", "i-t4n0example ", "i-other000"):
        r = world.approve("alice", p["id"], p["action_hash"], confirm=wrong)
        assert (r.status_code, _code(r)) == (422, "E_CONFIRM_MISMATCH"), wrong
    ok = world.approve("alice", p["id"], p["action_hash"], confirm="i-t4n0example")
    assert ok.status_code == 200 and ok.json()["state"] == "pending"
    assert ok.json()["votes_needed"] == 1


def test_delete_needs_two_distinct_people(world: World) -> None:
    p = _pending(world, operation="delete")
    world.approve("alice", p["id"], p["action_hash"], confirm="i-t4n0example")
    r = world.approve("bob", p["id"], p["action_hash"], confirm="i-t4n0example")
    assert r.json()["state"] == "approved"
    approvers = [v["voter"] for v in r.json()["votes"]]
    assert approvers == ["alice", "bob"]


@pytest.mark.parametrize("how", ["disabled", "demoted to viewer"])
def test_vote_of_a_disabled_or_demoted_person_no_longer_counts(world: World, how: str) -> None:
    import base64
    import json

    import sqlalchemy as sa

    from services.checkpoint.models import users

    p = _pending(world, operation="delete")
    first = world.approve("alice", p["id"], p["action_hash"], confirm="i-t4n0example").json()
    assert first["votes_needed"] == 1
    if how == "disabled":
        world.accounts.disable_user("alice")  # e.g. her account was found compromised
    else:
        with world.checkpoint.engine.begin() as conn:
            conn.execute(sa.update(users).where(users.c.username == "alice").values(role="viewer"))
    r = world.approve("bob", p["id"], p["action_hash"], confirm="i-t4n0example").json()
    assert r["state"] == "pending" and r["votes_needed"] == 1
    assert [(v["voter"], v["counts"]) for v in r["votes"]] == [("alice", False), ("bob", True)]
    # A read of the record counts the votes by the same rule as the vote did.
    assert world.client.get(f"/v1/proposals/{p['id']}", headers=world.auth("bob")).json() == r
    done = world.approve("carol", p["id"], p["action_hash"], confirm="i-t4n0example").json()
    assert done["state"] == "approved"
    statement = json.loads(base64.b64decode(done["approval"]["envelope"]["payload"]))
    assert [a["id"] for a in statement["approvers"]] == ["bob", "carol"]
    issued = audit_events(world, "checkpoint.approval.issued")[-1]
    assert issued["approvers"] == ["bob", "carol"]


def test_second_vote_of_the_same_person_is_refused(world: World) -> None:
    p = _pending(world, operation="delete")
    first = world.approve("alice", p["id"], p["action_hash"], confirm="i-t4n0example")
    assert first.status_code == 200
    again = world.approve("alice", p["id"], p["action_hash"], confirm="i-t4n0example")
    assert (again.status_code, _code(again)) == (409, "E_ALREADY_VOTED")
    assert (
        world.client.get(f"/v1/proposals/{p['id']}", headers=world.auth("bob")).json()["state"]
        == "pending"
    )


def test_self_approval_is_refused(sqlite_world: World) -> None:
    world = sqlite_world
    # The agent claims the proposal was made by alice: alice may then not approve it.
    p = _pending(world, proposed_by="alice")
    r = world.approve("alice", p["id"], p["action_hash"])
    assert (r.status_code, _code(r)) == (403, "E_SELF_APPROVAL")
    assert world.approve("bob", p["id"], p["action_hash"]).json()["state"] == "approved"


def test_service_tokens_and_viewers_cannot_approve(sqlite_world: World) -> None:
    world = sqlite_world
    p = _pending(world)
    for who in ("agent", "executor", "viewer"):
        r = world.approve(who, p["id"], p["action_hash"])
        assert (r.status_code, _code(r)) == (403, "E_FORBIDDEN"), who


def test_people_cannot_submit_and_anonymous_is_refused(sqlite_world: World) -> None:
    world = sqlite_world
    assert _code(world.submit("alice")) == "E_FORBIDDEN"
    r = world.client.post("/v1/proposals", content=b"{}")
    assert (r.status_code, _code(r)) == (401, "E_UNAUTHENTICATED")
    r = world.client.get("/v1/proposals", headers={"Authorization": "Bearer nope"})
    assert (r.status_code, _code(r)) == (401, "E_UNAUTHENTICATED")


def test_submit_is_idempotent_on_id_and_hash(world: World) -> None:
    first = world.submit()
    again = world.submit()
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["action_hash"] == again.json()["action_hash"]


def test_same_id_with_another_action_is_a_conflict(world: World) -> None:
    assert world.submit().status_code == 201
    r = world.submit(reason="a different reason")
    assert (r.status_code, _code(r)) == (409, "E_CONFLICT")


def test_one_open_proposal_per_account_resource_operation(world: World) -> None:
    assert world.submit(proposal_id="prop_first00001").status_code == 201
    r = world.submit(proposal_id="prop_second0001")
    assert (r.status_code, _code(r)) == (409, "E_DUPLICATE_OPEN")
    # another operation on the same resource is a different slot
    assert world.submit(proposal_id="prop_third00001", operation="delete").status_code == 201


def test_closed_proposal_frees_the_slot(world: World) -> None:
    p = _pending(world, proposal_id="prop_first00001")
    world.client.post(
        f"/v1/proposals/{p['id']}/reject",
        json={"reason_code": "not_idle", "note": "batch job"},
        headers=world.auth("alice"),
    )
    assert world.submit(proposal_id="prop_second0001").status_code == 201


def test_denied_by_policy_is_refused_and_recorded(sqlite_world: World) -> None:
    world = sqlite_world
    r = world.submit(tags={"Environment": "production"})
    assert (r.status_code, _code(r)) == (403, "E_POLICY_DENIED")
    assert "deny-production" in r.json()["error"]["message"]
    shown = world.client.get("/v1/proposals/prop_test0000001", headers=world.auth("agent"))
    assert shown.json()["state"] == "denied"
    assert _code(world.submit(tags={"Environment": "production"})) == "E_POLICY_DENIED"


def test_malformed_action_is_refused(sqlite_world: World) -> None:
    world = sqlite_world
    headers = {**world.auth("agent"), "Content-Type": "application/json"}
    for body in (
        b'{"type": "airlock.action/v1", "type": "x"}',
        b"[]",
        b"not json",
        b'{"cpu": 1.5}',
    ):
        r = world.client.post("/v1/proposals", content=body, headers=headers)
        assert (r.status_code, _code(r)) == (422, "E_INVALID"), body
    r = world.submit(tags={"env": 3})  # type: ignore[dict-item]
    assert (r.status_code, _code(r)) == (422, "E_INVALID")


def test_reject_with_reason_code_is_read_back_by_the_agent(world: World) -> None:
    p = _pending(world)
    r = world.client.post(
        f"/v1/proposals/{p['id']}/reject",
        json={"reason_code": "needs_more_info", "note": "show memory too"},
        headers=world.auth("bob"),
    )
    assert r.json()["state"] == "rejected"
    back = world.client.get(
        "/v1/proposals", params={"state": "rejected"}, headers=world.auth("agent")
    ).json()["items"][0]
    assert back["rejection"]["reason_code"] == "needs_more_info"
    assert back["rejection"]["note"] == "show memory too"
    bad = world.client.post(
        f"/v1/proposals/{p['id']}/reject",
        json={"reason_code": "dont_like_it"},
        headers=world.auth("bob"),
    )
    assert (bad.status_code, _code(bad)) == (422, "E_INVALID")


def test_reject_for_other_without_a_note_is_refused(world: World) -> None:
    p = _pending(world)
    for note in ({}, {"note": ""}, {"note": " \n\t"}):
        r = world.client.post(
            f"/v1/proposals/{p['id']}/reject",
            json={"reason_code": "other", **note},
            headers=world.auth("bob"),
        )
        assert (r.status_code, _code(r)) == (422, "E_NOTE_REQUIRED"), note
        assert "\n" not in r.json()["error"]["message"]
    still = world.client.get(f"/v1/proposals/{p['id']}", headers=world.auth("bob")).json()
    assert still["state"] == "pending" and still["rejection"] is None


def test_revoke_an_issued_approval_puts_a_revocation_on_the_feed(world: World) -> None:
    p = _pending(world)
    world.approve("alice", p["id"], p["action_hash"])
    r = world.client.post(
        f"/v1/proposals/{p['id']}/revoke", json={"note": "wrong box"}, headers=world.auth("bob")
    )
    assert r.json()["state"] == "revoked"
    assert r.json()["approval"]["revoked_by"] == "bob"
    feed = world.client.get("/v1/feed", headers=world.auth("executor")).json()
    assert [item["kind"] for item in feed["items"]] == ["revocation"]
    again = world.client.post(f"/v1/proposals/{p['id']}/revoke", json={}, headers=world.auth("bob"))
    assert (again.status_code, _code(again)) == (409, "E_STATE")


def test_the_feed_carries_the_audit_head_that_covers_its_items(world: World) -> None:
    """The executor anchors this chain in its own by the head a page carries: it must be
    the chain's head as of the items, at or after the event that issued each of them."""
    empty = world.client.get("/v1/feed", headers=world.auth("executor")).json()
    genesis = verify_chain(world.checkpoint.engine)
    assert empty["items"] == []
    assert empty["audit_head"] == {"seq": genesis.head_seq, "hash": genesis.head_hash}

    p = _pending(world)
    world.approve("alice", p["id"], p["action_hash"])
    page = world.client.get("/v1/feed", headers=world.auth("executor")).json()
    chain = verify_chain(world.checkpoint.engine)
    assert [item["kind"] for item in page["items"]] == ["approval"]
    assert page["audit_head"] == {"seq": chain.head_seq, "hash": chain.head_hash}
    [issued] = audit_events(world, "checkpoint.approval.issued")
    assert issued["approval_id"] == page["items"][0]["approval_id"]


def test_feed_seqs_follow_the_clock_so_a_restored_database_never_reuses_one(
    world: World,
) -> None:
    """Restored from a backup (or reset), the feed's counter restarts below the seqs
    executors have read past; seqs taken from it alone would be skipped by every
    executor's cursor. A seq is at least the time in microseconds, so the next one
    comes after everything issued before the restore; ``feed_head`` says where the feed
    ends, whatever ``after`` asked, so an executor can tell the feed went back."""
    executor = world.auth("executor")
    assert world.client.get("/v1/feed", headers=executor).json()["feed_head"] == 0
    p = _pending(world)
    world.approve("alice", p["id"], p["action_hash"])
    world.client.post(f"/v1/proposals/{p['id']}/revoke", json={}, headers=world.auth("bob"))
    page = world.client.get("/v1/feed", headers=executor).json()
    first = world.clock() * FEED_SEQ_PER_SECOND
    # The revoked approval (first) is no longer sent; its revocation (first + 1) is:
    # within one second the seqs count on from the clock's.
    assert [(item["seq"], item["kind"]) for item in page["items"]] == [(first + 1, "revocation")]
    assert (page["cursor"], page["feed_head"]) == (first + 1, first + 1)
    one = world.client.get("/v1/feed", params={"after": 0, "limit": 1}, headers=executor).json()
    assert (one["items"], one["cursor"], one["feed_head"]) == ([], first, first + 1)
    ahead = world.client.get("/v1/feed", params={"after": first + 9}, headers=executor).json()
    assert (ahead["items"], ahead["cursor"], ahead["feed_head"]) == ([], first + 9, first + 1)

    # The database goes back to a backup taken before any of this (its counter at 0);
    # an executor's cursor is at first + 1. A minute later the next approval comes after it.
    with world.checkpoint.engine.begin() as conn:
        conn.execute(feed_head.update().values(seq=0))
    world.clock.advance(60)
    q = _pending(world, proposal_id="prop_restored00001", resource_id="i-t4nrestored00001")
    issued = world.approve("alice", q["id"], q["action_hash"]).json()["approval"]
    page = world.client.get("/v1/feed", params={"after": first + 1}, headers=executor).json()
    assert [item["approval_id"] for item in page["items"]] == [issued["approval_id"]]
    assert page["items"][0]["seq"] == (first // FEED_SEQ_PER_SECOND + 60) * FEED_SEQ_PER_SECOND


def test_an_executor_cursor_past_the_feed_raises_it_even_with_the_clock_behind(
    world: World,
) -> None:
    """Restored onto a host whose clock is behind the old one's, the clock floor alone
    would put the next seq below the seqs executors have read. An executor asking past
    the end of the feed raises the counter to its cursor (audited), so the next approval
    comes after it anyway; a cursor more than a day past the clock raises nothing."""
    executor = world.auth("executor")
    cursor = (world.clock() + 3600) * FEED_SEQ_PER_SECOND + 7  # read on a clock an hour ahead
    page = world.client.get("/v1/feed", params={"after": cursor}, headers=executor).json()
    assert (page["items"], page["cursor"], page["feed_head"]) == ([], cursor, 0)
    again = world.client.get("/v1/feed", params={"after": cursor}, headers=executor).json()
    assert again["feed_head"] == cursor  # raised once
    [raised] = audit_events(world, "checkpoint.feed.raised")
    assert (raised["by"], raised["feed_head"], raised["to"]) == ("executor-1", 0, cursor)

    p = _pending(world)
    issued = world.approve("alice", p["id"], p["action_hash"]).json()["approval"]
    page = world.client.get("/v1/feed", params={"after": cursor}, headers=executor).json()
    assert [(i["seq"], i["approval_id"]) for i in page["items"]] == [
        (cursor + 1, issued["approval_id"])
    ]

    too_far = (world.clock() + 2 * 24 * 3600) * FEED_SEQ_PER_SECOND
    world.client.get("/v1/feed", params={"after": too_far}, headers=executor)
    assert len(audit_events(world, "checkpoint.feed.raised")) == 1
    last = world.client.get("/v1/feed", params={"after": 0}, headers=executor).json()
    assert last["feed_head"] == cursor + 1
    assert verify_chain(world.checkpoint.engine).ok


def test_nothing_is_issued_with_a_feed_seq_past_json_exact_integers(world: World) -> None:
    """No executor could ask for an item past 2**53 - 1 (the feed's ``after`` stops
    there): an approval that would take such a seq is not issued at all."""
    with world.checkpoint.engine.begin() as conn:
        conn.execute(feed_head.update().values(seq=2**53 - 1))
    p = _pending(world)
    with pytest.raises(RuntimeError, match="past 2"):
        world.approve("alice", p["id"], p["action_hash"])
    shown = world.client.get(f"/v1/proposals/{p['id']}", headers=world.auth("viewer")).json()
    assert (shown["state"], shown["approval"]) == ("pending", None)
    assert audit_events(world, "checkpoint.approval.issued") == []


def test_a_revocation_stays_on_the_feed_after_the_approval_expired(world: World) -> None:
    """By the checkpoint's clock the approval has expired; an executor whose clock runs
    behind may not think so, and must still learn of the revocation."""
    p = _pending(world)
    world.approve("alice", p["id"], p["action_hash"])
    world.client.post(f"/v1/proposals/{p['id']}/revoke", json={}, headers=world.auth("bob"))
    world.clock.advance(24 * 3600)
    feed = world.client.get("/v1/feed", headers=world.auth("executor")).json()
    assert [(item["kind"], item["bundle"]) for item in feed["items"]] == [("revocation", None)]


def test_agent_withdraws_a_pending_proposal(sqlite_world: World) -> None:
    world = sqlite_world
    p = _pending(world)
    r = world.client.post(
        f"/v1/proposals/{p['id']}/withdraw",
        json={"note": "running again"},
        headers=world.auth("agent"),
    )
    assert r.json()["state"] == "withdrawn"
    late = world.approve("alice", p["id"], p["action_hash"])
    assert (late.status_code, _code(late)) == (409, "E_STATE")


@pytest.mark.parametrize("state", ["pending", "approved"])
def test_another_agent_cannot_withdraw_a_proposal_it_did_not_submit(
    world: World, state: str
) -> None:
    other = world.accounts.create_service_token("other-agent", "agent")
    p = _pending(world)
    if state == "approved":
        assert world.approve("alice", p["id"], p["action_hash"]).json()["state"] == "approved"
    r = world.client.post(
        f"/v1/proposals/{p['id']}/withdraw",
        json={"note": "x"},
        headers={"Authorization": f"Bearer {other}"},
    )
    assert (r.status_code, _code(r)) == (403, "E_FORBIDDEN")
    shown = world.client.get(f"/v1/proposals/{p['id']}", headers=world.auth("bob")).json()
    assert shown["state"] == state
    assert shown["approval"] is None or shown["approval"]["revoked_at"] is None
    refused = audit_events(world, "checkpoint.refused")
    assert [(e["by"], e["code"]) for e in refused] == [("other-agent", "E_FORBIDDEN")]
    # the agent that submitted it still can
    own = world.client.post(
        f"/v1/proposals/{p['id']}/withdraw", json={"note": "x"}, headers=world.auth("agent")
    )
    assert own.status_code == 200 and own.json()["state"] == "withdrawn"


def test_pending_proposal_expires_after_the_approval_window(world: World) -> None:
    p = _pending(world)
    world.clock.advance(24 * 3600)
    r = world.approve("alice", p["id"], p["action_hash"])
    assert (r.status_code, _code(r)) == (409, "E_EXPIRED")
    assert world.checkpoint.sweep() == {"expired": 1, "lapsed": 0, "escalated": 0}
    shown = world.client.get(f"/v1/proposals/{p['id']}", headers=world.auth("viewer")).json()
    assert shown["state"] == "expired"
    assert verify_chain(world.checkpoint.engine).ok


def test_unused_approval_lapses_after_the_execution_window(world: World) -> None:
    p = _pending(world)
    world.approve("alice", p["id"], p["action_hash"])
    world.clock.advance(899)
    assert world.checkpoint.sweep() == {"expired": 0, "lapsed": 0, "escalated": 0}
    assert len(world.client.get("/v1/feed", headers=world.auth("executor")).json()["items"]) == 1
    world.clock.advance(1)
    assert world.checkpoint.sweep() == {"expired": 0, "lapsed": 1, "escalated": 0}
    shown = world.client.get(f"/v1/proposals/{p['id']}", headers=world.auth("viewer")).json()
    assert shown["state"] == "lapsed"
    assert world.client.get("/v1/feed", headers=world.auth("executor")).json()["items"] == []


def test_feed_and_outcomes_need_the_executor_role(sqlite_world: World) -> None:
    world = sqlite_world
    for who in ("agent", "admin", "alice"):
        assert _code(world.client.get("/v1/feed", headers=world.auth(who))) == "E_FORBIDDEN"
    for who in ("admin", "alice"):
        r = world.client.post("/v1/outcomes", json={"receipt": {}}, headers=world.auth(who))
        assert _code(r) == "E_FORBIDDEN"
    # An agent token reports only a gate's receipt (tests/checkpoint/test_tool_call_reports.py).
    r = world.client.post("/v1/outcomes", json={"receipt": {}}, headers=world.auth("agent"))
    assert _code(r) == "E_RECEIPT"


def test_logout_revokes_the_session(sqlite_world: World) -> None:
    world = sqlite_world
    assert world.client.get("/v1/me", headers=world.auth("alice")).json()["name"] == "alice"
    assert (
        world.client.delete("/v1/sessions/current", headers=world.auth("alice")).status_code == 204
    )
    assert world.client.get("/v1/me", headers=world.auth("alice")).status_code == 401


def test_session_expires(sqlite_world: World) -> None:
    world = sqlite_world
    world.clock.advance(SESSION_TTL)
    assert world.client.get("/v1/me", headers=world.auth("alice")).status_code == 401
    assert world.client.get("/v1/me", headers=world.auth("agent")).status_code == 200


def test_failed_logins_from_many_addresses_lock_the_account(world: World) -> None:
    # The last resort: each address counts at most 3 failures toward the lock (its later
    # guesses are slowed instead), so only guesses from two addresses (the harness's
    # threshold is 6) lock bob; one address alone never does.
    for address in ("10.0.0.1", "10.0.0.2"):
        guesser = world.client_from(address)
        for _ in range(3):
            r = guesser.post("/v1/sessions", json={"username": "bob", "password": "wrong" * 3})
            assert r.status_code == 401
    assert [e["user"] for e in audit_events(world, "checkpoint.user.locked")] == ["bob"]
    # Locked, the right password is refused, and answered as for a name that does not
    # exist: a distinct answer (it was 423 E_LOCKED) told anyone which names exist.
    bob = world.client_from("10.0.0.3")
    unknown = bob.post("/v1/sessions", json={"username": "nobody", "password": "x" * 12})
    r = bob.post(
        "/v1/sessions", json={"username": "bob", "password": "correct horse battery staple"}
    )
    assert (r.status_code, _code(r)) == (401, "E_UNAUTHENTICATED")
    assert r.json() == unknown.json()
    world.clock.advance(599)
    r = bob.post(
        "/v1/sessions", json={"username": "bob", "password": "correct horse battery staple"}
    )
    assert r.status_code == 401
    world.clock.advance(1)
    r = bob.post(
        "/v1/sessions", json={"username": "bob", "password": "correct horse battery staple"}
    )
    assert r.status_code == 201 and r.json()["role"] == "approver"


def test_disabled_user_cannot_sign_in_or_use_a_session(sqlite_world: World) -> None:
    world = sqlite_world
    world.accounts.disable_user("carol")
    assert world.client.get("/v1/me", headers=world.auth("carol")).status_code == 401
    r = world.client.post(
        "/v1/sessions", json={"username": "carol", "password": "correct horse battery staple"}
    )
    assert r.status_code == 401


def test_tokens_are_stored_hashed(sqlite_world: World) -> None:
    world = sqlite_world
    import sqlalchemy as sa

    with world.checkpoint.engine.connect() as conn:
        stored = {
            *conn.execute(sa.text("SELECT token_hash FROM sessions")).scalars(),
            *conn.execute(sa.text("SELECT token_hash FROM service_tokens")).scalars(),
        }
        hashes = list(conn.execute(sa.text("SELECT password_hash FROM users")).scalars())
    assert not set(world.tokens.values()) & stored
    assert all(h.startswith("$argon2id$") for h in hashes)


def test_keys_endpoint_serves_the_public_key_set(sqlite_world: World) -> None:
    world = sqlite_world
    body = world.client.get("/v1/keys").json()
    assert [k["status"] for k in body["keys"]] == ["active"]
    assert "private" not in str(body).lower()


def test_health_ready_and_metrics(sqlite_world: World) -> None:
    world = sqlite_world
    assert world.client.get("/healthz").json() == {"status": "ok"}
    assert world.client.get("/readyz").status_code == 200
    p = _pending(world)
    world.approve("alice", p["id"], p["action_hash"])
    text = world.client.get("/metrics").text
    assert "airlock_checkpoint_approvals_issued_total 1.0" in text


def test_made_up_request_methods_cannot_grow_the_metrics(sqlite_world: World) -> None:
    """Every label set is a counter kept for the life of the process: an anonymous client
    sending a new method name each time must not add one each."""
    world = sqlite_world
    for n in range(50):
        world.client.request(f"XMETHOD{n}", "/v1/proposals")
        world.client.request(f"XMETHOD{n}", "/nowhere")
    text = world.client.get("/metrics").text
    series = {line.split("}")[0] for line in text.splitlines() if line.startswith("airlock_")}
    assert not [s for s in series if "XMETHOD" in s]
    requests = sorted(s for s in series if s.startswith("airlock_checkpoint_requests_total"))
    assert len(requests) == 2, requests  # one "other" series per route, whatever the name
    assert all('method="other"' in s for s in requests)


def test_every_refused_decision_leaves_an_audit_record(sqlite_world: World) -> None:
    import json as _json

    import sqlalchemy as sa

    from airlock.store import verify_chain

    world = sqlite_world
    p = _pending(world, proposed_by="alice")
    attempts = [
        (world.approve("alice", p["id"], p["action_hash"]), "E_SELF_APPROVAL", "alice"),
        (world.approve("bob", p["id"], "sha256:" + "0" * 64), "E_STALE_VIEW", "bob"),
        (world.approve("viewer", p["id"], p["action_hash"]), "E_FORBIDDEN", "viewer"),
    ]
    for response, code, _ in attempts:
        assert _code(response) == code
    engine = world.checkpoint.engine
    with engine.connect() as conn:
        events = [
            _json.loads(e) for e in conn.execute(sa.text("SELECT event FROM audit_log")).scalars()
        ]
    refused = [e for e in events if e["type"] == "checkpoint.refused"]
    assert [(e["code"], e["by"], e["proposal_id"]) for e in refused] == [
        (code, who, p["id"]) for _, code, who in attempts
    ]
    assert all(e["request"] == "POST /v1/proposals/{proposal_id}/approve" for e in refused)
    assert not [e for e in events if "vote" in e["type"]]  # the refused votes left nothing else
    assert verify_chain(engine).ok


def test_feed_signal_wakes_a_waiting_reader_from_another_thread() -> None:
    import asyncio
    import threading

    from services.checkpoint.routes import FeedSignal

    signal = FeedSignal()

    async def reader() -> int:
        seen = signal.version
        started.set()
        # Far longer than the bound below: only a wake-up makes this return in time.
        await asyncio.wait_for(signal.wait(seen, 600), timeout=30)
        return signal.version

    started = threading.Event()
    bumper = threading.Thread(target=lambda: (started.wait(30), signal.bump()))
    bumper.start()
    try:
        assert asyncio.run(reader()) == 1
    finally:
        bumper.join()


def test_feed_signal_wait_returns_at_once_when_already_moved() -> None:
    import asyncio

    from services.checkpoint.routes import FeedSignal

    signal = FeedSignal()
    signal.bump()
    asyncio.run(asyncio.wait_for(signal.wait(0, 600), timeout=30))


def test_revoked_service_token_is_refused_at_once(world: World) -> None:
    assert world.client.get("/v1/feed", headers=world.auth("executor")).status_code == 200
    world.accounts.revoke_service_token("executor-1")
    refused = world.client.get("/v1/feed", headers=world.auth("executor"))
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "E_UNAUTHENTICATED"
    assert world.submit().status_code == 201  # the other token is untouched
    revoked = audit_events(world, "checkpoint.token.revoked")
    assert [e["name"] for e in revoked] == ["executor-1"]
    listed = {t.name: t for t in world.accounts.list_service_tokens()}
    assert listed["executor-1"].revoked_at == world.clock()
    assert listed["scanner-1"].revoked_at is None
    # A listing never holds the token nor its hash.
    assert [f.name for f in dataclasses.fields(listed["scanner-1"])] == [
        "name",
        "role",
        "created_at",
        "revoked_at",
    ]


def test_revoking_an_unknown_or_revoked_token_is_refused_clearly(sqlite_world: World) -> None:
    world = sqlite_world
    with pytest.raises(Refusal, match="no service token named ghost") as unknown:
        world.accounts.revoke_service_token("ghost")
    assert unknown.value.code == "E_NOT_FOUND"
    world.accounts.revoke_service_token("scanner-1")
    with pytest.raises(Refusal, match="already revoked") as again:
        world.accounts.revoke_service_token("scanner-1")
    assert again.value.code == "E_STATE"
