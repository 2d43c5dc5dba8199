"""Sign-in limits: a guesser is slowed per client address and per (address, name), and
an account locks only as a last resort, after failures from several addresses.

A counted attempt is claimed before the slow verify, and a locked account is refused
exactly like a wrong password, so a lock tells no one that a name exists. The password
check is made to wait on events, so the tests decide exactly which guesses are "still
hashing" while others run; nothing sleeps. The harness locks an account after 6 counted
failures (``LOCKOUT_THRESHOLD``; each address counts at most ``throttle.PAIR_FREE`` = 3)
for 600 s, and its hasher is a test double that records which stored hash each argon2
verify was against (``CountingHasher``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import http.client
import json
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from airlock.store import verify_chain
from services.checkpoint import auth, throttle
from services.checkpoint.auth import Accounts
from services.checkpoint.errors import Refusal
from services.checkpoint.models import sessions, users

from .harness import (
    LOCKOUT_SECONDS,
    LOCKOUT_THRESHOLD,
    PASSWORD,
    World,
    audit_events,
    served,
)

THRESHOLD = LOCKOUT_THRESHOLD
LOCKOUT = LOCKOUT_SECONDS
WAIT = 30.0  # an upper bound for a thread to reach a point; never a synchronization sleep
#: Headers a server or proxy may add that differ per response whatever it answers (the
#: test client adds none today); every other header must match.
_PER_RESPONSE = frozenset({"date", "x-request-id"})


def _login(world: World, password: str, username: str = "alice", address: str = "10.9.9.9") -> Any:
    body = {"username": username, "password": password}
    return world.client_from(address).post("/v1/sessions", json=body)


def _assert_refused(response: Any) -> None:
    """The one answer to every refused sign-in (an unknown name's, for reference)."""
    assert response.status_code == 401, response.text
    assert response.json() == {
        "error": {"code": "E_UNAUTHENTICATED", "message": auth._SIGN_IN_REFUSED}
    }


def _lock(world: World, username: str = "alice") -> None:
    """Lock ``username``: PAIR_FREE counted failures from each of two addresses."""
    for i in range(THRESHOLD):
        address = f"10.0.{i // throttle.PAIR_FREE}.1"
        _assert_refused(_login(world, f"wrong-{i}", username, address))
    assert audit_events(world, "checkpoint.user.locked")[-1]["user"] == username


def _gate_verify(
    world: World, hold: Callable[[str, str], bool]
) -> tuple[threading.Event, threading.Semaphore, list[str]]:
    """Make every verify for which ``hold(encoded, password)`` is true wait for
    ``release`` before it takes a verify slot; ``entered`` is released once per held
    verify that started, and ``verified`` lists the password of every verify asked for."""
    real = world.accounts._verify
    release = threading.Event()
    entered = threading.Semaphore(0)
    verified: list[str] = []

    def verify(encoded: str, password: str) -> bool:
        verified.append(password)
        if hold(encoded, password):
            entered.release()
            assert release.wait(WAIT)
        return real(encoded, password)

    world.accounts._verify = verify  # type: ignore[method-assign]
    return release, entered, verified


def _sessions_of(world: World, username: str) -> int:
    with world.checkpoint.engine.connect() as conn:
        return len(conn.execute(sessions.select().where(sessions.c.username == username)).all())


def test_concurrent_guesses_never_verify_more_than_the_threshold(world: World) -> None:
    alice = world.password_hash("alice")
    before, hashed_before = world.hasher.verifies_of(alice), len(world.hasher.verified)
    # Only verifies of alice's own hash are held: a guess that could not claim an attempt
    # verifies the dummy hash and must be answered while the claimed ones still hash.
    release, entered, verified = _gate_verify(world, lambda encoded, _pw: encoded == alice)
    # As many as may be in progress at once; more would be refused E_BUSY before any claim.
    guesses = auth._CONCURRENT_VERIFIES + auth._WAITING_SIGN_INS
    done = threading.Semaphore(0)
    results: list[Refusal] = []

    def guess(i: int) -> None:
        try:  # each from an address of its own, so that every guess counts
            world.accounts.login("alice", f"wrong-password-{i:02d}", client=f"10.1.0.{i}")
        except Refusal as exc:
            results.append(exc)
        finally:
            done.release()

    threads = [threading.Thread(target=guess, args=(i,)) for i in range(guesses)]
    for t in threads:
        t.start()
    try:
        # THRESHOLD guesses claimed an attempt and wait to verify alice's hash; every
        # other one found the account saturated, locked it, and was refused after a verify
        for _ in range(THRESHOLD):
            assert entered.acquire(timeout=WAIT)
        for _ in range(guesses - THRESHOLD):
            assert done.acquire(timeout=WAIT), f"{len(results)} guesses were answered"
        assert world.hasher.verifies_of(alice) == before  # the held ones have not run yet
        assert len(verified) == guesses
        # each refused guess cost an argon2 verify too, of another hash than alice's
        assert len(world.hasher.verified) - hashed_before == guesses - THRESHOLD
        assert {(r.code.value, r.status, r.message) for r in results} == {
            ("E_UNAUTHENTICATED", 401, auth._SIGN_IN_REFUSED)
        }
    finally:
        release.set()
        for t in threads:
            t.join(WAIT)
    assert world.hasher.verifies_of(alice) - before == THRESHOLD
    assert len(results) == guesses
    assert {(r.code.value, r.status, r.message) for r in results} == {
        ("E_UNAUTHENTICATED", 401, auth._SIGN_IN_REFUSED)
    }
    # locked: the right password is refused too, and is not even checked against her hash
    _assert_refused(_login(world, PASSWORD))
    assert world.hasher.verifies_of(alice) - before == THRESHOLD
    assert [e["user"] for e in audit_events(world, "checkpoint.user.locked")] == ["alice"]
    assert verify_chain(world.checkpoint.engine).ok


@pytest.mark.parametrize("held", [PASSWORD, "wrong-password-xx"], ids=["right", "wrong"])
def test_guess_verified_after_the_account_locked_does_not_tell_right_from_wrong(
    world: World, held: str
) -> None:
    release, entered, _ = _gate_verify(world, lambda _encoded, password: password == held)
    sessions_before = _sessions_of(world, "alice")
    box: dict[str, Any] = {}
    in_flight = threading.Thread(target=lambda: box.setdefault("r", _login(world, held)))
    in_flight.start()
    try:
        assert entered.acquire(timeout=WAIT)  # the held guess is "still hashing"
        # meanwhile other wrong guesses, from two other addresses, lock the account
        for i in range(THRESHOLD):
            _login(world, f"other-wrong-{i}", address=f"10.2.{i // throttle.PAIR_FREE}.1")
        _assert_refused(_login(world, "anything-at-all", address="10.3.0.1"))
    finally:
        release.set()
        in_flight.join(WAIT)

    wrong = box["r"]
    reference = _login(world, "wrong-password-yy", username="nobody", address="10.4.0.1")
    _assert_refused(reference)
    assert wrong.status_code == 401
    assert wrong.json() == reference.json()  # byte for byte what a wrong password gets
    assert _sessions_of(world, "alice") == sessions_before  # no session was made


def test_probing_for_user_names_gets_one_answer_for_unknown_wrong_and_locked(
    world: World,
) -> None:
    """With 423 E_LOCKED for a locked account, threshold+1 guesses told anyone that a
    name exists, and the locked answer came at once, without an argon2 verify. An
    unknown name, a wrong password and a locked account (even with the right password)
    get the same status, body and headers, each after one verify through the same
    slot-limited path; the throttle slows an unknown name as it slows a known one."""
    _lock(world, "bob")
    alice, bob = world.password_hash("alice"), world.password_hash("bob")
    calls: list[str] = []
    real = world.accounts._verify

    def verify(encoded: str, password: str) -> bool:
        calls.append(encoded)
        return real(encoded, password)

    world.accounts._verify = verify  # type: ignore[method-assign]

    def probe(username: str, password: str) -> tuple[Any, list[str]]:
        start = len(world.hasher.verified)
        response = _login(world, password, username, address=f"10.5.0.{len(calls)}")
        hashed = world.hasher.verified[start:]
        assert calls[-len(hashed) :] == hashed  # every argon2 verify went through _verify
        return response, hashed

    unknown, unknown_hashed = probe("nobody", "a wrong password")
    wrong, wrong_hashed = probe("alice", "a wrong password")
    locked, locked_hashed = probe("bob", PASSWORD)

    assert len(unknown_hashed) == len(wrong_hashed) == len(locked_hashed) == 1
    assert wrong_hashed == [alice]
    assert unknown_hashed == locked_hashed  # the dummy hash: bob's password is not checked
    assert locked_hashed != [bob]
    for response in (unknown, wrong, locked):
        _assert_refused(response)
    answers = [
        (
            r.status_code,
            r.content,
            sorted((k, v) for k, v in r.headers.items() if k not in _PER_RESPONSE),
        )
        for r in (unknown, wrong, locked)
    ]
    assert answers[0] == answers[1] == answers[2]
    assert ("www-authenticate", "Bearer") in answers[0][2]


def test_accounts_made_for_administration_refuse_every_sign_in(world: World) -> None:
    """The CLI's Accounts make no dummy hash (sign_ins=False): a sign-in through them
    would verify unknown names against nothing, so it is refused before any work."""
    admin = Accounts(
        world.checkpoint.db,
        world.clock,
        session_ttl=3600,
        lockout_threshold=THRESHOLD,
        lockout_seconds=LOCKOUT,
        hasher=world.hasher,
        sign_ins=False,
    )
    sessions_before, verified_before = _sessions_of(world, "alice"), len(world.hasher.verified)
    for username, password in (("alice", PASSWORD), ("nobody", "a wrong password")):
        with pytest.raises(RuntimeError, match="sign_ins=False"):
            admin.login(username, password, client="10.9.0.1")
    assert _sessions_of(world, "alice") == sessions_before
    assert len(world.hasher.verified) == verified_before
    assert [u.username for u in admin.list_users()] == [
        u.username for u in world.accounts.list_users()
    ]


def test_right_password_after_failures_below_the_threshold_signs_in(world: World) -> None:
    for i in range(throttle.PAIR_FREE - 1):
        _assert_refused(_login(world, f"wrong-{i}"))
    assert _login(world, PASSWORD).status_code == 201
    with world.checkpoint.engine.connect() as conn:
        row = conn.execute(sa.select(users).where(users.c.username == "alice")).one()
    assert (row.failed_logins, row.locked_until) == (0, None)


def test_locked_account_refuses_the_right_password_until_the_lockout_ends(world: World) -> None:
    _lock(world)
    alice = world.password_hash("alice")
    verifies = world.hasher.verifies_of(alice)
    _assert_refused(_login(world, PASSWORD))
    world.clock.advance(LOCKOUT - 1)
    _assert_refused(_login(world, PASSWORD))
    assert world.hasher.verifies_of(alice) == verifies  # refused without checking it
    with world.checkpoint.engine.connect() as conn:
        row = conn.execute(sa.select(users).where(users.c.username == "alice")).one()
    assert row.locked_until == world.clock() + 1
    world.clock.advance(1)
    assert _login(world, PASSWORD).status_code == 201
    assert world.hasher.verifies_of(alice) == verifies + 1


def test_attempts_claimed_but_never_settled_lock_instead_of_sticking(world: World) -> None:
    """A process that died mid-verify leaves its attempts counted: the next one locks the
    account for the lockout period, after which the right password works again."""
    with world.checkpoint.engine.begin() as conn:
        conn.execute(
            users.update().where(users.c.username == "alice").values(failed_logins=THRESHOLD)
        )
    _assert_refused(_login(world, PASSWORD))
    assert [e["user"] for e in audit_events(world, "checkpoint.user.locked")] == ["alice"]
    world.clock.advance(LOCKOUT - 1)
    _assert_refused(_login(world, PASSWORD))
    world.clock.advance(1)
    assert _login(world, PASSWORD).status_code == 201


def test_a_password_typed_as_the_user_name_is_never_logged_or_recorded(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """An all-lowercase passphrase fits the user-name pattern, and a failed sign-in
    logged the name as typed: a password typed into the name field landed in the log.
    The log names a known user by its keyed hash and an unknown name by its length
    only; the audit chain gets a keyed hash of an unknown name, tallied once per
    interval, never the name."""
    caplog.set_level("WARNING", logger="airlock.checkpoint.auth")
    typed = "correcthorsebatterystaple"
    _assert_refused(_login(world, "x", username=typed, address="10.6.0.1"))
    _assert_refused(_login(world, "Tr0ub4dor&3-horse", username="Tr0ub4dor&3-horse"))
    for _ in range(throttle.PAIR_FREE):
        _assert_refused(_login(world, "wrong", address="10.6.0.2"))
    world.clock.advance(60)
    world.accounts.flush_refused_sign_ins()
    key = world.accounts.name_key("alice")
    assert key.startswith("hmac:") and len(key) == 37
    assert key != "hmac:" + hashlib.sha256(b"alice").hexdigest()[:32]  # keyed, not bare
    messages = [r.getMessage() for r in caplog.records if r.name == "airlock.checkpoint.auth"]
    assert messages[0] == "failed sign-in from 10.6.0.1: no such user (a name of 25 characters)"
    assert messages[1] == "failed sign-in from 10.9.9.9: no such user (a name of 17 characters)"
    assert messages[2:5] == [f"failed sign-in from 10.6.0.2: wrong password for user {key}"] * 3
    assert messages[5].startswith("refused sign-ins from ")
    for text in (caplog.text, json.dumps(_chain(world))):
        assert typed not in text and "Tr0ub4dor" not in text
    [tally] = audit_events(world, "checkpoint.sign_in.refused")
    assert tally["unknown_name"] == 2 and tally["throttled"] == 0
    assert {n["name_hmac"] for n in tally["names"]} == {
        world.accounts.name_key(typed),
        world.accounts.name_key("Tr0ub4dor&3-horse"),
    }
    failed = audit_events(world, "checkpoint.login.failed")
    assert [(e["user"], e["client"]) for e in failed] == [("alice", "10.6.0.2")] * 3


def test_unknown_names_and_throttled_attempts_are_tallied_not_audited_one_by_one(
    world: World,
) -> None:
    """Anyone can send sign-ins for names that do not exist; one audit row each would let
    anyone grow the chain. 600 of them, from 50 addresses, within one interval (each
    address is throttled after its first ADDRESS_FREE), are one checkpoint.sign_in.refused
    row naming the addresses that sent most."""
    rows_before = len(_chain(world))
    attempts = [
        (f"10.7.{i % 50}.1", {"username": f"user-{i}", "password": "guess"}) for i in range(600)
    ]
    statuses = [r.status_code for r in asyncio.run(_sign_ins(world, attempts))]
    assert set(statuses) == {401, 429}  # no 5xx, whatever the load
    world.clock.advance(60)
    world.accounts.flush_refused_sign_ins()
    new_rows = _chain(world)[rows_before:]
    assert [e["type"] for e in new_rows] == ["checkpoint.sign_in.refused"]
    [tally] = new_rows
    assert (tally["unknown_name"], tally["throttled"]) == (500, 100)
    assert statuses.count(401) == 50 * throttle.ADDRESS_FREE
    assert len(tally["clients"]) == 10 and tally["other_clients"] == 40
    assert {c["count"] for c in tally["clients"]} == {12}


async def _sign_ins(world: World, attempts: list[tuple[str, dict[str, str]]]) -> list[Any]:
    """Each ``(address, body)`` of ``attempts`` posted to /v1/sessions in turn, from that
    client address, by one event loop driving the app: the answers, in order."""
    answers = []
    async with contextlib.AsyncExitStack() as stack:
        clients: dict[str, httpx.AsyncClient] = {}
        for address, body in attempts:
            if address not in clients:
                transport = httpx.ASGITransport(app=world.app, client=(address, 50000))
                clients[address] = await stack.enter_async_context(
                    httpx.AsyncClient(transport=transport, base_url="http://testserver")
                )
            answers.append(await clients[address].post("/v1/sessions", json=body))
    return answers


def _chain(world: World) -> list[dict[str, Any]]:
    with world.checkpoint.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT event FROM audit_log ORDER BY seq")).scalars()
        return [json.loads(e) for e in rows]


def test_parallel_sign_ins_from_one_address_are_slowed_never_answered_5xx(world: World) -> None:
    """40 parallel sign-ins with unknown names got 26 x 503. One address has at most two
    in progress; the rest are refused at once with 429 E_THROTTLED and Retry-After."""
    release, entered, _ = _gate_verify(world, lambda _encoded, _pw: True)
    guesser = world.client_from("10.8.0.1")
    answers: list[Any] = []
    lock = threading.Lock()

    def sign_in(i: int) -> None:
        response = guesser.post("/v1/sessions", json={"username": f"n-{i}", "password": "x"})
        with lock:
            answers.append(response)

    threads = [threading.Thread(target=sign_in, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    try:
        for _ in range(throttle.IN_FLIGHT_PER_ADDRESS):
            assert entered.acquire(timeout=WAIT)  # two are verifying, held
        # every other one is answered while those two still hold their places
        deadline = threading.Event()
        for _ in range(400):
            with lock:
                if len(answers) == 40 - throttle.IN_FLIGHT_PER_ADDRESS:
                    break
            deadline.wait(0.05)  # polling a condition under a bound, not a race
        with lock:
            early = list(answers)
    finally:
        release.set()
        for t in threads:
            t.join(WAIT)
    assert len(early) == 40 - throttle.IN_FLIGHT_PER_ADDRESS
    for response in early:
        assert response.status_code == 429
        assert response.json()["error"]["code"] == "E_THROTTLED"
        assert int(response.headers["Retry-After"]) >= 1
    assert sorted(r.status_code for r in answers) == [401] * 2 + [429] * 38


def test_an_admin_unlocks_an_account_or_sets_its_password(world: World) -> None:
    """There was no way back from a lockout but waiting, nor any password reset."""
    _lock(world)
    _assert_refused(_login(world, PASSWORD))
    listed = {u.username: u for u in world.accounts.list_users()}
    assert listed["alice"].locked_until == world.clock() + LOCKOUT  # what `users list` shows
    before = _sessions_of(world, "alice")
    world.accounts.unlock_user("alice")
    assert {u.username: u for u in world.accounts.list_users()}["alice"].locked_until is None
    assert _login(world, PASSWORD).status_code == 201
    assert _sessions_of(world, "alice") == before + 1

    world.accounts.set_password("alice", "a new and long enough password")
    with world.checkpoint.engine.connect() as conn:
        live = conn.execute(
            sessions.select().where(sessions.c.username == "alice", sessions.c.revoked_at.is_(None))
        ).all()
    assert live == []  # her sessions ended with the old password
    _assert_refused(_login(world, PASSWORD))
    assert _login(world, "a new and long enough password").status_code == 201
    kinds = [e["type"] for e in audit_events(world, "checkpoint.user.unlocked")] + [
        e["type"] for e in audit_events(world, "checkpoint.user.password_set")
    ]
    assert kinds == ["checkpoint.user.unlocked", "checkpoint.user.password_set"]
    with pytest.raises(Refusal):
        world.accounts.unlock_user("nobody")
    with pytest.raises(Refusal):
        world.accounts.set_password("alice", "short")


class _Connection:
    """A keep-alive HTTP/1.1 connection to 127.0.0.1:``port`` from the local address
    ``source`` (Linux routes all of 127/8 to loopback)."""

    def __init__(self, port: int, source: str) -> None:
        self._conn = http.client.HTTPConnection("127.0.0.1", port, source_address=(source, 0))

    def post(self, body: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        self._conn.request(
            "POST",
            "/v1/sessions",
            body=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        response = self._conn.getresponse()
        data = json.loads(response.read())
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data

    def close(self) -> None:
        self._conn.close()


async def _campaign(world: World, address: str, guess: dict[str, str], count: int) -> list[int]:
    """``count`` wrong passwords through the app from ``address``, each sent first too
    early (429 E_THROTTLED, the clock then moved by its Retry-After) and then once the
    delay passed (401): the delays, in order.

    One event loop drives the app, as a server's does (a TestClient outside a with-block
    starts one per request, in a thread of its own, and crosses threads per message)."""
    transport = httpx.ASGITransport(app=world.app, client=(address, 50000))
    delays: list[int] = []
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        for _ in range(count):
            response = await client.post("/v1/sessions", json=guess)
            if response.status_code == 429:
                assert response.json()["error"]["code"] == "E_THROTTLED"
                delays.append(int(response.headers["Retry-After"]))
                world.clock.advance(delays[-1])
                response = await client.post("/v1/sessions", json=guess)
            assert response.status_code == 401, response.text
    return delays


@pytest.mark.slow
def test_a_thousand_guesses_from_one_address_slow_it_and_never_keep_alice_out(
    tmpfs_world: World,
) -> None:
    """Five wrong passwords locked any known name for 15 minutes: anyone who could reach
    the sign-in could keep an approver out. Through the app (the client's address given
    as a socket's would be), 1,000 wrong passwords for alice from 127.0.0.2, each tried
    first too early (refused 429 E_THROTTLED at once, Retry-After its delay) and then
    once the delay passed: every delay is longer than the one before until it reaches
    the cap, the account is never locked, and over real sockets (uvicorn on loopback)
    the attacker is still slowed and alice signs in at once from 127.0.0.1. The
    attacker's address is in the audit chain (each verified guess, and the tally of
    throttled ones) and in ``airlock users sign-ins``' report."""
    world = tmpfs_world
    alice_hash = world.password_hash("alice")
    verifies_before = world.hasher.verifies_of(alice_hash)
    # The campaign through the app with the socket address given to it (the ASGI
    # client's seam): a request over loopback TCP costs ~45 ms here, 2,000 of them 90 s.
    # Its ~3,000 commits are on tmpfs (tmpfs_world): on disk, their fsyncs were most of
    # the test's time when the suite ran beside it.
    guess = {"username": "alice", "password": "not alices password"}
    delays = asyncio.run(_campaign(world, "127.0.0.2", guess, 1000))
    # Then over real sockets: the attacker's address is still slowed, and alice, from
    # another address, signs in at once (the clock has not moved).
    with served(world.app) as (_server, port, _thread):
        attacker = _Connection(port, "127.0.0.2")
        alice = _Connection(port, "127.0.0.1")
        try:
            status, headers, _ = attacker.post(guess)
            assert (status, headers["retry-after"]) == (429, str(throttle.CAP))
            status, _, body = alice.post({"username": "alice", "password": PASSWORD})
            assert status == 201, body
        finally:
            attacker.close()
            alice.close()
    # Slowed: 1,000 - PAIR_FREE guesses each waited, every delay longer than the last
    # until the cap (an hour), and the guesses together took weeks, not seconds.
    assert len(delays) == 1000 - throttle.PAIR_FREE
    growing = delays[: delays.index(throttle.CAP)]
    assert growing == sorted(set(growing)) and len(growing) >= 10
    assert set(delays[len(growing) :]) == {throttle.CAP}
    assert sum(delays) > 30 * 24 * 3600
    # Each guess was checked once (no more), and none of them locked the account.
    assert world.hasher.verifies_of(alice_hash) - verifies_before == 1000 + 1
    assert audit_events(world, "checkpoint.user.locked") == []
    # Recorded: every wrong password with the address, and the throttled attempts.
    failed = audit_events(world, "checkpoint.login.failed")
    assert len(failed) == 1000 and {e["client"] for e in failed} == {"127.0.0.2"}
    world.accounts.flush_refused_sign_ins(force=True)
    tallies = audit_events(world, "checkpoint.sign_in.refused")
    assert sum(t["throttled"] for t in tallies) == len(delays) + 1
    assert {c["address"] for t in tallies for c in t["clients"]} == {"127.0.0.2"}
    report = world.accounts.sign_in_report(since=0)
    assert report.clients["127.0.0.2"].users == {"alice": 1000}
    assert report.totals.throttled == len(delays) + 1
    assert "127.0.0.1" not in report.clients
    created = audit_events(world, "checkpoint.session.created")
    assert created[-1] == {**created[-1], "user": "alice", "client": "127.0.0.1"}
