"""The checkpoint refuses to start on a bad policy or key file; the CLI wires it up."""

from __future__ import annotations

import json
import os
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import Result
from typer.testing import CliRunner

from airlock.cli import app
from airlock.protocol import canonical_bytes
from airlock.settings import CheckpointSettings
from services.checkpoint._db import Database
from services.checkpoint.app import build
from services.checkpoint.auth import Accounts
from services.checkpoint.errors import ConfigError, ErrorCode, Refusal
from services.checkpoint.keys import KeyDirectory
from tests.executor.support import receipt_keyset

from .harness import CountingHasher


def _receipt_keys(tmp_path: Path) -> Path:
    path = tmp_path / "receipt-keys.json"
    if not path.exists():
        path.write_bytes(canonical_bytes(receipt_keyset().to_value()))
    return path


def _settings(tmp_path: Path, **overrides: object) -> CheckpointSettings:
    values: dict[str, object] = {
        "database_url": f"sqlite:///{tmp_path / 'checkpoint.db'}",
        "keys_dir": tmp_path / "keys",
        "audience": "airlock-executor/test",
        "receipt_keys_path": _receipt_keys(tmp_path),
        **overrides,
    }
    return CheckpointSettings.model_validate(values)


def test_checkpoint_starts_with_the_default_policy(tmp_path: Path) -> None:
    KeyDirectory(tmp_path / "keys").generate(0)
    app = build(_settings(tmp_path), sweep_interval=None)
    assert app.state.checkpoint.policy.rule_names[0] == "deny-protected"


def test_malformed_policy_stops_the_start(tmp_path: Path) -> None:
    KeyDirectory(tmp_path / "keys").generate(0)
    policy = tmp_path / "policy.toml"
    policy.write_text('version = 1\n[[rule]]\nname = "x"\neffect = "approve"\nquorum = "two"\n')
    with pytest.raises(ConfigError, match=r"policy .*policy.toml: rule #1: x: quorum"):
        build(_settings(tmp_path, policy_path=policy), sweep_interval=None)


def test_auto_delete_policy_stops_the_start(tmp_path: Path) -> None:
    KeyDirectory(tmp_path / "keys").generate(0)
    policy = tmp_path / "policy.toml"
    policy.write_text(
        'version = 1\n[[rule]]\nname = "yolo"\neffect = "auto"\nmatch.operation = "delete"\n'
    )
    with pytest.raises(ConfigError, match="auto is refused"):
        build(_settings(tmp_path, policy_path=policy), sweep_interval=None)


def test_auto_rule_named_with_a_space_stops_the_start(tmp_path: Path) -> None:
    KeyDirectory(tmp_path / "keys").generate(0)
    policy = tmp_path / "policy.toml"
    policy.write_text(
        'version = 1\n[[rule]]\nname = "auto stop dev"\neffect = "auto"\nmatch.operation = "stop"\n'
    )
    with pytest.raises(ConfigError, match=r"policy .*policy.toml: rule #1: auto rule name"):
        build(_settings(tmp_path, policy_path=policy), sweep_interval=None)


def test_world_readable_signing_key_stops_the_start(tmp_path: Path) -> None:
    record = KeyDirectory(tmp_path / "keys").generate(0)
    os.chmod(tmp_path / "keys" / record.file, 0o644)
    with pytest.raises(ConfigError, match="must be 0600"):
        build(_settings(tmp_path), sweep_interval=None)


def test_checkpoint_without_a_receipt_key_set_refuses_to_start(tmp_path: Path) -> None:
    KeyDirectory(tmp_path / "keys").generate(0)
    with pytest.raises(ConfigError, match="AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH is not set"):
        build(_settings(tmp_path, receipt_keys_path=None), sweep_interval=None)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "receipt key set .*missing.json: cannot read"),
        (b'{"keys": []}', "receipt key set .*missing.json: "),
        (b"not json", "receipt key set .*missing.json: "),
    ],
)
def test_missing_or_malformed_receipt_key_set_stops_the_start(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    KeyDirectory(tmp_path / "keys").generate(0)
    path = tmp_path / "missing.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError, match=message):
        build(_settings(tmp_path, receipt_keys_path=path), sweep_interval=None)


def test_missing_database_url_is_refused_outside_dev(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRLOCK_ENV", raising=False)
    monkeypatch.delenv("AIRLOCK_CHECKPOINT_DATABASE_URL", raising=False)
    with pytest.raises(ValueError, match="DATABASE_URL"):
        CheckpointSettings()


def test_the_dev_audience_is_refused_outside_dev(monkeypatch: pytest.MonkeyPatch) -> None:
    # Approvals addressed to the dev executor would all be refused by a production one
    # (E_AUDIENCE): the checkpoint refuses to start instead of issuing them.
    monkeypatch.setenv("AIRLOCK_ENV", "prod")
    monkeypatch.setenv("AIRLOCK_CHECKPOINT_DATABASE_URL", "sqlite:///checkpoint.db")
    monkeypatch.delenv("AIRLOCK_CHECKPOINT_AUDIENCE", raising=False)
    with pytest.raises(ValueError, match="AIRLOCK_CHECKPOINT_AUDIENCE must be set"):
        CheckpointSettings()
    monkeypatch.setenv("AIRLOCK_CHECKPOINT_AUDIENCE", "airlock-executor/prod-ap-southeast-1")
    assert CheckpointSettings().audience == "airlock-executor/prod-ap-southeast-1"


def _airlock(tmp_path: Path, *args: str, stdin: str = "") -> Result:
    # In-process (typer's runner) with the environment a deployment would set, whatever
    # the developer's shell says (AIRLOCK_ENV=dev would bring the demo defaults).
    env = {
        "AIRLOCK_ENV": "prod",
        "AIRLOCK_CHECKPOINT_DATABASE_URL": f"sqlite:///{tmp_path / 'checkpoint.db'}",
        "AIRLOCK_CHECKPOINT_KEYS_DIR": str(tmp_path / "keys"),
        "AIRLOCK_CHECKPOINT_AUDIENCE": "airlock-executor/prod-test",
    }
    return CliRunner().invoke(app, list(args), input=stdin, env=env)


def test_cli_checkpoint_refuses_to_start_without_a_receipt_key_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airlock.cli._serve import ServerAnsweringOnStop

    served: list[object] = []
    monkeypatch.setattr(ServerAnsweringOnStop, "run", lambda self, **_: served.append(self))
    assert _airlock(tmp_path, "keys", "generate").exit_code == 0
    started = _airlock(tmp_path, "checkpoint")
    assert started.exit_code == 2 and served == []
    assert "refusing to start" in started.stderr
    assert "AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH" in started.stderr


def test_cli_checkpoint_answers_open_feed_long_polls_when_asked_to_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`airlock checkpoint` serves through the server that, on a stop, first closes the
    app's feed signal (tests/checkpoint/test_stop.py shows what that does)."""
    from airlock.cli._serve import ServerAnsweringOnStop

    built: list[ServerAnsweringOnStop] = []
    monkeypatch.setattr(ServerAnsweringOnStop, "run", lambda self, **_: built.append(self))
    assert _airlock(tmp_path, "keys", "generate").exit_code == 0
    monkeypatch.setenv("AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH", str(_receipt_keys(tmp_path)))
    started = _airlock(tmp_path, "checkpoint", "--port", "1")
    [server] = built
    # Not started (run is replaced), so the command exits 3 as uvicorn.run would.
    assert started.exit_code == 3, started.output
    app = server.config.app
    assert server._on_exit == app.state.feed_signal.close
    assert server.config.port == 1
    # uvicorn's own X-Forwarded-For handling trusts any loopback peer: off, the app
    # trusts only AIRLOCK_CHECKPOINT_TRUSTED_PROXIES (tests/checkpoint/test_client_address).
    assert server.config.proxy_headers is False


def test_cli_keys_users_and_tokens(tmp_path: Path) -> None:
    assert _airlock(tmp_path, "keys", "generate").exit_code == 0
    assert _airlock(tmp_path, "keys", "generate").exit_code == 2
    assert _airlock(tmp_path, "keys", "rotate", "--now").exit_code == 0
    listed = json.loads(_airlock(tmp_path, "keys", "list", "--json").stdout)
    assert [k["status"] for k in listed] == ["retired", "active"]
    old = listed[0]["kid"]
    assert _airlock(tmp_path, "keys", "revoke", old).exit_code == 0
    out = tmp_path / "trusted.json"
    assert _airlock(tmp_path, "keys", "export-public", "--out", str(out)).exit_code == 0
    exported = json.loads(out.read_text())
    assert {k["kid"]: k["status"] for k in exported["keys"]}[old] == "revoked"
    assert "PRIVATE" not in out.read_text()

    added = _airlock(
        tmp_path,
        "users",
        "add",
        "dora",
        "--role",
        "approver",
        "--password-stdin",
        stdin="a long enough password\n",
    )
    assert added.exit_code == 0, added.output
    assert "a long enough password" not in added.output
    short = _airlock(tmp_path, "users", "add", "eve", "--password-stdin", stdin="short\n")
    assert short.exit_code == 1
    no_tty = _airlock(tmp_path, "users", "add", "fred")
    assert no_tty.exit_code == 2  # refuses instead of hanging on a prompt
    token = _airlock(tmp_path, "tokens", "create", "scanner", "--role", "agent")
    assert token.exit_code == 0 and token.stdout.startswith("alt_")
    users = _airlock(tmp_path, "users", "list").stdout
    assert "dora" in users and "approver" in users
    assert _airlock(tmp_path, "users", "unlock", "dora").exit_code == 0
    reset = _airlock(
        tmp_path, "users", "set-password", "dora", "--password-stdin", stdin="another long one!\n"
    )
    assert reset.exit_code == 0, reset.output
    assert "another long one!" not in reset.output
    assert _airlock(tmp_path, "users", "unlock", "ghost").exit_code == 1
    assert _airlock(tmp_path, "users", "set-password", "dora").exit_code == 2  # no tty: no wait
    assert _airlock(tmp_path, "users", "disable", "dora").exit_code == 0
    assert "disabled" in _airlock(tmp_path, "users", "list").stdout


def test_cli_key_changes_are_refused_without_the_checkpoint_database_to_record_them(
    tmp_path: Path,
) -> None:
    assert _airlock(tmp_path, "keys", "generate").exit_code == 0
    manifest = (tmp_path / "keys" / "keyset.json").read_bytes()
    [kid] = [k["kid"] for k in json.loads(_airlock(tmp_path, "keys", "list", "--json").stdout)]
    env = {
        "AIRLOCK_ENV": "prod",
        "AIRLOCK_CHECKPOINT_KEYS_DIR": str(tmp_path / "keys"),
        "AIRLOCK_CHECKPOINT_AUDIENCE": "airlock-executor/prod-test",
    }
    for args in (["keys", "stage"], ["keys", "rotate", "--now"], ["keys", "revoke", kid]):
        refused = CliRunner().invoke(app, args, env=env)
        assert refused.exit_code == 2, refused.output
        assert "recorded in the checkpoint's audit chain" in refused.stderr
        assert "AIRLOCK_CHECKPOINT_DATABASE_URL" in refused.stderr
    assert (tmp_path / "keys" / "keyset.json").read_bytes() == manifest
    assert len(list((tmp_path / "keys").glob("*.pem"))) == 1


def _key_events(tmp_path: Path) -> list[dict[str, Any]]:
    db = Database(f"sqlite:///{tmp_path / 'checkpoint.db'}")
    try:
        with db.engine.connect() as conn:
            events = [
                json.loads(e)
                for e in conn.execute(sa.text("SELECT event FROM audit_log ORDER BY seq")).scalars()
            ]
    finally:
        db.dispose()
    return [e for e in events if e["type"].startswith("checkpoint.key.")]


def test_cli_keys_rotate_and_revoke_land_in_the_audit_chain_and_list_shows_not_after(
    tmp_path: Path,
) -> None:
    assert _airlock(tmp_path, "keys", "generate").exit_code == 0
    before = int(time.time())
    assert _airlock(tmp_path, "keys", "stage").exit_code == 0
    assert _airlock(tmp_path, "keys", "rotate").exit_code == 0
    old, new = json.loads(_airlock(tmp_path, "keys", "list", "--json").stdout)
    assert old["status"] == "retired" and new["status"] == "active"
    assert before + 900 + 30 <= old["not_after"] <= time.time() + 900 + 30
    assert new["not_after"] is None
    listed = _airlock(tmp_path, "keys", "list")
    # ISO 8601 UTC for people; --json keeps the Unix seconds for programs.
    not_after = datetime.fromtimestamp(old["not_after"], UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f"not_after {not_after}" in listed.stdout and listed.stderr == ""
    created = datetime.fromtimestamp(new["created_at"], UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f"created {created}" in listed.stdout
    assert str(old["not_after"]) not in listed.stdout
    assert _airlock(tmp_path, "keys", "revoke", old["kid"]).exit_code == 0
    staged, rotated, revoked = _key_events(tmp_path)
    assert staged["type"] == "checkpoint.key.staged" and staged["next"] == new["kid"]
    assert rotated["type"] == "checkpoint.key.rotated" and rotated["active"] == new["kid"]
    assert rotated["staged"] is True and rotated["keyset_before"] == staged["keyset_after"]
    assert rotated["retired"] == [old["kid"]] and rotated["not_after"] == old["not_after"]
    assert revoked["type"] == "checkpoint.key.revoked" and revoked["kid"] == old["kid"]
    assert revoked["keyset_before"] == rotated["keyset_after"]
    url = f"sqlite:///{tmp_path / 'checkpoint.db'}"
    verified = _airlock(tmp_path, "audit", "verify", "--db", url)
    assert verified.exit_code == 0, verified.output


def test_cli_keys_stage_is_listed_exported_and_rotate_makes_it_active(tmp_path: Path) -> None:
    assert _airlock(tmp_path, "keys", "generate").exit_code == 0
    [first] = json.loads(_airlock(tmp_path, "keys", "list", "--json").stdout)
    staged = _airlock(tmp_path, "keys", "stage")
    assert staged.exit_code == 0, staged.output
    assert "it signs nothing yet" in staged.stdout and "export-public" in staged.stdout
    active, nxt = json.loads(_airlock(tmp_path, "keys", "list", "--json").stdout)
    assert (active["kid"], active["status"]) == (first["kid"], "active")
    assert nxt["status"] == "next" and nxt["not_after"] is None
    listed = _airlock(tmp_path, "keys", "list")
    assert re.search(
        rf"^{nxt['kid']}  next .*staged: keys rotate makes it active", listed.stdout, re.M
    )
    assert listed.stderr == ""
    out = tmp_path / "trusted.json"
    assert _airlock(tmp_path, "keys", "export-public", "--out", str(out)).exit_code == 0
    exported = {k["kid"]: k["status"] for k in json.loads(out.read_text())["keys"]}
    assert exported == {first["kid"]: "active", nxt["kid"]: "next"}
    again = _airlock(tmp_path, "keys", "stage")
    assert again.exit_code == 2 and "is staged already" in again.stderr
    now = _airlock(tmp_path, "keys", "rotate", "--now")
    assert now.exit_code == 2 and f"key {nxt['kid']} is staged" in now.stderr
    rotated = _airlock(tmp_path, "keys", "rotate")
    assert rotated.exit_code == 0, rotated.output
    assert f"rotated: {nxt['kid']}, staged before, is active" in rotated.stdout
    assert rotated.stderr == ""
    statuses = [
        k["status"] for k in json.loads(_airlock(tmp_path, "keys", "list", "--json").stdout)
    ]
    assert statuses == ["retired", "active"]


def test_cli_rotate_without_a_staged_key_is_refused_and_now_warns_of_what_it_costs(
    tmp_path: Path,
) -> None:
    assert _airlock(tmp_path, "keys", "generate").exit_code == 0
    manifest = (tmp_path / "keys" / "keyset.json").read_bytes()
    refused = _airlock(tmp_path, "keys", "rotate")
    assert refused.exit_code == 2, refused.output
    assert "no key is staged" in refused.stderr and "E_UNKNOWN_KEY" in refused.stderr
    assert "airlock keys stage" in refused.stderr and "--now" in refused.stderr
    assert (tmp_path / "keys" / "keyset.json").read_bytes() == manifest
    assert _key_events(tmp_path) == []
    forced = _airlock(tmp_path, "keys", "rotate", "--now")
    assert forced.exit_code == 0, forced.output
    assert "warning:" in forced.stderr and "E_UNKNOWN_KEY" in forced.stderr
    assert "export-public" in forced.stderr
    [rotated] = _key_events(tmp_path)
    assert rotated["staged"] is False


def test_cli_a_staged_key_can_be_revoked_and_is_then_never_made_active(tmp_path: Path) -> None:
    assert _airlock(tmp_path, "keys", "generate").exit_code == 0
    assert _airlock(tmp_path, "keys", "stage").exit_code == 0
    first, staged = json.loads(_airlock(tmp_path, "keys", "list", "--json").stdout)
    assert _airlock(tmp_path, "keys", "revoke", staged["kid"]).exit_code == 0
    assert [p.name for p in (tmp_path / "keys").glob("*.pem")] == [
        first["kid"].removeprefix("ed25519:") + ".pem"
    ]
    refused = _airlock(tmp_path, "keys", "rotate")
    assert refused.exit_code == 2 and "no key is staged" in refused.stderr
    listed = json.loads(_airlock(tmp_path, "keys", "list", "--json").stdout)
    assert [k["status"] for k in listed] == ["active", "revoked"]
    [_, revoked] = _key_events(tmp_path)
    assert revoked["kid"] == staged["kid"] and revoked["was"] == "next"


def test_cli_users_list_shows_a_locked_account_and_unlock_ends_the_lockout(
    tmp_path: Path,
) -> None:
    # A sign-in never tells anyone that an account is locked (it is answered like a wrong
    # password), so the operator's commands must: `users list`, then `users unlock`.
    added = _airlock(tmp_path, "users", "add", "dora", "--password-stdin", stdin="long enough pw\n")
    assert added.exit_code == 0, added.output
    db = Database(f"sqlite:///{tmp_path / 'checkpoint.db'}")
    try:
        accounts = Accounts(
            db,
            lambda: int(time.time()),
            session_ttl=3600,
            lockout_threshold=1,
            lockout_seconds=3600,
            hasher=CountingHasher(),  # for its cheap dummy hash
        )
        with pytest.raises(Refusal) as refused:
            accounts.login("dora", "not her password")
        assert refused.value.code == ErrorCode.E_UNAUTHENTICATED
        listed = _airlock(tmp_path, "users", "list").stdout
        assert re.search(
            r"^dora +approver +locked until \d\d:\d\d:\d\d UTC \(users unlock\)$",
            listed,
            re.MULTILINE,
        ), listed
        assert _airlock(tmp_path, "users", "unlock", "dora").stdout == "unlocked dora\n"
        assert "locked" not in _airlock(tmp_path, "users", "list").stdout
        assert accounts.login("dora", "long enough pw")[2] == "approver"
        with db.engine.connect() as conn:
            kinds = [
                json.loads(e)["type"]
                for e in conn.execute(sa.text("SELECT event FROM audit_log ORDER BY seq")).scalars()
            ]
    finally:
        db.dispose()
    assert kinds[-4:] == [
        "checkpoint.user.added",
        "checkpoint.user.locked",
        "checkpoint.user.unlocked",
        "checkpoint.session.created",
    ]


def test_cli_tokens_list_and_revoke(tmp_path: Path) -> None:
    token = _airlock(tmp_path, "tokens", "create", "scanner", "--role", "agent").stdout.strip()
    assert _airlock(tmp_path, "tokens", "create", "exec", "--role", "executor").exit_code == 0
    listed = _airlock(tmp_path, "tokens", "list")
    assert listed.exit_code == 0
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    assert rows["scanner"][1] == "agent" and rows["scanner"][3] == "-"
    assert token not in listed.stdout and "alt_" not in listed.stdout

    revoked = _airlock(tmp_path, "tokens", "revoke", "scanner")
    assert revoked.exit_code == 0 and "revoked scanner" in revoked.stdout
    shown = json.loads(_airlock(tmp_path, "tokens", "list", "--json").stdout)
    by_name = {t["name"]: t for t in shown}
    assert by_name["scanner"]["revoked_at"] is not None and by_name["exec"]["revoked_at"] is None
    assert token not in json.dumps(shown)

    again = _airlock(tmp_path, "tokens", "revoke", "scanner")
    assert again.exit_code == 1 and "already revoked" in again.stderr
    unknown = _airlock(tmp_path, "tokens", "revoke", "ghost")
    assert unknown.exit_code == 1 and "no service token named ghost" in unknown.stderr


def test_cli_users_sign_ins_shows_a_guessing_campaign_by_address(tmp_path: Path) -> None:
    """Sign-ins for names that do not exist were in no record at all: an admin could not
    see password spraying. `users sign-ins` reads the audit chain: wrong passwords by
    address and user, unknown names and throttled attempts by address (tallied)."""
    added = _airlock(tmp_path, "users", "add", "dora", "--password-stdin", stdin="long enough pw\n")
    assert added.exit_code == 0, added.output
    db = Database(f"sqlite:///{tmp_path / 'checkpoint.db'}")
    clock = [int(time.time())]
    try:
        accounts = Accounts(
            db,
            lambda: clock[0],
            session_ttl=3600,
            lockout_threshold=100,
            lockout_seconds=3600,
            hasher=CountingHasher(),
        )
        for name, client in (
            [("dora", "192.0.2.7")] * 2
            + [("nobody", "192.0.2.7")] * 8
            + [("carla", "198.51.100.3")]
        ):
            with pytest.raises(Refusal):
                accounts.login(name, "a wrong guess", client=client)
        clock[0] += 60
        accounts.flush_refused_sign_ins()
    finally:
        db.dispose()
    shown = _airlock(tmp_path, "users", "sign-ins")
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    # nobody from 192.0.2.7: 3 free guesses, then 5 refused by the throttle
    assert lines[0] == "last 24 h: 2 wrong passwords, 4 unknown names (2 distinct), 5 throttled"
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:]}
    assert rows["192.0.2.7"] == ["2", "8", "dora", "2"]
    assert rows["198.51.100.3"] == ["0", "1"]
    as_json = json.loads(_airlock(tmp_path, "users", "sign-ins", "--json").stdout)
    assert as_json["clients"]["192.0.2.7"]["users"] == {"dora": 2}
    assert "nobody" not in shown.stdout + json.dumps(as_json)  # only its keyed hash is kept
