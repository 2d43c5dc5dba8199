"""airlock login/logout: the session file is born 0600, unsafe files are refused, and the
exit codes tell a refusal (1) from a usage error (2) from an unreachable checkpoint (3)."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from airlock.cli._client import CheckpointClient
from airlock.cli._session import StoredSession, write_session

from .conftest import PASSWORD, Served, airlock, dead_url


def test_login_writes_a_session_file_born_0600(served: Served) -> None:
    old = os.umask(0)  # the mode must come from open(2), not from a friendly umask
    try:
        served.login("alice")
    finally:
        os.umask(old)
    path = served.home / "session.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(served.home.stat().st_mode) == 0o700
    stored = json.loads(path.read_text())
    assert set(stored) == {"url", "token", "username", "expires_at"}
    assert (stored["url"], stored["username"]) == (served.url, "alice")
    assert served.world.accounts.authenticate(stored["token"]).name == "alice"
    assert served.run("approvals", "list").exit_code == 0


def test_login_output_never_shows_the_token(served: Served) -> None:
    result = served.run(
        "login", "--url", served.url, "-u", "bob", "--password-stdin", stdin=PASSWORD + "\n"
    )
    assert result.exit_code == 0, result.output
    token = json.loads((served.home / "session.json").read_text())["token"]
    assert token not in result.output
    assert "bob (approver)" in result.output


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_session_file_readable_by_others_is_refused(served: Served, mode: int) -> None:
    served.login("alice")
    path = served.home / "session.json"
    os.chmod(path, mode)
    result = served.run("approvals", "list")
    assert result.exit_code == 2
    assert "group or others" in result.stderr
    # ... and the doctor says so too.
    doctor = served.run("doctor", "--url", served.url)
    assert doctor.exit_code == 1
    assert any(line.startswith("fail  session") for line in doctor.stdout.splitlines())


def test_symlinked_session_file_is_refused(served: Served) -> None:
    served.login("alice")
    real = served.home / "session.json"
    moved = served.home / "elsewhere.json"
    real.rename(moved)
    real.symlink_to(moved)
    result = served.run("approvals", "list")
    assert result.exit_code == 2
    assert "cannot open" in result.stderr


def test_session_rewrite_replaces_the_file_atomically(served: Served) -> None:
    path = served.home / "session.json"
    write_session(path, StoredSession(url=served.url, token="t1", username="x", expires_at=1))
    inode = path.stat().st_ino
    served.login("carol")
    assert path.stat().st_ino != inode  # a new file renamed over, never rewritten in place
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not [p for p in served.home.iterdir() if p.name.endswith(".tmp")]


def test_wrong_password_is_refused_with_exit_1(served: Served) -> None:
    result = served.run(
        "login", "--url", served.url, "-u", "alice", "--password-stdin", stdin="wrong\n"
    )
    assert result.exit_code == 1
    assert "refused: E_UNAUTHENTICATED" in result.stderr
    assert not (served.home / "session.json").exists()


def test_login_to_a_locked_account_is_refused_like_a_wrong_password(served: Served) -> None:
    # The checkpoint never says which (a distinct 423 E_LOCKED told anyone that a name
    # exists); its one message for a refused sign-in names the lock; the CLI shows it.
    def login(username: str, password: str) -> Any:
        return served.run(
            "login", "--url", served.url, "-u", username, "--password-stdin", stdin=password + "\n"
        )

    # The last-resort lock needs failures from two addresses (3 counted from each).
    for address in ("10.0.0.1", "10.0.0.2"):
        guesser = served.world.client_from(address)
        for _ in range(3):
            body = {"username": "alice", "password": "wrong"}
            assert guesser.post("/v1/sessions", json=body).status_code == 401
    locked = login("alice", PASSWORD)
    unknown = login("nobody", PASSWORD)
    assert (locked.exit_code, unknown.exit_code) == (1, 1)
    assert locked.stderr == unknown.stderr
    assert locked.stderr.startswith(
        "refused: E_UNAUTHENTICATED: wrong username or password, or the account is locked"
    )
    assert "an admin can unlock it" in locked.stderr
    assert "run `airlock login`" not in locked.stderr  # no session hint: this was the login
    assert not (served.home / "session.json").exists()


def test_login_after_failures_from_this_address_is_slowed_with_exit_1(served: Served) -> None:
    def login(password: str) -> Any:
        return served.run(
            "login", "--url", served.url, "-u", "alice", "--password-stdin", stdin=password + "\n"
        )

    for _ in range(3):  # throttle.PAIR_FREE free failures
        assert "E_UNAUTHENTICATED" in login("wrong").stderr
    slowed = login(PASSWORD)
    assert slowed.exit_code == 1
    assert slowed.stderr == (
        "refused: E_THROTTLED: too many failed sign-ins from this address; try again in 1 s\n"
    )
    served.world.clock.advance(1)
    assert login(PASSWORD).exit_code == 0


def test_login_without_terminal_or_stdin_flag_is_a_usage_error(served: Served) -> None:
    result = served.run("login", "--url", served.url, "-u", "alice")
    assert result.exit_code == 2
    assert "--password-stdin" in result.stderr


def test_not_logged_in_is_a_usage_error(served: Served) -> None:
    result = served.run("approvals", "list")
    assert result.exit_code == 2
    assert "not logged in" in result.stderr


def test_checkpoint_down_exits_3(tmp_path: object) -> None:
    url = dead_url()
    login = airlock(
        "login",
        "--url",
        url,
        "-u",
        "alice",
        "--password-stdin",
        stdin=PASSWORD + "\n",
        env={"AIRLOCK_HOME": str(tmp_path)},
    )
    assert login.exit_code == 3
    assert "cannot reach the checkpoint" in login.stderr
    listing = airlock(
        "approvals", "list", env={"AIRLOCK_TOKEN": "x" * 40, "AIRLOCK_CHECKPOINT_URL": url}
    )
    assert listing.exit_code == 3


def test_token_from_the_environment_overrides_the_file(served: Served) -> None:
    token = served.world.tokens["viewer"]
    env = {"AIRLOCK_TOKEN": token, "AIRLOCK_CHECKPOINT_URL": served.url}
    assert served.run("approvals", "list", env=env).exit_code == 0
    # A token without a URL is a configuration error, not a guess at a default server.
    assert served.run("approvals", "list", env={"AIRLOCK_TOKEN": token}).exit_code == 2


def test_session_is_not_sent_to_another_checkpoint_url(served: Served) -> None:
    served.login("alice")
    result = served.run("approvals", "list", env={"AIRLOCK_CHECKPOINT_URL": dead_url()})
    assert result.exit_code == 2
    assert "differs from the URL this session was issued by" in result.stderr


def test_logout_ends_the_session_at_the_checkpoint(served: Served) -> None:
    served.login("alice")
    token = json.loads((served.home / "session.json").read_text())["token"]
    result = served.run("logout")
    assert result.exit_code == 0, result.output
    assert "session ended at the checkpoint" in result.stdout
    assert not (served.home / "session.json").exists()
    revoked = served.world.client.get("/v1/me", headers={"Authorization": f"Bearer {token}"})
    assert revoked.status_code == 401
    assert served.run("logout").stdout.strip() == "not logged in"


def test_logout_keeps_the_file_when_the_checkpoint_is_down(served: Served) -> None:
    path = served.home / "session.json"
    write_session(path, StoredSession(url=dead_url(), token="t", username="a", expires_at=1))
    result = served.run("logout")
    assert result.exit_code == 3
    assert path.exists()
    forced = served.run("logout", "--forget")
    assert forced.exit_code == 0
    assert not path.exists()


def test_revoked_session_is_refused_with_a_hint_to_log_in(served: Served) -> None:
    served.login("alice")
    token = json.loads((served.home / "session.json").read_text())["token"]
    served.world.client.delete("/v1/sessions/current", headers={"Authorization": f"Bearer {token}"})
    result = served.run("approvals", "list")
    assert result.exit_code == 1
    assert "E_UNAUTHENTICATED" in result.stderr
    assert "airlock login" in result.stderr


def _unusable_home(tmp_path: Path, kind: str) -> Path:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    if kind == "under-a-file":
        return blocker / "sub"
    if kind == "is-a-file":
        return blocker
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    return shared


@pytest.mark.parametrize("kind", ["under-a-file", "is-a-file", "writable-by-others"])
def test_unusable_session_directory_stops_login_before_the_password_is_sent(
    tmp_path: Path, kind: str
) -> None:
    # Nothing listens at the URL: had the password been sent first, this would exit 3.
    result = airlock(
        "login",
        "--url",
        dead_url(),
        "-u",
        "alice",
        "--password-stdin",
        stdin=PASSWORD + "\n",
        env={"AIRLOCK_HOME": str(_unusable_home(tmp_path, kind))},
    )
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stderr.startswith("error: ")
    assert "Traceback" not in result.output


def test_failing_to_store_the_session_is_a_clear_error_and_ends_the_session(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    issued: list[str] = []
    real_call = CheckpointClient.call

    def recording_call(self: CheckpointClient, method: str, path: str, **kw: Any) -> Any:
        body = real_call(self, method, path, **kw)
        if (method, path) == ("POST", "/v1/sessions"):
            issued.append(body["token"])
        return body

    def disk_full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(CheckpointClient, "call", recording_call)
    monkeypatch.setattr(os, "fsync", disk_full)  # the session file is written with os.fsync
    result = served.run(
        "login", "--url", served.url, "-u", "alice", "--password-stdin", stdin=PASSWORD + "\n"
    )
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "cannot store the session" in result.stderr
    assert "No space left on device" in result.stderr
    (token,) = issued
    assert token not in result.output
    assert not (served.home / "session.json").exists()
    assert not [p for p in served.home.iterdir() if p.name.endswith(".tmp")]
    # No one holds the issued session any more, so it was ended at the checkpoint.
    me = served.world.client.get("/v1/me", headers={"Authorization": f"Bearer {token}"})
    assert me.status_code == 401


def test_a_cli_session_left_idle_ends(served: Served) -> None:
    # The harness's sessions idle as long as they live; this one's end after 10 minutes.
    served.world.accounts._session_idle = 600
    served.login("alice")
    served.world.clock.advance(599)
    assert served.run("approvals", "list").exit_code == 0  # used: kept alive
    served.world.clock.advance(599)
    assert served.run("approvals", "list").exit_code == 0
    served.world.clock.advance(600)
    ended = served.run("approvals", "list")
    assert ended.exit_code == 1
    assert "E_UNAUTHENTICATED" in ended.stderr and "airlock login" in ended.stderr
