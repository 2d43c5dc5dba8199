"""`airlock up` end to end: a fresh state, the agent's proposals, an approval through the
CLI, the write at devcloud, doctor all green, a clean SIGINT, and a second run reusing
the state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest

from devstack.ports import free_port
from tests.support.polling import wait_for

from .up_harness import Up, alive, cli, demo_people, executed, log_in, pending, running_up

pytestmark = pytest.mark.slow

DEADLINE = 120.0
#: What the agent proposes first on up's seeded devcloud fleet.
_ECS_STOP = {"operation": "stop", "resource_type": "ecs.instance"}


def _wait(what: str, check: Callable[[], Any], timeout: float = DEADLINE) -> Any:
    return wait_for(what, check, timeout, every=0.25)


def _running_up(cwd: Path, ports: dict[str, int]) -> AbstractContextManager[Up]:
    return running_up(cwd, ports, "--instances", "24", "--devcloud-admin", deadline=DEADLINE)


def test_up_runs_the_whole_system_and_stops_cleanly(tmp_path: Path) -> None:
    ports = {name: free_port() for name in ("webapp", "checkpoint", "devcloud")}
    checkpoint = f"http://127.0.0.1:{ports['checkpoint']}"
    state = tmp_path / ".airlock"
    cli_home = tmp_path / "cli"
    cli_home.mkdir(mode=0o700)

    with _running_up(tmp_path, ports) as up:
        # first run: passwords printed once, saved 0600
        credentials = state / "demo-credentials"
        assert credentials.stat().st_mode & 0o077 == 0
        people = demo_people(state)
        assert set(people) == {"alice", "bob", "admin"}
        assert people["alice"] in up.text
        assert httpx.get(f"http://127.0.0.1:{ports['webapp']}/healthz").status_code == 200

        log_in(state, checkpoint, cli_home)

        def pending_stop() -> dict[str, Any] | None:
            return pending(cli_home, **_ECS_STOP)

        proposal = _wait("the agent's first proposals", pending_stop)
        approve = cli(["approvals", "approve", proposal["id"], "--yes", "--json"], cli_home)
        assert approve.returncode == 0, approve.stdout + approve.stderr

        admin = httpx.Client(
            base_url=f"http://127.0.0.1:{ports['devcloud']}",
            headers={"Authorization": f"Bearer {(state / 'devcloud-admin-token').read_text()}"},
        )
        resource_id = proposal["resource_id"]

        def written() -> list[dict[str, Any]]:
            response = admin.get("/_admin/writes", params={"resource_id": resource_id})
            response.raise_for_status()
            body = response.json()
            writes: list[dict[str, Any]] = body["writes"] if isinstance(body, dict) else body
            return writes

        writes = _wait("the stop at devcloud", written)
        assert len(writes) == 1

        _wait("the outcome at the checkpoint", lambda: executed(cli_home, proposal["id"]))

        from airlock.cli._stack import Stack

        stack = Stack(state, ports, 24, 5)
        _rotate_while_running(up, stack, cli_home, pending_stop, admin)

        # doctor, in the environment `up` gives its services, is all green
        tokens = stack.tokens()
        env = {
            **stack.checkpoint_env(),
            **stack.executor_env(tokens["executor"]),
            **stack.agent_env(tokens["agent"]),
            **stack.webapp_env(),
        }
        doctor = subprocess.run(
            [sys.executable, "-m", "airlock.cli", "doctor", "--url", checkpoint],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
        assert "0 failed, 0 warnings" in doctor.stdout, doctor.stdout
        assert sorted(up.services()) == ["agent", "checkpoint", "devcloud", "executor", "webapp"]
        children = up.pids()
        assert len(written()) == 1  # still one write after the outcome landed
        admin.close()

    assert up.proc.returncode == 0, up.text
    assert "stopped" in up.text
    assert [pid for pid in children if alive(pid)] == []

    # second run: the state is reused, no new passwords
    keys_before = (state / "trusted-keys.json").read_text()
    with _running_up(tmp_path, ports) as again:
        assert people["alice"] not in again.text
        assert "Demo people and passwords:" in again.text
        assert (state / "trusted-keys.json").read_text() == keys_before
        children = again.pids()
    assert [pid for pid in children if alive(pid)] == []


def _rotate_while_running(
    up: Up,
    stack: Any,
    cli_home: Path,
    pending_stop: Callable[[], dict[str, Any] | None],
    admin: httpx.Client,
) -> None:
    """Two-phase rotation on the running stack: `keys stage` reaches the executor through
    up (no restart), `keys rotate` makes the staged key sign, and the next approval,
    signed with it, executes; then the old key, revoked, reaches the executor too."""
    trusted = stack.home / "trusted-keys.json"

    def keys(*args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
        env.update({k: v for k, v in stack.checkpoint_env().items() if k.startswith("AIRLOCK_")})
        return subprocess.run(
            [sys.executable, "-m", "airlock.cli", "keys", *args],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )

    def statuses() -> dict[str, str]:
        return {k["kid"]: k["status"] for k in json.loads(trusted.read_text())["keys"]}

    [old] = json.loads(keys("list", "--json").stdout)
    staged = keys("stage")
    assert staged.returncode == 0, staged.stdout + staged.stderr
    new = next(k for k in json.loads(keys("list", "--json").stdout) if k["status"] == "next")
    _wait("up to give the executor the staged key", lambda: new["kid"] in statuses())
    assert statuses()[new["kid"]] == "next"
    _wait("up to say so", lambda: "keys: the checkpoint's key set changed" in up.text)
    rotated = keys("rotate")
    assert rotated.returncode == 0, rotated.stdout + rotated.stderr
    proposal = _wait("another pending stop", pending_stop)
    approve = cli(["approvals", "approve", proposal["id"], "--yes", "--json"], cli_home)
    assert approve.returncode == 0, approve.stdout + approve.stderr
    assert json.loads(approve.stdout)["approval"]["keyid"] == new["kid"]

    _wait(
        "the approval signed with the staged key to execute",
        lambda: executed(cli_home, proposal["id"]),
    )
    response = admin.get("/_admin/writes", params={"resource_id": proposal["resource_id"]})
    body = response.json()
    assert len(body["writes"] if isinstance(body, dict) else body) == 1
    _wait("up to export the rotation", lambda: statuses()[old["kid"]] == "retired")
    revoked = keys("revoke", old["kid"])
    assert revoked.returncode == 0, revoked.stdout + revoked.stderr
    _wait("up to export the revocation", lambda: statuses()[old["kid"]] == "revoked")
    assert statuses()[new["kid"]] == "active"


def test_up_gives_the_checkpoint_the_executor_receipt_key_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoint refuses to start without it; `up` derives it from the executor's
    receipt key on every start, so a state from before (no public file) still starts."""
    from airlock.cli._stack import Stack
    from airlock.protocol import KeySet
    from airlock.settings import CheckpointSettings
    from services.checkpoint.app import build
    from services.executor import ReceiptSigner

    stack = Stack(tmp_path / ".airlock", {"webapp": 1, "checkpoint": 2, "devcloud": 3}, 4, 5)
    stack.prepare(lambda _line: None)
    env = stack.checkpoint_env()
    public = Path(env["AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH"])
    signer = ReceiptSigner.from_file(
        Path(stack.executor_env()["AIRLOCK_EXECUTOR_RECEIPT_KEY_PATH"])
    )
    assert list(KeySet.from_json_bytes(public.read_bytes())) == [signer.keyid]
    assert "AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH" not in stack.executor_env()

    public.unlink()
    stack.prepare(lambda _line: None)
    assert list(KeySet.from_json_bytes(public.read_bytes())) == [signer.keyid]
    for key in [k for k in os.environ if k.startswith("AIRLOCK_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        if key.startswith("AIRLOCK_"):
            monkeypatch.setenv(key, value)
    app = build(CheckpointSettings(), sweep_interval=None)
    assert list(app.state.checkpoint.receipt_keys) == [signer.keyid]
    app.state.checkpoint.db.dispose()


@pytest.fixture
def state_seen(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Path]:
    """Run `up` only as far as choosing its state directory, recorded here."""
    from airlock.cli import _up
    from airlock.cli._stack import Stack, UpError

    seen: list[Path] = []

    def prepare(self: Stack, echo: Callable[[str], None]) -> None:
        seen.append(self.home)
        raise UpError("stopped by the test before anything was created")

    monkeypatch.setattr(Stack, "prepare", prepare)
    monkeypatch.setattr(_up.signal, "signal", lambda *_: None)  # keep pytest's handlers
    monkeypatch.chdir(tmp_path)
    return seen


def _up_args(*extra: str) -> list[str]:
    ports = [str(free_port()) for _ in range(3)]
    return [
        "up",
        *("--webapp-port", ports[0], "--checkpoint-port", ports[1], "--devcloud-port", ports[2]),
        *extra,
    ]


def test_airlock_home_is_the_session_directory_not_up_s_state(
    state_seen: list[Path], tmp_path: Path
) -> None:
    """AIRLOCK_HOME meant both the login session's directory and up's state: set for the
    one, it moved the other. It is the session directory; up's is AIRLOCK_UP_HOME."""
    from .conftest import airlock

    sessions = tmp_path / "sessions"
    sessions.mkdir(mode=0o700)
    result = airlock(*_up_args(), env={"AIRLOCK_HOME": str(sessions)})
    assert result.exit_code == 1, result.output
    assert state_seen == [(tmp_path / ".airlock").resolve()]
    assert f"AIRLOCK_HOME ({sessions}) is the session directory" in result.stderr
    assert list(sessions.iterdir()) == []

    up_home = tmp_path / "demo-state"
    result = airlock(
        *_up_args(), env={"AIRLOCK_HOME": str(sessions), "AIRLOCK_UP_HOME": str(up_home)}
    )
    assert state_seen[-1] == up_home.resolve()
    assert "AIRLOCK_HOME" not in result.stderr

    flag = tmp_path / "flag-state"
    airlock(*_up_args("--home", str(flag)), env={"AIRLOCK_UP_HOME": str(up_home)})
    assert state_seen[-1] == flag.resolve()


def test_a_state_up_made_in_airlock_home_is_still_used_with_a_warning(
    state_seen: list[Path], tmp_path: Path
) -> None:
    """An existing setup that kept up's state in AIRLOCK_HOME must not start over silently
    (new keys, new passwords) in .airlock."""
    from .conftest import airlock

    old = tmp_path / "old-state"
    (old / "keys").mkdir(parents=True)
    result = airlock(*_up_args(), env={"AIRLOCK_HOME": str(old)})
    assert state_seen == [old.resolve()]
    assert "warning: using the state in AIRLOCK_HOME" in result.stderr
    assert "set AIRLOCK_UP_HOME" in result.stderr


def test_help_says_which_variable_is_which() -> None:
    from .conftest import airlock

    up = airlock("up", "--help").output
    assert "AIRLOCK_UP_HOME" in up and "env var: AIRLOCK_HOME" not in up
    login = " ".join(airlock("login", "--help").output.split())
    assert "$AIRLOCK_HOME/session.json" in login and "AIRLOCK_UP_HOME" in login


def test_up_tells_where_admin_commands_find_its_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dev defaults name .airlock/ relative to where a command runs, so `up` names
    that directory, or says the paths must be set when the state is not called .airlock."""
    from airlock.cli._up import admin_hint

    monkeypatch.chdir(tmp_path)
    assert admin_hint(tmp_path / ".airlock").endswith("AIRLOCK_ENV=dev in\nthis directory.")
    assert admin_hint(tmp_path / "x" / ".airlock").endswith(f"in\n{tmp_path / 'x'}.")
    elsewhere = admin_hint(tmp_path / "demo-state")
    assert "AIRLOCK_CHECKPOINT_* / AIRLOCK_EXECUTOR_* paths" in elsewhere
    assert str(tmp_path / "demo-state") in elsewhere


def test_the_agent_grace_reaches_the_agent_alone_and_its_settings_take_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``up --agent-grace 120`` is how the demo shows a delete in minutes: the agent's
    setting, in the agent's environment only; without it, the agent's own default."""
    from airlock.cli._stack import Stack
    from airlock.settings import AgentSettings

    from .conftest import airlock

    ports = {"webapp": 1, "checkpoint": 2, "devcloud": 3}
    monkeypatch.setenv("AIRLOCK_AGENT_GRACE_SECONDS", "5")  # the shell's never reaches it
    short = Stack(tmp_path / "a", ports, 4, 5, grace=120)
    assert short.agent_env("t")["AIRLOCK_AGENT_GRACE_SECONDS"] == "120"
    assert all("GRACE" not in k for k in (*short.executor_env(), *short.checkpoint_env()))
    default = Stack(tmp_path / "b", ports, 4, 5)
    assert "AIRLOCK_AGENT_GRACE_SECONDS" not in default.agent_env("t")
    for key in [k for k in os.environ if k.startswith("AIRLOCK_")]:
        monkeypatch.delenv(key)
    for key, value in short.agent_env("t").items():
        if key.startswith("AIRLOCK_"):
            monkeypatch.setenv(key, value)
    assert AgentSettings().grace_seconds == 120
    result = airlock("up", "--agent-grace", "-1")
    assert result.exit_code == 2 and "--agent-grace" in result.output


def test_up_says_how_to_put_airlock_on_path_when_a_new_shell_lacks_it(tmp_path: Path) -> None:
    """`make up` installs airlock into .venv; the README's `airlock login …` in a new
    terminal answered "command not found". up's next steps say what to type first."""
    from airlock.cli._up import cli_hint

    venv = tmp_path / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text("# activate\n")
    airlock = venv / "bin" / "airlock"
    airlock.write_text("#!/bin/sh\n")
    airlock.chmod(0o755)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert cli_hint({"PATH": str(elsewhere)}, venv) == f". {venv}/bin/activate, then "
    assert cli_hint({}, venv) == f". {venv}/bin/activate, then "
    assert cli_hint({"PATH": f"{elsewhere}:{venv / 'bin'}"}, venv) == ""  # activated
    (venv / "bin" / "activate").unlink()  # not a venv: name the directory instead
    assert cli_hint({"PATH": str(elsewhere)}, venv) == f"put {venv}/bin on PATH, then "


def test_up_gives_the_checkpoint_and_the_web_app_the_host_names_its_urls_use(
    tmp_path: Path,
) -> None:
    """Any other Host is refused (DNS rebinding); the executor, the agent and the web app
    call the checkpoint by the URL up gives them, people open the web app's."""
    import httpx

    from airlock.cli._stack import Stack

    stack = Stack(tmp_path / ".airlock", {"webapp": 1, "checkpoint": 2, "devcloud": 3}, 4, 5)
    answered = set(stack.checkpoint_env()["AIRLOCK_CHECKPOINT_ALLOWED_HOSTS"].split(","))
    for env, key in (
        (stack.executor_env(), "AIRLOCK_EXECUTOR_CHECKPOINT_URL"),
        (stack.agent_env("t"), "AIRLOCK_AGENT_CHECKPOINT_URL"),
        (stack.webapp_env(), "AIRLOCK_WEBAPP_CHECKPOINT_URL"),
    ):
        assert httpx.URL(env[key]).host in answered
    assert "evil.example" not in answered
    web = set(stack.webapp_env()["AIRLOCK_WEBAPP_ALLOWED_HOSTS"].split(","))
    assert {"127.0.0.1", "localhost"} <= web


def test_up_has_its_checkpoint_trust_its_web_apps_forwarded_for(tmp_path: Path) -> None:
    """Every sign-in through up's web app comes from 127.0.0.1: untrusted, its
    X-Forwarded-For is ignored, and one guesser would slow everyone's sign-in."""
    from airlock.cli._stack import Stack

    stack = Stack(tmp_path, {"webapp": 1, "checkpoint": 2, "devcloud": 3}, 4, 5)
    assert stack.checkpoint_env()["AIRLOCK_CHECKPOINT_TRUSTED_PROXIES"] == "127.0.0.1"
