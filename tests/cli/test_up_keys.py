"""`airlock up` follows the checkpoint's key set: a stage, rotate or revoke while it runs
reaches the executor's trusted key file, whole, without a restart (the stack itself is
in test_up.py; this is the part that decides what is written, and when)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from airlock.cli._keys import public_keyset_text
from airlock.cli._stack import TrustedKeysExport, UpError
from airlock.protocol import KeyStatus
from services.checkpoint.keys import KeyDirectory
from services.executor import TrustedKeysFile

NOW = 1_764_400_000


class _Unrecorded:
    """The audit port, for a key directory no checkpoint serves (tests only)."""

    def record(self, event: Mapping[str, Any]) -> None:
        del event


@pytest.fixture
def private_umask() -> Iterator[None]:
    previous = os.umask(0o077)  # what `up` runs with
    try:
        yield
    finally:
        os.umask(previous)


@pytest.fixture
def keys(tmp_path: Path) -> KeyDirectory:
    directory = KeyDirectory(tmp_path / "keys")
    directory.generate(NOW)
    return directory


def _export(keys: KeyDirectory, tmp_path: Path) -> TrustedKeysExport:
    return TrustedKeysExport(keys.path, tmp_path / "trusted-keys.json")


def test_a_key_change_under_up_reaches_the_executor_s_file_at_its_next_look(
    keys: KeyDirectory, tmp_path: Path, private_umask: None
) -> None:
    export = _export(keys, tmp_path)
    assert export.sync() is None  # the start's export says nothing
    executor = TrustedKeysFile(export.out)
    [active] = executor.current().keys
    staged = keys.stage(NOW + 1, audit=_Unrecorded())
    said = export.follow()
    assert said is not None and "1 active, 1 staged" in said and str(export.out) in said
    assert export.out.read_text() == public_keyset_text(keys.path)
    trusted = executor.current().keys  # the executor re-reads the changed file
    assert trusted[staged.kid].status is KeyStatus.NEXT and active in trusted
    assert export.out.stat().st_mode & 0o777 == 0o600
    keys.rotate(NOW + 2, execution_window=900, audit=_Unrecorded())
    said = export.follow()
    assert said is not None and "1 active, 1 retired" in said
    assert executor.current().keys[staged.kid].status is KeyStatus.ACTIVE
    assert executor.current().keys[active].not_after == NOW + 2 + 900 + 30
    keys.revoke(active, audit=_Unrecorded())
    assert "1 revoked" in (export.follow() or "")
    assert executor.current().keys[active].status is KeyStatus.REVOKED


def test_the_executor_s_file_is_replaced_whole_never_written_in_place(
    keys: KeyDirectory, tmp_path: Path
) -> None:
    export = _export(keys, tmp_path)
    export.sync()
    before = export.out.stat().st_ino
    keys.stage(NOW + 1, audit=_Unrecorded())
    assert export.follow() is not None
    # A new file renamed over the old one: a reader holds one version or the other.
    assert export.out.stat().st_ino != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keys", "trusted-keys.json"]


def test_an_unchanged_key_set_is_not_written_again(keys: KeyDirectory, tmp_path: Path) -> None:
    """The executor records each key set it takes in its audit chain: nothing to record
    when nothing changed, even when the manifest was rewritten with the same keys."""
    export = _export(keys, tmp_path)
    export.sync()
    written = export.out.stat()
    assert export.follow() is None
    same = keys.manifest_path.read_bytes()
    tmp = keys.path / ".same"
    tmp.write_bytes(same)
    os.replace(tmp, keys.manifest_path)  # a new inode, the same key set
    assert export.follow() is None
    assert export.out.stat().st_ino == written.st_ino
    assert export.out.stat().st_mtime_ns == written.st_mtime_ns


@pytest.mark.parametrize("breakage", ["fields missing", "a key listed twice"])
def test_a_manifest_broken_under_up_leaves_the_executor_its_key_set_and_is_told_once(
    keys: KeyDirectory, tmp_path: Path, breakage: str
) -> None:
    export = _export(keys, tmp_path)
    export.sync()
    kept = export.out.read_bytes()
    good = keys.manifest_path.read_bytes()
    broken = keys.path / ".broken"
    if breakage == "fields missing":
        broken.write_text('{"keys": [{"kid": "ed25519:nothing"}]}')
    else:  # each entry well formed: the key set, not the entry, refuses it (KeySetError)
        manifest = json.loads(good)
        broken.write_text(json.dumps({**manifest, "keys": manifest["keys"] * 2}))
    os.replace(broken, keys.manifest_path)
    said = export.follow()
    assert said is not None and said.startswith("up: warning:")
    assert "the executor keeps the key set it has" in said
    assert export.out.read_bytes() == kept
    assert export.follow() is None  # told once
    fixed = keys.path / ".fixed"
    fixed.write_bytes(good)
    os.replace(fixed, keys.manifest_path)
    assert export.follow() is None  # the same key set as exported: nothing to write
    keys.stage(NOW + 1, audit=_Unrecorded())
    assert export.follow() is not None
    assert json.loads(export.out.read_text()) == json.loads(public_keyset_text(keys.path))


def test_a_key_set_that_cannot_be_exported_at_start_stops_up(tmp_path: Path) -> None:
    export = TrustedKeysExport(tmp_path / "keys", tmp_path / "trusted-keys.json")
    with pytest.raises(UpError, match="could not be exported"):
        export.sync()
    assert not export.out.exists()
