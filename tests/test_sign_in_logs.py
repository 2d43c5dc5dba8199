"""No service ever logs or records a password typed at a sign-in, in either field.

An all-lowercase passphrase fits the user-name pattern, and the checkpoint logged a
failed sign-in's name as typed: a password typed into the username field was written
to the log in clear. A real stack (``devstack/stack.py``: devcloud, the checkpoint,
the executor, the web app, each its own process with its own log) takes sign-ins with
passwords in both fields, through the web app's form, the checkpoint's API and
``airlock login``; then every file the stack wrote (logs, databases with their WAL) is
searched for each of them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx

from devstack.stack import running_stack

_REPO = Path(__file__).resolve().parents[1]
_CSRF = re.compile(r'name="csrf_token" value="([0-9a-f]{64})"')


def _secret(n: int) -> str:
    # Lowercase letters only: they fit the user-name pattern, as such passphrases do.
    return f"hunter{'abcdefghij'[n]}passphrasezq{'klmnopqrst'[n]}"


def test_no_log_or_record_of_any_service_holds_a_password_typed_at_a_sign_in(
    tmp_path: Path,
) -> None:
    secrets = [_secret(n) for n in range(8)]
    workdir = tmp_path / "stack"
    with running_stack(workdir, start_executor=True) as stack:
        with httpx.Client(base_url=stack.webapp_url, trust_env=False, timeout=10) as web:
            for username, password in ((secrets[0], secrets[1]), ("alice", secrets[2])):
                token = _CSRF.search(web.get("/login").text)
                assert token is not None
                form = {"username": username, "password": password, "csrf_token": token[1]}
                assert web.post("/login", data=form).status_code == 401
        with httpx.Client(base_url=stack.checkpoint_url, trust_env=False, timeout=10) as api:
            for username, password in ((secrets[3], secrets[4]), ("bob", secrets[5])):
                body = {"username": username, "password": password}
                assert api.post("/v1/sessions", json=body).status_code == 401
        with (workdir / "cli.log").open("ab") as log:
            login = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "airlock.cli",
                    "login",
                    "--url",
                    stack.checkpoint_url,
                    "-u",
                    secrets[6],
                    "--password-stdin",
                ],
                input=(secrets[7] + "\n").encode(),
                stdout=log,
                stderr=log,
                env={
                    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                    "PYTHONPATH": str(_REPO),
                    "AIRLOCK_HOME": str(workdir / "cli-home"),
                },
                cwd=workdir,
                check=False,
                timeout=60,
            )
        assert login.returncode == 1
    # Stopped: each service flushed what it holds (the tally of refused sign-ins too).
    checkpoint_log = (workdir / "checkpoint.log").read_text(errors="replace")
    assert "failed sign-in from 127.0.0.1: no such user (a name of 20 characters)" in (
        checkpoint_log
    )
    assert "wrong password for user hmac:" in checkpoint_log
    assert re.search(r"refused sign-ins from \d+ to \d+: 3 unknown names", checkpoint_log)
    assert "E_UNAUTHENTICATED" in (workdir / "cli.log").read_text()
    files = [p for p in workdir.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"checkpoint.log", "webapp.log", "executor.log", "cli.log"}
    for path in files:
        data = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, (path, secret)
