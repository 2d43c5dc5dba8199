"""Key directory: 0600 or refuse; a staged key is trusted ahead of time and never signs;
rotation keeps old approvals verifiable until the retired key's not_after; revoke kills
them; every change is locked and recorded in the audit chain."""

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
from services.checkpoint.keys import RETIRE_SKEW, KeyDirectory, KeyRing
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
    """`airlock keys rotate --now`: a new key, active at once (no staged key)."""
    return keys.rotate(now, execution_window=WINDOW, audit=Recorded(keys), immediate=True)


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


# -- two-phase rotation: stage the next key, give it to executors, then rotate ----------


def _pems(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.suffix == ".pem")


def test_a_staged_key_is_exported_for_executors_but_never_signs(tmp_path: Path) -> None:
    keys = KeyDirectory(tmp_path)
    first = keys.generate(NOW)
    staged = keys.stage(NOW + 10, audit=Recorded(keys))
    assert staged.status is KeyStatus.NEXT and staged.kid != first.kid
    assert (os.stat(tmp_path / staged.file).st_mode & 0o777) == 0o600
    assert keys.active_signer().keyid == first.kid
    ring = KeyRing(keys)
    assert ring.signer().keyid == first.kid
    trusted = _exported(keys)
    assert trusted[staged.kid].status is KeyStatus.NEXT
    assert trusted[staged.kid].not_after is None
    assert verify_bundle(_bundle(ring.signer(), "1" * 32), trusted, BINDING, NOW + 20)
    assert keys.warnings() == []  # its private key is on disk by design
    # With the active key gone, the staged one is still not used: nothing signs.
    keys.revoke(first.kid, audit=Recorded(keys))
    with pytest.raises(ConfigError, match="0 active keys"):
        keys.active_signer()
    with pytest.raises(ConfigError, match="0 active keys"):
        ring.signer()


def test_rotate_makes_the_staged_key_active_and_an_executor_given_it_at_stage_verifies(
    tmp_path: Path,
) -> None:
    keys = KeyDirectory(tmp_path)
    first = keys.generate(NOW)
    staged = keys.stage(NOW + 10, audit=Recorded(keys))
    at_stage = _exported(keys)  # what the executor was given between stage and rotate
    old_bundle = _bundle(keys.active_signer(), "2" * 32, issued_at=NOW + 50)
    active = keys.rotate(NOW + 60, execution_window=WINDOW, audit=Recorded(keys))
    assert active.kid == staged.kid and active.status is KeyStatus.ACTIVE
    assert active.created_at == NOW + 10 and active.file == staged.file
    assert keys.active_signer().keyid == staged.kid
    status = {r.kid: (r.status, r.not_after) for r in keys.records()}
    assert status == {
        first.kid: (KeyStatus.RETIRED, NOW + 60 + WINDOW + RETIRE_SKEW),
        staged.kid: (KeyStatus.ACTIVE, None),
    }
    assert _pems(tmp_path) == [staged.file]  # the retired key's private key is deleted
    new_bundle = _bundle(keys.active_signer(), "3" * 32, issued_at=NOW + 61)
    # The executor that has not been given the key set since the stage verifies both.
    assert verify_bundle(new_bundle, at_stage, BINDING, NOW + 62).keyid == staged.kid
    assert verify_bundle(old_bundle, at_stage, BINDING, NOW + 62).keyid == first.kid
    assert verify_bundle(old_bundle, _exported(keys), BINDING, NOW + 62).keyid == first.kid


def test_rotate_without_a_staged_key_is_refused_unless_asked_for_at_once(
    tmp_path: Path,
) -> None:
    keys = KeyDirectory(tmp_path)
    first = keys.generate(NOW)
    before = keys.manifest_path.read_bytes()
    audit = Recorded(keys)
    with pytest.raises(ConfigError, match="no key is staged") as refused:
        keys.rotate(NOW + 60, execution_window=WINDOW, audit=audit)
    assert "E_UNKNOWN_KEY" in str(refused.value) and "airlock keys stage" in str(refused.value)
    assert "--now" in str(refused.value)
    assert keys.manifest_path.read_bytes() == before and audit.events == []
    assert _pems(tmp_path) == [first.file]
    made = keys.rotate(NOW + 60, execution_window=WINDOW, audit=audit, immediate=True)
    assert keys.active_signer().keyid == made.kid != first.kid
    assert audit.events[0]["staged"] is False


def test_rotate_now_with_a_staged_key_is_refused_not_guessed(tmp_path: Path) -> None:
    keys = KeyDirectory(tmp_path)
    keys.generate(NOW)
    staged = keys.stage(NOW + 10, audit=Recorded(keys))
    before = keys.manifest_path.read_bytes()
    with pytest.raises(ConfigError, match=f"key {staged.kid} is staged") as refused:
        keys.rotate(NOW + 60, execution_window=WINDOW, audit=Recorded(keys), immediate=True)
    assert f"airlock keys revoke {staged.kid}" in str(refused.value)
    assert keys.manifest_path.read_bytes() == before
    assert len(_pems(tmp_path)) == 2


def test_staging_while_a_key_is_staged_is_refused(tmp_path: Path) -> None:
    keys = KeyDirectory(tmp_path)
    keys.generate(NOW)
    staged = keys.stage(NOW + 10, audit=Recorded(keys))
    before = keys.manifest_path.read_bytes()
    with pytest.raises(ConfigError, match=f"key {staged.kid} is staged already"):
        keys.stage(NOW + 20, audit=Recorded(keys))
    assert keys.manifest_path.read_bytes() == before
    assert len(_pems(tmp_path)) == 2


def test_a_revoked_staged_key_is_never_made_active_and_its_approvals_are_refused(
    tmp_path: Path,
) -> None:
    keys = KeyDirectory(tmp_path)
    first = keys.generate(NOW)
    staged = keys.stage(NOW + 10, audit=Recorded(keys))
    # What a thief of the key directory would hold: the staged key's private key.
    stolen = Signer(_private(tmp_path / staged.file))
    audit = Recorded(keys)
    revoked = keys.revoke(staged.kid, audit=audit)
    assert revoked.status is KeyStatus.REVOKED
    assert audit.events[0]["was"] == "next"
    assert _pems(tmp_path) == [first.file]
    with pytest.raises(ConfigError, match="no key is staged"):
        keys.rotate(NOW + 60, execution_window=WINDOW, audit=Recorded(keys))
    assert keys.active_signer().keyid == first.kid
    with pytest.raises(Refused) as caught:
        verify_bundle(_bundle(stolen, "4" * 32), _exported(keys), BINDING, NOW + 20)
    assert caught.value.code is RefusalCode.E_KEY_REVOKED
    assert keys.stage(NOW + 30, audit=Recorded(keys)).kid != staged.kid  # stage another


def test_a_staged_key_whose_private_key_is_gone_is_not_made_active(tmp_path: Path) -> None:
    keys = KeyDirectory(tmp_path)
    first = keys.generate(NOW)
    staged = keys.stage(NOW + 10, audit=Recorded(keys))
    (tmp_path / staged.file).unlink()
    [warning] = keys.warnings()
    assert f"the private key of staged key {staged.kid} is missing" in warning
    before = keys.manifest_path.read_bytes()
    audit = Recorded(keys)
    with pytest.raises(ConfigError, match="signing key"):
        keys.rotate(NOW + 60, execution_window=WINDOW, audit=audit)
    assert keys.manifest_path.read_bytes() == before and audit.events == []
    assert keys.active_signer().keyid == first.kid  # still signing, with the old key


def test_a_key_staged_after_the_active_key_was_revoked_becomes_active_retiring_nothing(
    tmp_path: Path,
) -> None:
    keys = KeyDirectory(tmp_path)
    first = keys.generate(NOW)
    keys.revoke(first.kid, audit=Recorded(keys))
    staged = keys.stage(NOW + 10, audit=Recorded(keys))
    audit = Recorded(keys)
    keys.rotate(NOW + 60, execution_window=WINDOW, audit=audit)
    assert keys.active_signer().keyid == staged.kid
    assert audit.events[0]["retired"] == [] and audit.events[0]["staged"] is True
    assert {r.kid: r.status for r in keys.records()}[first.kid] is KeyStatus.REVOKED


def test_stage_and_a_staged_rotate_are_recorded_before_the_manifest_changes(
    tmp_path: Path,
) -> None:
    keys = KeyDirectory(tmp_path)
    first = keys.generate(NOW)
    audit = Recorded(keys)
    generated = keys.manifest_path.read_bytes()
    staged = keys.stage(NOW + 10, audit=audit)
    after_stage = keys.manifest_path.read_bytes()
    keys.rotate(NOW + 60, execution_window=WINDOW, audit=audit)
    stage, rotate = audit.events
    assert stage == {
        "type": "checkpoint.key.staged",
        "next": staged.kid,
        "keyset_before": _digest(generated),
        "keyset_after": _digest(after_stage),
    }
    assert rotate == {
        "type": "checkpoint.key.rotated",
        "active": staged.kid,
        "staged": True,
        "retired": [first.kid],
        "not_after": NOW + 60 + WINDOW + RETIRE_SKEW,
        "keyset_before": _digest(after_stage),
        "keyset_after": _digest(keys.manifest_path.read_bytes()),
    }
    assert audit.manifest_then == [generated, after_stage]


def test_a_stage_that_cannot_be_recorded_leaves_no_key_behind(tmp_path: Path) -> None:
    keys = KeyDirectory(tmp_path)
    first = keys.generate(NOW)
    before = keys.manifest_path.read_bytes()
    with pytest.raises(OSError, match="database is down"):
        keys.stage(NOW + 10, audit=Failing())
    assert keys.manifest_path.read_bytes() == before
    assert _pems(tmp_path) == [first.file]


def test_a_rotation_landing_while_the_checkpoint_reads_its_key_is_signed_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The running checkpoint reads the manifest, then the key it names; a rotation that
    lands between the two deletes that key. The manifest changed meanwhile, so the ring
    reads it again instead of refusing the approval (no lock: see KeyRing)."""
    keys = KeyDirectory(tmp_path)
    first = keys.generate(NOW)
    ring = KeyRing(keys)
    staged = keys.stage(NOW + 10, audit=Recorded(keys))
    load = KeyDirectory._load_signer
    landed: list[str] = []

    def rotation_lands_first(self: KeyDirectory, record: Any) -> Signer:
        if not landed:
            landed.append(record.kid)
            self.rotate(NOW + 60, execution_window=WINDOW, audit=Recorded(self))
        return load(self, record)

    monkeypatch.setattr(KeyDirectory, "_load_signer", rotation_lands_first)
    assert ring.signer().keyid == staged.kid
    assert landed == [first.kid]  # it did read the old manifest first
    monkeypatch.setattr(KeyDirectory, "_load_signer", load)
    assert ring.signer().keyid == staged.kid


def test_a_manifest_left_with_no_active_key_is_refused_however_often_it_is_read(
    tmp_path: Path,
) -> None:
    keys = KeyDirectory(tmp_path)
    first = keys.generate(NOW)
    ring = KeyRing(keys)
    keys.stage(NOW + 10, audit=Recorded(keys))
    keys.revoke(first.kid, audit=Recorded(keys))
    for _ in range(3):
        with pytest.raises(ConfigError, match="0 active keys"):
            ring.signer()


def _private(path: Path) -> Any:
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    return load_pem_private_key(path.read_bytes(), password=None)


# -- key changes are recorded and serialized (review: unaudited, lost update) ---------


def test_rotate_and_revoke_are_recorded_before_the_manifest_changes(tmp_path: Path) -> None:
    keys = KeyDirectory(tmp_path)
    first = keys.generate(NOW)
    audit = Recorded(keys)
    generated = keys.manifest_path.read_bytes()
    second = keys.rotate(NOW + 60, execution_window=WINDOW, audit=audit, immediate=True)
    rotated = keys.manifest_path.read_bytes()
    keys.revoke(first.kid, audit=audit)
    rotate, revoke = audit.events
    assert rotate == {
        "type": "checkpoint.key.rotated",
        "active": second.kid,
        "staged": False,
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
        keys.rotate(NOW + 60, execution_window=WINDOW, audit=Failing(), immediate=True)
    with pytest.raises(OSError, match="database is down"):
        keys.revoke(first.kid, audit=Failing())
    with pytest.raises(OSError, match="database is down"):
        keys.stage(NOW + 60, audit=Failing())
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
