"""airlock doctor: all green on a complete dev setup; a loose key mode is a failure; so is
a checkpoint and an executor that do not trust or address each other."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from airlock.cli._doctor import Report, approval_trust, checkpoint_check, clock_check
from airlock.protocol import KeySet, KeyStatus, TrustedKey
from airlock.store import make_engine
from services.checkpoint.keys import KeyDirectory, KeyRing
from services.executor import generate_receipt_key, migrate
from tests.support.tls import make_ca, serving_tls

from .conftest import Served, airlock, dead_url


def _dev_env(served: Served, tmp_path: Path) -> dict[str, str]:
    """A host running every service, the way `airlock up` lays it out (dev, SQLite)."""
    executor_url = f"sqlite:///{tmp_path / 'executor.db'}"
    engine = make_engine(executor_url)
    try:
        migrate(engine)
    finally:
        engine.dispose()
    receipt = tmp_path / "executor-receipt.pem"
    signer = generate_receipt_key(receipt)
    trusted = tmp_path / "trusted-keys.json"
    trusted.write_text(json.dumps(KeyDirectory(served.world.keys_dir).public_keyset().to_value()))
    receipts = tmp_path / "receipt-keys.json"
    receipts.write_text(json.dumps(KeySet([signer.trusted_key()]).to_value()))
    return {
        "AIRLOCK_ENV": "dev",
        "AIRLOCK_CHECKPOINT_DATABASE_URL": served.world.url,
        "AIRLOCK_CHECKPOINT_KEYS_DIR": str(served.world.keys_dir),
        "AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH": str(receipts),
        "AIRLOCK_EXECUTOR_DATABASE_URL": executor_url,
        "AIRLOCK_EXECUTOR_RECEIPT_KEY_PATH": str(receipt),
        "AIRLOCK_EXECUTOR_TRUSTED_KEYS_PATH": str(trusted),
        "AIRLOCK_WEBAPP_CHECKPOINT_URL": served.url,
        "AIRLOCK_DEVCLOUD_DB_PATH": str(tmp_path / "devcloud.db"),
    }


def _lines(stdout: str, status: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith(f"{status} ")]


def test_doctor_is_all_green_on_a_complete_dev_setup(served: Served, tmp_path: Path) -> None:
    result = served.run("doctor", "--service", "checkpoint", env=_dev_env(served, tmp_path))
    assert result.exit_code == 0, result.output
    assert _lines(result.stdout, "fail") == []
    assert _lines(result.stdout, "warn") == []
    ok = "\n".join(_lines(result.stdout, "ok"))
    for name in (
        "keys.active",
        "keys.receipt",
        "keys.trusted",
        "keys.receipts",
        "database.checkpoint",
        "database.executor",
        "tags.production",
        "trust.receipts",
        "binding.audience",
        "binding.account",
        "binding.region",
        "checkpoint.healthz",
        "checkpoint.readyz",
        "trust.approvals",
        "clock",
    ):
        assert f"ok    {name}" in ok, result.stdout
    assert "alembic revision" in ok
    # The receipt and signing keys are read (for their ids and modes), never shown.
    assert "PRIVATE KEY" not in result.output and "BEGIN" not in result.output


def test_doctor_reports_a_world_readable_signing_key_as_a_failure(
    served: Served, tmp_path: Path
) -> None:
    env = _dev_env(served, tmp_path)
    record = KeyDirectory(served.world.keys_dir).records()[0]
    os.chmod(served.world.keys_dir / record.file, 0o644)
    result = served.run("doctor", env=env)
    assert result.exit_code == 1
    [failure] = _lines(result.stdout, "fail")
    assert "keys.active" in failure and "0644" in failure and "must be 0600" in failure


def test_doctor_reports_a_group_readable_receipt_key_as_a_failure(
    served: Served, tmp_path: Path
) -> None:
    env = _dev_env(served, tmp_path)
    os.chmod(env["AIRLOCK_EXECUTOR_RECEIPT_KEY_PATH"], 0o640)
    result = served.run("doctor", env=env)
    assert result.exit_code == 1
    assert any("keys.receipt" in line for line in _lines(result.stdout, "fail"))


def test_doctor_reports_a_trusted_key_set_others_may_write_as_a_failure(
    served: Served, tmp_path: Path
) -> None:
    env = _dev_env(served, tmp_path)
    os.chmod(env["AIRLOCK_EXECUTOR_TRUSTED_KEYS_PATH"], 0o666)
    result = served.run("doctor", env=env)
    assert result.exit_code == 1
    assert any("keys.trusted" in line for line in _lines(result.stdout, "fail"))


def test_doctor_reports_a_missing_or_unset_receipt_key_set_as_a_failure(
    served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the dev default is relative: no .airlock/ here
    env = _dev_env(served, tmp_path)
    Path(env["AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH"]).unlink()
    result = served.run("doctor", env=env)
    assert result.exit_code == 1
    assert any(
        "keys.receipts" in line and "missing" in line for line in _lines(result.stdout, "fail")
    )
    # Unset in dev: the dev default, which is missing here too; the line says how to fix it.
    del env["AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH"]
    unset = served.run("doctor", env=env)
    assert unset.exit_code == 1
    [failure] = [line for line in _lines(unset.stdout, "fail") if "keys.receipts" in line]
    assert ".airlock/receipt-keys.json is missing" in failure
    assert "airlock up" in failure and "AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH" in failure
    # Unset outside dev: required, and the line says so.
    prod = {"AIRLOCK_ENV": "prod", "AIRLOCK_CHECKPOINT_AUDIENCE": "airlock-executor/prod-test"}
    unset_prod = served.run("doctor", env={**env, **prod})
    assert unset_prod.exit_code == 1, unset_prod.stdout
    [failure] = [line for line in _lines(unset_prod.stdout, "fail") if "keys.receipts" in line]
    assert "AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH is not set" in failure
    assert "executor keygen --public" in failure


def test_doctor_in_the_directory_of_airlock_up_needs_only_airlock_env_dev(
    served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`airlock up` tells people that admin commands on its state, doctor among them, need
    only AIRLOCK_ENV=dev in its directory; the doctor failed there on the receipt key set,
    which `up` passes the checkpoint explicitly. In dev it is found where `up` writes it."""
    from airlock.cli._stack import Stack

    stack = Stack(tmp_path / ".airlock", {"webapp": 1, "checkpoint": 2, "devcloud": 3}, 4, 5)
    stack.prepare(lambda _line: None)
    # The checkpoint `up` starts signs with the keys `up` generated in .airlock/keys.
    monkeypatch.setattr(served.world.checkpoint, "keys", KeyRing(KeyDirectory(stack.home / "keys")))
    engine = make_engine(stack.executor_env()["AIRLOCK_EXECUTOR_DATABASE_URL"])
    try:
        migrate(engine)  # as the executor does when `up` starts it
    finally:
        engine.dispose()
    monkeypatch.chdir(tmp_path)
    result = served.run(
        "doctor",
        "--service",
        "checkpoint",
        "--service",
        "executor",
        "--url",
        served.url,
        env={"AIRLOCK_ENV": "dev"},
    )
    assert result.exit_code == 0, result.output
    assert "0 failed, 0 warnings" in result.stdout, result.stdout
    assert "ok    keys.receipts          .airlock/receipt-keys.json: 1 keys" in result.stdout
    for name in ("trust.receipts", "binding.audience", "trust.approvals"):
        assert f"ok    {name}" in result.stdout, result.stdout


def test_doctor_fails_on_an_unreachable_database_and_checkpoint(
    served: Served, tmp_path: Path
) -> None:
    env = _dev_env(served, tmp_path)
    env["AIRLOCK_EXECUTOR_DATABASE_URL"] = f"sqlite:///{tmp_path / 'missing' / 'executor.db'}"
    result = served.run("doctor", "--url", dead_url(), env=env)
    assert result.exit_code == 1
    failed = "\n".join(_lines(result.stdout, "fail"))
    assert "database.executor" in failed
    assert "checkpoint.healthz" in failed
    assert "database.checkpoint" not in failed


def test_doctor_fails_when_an_expected_service_is_not_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no .env from elsewhere
    result = airlock("doctor", "--service", "executor", "--url", dead_url())
    assert result.exit_code == 1
    assert any("settings.executor" in line for line in _lines(result.stdout, "fail"))


def test_doctor_warns_when_agent_and_executor_read_production_tags_differently(
    served: Served, tmp_path: Path
) -> None:
    env = _dev_env(served, tmp_path)
    alike = served.run(
        "doctor", env={**env, "AIRLOCK_EXECUTOR_PROD_TAG_KEYS": '["ENV", "Environment"]'}
    )
    assert "ok    tags.production" in alike.stdout, alike.stdout
    differ = served.run("doctor", env={**env, "AIRLOCK_EXECUTOR_PROD_TAG_KEYS": '["stage"]'})
    [line] = [line for line in _lines(differ.stdout, "warn") if "tags.production" in line]
    assert "['env', 'environment']" in line and "['stage']" in line
    off = served.run("doctor", env={**env, "AIRLOCK_EXECUTOR_PROD_TAG_KEYS": "[]"})
    assert any("tags.production" in line for line in _lines(off.stdout, "warn"))


def test_clock_check_warns_beyond_the_executor_skew() -> None:
    date = "Sat, 29 Nov 2025 07:06:40 GMT"
    at = 1_764_400_000.0
    assert clock_check(at + 0.4, date, 30)[0] == "ok"
    assert clock_check(at + 30.8, date, 30)[0] == "ok"  # the header's 1 s resolution
    assert clock_check(at + 31.5, date, 30)[0] == "warn"
    status, detail = clock_check(at - 45, date, 30)
    assert status == "warn" and "-45s" in detail
    assert clock_check(at, None, 30)[0] == "warn"
    assert clock_check(at, "yesterday", 30)[0] == "warn"


def test_doctor_reaches_a_private_ca_checkpoint_with_the_ca_file_of_the_service_it_checks(
    served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoint URL doctor checks is a service's: it trusts what that service
    trusts (its ``CHECKPOINT_CA_FILE``), not only certifi's bundle."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    ca = make_ca(tmp_path / "pki", "private-ca")
    env = _dev_env(served, tmp_path)
    del env["AIRLOCK_WEBAPP_CHECKPOINT_URL"]  # the executor's URL is the one checked
    with serving_tls(served.world.app, ca.issue("checkpoint")) as url:
        env["AIRLOCK_EXECUTOR_CHECKPOINT_URL"] = url
        trusted = served.run(
            "doctor", env={**env, "AIRLOCK_EXECUTOR_CHECKPOINT_CA_FILE": str(ca.ca_file)}
        )
        untrusted = served.run("doctor", env=env)
    assert trusted.exit_code == 0, trusted.stdout
    ok = [" ".join(line.split()) for line in _lines(trusted.stdout, "ok")]
    assert f"ok checkpoint.healthz {url} is up" in ok, trusted.stdout
    assert "ok checkpoint.readyz database and signing key ready" in ok
    [failed] = [line for line in _lines(untrusted.stdout, "fail") if "checkpoint.healthz" in line]
    assert "CERTIFICATE_VERIFY_FAILED" in failed, failed


def test_doctor_reports_a_ca_file_that_cannot_be_read_any_more_as_a_failure(
    tmp_path: Path,
) -> None:
    report = Report()
    checkpoint_check(report, "https://127.0.0.1:1", 30, time.time, tmp_path / "gone.pem")
    [check] = report.checks
    assert (check.status, check.name) == ("fail", "checkpoint.tls")
    assert "gone.pem: cannot be read" in check.detail


# -- each side's settings pass alone and every approval (or receipt) still fails ---------


def _named(stdout: str, status: str, name: str) -> list[str]:
    return [line for line in _lines(stdout, status) if line.split()[1] == name]


def _export_trusted(served: Served, env: dict[str, str]) -> None:
    """What `airlock keys export-public --out` writes, into the executor's trusted file."""
    keyset = KeyDirectory(served.world.keys_dir).public_keyset()
    Path(env["AIRLOCK_EXECUTOR_TRUSTED_KEYS_PATH"]).write_text(json.dumps(keyset.to_value()))


def test_doctor_fails_when_the_executor_does_not_trust_the_key_the_checkpoint_rotated_to(
    served: Served, tmp_path: Path
) -> None:
    env = _dev_env(served, tmp_path)
    new = KeyDirectory(served.world.keys_dir).rotate(
        served.world.clock(), execution_window=900, audit=served.world.key_audit(), immediate=True
    )
    stale = served.run("doctor", env=env)
    assert stale.exit_code == 1, stale.stdout
    [failure] = _named(stale.stdout, "fail", "trust.approvals")
    assert f"the executor does not trust {new.kid}, the checkpoint's active key" in failure
    assert "E_UNKNOWN_KEY" in failure
    assert "airlock keys export-public --out FILE" in failure
    assert env["AIRLOCK_EXECUTOR_TRUSTED_KEYS_PATH"] in failure
    _export_trusted(served, env)  # the old key is retired: still trusted, no warning
    fixed = served.run("doctor", env=env)
    assert fixed.exit_code == 0, fixed.stdout
    assert _named(fixed.stdout, "warn", "trust.approvals") == []
    [ok] = _named(fixed.stdout, "ok", "trust.approvals")
    assert new.kid in ok


def test_doctor_warns_of_a_retired_key_an_older_rotate_left_trusted_for_ever(
    served: Served, tmp_path: Path
) -> None:
    env = _dev_env(served, tmp_path)
    keys = KeyDirectory(served.world.keys_dir)
    [old] = keys.records()
    keys.rotate(
        int(time.time()), execution_window=900, audit=served.world.key_audit(), immediate=True
    )
    _export_trusted(served, env)
    ok = served.run("doctor", env=env)
    assert _named(ok.stdout, "warn", "keys.retired") == [], ok.stdout
    assert _named(ok.stdout, "fail", "keys.retired") == []  # its private key is gone, rightly
    # What rotate wrote before it set not_after (and kept the retired private key).
    value = json.loads(keys.manifest_path.read_text())
    for entry in value["keys"]:
        entry.pop("not_after", None)
    keys.manifest_path.write_text(json.dumps(value))
    trusted = Path(env["AIRLOCK_EXECUTOR_TRUSTED_KEYS_PATH"])
    exported = json.loads(trusted.read_text())
    for entry in exported["keys"]:
        entry.pop("not_after", None)
    trusted.write_text(json.dumps(exported))
    result = served.run("doctor", env=env)
    assert result.exit_code == 0, result.stdout
    [warning] = _named(result.stdout, "warn", "keys.retired")
    assert f"retired key {old.kid} has no not_after" in warning
    assert f"airlock keys revoke {old.kid}" in warning
    keys.revoke(old.kid, audit=served.world.key_audit())
    _export_trusted(served, env)
    fixed = served.run("doctor", env=env)
    assert _named(fixed.stdout, "warn", "keys.retired") == [], fixed.stdout


def test_doctor_warns_when_the_executor_trusts_a_retired_key_past_the_checkpoint_s_not_after(
    served: Served, tmp_path: Path
) -> None:
    env = _dev_env(served, tmp_path)
    keys = KeyDirectory(served.world.keys_dir)
    [old] = keys.records()
    keys.rotate(
        int(time.time()), execution_window=900, audit=served.world.key_audit(), immediate=True
    )
    _export_trusted(served, env)
    trusted = Path(env["AIRLOCK_EXECUTOR_TRUSTED_KEYS_PATH"])
    exported = json.loads(trusted.read_text())
    for entry in exported["keys"]:
        entry.pop("not_after", None)  # an export made before this version
    trusted.write_text(json.dumps(exported))
    result = served.run("doctor", env=env)
    [warning] = _named(result.stdout, "warn", "trust.approvals")
    assert f"the executor trusts {old.kid} longer than the checkpoint does" in warning
    assert "airlock keys export-public" in warning
    _export_trusted(served, env)
    fixed = served.run("doctor", env=env)
    assert _named(fixed.stdout, "warn", "trust.approvals") == [], fixed.stdout


def test_doctor_warns_when_the_executor_still_trusts_a_key_the_checkpoint_revoked(
    served: Served, tmp_path: Path
) -> None:
    env = _dev_env(served, tmp_path)
    keys = KeyDirectory(served.world.keys_dir)
    [old] = keys.records()
    # Rotated at doctor's clock (the real one): the retired key is still within its not_after.
    keys.rotate(
        int(time.time()), execution_window=900, audit=served.world.key_audit(), immediate=True
    )
    _export_trusted(served, env)
    keys.revoke(old.kid, audit=served.world.key_audit())  # and not re-exported
    result = served.run("doctor", env=env)
    assert result.exit_code == 0, result.stdout
    [warning] = _named(result.stdout, "warn", "trust.approvals")
    assert f"the executor still trusts {old.kid}, which the checkpoint revoked" in warning
    assert "airlock keys export-public" in warning
    _export_trusted(served, env)
    fixed = served.run("doctor", env=env)
    assert _named(fixed.stdout, "warn", "trust.approvals") == [], fixed.stdout


def test_doctor_fails_when_the_executor_marks_the_checkpoints_active_key_revoked(
    served: Served, tmp_path: Path
) -> None:
    env = _dev_env(served, tmp_path)
    path = Path(env["AIRLOCK_EXECUTOR_TRUSTED_KEYS_PATH"])
    value = json.loads(path.read_text())
    value["keys"][0]["status"] = "revoked"
    path.write_text(json.dumps(value))
    result = served.run("doctor", env=env)
    assert result.exit_code == 1
    [failure] = _named(result.stdout, "fail", "trust.approvals")
    assert "revoked: every approval is refused E_KEY_REVOKED" in failure


def test_doctor_warns_when_the_executor_was_not_given_the_staged_key_before_rotate(
    served: Served, tmp_path: Path
) -> None:
    env = _dev_env(served, tmp_path)
    keys = KeyDirectory(served.world.keys_dir)
    staged = keys.stage(int(time.time()), audit=served.world.key_audit())
    stale = served.run("doctor", env=env)
    assert stale.exit_code == 0, stale.stdout  # nothing is refused yet: a warning
    [warning] = _named(stale.stdout, "warn", "trust.approvals")
    assert f"the executor does not trust {staged.kid}, the checkpoint's staged key" in warning
    assert "after airlock keys rotate every approval would be refused E_UNKNOWN_KEY" in warning
    assert "airlock keys export-public --out FILE" in warning
    [ok] = _named(stale.stdout, "ok", "keys.next")
    assert "is 0600" in ok
    _export_trusted(served, env)
    ready = served.run("doctor", env=env)
    assert ready.exit_code == 0, ready.stdout
    assert _lines(ready.stdout, "warn") == [], ready.stdout
    assert any(
        f"the executor trusts {staged.kid}, the checkpoint's staged key (ready for" in line
        for line in _named(ready.stdout, "ok", "trust.approvals")
    )
    assert "1 staged" in _named(ready.stdout, "ok", "keys.trusted")[0]
    # Rotated with no re-export since the stage: the executor verifies the new active key.
    keys.rotate(int(time.time()), execution_window=900, audit=served.world.key_audit())
    rotated = served.run("doctor", env=env)
    assert rotated.exit_code == 0, rotated.stdout
    assert any(
        f"the executor trusts {staged.kid}, the checkpoint's active key" in line
        for line in _named(rotated.stdout, "ok", "trust.approvals")
    )


def test_doctor_checks_the_staged_private_key_like_the_active_one(
    served: Served, tmp_path: Path
) -> None:
    env = _dev_env(served, tmp_path)
    keys = KeyDirectory(served.world.keys_dir)
    staged = keys.stage(int(time.time()), audit=served.world.key_audit())
    _export_trusted(served, env)
    os.chmod(served.world.keys_dir / staged.file, 0o644)
    loose = served.run("doctor", env=env)
    assert loose.exit_code == 1
    [failure] = _named(loose.stdout, "fail", "keys.next")
    assert "0644" in failure and "must be 0600" in failure
    (served.world.keys_dir / staged.file).unlink()
    gone = served.run("doctor", env=env)
    assert gone.exit_code == 0, gone.stdout
    [warning] = _named(gone.stdout, "warn", "keys.next")
    assert f"the private key of staged key {staged.kid} is missing" in warning
    assert f"airlock keys revoke {staged.kid}" in warning


def test_doctor_warns_of_two_staged_keys_a_hand_edit_left(served: Served, tmp_path: Path) -> None:
    env = _dev_env(served, tmp_path)
    keys = KeyDirectory(served.world.keys_dir)
    first = keys.stage(int(time.time()), audit=served.world.key_audit())
    value = json.loads(keys.manifest_path.read_text())
    second = {
        **next(k for k in value["keys"] if k["kid"] == first.kid),
        "kid": "ed25519:" + "ab" * 16,
    }
    keys.manifest_path.write_text(json.dumps({**value, "keys": [*value["keys"], second]}))
    result = served.run("doctor", env=env)
    warnings = _named(result.stdout, "warn", "keys.next")
    assert any("2 staged keys" in w and "keys rotate refuses to choose" in w for w in warnings)


def test_approval_trust_reads_revocation_and_not_after_as_the_verifier_does() -> None:
    def key(status: KeyStatus, not_after: int | None = None) -> TrustedKey:
        raw = Ed25519PrivateKey.generate().public_key().public_bytes_raw()
        return TrustedKey.from_raw(raw, status, not_after)

    def trusting(*keys: TrustedKey) -> KeySet:
        return KeySet(list(keys))

    active, retired, revoked = key(KeyStatus.ACTIVE), key(KeyStatus.RETIRED), key(KeyStatus.REVOKED)
    published = trusting(active, retired, revoked)
    path = Path("trusted-keys.json")

    def statuses(trusted: KeySet, now: int = 1000) -> list[str]:
        return [status for status, _ in approval_trust(published, trusted, path, now)]

    assert statuses(trusting(active, retired)) == ["ok"]
    # The executor's copy of the active key, retired there: it still verifies.
    assert statuses(trusting(TrustedKey.from_raw(active.raw, KeyStatus.RETIRED))) == ["ok"]
    past = trusting(TrustedKey.from_raw(active.raw, KeyStatus.ACTIVE, 999))
    assert statuses(past) == ["fail"]
    assert "past its not_after (999)" in approval_trust(published, past, path, 1000)[0][1]
    assert statuses(past, now=999) == ["ok"]  # refused only after not_after
    still = trusting(active, TrustedKey.from_raw(revoked.raw, KeyStatus.ACTIVE))
    assert statuses(still) == ["ok", "warn"]
    assert statuses(trusting(active, revoked)) == ["ok"]
    assert statuses(trusting(retired)) == ["fail"]
    assert [s for s, _ in approval_trust(trusting(retired), trusting(retired), path, 0)] == ["fail"]
    # A staged key: trusted (as next, or as anything that still verifies) is ok; missing or
    # revoked at the executor is a warning, as nothing is refused until the rotate.
    staged = key(KeyStatus.NEXT)
    with_staged = trusting(active, staged)
    assert [s for s, _ in approval_trust(with_staged, with_staged, path, 1000)] == ["ok", "ok"]
    assert [s for s, _ in approval_trust(with_staged, trusting(active), path, 1000)] == [
        "ok",
        "warn",
    ]
    refused = trusting(active, TrustedKey.from_raw(staged.raw, KeyStatus.REVOKED))
    [(_, _), (status, detail)] = approval_trust(with_staged, refused, path, 1000)
    assert status == "warn" and "E_KEY_REVOKED" in detail
    # Only an active key signs: a staged one alone is "signs nothing".
    assert approval_trust(trusting(staged), trusting(staged), path, 1000)[0][0] == "fail"


def test_doctor_fails_when_checkpoint_and_executor_audiences_differ(
    served: Served, tmp_path: Path
) -> None:
    env = {**_dev_env(served, tmp_path), "AIRLOCK_EXECUTOR_AUDIENCE": "airlock-executor/prod-1"}
    result = served.run("doctor", env=env)
    assert result.exit_code == 1
    [failure] = _named(result.stdout, "fail", "binding.audience")
    assert "'airlock-executor/dev'" in failure and "'airlock-executor/prod-1'" in failure
    assert "E_AUDIENCE" in failure
    alike = served.run(
        "doctor", env={**env, "AIRLOCK_CHECKPOINT_AUDIENCE": "airlock-executor/prod-1"}
    )
    assert alike.exit_code == 0, alike.stdout
    [ok] = _named(alike.stdout, "ok", "binding.audience")
    assert "'airlock-executor/prod-1'" in ok


def test_doctor_fails_when_the_agent_proposes_for_an_account_or_region_the_executor_refuses(
    served: Served, tmp_path: Path
) -> None:
    env = _dev_env(served, tmp_path)
    account = served.run("doctor", env={**env, "AIRLOCK_EXECUTOR_ACCOUNT": "1111222233334444"})
    assert account.exit_code == 1
    [failure] = _named(account.stdout, "fail", "binding.account")
    assert "'5123456789012345'" in failure and "'1111222233334444'" in failure
    assert "E_ACCOUNT" in failure
    region = served.run("doctor", env={**env, "AIRLOCK_EXECUTOR_REGION": "cn-hangzhou"})
    assert region.exit_code == 1
    [failure] = _named(region.stdout, "fail", "binding.region")
    assert "['ap-southeast-1']" in failure and "'cn-hangzhou'" in failure
    assert "E_ACCOUNT" in failure
    # Some regions the executor writes, some not: those approvals are refused.
    some = served.run(
        "doctor", env={**env, "AIRLOCK_AGENT_CLOUD_REGIONS": "ap-southeast-1,cn-hangzhou"}
    )
    assert some.exit_code == 0, some.stdout
    [warning] = _named(some.stdout, "warn", "binding.region")
    assert "approvals in ['cn-hangzhou'] are refused E_ACCOUNT" in warning


def test_doctor_fails_when_the_checkpoint_does_not_trust_the_executors_receipt_key(
    served: Served, tmp_path: Path
) -> None:
    env = _dev_env(served, tmp_path)
    path = Path(env["AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH"])
    [ours] = json.loads(path.read_text())["keys"]
    other = Ed25519PrivateKey.generate().public_key().public_bytes_raw()
    path.write_text(json.dumps(KeySet([TrustedKey.from_raw(other)]).to_value()))
    result = served.run("doctor", env=env)
    assert result.exit_code == 1
    [failure] = _named(result.stdout, "fail", "trust.receipts")
    assert f"lacks the executor's receipt key {ours['kid']}" in failure
    assert "E_RECEIPT" in failure and "executor keygen --public" in failure
    path.write_text(json.dumps({"keys": [{**ours, "status": "revoked"}]}))
    revoked = served.run("doctor", env=env)
    assert revoked.exit_code == 1
    [failure] = _named(revoked.stdout, "fail", "trust.receipts")
    assert f"has the executor's receipt key {ours['kid']} revoked" in failure
    assert "BEGIN" not in revoked.stdout  # the private key is read, never shown


def test_doctor_skips_the_comparisons_whose_other_side_is_not_configured_here(
    served: Served, tmp_path: Path
) -> None:
    env = _dev_env(served, tmp_path)
    compared = ("trust.approvals", "trust.receipts", "binding.audience", "binding.account")
    # No executor here: nothing to compare the checkpoint's keys or audience with.
    no_executor = served.run("doctor", env={**env, "AIRLOCK_EXECUTOR_LEASE_SECONDS": "1"})
    assert no_executor.exit_code == 0, no_executor.stdout
    for name in compared:
        assert f" {name} " not in no_executor.stdout, no_executor.stdout
    # No checkpoint settings here: the executor's trust is still compared over HTTP.
    no_checkpoint = served.run("doctor", env={**env, "AIRLOCK_CHECKPOINT_PORT": "0"})
    assert no_checkpoint.exit_code == 0, no_checkpoint.stdout
    assert " trust.receipts " not in no_checkpoint.stdout
    assert " binding.audience " not in no_checkpoint.stdout
    assert _named(no_checkpoint.stdout, "ok", "trust.approvals"), no_checkpoint.stdout
    # No trusted key file, or no checkpoint answering: those already fail; no second line.
    Path(env["AIRLOCK_EXECUTOR_TRUSTED_KEYS_PATH"]).unlink()
    missing = served.run("doctor", env=env)
    assert " trust.approvals " not in missing.stdout
    _export_trusted(served, env)
    dead = served.run("doctor", "--url", dead_url(), env=env)
    assert " trust.approvals " not in dead.stdout
