"""Integration: the executor with the real Alibaba adapter against devcloud.

devcloud's write log (every effect it applied, recorded with the effect) is the judge of
exactly-once here — not a test double of ours.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.executor import State

from .processes import crash_at, one_write_the_rest_replays, run_race, worker
from .support import LEASE, T0, FakeClock, make_executor, make_test_bundle


@pytest.fixture(scope="module")
def devcloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from devstack.devcloud import running_devcloud

    with running_devcloud(tmp_path_factory.mktemp("devcloud"), transition_seconds=0.2) as dc:
        yield dc


def _writes(dc: Any, resource_id: str) -> int:
    return len(dc.admin.writes(resource_id=resource_id))


def test_eight_processes_race_one_bundle_through_the_real_adapter(
    devcloud: Any, migrated_url: str, db_url: str
) -> None:
    b = make_test_bundle(1, tag=f"dcrace{'p' if 'postgres' in db_url else 's'}")
    devcloud.admin.create_instance(b.resource_id, status="Running")
    results = run_race(migrated_url, f"devcloud:{devcloud.endpoint}", [[b.raw]] * 8)
    assert one_write_the_rest_replays(results), results
    assert _writes(devcloud, b.resource_id) == 1


@pytest.mark.parametrize(
    "case",
    [
        ("after_cloud_call", "stop", "succeeded"),
        ("after_executing_commit", "delete", "succeeded"),
    ],
)
def test_sigkill_then_recovery_against_devcloud_never_writes_twice(
    devcloud: Any, migrated_url: str, tmp_path: Path, case: tuple[str, str, str]
) -> None:
    point, operation, expected = case
    import sqlalchemy as sa

    from airlock.store import make_engine, verify_chain
    from services.executor.models import ledger

    status = "Stopped" if operation == "delete" else "Running"
    tag = f"dc{point[6:9]}{operation[:2]}{abs(hash(migrated_url)) % 10**6}"
    b = make_test_bundle(2, tag=tag, operation=operation, status=status)
    # Created (and so last started) well before the bundle's observation of its state.
    devcloud.admin.create_instance(b.resource_id, status=status, created_at=T0 - 30 * 86400)
    path = tmp_path / "bundle.json"
    path.write_bytes(b.raw)
    cloud = f"devcloud:{devcloud.endpoint}"
    crash_at(migrated_url, cloud, [(point, path)], timeout=120)
    rescuer = worker(migrated_url, cloud, T0 + 10 + LEASE, "rescuer", "--recover", str(path))
    out, err = rescuer.communicate(timeout=120)
    assert rescuer.returncode == 0, err.decode()
    assert "E_REPLAY" in out.decode()
    engine = make_engine(migrated_url)
    try:
        with engine.connect() as conn:
            state = conn.execute(
                sa.select(ledger.c.state).where(ledger.c.approval_id == b.approval_id)
            ).scalar_one()
        assert state == expected
        assert _writes(devcloud, b.resource_id) == (0 if expected == "in_doubt" else 1)
        assert verify_chain(engine).ok
    finally:
        engine.dispose()


def test_lost_response_is_probed_and_verified_against_devcloud(
    devcloud: Any, migrated_url: str, db_url: str
) -> None:
    b = make_test_bundle(3, tag=f"dcdrop{'p' if 'postgres' in db_url else 's'}")
    devcloud.admin.create_instance(b.resource_id, status="Running")
    # The answer is held 10 s, the executor gives up after 4: the probe that follows sees
    # the stop only if devcloud applied it first, which may take over 500 ms under load.
    devcloud.admin.set_faults(drop_next_writes=1, drop_delay_ms=10_000)
    executor = make_executor(
        migrated_url, devcloud.reader(), FakeClock(), writer=devcloud.writer(read_timeout_ms=4_000)
    )
    try:
        outcome = executor.execute(b.raw)
    finally:
        devcloud.admin.reset_faults()
        executor.engine.dispose()
    assert outcome.state is State.SUCCEEDED and outcome.verified, outcome
    assert _writes(devcloud, b.resource_id) == 1


def test_the_executors_stop_is_never_forced(devcloud: Any, migrated_url: str, db_url: str) -> None:
    """A forced stop can lose unflushed data: the write log (every parameter as sent) shows
    the executor's stop asks for a normal stop in the signed mode, in the signed region."""
    b = make_test_bundle(5, tag=f"dcforce{'p' if 'postgres' in db_url else 's'}")
    devcloud.admin.create_instance(b.resource_id, status="Running")
    executor = make_executor(migrated_url, devcloud.reader(), FakeClock(), writer=devcloud.writer())
    try:
        outcome = executor.execute(b.raw)
    finally:
        executor.engine.dispose()
    assert outcome.state is State.SUCCEEDED, outcome
    [entry] = devcloud.admin.writes(resource_id=b.resource_id)
    assert entry["action"] == "StopInstance" and entry["region"] == "ap-southeast-1"
    assert entry["params"]["ForceStop"] == "False"
    assert entry["params"].get("Hibernate", "False") == "False"
    assert entry["params"]["StoppedMode"] == "StopCharging"


def test_protect_tag_added_at_devcloud_is_refused_with_zero_writes(
    devcloud: Any, migrated_url: str, db_url: str
) -> None:
    b = make_test_bundle(4, tag=f"dcprot{'p' if 'postgres' in db_url else 's'}")
    devcloud.admin.create_instance(b.resource_id, status="Running")
    devcloud.admin.set_instance(b.resource_id, add_tags=[("airlock:protect", "yes")])
    executor = make_executor(migrated_url, devcloud.reader(), FakeClock(), writer=devcloud.writer())
    try:
        outcome = executor.execute(b.raw)
    finally:
        executor.engine.dispose()
    assert outcome.state is State.REFUSED and outcome.refusal_code == "E_PRECONDITION"
    assert _writes(devcloud, b.resource_id) == 0


def test_cli_keygen_run_bundle_once_and_receipts_verify(
    devcloud: Any, migrated_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from typer.testing import CliRunner

    from airlock.cli import app
    from airlock.protocol import canonical_bytes

    from .support import ACCOUNT, AUDIENCE, keyset

    monkeypatch.chdir(tmp_path)  # no stray .env
    trusted = tmp_path / "trusted.json"
    trusted.write_bytes(canonical_bytes(keyset().to_value()))
    (tmp_path / "inbox").mkdir()
    (tmp_path / "receipts").mkdir()
    env = {
        "AIRLOCK_ENV": "dev",
        "AIRLOCK_EXECUTOR_DATABASE_URL": migrated_url,
        "AIRLOCK_EXECUTOR_TRUSTED_KEYS_PATH": str(trusted),
        "AIRLOCK_EXECUTOR_RECEIPT_KEY_PATH": str(tmp_path / "receipt.pem"),
        "AIRLOCK_EXECUTOR_AUDIENCE": AUDIENCE,
        "AIRLOCK_EXECUTOR_ACCOUNT": ACCOUNT,
        "AIRLOCK_EXECUTOR_INBOX": str(tmp_path / "inbox"),
        "AIRLOCK_EXECUTOR_RECEIPTS_DIR": str(tmp_path / "receipts"),
        **devcloud.env("EXECUTOR", write=True),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    runner = CliRunner()
    tag = f"dccli{'p' if 'postgres' in migrated_url else 's'}"
    keys = tmp_path / "receipt-keys.json"
    result = runner.invoke(app, ["executor", "keygen", "--public", str(keys)])
    assert result.exit_code == 0, result.output

    now = int(time.time())
    first = make_test_bundle(1, tag=tag, issued_at=now)
    devcloud.admin.create_instance(first.resource_id, status="Running")
    bundle_file = tmp_path / "first.json"
    bundle_file.write_bytes(first.raw)
    result = runner.invoke(app, ["executor", "run-bundle", str(bundle_file)])
    assert result.exit_code == 0, result.output
    assert f"{first.approval_id} succeeded" in result.output
    receipt_file = tmp_path / "receipts" / f"{first.approval_id}.receipt.json"
    verified = runner.invoke(app, ["receipts", "verify", str(receipt_file), "--keys", str(keys)])
    assert verified.exit_code == 0 and "OK: succeeded" in verified.output, verified.output
    assert "  effect     the provider accepted the call" in verified.output
    assert " UTC (" in verified.output and "refusal" not in verified.output  # none, not "None"
    # The same bundle again is a replay: exit 1, still one write.
    again = runner.invoke(app, ["executor", "run-bundle", str(bundle_file)])
    assert again.exit_code == 1 and "E_REPLAY" in again.output
    assert _writes(devcloud, first.resource_id) == 1

    second = make_test_bundle(2, tag=tag, issued_at=now)
    devcloud.admin.create_instance(second.resource_id, status="Running")
    (tmp_path / "inbox" / "second.json").write_bytes(second.raw)
    once = runner.invoke(app, ["executor", "--once"])
    assert once.exit_code == 0, once.output
    assert not (tmp_path / "inbox" / "second.json").exists()
    assert _writes(devcloud, second.resource_id) == 1

    refused = runner.invoke(
        app, ["executor", "resolve", first.approval_id, "--by", "alice", "--happened"]
    )
    assert refused.exit_code == 2 and "not in_doubt" in refused.output

    # A trusted key file that does not parse stops the executor with a clear error
    # before anything is verified, recorded or written.
    third = make_test_bundle(3, tag=tag, issued_at=now)
    devcloud.admin.create_instance(third.resource_id, status="Running")
    (tmp_path / "third.json").write_bytes(third.raw)
    trusted.write_bytes(b'{"keys": [')
    broken = runner.invoke(app, ["executor", "run-bundle", str(tmp_path / "third.json")])
    assert broken.exit_code == 2, broken.output
    assert "trusted key set" in broken.output and "not a valid key set" in broken.output
    assert _writes(devcloud, third.resource_id) == 0

    # A receipts directory that does not exist is one clear line, not a traceback.
    trusted.write_bytes(canonical_bytes(keyset().to_value()))
    monkeypatch.setenv("AIRLOCK_EXECUTOR_RECEIPTS_DIR", str(tmp_path / "no-such-dir"))
    missing = runner.invoke(app, ["executor", "run-bundle", str(tmp_path / "third.json")])
    assert missing.exit_code == 2, missing.output
    assert "AIRLOCK_EXECUTOR_RECEIPTS_DIR" in missing.output and "mkdir" in missing.output
    assert _writes(devcloud, third.resource_id) == 0
    monkeypatch.setenv("AIRLOCK_EXECUTOR_RECEIPTS_DIR", str(tmp_path / "receipts"))

    # A production tag added at the provider after the approval stops the write (the
    # default keys and prefix); AIRLOCK_EXECUTOR_PROD_TAG_KEYS=[] turns that off.
    devcloud.admin.set_instance(third.resource_id, add_tags=[("Environment", "Production-EU")])
    production = runner.invoke(app, ["executor", "run-bundle", str(tmp_path / "third.json")])
    assert production.exit_code == 1, production.output
    assert "E_PRECONDITION" in production.output
    assert "production tag now present: Environment=Production-EU" in production.output
    assert _writes(devcloud, third.resource_id) == 0
    fourth = make_test_bundle(4, tag=tag, issued_at=now)
    devcloud.admin.create_instance(fourth.resource_id, status="Running", tags=[("env", "prod")])
    (tmp_path / "fourth.json").write_bytes(fourth.raw)
    monkeypatch.setenv("AIRLOCK_EXECUTOR_PROD_TAG_KEYS", "[]")
    off = runner.invoke(app, ["executor", "run-bundle", str(tmp_path / "fourth.json")])
    assert off.exit_code == 0 and f"{fourth.approval_id} succeeded" in off.output, off.output
    assert _writes(devcloud, fourth.resource_id) == 1

    # A ledger hold in force (this ledger may have forgotten approvals it used): the
    # bundle is not run, nothing is recorded, exit 2 with the reason.
    import sqlalchemy as sa

    from airlock.store import make_engine
    from services.executor.models import ledger, ledger_holds

    fifth = make_test_bundle(5, tag=tag, issued_at=now)
    devcloud.admin.create_instance(fifth.resource_id, status="Running")
    (tmp_path / "fifth.json").write_bytes(fifth.raw)
    engine = make_engine(migrated_url)
    try:
        with engine.begin() as conn:
            hold = {"feed": "http://cp", "head_seq": 1, "head_hash": "ab" * 32}
            conn.execute(sa.insert(ledger_holds).values(**hold, since=now, until=now + 3600))
        held = runner.invoke(app, ["executor", "run-bundle", str(tmp_path / "fifth.json")])
        assert held.exit_code == 2, held.output
        assert "a ledger hold is in force" in held.output
        assert _writes(devcloud, fifth.resource_id) == 0
        with engine.connect() as conn:
            used = conn.execute(sa.select(ledger.c.approval_id)).scalars().all()
        assert fifth.approval_id not in used
    finally:
        engine.dispose()


def test_the_inbox_daemon_takes_a_bundle_without_waiting_out_its_poll_and_stops_on_sigterm(
    devcloud: Any, tmp_path: Path
) -> None:
    """Seen in the attack suite: the daemon slept its whole poll wait between looks at an
    empty inbox. With a 60 s wait and no recovery pass due, a bundle dropped in must be
    taken long before that, and a SIGTERM in the wait must end the process at once."""
    import os
    import subprocess
    import sys
    import time

    from airlock.protocol import canonical_bytes

    from .support import ACCOUNT, AUDIENCE, keyset

    cli = str(Path(sys.executable).with_name("airlock"))
    trusted = tmp_path / "trusted.json"
    trusted.write_bytes(canonical_bytes(keyset().to_value()))
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    env = {
        **os.environ,
        "AIRLOCK_ENV": "dev",
        # The source is the same whatever the ledger: SQLite is enough here.
        "AIRLOCK_EXECUTOR_DATABASE_URL": f"sqlite:///{tmp_path / 'ledger.db'}",
        "AIRLOCK_EXECUTOR_TRUSTED_KEYS_PATH": str(trusted),
        "AIRLOCK_EXECUTOR_RECEIPT_KEY_PATH": str(tmp_path / "receipt.pem"),
        "AIRLOCK_EXECUTOR_AUDIENCE": AUDIENCE,
        "AIRLOCK_EXECUTOR_ACCOUNT": ACCOUNT,
        "AIRLOCK_EXECUTOR_INBOX": str(inbox),
        "AIRLOCK_EXECUTOR_POLL_WAIT": "60",
        "AIRLOCK_EXECUTOR_RECOVER_EVERY": "600",
        **devcloud.env("EXECUTOR", write=True),
    }
    keygen = subprocess.run(
        [cli, "executor", "keygen"],
        check=False,
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert keygen.returncode == 0, keygen.stderr
    log = tmp_path / "executor.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [cli, "executor"],
            env=env,
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while b" serving" not in log.read_bytes():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)  # polling its log under a deadline, not a race
        b = make_test_bundle(1, tag="dcinbox", issued_at=int(time.time()))
        devcloud.admin.create_instance(b.resource_id, status="Running")
        (inbox / ".b.json.tmp").write_bytes(b.raw)
        os.replace(inbox / ".b.json.tmp", inbox / "b.json")
        deadline = time.monotonic() + 20  # a third of the poll wait
        while not (inbox / "done" / "b.json").exists():
            assert time.monotonic() < deadline, "not taken within 20 s:\n" + log.read_text()
            time.sleep(0.05)  # polling the inbox under a deadline, not a race
        assert _writes(devcloud, b.resource_id) == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "stopped (signal 15)" in log.read_text()
