"""Key directory: 0600 or refuse; rotation keeps old approvals verifiable until the retired
key's not_after; revoke kills them; every change is locked and recorded in the audit chain."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from airlock.protocol import (
    ApprovalStatement,
    Binding,
    KeySet,
    KeyStatus,
    RefusalCode,
    Refused,
    make_bundle,
    verify_bundle,
)
from airlock.store import verify_chain
from services.checkpoint.errors import ConfigError
from services.checkpoint.keys import RETIRE_SKEW, KeyDirectory
from services.checkpoint.signer import Signer

from .builders import action
from .harness import World, audit_events
from .race_worker import rotate_waiting_inside_the_lock

NOW = 1_764_400_000
WINDOW = 900
BINDING = Binding("airlock-executor/test", "alibaba", "5123456789012345", "ap-southeast-1")


class Recorded:
    """A KeyAudit that keeps the events, and what the manifest was when each came."""

    def __init__(self, keys: KeyDirectory) -> None:
        self.keys = keys
        self.events: list[dict[str, Any]] = []
        self.manifest_then: list[bytes] = []

    def record(self, event: Mapping[str, Any]) -> None:
        self.events.append(dict(event))
        self.manifest_then.append(self.keys.manifest_path.read_bytes())


class Failing:
    def record(self, event: Mapping[str, Any]) -> None:
        raise OSError("database is down")


def _rotate(keys: KeyDirectory, now: int) -> Any:
    return keys.rotate(now, execution_window=WINDOW, audit=Recorded(keys))


def _bundle(signer: Signer, nonce: str, issued_at: int = NOW) -> bytes:
    act = action()
    statement = ApprovalStatement.model_validate(
        {
            "type": "airlock.approval/v1",
            "approval_id": "apv_" + nonce[:16],
            "proposal_id": act.proposal_id,
            "action_hash": act.action_hash(),
            "provider": act.provider,
            "account": act.account,
            "region": act.region,
            "resource": act.resource.model_dump(),
            "operation": act.operation,
            "audience": BINDING.audience,
            "nonce": nonce,
            "issued_at": issued_at,
            "not_before": issued_at,
            "expires_at": issued_at + WINDOW,
            "approvers": [{"id": "alice", "at": issued_at}],
            "quorum": 1,
            "policy": {"rule": "stop-one-person", "hash": "sha256:" + "0" * 64},
            "risk": "medium",
        }
    )
    return make_bundle(act.canonical_bytes(), signer.sign_statement(statement))


def _exported(keys: KeyDirectory) -> KeySet:
    # What `airlock keys export-public` writes is what the executor loads.
    return KeySet.from_value(keys.public_keyset().to_value())


def test_generated_key_file_is_0600_and_loads(tmp_path: Path) -> None:
    keys = KeyDirectory(tmp_path / "keys")
    record = keys.generate(NOW)
    assert (os.stat(tmp_path / "keys" / record.file).st_mode & 0o777) == 0o600
    assert keys.active_signer().keyid == record.kid


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660])
def test_signing_key_readable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    keys = KeyDirectory(tmp_path)
    record = keys.generate(NOW)
    os.chmod(tmp_path / record.file, mode)
    with pytest.raises(ConfigError, match="must be 0600"):
        keys.active_signer()


def test_missing_key_set_names_the_command(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="airlock keys generate"):
        KeyDirectory(tmp_path).active_signer()


def test_generate_twice_is_refused(tmp_path: Path) -> None:
    keys = KeyDirectory(tmp_path)
    keys.generate(NOW)
    with pytest.raises(ConfigError, match="rotate"):
        keys.generate(NOW)


def test_approval_signed_by_old_key_still_verifies_after_rotation(tmp_path: Path) -> None:
    keys = KeyDirectory(tmp_path)
    keys.generate(NOW)
    old = keys.active_signer()
    bundle = _bundle(old, "a" * 32)
    new_record = _rotate(keys, NOW + 10)
    assert keys.active_signer().keyid == new_record.kid != old.keyid
    trusted = _exported(keys)
    assert trusted[old.keyid].status is KeyStatus.RETIRED
    verified = verify_bundle(bundle, trusted, BINDING, NOW + 60)
    assert verified.keyid == old.keyid
    assert verify_bundle(_bundle(keys.active_signer(), "b" * 32), trusted, BINDING, NOW + 60)


def test_approval_signed_by_revoked_key_is_refused(tmp_path: Path) -> None:
    keys = KeyDirectory(tmp_path)
    keys.generate(NOW)
    old = keys.active_signer()
    bundle = _bundle(old, "c" * 32)
    _rotate(keys, NOW + 10)
    keys.revoke(old.keyid, audit=Recorded(keys))
    with pytest.raises(Refused) as caught:
        verify_bundle(bundle, _exported(keys), BINDING, NOW + 60)
    assert caught.value.code is RefusalCode.E_KEY_REVOKED


def test_revoking_the_active_key_leaves_nothing_to_sign_with(tmp_path: Path) -> None:
    keys = KeyDirectory(tmp_path)
    record = keys.generate(NOW)
    keys.revoke(record.kid, audit=Recorded(keys))
    with pytest.raises(ConfigError, match="0 active keys"):
        keys.active_signer()
    _rotate(keys, NOW + 1)
    assert keys.active_signer().keyid != record.kid


def test_manifest_naming_a_foreign_kid_is_refused(tmp_path: Path) -> None:
    keys = KeyDirectory(tmp_path)
    record = keys.generate(NOW)
    text = keys.manifest_path.read_text().replace(record.kid, "ed25519:" + "0" * 32)
    keys.manifest_path.write_text(text)
    with pytest.raises(ConfigError, match="malformed"):
        keys.records()


# -- a retired key expires (review: a retired key was trusted for ever) ---------------


def test_an_approval_minted_with_a_retired_key_years_after_rotation_is_refused(
    tmp_path: Path,
) -> None:
    keys = KeyDirectory(tmp_path)
    keys.generate(NOW)
    old = keys.active_signer()  # what a thief of the retired key's file would hold
    in_flight = _bundle(old, "d" * 32, issued_at=NOW + 50)
    _rotate(keys, NOW + 60)
    not_after = NOW + 60 + WINDOW + RETIRE_SKEW
    [retired] = [r for r in keys.records() if r.kid == old.keyid]
    assert retired.status is KeyStatus.RETIRED and retired.not_after == not_after
    trusted = _exported(keys)  # what `keys export-public` gives the executor
    assert trusted[old.keyid].not_after == not_after
    # An approval in flight at the rotation verifies for as long as it lives...
    assert verify_bundle(in_flight, trusted, BINDING, NOW + 50 + WINDOW - 1).keyid == old.keyid
    # ...and nothing does after not_after, or claims to live past it (signed since).
    three_years = NOW + 3 * 365 * 86400
    for bundle, now in [
        (_bundle(old, "e" * 32, issued_at=three_years), three_years + 5),
        (_bundle(old, "f" * 32, issued_at=NOW + 120), NOW + 130),
    ]:
        with pytest.raises(Refused) as caught:
            verify_bundle(bundle, trusted, BINDING, now)
        assert caught.value.code is RefusalCode.E_KEY_REVOKED


def test_rotation_and_revocation_delete_the_private_key_nothing_signs_with(
    tmp_path: Path,
) -> None:
    keys = KeyDirectory(tmp_path)
    first = keys.generate(NOW)
    second = _rotate(keys, NOW + 60)
    assert not (tmp_path / first.file).exists()
    assert keys.active_signer().keyid == second.kid  # the checkpoint signs with this one only
    keys.revoke(second.kid, audit=Recorded(keys))
    assert not (tmp_path / second.file).exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".pem") == []
    assert keys.warnings() == []


def test_a_retired_key_left_unbounded_by_an_older_rotate_is_warned_of_and_bounded_by_the_next(
    tmp_path: Path,
) -> None:
    keys = KeyDirectory(tmp_path)
    first = keys.generate(NOW)
    _rotate(keys, NOW + 60)
    # What an older `keys rotate` wrote: no not_after, the retired private key kept.
    value = json.loads(keys.manifest_path.read_bytes())
    del value["keys"][0]["not_after"]
    keys.manifest_path.write_text(json.dumps(value))
    (tmp_path / first.file).write_bytes(b"the old private key")
    os.chmod(tmp_path / first.file, 0o600)
    assert _exported(keys)[first.kid].not_after is None
    warned = keys.warnings()
    assert len(warned) == 2
    assert f"retired key {first.kid} has no not_after" in warned[0]
    assert f"airlock keys revoke {first.kid}" in warned[0]
    assert "is still on disk" in warned[1]
    _rotate(keys, NOW + 7200)
    assert _exported(keys)[first.kid].not_after == NOW + 7200 + WINDOW + RETIRE_SKEW
    assert not (tmp_path / first.file).exists()
    assert keys.warnings() == []


# -- key changes are recorded and serialized (review: unaudited, lost update) ---------


def test_rotate_and_revoke_are_recorded_before_the_manifest_changes(tmp_path: Path) -> None:
    keys = KeyDirectory(tmp_path)
    first = keys.generate(NOW)
    audit = Recorded(keys)
    generated = keys.manifest_path.read_bytes()
    second = keys.rotate(NOW + 60, execution_window=WINDOW, audit=audit)
    rotated = keys.manifest_path.read_bytes()
    keys.revoke(first.kid, audit=audit)
    rotate, revoke = audit.events
    assert rotate == {
        "type": "checkpoint.key.rotated",
        "active": second.kid,
        "retired": [first.kid],
        "not_after": NOW + 60 + WINDOW + RETIRE_SKEW,
        "keyset_before": _digest(generated),
        "keyset_after": _digest(rotated),
    }
    assert revoke == {
        "type": "checkpoint.key.revoked",
        "kid": first.kid,
        "was": "retired",
        "keyset_before": _digest(rotated),
        "keyset_after": _digest(keys.manifest_path.read_bytes()),
    }
    # Each record was committed while the manifest was still the one before it.
    assert audit.manifest_then == [generated, rotated]


def test_a_key_change_that_cannot_be_recorded_is_not_made(tmp_path: Path) -> None:
    keys = KeyDirectory(tmp_path)
    first = keys.generate(NOW)
    before = keys.manifest_path.read_bytes()
    with pytest.raises(OSError, match="database is down"):
        keys.rotate(NOW + 60, execution_window=WINDOW, audit=Failing())
    with pytest.raises(OSError, match="database is down"):
        keys.revoke(first.kid, audit=Failing())
    assert keys.manifest_path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".pem") == [first.file]


def test_a_revoke_racing_a_rotate_waits_for_it_and_is_never_undone(world: World) -> None:
    """A rotate stops inside the key directory's lock, after reading the manifest; an
    `airlock keys revoke` of the old key, run as its own process, must wait for it (seen
    blocked in /proc/locks, no sleeps) and then revoke on top of the rotation."""
    keys = KeyDirectory(world.keys_dir)
    [old] = keys.records()
    ctx = multiprocessing.get_context("spawn")
    inside, go = ctx.Event(), ctx.Event()
    rotating = ctx.Process(
        target=rotate_waiting_inside_the_lock, args=(str(world.keys_dir), world.url, inside, go)
    )
    rotating.start()
    try:
        assert inside.wait(60), "the rotate never reached its record"
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")},
            "AIRLOCK_ENV": "prod",
            "AIRLOCK_CHECKPOINT_DATABASE_URL": world.url,
            "AIRLOCK_CHECKPOINT_AUDIENCE": "airlock-executor/prod-test",
            "AIRLOCK_CHECKPOINT_KEYS_DIR": str(world.keys_dir),
        }
        revoking = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from airlock.cli import main; main()",
                "keys",
                "revoke",
                old.kid,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        lock_inode = (world.keys_dir / ".keyset.lock").stat().st_ino
        # Until the revoke is either blocked on the lock or (without one) done.
        deadline = time.monotonic() + 60
        while revoking.poll() is None and not _blocked_on(revoking.pid, lock_inode):
            assert time.monotonic() < deadline, "the revoke neither waited nor finished"
            with contextlib.suppress(subprocess.TimeoutExpired):
                revoking.wait(timeout=0.01)
    finally:
        go.set()
        rotating.join(60)
    _, err = revoking.communicate(timeout=60)
    assert rotating.exitcode == 0
    assert revoking.returncode == 0, err
    status = {r.kid: r.status for r in keys.records()}
    assert status[old.kid] is KeyStatus.REVOKED  # not brought back as retired by the rotate
    assert list(status.values()).count(KeyStatus.ACTIVE) == 1
    [rotated] = audit_events(world, "checkpoint.key.rotated")
    [revoked] = audit_events(world, "checkpoint.key.revoked")
    assert revoked["kid"] == old.kid and revoked["was"] == "retired"
    assert revoked["keyset_before"] == rotated["keyset_after"]
    assert revoked["keyset_after"] == _digest(keys.manifest_path.read_bytes())
    assert verify_chain(world.checkpoint.engine).ok
    verified = subprocess.run(
        [
            sys.executable,
            "-c",
            "from airlock.cli import main; main()",
            "audit",
            "verify",
            "--db",
            world.url,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


def _blocked_on(pid: int, inode: int) -> bool:
    """Is ``pid`` waiting for a flock on the file with this inode? (proc(5): /proc/locks
    marks a blocked request with ``->``.)"""
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if (
            len(fields) > 6
            and fields[1:3] == ["->", "FLOCK"]
            and int(fields[5]) == pid
            and int(fields[6].rsplit(":", 1)[1]) == inode
        ):
            return True
    return False


def _digest(data: bytes) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(data).hexdigest()
