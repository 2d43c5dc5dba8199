"""Login lockout: attempts are claimed before the slow verify, and a locked account is
refused exactly like a wrong password, so a lockout tells no one that a name exists.

The password check is made to wait on events, so the tests decide exactly which guesses
are "still hashing" while others run; nothing sleeps. The harness locks an account after
3 failures (``lockout_threshold=3``) for 600 s, and its hasher is a test double that
records which stored hash each argon2 verify was against (``CountingHasher``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from airlock.store import verify_chain
from services.checkpoint import auth
from services.checkpoint.errors import Refusal
from services.checkpoint.models import sessions, users

from .harness import PASSWORD, World, audit_events

THRESHOLD = 3
LOCKOUT = 600
WAIT = 30.0  # an upper bound for a thread to reach a point; never a synchronization sleep
#: Headers a server or proxy may add that differ per response whatever it answers (the
#: test client adds none today); every other header must match.
_PER_RESPONSE = frozenset({"date", "x-request-id"})


def _login(world: World, password: str, username: str = "alice") -> Any:
    return world.client.post("/v1/sessions", json={"username": username, "password": password})


def _assert_refused(response: Any) -> None:
    """The one answer to every refused sign-in (an unknown name's, for reference)."""
    assert response.status_code == 401, response.text
    assert response.json() == {
        "error": {"code": "E_UNAUTHENTICATED", "message": auth._SIGN_IN_REFUSED}
    }


def _lock(world: World, username: str = "alice") -> None:
    for i in range(THRESHOLD):
        _assert_refused(_login(world, f"wrong-{i}", username))
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
        try:
            world.accounts.login("alice", f"wrong-password-{i:02d}")
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
        # meanwhile other wrong guesses lock the account
        for i in range(THRESHOLD):
            _login(world, f"other-wrong-{i}")
        _assert_refused(_login(world, "anything-at-all"))
    finally:
        release.set()
        in_flight.join(WAIT)

    wrong = box["r"]
    reference = _login(world, "wrong-password-yy", username="nobody")
    _assert_refused(reference)
    assert wrong.status_code == 401
    assert wrong.json() == reference.json()  # byte for byte what a wrong password gets
    assert _sessions_of(world, "alice") == sessions_before  # no session was made


def test_probing_for_user_names_gets_one_answer_for_unknown_wrong_and_locked(
    world: World,
) -> None:
    """With 423 E_LOCKED for a locked account, threshold+1 guesses told anyone that a
    name exists, and the locked answer came at once, without an argon2 verify. Now an
    unknown name, a wrong password and a locked account (even with the right password)
    get the same status, body and headers, each after one verify through the same
    slot-limited path."""
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
        response = _login(world, password, username)
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


def test_right_password_after_failures_below_the_threshold_signs_in(world: World) -> None:
    for i in range(THRESHOLD - 1):
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


def test_every_failed_login_is_logged_even_where_it_is_not_audited(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """A login for a user that does not exist is not put in the audit chain (anyone can
    send them), which left password spraying invisible to an operator (found in review).
    A locked account is answered like a wrong password: only the log says it is locked."""
    caplog.set_level("WARNING", logger="airlock.checkpoint.auth")
    world.client.post("/v1/sessions", json={"username": "mallory", "password": "x"})
    # A password typed into the user name field is never logged (found in review).
    world.client.post("/v1/sessions", json={"username": "Tr0ub4dor&3-horse", "password": "x"})
    for _ in range(THRESHOLD):
        _assert_refused(_login(world, "wrong"))
    _assert_refused(_login(world, PASSWORD))
    messages = [r.getMessage() for r in caplog.records if r.name == "airlock.checkpoint.auth"]
    assert messages[0] == "failed login: no such user 'mallory'"
    assert messages[1] == "failed login: a malformed user name (17 characters)"
    assert "Tr0ub4dor" not in caplog.text
    assert messages[2:] == ["failed login: wrong password for 'alice'"] * THRESHOLD + [
        "failed login: 'alice' is locked"
    ]
    failed = [e["user"] for e in audit_events(world, "checkpoint.login.failed")]
    assert failed == ["alice"] * (THRESHOLD - 1)  # the last failure is audited as the lock
    assert [e["user"] for e in audit_events(world, "checkpoint.user.locked")] == ["alice"]


def test_an_admin_unlocks_an_account_or_sets_its_password(world: World) -> None:
    """There was no way back from a lockout but waiting, nor any password reset."""
    _lock(world)
    _assert_refused(_login(world, PASSWORD))
    listed = {u["username"]: u for u in world.accounts.list_users()}
    assert listed["alice"]["locked_until"] == world.clock() + LOCKOUT  # what `users list` shows
    before = _sessions_of(world, "alice")
    world.accounts.unlock_user("alice")
    assert {u["username"]: u for u in world.accounts.list_users()}["alice"]["locked_until"] is None
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
