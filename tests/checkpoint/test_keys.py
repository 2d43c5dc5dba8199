"""Key directory: 0600 or refuse; rotation keeps old approvals verifiable; revoke kills them."""

from __future__ import annotations

import os
from pathlib import Path

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
from services.checkpoint.errors import ConfigError
from services.checkpoint.keys import KeyDirectory
from services.checkpoint.signer import Signer

from .builders import action

NOW = 1_764_400_000
BINDING = Binding("airlock-executor/test", "alibaba", "5123456789012345", "ap-southeast-1")


def _bundle(signer: Signer, nonce: str) -> bytes:
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
            "issued_at": NOW,
            "not_before": NOW,
            "expires_at": NOW + 900,
            "approvers": [{"id": "alice", "at": NOW}],
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
    new_record = keys.rotate(NOW + 10)
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
    keys.rotate(NOW + 10)
    keys.revoke(old.keyid)
    with pytest.raises(Refused) as caught:
        verify_bundle(bundle, _exported(keys), BINDING, NOW + 60)
    assert caught.value.code is RefusalCode.E_KEY_REVOKED


def test_revoking_the_active_key_leaves_nothing_to_sign_with(tmp_path: Path) -> None:
    keys = KeyDirectory(tmp_path)
    record = keys.generate(NOW)
    keys.revoke(record.kid)
    with pytest.raises(ConfigError, match="0 active keys"):
        keys.active_signer()
    keys.rotate(NOW + 1)
    assert keys.active_signer().keyid != record.kid


def test_manifest_naming_a_foreign_kid_is_refused(tmp_path: Path) -> None:
    keys = KeyDirectory(tmp_path)
    record = keys.generate(NOW)
    text = keys.manifest_path.read_text().replace(record.kid, "ed25519:" + "0" * 32)
    keys.manifest_path.write_text(text)
    with pytest.raises(ConfigError, match="malformed"):
        keys.records()
