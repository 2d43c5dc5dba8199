"""The password policy (NIST SP 800-63B §5.1.1.2): 12+ characters, not a common password
(the shipped blocklist), not one character repeated, not the user name; no composition
rules. Whatever sets a password goes through it: ``users add`` and ``users
set-password``, through ``Accounts.add_user`` and ``Accounts.set_password``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from airlock.cli import app
from services.checkpoint.errors import ErrorCode, Refusal
from services.checkpoint.passwords import BLOCKLIST_PATH, MIN_LENGTH, check_new_password

from .harness import PASSWORD, World

_PROVENANCE = BLOCKLIST_PATH.with_suffix(".md")


def _most_common(n: int) -> list[str]:
    entries: list[str] = json.loads(BLOCKLIST_PATH.read_text())
    return entries[:n]


def _refusal(password: str, username: str = "alice") -> Refusal:
    with pytest.raises(Refusal) as refused:
        check_new_password(password, username)
    assert refused.value.code == ErrorCode.E_WEAK_PASSWORD and refused.value.status == 422
    assert "\n" not in refused.value.message and password not in refused.value.message
    return refused.value


def test_the_blocklist_is_the_vendored_list_byte_for_byte() -> None:
    """The SHA-256 its provenance note names: a changed list is a changed policy."""
    digest = hashlib.sha256(BLOCKLIST_PATH.read_bytes()).hexdigest()
    assert f"`{digest}`" in _PROVENANCE.read_text()
    assert len(_most_common(100_000)) == 30_000
    assert MIN_LENGTH >= 8  # SP 800-63B §5.1.1.2's floor


def test_the_thousand_most_common_passwords_are_refused_as_new_passwords(
    sqlite_world: World,
) -> None:
    """A password was checked for its length alone (`aaaaaaaaaaaa` was accepted)."""
    world = sqlite_world
    for password in _most_common(1000):
        for setter in (
            lambda p: world.accounts.set_password("alice", p),
            lambda p: world.accounts.add_user("newcomer", p, "approver"),
        ):
            with pytest.raises(Refusal) as refused:
                setter(password)
            assert refused.value.code == ErrorCode.E_WEAK_PASSWORD, password
    assert "newcomer" not in {u.username for u in world.accounts.list_users()}
    assert (
        world.client.post(
            "/v1/sessions", json={"username": "alice", "password": PASSWORD}
        ).status_code
        == 201
    )  # her password did not change


def test_a_long_common_password_is_refused_whatever_its_case() -> None:
    """The length rule alone lets these through: only the blocklist refuses them."""
    long_ones = [p for p in _most_common(30_000) if len(p) >= MIN_LENGTH]
    assert len(long_ones) > 200
    for password in long_ones:
        for typed in (password, password.upper(), password.title()):
            message = _refusal(typed).message
            assert message == "password is one of the most common passwords; choose another"


def test_a_repeated_character_or_the_user_name_is_refused() -> None:
    assert "one character repeated" in _refusal("aaaaaaaaaaaa").message
    assert "user name" in _refusal("Alice.Example-Long", "alice.example-long").message
    assert f"at least {MIN_LENGTH}" in _refusal("short").message
    assert "at most" in _refusal("x" * 1025 + "y").message


def test_no_composition_rule_refuses_a_long_uncommon_passphrase() -> None:
    for password in ("correct horse battery staple", "lowercase only words here", "1" * 11 + "2"):
        check_new_password(password, "alice")


def _airlock(tmp_path: Path, *args: str, stdin: str = "") -> Result:
    env = {
        "AIRLOCK_ENV": "prod",
        "AIRLOCK_CHECKPOINT_DATABASE_URL": f"sqlite:///{tmp_path / 'checkpoint.db'}",
        "AIRLOCK_CHECKPOINT_KEYS_DIR": str(tmp_path / "keys"),
        "AIRLOCK_CHECKPOINT_AUDIENCE": "airlock-executor/prod-test",
    }
    return CliRunner().invoke(app, list(args), input=stdin, env=env)


def test_cli_users_add_and_set_password_refuse_a_common_password(tmp_path: Path) -> None:
    weak = _airlock(tmp_path, "users", "add", "dora", "--password-stdin", stdin="QwertyAsdfgh\n")
    assert weak.exit_code == 1
    assert weak.stderr == (
        "refused: E_WEAK_PASSWORD: password is one of the most common passwords; choose another\n"
    )
    generated = _airlock(tmp_path, "users", "add", "dora", "--generate")
    assert generated.exit_code == 0, generated.output
    again = _airlock(
        tmp_path, "users", "set-password", "dora", "--password-stdin", stdin="aaaaaaaaaaaaaa\n"
    )
    assert again.exit_code == 1 and "E_WEAK_PASSWORD" in again.stderr
    helped = _airlock(tmp_path, "users", "add", "--help").stdout
    assert "a common one (30,000 ship with Airlock)" in helped
