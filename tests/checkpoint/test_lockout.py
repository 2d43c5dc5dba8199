"""Login lockout under concurrency: attempts are claimed before the slow verify.

The password check is made to wait on events, so the tests decide exactly which guesses
are "still hashing" while others run; nothing sleeps. The harness locks an account after
3 failures (``lockout_threshold=3``) for 600 s.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from services.checkpoint import auth
from services.checkpoint.errors import Refusal
from services.checkpoint.models import sessions, users

from .harness import PASSWORD, World, audit_events

THRESHOLD = 3
WAIT = 30.0  # an upper bound for a thread to reach a point; never a synchronization sleep


def _login(world: World, password: str) -> Any:
    return world.client.post("/v1/sessions", json={"username": "alice", "password": password})


def _gate_verify(
    world: World, hold: Callable[[str], bool]
) -> tuple[threading.Event, threading.Semaphore, list[str]]:
    """Make every verify of a password for which ``hold`` is true wait for ``release``;
    ``entered`` is released once per held verify that started."""
    real = world.accounts._verify
    release = threading.Event()
    entered = threading.Semaphore(0)
    verified: list[str] = []

    def verify(encoded: str, password: str) -> bool:
        verified.append(password)
        if hold(password):
            entered.release()
            assert release.wait(WAIT)
        return real(encoded, password)

    world.accounts._verify = verify  # type: ignore[method-assign]
    return release, entered, verified


def _sessions_of(world: World, username: str) -> int:
    with world.checkpoint.engine.connect() as conn:
        return len(conn.execute(sessions.select().where(sessions.c.username == username)).all())


def test_concurrent_guesses_never_verify_more_than_the_threshold(world: World) -> None:
    release, entered, verified = _gate_verify(world, lambda _password: True)
    # As many as may be in progress at once; more would be refused E_BUSY before any claim.
    guesses = auth._CONCURRENT_VERIFIES + auth._WAITING_SIGN_INS
    done = threading.Semaphore(0)
    results: list[str] = []

    def guess(i: int) -> None:
        try:
            world.accounts.login("alice", f"wrong-password-{i:02d}")
        except Refusal as exc:
            results.append(exc.code.value)
        finally:
            done.release()

    threads = [threading.Thread(target=guess, args=(i,)) for i in range(guesses)]
    for t in threads:
        t.start()
    try:
        # every guess either waits inside verify or was refused before reaching it
        for _ in range(THRESHOLD):
            assert entered.acquire(timeout=WAIT)
        for _ in range(guesses - THRESHOLD):
            assert done.acquire(timeout=WAIT), f"{len(verified)} guesses are verifying"
        assert len(verified) == THRESHOLD
        assert sorted(results) == ["E_LOCKED"] * (guesses - THRESHOLD)
    finally:
        release.set()
        for t in threads:
            t.join(WAIT)
    assert len(verified) == THRESHOLD
    assert sorted(results) == sorted(
        ["E_LOCKED"] * (guesses - THRESHOLD) + ["E_UNAUTHENTICATED"] * THRESHOLD
    )
    assert _login(world, PASSWORD).status_code == 423  # locked, the right password too
    assert audit_events(world, "checkpoint.user.locked")[-1]["user"] == "alice"


@pytest.mark.parametrize("held", [PASSWORD, "wrong-password-xx"], ids=["right", "wrong"])
def test_guess_verified_after_the_account_locked_does_not_tell_right_from_wrong(
    world: World, held: str
) -> None:
    release, entered, _ = _gate_verify(world, lambda password: password == held)
    sessions_before = _sessions_of(world, "alice")
    box: dict[str, Any] = {}
    in_flight = threading.Thread(target=lambda: box.setdefault("r", _login(world, held)))
    in_flight.start()
    try:
        assert entered.acquire(timeout=WAIT)  # the held guess is "still hashing"
        # meanwhile other wrong guesses lock the account
        for i in range(THRESHOLD):
            _login(world, f"other-wrong-{i}")
        assert _login(world, "anything-at-all").status_code == 423
    finally:
        release.set()
        in_flight.join(WAIT)

    wrong = box["r"]
    reference = world.client.post(
        "/v1/sessions", json={"username": "nobody", "password": "wrong-password-yy"}
    )
    assert wrong.status_code == 401
    assert wrong.json() == reference.json()  # byte for byte what a wrong password gets
    assert _sessions_of(world, "alice") == sessions_before  # no session was made


def test_right_password_after_failures_below_the_threshold_signs_in(world: World) -> None:
    for i in range(THRESHOLD - 1):
        assert _login(world, f"wrong-{i}").status_code == 401
    assert _login(world, PASSWORD).status_code == 201
    with world.checkpoint.engine.connect() as conn:
        row = conn.execute(sa.select(users).where(users.c.username == "alice")).one()
    assert (row.failed_logins, row.locked_until) == (0, None)


def test_attempts_claimed_but_never_settled_lock_instead_of_sticking(world: World) -> None:
    """A process that died mid-verify leaves its attempts counted: the next one locks the
    account for the lockout period, after which the right password works again."""
    with world.checkpoint.engine.begin() as conn:
        conn.execute(
            users.update().where(users.c.username == "alice").values(failed_logins=THRESHOLD)
        )
    assert _login(world, PASSWORD).status_code == 423
    world.clock.advance(599)
    assert _login(world, PASSWORD).status_code == 423
    world.clock.advance(1)
    assert _login(world, PASSWORD).status_code == 201


def test_every_failed_login_is_logged_even_where_it_is_not_audited(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """A login for a user that does not exist is not put in the audit chain (anyone can
    send them), which left password spraying invisible to an operator (found in review)."""
    caplog.set_level("WARNING", logger="airlock.checkpoint.auth")
    world.client.post("/v1/sessions", json={"username": "mallory", "password": "x"})
    # A password typed into the user name field is never logged (found in review).
    world.client.post("/v1/sessions", json={"username": "Tr0ub4dor&3-horse", "password": "x"})
    for _ in range(THRESHOLD):
        assert _login(world, "wrong").status_code == 401
    assert _login(world, PASSWORD).status_code == 423
    messages = [r.getMessage() for r in caplog.records if r.name == "airlock.checkpoint.auth"]
    assert messages[0] == "failed login: no such user 'mallory'"
    assert messages[1] == "failed login: a malformed user name (17 characters)"
    assert "Tr0ub4dor" not in caplog.text
    assert messages[2:] == ["failed login: wrong password for 'alice'"] * THRESHOLD + [
        "failed login: 'alice' is locked"
    ]


def test_an_admin_unlocks_an_account_or_sets_its_password(world: World) -> None:
    """There was no way back from a lockout but waiting, nor any password reset."""
    for _ in range(THRESHOLD):
        assert _login(world, "wrong").status_code == 401
    assert _login(world, PASSWORD).status_code == 423
    before = _sessions_of(world, "alice")
    world.accounts.unlock_user("alice")
    assert _login(world, PASSWORD).status_code == 201
    assert _sessions_of(world, "alice") == before + 1

    world.accounts.set_password("alice", "a new and long enough password")
    with world.checkpoint.engine.connect() as conn:
        live = conn.execute(
            sessions.select().where(sessions.c.username == "alice", sessions.c.revoked_at.is_(None))
        ).all()
    assert live == []  # her sessions ended with the old password
    assert _login(world, PASSWORD).status_code == 401
    assert _login(world, "a new and long enough password").status_code == 201
    kinds = [e["type"] for e in audit_events(world, "checkpoint.user.unlocked")] + [
        e["type"] for e in audit_events(world, "checkpoint.user.password_set")
    ]
    assert kinds == ["checkpoint.user.unlocked", "checkpoint.user.password_set"]
    with pytest.raises(Refusal):
        world.accounts.unlock_user("nobody")
    with pytest.raises(Refusal):
        world.accounts.set_password("alice", "short")
