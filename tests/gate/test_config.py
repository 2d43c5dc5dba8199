"""The gate's settings, receipt key and crash switch refuse what is not safe to run with."""

from __future__ import annotations

from pathlib import Path

import pytest

from airlock.gate import ConfigError, Gate, GateConfig, generate_receipt_key
from airlock.gate._failpoints import Failpoints

from .support import FakeCheckpoint, gate_files

_REQUIRED = {
    "AIRLOCK_GATE_CHECKPOINT_URL": "https://checkpoint.example",
    "AIRLOCK_GATE_TOKEN": "t0ken",
    "AIRLOCK_GATE_KEYS": "keys.json",
    "AIRLOCK_GATE_AUDIENCE": "airlock-gate/payments",
}


def test_the_environment_gives_every_setting_and_its_defaults() -> None:
    config = GateConfig.from_env(_REQUIRED)
    assert config.ledger_url == "sqlite:///.airlock/gate.db"
    assert config.receipt_key == Path(".airlock/gate-receipt.pem")
    assert config.proposed_by == "airlock-gate/payments"
    assert config.ca_file is None
    assert config.lease_seconds == 60
    assert "t0ken" not in repr(config)


@pytest.mark.parametrize("missing", sorted(_REQUIRED))
def test_a_missing_required_setting_is_named(missing: str) -> None:
    environ = {k: v for k, v in _REQUIRED.items() if k != missing}
    with pytest.raises(ConfigError, match=missing):
        GateConfig.from_env(environ)


def test_crash_failpoints_outside_dev_are_refused() -> None:
    with pytest.raises(ConfigError, match="AIRLOCK_ENV"):
        Failpoints.from_env({"AIRLOCK_GATE_FAILPOINTS": "after_call"})
    with pytest.raises(ConfigError, match="unknown"):
        Failpoints.from_env({"AIRLOCK_GATE_FAILPOINTS": "nowhere", "AIRLOCK_ENV": "dev"})


def test_a_receipt_key_others_can_read_is_refused(tmp_path: Path, sqlite_url: str) -> None:
    config = gate_files(tmp_path, checkpoint_url="http://checkpoint.test", ledger_url=sqlite_url)
    config.receipt_key.chmod(0o644)
    with pytest.raises(ConfigError, match="0644"):
        Gate(config, http=FakeCheckpoint().client())


def test_a_receipt_key_is_never_overwritten(tmp_path: Path) -> None:
    generate_receipt_key(tmp_path / "k.pem")
    with pytest.raises(FileExistsError):
        generate_receipt_key(tmp_path / "k.pem")


def test_an_unreadable_key_set_is_refused(tmp_path: Path, sqlite_url: str) -> None:
    config = gate_files(tmp_path, checkpoint_url="http://checkpoint.test", ledger_url=sqlite_url)
    config.keys.write_text('{"keys": [], "keys": []}')
    with pytest.raises(ConfigError, match="key set"):
        Gate(config, http=FakeCheckpoint().client())
