"""Attacks on the checkpoint's HTTP surface and the identities behind it, as real
requests against the real app.

Each test is named after the attack; each refusal is checked for its stable code and for
having changed nothing. The approval rules have their own tests (test_api_rules.py).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from airlock.store import make_engine
from services.checkpoint.errors import ErrorCode, Refusal
from services.checkpoint.keys import KeyDirectory
from tests.support.asgi import stream_body

from .harness import PASSWORD, World, audit_events, make_world

CAP = 128 * 1024  # services/checkpoint/routes.py: _BODY_MAX_BYTES


def _error(response: Any) -> tuple[int, str]:
    return response.status_code, str(response.json()["error"]["code"])


def test_an_oversized_login_body_is_refused_before_it_is_read(sqlite_world: World) -> None:
    world = sqlite_world
    body = b'{"username": "alice", "password": "' + b"x" * CAP + b'"}'
    response = world.client.post(
        "/v1/sessions", content=body, headers={"Content-Type": "application/json"}
    )
    assert _error(response) == (413, "E_INVALID")
    # A body under the cap is still read and judged as before.
    response = world.client.post(
        "/v1/sessions", json={"username": "alice", "password": "x" * (CAP // 2)}
    )
    assert _error(response) == (422, "E_INVALID")
    ok = world.client.post("/v1/sessions", json={"username": "alice", "password": PASSWORD})
    assert ok.status_code == 201


def test_an_endless_unauthenticated_body_is_read_no_further_than_the_cap(
    sqlite_world: World,
) -> None:
    # No Content-Length: the cap must hold on the bytes actually received. Without it the
    # app reads all of them (here 8 MiB; an attacker sends more) before refusing anything.
    chunk = 16 * 1024
    for path in ("/v1/sessions", "/v1/outcomes", "/v1/proposals/prop_test0000001/approve"):
        status, read = stream_body(
            sqlite_world.app,
            path,
            total=8 * 1024 * 1024,
            chunk=chunk,
            headers=[(b"content-type", b"application/json")],
        )
        assert status == 413, path
        assert read <= CAP + chunk, (path, read)


def test_an_oversized_proposal_is_refused_and_records_nothing(sqlite_world: World) -> None:
    world = sqlite_world
    status, read = stream_body(
        world.app,
        "/v1/proposals",
        total=4 * 1024 * 1024,
        headers=[(b"authorization", f"Bearer {world.tokens['agent']}".encode())],
    )
    assert status == 413 and read <= CAP + 16 * 1024
    listed = world.client.get("/v1/proposals", headers=world.auth("viewer")).json()
    assert listed["items"] == []


def test_parallel_sign_ins_never_hash_more_than_two_passwords_at_once(
    sqlite_world: World,
) -> None:
    # Each argon2 verify holds 64 MiB (production parameters) and a login for a user who
    # does not exist verifies too, so unbounded parallel logins from anyone held memory
    # without bound (40 at once: ~2.4 GB). The hasher here counts who is inside it; a
    # third verify running beside two others would complete the barrier.
    world = sqlite_world
    real = world.accounts._hasher
    meet = threading.Barrier(3, timeout=3.0)
    lock = threading.Lock()
    inside = [0, 0]  # now, most at once

    class WatchedHasher:
        def verify(self, encoded: str, password: str) -> bool:
            with lock:
                inside[0] += 1
                inside[1] = max(inside[1], inside[0])
            try:
                meet.wait()
            except threading.BrokenBarrierError:
                pass  # only two got in: the barrier times out, as it should
            finally:
                with lock:
                    inside[0] -= 1
            return real.verify(encoded, password)

    world.accounts._hasher = WatchedHasher()  # type: ignore[assignment]
    statuses: list[int] = []

    def sign_in(i: int, username: str, password: str) -> None:
        # Each from an address of its own: one address has at most two in progress.
        body = {"username": username, "password": password}
        response = world.client_from(f"10.0.0.{i + 1}").post("/v1/sessions", json=body)
        statuses.append(response.status_code)

    threads = [
        threading.Thread(target=sign_in, args=(i, f"nobody-{i}", "wrong password"))
        for i in range(7)
    ]
    threads.append(threading.Thread(target=sign_in, args=(7, "alice", PASSWORD)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert inside[1] <= 2
    assert sorted(statuses) == [201] + [401] * 7  # every sign-in was still answered


def _all_events(world: World) -> list[dict[str, Any]]:
    with world.checkpoint.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT event FROM audit_log ORDER BY seq")).scalars()
        return [json.loads(e) for e in rows]


def test_sign_ins_past_those_waiting_are_refused_at_once_and_count_for_nothing(
    sqlite_world: World,
) -> None:
    # Sign-ins waiting for a password check each hold a thread of the pool that runs every
    # other request too (the executor's feed, approvals): a few dozen at once from anyone
    # took them all. Two verify and eight wait; the rest are refused with 429 E_BUSY
    # (never a 5xx), before anything is recorded: a refused guess at alice's password
    # does not count toward her lockout, and leaves no audit event. Each sign-in comes
    # from an address of its own (one address has at most two in progress).
    world = sqlite_world
    accounts = world.accounts
    real = accounts._hasher
    release = threading.Event()
    lock = threading.Lock()
    inside = [0]

    class HeldHasher:
        def verify(self, encoded: str, password: str) -> bool:
            with lock:
                inside[0] += 1
            assert release.wait(30), "the test never released the held verifies"
            return real.verify(encoded, password)

    accounts._hasher = HeldHasher()  # type: ignore[assignment]
    events_before = len(_all_events(world))
    statuses: list[int] = []

    def sign_in(i: int, username: str, password: str) -> None:
        body = {"username": username, "password": password}
        response = world.client_from(f"10.0.0.{i + 1}").post("/v1/sessions", json=body)
        statuses.append(response.status_code)

    admitted = [
        threading.Thread(target=sign_in, args=(i, f"nobody-{i}", "wrong password"))
        for i in range(9)
    ]
    admitted.append(threading.Thread(target=sign_in, args=(9, "alice", PASSWORD)))

    def alice_count() -> int:
        with world.checkpoint.engine.connect() as conn:
            count: int = conn.execute(
                sa.text("SELECT failed_logins FROM users WHERE username = 'alice'")
            ).scalar_one()
        return count

    for t in admitted:
        t.start()
    try:
        # Full: two verifying, eight waiting, alice's own attempt claimed (counted before
        # its verify, cleared once her right password is verified).
        deadline = time.monotonic() + 30
        while not (inside[0] == 2 and accounts.signing_in == 10 and alice_count() == 1):
            assert time.monotonic() < deadline, (inside, accounts.signing_in)
            time.sleep(0.01)  # polling a condition under a deadline, not waiting out a race

        # Each further sign-in is answered at once, whoever it names, and not counted.
        for password in ("a wrong guess", PASSWORD):
            response = world.client_from("10.0.1.1").post(
                "/v1/sessions", json={"username": "alice", "password": password}
            )
            assert _error(response) == (429, "E_BUSY")
            assert response.headers["Retry-After"] == "2"
        assert accounts.signing_in == 10 and inside[0] == 2
        assert alice_count() == 1
    finally:
        release.set()
        for t in admitted:
            t.join(60)
    assert sorted(statuses) == [201] + [401] * 9
    assert accounts.signing_in == 0
    # The refused guesses left nothing: alice's count is clear, no event for them.
    assert alice_count() == 0
    kinds = [e["type"] for e in _all_events(world)[events_before:]]
    assert kinds == ["checkpoint.session.created"]
    # And once there is room again, alice signs in.
    assert (
        world.client.post(
            "/v1/sessions", json={"username": "alice", "password": PASSWORD}
        ).status_code
        == 201
    )


def test_an_unusable_signing_key_does_not_tell_callers_where_the_keys_live(
    sqlite_world: World, caplog: pytest.LogCaptureFixture
) -> None:
    # /readyz and /v1/keys answer anyone; the reason a key is unusable names files and
    # OS errors of this host. It belongs in the operator's log, not in the answer.
    world = sqlite_world
    p = world.submit().json()
    keys = KeyDirectory(world.keys_dir)
    keys.revoke(
        keys.records()[0].kid, audit=world.key_audit()
    )  # `airlock keys revoke`: nothing left to sign with
    secret = str(world.keys_dir)

    ready = world.client.get("/readyz")
    approve = world.approve("alice", p["id"], p["action_hash"])
    keys.manifest_path.rename(world.keys_dir / "moved-away.json")
    public = world.client.get("/v1/keys")
    for response in (ready, approve, public):
        assert _error(response) == (503, "E_NO_SIGNING_KEY")
        assert secret not in response.text and "keyset.json" not in response.text
    assert secret in caplog.text  # the operator still learns why

    after = world.client.get(f"/v1/proposals/{p['id']}", headers=world.auth("viewer")).json()
    assert after["state"] == "pending" and after["votes"] == []  # the refused vote left nothing
    refused = audit_events(world, "checkpoint.refused")
    assert [(e["code"], e["by"]) for e in refused] == [("E_NO_SIGNING_KEY", "alice")]


def test_a_malformed_request_of_a_known_caller_is_audited_like_any_refusal(
    sqlite_world: World,
) -> None:
    # A stale hash is audited under the approver's name; a vote with a 3000-character
    # note, an unknown field, or a feed read out of bounds was refused just the same, by
    # someone just as known, and left no record at all.
    world = sqlite_world
    p = world.submit().json()
    attempts = [
        (world.approve("alice", p["id"], p["action_hash"], note="x" * 3000), "alice"),
        (world.approve("bob", p["id"], p["action_hash"], force=True), "bob"),
        (world.client.get("/v1/feed?wait=100000", headers=world.auth("agent")), "scanner-1"),
    ]
    for response, _ in attempts:
        assert _error(response) == (422, "E_INVALID")
    status, _ = stream_body(
        world.app,
        "/v1/proposals",
        total=1024 * 1024,
        headers=[(b"authorization", f"Bearer {world.tokens['agent']}".encode())],
    )
    assert status == 413
    world.app.state.refusals.flush()  # the agent's second E_INVALID was counted
    refused = [
        (e["code"], e["by"], e.get("request", e.get("requests")), e.get("count", 1))
        for e in audit_events(world, "checkpoint.refused")
    ]
    assert refused == [
        ("E_INVALID", "alice", "POST /v1/proposals/{proposal_id}/approve", 1),
        ("E_INVALID", "bob", "POST /v1/proposals/{proposal_id}/approve", 1),
        ("E_INVALID", "scanner-1", "GET /v1/feed", 1),
        ("E_INVALID", "scanner-1", ["POST /v1/proposals"], 1),
    ]
    assert not audit_events(world, "checkpoint.vote.approve")  # nothing else was recorded
    # Anonymous requests are still only counted: anyone could grow the chain with them.
    world.client.post("/v1/proposals/prop_test0000001/approve", json={"action_hash": 1})
    assert len(audit_events(world, "checkpoint.refused")) == len(refused)


def test_a_service_token_named_like_a_person_is_refused(sqlite_world: World) -> None:
    # The record names every actor by name alone. An agent token created as "alice" could
    # submit, then withdraw a proposal bob approved: the approval would read "revoked by
    # alice" in the audit chain and on the page, and alice never acted.
    world = sqlite_world
    tokens = world.accounts.list_service_tokens()
    people = world.accounts.list_users()
    events = len(audit_events(world, "checkpoint.token.created")) + len(
        audit_events(world, "checkpoint.user.added")
    )
    for attempt in (
        lambda: world.accounts.create_service_token("alice", "agent"),
        lambda: world.accounts.create_service_token("admin", "executor"),
        lambda: world.accounts.add_user("scanner-1", PASSWORD, "approver"),
    ):
        with pytest.raises(Refusal) as refused:
            attempt()
        assert refused.value.code is ErrorCode.E_CONFLICT
    assert world.accounts.list_service_tokens() == tokens
    assert world.accounts.list_users() == people
    assert events == len(audit_events(world, "checkpoint.token.created")) + len(
        audit_events(world, "checkpoint.user.added")
    )


def test_no_api_docs_page_loads_third_party_scripts(sqlite_world: World) -> None:
    """Swagger UI and ReDoc pull their scripts from a CDN into the checkpoint's origin;
    neither is served. The machine-readable API stays at /openapi.json."""
    for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        assert sqlite_world.client.get(path).status_code == 404, path
    assert sqlite_world.client.get("/openapi.json").json()["info"]["title"] == "Airlock checkpoint"


@pytest.mark.postgres
def test_a_person_and_a_token_added_at_once_cannot_share_a_name(
    pg_url: str, tmp_path: Path
) -> None:
    """The shared namespace is a check on two tables, so it holds only if the two admin
    commands are serialized: under READ COMMITTED, `users add zoe` and `tokens create
    zoe` racing each other both saw the other table without the name and both committed.
    Here the token is created while the person's transaction sits between its checks and
    its insert; at most one of the two may succeed."""
    world = make_world(pg_url, tmp_path)
    watcher = make_engine(pg_url)
    try:
        accounts = world.accounts
        person = threading.get_ident()
        token_done = threading.Event()
        results: dict[str, str] = {}

        def token_waits_on_a_lock() -> bool:
            with watcher.connect() as conn:
                return bool(
                    conn.execute(
                        sa.text(
                            "SELECT count(*) FROM pg_locks WHERE NOT granted AND database = "
                            "(SELECT oid FROM pg_database WHERE datname = current_database())"
                        )
                    ).scalar()
                )

        def create_token() -> None:
            try:
                accounts.create_service_token("zoe", "agent")
                results["token"] = "created"
            except Refusal as exc:
                results["token"] = exc.code.value
            finally:
                token_done.set()

        racer = threading.Thread(target=create_token)

        def pause(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            # The person's insert, after its checks: let the token creation run first, to
            # its end or until it waits for a lock this transaction holds.
            if threading.get_ident() == person and statement.startswith("INSERT INTO users"):
                if not racer.is_alive() and not token_done.is_set():
                    racer.start()
                while not token_done.is_set() and not token_waits_on_a_lock():
                    token_done.wait(0.01)

        engine = world.checkpoint.db.engine
        sa.event.listen(engine, "before_cursor_execute", pause)
        try:
            accounts.add_user("zoe", PASSWORD, "approver")
            results["person"] = "added"
        except Refusal as exc:
            results["person"] = exc.code.value
        finally:
            sa.event.remove(engine, "before_cursor_execute", pause)
        racer.join(timeout=60)
        assert not racer.is_alive()
        assert sorted(results.values()) == ["E_CONFLICT", "added"]
        tokens = [t.name for t in accounts.list_service_tokens()]
        people = [u.username for u in accounts.list_users()]
        assert ("zoe" in tokens) != ("zoe" in people)
    finally:
        watcher.dispose()
        world.client.close()
        world.checkpoint.db.dispose()
