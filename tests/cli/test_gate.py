"""``airlock gate``: pinning the checkpoint's keys, the gate's receipt key, and the
operator's view of a gate's ledger (status, recover, resolve).

The keys commands talk to a real checkpoint served on loopback (tests/cli/conftest.py);
the ledger commands run on a gate's ledger that a real guarded call left behind.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

from airlock.protocol import KeySet, canonical_bytes

from .conftest import Served, airlock, dead_url


def _published(served: Served) -> KeySet:
    return served.world.checkpoint.keys.public_keyset()


def test_fetch_pins_the_checkpoints_key_set(served: Served, tmp_path: Path) -> None:
    out = tmp_path / "pinned.json"
    result = airlock("gate", "keys", "fetch", "--checkpoint", served.url, "--out", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == canonical_bytes(_published(served).to_value())
    for kid in _published(served):
        assert kid in result.output


def test_fetch_reads_the_gate_settings(served: Served, tmp_path: Path) -> None:
    out = tmp_path / "from-env.json"
    env = {"AIRLOCK_GATE_CHECKPOINT_URL": served.url, "AIRLOCK_GATE_KEYS": str(out)}
    result = airlock("gate", "keys", "fetch", env=env)
    assert result.exit_code == 0, result.output
    assert KeySet.from_json_bytes(out.read_bytes()).keys() == _published(served).keys()


def test_a_key_set_without_the_expected_key_is_refused(served: Served, tmp_path: Path) -> None:
    out = tmp_path / "pinned.json"
    expected = "ed25519:" + "0" * 64
    result = airlock(
        "gate", "keys", "fetch", "--checkpoint", served.url, "--out", str(out), "--expect", expected
    )
    assert result.exit_code == 1
    assert "E_KEY_MISMATCH" in result.output
    assert not out.exists()


def test_a_pinned_set_is_never_replaced_silently(served: Served, tmp_path: Path) -> None:
    out = tmp_path / "pinned.json"
    out.write_bytes(b'{"keys": []}')
    result = airlock("gate", "keys", "fetch", "--checkpoint", served.url, "--out", str(out))
    assert result.exit_code == 1
    assert "E_PINNED" in result.output
    assert out.read_bytes() == b'{"keys": []}'
    again = airlock(
        "gate", "keys", "fetch", "--checkpoint", served.url, "--out", str(out), "--replace"
    )
    assert again.exit_code == 0, again.output
    assert out.read_bytes() == canonical_bytes(_published(served).to_value())


def test_an_unreachable_checkpoint_is_one_line_with_a_code(tmp_path: Path) -> None:
    out = tmp_path / "pinned.json"
    result = airlock("gate", "keys", "fetch", "--checkpoint", dead_url(), "--out", str(out))
    assert result.exit_code == 1
    assert result.output.startswith("error: E_UNAVAILABLE")
    assert len(result.output.strip().splitlines()) == 1
    assert not out.exists()


def test_init_creates_a_private_key_and_keeps_it(tmp_path: Path) -> None:
    key = tmp_path / "state" / "gate-receipt.pem"
    first = airlock("gate", "keys", "init", "--out", str(key))
    assert first.exit_code == 0, first.output
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    pem = key.read_bytes()
    second = airlock("gate", "keys", "init", "--out", str(key))
    assert second.exit_code == 0, second.output
    assert "kept" in second.output
    assert key.read_bytes() == pem


def test_init_registers_the_public_key_under_its_audience(tmp_path: Path) -> None:
    register = tmp_path / "gate-keys.json"
    register.write_text(json.dumps({"other": {"keys": []}}))
    for n in (1, 2):
        result = airlock(
            "gate", "keys", "init", "--out", str(tmp_path / f"k{n}.pem"),
            "--register", str(register), "--audience", "refunds",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
    again = airlock(
        "gate", "keys", "init", "--out", str(tmp_path / "k1.pem"),
        "--register", str(register), "--audience", "refunds",
    )  # fmt: skip
    assert again.exit_code == 0, again.output
    value = json.loads(register.read_text())
    assert value["other"] == {"keys": []}
    refunds = KeySet.from_value(value["refunds"])
    assert len(refunds) == 2  # both gates' keys, the first not added twice


def test_register_without_an_audience_is_refused(tmp_path: Path) -> None:
    register = tmp_path / "gate-keys.json"
    result = airlock(
        "gate", "keys", "init", "--out", str(tmp_path / "k.pem"), "--register", str(register)
    )
    assert result.exit_code == 1
    assert "E_CONFIG" in result.output
    assert not register.exists()


def test_init_prints_the_public_key_set_for_verifiers(tmp_path: Path) -> None:
    result = airlock("gate", "keys", "init", "--out", str(tmp_path / "k.pem"), "--public", "-")
    assert result.exit_code == 0, result.output
    first_line = result.stdout.splitlines()[0]
    assert len(KeySet.from_json_bytes(first_line.encode())) == 1


def test_ledger_commands_without_settings_name_what_is_missing() -> None:
    for command in (["status"], ["recover"], ["resolve", "apv_x", "--happened"]):
        result = airlock("gate", *command)
        assert result.exit_code == 1, command
        assert "E_CONFIG: AIRLOCK_GATE_CHECKPOINT_URL is required" in result.output
